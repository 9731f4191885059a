"""What a capture returns: the graphs, the guards and the transformed function."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch.fx

from . import transform
from .checks import CellView
from .errors import CaptureError
from .guards import GuardChecker, GuardSet
from .source import Source

# Closure cells of the transformed function, besides graphs and constants.
HOOK_CELL = "__ember_hook"  # wraps the functions that run after a graph break
RESUME_CELL = "__ember_resume"  # + index: the resume functions


@dataclass(frozen=True)
class CapturedGraph:
    """One fx graph and how to feed it: inputs are read from ``input_sources``."""

    name: str
    gm: torch.fx.GraphModule
    example_inputs: list
    input_sources: tuple[Source, ...]
    location: str  # the user's file:line where the graph starts
    # Input index -> the dims whose size is a symbol (docs/dynamic.md).
    dynamic_dims: dict[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class CaptureResult:
    """Everything capture learned from one call.

    ``transformed_source`` is the readable Python of the transformed function; its
    ``code`` has the original signature and reads each compiled graph (and any
    non-literal constant) from a closure cell named in ``cell_values`` or
    ``graphs``. ``build(compiled, hook)`` binds it to the callables a backend
    returned. After a graph break, ``break_reason`` says why and ``resume_codes``
    hold the code that continues after it (see graph_break.py).
    """

    fn: types.FunctionType
    graphs: tuple[CapturedGraph, ...]
    guards: GuardSet
    code: types.CodeType
    transformed_source: str
    cell_values: dict[str, object]
    resume_codes: tuple[types.CodeType, ...] = ()
    break_reason: CaptureError | None = None
    # The meta_memo entries this capture used: a cache may keep them for later
    # processes (``ember_capture.remember_meta_results``).
    meta_results: Mapping[str, list] = field(default_factory=dict)
    # Why a capture asked for symbolic sizes fixed them all instead.
    specialized: str | None = None

    def build(
        self, compiled: Sequence[Callable], hook: Callable | None = None
    ) -> types.FunctionType:
        """The transformed function, running ``compiled[i]`` in place of graph i.

        ``hook(fn)`` returns what to call instead of ``fn`` for the functions run
        after a break: the resume functions and the call that broke (the runtime
        passes one that compiles them on their first call). Default: run as is.
        """
        if len(compiled) != len(self.graphs):
            raise ValueError(f"expected {len(self.graphs)} compiled graphs")
        hook = hook or _run_as_is
        cells = dict(self.cell_values)
        cells.update((g.name, c) for g, c in zip(self.graphs, compiled))
        cells[HOOK_CELL] = hook
        for i, code in enumerate(self.resume_codes):
            resume = types.FunctionType(
                code, self.fn.__globals__, code.co_name, None, self.fn.__closure__
            )
            cells[f"{RESUME_CELL}{i}"] = hook(resume)
        return transform.bind(self.fn, self.code, cells)

    def guard_checker(self) -> GuardChecker:
        """The compiled check of the guards for this function object."""
        cells = CellView(self.fn.__code__.co_freevars, self.fn.__closure__)
        return self.guards.compile(self.fn.__globals__, cells)


def _run_as_is(fn: Callable) -> Callable:
    return fn
