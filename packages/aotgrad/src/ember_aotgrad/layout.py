"""What a traced graph's outputs are to the user, and what a trace with
symbolic sizes assumed: plain data a cache stores beside the compiled code
(loading it imports neither the tracer nor sympy)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    import sympy

aten = torch.ops.aten

# Views that are the tensor itself: their inverse is the identity.
IDENTITY_VIEWS = frozenset(
    {aten.detach.default, aten.alias.default, aten.lift_fresh.default}
)


@dataclass(frozen=True, slots=True)
class ViewStep:
    """One view op applied to a tensor: ``op(t, *args, **kwargs)[index]``."""

    op: torch._ops.OpOverload
    args: tuple
    kwargs: tuple[tuple[str, Any], ...] = ()
    index: int | None = None  # which output of a multi-output view (split, unbind)

    @property
    def is_identity(self) -> bool:
        return self.op in IDENTITY_VIEWS

    def apply(self, tensor: torch.Tensor) -> torch.Tensor:
        """Replays this view on a real tensor (used for outputs aliasing inputs)."""
        out = self.op(tensor, *self.args, **dict(self.kwargs))
        return out if self.index is None else out[self.index]


@dataclass(frozen=True, slots=True)
class GraphOutput:
    """A user output that is graph output ``index``."""

    index: int


@dataclass(frozen=True, slots=True)
class InputAlias:
    """A user output that is a view of input ``input_index`` (replayed at run time)."""

    input_index: int
    chain: tuple[ViewStep, ...]


@dataclass(frozen=True, slots=True)
class ConstantOutput:
    """A user output that is not a tensor; returned as traced."""

    value: object


OutputSpec = GraphOutput | InputAlias | ConstantOutput


@dataclass(frozen=True)
class GraphLayout:
    """How a traced graph's outputs map back to the user's, without the graph
    itself (so a cache can store it next to the compiled code).

    Graph outputs are, in order: ``num_user_outputs`` user outputs, the new values
    of ``mutated_inputs``, and (joint traces) one gradient per input in
    ``grad_inputs``. Joint graphs take the flat inputs then one tangent per graph
    output listed in ``tangent_outputs``.
    """

    outputs: tuple[OutputSpec, ...]
    num_user_outputs: int
    mutated_inputs: tuple[int, ...]
    tangent_outputs: tuple[int, ...] = ()
    grad_inputs: tuple[int, ...] = ()
    output_requires_grad: tuple[bool, ...] = ()

    @property
    def num_forward_outputs(self) -> int:
        return self.num_user_outputs + len(self.mutated_inputs)


@dataclass(frozen=True, eq=False)
class Dynamic:
    """What a trace with symbolic sizes assumed: each symbol's (input, dim),
    and the relations between sizes (sympy) that must hold for the graph to
    be right; a caller checks them before running the graph on new sizes."""

    symbols: dict[str, tuple[int, int | None]]  # dim None: an integer input
    guards: tuple[sympy.Basic, ...]

    def holds(self, inputs: Sequence[object]) -> bool:
        """Whether ``inputs`` satisfy the guards (sizes 0 and 1 stay fixed)."""
        sizes = [
            inputs[i] if d is None else inputs[i].shape[d]
            for i, d in self.symbols.values()
        ]
        if min(sizes, default=2) < 2:
            return False
        return not self.guards or self._check(*sizes)

    def pinned(self) -> dict[str, int]:
        """The symbols a guard fixes to one value (``Eq(s2, 10)``: an op needed
        that size as a number, as max_pool1d's kernel does): the graph serves
        that size only, so a caller had better make the dim static."""
        import sympy  # (the guards are sympy's: it is loaded already)

        pins = {}
        for relation in self.guards:
            if getattr(relation, "rel_op", None) != "==":
                continue
            if len(relation.free_symbols) != 1:
                continue  # Eq(s0, s1) relates two sizes; neither is fixed
            (symbol,) = relation.free_symbols
            try:
                solutions = sympy.solve(relation, symbol)  # Eq(2*s0, 20) too
            except NotImplementedError:  # Eq(s2, 4*floor(s2/4)): divisibility
                continue
            if len(solutions) == 1 and solutions[0].is_Integer:
                pins[symbol.name] = int(solutions[0])
        return pins

    @functools.cached_property
    def _check(self) -> Callable[..., bool]:
        from .symbolic import predicate  # sympy: only for graphs with symbols

        return predicate(self.guards, list(self.symbols))
