"""Tensors made from sizes and numbers on the meta device: row-major, the dtype
from a probe of the same call with one element on the CPU."""

from __future__ import annotations

import math

import torch

from .layout import empty, probe
from .registry import Decline, meta_rule

aten = torch.ops.aten


def _on_meta(kwargs: dict) -> None:
    device = kwargs.get("device")
    if device is None or torch.device(device).type != "meta":
        raise Decline
    if kwargs.get("layout") not in (None, torch.strided) or kwargs.get("pin_memory"):
        raise Decline


@meta_rule(aten.full.default)
def _full(func, size, fill_value, **kwargs) -> torch.Tensor:
    _on_meta(kwargs)
    dtype = probe(func, ((1,) * len(size), fill_value), kwargs).dtype
    return empty(size, dtype)


@meta_rule(aten.scalar_tensor.default)
def _scalar_tensor(func, value, **kwargs) -> torch.Tensor:
    _on_meta(kwargs)
    return empty((), probe(func, (value,), kwargs).dtype)


@meta_rule(aten.arange.start_step)
def _arange(func, start, end, step=1, **kwargs) -> torch.Tensor:
    _on_meta(kwargs)
    numbers = (start, end, step)
    if not all(type(n) in (int, float) for n in numbers) or step == 0:
        raise Decline
    # the same Python types (they choose the dtype), one element
    dtype = probe(
        func, tuple(type(n)(v) for n, v in zip(numbers, (0, 1, 1))), kwargs
    ).dtype
    if all(type(n) is int for n in numbers):
        length = -((start - end) // step)
    elif dtype.is_floating_point and all(math.isfinite(n) for n in numbers):
        length = math.ceil((end - start) / step)
    else:  # float bounds in an integer dtype: eager truncates them first
        raise Decline
    if length < 0:
        raise Decline
    return empty((length,), dtype)


@meta_rule(aten.ones.default, aten.zeros.default)
def _filled(func, size, **kwargs) -> torch.Tensor:
    _on_meta(kwargs)
    return empty(size, probe(func, ((1,) * len(size),), kwargs).dtype)


@meta_rule(aten.arange.default, aten.arange.start)
def _arange_from(func, *numbers, **kwargs) -> torch.Tensor:
    start, end = (0, *numbers) if len(numbers) == 1 else numbers
    return _arange(aten.arange.start_step, start, end, 1, **kwargs)


@meta_rule(aten.new_empty.default, aten.new_zeros.default, aten.new_ones.default)
def _new(func, x, size, **kwargs) -> torch.Tensor:
    if type(x) is not torch.Tensor or x.device.type != "meta":
        raise Decline
    _on_meta({**kwargs, "device": kwargs.get("device") or x.device})
    return empty(size, probe(func, (x, (1,) * len(size)), kwargs).dtype)


@meta_rule(aten.select_backward.default, aten.slice_backward.default)
def _gradient_of_a_view(func, grad, input_sizes, *args) -> torch.Tensor:
    """The gradient of a select or slice: zeros of the input's sizes."""
    if type(grad) is not torch.Tensor or grad.device.type != "meta":
        raise Decline
    return empty(input_sizes, grad.dtype)
