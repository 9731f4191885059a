"""A memo of what torch ops return on meta tensors: sizes, strides, dtypes and
which input an output aliases, keyed by the op and its inputs' metadata.

Capture computes every example output on meta tensors. Many of torch's meta kernels
are Python, and the first of them in a process imports torch's own compiler
frontend (about a second). The memo answers repeated ops in-process, and the
umbrella persists the entries a capture used, so a new process with a warm cache
runs no meta kernel.
An entry is a fact about torch's own code for the given metadata and global state,
so it is valid for as long as the torch version is the same (the umbrella keys its
files by version). Ops whose answer the memo cannot replay exactly are not kept.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import types
from collections.abc import Mapping

import torch

from .checks import GlobalState

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# An in-process memo larger than this is cleared rather than grown.
MAX_ENTRIES = 100_000

# Plain argument values, written into the key as JSON (which tells True, 1 and 1.0
# apart).
_SCALARS = (type(None), bool, int, float, str)
# Values written by their str(): each type's str() names one value.
_NAMED = (torch.dtype, torch.device, torch.layout, torch.memory_format)
_SEQUENCES = {tuple: "tuple", list: "list", torch.Size: "size"}


MISS = object()  # replay's answer when the memo has no entry


class _Unmemoizable(Exception):
    pass


class MetaMemo:
    """Example outputs by ``key(...)``; ``replay`` rebuilds one from the inputs."""

    def __init__(self) -> None:
        self.entries: dict[str, list] = {}
        self._refused: set[str] = set()

    def update(self, entries: Mapping[str, list]) -> None:
        """Adds entries exported by ``export`` (in this process or an earlier one)."""
        if len(self.entries) + len(entries) > MAX_ENTRIES:
            self.entries.clear()
        self.entries.update(entries)

    def export(self, keys: set[str]) -> dict[str, list]:
        """The entries for ``keys`` that the memo holds, JSON-ready."""
        return {k: self.entries[k] for k in keys if k in self.entries}

    def replay(self, key: str, inputs: list[torch.Tensor]) -> object:
        """The output recorded for ``key``, rebuilt on ``inputs`` (the tensors
        ``key`` listed, in order); MISS when there is no entry."""
        spec = self.entries.get(key)
        return MISS if spec is None else _rebuild(spec, inputs)

    def record(
        self,
        key: str,
        inputs: list[torch.Tensor],
        before: list[list],
        result: object,
    ) -> None:
        """Keeps ``result`` for ``key`` if replaying it gives the same metadata.

        ``before`` is the inputs' metadata before the op ran: an op that changed
        it (``t_()``, ``resize_()``) cannot be replayed without running it."""
        if key in self._refused:
            return
        try:
            if [_tensor_meta(t) for t in inputs] != before:
                raise _Unmemoizable
            spec = _result_spec(result, inputs, set())
            if _describe(_rebuild(spec, inputs)) != _describe(result):
                raise _Unmemoizable
        except _Unmemoizable:
            self._refused.add(key)
            return
        if len(self.entries) >= MAX_ENTRIES:
            self.entries.clear()
        self.entries[key] = spec


MEMO = MetaMemo()


def remember_meta_results(entries: Mapping[str, list]) -> None:
    """Teach this process's memo the entries a CaptureResult's ``meta_results``
    held (typically read back from a cache written by an earlier process)."""
    MEMO.update(entries)


def check_meta_results(entries: object) -> str | None:
    """Why ``entries`` (meta results read back from disk) are not what
    ``CaptureResult.meta_results`` holds, or None: the check they pass before
    ``remember_meta_results`` is given them. Replaying a malformed entry would
    fail the capture of every function that reaches its op."""
    if not isinstance(entries, dict):
        return f"a {type(entries).__name__}, not an object of entries"
    for text, spec in entries.items():
        try:
            _, metas, _ = json.loads(text)
            inputs = len(metas)
        except (ValueError, TypeError):
            return f"{text[:40]!r} is not an op key"
        if not _valid_spec(spec, inputs):
            return f"the result for {text[:40]!r} is malformed"
    return None


def _valid_spec(spec: object, inputs: int) -> bool:
    """Whether ``_rebuild`` can rebuild ``spec`` from ``inputs`` tensors."""
    match spec:
        case ["none"]:
            return True
        case ["const", value]:
            return type(value) in _SCALARS
        case ["input", index]:
            return type(index) is int and 0 <= index < inputs
        case ["view", index, *meta]:
            return type(index) is int and 0 <= index < inputs and _valid_meta(meta)
        case ["new", *meta]:
            return _valid_meta(meta)
        case ["seq", str() as name, list() as items]:
            kind = name.removeprefix("torch.return_types.")
            named = kind != name and hasattr(torch.return_types, kind)
            valid = named or name in ("tuple", "list")
            return valid and all(_valid_spec(s, inputs) for s in items)
    return False


def _valid_meta(meta: list) -> bool:
    """Whether ``meta`` is what ``_tensor_meta`` gives."""
    match meta:
        case [list() as shape, list() as stride, offset, str() as dtype, bool()]:
            sizes = (*shape, *stride, offset)
            dtype_ = getattr(torch, dtype.removeprefix("torch."), None)
            return (
                len(shape) == len(stride)
                and all(type(v) is int and v >= 0 for v in sizes)
                and isinstance(dtype_, torch.dtype)
            )
    return False


def key(kind: str, target: object, args: tuple, kwargs: dict, devices: tuple = ()):
    """``(key, input tensors, their metadata)`` for this op on these meta
    arguments, or None when its result may depend on more than the key holds.
    ``devices`` names the inputs' real device types where the result depends on
    them (autocast casts by device type)."""
    name = _op_name(kind, target)
    if name is None:
        return None
    tensors: list[torch.Tensor] = []
    try:
        spec = [
            name,
            _arg_spec(args, tensors),
            _arg_spec(kwargs, tensors),
            _global_state(),
            *([list(devices)] if devices else []),
        ]
    except _Unmemoizable:
        return None
    metas = [_tensor_meta(t) for t in tensors]
    storages = [t.untyped_storage()._cdata for t in tensors]
    aliases = [storages.index(s) for s in storages]  # which inputs share memory
    text = json.dumps([spec, metas, aliases], separators=(",", ":"))
    return text, tensors, metas


def _global_state() -> list:
    state = GlobalState.current()
    return [v if type(v) in (bool, int) else str(v) for v in state]


_NAMES: dict[object, str | None] = {}


def _op_name(kind: str, target: object) -> str | None:
    if kind == "call_method":
        return f"Tensor.{target}" if isinstance(target, str) else None
    try:
        return _NAMES[target]
    except KeyError:
        name = _NAMES[target] = _resolvable_name(target)
        return name
    except TypeError:  # unhashable
        return None


def _resolvable_name(target: object) -> str | None:
    """``module.name`` that imports back to ``target`` itself, for torch's and
    Python's own functions; None for anything a user could have redefined."""
    if isinstance(target, types.FunctionType):
        if not target.__code__.co_filename.startswith(_TORCH_DIR):
            return None
    elif not isinstance(target, types.BuiltinFunctionType):
        return None
    module_name = getattr(target, "__module__", None)
    if not module_name:
        return None
    for attr in (target.__qualname__, target.__name__):
        try:
            obj = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            continue
        if obj is target:
            return f"{module_name}.{attr}"
    return None


