"""The on-disk cache of compiled graphs: what a graph's key covers, and the entries.

A key covers everything that decides what aotgrad and codegen make of a captured
graph: its code and constants, the inputs' metadata and grad mode, the options, and
the versions and sources of the software, and which of its nodes share a source
line, but not the lines themselves: a hit names where the code is now. Entries live
in ember_runtime's ArtifactStore (atomic, locked, checksummed, tagged, size-capped),
in the cache folder that ``trusted_cache`` vetted. docs/runtime.md ("The umbrella's
graph cache") and docs/security.md give the reasons.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import hashlib
import importlib.util
import inspect
import json
import operator
import os
import struct
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.fx
from torch._library import custom_ops

import ember_capture
from ember_capture.portable import operator_text
from ember_codegen.locations import graph_locations
from ember_runtime import (
    ArtifactStore,
    CacheTrust,
    cache_key,
    environment_versions,
    open_cache,
)

from .config import Config, default_cache_dir

DISTRIBUTIONS = (
    "ember",
    "ember-capture",
    "ember-aotgrad",
    "ember-codegen",
    "ember-runtime",
)
# Import packages whose sources are hashed into every key: editable installs keep
# their version number when their code changes.
PACKAGES = ("ember", "ember_capture", "ember_aotgrad", "ember_codegen", "ember_runtime")
_SOURCE_SUFFIXES = (".py", ".cpp", ".h")

# Graph targets whose behaviour is fixed by the torch and Python versions in the key.
# A function from anywhere else (a user's module, a custom op) may change without
# changing the key, so such a graph is not cached.
_TRUSTED_MODULES = frozenset({"torch", "operator", "_operator", "builtins", "math"})
_TRUSTED_OP_NAMESPACES = frozenset({"aten", "prims"})
_PLAIN_ARGS = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
    torch.fx.Node,
    type(Ellipsis),
)
_INPUT_TYPES = (torch.Tensor, torch.nn.Parameter)


class Uncacheable(Exception):
    """Why a graph is neither looked up nor stored (it is compiled as usual)."""


def graph_key(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    options: Mapping[str, str],
) -> str:
    """The store key of ``gm`` compiled for ``example_inputs`` with ``options``
    (every option that changes the compiled code, named). Raises Uncacheable."""
    differentiable = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
    )
    return cache_key(
        graph=graph_hash(gm, differentiable),
        inputs=_inputs_text(example_inputs, gm.meta.get("dynamic_dims", {})),
        options="\n".join(f"{k}={options[k]}" for k in sorted(options)),
        environment=environment_text(),
        locations=location_pattern(gm),
    )


def location_pattern(gm: torch.fx.GraphModule) -> str:
    """Which of ``gm``'s nodes share a user location: per node, its location's
    index in ``graph_locations(gm)``, or ``-``.

    The key holds this, not the locations: the same code moved to other lines or
    files hits, and ``CachedGraph.relocation`` then maps the stored locations one
    to one onto the current ones (code that now spreads one stored line over two
    misses instead, as no rename could say which is which)."""
    index = {loc: i for i, loc in enumerate(graph_locations(gm))}
    return ",".join(
        str(index[loc]) if (loc := node.meta.get("user_loc")) else "-"
        for node in gm.graph.nodes
    )


def graph_hash(gm: torch.fx.GraphModule, differentiable: bool = False) -> str:
    """SHA-256 of ``gm``'s generated code, the tensors its ``get_attr`` nodes
    read and the custom operators it calls (``custom_op_text``; only where the
    graph is not ``differentiable``). Raises Uncacheable for what these do not
    pin down: submodule calls, other functions from outside torch and Python,
    unusual argument values."""
    h = hashlib.sha256(gm.code.encode())
    for node in gm.graph.nodes:
        if node.op == "call_module":
            raise Uncacheable(f"the graph calls the submodule {node.target!r}")
        if node.op == "call_function" and not _trusted_target(node.target):
            h.update(custom_op_text(node.target, differentiable).encode())
        if node.op == "get_attr":
            h.update(_constant_bytes(node.target, operator.attrgetter(node.target)(gm)))
        _check_args((node.args, node.kwargs))
    return h.hexdigest()


def _trusted_target(target: object) -> bool:
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace in _TRUSTED_OP_NAMESPACES
    if isinstance(target, torch._ops.OpOverloadPacket):
        # A packet's attributes are its overloads; its name holds the namespace.
        namespace = target._qualified_op_name.split("::")[0]
        return namespace in _TRUSTED_OP_NAMESPACES
    if not isinstance(
        target,
        (
            type,  # torch.Size(...) in torch.compile's graphs
            types.FunctionType,
            types.BuiltinFunctionType,
            types.MethodDescriptorType,
            types.WrapperDescriptorType,
        ),
    ):
        return False
    module = getattr(target, "__module__", None) or getattr(
        getattr(target, "__objclass__", None), "__module__", ""
    )
    return module.split(".")[0] in _TRUSTED_MODULES


def custom_op_text(target: object, differentiable: bool) -> str:
    """What a graph calling ``target`` depends on when it is a
    ``torch.library.custom_op`` (``ember_capture.operator_text``: its schema
    and its fake function; the operator itself runs at call time). Raises
    Uncacheable for any other function or operator, and where the graph is
    ``differentiable``: its backward would be traced from the operator's
    Python autograd formula, which may call code anywhere."""
    text = operator_text(target)
    op = getattr(target, "default", target)  # an operator's first overload
    name = op._schema.name if isinstance(op, torch._ops.OpOverload) else None
    if text is None:
        if name not in custom_ops.OPDEFS:
            raise Uncacheable(f"the graph calls {target!r}, defined outside torch")
        raise Uncacheable(f"the custom operator {name} has no plain fake function")
    if differentiable:
        raise Uncacheable(
            f"the graph differentiates the custom operator {name}, whose "
            "backward is Python"
        )
    return text


def _check_args(value: object) -> None:
    if isinstance(value, (tuple, list)):
        for v in value:
            _check_args(v)
    elif isinstance(value, dict):
        _check_args(tuple(value.items()))
    elif isinstance(value, slice):
        _check_args((value.start, value.stop, value.step))
    elif not isinstance(value, _PLAIN_ARGS):
        raise Uncacheable(f"the graph holds a {type(value).__name__} argument")


def _constant_bytes(name: str, value: object) -> bytes:
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        raise Uncacheable(f"the graph reads {name!r}, which is not a dense tensor")
    data = value.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    meta = f"{name} {value.dtype} {tuple(value.shape)} {value.stride()}\0"
    return meta.encode() + data.numpy().tobytes()


def _inputs_text(
    example_inputs: Sequence[object], dynamic_dims: Mapping[int, Sequence[int]]
) -> str:
    """The inputs' metadata and the global modes that change a trace. A
    symbolic size (``dynamic_dims``) is written as ``s``, and its tensor's
    strides by their order: the entry serves every size (docs/dynamic.md)."""
    devices = {"cpu"}
    lines = []
    for i, value in enumerate(example_inputs):
        symbolic = dynamic_dims.get(i)
        if isinstance(value, torch.Tensor):
            if type(value) not in _INPUT_TYPES or value.layout != torch.strided:
                raise Uncacheable(f"input {i} is a {type(value).__name__}")
            devices.add(value.device.type)
            shape, stride = tuple(value.shape), value.stride()
            if symbolic:
                shape = tuple("s" if d in symbolic else n for d, n in enumerate(shape))
                stride = sorted(range(value.dim()), key=lambda d: (stride[d], -d))
            lines.append(
                f"{type(value).__name__} {value.dtype} {value.device} "
                f"{shape} {stride} {value.requires_grad}"
            )
        elif symbolic is not None and type(value) is int:
            lines.append("int s")
        elif value is None or type(value) in (bool, int, float):
            lines.append(f"{type(value).__name__} {value!r}")
        else:
            raise Uncacheable(f"input {i} is a {type(value).__name__}")
    lines.append(f"grad={torch.is_grad_enabled()}")
    lines.append(f"inference={torch.is_inference_mode_enabled()}")
    lines.append(f"default_dtype={torch.get_default_dtype()}")
    for device in sorted(devices):
        if torch.is_autocast_enabled(device):
            lines.append(f"autocast {device} {torch.get_autocast_dtype(device)}")
    return "\n".join(lines)


@functools.cache
def environment_text() -> str:
    """The versions an entry depends on (Python, torch, the C++ compiler, the
    ember distributions), the CPU capability torch's eager kernels were picked
    for (lowerings match their edge cases, which differ between AVX2 and
    AVX-512) and a hash of the ember packages' sources; once per process."""
    versions = environment_versions(DISTRIBUTIONS)
    lines = [f"{k}={versions[k]}" for k in sorted(versions)]
    lines.append(f"cpu={torch.backends.cpu.get_cpu_capability()}")
    lines.append(f"sources={source_hash()}")
    return "\n".join(lines)


