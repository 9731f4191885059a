"""The named backends and how a backend argument is resolved.

A backend is ``backend(gm, example_inputs) -> callable`` (the capture contract).
The built-in ones are made per compiled function from the Config, report what they
did (graphs compiled, ops left to torch, graphs run eagerly, disk-cache results)
into a CompileLog and time their stages into the function's Counters. "aot_eager"
and "ember" look each graph up in the on-disk graph cache (cache.py) first.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch.fx

import ember_aotgrad
import ember_codegen
from ember_codegen.locations import graph_locations, replace_locations
from ember_runtime import Counters, Dispatcher

from .cache import (
    CachedGraph,
    EntryKind,
    GraphCache,
    Uncacheable,
    graph_key,
    trusted_cache,
)
from .config import Config
from .logs import warn_user
from .progress import current, stage

Backend = Callable[[torch.fx.GraphModule, list], Callable]
Compiler = Callable[[torch.fx.GraphModule, list], Callable]
# A warning compiling gave: (reason for eager_graph_reasons, message), kept in the
# cache entry so that a later hit reports it again.
Note = tuple[str, str]


@dataclass
class CompileLog:
    """What happened while compiling, for explain() and the tests."""

    # The captured graphs; one a saved entry holds is rebuilt when first
    # asked for (``graph_modules``).
    graphs: list[torch.fx.GraphModule | Callable] = field(default_factory=list)
    # Per graph, the function it was captured from (convert.frame_key).
    graph_frames: list[str] = field(default_factory=list)
    fallback_ops: set[str] = field(default_factory=set)
    generated_code: list[str] = field(default_factory=list)
    eager_graph_reasons: list[str] = field(default_factory=list)
    # Per graph the "aot_eager"/"ember" backends saw: "hit" (loaded from the disk
    # cache), "miss" (compiled and stored), "miss, not stored: why" or
    # "not cached: why" (compiled without a lookup).
    cache_results: list[str] = field(default_factory=list)
    # Per graph compiled inside a DDP forward and split at its buckets: the
    # number of pieces (distributed.py).
    bucket_pieces: list[int] = field(default_factory=list)
    # Which input dims became symbolic and why, and why sizes stayed fixed
    # (dynamic.py).
    dynamic_reasons: list[str] = field(default_factory=list)
    # One per convert, in order (convert.py).
    compiles: list[CompileRecord] = field(default_factory=list)
    # The dispatcher of each function compiled with this log (the function,
    # its resume functions, callees compiled after a break), for their
    # recompile reasons.
    dispatchers: list[Dispatcher] = field(default_factory=list)

    def add_graph(self, gm: torch.fx.GraphModule | Callable, frame: str) -> None:
        """``gm``, or an object whose ``load()`` gives it, captured in ``frame``."""
        self.graphs.append(gm)
        self.graph_frames.append(frame)

    def graph_modules(self) -> list[torch.fx.GraphModule]:
        """Every captured graph as a GraphModule."""
        self.graphs[:] = [
            g if isinstance(g, torch.fx.GraphModule) else g.load() for g in self.graphs
        ]
        return list(self.graphs)


@dataclass(frozen=True)
class CompileRecord:
    """One compile of one function: when, the seconds of each stage (as in
    ``Counters.compile_seconds``, plus "c++ build" inside "codegen"), what the
    graph cache said per graph, and the new entry's guards (user expressions)."""

    function: str  # qualname (file:line)
    started: float  # time.time()
    total: float  # seconds, the whole compile
    seconds: dict[str, float]
    cache_results: tuple[str, ...]
    guards: tuple[str, ...]

    def stages(self) -> dict[str, float]:
        """Seconds per stage, each counted once: without the one that holds
        others ("backend": aotgrad, codegen and the cache's steps), and
        "codegen" without the "c++ build" inside it."""
        stages = {k: t for k, t in self.seconds.items() if k != "backend"}
        if "c++ build" in stages and "codegen" in stages:
            stages["codegen"] = max(stages["codegen"] - stages["c++ build"], 0.0)
        return stages

    def __str__(self) -> str:
        stages = ", ".join(f"{name} {t:.3f}" for name, t in self.stages().items())
        cache = f"; graph cache: {', '.join(self.cache_results)}"
        return (
            f"compiled {self.function} in {self.total:.3f} s ({stages})"
            f"{cache if self.cache_results else ''}"
        )


