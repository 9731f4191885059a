"""Decomposition rules for forward ops: activations, norms, losses, reductions,
views and creation ops, written with core aten ops."""

from __future__ import annotations

import math

import torch

from .registry import register_decomposition

aten = torch.ops.aten

_REDUCTION_NONE, _REDUCTION_MEAN, _REDUCTION_SUM = 0, 1, 2


def reduce_dims(x: torch.Tensor, dim) -> list[int]:
    """``dim`` (None, an int or a list; empty means all) as sorted non-negative ints."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted(d % max(x.dim(), 1) for d in dims)


def count(x: torch.Tensor, dims: list[int]) -> int:
    return math.prod(x.shape[d] for d in dims) if x.dim() else 1


def scalar(value, like: torch.Tensor) -> torch.Tensor:
    return aten.scalar_tensor.default(value, dtype=like.dtype, device=like.device)


def sum_keep(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    return aten.sum.dim_IntList(x, dims, True)


def row_major(x: torch.Tensor) -> torch.Tensor:
    """``x``, copied row-major where it is not: what an eager kernel that reads
    a contiguous copy computes on, so its results keep eager's layout."""
    if x.is_contiguous():
        return x
    return aten.clone.default(x, memory_format=torch.contiguous_format)


def suggested_layout(x: torch.Tensor) -> torch.Tensor:
    """``x`` in the layout eager's batch norm writes its results in (the
    input's suggested memory format): channels-last kept, any other layout
    copied row-major."""
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        return x
    if x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d):
        return x
    return row_major(x)


_HALF = (torch.float16, torch.bfloat16)


