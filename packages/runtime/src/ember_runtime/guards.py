"""Fast guard checks: a data-only GuardSpec compiled into one check callable.

The tensor checks (exact type, dtype, device, sizes, strides, requires_grad) run in
C++ (``ember_runtime._guards``) when the extension was built, or in Python otherwise;
both answer the same for every input. Everything else is one caller-supplied
callable. docs/runtime.md describes the spec and how the umbrella builds it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

try:
    from . import _guards as _native
except ImportError:  # built without a C++ compiler: the Python check serves alone
    _native = None

PURE_PYTHON_ENV = "EMBER_PURE_PYTHON_GUARDS"


@dataclass(frozen=True, slots=True)
class TensorCheck:
    """What one tensor read from the frame must be; ``name`` is for messages."""

    name: str
    type: type
    dtype: torch.dtype
    device: torch.device
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    requires_grad: bool

    @classmethod
    def of(cls, name: str, t: torch.Tensor) -> TensorCheck:
        """The check that ``t`` itself passes."""
        return cls(
            name,
            type(t),
            t.dtype,
            t.device,
            tuple(t.shape),
            t.stride(),
            t.requires_grad,
        )

    def matches(self, value: object) -> bool:
        """Whether ``value`` passes; may raise for objects that are not tensors."""
        return (
            type(value) is self.type
            and value.dtype is self.dtype
            and value.requires_grad is self.requires_grad
            and value.shape == self.shape
            and value.stride() == self.stride
            and value.device == self.device
        )

    def difference(self, value: object) -> str:
        """The first field that differs, as ``field changed from OLD to NEW``."""
        if type(value) is not self.type:
            return (
                f"type changed from {_qualname(self.type)} to {_qualname(type(value))}"
            )
        for field in ("dtype", "device", "requires_grad"):
            old, new = getattr(self, field), getattr(value, field)
            if new != old:
                return f"{field} changed from {old} to {new}"
        if tuple(value.shape) != self.shape:
            return (
                f"size changed from {list(self.shape)} to {list(value.shape)}"
                f"{_dims_changed(self.shape, tuple(value.shape))}"
            )
        return f"stride changed from {list(self.stride)} to {list(value.stride())}"


@dataclass(frozen=True, slots=True)
class GuardSpec:
    """Everything one entry's guards check, for ``compile_guards``.

    ``read(f_locals)`` returns the guarded tensors, in the order of ``tensors``.
    ``other(f_locals)`` is every guard that is not a tensor check (None: none);
    ``other_failure(f_locals)`` names its first failing guard in words. Any
    Exception raised by ``read``, ``other`` or ``first`` means the guards do
    not hold. ``first(f_locals)``, when given, checks what the reads depend on
    (the types along each read's path), and the order is then ``first``, the
    tensors, ``other``; without it, ``other`` runs before the reads
    (docs/runtime.md). ``first_failure`` names its failing guard.
    """

    tensors: tuple[TensorCheck, ...]
    read: Callable[[dict], Iterable[object]]
    other: Callable[[dict], object] | None = None
    other_failure: Callable[[dict], str | None] | None = None
    first: Callable[[dict], object] | None = None
    first_failure: Callable[[dict], str | None] | None = None


class GuardCheck:
    """A compiled GuardSpec: ``check`` is the hot path, ``failure`` the slow one.

    ``check(f_locals) -> bool`` holds when ``first`` and ``other`` are truthy
    and ``read`` yields exactly one matching value per TensorCheck. ``native``
    says whether the tensor checks run in C++.
    """

    __slots__ = ("check", "native", "spec")

    def __init__(self, spec: GuardSpec, native: bool | None = None) -> None:
        if native is None:
            native = native_available() and not os.environ.get(PURE_PYTHON_ENV)
        if native and _native is None:
            raise RuntimeError(
                "ember_runtime._guards (the C++ guard extension) is not built; "
                "reinstall ember-runtime with a C++ compiler or pass native=False"
            )
        self.spec = spec
        self.native = native
        self.check: Callable[[dict], bool] = (
            _native_check(spec) if native else _python_check(spec)
        )

    def failure(self, f_locals: dict) -> str | None:
        """The first failing guard with its old and new value; None if all hold."""
        spec = self.spec
        for check, named_by in (
            (spec.first, spec.first_failure),
            (spec.other, spec.other_failure),
        ):
            if check is None:
                continue
            try:
                ok = check(f_locals)
            except Exception as e:
                ok, error = False, e
            else:
                error = None
            if not ok:
                named = named_by(f_locals) if named_by else None
                if named is not None:
                    return named
                if error is not None:
                    return f"a guard could not be evaluated ({_describe(error)})"
                return "a guard on a non-tensor value failed"
        try:
            values = tuple(spec.read(f_locals))
        except Exception as e:
            return f"the guarded tensors could not be read ({_describe(e)})"
        if len(values) != len(spec.tensors):
            return f"read {len(values)} tensors, guards expect {len(spec.tensors)}"
        for value, tensor in zip(values, spec.tensors):
            try:
                if not tensor.matches(value):
                    return f"{tensor.name}: {tensor.difference(value)}"
            except Exception:
                return f"{tensor.name}: type changed to {_qualname(type(value))}"
        return None


def compile_guards(spec: GuardSpec, native: bool | None = None) -> GuardCheck:
    """Compile ``spec``. ``native=None`` picks C++ when it is built and the
    environment variable EMBER_PURE_PYTHON_GUARDS is unset or empty."""
    return GuardCheck(spec, native)


def native_available() -> bool:
    """Whether the C++ guard extension was built and imports."""
    return _native is not None


def _native_check(spec: GuardSpec) -> Callable[[dict], bool]:
    rows = [
        (t.type, t.dtype, t.device, t.shape, t.stride, t.requires_grad)
        for t in spec.tensors
    ]
    return _native.Checker(rows, spec.read, spec.other, spec.first).check


def _python_check(spec: GuardSpec) -> Callable[[dict], bool]:
    tensors, read, other, n = spec.tensors, spec.read, spec.other, len(spec.tensors)
    first = spec.first

    def tensors_match(f_locals: dict) -> bool:
        values = tuple(read(f_locals))
        return len(values) == n and all(map(TensorCheck.matches, tensors, values))

    def check(f_locals: dict) -> bool:
        try:
            if first is None:  # (the reads depend on what other checks)
                return (other is None or bool(other(f_locals))) and tensors_match(
                    f_locals
                )
            return (
                bool(first(f_locals))
                and tensors_match(f_locals)
                and (other is None or bool(other(f_locals)))
            )
        except Exception:
            return False

    return check


def _qualname(t: type) -> str:
    return t.__qualname__


def _describe(e: Exception) -> str:
    return f"{type(e).__name__}: {e}"


def _dims_changed(old: tuple[int, ...], new: tuple[int, ...]) -> str:
    """`` (size(0): 4 -> 5)``: the dims that changed, when the rank did not."""
    if len(old) != len(new):
        return ""
    dims = [
        f"size({d}): {a} -> {b}" for d, (a, b) in enumerate(zip(old, new)) if a != b
    ]
    return f" ({', '.join(dims)})"
