"""Decomposition rules for the backward ops autograd calls: activation, softmax,
norm, loss, embedding, pooling and dropout gradients, written with core aten ops."""

from __future__ import annotations

import math

import torch

from .forward import (
    _REDUCTION_MEAN,
    _REDUCTION_NONE,
    cast,
    channel_shape,
    count,
    opmath,
    picked_weights,
    row_major,
    scalar,
    sum_keep,
)
from .registry import register_decomposition

aten = torch.ops.aten


@register_decomposition(aten.sigmoid_backward.default)
def sigmoid_backward(grad, y):
    return aten.mul.Tensor(grad, aten.mul.Tensor(y, aten.rsub.Scalar(y, 1)))


@register_decomposition(aten.tanh_backward.default)
def tanh_backward(grad, y):
    return aten.mul.Tensor(grad, aten.rsub.Scalar(aten.mul.Tensor(y, y), 1))


@register_decomposition(aten.threshold_backward.default)
def threshold_backward(grad, x, threshold):
    return aten.where.self(aten.le.Scalar(x, threshold), scalar(0, grad), grad)


@register_decomposition(aten.gelu_backward.default)
def gelu_backward(grad, x, approximate="none"):
    if approximate == "tanh":
        k, c = math.sqrt(2 / math.pi), 0.044715
        x_sq = aten.mul.Tensor(x, x)
        inner = aten.mul.Scalar(
            aten.add.Tensor(x, aten.mul.Scalar(aten.mul.Tensor(x_sq, x), c)), k
        )
        t = aten.tanh.default(inner)
        d_inner = aten.mul.Scalar(aten.add.Scalar(aten.mul.Scalar(x_sq, 3 * c), 1), k)
        d_tanh = aten.rsub.Scalar(aten.mul.Tensor(t, t), 1)
        right = aten.mul.Tensor(
            aten.mul.Tensor(aten.mul.Scalar(x, 0.5), d_tanh), d_inner
        )
        left = aten.mul.Scalar(aten.add.Scalar(t, 1), 0.5)
        return aten.mul.Tensor(grad, aten.add.Tensor(left, right))
    cdf = aten.mul.Scalar(
        aten.add.Scalar(aten.erf.default(aten.mul.Scalar(x, 1 / math.sqrt(2))), 1), 0.5
    )
    pdf = aten.mul.Scalar(
        aten.exp.default(aten.mul.Scalar(aten.mul.Tensor(x, x), -0.5)),
        1 / math.sqrt(2 * math.pi),
    )
    return aten.mul.Tensor(grad, aten.add.Tensor(cdf, aten.mul.Tensor(x, pdf)))


@register_decomposition(aten.silu_backward.default)
def silu_backward(grad, x):
    s = aten.sigmoid.default(x)
    slope = aten.add.Scalar(aten.mul.Tensor(x, aten.rsub.Scalar(s, 1)), 1)
    return aten.mul.Tensor(grad, aten.mul.Tensor(s, slope))


@register_decomposition(aten.hardswish_backward.default)
def hardswish_backward(grad, x):
    # eager's corners: 0 at -3 itself, the whole gradient at 3 itself
    middle = aten.mul.Tensor(grad, aten.add.Scalar(aten.div.Scalar(x, 3), 0.5))
    inner = aten.where.self(aten.lt.Scalar(x, 3), middle, grad)
    return aten.where.self(aten.le.Scalar(x, -3), scalar(0, grad), inner)


@register_decomposition(aten.hardsigmoid_backward.default)
def hardsigmoid_backward(grad, x):
    inside = aten.logical_and.default(aten.gt.Scalar(x, -3), aten.lt.Scalar(x, 3))
    return aten.where.self(inside, aten.div.Scalar(grad, 6), scalar(0, grad))


@register_decomposition(aten.leaky_relu_backward.default)
def leaky_relu_backward(grad, x, negative_slope, self_is_result):
    return aten.where.self(
        aten.gt.Scalar(x, 0), grad, aten.mul.Scalar(grad, negative_slope)
    )


@register_decomposition(aten.elu_backward.default)
def elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result):
    negative_scale = alpha * scale
    if is_result:  # from the output y: y + alpha * scale is the slope's part
        slope = aten.mul.Scalar(
            aten.add.Scalar(self_or_result, negative_scale), input_scale
        )
    else:
        slope = aten.mul.Scalar(
            aten.exp.default(aten.mul.Scalar(self_or_result, input_scale)),
            input_scale * negative_scale,
        )
    return aten.where.self(
        aten.le.Scalar(self_or_result, 0),
        aten.mul.Tensor(grad, slope),
        aten.mul.Scalar(grad, scale),
    )