def _arg_spec(value: object, tensors: list[torch.Tensor]) -> object:
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor or value.layout != torch.strided:
            raise _Unmemoizable
        tensors.append(value)
        return ["tensor", len(tensors) - 1]
    if type(value) in _SCALARS:
        return value
    if isinstance(value, _NAMED):
        return [type(value).__name__, str(value)]
    if type(value) in _SEQUENCES:
        return [_SEQUENCES[type(value)], *(_arg_spec(v, tensors) for v in value)]
    if type(value) is dict:
        return ["dict", *([k, _arg_spec(v, tensors)] for k, v in value.items())]
    if type(value) is slice:
        parts = (value.start, value.stop, value.step)
        return ["slice", *(_arg_spec(v, tensors) for v in parts)]
    if value is Ellipsis:
        return ["ellipsis"]
    if type(value) is complex:
        return ["complex", value.real, value.imag]
    raise _Unmemoizable


def _tensor_meta(t: torch.Tensor) -> list:
    return [
        list(t.shape),
        list(t.stride()),
        t.storage_offset(),
        str(t.dtype),
        t.requires_grad,
    ]


def _result_spec(value: object, inputs: list[torch.Tensor], fresh: set) -> list:
    if value is None:
        return ["none"]
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor or value.layout != torch.strided:
            raise _Unmemoizable
        for i, t in enumerate(inputs):
            if value is t:
                return ["input", i]
        storage = value.untyped_storage()._cdata
        for i, t in enumerate(inputs):
            if t.untyped_storage()._cdata == storage:
                return ["view", i, *_tensor_meta(value)]
        if storage in fresh or value.storage_offset() != 0:
            raise _Unmemoizable  # outputs sharing new memory with each other
        fresh.add(storage)
        return ["new", *_tensor_meta(value)]
    if type(value) in _SCALARS:
        return ["const", value]
    if isinstance(value, (tuple, list)):
        kind = type(value)
        if kind in (tuple, list):
            name = kind.__name__
        elif _resolvable_type(kind):
            name = f"{kind.__module__}.{kind.__qualname__}"
        else:
            raise _Unmemoizable
        return ["seq", name, [_result_spec(v, inputs, fresh) for v in value]]
    raise _Unmemoizable