def source_hash() -> str:
    """SHA-256 over the source files of the ember packages, wherever installed:
    each file's path, size and modification time, the rule Python's own
    bytecode cache uses to notice an edited file (reading every file's bytes
    took 8 ms of each new process's first call)."""
    h = hashlib.sha256()
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        for root in spec.submodule_search_locations or ():
            found = []
            for folder, subfolders, names in os.walk(root):
                subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
                found += [
                    os.path.join(folder, n)
                    for n in names
                    if n.endswith(_SOURCE_SUFFIXES)
                ]
            for path in sorted(found):
                stat = os.stat(path)
                relative = os.path.relpath(path, root)
                h.update(f"{package}/{relative}\0{stat.st_size}\0".encode())
                h.update(f"{stat.st_mtime_ns}\0".encode())
    return h.hexdigest()


class EntryKind(enum.Enum):
    AOT = "aot"  # payload: ember_aotgrad.save_compiled_aot bytes
    AS_CAPTURED = "as_captured"  # aotgrad refused the graph; it runs as captured


@dataclass(frozen=True)
class CachedGraph:
    """One entry: what to rebuild, the warnings compiling it gave, as (reason for
    the CompileLog, message) pairs, so a hit reports them again, and the user
    locations of the captured graph it was compiled from (``graph_locations``),
    which its sources and warnings name."""

    kind: EntryKind
    warnings: tuple[tuple[str, str], ...]
    payload: bytes = b""
    locations: tuple[str, ...] = ()

    def relocation(self, locations: Sequence[str]) -> dict[str, str]:
        """Each stored location to where the captured graph now being served
        (whose key matched) has that code: ``locations``, its own."""
        return dict(zip(self.locations, locations, strict=True))

    def to_bytes(self) -> bytes:
        header = {
            "kind": self.kind.value,
            "warnings": self.warnings,
            "locations": self.locations,
        }
        text = json.dumps(header).encode()
        return _LENGTH.pack(len(text)) + text + self.payload

    @classmethod
    def from_bytes(cls, data: bytes) -> CachedGraph:
        """Raises ValueError (or a subclass) for bytes not in this format."""
        if len(data) < _LENGTH.size:
            raise ValueError("too short for a cached graph")
        (length,) = _LENGTH.unpack_from(data)
        end = _LENGTH.size + length
        header = json.loads(data[_LENGTH.size : end])
        warnings = tuple((reason, message) for reason, message in header["warnings"])
        locations = tuple(str(loc) for loc in header["locations"])
        return cls(EntryKind(header["kind"]), warnings, data[end:], locations)


