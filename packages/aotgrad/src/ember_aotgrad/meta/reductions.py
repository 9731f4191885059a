"""Reductions over dims of a row-major tensor: sizes from the dims and keepdim,
the dtype from a probe on a tensor of ones of the same rank."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .layout import empty, probe, require_row_major
from .registry import Decline, meta_rule

aten = torch.ops.aten


@meta_rule(
    aten.sum.dim_IntList,
    aten.mean.dim,
    aten.amax.default,
    aten.amin.default,
    aten.sum.default,
    aten.mean.default,
    aten.var.correction,
    aten.std.correction,
    aten.any.dim,
    aten.any.dims,
    aten.all.dim,
    aten.prod.dim_int,
    aten.logsumexp.default,
    aten.argmax.default,
    aten.argmin.default,
)
def _reduction(func, x, *args, **kwargs) -> torch.Tensor:
    (x,) = require_row_major(x)
    if x.numel() == 0:  # eager raises for some (amax), returns identities for others
        raise Decline
    small = probe(func, (x, *args), kwargs, shape=lambda t: (1,) * t.dim())
    dims, keepdim = _reduced_dims(func, x, args, kwargs)
    shape = [
        1 if d in dims else s for d, s in enumerate(x.shape) if keepdim or d not in dims
    ]
    if len(shape) != small.dim():
        raise Decline
    return empty(shape, small.dtype)


def _reduced_dims(func, x, args, kwargs) -> tuple[set[int], bool]:
    names = [a.name for a in func._schema.arguments[1:]]
    bound = dict(zip(names, args)) | kwargs
    dim = bound.get("dim")
    keepdim = bool(bound.get("keepdim", False))
    if dim is None or (isinstance(dim, Sequence) and len(dim) == 0):
        return set(range(x.dim())), keepdim
    dims = [dim] if isinstance(dim, int) else list(dim)
    rank = max(x.dim(), 1)
    return {d % rank for d in dims}, keepdim


@meta_rule(aten.var_mean.correction)
def _var_mean(func, x, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    var = _reduction(aten.var.correction, x, *args, **kwargs)
    return var, empty(var.shape, var.dtype)


@meta_rule(aten.max.dim, aten.min.dim)
def _extreme(func, x, dim, keepdim=False) -> tuple[torch.Tensor, torch.Tensor]:
    values = _reduction(aten.amax.default, x, [dim], keepdim)
    return values, empty(values.shape, torch.int64)
