"""Ops of neural networks over row-major inputs: those that keep their input's
shape (softmax, scans, triangles), normalizations, embedding, pooling and
concatenation."""

from __future__ import annotations

import math

import torch

from .layout import (
    broadcast,
    channels_last_like,
    channels_last_strides,
    empty,
    operands,
    plain_meta,
    probe,
    require_row_major,
    row_major_strides,
)
from .registry import Decline, meta_rule

aten = torch.ops.aten


@meta_rule(
    aten._softmax.default,
    aten._log_softmax.default,
    aten._safe_softmax.default,
    aten.triu.default,
    aten.tril.default,
    aten.cumsum.default,
    aten.cumprod.default,
)
def _like_input(func, x, *args, **kwargs) -> torch.Tensor:
    """A result of the input's shape, row-major (eager's CPU kernels for these
    make their input contiguous first)."""
    (x,) = require_row_major(x)
    small = probe(func, (x, *args), kwargs, shape=lambda t: (1,) * t.dim())
    return empty(x.shape, small.dtype)


@meta_rule(aten._softmax_backward_data.default, aten._log_softmax_backward_data.default)
def _softmax_backward(func, grad, out, dim, input_dtype) -> torch.Tensor:
    require_row_major((grad, out))
    if grad.shape != out.shape or not grad.dtype == out.dtype == input_dtype:
        raise Decline
    if not -max(grad.dim(), 1) <= dim < max(grad.dim(), 1):
        raise Decline
    return empty(grad.shape, input_dtype)


@meta_rule(aten.native_layer_norm.default)
def _layer_norm(func, x, normalized_shape, weight, bias, eps) -> tuple:
    require_row_major((x, weight, bias))
    axis = x.dim() - len(normalized_shape)
    if axis < 0 or tuple(x.shape[axis:]) != tuple(normalized_shape):
        raise Decline
    if any(
        t is not None and tuple(t.shape) != tuple(normalized_shape)
        for t in (weight, bias)
    ):
        raise Decline
    # the stand-ins keep the normalized dims (small) and one row
    rows = (1,) * axis

    def shape(t):
        return tuple(t.shape) if t is not x else rows + tuple(normalized_shape)

    _, mean, _ = probe(func, (x, normalized_shape, weight, bias, eps), {}, shape)
    stats = tuple(x.shape[:axis]) + (1,) * len(normalized_shape)
    return (
        empty(x.shape, x.dtype),
        empty(stats, mean.dtype),
        empty(stats, mean.dtype),
    )


@meta_rule(aten.embedding.default)
def _embedding(func, weight, indices, *args, **kwargs) -> torch.Tensor:
    require_row_major(weight)
    operands(indices, plain_meta)  # any strides: the result is row-major
    if weight.dim() != 2 or indices.dtype not in (torch.int64, torch.int32):
        raise Decline
    return empty((*indices.shape, weight.shape[1]), weight.dtype)


@meta_rule(aten.native_batch_norm.default)
def _batch_norm(func, x, weight, bias, mean, var, training, momentum, eps) -> tuple:
    require_row_major((x, weight, bias, mean, var))
    if x.dim() < 2:
        raise Decline
    channels = x.shape[1]
    if any(t is not None and tuple(t.shape) != (channels,) for t in (weight, bias)):
        raise Decline

    def shape(t):  # one element per channel: eval mode's statistics are empty
        return (1, channels) + (1,) * (x.dim() - 2) if t is x else tuple(t.shape)

    args = (x, weight, bias, mean, var, training, momentum, eps)
    _, save_mean, save_invstd = probe(func, args, {}, shape)
    if save_mean.shape[0] not in (0, channels):
        raise Decline
    stats = (save_mean.shape[0],)
    return (
        empty(x.shape, x.dtype),
        empty(stats, save_mean.dtype),
        empty(stats, save_invstd.dtype),
    )