_LENGTH = struct.Struct("<I")


def trusted_cache(config: Config) -> CacheTrust:
    """``config.cache_dir`` with its folders (kernels, graphs, meta) checked by
    the trust rules, or, with a warning, the user's own cache or a folder for
    this process when it fails them (``ember_runtime.open_cache``; once per
    process)."""
    return open_cache(
        config.cache_dir,
        key=config.shared_key(),
        fallback=default_cache_dir(),
        folders=CACHE_FOLDERS,
    )


CACHE_FOLDERS = ("kernels", "graphs", "meta", "entries")


class GraphCache:
    """CachedGraphs by key, in an ArtifactStore in ``trust``'s graphs folder."""

    def __init__(self, trust: CacheTrust) -> None:
        self.store = ArtifactStore(trust.folder("graphs"), trust=trust)

    def load(
        self, key: str, rebuild: Callable[[CachedGraph], object]
    ) -> tuple[CachedGraph, object] | None:
        """The entry under ``key`` and ``rebuild(entry)``, or None when there is
        none. The one place a graph entry is checked: the store deletes a file
        that fails its checksum, with a warning; an entry that does not decode
        or rebuild (another format, kernels that no longer build) is deleted
        here, with the same warning. The caller then compiles and stores anew."""
        data = read_stored(self.store, key)
        if data is None:
            return None
        try:
            entry = CachedGraph.from_bytes(data)
            return entry, rebuild(entry)
        except Exception as e:
            why = f"it could not be loaded: {type(e).__name__}: {e}"
        with contextlib.suppress(OSError):  # a read-only folder keeps it
            self.store.discard(key, data, why)
        return None

    def put(self, key: str, entry: CachedGraph) -> bool:
        """Stores ``entry``; False when it is larger than the store's size cap."""
        return self.store.put(key, entry.to_bytes())


