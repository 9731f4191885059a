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
    shape, small = _reduced(func, x, args, kwargs)
    return empty(shape, small.dtype)


def _reduced(func, x, args, kwargs) -> tuple[list[int], object]:
    """The result's sizes, and the op's result on a stand-in of ones of the
    same rank (its dtypes; it raises where the dims are out of range)."""
    (x,) = require_row_major(x)
    if x.numel() == 0:  # eager raises for some (amax), returns identities for others
        raise Decline
    # two elements a dim: a variance of one element would warn (torch turns a
    # kernel's warnings into Python ones only when the outermost call returns,
    # past any filter set here)
    small = probe(func, (x, *args), kwargs, shape=lambda t: (2,) * t.dim())
    dims, keepdim = _reduced_dims(func, x, args, kwargs)
    shape = [
        1 if d in dims else s for d, s in enumerate(x.shape) if keepdim or d not in dims
    ]
    first = small[0] if isinstance(small, tuple) else small
    if len(shape) != first.dim():
        raise Decline
    return shape, small


def _reduced_dims(func, x, args, kwargs) -> tuple[set[int], bool]:
    names = [a.name for a in func._schema.arguments[1:]]
    bound = dict(zip(names, args)) | kwargs
    dim = bound.get("dim")
    keepdim = bool(bound.get("keepdim", False))
    if isinstance(dim, Sequence) and len(dim) == 0:
        raise Decline  # all dims for some ops, none for others (any.dims)
    if dim is None:
        return set(range(x.dim())), keepdim
    dims = [dim] if isinstance(dim, int) else list(dim)
    rank = max(x.dim(), 1)
    return {d % rank for d in dims}, keepdim


@meta_rule(aten.var_mean.correction)
def _var_mean(func, x, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    shape, (var, mean) = _reduced(func, x, args, kwargs)
    return empty(shape, var.dtype), empty(shape, mean.dtype)


@meta_rule(aten.max.dim, aten.min.dim)
def _extreme(func, x, dim, keepdim=False) -> tuple[torch.Tensor, torch.Tensor]:
    values = _reduction(aten.amax.default, x, [dim], keepdim)
    return values, empty(values.shape, torch.int64)
