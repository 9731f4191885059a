"""Wiring of the stages for one function: capture, then the backend per graph.

``make_convert`` builds the ``convert(args, kwargs) -> Entry`` callable that the
runtime's Dispatcher calls on a guard miss. Only this module and backends.py import
more than one stage.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass

import torch

import ember_capture
from ember_runtime import (
    Counters,
    Entry,
    Fallback,
    GuardCheck,
    GuardedEntry,
    GuardSpec,
    TensorCheck,
    compile_guards,
)

from .backends import Backend, CompileLog
from .cache import MetaResultsCache
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
    counters: Counters,
    meta_cache: MetaResultsCache | None = None,
) -> Callable[[tuple, dict], Entry | Fallback]:
    """The Dispatcher's ``convert`` for ``fn``: capture, compile each graph with
    ``backend``, and build the transformed function (``hook`` compiles what runs
    after a graph break). When capture cannot handle ``fn`` at all, a Fallback
    runs ``fn`` as Python, for every call no earlier entry matches, with its
    calls of user code routed through ``hook`` (``ember_capture.route_calls``).
    ``meta_cache`` keeps the meta-kernel results capture used across processes."""

    def convert(args: tuple, kwargs: dict) -> Entry | Fallback:
        # Compiling may draw from torch's generators (a stage that runs an op on
        # real tensors); the user's seeded stream must not see it.
        with torch.random.fork_rng(devices=_rng_devices()):
            return _convert(args, kwargs)

    def _convert(args: tuple, kwargs: dict) -> Entry | Fallback:
        try:
            with counters.timed("capture"):
                if meta_cache is not None:
                    meta_cache.load(fn)
                result = ember_capture.capture(fn, *args, **kwargs)
        except ember_capture.CaptureError as e:
            if fullgraph:
                raise
            _note_break(breaks, BreakReason(e.reason, e.location))
            name = ember_capture.user_function_name(fn.__code__)
            warn_user(f"ember: {name} runs eagerly: {e}")
            # From now on a call no compiled entry matches runs fn as Python
            # (it is not captured again, even for inputs capture could take),
            # but the user code it calls goes through the hook and is compiled
            # on its own.
            return Fallback(ember_capture.route_calls(fn, hook))
        if result.break_reason is not None:
            if fullgraph:
                raise result.break_reason
            reason = result.break_reason
            _note_break(breaks, BreakReason(reason.reason, reason.location))
        if meta_cache is not None:
            meta_cache.save(fn, result.meta_results)
        compiled = []
        for graph in result.graphs:
            log.graphs.append(graph.gm)
            with counters.timed("backend"):
                compiled.append(backend(graph.gm, graph.example_inputs))
        guards = guard_check(result)
        run = result.build(compiled, hook)
        return GuardedEntry(guards.check, guards.failure, run)

    return convert


def _note_break(breaks: list[BreakReason], reason: BreakReason) -> None:
    """A break is one place in the user's code: a recompile that meets it again
    does not count it again."""
    if reason not in breaks:
        breaks.append(reason)


def _rng_devices() -> list[int]:
    """The CUDA devices whose generators a compile could touch (none until CUDA
    is initialized, so a CPU-only process never starts it)."""
    if not torch.cuda.is_initialized():
        return []
    return list(range(torch.cuda.device_count()))


def guard_check(result: ember_capture.CaptureResult) -> GuardCheck:
    """The runtime's fast check for a capture's guards: tensor guards become
    TensorChecks (C++ when built), the rest stays one compiled Python check."""
    fn = result.fn
    cells = ember_capture.CellView(fn.__code__.co_freevars, fn.__closure__)
    kinds = ember_capture.GuardKind
    tensor_guards = [g for g in result.guards if g.kind is kinds.TENSOR_MATCH]
    rest = ember_capture.GuardSet(
        g for g in result.guards if g.kind is not kinds.TENSOR_MATCH
    )
    checks = tuple(
        TensorCheck(
            g.source.name(),
            s.type,
            s.dtype,
            s.device,
            s.shape,
            s.stride,
            s.requires_grad,
        )
        for g in tensor_guards
        for s in [g.expected]
    )
    # A tuple display evaluates left to right: shared parts are read once.
    shared = ember_capture.SharedReads(g.source for g in tensor_guards)
    reads = "".join(f"{shared.expr(g.source)}, " for g in tensor_guards)
    read = eval(f"lambda L: ({reads})", {"G": fn.__globals__, "C": cells})
    other = rest.compile(fn.__globals__, cells) if len(rest) else None
    spec = GuardSpec(
        checks,
        read,
        other.check if other else None,
        other.failure if other else None,
    )
    return compile_guards(spec)