class MetaResultsCache:
    """Per function, the meta-kernel results its captures used (ember_capture's
    ``meta_results``), so capture in a new process replays them instead of running
    torch's meta kernels (the first of which imports torch's own compiler frontend,
    about a second).

    Entries are facts about torch's own ops for given metadata, so the key is the
    function's place in the user's code (only to choose what to load) and the
    environment; an edited function at most misses."""

    def __init__(self, trust: CacheTrust) -> None:
        self.store = ArtifactStore(trust.folder("meta"), trust=trust)
        self._known: dict[str, set[str]] = {}  # key -> entries loaded or stored

    def load(self, fn: types.FunctionType) -> None:
        """Hands this function's stored entries to capture, once per process."""
        key = self._key(fn)
        if key in self._known:
            return
        entries = self._read(key)
        ember_capture.remember_meta_results(entries)
        self._known[key] = set(entries)

    def save(self, fn: types.FunctionType, entries: Mapping[str, list]) -> None:
        """Stores ``entries`` with what is already kept for ``fn``, if any is new."""
        key = self._key(fn)
        known = self._known.setdefault(key, set())
        if set(entries) <= known:
            return
        merged = {**self._read(key), **entries}
        try:
            self.store.put(key, json.dumps(merged).encode())
        except OSError:  # an unwritable cache folder: capture just runs the kernels
            return
        known.update(merged)

    def _read(self, key: str) -> dict[str, list]:
        """The stored entries, {} when there are none. The one place they are
        checked: the store deletes a file that fails its checksum, and entries
        that are not meta results (``check_meta_results``) are deleted here,
        both with a warning, rather than fail every capture that replays them."""
        data = read_stored(self.store, key)
        if data is None:
            return {}
        try:
            entries = json.loads(data)
        except ValueError as e:
            problem = f"not JSON: {e}"
        else:
            problem = ember_capture.check_meta_results(entries)
            if problem is None:
                return entries
        with contextlib.suppress(OSError):  # a read-only folder keeps it
            self.store.discard(key, data, problem)
        return {}

    @staticmethod
    def _key(fn: types.FunctionType) -> str:
        return function_key(fn, "meta-results", environment=environment_text())


class DynamicDimsCache:
    """Per function, the input dims that automatic dynamic made symbolic
    (``{source name: [dims]}``), so a new process compiles them symbolic on its
    first call instead of compiling once per size first (docs/dynamic.md)."""

    def __init__(self, trust: CacheTrust) -> None:
        self.store = ArtifactStore(trust.folder("dynamic"), trust=trust)

    def load(self, fn: types.FunctionType) -> dict[str, set[int]]:
        """The dims stored for ``fn``; {} when none (or unreadable)."""
        key = self._key(fn)
        data = read_stored(self.store, key)
        if data is None:
            return {}
        try:
            stored = json.loads(data)
            return {str(name): {int(d) for d in dims} for name, dims in stored.items()}
        except (ValueError, TypeError, AttributeError) as e:
            with contextlib.suppress(OSError):
                self.store.discard(key, data, f"not a dict of dims: {e}")
            return {}

    def save(self, fn: types.FunctionType, dims: Mapping[str, set[int]]) -> None:
        text = json.dumps({name: sorted(d) for name, d in sorted(dims.items()) if d})
        with contextlib.suppress(OSError):  # unwritable: the next run learns again
            self.store.put(self._key(fn), text.encode())

    @staticmethod
    def _key(fn: types.FunctionType) -> str:
        return function_key(fn, "dynamic-dims")


def read_stored(store: ArtifactStore, key: str) -> bytes | None:
    """The entry under ``key``; None when absent, damaged or unreadable (an
    unreadable folder is a miss: compile, as for one)."""
    try:
        return store.get(key)
    except OSError:
        return None


def function_key(fn: types.FunctionType, kind: str, **parts: str) -> str:
    """A key for what is kept per function: its place in the user's code, and
    that of the function it wraps (a decorator's wrapper, such as
    transformers' ``can_return_tuple``, is one code object for every model's
    forward)."""
    where = [_place(fn)]
    try:
        inner = inspect.unwrap(fn)
    except ValueError:  # a __wrapped__ chain that loops
        inner = fn
    if inner is not fn and isinstance(inner, types.FunctionType):
        where.append(_place(inner))
    return cache_key(kind=kind, function=" wrapping ".join(where), **parts)


def _place(fn: types.FunctionType) -> str:
    code = fn.__code__
    return f"{code.co_filename}:{code.co_firstlineno}:{code.co_qualname}"