def _resolvable_type(kind: type) -> bool:
    return kind.__module__ == "torch.return_types" and (
        getattr(torch.return_types, kind.__qualname__, None) is kind
    )


def _rebuild(spec: list, inputs: list[torch.Tensor]) -> object:
    tag = spec[0]
    if tag == "none":
        return None
    if tag == "const":
        return spec[1]
    if tag == "input":
        return inputs[spec[1]]
    if tag == "view":
        shape, stride, offset, _, requires_grad = spec[2:]
        out = inputs[spec[1]].as_strided(shape, stride, offset)
        return out if requires_grad or not out.requires_grad else out.detach()
    if tag == "new":
        shape, stride, _, dtype, requires_grad = spec[1:]
        dtype = getattr(torch, dtype.removeprefix("torch."))
        if requires_grad:
            return _Computed.apply(_anchor(), shape, stride, dtype)
        return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    name, items = spec[1], [_rebuild(s, inputs) for s in spec[2]]
    if name == "tuple":
        return tuple(items)
    if name == "list":
        return items
    return getattr(torch.return_types, name.rsplit(".", 1)[1])(items)


class _Computed(torch.autograd.Function):
    """A new meta tensor made by an op whose inputs require grad: like the op's
    own result, no leaf (an in-place op on a leaf that requires grad is an
    error, so ``h += x`` after a replayed layer would fail)."""

    @staticmethod
    def forward(ctx, anchor, shape, stride, dtype):
        return torch.empty_strided(shape, stride, dtype=dtype, device="meta")

    @staticmethod
    def backward(ctx, grad):  # (capture never differentiates meta tensors)
        return None, None, None, None


@functools.cache
def _anchor() -> torch.Tensor:
    """A meta leaf that requires grad: what ``_Computed`` results derive from."""
    return torch.empty((), device="meta", requires_grad=True)


def _describe(value: object) -> object:
    """What capture reads of an example output, for comparing a replay with it."""
    if isinstance(value, torch.Tensor):
        return ["tensor", type(value), *_tensor_meta(value), value.device]
    if isinstance(value, (tuple, list)):
        return [type(value), [_describe(v) for v in value]]
    return [type(value), value]
