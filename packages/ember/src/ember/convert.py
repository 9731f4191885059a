"""Wiring of the stages for one function: capture, then the backend per graph.

``make_convert`` builds the ``convert(args, kwargs) -> Entry`` callable that the
runtime's Dispatcher calls on a guard miss. Only this module and backends.py import
more than one stage.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

import ember_aotgrad
import ember_capture
from ember_codegen.locations import graph_locations
from ember_runtime import (
    Counters,
    Entry,
    Fallback,
    GuardedEntry,
)

from .backends import Backend, CompileLog, CompileRecord
from .cache import MetaResultsCache
from .distributed import active_ddp
from .dynamic import SHAPES, DynamicPolicy, has_size_marks
from .guard_checks import SplitGuards, guard_check, split_guards
from .logs import warn_user
from .progress import stage, watched
from .saved_entries import NotSaved, SavedEntries, saved_entry, saved_graph

break_log = logging.getLogger("ember.graph_breaks")
guard_log = logging.getLogger("ember.guards")
perf = logging.getLogger("ember.perf")


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for one compile, then one
    collection of the objects made meanwhile.

    A compile makes many objects, and each full collection it would set off
    walks every object alive, torch's hundreds of thousands among them (about
    90 ms here, most of a warm start's first call). Paused, the compile's own
    garbage is collected once at the end by a young-generation collection,
    which never walks the old objects. A nested compile leaves it to the
    outer one."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.collect(1)
        gc.enable()


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
    dynamic: DynamicPolicy | None = None,
    saved: SavedEntries | None = None,
) -> Callable[[tuple, dict], Entry | Fallback]:
    """The Dispatcher's ``convert`` for ``fn``: capture, compile each graph with
    ``backend``, and build the transformed function (``hook`` compiles what runs
    after a graph break). When capture cannot handle ``fn`` at all, a Fallback
    runs ``fn`` as Python, for every call no earlier entry matches, with its
    calls of user code routed through ``hook`` (``ember_capture.route_calls``).
    ``meta_cache`` keeps the meta-kernel results capture used across processes;
    ``dynamic`` says which input dims get symbolic sizes (docs/dynamic.md);
    ``saved`` keeps entries for later processes, and serves the first calls
    of this one from those earlier ones saved (saved_entries.py)."""
    policy = dynamic or DynamicPolicy(False)
    name = function_name(fn)

    def convert(args: tuple, kwargs: dict) -> Entry | Fallback:
        # Compiling may draw from torch's generators (a stage that runs an op on
        # real tensors); the user's seeded stream must not see it.
        _guards.clear()  # a compile that ends without an entry has none
        seconds, builds = dict(counters.compile_seconds), _build_seconds()
        results, started, clock = (
            len(log.cache_results),
            time.time(),
            time.perf_counter(),
        )
        with (
            torch.random.fork_rng(devices=_rng_devices()),
            watched(name),
            collector_paused(),
        ):
            entry = _convert(args, kwargs)
        total = time.perf_counter() - clock
        now = counters.compile_seconds
        spent = {
            stage: now[stage] - seconds.get(stage, 0.0)
            for stage in sorted(now, key=lambda k: _STAGE_ORDER.get(k, 99))
            if now[stage] > seconds.get(stage, 0.0)
        }
        if _build_seconds() > builds:  # inside codegen: listed after it
            spent = dict(
                _after(spent, "codegen", "c++ build", _build_seconds() - builds)
            )
        record = CompileRecord(
            name,
            started,
            total,
            spent,
            tuple(log.cache_results[results:]),
            tuple(_guards),
        )
        log.compiles.append(record)
        perf.info("%s", record)
        return entry

    def _convert(args: tuple, kwargs: dict) -> Entry | Fallback:
        for _ in range(_MAX_RECAPTURES):
            entry = _convert_once(args, kwargs)
            if entry is not None:
                return entry
        # each try fixed more sizes; should that ever not end, fix them all
        policy.disable(f"{_MAX_RECAPTURES} captures each had to fix more sizes")
        return _convert_once(args, kwargs)

    def _convert_once(args: tuple, kwargs: dict) -> Entry | Fallback | None:
        """The entry, or None when symbolic sizes had to be given up: the
        caller captures again with every size fixed."""
        if ember_capture.never_captured(fn):  # ember.disable: as it is, quietly
            return Fallback(fn)
        saving = saved is not None and active_ddp() is None
        # sizes marked on an argument: capture decides what they make symbolic
        if saving and not has_size_marks((args, kwargs)):
            with stage(counters, "saved_entry"):
                rebuilt = saved.rebuild(fn, args, kwargs, policy.mode)
            if rebuilt is not None:
                policy.recall()
                for graph in rebuilt.graphs:
                    log.add_graph(graph, frame_key(fn.__code__, fn.__module__, fn))
                _guards[:] = rebuilt.saved.guards
                _log_guards(name, "a saved entry")
                return rebuilt.entry
        symbolic = (
            policy.active
            and getattr(backend, "handles_symbolic_sizes", False)
            and active_ddp() is None
        )
        try:
            with stage(counters, "capture"):
                if meta_cache is not None:
                    meta_cache.load(fn)
                result = ember_capture.capture_call(
                    fn,
                    args,
                    kwargs,
                    shapes=SHAPES if symbolic else None,
                    dynamic_dims=policy.dims if symbolic else None,
                    meta_mode=_meta_rules,
                )
        except ember_capture.CaptureError as e:
            if fullgraph:
                raise
            _note_break(breaks, BreakReason(e.reason, e.location), name)
            who = ember_capture.user_function_name(fn.__code__)
            warn_user(f"ember: {who} runs eagerly: {e}")
            # From now on a call no compiled entry matches runs fn as Python
            # (it is not captured again, even for inputs capture could take),
            # but the user code it calls goes through the hook and is compiled
            # on its own.
            return Fallback(ember_capture.route_calls(fn, hook))
        if result.break_reason is not None:
            if fullgraph:
                raise result.break_reason
            reason = result.break_reason
            _note_break(breaks, BreakReason(reason.reason, reason.location), name)
        if result.specialized is not None:
            policy.disable(result.specialized)
        if meta_cache is not None:
            meta_cache.save(fn, result.meta_results)
        compiled = []
        for graph in result.graphs:
            log.add_graph(graph.gm, frame_key(fn.__code__, fn.__module__, fn))
            with stage(counters, "backend"):
                compiled.append(backend(graph.gm, graph.example_inputs))
            if graph.dynamic_dims:
                specialized = getattr(compiled[-1], "specialized", None)
                if specialized is not None:
                    policy.disable(specialized)
                    return None
                dynamic = getattr(compiled[-1], "dynamic", None)
                if _fix_pinned(policy, graph, dynamic):
                    return None  # captured again with those sizes fixed
                _add_size_guards(result, graph, dynamic)
        _guards[:] = [str(g) for g in result.guards]
        _log_guards(name, "the new entry")
        split = split_guards(result)
        guards = guard_check(result.fn, split)
        run = result.build(compiled, hook)
        if saving:
            with stage(counters, "saved_entry"):
                _save(saved, result, split, policy.mode)
        return GuardedEntry(guards.check, guards.failure, run, split.symbolic)

    def _log_guards(name: str, what: str) -> None:
        if guard_log.isEnabledFor(logging.INFO):
            lines = "".join(f"\n  {g}" for g in _guards)
            guard_log.info("guards of %s's %s:%s", name, what, lines)

    _guards: list[str] = []  # those of the latest capture, for its record
    return convert


def _save(
    saved: SavedEntries,
    result: ember_capture.CaptureResult,
    split: SplitGuards,
    dynamic: object,
) -> None:
    """Keeps the entry made from ``result`` for later processes, when it can be
    named there (why not goes to the ``ember.perf`` log)."""
    try:
        graphs = tuple(
            saved_graph(saved.backend, g.name, g.gm, graph_locations(g.gm))
            for g in result.graphs
        )
        saved.save(result.fn, saved_entry(result, split, graphs), dynamic)
    except NotSaved as e:
        perf.info("%s: its entry is not saved: %s", function_name(result.fn), e)
    except Exception as e:  # saving is an optimization: it never fails a compile
        why = f"{type(e).__name__}: {e}"
        perf.info("%s: its entry is not saved: %s", function_name(result.fn), why)


# The order stages are listed in (a compile runs them in this order).
_STAGE_ORDER = {
    name: i
    for i, name in enumerate(
        [
            "saved_entry",
            "capture",
            "backend",
            "cache_key",
            "cache_load",
            "aotgrad",
            "codegen",
            "cache_store",
        ]
    )
}


# Captures of one call (each with more sizes fixed) before all are fixed.
_MAX_RECAPTURES = 8


def _after(items: dict, key: str, new_key: str, value: float):
    """``items`` with ``new_key: value`` right after ``key`` (else last)."""
    done = False
    for k, v in items.items():
        yield k, v
        if k == key:
            yield new_key, value
            done = True
    if not done:
        yield new_key, value


def function_name(fn: types.FunctionType) -> str:
    """``qualname (file:line)``: how logs and reports name a compiled function
    (a resume function by the user's function and the line it continues from)."""
    code = fn.__code__
    name = ember_capture.user_function_name(code)
    return f"{name} ({code.co_filename}:{code.co_firstlineno})"


def frame_key(
    code: types.CodeType, module: str | None, fn: types.FunctionType | None = None
) -> str:
    """``qualname (module)``: the Python function a tensor op ran in, for
    explain's count per function. The functions ember writes (transformed,
    resume functions) count as the user's function they continue, and a
    decorator's wrapper (``fn``, made with functools.wraps) as the function
    it wraps."""
    name = ember_capture.user_function_name(code).split(" (from line")[0]
    if fn is not None and name == code.co_qualname:
        name = fn.__qualname__
    return f"{name} ({module})"


def _build_seconds() -> float:
    """Seconds spent in the C++ compiler so far (0 before codegen is loaded)."""
    build = sys.modules.get("ember_codegen.render.cpp.build")
    return build.build_seconds() if build is not None else 0.0


def _fix_pinned(policy: DynamicPolicy, graph, dynamic) -> bool:
    """Whether the backend's trace needed some symbolic sizes as numbers
    (aotgrad's ``Dynamic.pinned``): those dims stay fixed from now on. An
    entry with a symbol only one size passes would be stored under a key that
    serves every size, and found again for each new one."""
    pins = dynamic.pinned() if dynamic is not None else {}
    for name, value in pins.items():
        i, d = dynamic.symbols[name]
        reason = f"an op of the graph needs it as a number (it was {value})"
        policy.fix(graph.input_sources[i].name(), d, reason)
    return bool(pins)


def _add_size_guards(result, graph, dynamic) -> None:
    """The relations between sizes that the backend's trace assumed (aotgrad's
    ``CompiledAot.dynamic``), as guards on the graph's inputs."""
    if dynamic is None or not dynamic.guards:
        return
    relations = []
    for relation in dynamic.guards:
        names = {s.name for s in relation.free_symbols}
        reads = tuple(
            (name, graph.input_sources[i], d)
            for name, (i, d) in dynamic.symbols.items()
            if name in names
        )
        python = SHAPES.to_python(relation)
        relations.append(ember_capture.SizeRelation(python, str(relation), reads))
    kind = ember_capture.GuardKind.SIZES
    result.guards.add(ember_capture.Guard(kind, None, tuple(relations)))


def _note_break(breaks: list[BreakReason], reason: BreakReason, name: str) -> None:
    """A break is one place in the user's code: a recompile that meets it again
    does not count it again (nor log it again)."""
    if reason not in breaks:
        breaks.append(reason)
        break_log.info("graph break in %s at %s", name, reason)


def _rng_devices() -> list[int]:
    """The CUDA devices whose generators a compile could touch (none until CUDA
    is initialized, so a CPU-only process never starts it)."""
    if not torch.cuda.is_initialized():
        return []
    return list(range(torch.cuda.device_count()))


def _meta_rules() -> contextlib.AbstractContextManager:
    """Capture's meta runs through ember_aotgrad's meta rules: torch's meta
    kernels are slower and the first of them imports torch's compiler frontend."""
    return ember_aotgrad.MetaRulesMode()
