"""What guard checks call at run time: the tensor and hook tests, torch's global
state, closure cells, and the names generated checks see them by.

Kept apart from guards.py (which builds checks from sources) so that a check
rebuilt from a saved entry runs without importing the rest of capture.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch.nn.modules import module as nn_module

# The name guard checks give sys.modules.
MODULES_NAME = "___modules"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """What a tensor input must be. ``dynamic`` names the dims whose size is a
    symbol (any size >= 2; docs/dynamic.md): ``shape`` holds the example's
    there, and the strides must then be dense in the order the example's were
    (``order``, innermost dim first)."""

    type: type
    dtype: torch.dtype
    device: torch.device
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    requires_grad: bool
    dynamic: tuple[tuple[int, str], ...] = ()
    order: tuple[int, ...] = ()

    @classmethod
    def of(
        cls, t: torch.Tensor, dynamic: tuple[tuple[int, str], ...] = ()
    ) -> TensorSpec:
        order = ()
        if dynamic:
            order = tuple(sorted(range(t.dim()), key=lambda d: (t.stride(d), -d)))
        return cls(
            type(t),
            t.dtype,
            t.device,
            tuple(t.shape),
            t.stride(),
            t.requires_grad,
            dynamic,
            order,
        )

    def __str__(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        names = dict(self.dynamic)
        size = ", ".join(names.get(d, str(s)) for d, s in enumerate(self.shape))
        stride = "dense" if self.dynamic else str(list(self.stride))
        return (
            f"{self.type.__name__}({dtype}, {self.device}, size=[{size}], "
            f"stride={stride}, requires_grad={self.requires_grad})"
        )

    def size_difference(self, shape: torch.Size, stride: tuple[int, ...]) -> str:
        """Why ``sizes_match`` fails, in words."""
        if len(shape) != len(self.shape):
            return f"size changed from {list(self.shape)} to {list(shape)}"
        dynamic = dict(self.dynamic)
        for d, size in enumerate(shape):
            if d in dynamic and size < 2:
                return f"size({d}) is {size} (sizes 0 and 1 are never symbolic)"
            if d not in dynamic and size != self.shape[d]:
                return f"size({d}) changed from {self.shape[d]} to {size}"
        return f"stride {list(stride)} is not dense in the order {list(self.order)}"

    def sizes_match(self, shape: torch.Size, stride: tuple[int, ...]) -> bool:
        """Sizes and strides, where some sizes are symbols."""
        if len(shape) != len(self.shape):
            return False
        dynamic = dict(self.dynamic)
        step = 1
        for d in self.order:
            size = shape[d]
            if d in dynamic:
                if size < 2:
                    return False
            elif size != self.shape[d]:
                return False
            if size != 1 and stride[d] != step:
                return False
            step *= size
        return True


# The device types whose autocast capture follows and guards.
AUTOCAST_DEVICES = ("cpu", "cuda")
AutocastState = tuple[tuple[str, torch.dtype], ...] | None


class GlobalState(NamedTuple):
    """torch's global switches that change what a graph computes.

    A named tuple, not a dataclass: it is built and compared on every call."""

    grad_enabled: bool
    default_dtype: torch.dtype
    deterministic: bool
    autocast: AutocastState  # (device type, dtype) per enabled device type
    inference_mode: bool
    dispatch_modes: int  # __torch_dispatch__ modes active (torch code branches on it)

    @classmethod
    def current(cls) -> GlobalState:
        return cls(
            _is_grad_enabled(),
            _get_default_dtype(),
            _deterministic(),
            _autocast(),
            _inference_mode(),
            _dispatch_modes(),
        )


_is_grad_enabled = torch.is_grad_enabled
_get_default_dtype = torch.get_default_dtype
_deterministic = torch.are_deterministic_algorithms_enabled
_inference_mode = torch.is_inference_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_any_autocast = torch._C._is_any_autocast_enabled


def _autocast() -> AutocastState:
    """``(device type, dtype)`` per device type with autocast on, or None when
    none is (one cheap call: the state is read on every guarded call)."""
    if not _any_autocast():
        return None
    return tuple(
        (d, torch.get_autocast_dtype(d))
        for d in AUTOCAST_DEVICES
        if torch.is_autocast_enabled(d)
    )


def tensor_matches(value: object, spec: TensorSpec) -> bool:
    return (
        type(value) is spec.type
        and value.dtype is spec.dtype
        and value.requires_grad is spec.requires_grad
        and (
            spec.sizes_match(value.shape, value.stride())
            if spec.dynamic
            else value.shape == spec.shape and value.stride() == spec.stride
        )
        and value.device == spec.device
    )


def same_objects(values: object, expected: tuple) -> bool:
    return len(values) == len(expected) and all(
        a is b for a, b in zip(values, expected)
    )


def tensor_has_no_grad_hooks(t: torch.Tensor) -> bool:
    """True when a backward accumulating into ``t.grad`` runs no hook of ``t``."""
    return not t._backward_hooks and not getattr(t, "_post_accumulate_grad_hooks", None)


def module_has_no_hooks(module: torch.nn.Module) -> bool:
    """True when calling ``module`` runs exactly its forward (no hooks anywhere)."""
    return not (
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or module._backward_pre_hooks
        or nn_module._global_forward_hooks
        or nn_module._global_forward_pre_hooks
        or nn_module._global_backward_hooks
        or nn_module._global_backward_pre_hooks
    )


def module_has_only_forward_hooks(module: torch.nn.Module) -> bool:
    """True when the only hooks that calling ``module`` runs are its own
    forward hooks and pre-hooks (which capture inlines)."""
    return not (
        module._backward_hooks
        or module._backward_pre_hooks
        or nn_module._global_forward_hooks
        or nn_module._global_forward_pre_hooks
        or nn_module._global_backward_hooks
        or nn_module._global_backward_pre_hooks
    )


class CellView:
    """Reads closure cells by free-variable name, for ``C['name']`` in guards."""

    __slots__ = ("_cells",)

    def __init__(self, names: Sequence[str], cells: Sequence[Any] | None) -> None:
        self._cells = dict(zip(names, cells or ()))

    def __getitem__(self, name: str) -> object:
        return self._cells[name].cell_contents


class CompiledCheck:
    """A generated check ``lambda L, G, C: ...`` bound to one function's
    globals and closure cells; ``check`` is the hot path of every call."""

    def __init__(self, fn: Callable, f_globals: dict, cells: CellView) -> None:
        self._fn = fn
        self._g = f_globals
        self._c = cells

    def check(self, f_locals: dict) -> bool:
        try:
            return self._fn(f_locals, self._g, self._c)
        except Exception:  # a missing attribute or item means the guard failed
            return False

    def failure(self, f_locals: dict) -> str | None:
        """The first guard that fails for ``f_locals``, in words, or None."""
        raise NotImplementedError


# The names a generated check (``lambda L, G, C: ...``) calls its helpers by.
CHECK_SCOPE: dict[str, Any] = {
    "___tensor_matches": tensor_matches,
    "___global_state": GlobalState.current,
    "___no_hooks": module_has_no_hooks,
    "___only_forward_hooks": module_has_only_forward_hooks,
    "___same_objects": same_objects,
    "___no_grad_hooks": tensor_has_no_grad_hooks,
    MODULES_NAME: sys.modules,
}
