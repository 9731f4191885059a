"""Saved entries: a compiled function's entry kept on disk, so that a new
process serves its first call without capturing (a warm start).

An entry is saved when everything it holds can be named in another process:
its guards (``ember_capture.portable``), the transformed code (marshalled), its
constants, and each graph by its key in the graph cache. A new process checks
the saved guards against its first call and, when they hold, rebuilds the
entry from them; otherwise it captures as usual. docs/runtime.md ("Saved
entries") has the rules.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import marshal
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

import ember_codegen
from ember_capture.checks import CellView
from ember_capture.portable import (
    NotPortable,
    PortableGuards,
    code_fingerprint,
    decode,
    encode,
)
from ember_capture.transform import bind, register_source
from ember_runtime import (
    ArtifactStore,
    CacheTrust,
    Entry,
    GuardedEntry,
    TensorCheck,
    binder,
)

from .cache import environment_text, function_key, read_stored
from .guard_checks import SplitGuards, guard_check, guard_parts

if TYPE_CHECKING:
    from ember_capture import CaptureResult

log = logging.getLogger("ember.perf")

_FORMAT = 1
# Entries kept per function (and environment): the newest first.
MAX_SAVED = 8

# Cells whose value is the function's own globals, or sys.modules.
_FN_GLOBALS = ["fn-globals"]
_SYS_MODULES = ["sys-modules"]


class GraphSaver(Protocol):
    """What a backend offers saved entries (the graph cache's backends do)."""

    def saved_key(self, gm: torch.fx.GraphModule) -> str | None: ...

    def load_saved(
        self, key: str, locations: tuple[str, ...], eager: Callable
    ) -> Callable | None: ...

    def cache_options(self) -> dict[str, str]: ...


class LazyGraph:
    """A stored captured graph (``ember_codegen.graph_to_bytes``), rebuilt on
    first use: the fallback of a compiled graph, which most processes never run."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._gm: torch.fx.GraphModule | None = None

    def load(self) -> torch.fx.GraphModule:
        if self._gm is None:
            self._gm = ember_codegen.graph_from_bytes(self._data)
        return self._gm

    def __call__(self, *args: object) -> object:
        return self.load()(*args)

    def __getattr__(self, name: str) -> object:
        # read as the GraphModule (``log.graphs[0].code``)
        return getattr(self.load(), name)


@dataclass(frozen=True)
class SavedGraph:
    name: str  # the cell the transformed code reads it from
    key: str  # its key in the graph cache
    locations: tuple[str, ...]  # the captured graph's user locations
    eager: bytes  # the captured graph, as graph_to_bytes stores it


@dataclass(frozen=True)
class SavedEntry:
    """One entry of one function, in names another process can look up."""

    tensors: tuple[tuple, ...]  # per tensor guard: name and encoded TensorCheck
    reads: str  # guard_checks.SplitGuards.reads
    other: PortableGuards | None
    guards: tuple[str, ...]  # every guard as text, for the compile record
    code: bytes  # the transformed code, marshalled
    source: str  # its Python, for tracebacks
    cells: dict[str, Any]  # the code's constants, encoded
    graphs: tuple[SavedGraph, ...]
    symbolic: bool = False  # SplitGuards.symbolic
    # SplitGuards.first, checked before the reads (None: ``other`` holds
    # every non-tensor guard and runs first, as entries saved before it do)
    first: PortableGuards | None = None

    def to_json(self) -> dict:
        return {
            "tensors": [list(t) for t in self.tensors],
            "reads": self.reads,
            "other": None if self.other is None else self.other.to_json(),
            "guards": list(self.guards),
            "code": base64.b64encode(self.code).decode(),
            "source": self.source,
            "cells": self.cells,
            "graphs": [
                {
                    "name": g.name,
                    "key": g.key,
                    "locations": list(g.locations),
                    "eager": base64.b64encode(g.eager).decode(),
                }
                for g in self.graphs
            ],
            "symbolic": self.symbolic,
            "first": None if self.first is None else self.first.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict) -> SavedEntry:
        other, first = data["other"], data.get("first")
        return cls(
            tuple(tuple(t) for t in data["tensors"]),
            str(data["reads"]),
            None if other is None else PortableGuards.from_json(other),
            tuple(str(g) for g in data["guards"]),
            base64.b64decode(data["code"]),
            str(data["source"]),
            dict(data["cells"]),
            tuple(
                SavedGraph(
                    str(g["name"]),
                    str(g["key"]),
                    tuple(str(loc) for loc in g["locations"]),
                    base64.b64decode(g["eager"]),
                )
                for g in data["graphs"]
            ),
            bool(data.get("symbolic", False)),
            None if first is None else PortableGuards.from_json(first),
        )


class NotSaved(Exception):
    """Why an entry is not saved (it is still used in this process)."""


def saved_entry(
    result: CaptureResult, split: SplitGuards, graphs: tuple[SavedGraph, ...]
) -> SavedEntry:
    """The SavedEntry of a capture ``result`` whose guards ``split_guards``
    split as ``split`` and whose graphs were compiled as ``graphs``. Raises
    NotSaved."""
    if result.resume_codes or result.break_reason is not None:
        raise NotSaved("it has a graph break")
    fn = result.fn
    try:
        parts = guard_parts(result)
        cells = CellView(fn.__code__.co_freevars, fn.__closure__)
        rest = parts.rest
        other = rest.compile(fn.__globals__, cells).portable() if len(rest) else None
        first = parts.on_paths.compile(fn.__globals__, cells).portable()
        tensors = tuple(
            (
                t.name,
                encode(t.type),
                encode(t.dtype),
                str(t.device),
                list(t.shape),
                list(t.stride),
                t.requires_grad,
            )
            for t in split.tensors
        )
        graph_names = {g.name for g in graphs}
        own = set(fn.__code__.co_freevars)
        values = {}
        for name in result.code.co_freevars:
            if name in own or name in graph_names:
                continue
            if name not in result.cell_values:
                raise NotSaved(f"its code reads {name}, which only capture makes")
            values[name] = _encode_cell(result.cell_values[name], fn)
    except NotPortable as e:
        raise NotSaved(str(e)) from e
    return SavedEntry(
        tensors,
        split.reads,
        other,
        tuple(str(g) for g in result.guards),
        marshal.dumps(result.code),
        result.transformed_source,
        values,
        graphs,
        split.symbolic,
        first,
    )


def _encode_cell(value: object, fn: types.FunctionType) -> Any:
    if value is fn.__globals__:
        return _FN_GLOBALS
    if value is sys.modules:
        return _SYS_MODULES
    return encode(value)


def _decode_cell(data: Any, fn: types.FunctionType) -> object:
    if data == _FN_GLOBALS:
        return fn.__globals__
    if data == _SYS_MODULES:
        return sys.modules
    return decode(data)


def saved_graph(
    backend: GraphSaver, name: str, gm: torch.fx.GraphModule, locations: tuple
) -> SavedGraph:
    """How a saved entry names one compiled graph. Raises NotSaved."""
    key = backend.saved_key(gm)
    if key is None:
        raise NotSaved("a graph of it is not in the graph cache")
    try:
        eager = ember_codegen.graph_to_bytes(gm)
    except Exception as e:  # what a graph holds decides; any failure: not saved
        raise NotSaved(f"a graph of it cannot be stored: {e}") from e
    return SavedGraph(name, key, tuple(locations), eager)


@dataclass
class Rebuilt:
    """A saved entry made live: the runtime's entry and what it is made of."""

    entry: Entry
    saved: SavedEntry
    graphs: list[LazyGraph]


class SavedEntries:
    """The saved entries of the functions one backend compiles, in an
    ArtifactStore in the cache's ``entries`` folder, one file per function
    and environment holding up to MAX_SAVED entries."""

    def __init__(self, trust: CacheTrust, backend: GraphSaver) -> None:
        self.store = ArtifactStore(trust.folder("entries"), trust=trust)
        self.backend = backend
        # Per function key: the entries not yet made live in this process.
        self._unused: dict[str, list[SavedEntry]] = {}

    def rebuild(
        self, fn: types.FunctionType, args: tuple, kwargs: dict, dynamic: object
    ) -> Rebuilt | None:
        """A live entry for the call ``fn(*args, **kwargs)`` from a saved one
        whose guards hold for it, else None. ``dynamic``: the compile's
        ``dynamic`` argument (entries are kept per value: a dynamic=False
        entry must not serve a compile that asked for symbolic sizes)."""
        key = self._key(fn, dynamic)
        if key not in self._unused:
            self._unused[key] = self._read(key)
        unused = self._unused[key]
        if not unused:
            return None
        try:
            f_locals = binder(fn)(args, kwargs)  # as the dispatcher binds
        except TypeError:
            return None
        # Several may hold: the entry of the first size and the one with
        # symbolic sizes made after it. The one whose tensors' sizes are all
        # checked exactly serves: its graph was compiled for these sizes, where
        # the symbolic one would compile this size again (a C++ build).
        for saved in sorted(unused, key=_specificity, reverse=True):
            try:
                rebuilt = _make_live(saved, fn, f_locals, self.backend)
            except Exception as e:  # (LookupError is a plain miss, inside)
                # an entry that does not rebuild is dropped: capture runs
                log.info("a saved entry of %s does not rebuild: %s", fn, e)
                unused.remove(saved)
                continue
            if rebuilt is not None:
                unused.remove(saved)
                return rebuilt
        return None

    def save(self, fn: types.FunctionType, saved: SavedEntry, dynamic: object) -> None:
        """Keeps ``saved`` first among ``fn``'s entries for ``dynamic``."""
        key = self._key(fn, dynamic)
        kept = [
            e
            for e in self._read_json(key)
            if e.get("guards") != list(saved.guards) or e.get("reads") != saved.reads
        ]
        entries = [saved.to_json(), *kept][:MAX_SAVED]
        text = json.dumps({"format": _FORMAT, "entries": entries})
        with contextlib.suppress(OSError):  # unwritable: the next process captures
            self.store.put(key, text.encode())

    def _read_json(self, key: str) -> list[dict]:
        data = read_stored(self.store, key)
        if data is None:
            return []
        try:
            stored = json.loads(data)
            if stored["format"] == _FORMAT:
                return list(stored["entries"])
            problem = f"format {stored['format']}"
        except (ValueError, KeyError, TypeError) as e:
            problem = f"not saved entries: {e}"
        with contextlib.suppress(OSError):
            self.store.discard(key, data, problem)
        return []

    def _read(self, key: str) -> list[SavedEntry]:
        found = []
        for data in self._read_json(key):
            try:
                found.append(SavedEntry.from_json(data))
            except (ValueError, KeyError, TypeError):
                continue  # one unreadable entry: the others still serve
        return found

    def _key(self, fn: types.FunctionType, dynamic: object) -> str:
        options = self.backend.cache_options()
        return function_key(
            fn,
            "entries",
            code=code_fingerprint(fn.__code__),
            environment=environment_text(),
            options="\n".join(f"{k}={options[k]}" for k in sorted(options)),
            dynamic=repr(dynamic),
            # what capture may have read as constant about the devices
            devices=f"{torch.version.cuda} {os.environ.get('CUDA_VISIBLE_DEVICES')}",
        )


def _specificity(saved: SavedEntry) -> tuple[bool, int]:
    """Fixed sizes before symbolic ones (as the dispatcher orders entries), then
    how many tensors ``saved`` checks exactly (a tensor with a symbolic size is
    checked among its other guards)."""
    return not saved.symbolic, len(saved.tensors)


def _make_live(
    saved: SavedEntry, fn: types.FunctionType, f_locals: dict, backend: GraphSaver
) -> Rebuilt | None:
    """``saved`` as a live entry when its guards hold for ``f_locals`` and its
    graphs are still in the graph cache, else None."""
    cells = CellView(fn.__code__.co_freevars, fn.__closure__)
    try:
        other, first = (
            None if guards is None else guards.compile(fn.__globals__, cells, f_locals)
            for guards in (saved.other, saved.first)
        )
        tensors = tuple(
            TensorCheck(
                name,
                decode(kind),
                decode(dtype),
                torch.device(device),
                tuple(shape),
                tuple(stride),
                requires_grad,
            )
            for name, kind, dtype, device, shape, stride, requires_grad in saved.tensors
        )
        values = {name: _decode_cell(v, fn) for name, v in saved.cells.items()}
    except LookupError:
        return None
    split = SplitGuards(tensors, saved.reads, other, saved.symbolic, first)
    guards = guard_check(fn, split)
    if not guards.check(f_locals):
        return None
    graphs = []
    for graph in saved.graphs:
        eager = LazyGraph(graph.eager)
        compiled = backend.load_saved(graph.key, graph.locations, eager)
        if compiled is None:
            return None
        values[graph.name] = compiled
        graphs.append(eager)
    code = marshal.loads(saved.code)
    register_source(code.co_filename, saved.source)
    run = bind(fn, code, values)
    entry = GuardedEntry(guards.check, guards.failure, run, saved.symbolic)
    return Rebuilt(entry, saved, graphs)
