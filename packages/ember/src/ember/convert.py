"""Wiring of the stages for one function: capture, then the backend per graph.

``make_convert`` builds the ``convert(args, kwargs) -> Entry`` callable that the
runtime's Dispatcher calls on a guard miss. Only this module and backends.py import
more than one stage.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass

import ember_capture
from ember_runtime import Entry, GuardedEntry

from .backends import Backend, CompileLog
from .logs import warn_user


@dataclass(frozen=True)
class BreakReason:
    """Why (part of) a function did not go into a graph, and where."""

    reason: str
    location: str  # the user's file:line

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}"


def make_convert(
    fn: types.FunctionType,
    backend: Backend,
    *,
    fullgraph: bool,
    log: CompileLog,
    breaks: list[BreakReason],
    hook: Callable[[Callable], Callable],
) -> Callable[[tuple, dict], Entry | None]:
    """The Dispatcher's ``convert`` for ``fn``: capture, compile each graph with
    ``backend``, and build the transformed function (``hook`` compiles what runs
    after a graph break). None when capture cannot handle ``fn`` at all."""

    def convert(args: tuple, kwargs: dict) -> Entry | None:
        try:
            result = ember_capture.capture(fn, *args, **kwargs)
        except ember_capture.CaptureError as e:
            if fullgraph:
                raise
            breaks.append(BreakReason(e.reason, e.location))
            warn_user(f"ember: {fn.__qualname__} runs eagerly: {e}")
            return None
        if result.break_reason is not None:
            if fullgraph:
                raise result.break_reason
            reason = result.break_reason
            breaks.append(BreakReason(reason.reason, reason.location))
        compiled = []
        for graph in result.graphs:
            log.graphs.append(graph.gm)
            compiled.append(backend(graph.gm, graph.example_inputs))
        checker = result.guard_checker()
        run = result.build(compiled, hook)
        return GuardedEntry(checker.check, checker.failure, run)

    return convert
