"""Run one aten op on tensors with symbolic sizes.

torch's meta kernels want concrete sizes, so the op runs on meta tensors of the
example sizes (for dtypes, output count and the example strides), and the op's
shape rule gives the symbolic sizes; the outputs are meta tensors with those
sizes. Each output's rule is checked against the example run.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
import torch
from torch.utils import _pytree as pytree

from ..dispatch_mode import DispatchMode
from . import views  # noqa: F401  (registers the view rules)
from .rules import Layout, NoShapeRule, rule_for
from .sym import ShapeEnv
from .values import has_symbols, hint_of


def concrete(value: object) -> object:
    """``value`` at the example sizes: a meta tensor of the hints, or a hint."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(
            [hint_of(s) for s in value.shape],
            [hint_of(s) for s in value.stride()],
            dtype=value.dtype,
            device="meta",
        )
    return hint_of(value)


def run_symbolic(env: ShapeEnv, func, args: tuple, kwargs: dict) -> object:
    """``func(*args, **kwargs)`` whose tensors have symbolic sizes; raises
    NoShapeRule when the op has no rule for them."""
    cargs, ckwargs = pytree.tree_map(concrete, (args, kwargs))
    example = func(*cargs, **ckwargs)
    try:
        layouts = rule_for(func)(env, *args, **kwargs)
        if isinstance(example, torch.Tensor):
            return _build(env, func, layouts, example)
        if _numbers(example):  # sizes read as ints (aten.size): SymInts
            return type(example)(
                _number(env, func, e, x) for e, x in zip(layouts, example)
            )
        if isinstance(layouts, Layout):
            layouts = [layouts]
        outs = []
        for k, item in enumerate(example):
            if isinstance(item, torch.Tensor):
                outs.append(_build(env, func, layouts[k], item))
            else:
                outs.append(item)
    except NoShapeRule:
        raise
    except Exception as e:  # a rule that does not cover these arguments
        raise NoShapeRule(f"the shape rule of {func} failed: {e}") from e
    return type(example)(outs) if isinstance(example, tuple) else outs


def _numbers(example: object) -> bool:
    return isinstance(example, (list, tuple)) and all(type(v) is int for v in example)


def _number(env: ShapeEnv, func, expr: sympy.Expr, example: int) -> object:
    """A rule's integer output as a SymInt, checked against the example run."""
    if env.evaluate(sympy.sympify(expr)) != example:
        raise NoShapeRule(f"the shape rule of {func} gives {expr}, not {example}")
    return env.sym_int(expr)


def _build(env: ShapeEnv, func, layout: Layout | Sequence, example: torch.Tensor):
    if not isinstance(layout, Layout):
        (layout,) = layout
    sizes = layout.sizes
    if len(sizes) != example.dim():
        raise NoShapeRule(f"the shape rule of {func} gives {len(sizes)} dims")
    st = layout.strides or dense_strides(sizes, example)
    got = [env.evaluate(sympy.sympify(e)) for e in (*sizes, *st)]
    want = [*example.shape, *example.stride()]
    # a size-1 dim's stride is free: eager and the rule may differ there
    mismatch = [
        k
        for k, (g, w) in enumerate(zip(got, want))
        if g != w and not (k >= len(sizes) and example.shape[k - len(sizes)] == 1)
    ]
    if len(got) != len(want) or mismatch:
        raise NoShapeRule(
            f"the shape rule of {func} gives {got}, the example run {want}"
        )
    return torch.empty_strided(
        [env.sym_int(s) for s in sizes],
        [env.sym_int(s) for s in st],
        dtype=example.dtype,
        device="meta",
    )


def dense_strides(sizes: Sequence[sympy.Expr], example: torch.Tensor) -> tuple:
    """Strides over ``sizes`` that are dense in the order of ``example``'s
    strides (innermost first: smallest stride, later dim on ties)."""
    order = sorted(range(len(sizes)), key=lambda d: (example.stride()[d], -d))
    out: list[sympy.Expr] = [sympy.Integer(0)] * len(sizes)
    step: sympy.Expr = sympy.Integer(1)
    for d in order:
        out[d] = step
        step = step * sizes[d]
    return tuple(out)


def symbolic_tensor(
    env: ShapeEnv, value: torch.Tensor, dims: dict[int, str]
) -> torch.Tensor:
    """A meta tensor like ``value`` whose dims in ``dims`` have the new symbol
    of that name as their size (strides follow, dense in ``value``'s order).
    Raises NoShapeRule for a tensor that is not dense (its strides stay fixed)."""
    sizes = [sympy.Integer(s) for s in value.shape]
    for d, name in dims.items():
        sizes[d] = env.symbol(name, value.shape[d])
    st = dense_strides(sizes, value)
    if [env.evaluate(s) for s in st] != list(value.stride()):
        raise NoShapeRule("a tensor that is not dense keeps its sizes")
    meta = torch.empty_strided(
        [env.sym_int(s) for s in sizes],
        [env.sym_int(s) for s in st],
        dtype=value.dtype,
        device="meta",
    )
    return meta.requires_grad_(value.requires_grad)


class SymbolicMode(DispatchMode):
    """Runs every aten op on tensors with symbolic sizes through its shape
    rule (for callers that run torch-level code on such tensors, as capture
    does); ops on tensors of fixed sizes run as they are."""

    def __init__(self, env: ShapeEnv) -> None:
        super().__init__()
        self.env = env

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if has_symbols((args, kwargs)):
            return run_symbolic(self.env, func, args, kwargs)
        return func(*args, **kwargs)
