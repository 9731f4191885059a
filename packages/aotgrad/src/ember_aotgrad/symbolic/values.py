"""What the tracer asks of every value, symbolic sizes or not, without sympy:
a trace with fixed sizes imports none of the symbolic machinery."""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree


class NoShapeRule(Exception):
    """The op's output sizes cannot be written symbolically (yet)."""


def is_symbolic(value: object) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def has_symbols(args: object) -> bool:
    """Whether any tensor in ``args`` has a symbolic size or any value is symbolic."""
    for leaf in pytree.tree_leaves(args):
        parts = (leaf.start, leaf.stop, leaf.step) if isinstance(leaf, slice) else ()
        if any(is_symbolic(p) for p in parts):  # ``x[:, :n]`` with a symbolic n
            return True
        if is_symbolic(leaf):
            return True
        if isinstance(leaf, torch.Tensor) and any(
            is_symbolic(s) for s in (*leaf.shape, *leaf.stride())
        ):
            return True
    return False


def hint_of(value: object) -> object:
    """The example value of a SymInt, SymFloat or SymBool (others unchanged)."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return value.node.hint
    return value