def opmath(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t`` in float32 when it is a half-precision float: eager's kernels for
    normalizations and softmax compute in float32 and round their results
    once, so the decompositions do the same."""
    if t is None or t.dtype not in _HALF:
        return t
    return aten._to_copy.default(t, dtype=torch.float32)


def cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else aten._to_copy.default(t, dtype=dtype)


def stats_dtype(x: torch.Tensor, *params: torch.Tensor | None) -> torch.dtype:
    """The dtype eager gives a normalization's saved statistics: the first
    parameter's (float32 parameters with a bfloat16 input: mixed precision),
    else the input's."""
    return next((p.dtype for p in params if p is not None), x.dtype)


def apply_reduction(loss: torch.Tensor, reduction: int) -> torch.Tensor:
    if reduction == _REDUCTION_MEAN:
        return aten.div.Scalar(aten.sum.default(loss), loss.numel())
    if reduction == _REDUCTION_SUM:
        return aten.sum.default(loss)
    return loss


# -- activations ---------------------------------------------------------------


@register_decomposition(aten.gelu.default)
def gelu(x, approximate="none"):
    if approximate == "tanh":
        inner = aten.mul.Tensor(x, aten.mul.Tensor(x, x))
        inner = aten.add.Tensor(x, aten.mul.Scalar(inner, 0.044715))
        t = aten.tanh.default(aten.mul.Scalar(inner, math.sqrt(2 / math.pi)))
        return aten.mul.Tensor(aten.mul.Scalar(x, 0.5), aten.add.Scalar(t, 1))
    cdf = aten.erf.default(aten.mul.Scalar(x, 1 / math.sqrt(2)))
    return aten.mul.Tensor(aten.mul.Scalar(x, 0.5), aten.add.Scalar(cdf, 1))


@register_decomposition(aten.silu.default)
def silu(x):
    return aten.mul.Tensor(x, aten.sigmoid.default(x))


@register_decomposition(aten.softplus.default)
def softplus(x, beta=1, threshold=20):
    scaled = aten.mul.Scalar(x, beta)
    soft = aten.div.Scalar(aten.log1p.default(aten.exp.default(scaled)), beta)
    return aten.where.self(aten.gt.Scalar(scaled, threshold), x, soft)


@register_decomposition(aten.mish.default)
def mish(x):
    return aten.mul.Tensor(x, aten.tanh.default(softplus(x)))


@register_decomposition(aten.hardsigmoid.default)
def hardsigmoid(x):
    return aten.div.Scalar(aten.clamp.default(aten.add.Scalar(x, 3), 0, 6), 6)


@register_decomposition(aten.hardswish.default)
def hardswish(x):
    return aten.mul.Tensor(x, hardsigmoid(x))


@register_decomposition(aten.hardtanh.default)
def hardtanh(x, min_val=-1, max_val=1):
    return aten.clamp.default(x, min_val, max_val)


@register_decomposition(aten.threshold.default)
def threshold(x, threshold, value):
    # torch's kernel: ``x <= threshold ? value : x`` (NaN stays NaN)
    return aten.where.self(aten.le.Scalar(x, threshold), scalar(value, x), x)


@register_decomposition(aten.leaky_relu.default)
def leaky_relu(x, negative_slope=0.01):
    return aten.where.self(aten.gt.Scalar(x, 0), x, aten.mul.Scalar(x, negative_slope))


@register_decomposition(aten.elu.default)
def elu(x, alpha=1, scale=1, input_scale=1):
    # torch's expm1 form: the negative side keeps its precision near 0.
    negative = aten.mul.Scalar(
        aten.expm1.default(aten.mul.Scalar(x, input_scale)), alpha * scale
    )
    return aten.where.self(aten.le.Scalar(x, 0), negative, aten.mul.Scalar(x, scale))


@register_decomposition(aten.glu.default)
def glu(x, dim=-1):
    a, b = aten.split.Tensor(x, x.shape[dim] // 2, dim)
    return aten.mul.Tensor(a, aten.sigmoid.default(b))


@register_decomposition(aten.celu.default)
def celu(x, alpha=1.0):
    return elu(x, alpha, 1, 1 / alpha)


@register_decomposition(aten.sgn.default)
def sgn(x):
    # The same as sign for real numbers (norms' gradients call it).
    return NotImplemented if x.is_complex() else aten.sign.default(x)


@register_decomposition(aten._softmax.default)
def softmax(x, dim, half_to_float):
    x = row_major(x)  # (eager's kernel reads a row-major copy: see row_major)
    dtype = torch.float32 if half_to_float else x.dtype
    x = opmath(x)
    shifted = aten.sub.Tensor(x, aten.amax.default(x, [dim], True))
    e = aten.exp.default(shifted)
    return cast(aten.div.Tensor(e, sum_keep(e, [dim])), dtype)


@register_decomposition(aten._log_softmax.default)
def log_softmax(x, dim, half_to_float):
    x = row_major(x)
    dtype = torch.float32 if half_to_float else x.dtype
    x = opmath(x)
    shifted = aten.sub.Tensor(x, aten.amax.default(x, [dim], True))
    lse = aten.log.default(sum_keep(aten.exp.default(shifted), [dim]))
    return cast(aten.sub.Tensor(shifted, lse), dtype)


@register_decomposition(aten._safe_softmax.default)
def safe_softmax(x, dim, dtype=None):
    # Like softmax, but a row that is all -inf gives zeros instead of NaN.
    if dtype is not None:
        x = aten._to_copy.default(x, dtype=dtype)
    out = softmax(x, dim, False)
    masked = aten.eq.Scalar(aten.amax.default(x, [dim], True), -math.inf)
    return aten.where.self(masked, scalar(0, out), out)


# -- normalization -------------------------------------------------------------


@register_decomposition(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    # eager normalizes a row-major copy: its output is row-major whatever x's
    # layout (after a permute, a projection then views it without a copy)
    dtype, stats = x.dtype, stats_dtype(x, weight)
    x = opmath(row_major(x))
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    mean = aten.div.Scalar(sum_keep(x, dims), count(x, dims))
    centered = aten.sub.Tensor(x, mean)
    var = aten.div.Scalar(
        sum_keep(aten.mul.Tensor(centered, centered), dims), count(x, dims)
    )
    rstd = aten.rsqrt.default(aten.add.Scalar(var, eps))
    out = aten.mul.Tensor(centered, rstd)
    if weight is not None:
        out = aten.mul.Tensor(out, opmath(weight))
    if bias is not None:
        out = aten.add.Tensor(out, opmath(bias))
    return cast(out, dtype), cast(mean, stats), cast(rstd, stats)


def channel_shape(x: torch.Tensor) -> list[int]:
    """The shape that broadcasts a per-channel [C] tensor against ``x`` [N, C, ...]."""
    return [1, x.shape[1]] + [1] * (x.dim() - 2)


def _batch_stats(x):
    dims = [0, *range(2, x.dim())]
    n = count(x, dims)
    mean = aten.div.Scalar(aten.sum.dim_IntList(x, dims), n)
    centered = aten.sub.Tensor(x, aten.view.default(mean, channel_shape(x)))
    sq = aten.mul.Tensor(centered, centered)
    var = aten.div.Scalar(aten.sum.dim_IntList(sq, dims), n)
    return mean, var, n


def _normalize(x, mean, invstd, weight, bias):
    """(x - mean) * invstd * weight + bias per channel, in float32 for a
    half-precision ``x``, in ``x``'s dtype."""
    dtype = x.dtype
    x = opmath(suggested_layout(x))
    shape = channel_shape(x)
    out = aten.mul.Tensor(
        aten.sub.Tensor(x, aten.view.default(opmath(mean), shape)),
        aten.view.default(opmath(invstd), shape),
    )
    if weight is not None:
        out = aten.mul.Tensor(out, aten.view.default(opmath(weight), shape))
    if bias is not None:
        out = aten.add.Tensor(out, aten.view.default(opmath(bias), shape))
    return cast(out, dtype)


@register_decomposition(aten._native_batch_norm_legit_functional.default)
def batch_norm_functional(
    x, weight, bias, running_mean, running_var, training, momentum, eps
):
    if not training:
        return NotImplemented
    stats = stats_dtype(x, running_mean, weight)
    mean, var, n = _batch_stats(opmath(x))
    invstd = aten.rsqrt.default(aten.add.Scalar(var, eps))
    # eager normalizes with the statistics it saves, rounded to their dtype
    out = _normalize(x, cast(mean, stats), cast(invstd, stats), weight, bias)
    running = opmath(running_mean), opmath(running_var)
    new_mean = aten.add.Tensor(
        aten.mul.Scalar(running[0], 1 - momentum), aten.mul.Scalar(mean, momentum)
    )
    unbiased = aten.mul.Scalar(var, n / max(n - 1, 1))
    new_var = aten.add.Tensor(
        aten.mul.Scalar(running[1], 1 - momentum), aten.mul.Scalar(unbiased, momentum)
    )
    return (
        out,
        cast(mean, stats),
        cast(invstd, stats),
        cast(new_mean, running_mean.dtype),
        cast(new_var, running_var.dtype),
    )


@register_decomposition(aten._native_batch_norm_legit.no_stats)
def batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    if not training:
        return NotImplemented
    stats = stats_dtype(x, weight)
    mean, var, _ = _batch_stats(opmath(x))
    mean = cast(mean, stats)
    invstd = cast(aten.rsqrt.default(aten.add.Scalar(var, eps)), stats)
    return _normalize(x, mean, invstd, weight, bias), mean, invstd


@register_decomposition(aten._native_batch_norm_legit_no_training.default)
def batch_norm_eval(x, weight, bias, running_mean, running_var, momentum, eps):
    invstd = aten.rsqrt.default(aten.add.Scalar(opmath(running_var), eps))
    out = _normalize(x, running_mean, invstd, weight, bias)
    # Like native_batch_norm in eval mode: no batch statistics are saved.
    stats = stats_dtype(x, running_mean, weight)
    save_mean = aten.full.default([0], 0, dtype=stats, device=x.device)
    save_invstd = aten.full.default([0], 0, dtype=stats, device=x.device)
    return out, save_mean, save_invstd


@register_decomposition(aten.native_group_norm.default)
def native_group_norm(x, weight, bias, n, c, hxw, group, eps):
    dtype, stats = x.dtype, stats_dtype(x, weight)
    x = opmath(x)
    grouped = aten.view.default(x, [n, group, (c // group) * hxw])
    size = grouped.shape[-1]
    mean = aten.div.Scalar(sum_keep(grouped, [2]), size)
    centered = aten.sub.Tensor(grouped, mean)
    var = aten.div.Scalar(sum_keep(aten.mul.Tensor(centered, centered), [2]), size)
    rstd = aten.rsqrt.default(aten.add.Scalar(var, eps))
    out = aten.view.default(aten.mul.Tensor(centered, rstd), list(x.shape))
    shape = channel_shape(x)
    if weight is not None:
        out = aten.mul.Tensor(out, aten.view.default(opmath(weight), shape))
    if bias is not None:
        out = aten.add.Tensor(out, aten.view.default(opmath(bias), shape))
    mean = cast(aten.view.default(mean, [n, group]), stats)
    return cast(out, dtype), mean, cast(aten.view.default(rstd, [n, group]), stats)


# -- linear algebra and reductions ---------------------------------------------


@register_decomposition(aten.addmm.default)
def addmm(bias, m1, m2, beta=1, alpha=1):
    out = aten.mm.default(m1, m2)
    if alpha != 1:
        out = aten.mul.Scalar(out, alpha)
    if beta == 0:
        return out
    return aten.add.Tensor(out, bias if beta == 1 else aten.mul.Scalar(bias, beta))


@register_decomposition(aten.linalg_vector_norm.default)
def linalg_vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None or x.is_complex() or not x.is_floating_point():
        return NotImplemented
    dims = reduce_dims(x, dim)
    if x.numel() == 0 and ord < 0:
        return NotImplemented  # torch raises: let it
    size = aten.abs.default(x)
    if ord == 2:
        return aten.sqrt.default(
            aten.sum.dim_IntList(aten.mul.Tensor(x, x), dims, keepdim)
        )
    if ord == 1:
        return aten.sum.dim_IntList(size, dims, keepdim)
    if ord == math.inf:
        return aten.amax.default(size, dims, keepdim)
    if ord == -math.inf:
        return aten.amin.default(size, dims, keepdim)
    if ord == 0:
        nonzero = aten._to_copy.default(aten.ne.Scalar(x, 0), dtype=x.dtype)
        return aten.sum.dim_IntList(nonzero, dims, keepdim)
    powered = aten.pow.Tensor_Scalar(size, ord)
    return aten.pow.Tensor_Scalar(aten.sum.dim_IntList(powered, dims, keepdim), 1 / ord)


@register_decomposition(aten.mean.dim)
def mean_dim(x, dim, keepdim=False, dtype=None):
    dims = reduce_dims(x, dim)
    return aten.div.Scalar(
        aten.sum.dim_IntList(x, dims, keepdim, dtype=dtype), count(x, dims)
    )


@register_decomposition(aten.mean.default)
def mean(x, dtype=None):
    # Over no elements 0 / 0: NaN, as eager's.
    return aten.div.Scalar(aten.sum.default(x, dtype=dtype), x.numel())


@register_decomposition(aten.var.correction)
def var(x, dim=None, *, correction=None, keepdim=False):
    dims = reduce_dims(x, dim)
    n = count(x, dims)
    centered = aten.sub.Tensor(x, aten.div.Scalar(sum_keep(x, dims), n))
    sq = aten.mul.Tensor(centered, centered)
    # Eager divides by max(n - correction, 0): NaN or inf past the last degree
    # of freedom, never the sign-flipped sum a negative divisor gives.
    denom = max(n - (1 if correction is None else correction), 0)
    return aten.div.Scalar(aten.sum.dim_IntList(sq, dims, keepdim), denom)


@register_decomposition(aten.std.correction)
def std(x, dim=None, *, correction=None, keepdim=False):
    return aten.sqrt.default(var(x, dim, correction=correction, keepdim=keepdim))


@register_decomposition(aten.logsumexp.default)
def logsumexp(x, dim, keepdim=False):
    dims = reduce_dims(x, dim)
    top = aten.amax.default(x, dims, True)
    top = aten.where.self(aten.isinf.default(top), scalar(0, top), top)
    shifted = aten.exp.default(aten.sub.Tensor(x, top))
    if keepdim:
        return aten.add.Tensor(aten.log.default(sum_keep(shifted, dims)), top)
    # The log and the add at the reduced shape, not the kept one: codegen then
    # runs them in the sum's own loop nest (a pointwise stage over the
    # reduction's output sizes), by columns too for a middle or first dim.
    summed = aten.sum.dim_IntList(shifted, dims)
    return aten.add.Tensor(aten.log.default(summed), aten.squeeze.dims(top, dims))


# -- losses and embedding ------------------------------------------------------


def picked_weights(x, target, weight, ignore_index):
    """Per-sample class weights, zero where the target is ignored, and safe targets."""
    keep = aten.ne.Scalar(target, ignore_index)
    safe = aten.where.self(keep, target, scalar(0, target))
    w = aten._to_copy.default(keep, dtype=x.dtype)
    if weight is not None:
        w = aten.mul.Tensor(w, aten.index_select.default(weight, 0, safe))
    return safe, w


@register_decomposition(aten.nll_loss_forward.default)
def nll_loss_forward(x, target, weight, reduction, ignore_index):
    if x.dim() not in (1, 2):
        return NotImplemented
    x2 = x if x.dim() == 2 else aten.unsqueeze.default(x, 0)
    t2 = target if target.dim() == 1 else aten.unsqueeze.default(target, 0)
    safe, w = picked_weights(x2, t2, weight, ignore_index)
    picked = aten.squeeze.dim(
        aten.gather.default(x2, 1, aten.unsqueeze.default(safe, 1)), 1
    )
    loss = aten.neg.default(aten.mul.Tensor(picked, w))
    total = aten.sum.default(w)
    if reduction == _REDUCTION_MEAN:
        return aten.div.Tensor(aten.sum.default(loss), total), total
    if reduction == _REDUCTION_SUM:
        return aten.sum.default(loss), total
    return (loss if x.dim() == 2 else aten.squeeze.dim(loss, 0)), total


@register_decomposition(aten.mse_loss.default)
def mse_loss(x, target, reduction=_REDUCTION_MEAN):
    diff = aten.sub.Tensor(x, target)
    return apply_reduction(aten.mul.Tensor(diff, diff), reduction)


@register_decomposition(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if not indices.is_contiguous():
        indices = aten.clone.default(indices, memory_format=torch.contiguous_format)
    flat = aten.view.default(indices, [-1])
    rows = aten.index_select.default(weight, 0, flat)
    return aten.view.default(rows, [*indices.shape, weight.shape[1]])


# -- views ---------------------------------------------------------------------


def _permutation_swapping(rank: int, a: int, b: int) -> list[int]:
    perm = list(range(rank))
    perm[a % max(rank, 1)], perm[b % max(rank, 1)] = (
        perm[b % max(rank, 1)],
        perm[a % max(rank, 1)],
    )
    return perm


@register_decomposition(aten.transpose.int)
def transpose(x, dim0, dim1):
    if x.dim() == 0:
        return aten.alias.default(x)
    return aten.permute.default(x, _permutation_swapping(x.dim(), dim0, dim1))


@register_decomposition(aten.t.default)
def t(x):
    if x.dim() < 2:
        return aten.alias.default(x)
    return aten.permute.default(x, [1, 0])


@register_decomposition(aten._unsafe_view.default)
def unsafe_view(x, size):
    return aten.view.default(x, size)


@register_decomposition(aten.split.Tensor)
def split(x, split_size, dim=0):
    dim = dim % x.dim()
    length = x.shape[dim]
    starts = range(0, max(length, 1), split_size) if length else [0]
    return [aten.slice.Tensor(x, dim, s, min(s + split_size, length)) for s in starts]


@register_decomposition(aten.split_with_sizes.default)
def split_with_sizes(x, split_sizes, dim=0):
    dim = dim % x.dim()
    starts = [sum(split_sizes[:i]) for i in range(len(split_sizes))]
    return [aten.slice.Tensor(x, dim, s, s + n) for s, n in zip(starts, split_sizes)]


@register_decomposition(aten.unbind.int)
def unbind(x, dim=0):
    return [aten.select.int(x, dim, i) for i in range(x.shape[dim])]


# -- creation and data movement ------------------------------------------------


def _float_default(kwargs: dict) -> dict:
    return {**kwargs, "dtype": kwargs.get("dtype") or torch.get_default_dtype()}


@register_decomposition(aten.zeros.default)
def zeros(size, **kwargs):
    return aten.full.default(size, 0, **_float_default(kwargs))


@register_decomposition(aten.ones.default)
def ones(size, **kwargs):
    return aten.full.default(size, 1, **_float_default(kwargs))


@register_decomposition(aten.zeros_like.default)
def zeros_like(x, **kwargs):
    return aten.full_like.default(x, 0, **kwargs)


@register_decomposition(aten.ones_like.default)
def ones_like(x, **kwargs):
    return aten.full_like.default(x, 1, **kwargs)


def _like(x, kwargs: dict) -> dict:
    return {
        "dtype": kwargs.get("dtype") or x.dtype,
        "device": kwargs.get("device") or x.device,
    }


@register_decomposition(aten.new_zeros.default)
def new_zeros(x, size, **kwargs):
    return aten.full.default(size, 0, **_like(x, kwargs))


@register_decomposition(aten.new_ones.default)
def new_ones(x, size, **kwargs):
    return aten.full.default(size, 1, **_like(x, kwargs))


@register_decomposition(aten.new_full.default)
def new_full(x, size, fill_value, **kwargs):
    return aten.full.default(size, fill_value, **_like(x, kwargs))


@register_decomposition(aten.new_empty.default)
def new_empty(x, size, **kwargs):
    return aten.empty.memory_format(size, **_like(x, kwargs))


@register_decomposition(aten.new_empty_strided.default)
def new_empty_strided(x, size, stride, **kwargs):
    return aten.empty_strided.default(size, stride, **_like(x, kwargs))


@register_decomposition(aten.copy.default)
def copy(x, src, non_blocking=False):
    if src.dtype != x.dtype or src.device != x.device:
        src = aten._to_copy.default(src, dtype=x.dtype, device=x.device)
    if src.shape != x.shape:  # (an expand to the same shape would make a view
        src = aten.expand.default(src, list(x.shape))  # a compiler must store)
    return aten.clone.default(src)


@register_decomposition(aten.fill.Scalar)
def fill(x, value):
    return aten.full_like.default(x, value)


@register_decomposition(aten.fill.Tensor)
def fill_tensor(x, value):
    return copy(x, value)


@register_decomposition(aten.zero.default)
def zero(x):
    return aten.full_like.default(x, 0)


@register_decomposition(aten.masked_fill.Scalar)
def masked_fill(x, mask, value):
    return aten.where.self(mask, scalar(value, x), x)


@register_decomposition(aten.masked_fill.Tensor)
def masked_fill_tensor(x, mask, value):
    return aten.where.self(mask, aten._to_copy.default(value, dtype=x.dtype), x)


@register_decomposition(aten.rsub.Scalar)
def rsub(x, other, alpha=1):
    scaled = x if alpha == 1 else aten.mul.Scalar(x, alpha)
    return aten.add.Scalar(aten.neg.default(scaled), other)


@register_decomposition(aten.rsub.Tensor)
def rsub_tensor(x, other, alpha=1):
    return aten.sub.Tensor(other, x, alpha=alpha)


@register_decomposition(aten.stack.default)
def stack(tensors, dim=0):
    dim = dim % (tensors[0].dim() + 1)
    return aten.cat.default([aten.unsqueeze.default(t, dim) for t in tensors], dim)


def _band(x, diagonal, lower: bool):
    rows, cols = x.shape[-2], x.shape[-1]
    r = aten.unsqueeze.default(aten.arange.default(rows, device=x.device), 1)
    c = aten.arange.default(cols, device=x.device)
    offset = aten.sub.Tensor(c, r)
    keep = (
        aten.le.Scalar(offset, diagonal) if lower else aten.ge.Scalar(offset, diagonal)
    )
    return aten.where.self(keep, x, scalar(0, x))


@register_decomposition(aten.tril.default)
def tril(x, diagonal=0):
    return _band(x, diagonal, lower=True)


@register_decomposition(aten.triu.default)
def triu(x, diagonal=0):
    return _band(x, diagonal, lower=False)