def _pooled(size, kernel, stride, padding, dilation, ceil_mode) -> int:
    """One dim of a pooling window's output, as torch sizes it."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


@meta_rule(aten.max_pool2d_with_indices.default)
def _max_pool2d(
    func, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False
) -> tuple:
    (x,) = require_row_major(x)
    if x.dim() not in (3, 4) or x.numel() == 0:
        raise Decline

    def pair(v):
        v = [v] if isinstance(v, int) else list(v)
        return v * 2 if len(v) == 1 else v

    kernel, padding, dilation = pair(kernel), pair(padding), pair(dilation)
    stride = pair(stride) if stride else kernel
    if len(kernel) != 2 or any(2 * p > k for p, k in zip(padding, kernel)):
        raise Decline
    spatial = [
        _pooled(
            x.shape[-2 + d], kernel[d], stride[d], padding[d], dilation[d], ceil_mode
        )
        for d in range(2)
    ]
    if min(spatial) < 1:
        raise Decline
    shape = (*x.shape[:-2], *spatial)
    return empty(shape, x.dtype), empty(shape, torch.int64)


@meta_rule(aten.cat.default)
def _cat(func, tensors, dim=0) -> torch.Tensor:
    """Eager skips 1-D empty tensors (a cache's empty past), and its result is
    channels-last when every input suggests that format, else row-major."""
    everything = operands(list(tensors), plain_meta)
    parts = [t for t in everything if tuple(t.shape) != (0,)]
    if not parts:
        raise Decline
    rank = parts[0].dim()
    if rank == 0 or any(t.dim() != rank for t in parts) or rank == 5:
        raise Decline
    if not -rank <= dim < rank:
        raise Decline
    dim %= rank
    rest = {tuple(t.shape[:dim]) + tuple(t.shape[dim + 1 :]) for t in parts}
    if len(rest) != 1:
        raise Decline
    shape = list(parts[0].shape)
    shape[dim] = sum(t.shape[dim] for t in parts)

    def stand_in(t):
        return (0,) if tuple(t.shape) == (0,) else (1,) * rank

    dtype = probe(func, (list(tensors), dim), {}, shape=stand_in).dtype
    if rank == 4 and all(channels_last_like(t) for t in everything):
        strides = channels_last_strides(shape)
    else:
        strides = row_major_strides(shape)
    return torch.empty_strided(shape, strides, dtype=dtype, device="meta")


@meta_rule(aten.index_select.default)
def _index_select(func, x, dim, index) -> torch.Tensor:
    """Row-major whatever the input's strides, as eager's CPU kernel makes it."""
    (x,) = operands(x, plain_meta)
    require_row_major(index)
    if index.dim() > 1 or index.dtype not in (torch.int64, torch.int32):
        raise Decline
    if not -x.dim() <= dim < x.dim():  # (a 0-dim input too)
        raise Decline
    shape = list(x.shape)
    shape[dim % x.dim()] = index.numel()
    return empty(shape, x.dtype)


@meta_rule(aten.index.Tensor)
def _index(func, x, indices) -> torch.Tensor:
    """Integer index tensors leading the dims (``x[i, j]``, ``x[i]``): the
    indexed dims become the indices' broadcast shape, row-major."""
    require_row_major(x)
    given = list(indices)
    if not given or len(given) > x.dim() or any(i is None for i in given):
        raise Decline
    require_row_major(given)
    if any(i.dtype not in (torch.int64, torch.int32) for i in given):
        raise Decline  # a mask's result size depends on its values
    shape = (*broadcast(*(i.shape for i in given)), *x.shape[len(given) :])
    if 0 in shape:
        raise Decline  # eager's strides for an empty result follow its own rule
    return empty(shape, x.dtype)


@meta_rule(aten.gather.default)
def _gather(func, x, dim, index, *, sparse_grad=False) -> torch.Tensor:
    """The index's shape, row-major, whatever the input's strides."""
    operands(x, plain_meta)
    operands(index, plain_meta)
    if index.dtype != torch.int64 or index.dim() != x.dim() or sparse_grad:
        raise Decline
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise Decline
    others = [d for d in range(x.dim()) if d != dim % x.dim()]
    if any(index.shape[d] > x.shape[d] for d in others):
        raise Decline  # eager raises
    return empty(index.shape, x.dtype)


@meta_rule(aten._unsafe_view.default)
def _unsafe_view(func, x, size) -> torch.Tensor:
    """A row-major tensor read with new sizes (one may be -1)."""
    require_row_major(x)
    shape = list(size)
    if shape.count(-1) == 1:
        known = 1
        for s in shape:
            known *= s if s != -1 else 1
        if known == 0 or x.numel() % known:
            raise Decline
        shape[shape.index(-1)] = x.numel() // known
    if any(s < 0 for s in shape) or math.prod(shape) != x.numel():
        raise Decline
    return empty(shape, x.dtype)