BACKENDS: dict[str, Callable[[Config, CompileLog, Counters], Backend]] = {}


def register_backend(name: str):
    def register(factory):
        BACKENDS[name] = factory
        return factory

    return register


@register_backend("eager")
def _eager(config: Config, log: CompileLog, counters: Counters) -> Backend:
    def backend(gm, example_inputs):
        return gm

    backend.handles_symbolic_sizes = True  # gm computes its sizes itself
    return backend


@register_backend("aot_eager")
def _aot_eager(config: Config, log: CompileLog, counters: Counters) -> Backend:
    def make_compiler(notes: list[Note], guarded: bool) -> Compiler:
        def run_with_torch(aten_gm, example_inputs):
            return aten_gm

        return run_with_torch

    return _CachedAotBackend("aot_eager", make_compiler, config, log, counters)


@register_backend("ember")
def _ember(config: Config, log: CompileLog, counters: Counters) -> Backend:
    trust = trusted_cache(config)

    def make_compiler(notes: list[Note], guarded: bool) -> Compiler:
        def codegen(aten_gm, example_inputs):
            try:
                with stage(counters, "codegen"):
                    compiled = ember_codegen.compile_graph(
                        aten_gm,
                        example_inputs,
                        target=config.codegen_target,
                        cache_dir=trust.folder("kernels"),
                        signer=trust,
                        # The guards already checked these inputs' metadata.
                        check_inputs=not guarded,
                        autotune=config.autotune,
                        compile_after=config.compile_new_sizes_after,
                    )
            except ember_codegen.CodegenError as e:
                message = (
                    f"ember: an aten graph runs with torch instead of codegen: {e}"
                )
                notes.append(_report(log, str(e), message))
                return aten_gm
            _log_compiled(log, compiled)
            return compiled

        return codegen

    return _CachedAotBackend("ember", make_compiler, config, log, counters)