@register_decomposition(aten.glu_backward.default)
def glu_backward(grad, x, dim):
    a, b = aten.split.Tensor(x, x.shape[dim] // 2, dim)
    gate = aten.sigmoid.default(b)
    grad_a = aten.mul.Tensor(grad, gate)
    slope = aten.mul.Tensor(gate, aten.rsub.Scalar(gate, 1))
    grad_b = aten.mul.Tensor(aten.mul.Tensor(grad, a), slope)
    return aten.cat.default([grad_a, grad_b], dim)


@register_decomposition(aten.hardtanh_backward.default)
def hardtanh_backward(grad, x, min_val, max_val):
    outside = aten.logical_or.default(
        aten.le.Scalar(x, min_val), aten.ge.Scalar(x, max_val)
    )
    return aten.where.self(outside, scalar(0, grad), grad)


@register_decomposition(aten.softplus_backward.default)
def softplus_backward(grad, x, beta, threshold):
    scaled = aten.mul.Scalar(x, beta)
    z = aten.exp.default(scaled)
    soft = aten.div.Tensor(aten.mul.Tensor(grad, z), aten.add.Scalar(z, 1))
    return aten.where.self(aten.gt.Scalar(scaled, threshold), grad, soft)


@register_decomposition(aten.native_dropout_backward.default)
def native_dropout_backward(grad, mask, scale):
    return aten.mul.Tensor(
        grad, aten.mul.Scalar(aten._to_copy.default(mask, dtype=grad.dtype), scale)
    )


@register_decomposition(aten._softmax_backward_data.default)
def softmax_backward(grad, out, dim, input_dtype):
    grad, out = opmath(grad), opmath(out)
    gi = aten.mul.Tensor(
        out, aten.sub.Tensor(grad, sum_keep(aten.mul.Tensor(grad, out), [dim]))
    )
    return cast(gi, input_dtype)


@register_decomposition(aten._log_softmax_backward_data.default)
def log_softmax_backward(grad, out, dim, input_dtype):
    grad, out = opmath(grad), opmath(out)
    gi = aten.sub.Tensor(
        grad, aten.mul.Tensor(aten.exp.default(out), sum_keep(grad, [dim]))
    )
    return cast(gi, input_dtype)


@register_decomposition(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(
    grad, x, normalized_shape, mean, rstd, weight, bias, mask
):
    dtypes = _grad_dtypes(x, weight, bias)
    # (as eager's kernel: row-major copies, computed in float32 for halves)
    x, grad = opmath(row_major(x)), opmath(row_major(grad))
    mean, rstd, weight = opmath(mean), opmath(rstd), opmath(weight)
    axis = x.dim() - len(normalized_shape)
    inner = list(range(axis, x.dim()))
    outer = list(range(axis))
    n = count(x, inner)
    x_hat = aten.mul.Tensor(aten.sub.Tensor(x, mean), rstd)
    g_hat = grad if weight is None else aten.mul.Tensor(grad, weight)
    d_input = d_weight = d_bias = None
    if mask[0]:
        a = aten.mul.Scalar(g_hat, n)
        b = sum_keep(g_hat, inner)
        c = aten.mul.Tensor(x_hat, sum_keep(aten.mul.Tensor(g_hat, x_hat), inner))
        diff = aten.sub.Tensor(aten.sub.Tensor(a, b), c)
        d_input = aten.mul.Tensor(aten.div.Scalar(rstd, n), diff)
    if mask[1]:
        d_weight = _sum_over(aten.mul.Tensor(grad, x_hat), outer)
    if mask[2]:
        d_bias = _sum_over(grad, outer)
    return _cast_grads((d_input, d_weight, d_bias), dtypes)


def _grad_dtypes(x, weight, bias) -> tuple[torch.dtype, ...]:
    """The dtypes of a normalization's gradients: the input's, the weight's
    and the bias's (eager computes them in float32 for halves, then rounds)."""
    w = weight.dtype if weight is not None else x.dtype
    return x.dtype, w, bias.dtype if bias is not None else w


def _cast_grads(grads, dtypes):
    return tuple(None if g is None else cast(g, d) for g, d in zip(grads, dtypes))


def _sum_over(x, dims):
    return aten.sum.dim_IntList(x, dims) if dims else aten.clone.default(x)


@register_decomposition(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(
    grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps, mask
):
    dtypes = _grad_dtypes(x, weight, weight)
    x, grad, weight = opmath(x), opmath(grad), opmath(weight)
    dims = [0, *range(2, x.dim())]
    shape = channel_shape(x)
    if train:
        mean, invstd = opmath(save_mean), opmath(save_invstd)
    else:
        mean, invstd = (
            opmath(running_mean),
            aten.rsqrt.default(aten.add.Scalar(opmath(running_var), eps)),
        )
    centered = aten.sub.Tensor(x, aten.view.default(mean, shape))
    grad_sum = aten.sum.dim_IntList(grad, dims)
    dot = aten.sum.dim_IntList(aten.mul.Tensor(grad, centered), dims)
    scale = invstd if weight is None else aten.mul.Tensor(invstd, weight)
    d_input = d_weight = d_bias = None
    if mask[0]:
        if train:
            n = count(x, dims)
            proj = aten.div.Scalar(
                aten.mul.Tensor(dot, aten.mul.Tensor(invstd, invstd)), n
            )
            d = aten.sub.Tensor(
                grad, aten.mul.Tensor(centered, aten.view.default(proj, shape))
            )
            d = aten.sub.Tensor(
                d, aten.view.default(aten.div.Scalar(grad_sum, n), shape)
            )
        else:
            d = grad
        d_input = aten.mul.Tensor(d, aten.view.default(scale, shape))
    if mask[1]:
        d_weight = aten.mul.Tensor(dot, invstd)
    if mask[2]:
        d_bias = grad_sum
    return _cast_grads((d_input, d_weight, d_bias), dtypes)


@register_decomposition(aten.native_group_norm_backward.default)
def native_group_norm_backward(grad, x, mean, rstd, weight, n, c, hxw, group, mask):
    dtypes = _grad_dtypes(x, weight, weight)
    x, grad, weight = opmath(x), opmath(grad), opmath(weight)
    mean, rstd = opmath(mean), opmath(rstd)
    size = (c // group) * hxw
    grouped_x = aten.view.default(x, [n, group, size])
    mean3 = aten.view.default(mean, [n, group, 1])
    rstd3 = aten.view.default(rstd, [n, group, 1])
    x_hat = aten.mul.Tensor(aten.sub.Tensor(grouped_x, mean3), rstd3)
    flat_grad = aten.view.default(grad, [n, c, hxw])
    d_input = d_weight = d_bias = None
    if mask[0]:
        g = flat_grad
        if weight is not None:
            g = aten.mul.Tensor(g, aten.view.default(weight, [1, c, 1]))
        g = aten.view.default(g, [n, group, size])
        diff = aten.sub.Tensor(aten.mul.Scalar(g, size), sum_keep(g, [2]))
        diff = aten.sub.Tensor(
            diff, aten.mul.Tensor(x_hat, sum_keep(aten.mul.Tensor(g, x_hat), [2]))
        )
        d = aten.mul.Tensor(aten.div.Scalar(rstd3, size), diff)
        d_input = aten.view.default(d, list(x.shape))
    if mask[1]:
        x_hat_c = aten.view.default(x_hat, [n, c, hxw])
        d_weight = aten.sum.dim_IntList(aten.mul.Tensor(flat_grad, x_hat_c), [0, 2])
    if mask[2]:
        d_bias = aten.sum.dim_IntList(flat_grad, [0, 2])
    return _cast_grads((d_input, d_weight, d_bias), dtypes)


@register_decomposition(aten.nll_loss_backward.default)
def nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    if x.dim() not in (1, 2):
        return NotImplemented
    x2 = x if x.dim() == 2 else aten.unsqueeze.default(x, 0)
    t2 = target if target.dim() == 1 else aten.unsqueeze.default(target, 0)
    safe, w = picked_weights(x2, t2, weight, ignore_index)
    coef = aten.neg.default(w)
    if reduction == _REDUCTION_MEAN:
        coef = aten.div.Tensor(coef, total_weight)
    g = (
        grad
        if reduction != _REDUCTION_NONE or x.dim() == 2
        else aten.unsqueeze.default(grad, 0)
    )
    values = aten.unsqueeze.default(aten.mul.Tensor(coef, g), 1)
    zeros = aten.full_like.default(x2, 0)
    out = aten.scatter.src(zeros, 1, aten.unsqueeze.default(safe, 1), values)
    return out if x.dim() == 2 else aten.squeeze.dim(out, 0)


@register_decomposition(aten.mse_loss_backward.default)
def mse_loss_backward(grad, x, target, reduction):
    norm = 2 / x.numel() if reduction == _REDUCTION_MEAN else 2
    return aten.mul.Tensor(aten.mul.Scalar(aten.sub.Tensor(x, target), norm), grad)


@register_decomposition(aten.embedding_dense_backward.default)
def embedding_dense_backward(
    grad, indices, num_weights, padding_idx, scale_grad_by_freq
):
    if scale_grad_by_freq:
        return NotImplemented
    dim = grad.shape[-1]
    if not indices.is_contiguous():
        indices = aten.clone.default(indices, memory_format=torch.contiguous_format)
    flat = aten.view.default(indices, [-1])
    if not grad.is_contiguous():
        grad = aten.clone.default(grad, memory_format=torch.contiguous_format)
    rows = aten.view.default(grad, [-1, dim])
    if padding_idx >= 0:
        keep = aten.ne.Scalar(aten.unsqueeze.default(flat, 1), padding_idx)
        rows = aten.where.self(keep, rows, scalar(0, rows))
    zeros = aten.full.default(
        [num_weights, dim], 0, dtype=grad.dtype, device=grad.device
    )
    return aten.index_put.default(zeros, [flat], rows, True)


@register_decomposition(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(
    grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    # Each output's gradient goes to the input element its index names (flat
    # over the last two dims), added in output order as torch's kernel does.
    *batch, height, width = x.shape
    grad = aten.clone.default(grad, memory_format=torch.contiguous_format)
    indices = aten.clone.default(indices, memory_format=torch.contiguous_format)
    zeros = aten.full.default(
        [*batch, height * width], 0, dtype=grad.dtype, device=grad.device
    )
    summed = aten.scatter_add.default(
        zeros,
        len(batch),
        aten.view.default(indices, [*batch, -1]),
        aten.view.default(grad, [*batch, -1]),
    )
    return aten.view.default(summed, list(x.shape))
