"""Matrix products and convolutions: results are row-major (a convolution's
only when its input and weight are)."""

from __future__ import annotations

import torch

from .layout import broadcast, empty, row_major
from .registry import Decline, meta_rule

aten = torch.ops.aten


def _same_dtype(*tensors: torch.Tensor) -> torch.dtype:
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1 or any(
        type(t) is not torch.Tensor or t.device.type != "meta" for t in tensors
    ):
        raise Decline
    return dtypes.pop()


@meta_rule(aten.mm.default)
def _mm(func, a, b) -> torch.Tensor:
    dtype = _same_dtype(a, b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise Decline
    return empty((a.shape[0], b.shape[1]), dtype)


@meta_rule(aten.bmm.default)
def _bmm(func, a, b) -> torch.Tensor:
    dtype = _same_dtype(a, b)
    if (
        a.dim() != 3
        or b.dim() != 3
        or a.shape[0] != b.shape[0]
        or a.shape[2] != b.shape[1]
    ):
        raise Decline
    return empty((a.shape[0], a.shape[1], b.shape[2]), dtype)


@meta_rule(aten.addmm.default, aten.baddbmm.default)
def _add_product(func, bias, a, b, **kwargs) -> torch.Tensor:
    product = (_mm if func is aten.addmm.default else _bmm)(func, a, b)
    _same_dtype(bias, a)
    if broadcast(bias.shape, product.shape) != product.shape:
        raise Decline
    return product


@meta_rule(aten.convolution.default)
def _convolution(
    func, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups
) -> torch.Tensor:
    tensors = [x, weight] if bias is None else [x, weight, bias]
    dtype = _same_dtype(*tensors)
    spatial = x.dim() - 2
    if transposed or spatial < 1 or weight.dim() != x.dim():
        raise Decline
    if not all(row_major(t) for t in tensors):  # other layouts pick theirs
        raise Decline
    if x.shape[1] != weight.shape[1] * groups or weight.shape[0] % groups:
        raise Decline
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise Decline
    sizes = []
    for d in range(spatial):
        reach = dilation[d] * (weight.shape[2 + d] - 1) + 1
        sizes.append((x.shape[2 + d] + 2 * padding[d] - reach) // stride[d] + 1)
    if min(sizes) < 1 or 0 in x.shape:
        raise Decline
    return empty((x.shape[0], weight.shape[0], *sizes), dtype)