class _CachedAotBackend:
    """aotgrad with compilers from ``make_compiler(notes, guarded)``, behind the
    graph cache (``guarded``: the compiled graph's inputs are checked by guards).

    A hit rebuilds the callable from the entry (no tracing, no compiling) and
    repeats the warnings compiling gave; a miss compiles and stores the result.
    A graph with symbolic sizes (capture's ``gm.meta["dynamic_dims"]``) is
    traced with them, and its entry serves every size (docs/dynamic.md).

    ``guarded``: whether the caller's guards check the inputs' metadata and the
    relations between sizes that aotgrad assumed (ember.compile's do); when not
    (torch.compile's guards know only their own), the compiled code checks them.
    """

    handles_symbolic_sizes = True
    guarded = True

    def __init__(
        self,
        name: str,
        make_compiler: Callable[[list[Note], bool], Compiler],
        config: Config,
        log: CompileLog,
        counters: Counters,
    ) -> None:
        self.name = name
        self.make_compiler = make_compiler
        self.config = config
        self.log = log
        self.counters = counters
        self.trust = trusted_cache(config)
        self.cache = GraphCache(self.trust)
        # Each graph in the graph cache, by its key (``saved_key``).
        self._keys: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        try:
            with stage(self.counters, "cache_key"):
                key = graph_key(gm, example_inputs, self.cache_options())
        except Uncacheable as e:
            self.log.cache_results.append(f"not cached: {e}")
            return self._compile(gm, example_inputs)[0]
        with stage(self.counters, "cache_load"):
            loaded = self._load(key, graph_locations(gm), gm)
        if loaded is not None:
            self._keys[gm] = key
            return loaded
        self.counters.disk_misses += 1
        compiled, make_entry = self._compile(gm, example_inputs)
        with _exclusive(self.counters, "cache_store", "codegen"):
            result = self._store(key, make_entry)
        self.log.cache_results.append(result)
        if result == "miss":
            self._keys[gm] = key
        return compiled

    def saved_key(self, gm: torch.fx.GraphModule) -> str | None:
        """The graph cache key under which ``gm``'s compiled form is stored,
        None when it is not (a saved entry names its graphs by these keys)."""
        return self._keys.get(gm)

    def load_saved(
        self, key: str, locations: tuple[str, ...], eager: Callable
    ) -> Callable | None:
        """The compiled graph stored under ``key``, for a saved entry whose
        captured graph had ``locations``; ``eager`` runs that graph (the
        fallback for calls the compiled code cannot serve). None when the
        entry is gone."""
        with stage(self.counters, "cache_load"):
            return self._load(key, locations, eager)

    def cache_options(self) -> dict[str, str]:
        # aotgrad's own rules are in the source hash; what a user changed is here
        return {
            "backend": self.name,
            "codegen_target": self.config.codegen_target,
            "autotune": str(self.config.autotune),
            "compile_new_sizes_after": str(self.config.compile_new_sizes_after),
            "guarded": str(self.guarded),
            "decompositions": ",".join(ember_aotgrad.decomposition_changes()),
        }

    def _compile(
        self, gm: torch.fx.GraphModule, example_inputs: list
    ) -> tuple[Callable, Callable[[], CachedGraph]]:
        """The compiled callable, and what makes its cache entry (serializing may
        compile the backward now, which can add notes)."""
        notes: list[Note] = []
        # The forward's inputs are the guarded ones; the backward's (saved tensors,
        # tangents) are not guarded, so its compiled code checks them itself.
        forward = self.make_compiler(notes, self.guarded)
        backward = self.make_compiler(notes, False)
        try:
            with _exclusive(self.counters, "aotgrad", "codegen"):
                compiled = ember_aotgrad.aot_compile(
                    gm,
                    example_inputs,
                    forward,
                    backward,
                    dynamic_dims=gm.meta.get("dynamic_dims"),
                )
            # When the guards hold the inputs' metadata (requires_grad included),
            # the compiled code need not check it again.
            compiled.check_inputs = not self.guarded
        except ember_aotgrad.AotGradError as e:
            # The torch-level graph still runs correctly under torch's autograd.
            # (torch.fx appends the failing node to the message: keep the reason.)
            reason = str(e).split("\n\n")[0]
            message = f"ember: a captured graph runs as captured, with torch: {reason}"
            notes.append(_report(self.log, reason, message))
            return gm, lambda: CachedGraph(
                EntryKind.AS_CAPTURED, tuple(notes), locations=graph_locations(gm)
            )

        def entry() -> CachedGraph:
            payload = ember_aotgrad.save_compiled_aot(compiled, _save_compiled)
            return CachedGraph(
                EntryKind.AOT, tuple(notes), payload, graph_locations(gm)
            )

        return compiled, entry

    def _store(self, key: str, make_entry: Callable[[], CachedGraph]) -> str:
        try:
            stored = self.cache.put(key, make_entry())
        except Exception as e:  # storing is an optimization: never fail a compile
            return f"miss, not stored: {type(e).__name__}: {e}"
        return "miss" if stored else "miss, not stored: larger than the size cap"

    def _load(
        self, key: str, locations: tuple[str, ...], eager: Callable
    ) -> Callable | None:
        """The entry's callable, rebuilt for a captured graph with ``locations``
        that ``eager`` runs. Its sources and warnings name those locations,
        not the ones it was stored with: the key leaves them out (see
        ``cache.location_pattern``)."""
        loaded: list[ember_codegen.CompiledGraph | ember_codegen.PerSizeGraph] = []
        moved: dict[str, str] = {}

        def load(data: bytes) -> Callable:
            kind, payload = data.split(b"\n", 1)
            if kind == b"fx":
                return ember_codegen.graph_from_bytes(payload)
            if kind == b"per-size":
                per_size = ember_codegen.load_per_size_graph(
                    payload, self.trust.folder("kernels"), self.trust, moved
                )
                if per_size.latest is not None:  # a size compiled before
                    loaded.append(per_size)
                return per_size
            if kind != b"codegen":
                raise ValueError(f"unknown compiled-graph kind {kind!r}")
            compiled = ember_codegen.CompiledGraph.from_bytes(
                payload,
                cache_dir=self.trust.folder("kernels"),
                locations=moved,
                signer=self.trust,
            )
            loaded.append(compiled)
            return compiled

        def rebuild(entry: CachedGraph) -> Callable:
            moved.update(entry.relocation(locations))
            if entry.kind is EntryKind.AS_CAPTURED:
                return eager
            loaded_aot = ember_aotgrad.load_compiled_aot(entry.payload, eager, load)
            loaded_aot.check_inputs = not self.guarded
            return loaded_aot

        found = self.cache.load(key, rebuild)
        if found is None:
            return None
        entry, result = found
        self.counters.disk_hits += 1
        self.log.cache_results.append("hit")
        for compiled in loaded:
            _log_compiled(self.log, compiled)
        for reason, message in entry.warnings:
            here = replace_locations(reason, moved), replace_locations(message, moved)
            _report(self.log, *here)
        return result


def _save_compiled(compiled: Callable) -> bytes:
    """Bytes for one compiled aten graph: codegen's own format, or a GraphModule
    node for node (what "aot_eager" and codegen's fallback return)."""
    if isinstance(compiled, ember_codegen.CompiledGraph):
        return b"codegen\n" + compiled.to_bytes()
    if isinstance(compiled, ember_codegen.PerSizeGraph):  # symbolic sizes
        return b"per-size\n" + compiled.to_bytes()
    if isinstance(compiled, torch.fx.GraphModule):
        return b"fx\n" + ember_codegen.graph_to_bytes(compiled)
    raise TypeError(f"cannot store a compiled graph of type {type(compiled)}")


def _log_compiled(log: CompileLog, compiled: ember_codegen.CompiledGraph) -> None:
    log.fallback_ops.update(compiled.fallback_ops)
    log.generated_code.append(compiled.source)


def _report(log: CompileLog, reason: str, message: str) -> Note:
    log.eager_graph_reasons.append(reason)
    warn_user(message)
    return reason, message


@contextmanager
def _exclusive(counters: Counters, stage: str, inner: str) -> Iterator[None]:
    """Times the block into ``stage``, less the time it spent in stage ``inner``
    (so the stages of one compile add up instead of overlapping)."""
    seconds = counters.compile_seconds
    before = seconds.get(inner, 0.0)
    start = time.perf_counter()
    try:
        with current(stage):
            yield
    finally:
        nested = seconds.get(inner, 0.0) - before
        elapsed = time.perf_counter() - start - nested
        seconds[stage] = seconds.get(stage, 0.0) + elapsed


def resolve_backend(
    backend: str | Backend,
    config: Config,
    log: CompileLog,
    counters: Counters | None = None,
) -> Backend:
    """The backend callable for a name or a user callable; ValueError if unknown.

    ``counters`` receives the built-in backends' disk hits and misses and their
    stage times; pass the compiled function's own (None: counts go nowhere)."""
    if callable(backend):
        return backend
    if backend not in BACKENDS:
        raise ValueError(
            f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)} "
            f"or a callable backend(gm, example_inputs)"
        )
    return BACKENDS[backend](config, log, Counters() if counters is None else counters)
