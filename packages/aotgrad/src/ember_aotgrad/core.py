"""The core aten op set: what a fully decomposed aten graph may contain.

Compilers downstream of aotgrad can rely on these ops (plus ``operator.getitem``)
when every op in a graph has a decomposition; docs/aotgrad.md lists them by group.
An op outside the set with no rule stays whole and runs through torch.
"""

from __future__ import annotations

import operator

import torch

aten = torch.ops.aten

_POINTWISE_DEFAULTS = (
    *("abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p"),
    *("sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan"),
    *("sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf", "erfc"),
    *("erfinv", "sign", "floor", "ceil", "round", "trunc", "frac", "relu"),
    *("logical_not", "logical_and", "logical_or", "logical_xor", "bitwise_not"),
    *("isnan", "isinf", "nan_to_num", "maximum", "minimum", "atan2"),
    *("clamp_min", "clamp_max", "clone", "_to_copy"),
)

POINTWISE = frozenset(
    {
        *(getattr(aten, name).default for name in _POINTWISE_DEFAULTS),
        aten.bitwise_and.Tensor,
        aten.bitwise_or.Tensor,
        aten.bitwise_xor.Tensor,
        aten.clamp.default,
        aten.clamp.Tensor,
        *(
            getattr(getattr(aten, name), overload)
            for name in ("add", "sub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge")
            for overload in ("Tensor", "Scalar")
        ),
        aten.div.Tensor_mode,
        aten.pow.Tensor_Scalar,
        aten.pow.Tensor_Tensor,
        aten.pow.Scalar,
        aten.fmod.Tensor,
        aten.fmod.Scalar,
        aten.remainder.Tensor,
        aten.remainder.Scalar,
        aten.where.self,
        # One fused multiply-add in torch's kernel: decomposed, it would round twice.
        aten.lerp.Scalar,
        aten.lerp.Tensor,
        aten.addcmul.default,
    }
)

REDUCTIONS = frozenset(
    {
        aten.sum.default,
        aten.sum.dim_IntList,
        aten.prod.default,
        aten.prod.dim_int,
        aten.amax.default,
        aten.amin.default,
        aten.argmax.default,
        aten.argmin.default,
        aten.max.dim,
        aten.min.dim,
        aten.any.default,
        aten.any.dim,
        aten.all.default,
        aten.all.dim,
        aten.cumsum.default,
        # A max over each window, with its argmax: kept whole so a compiler
        # lowers the window; its backward decomposes to scatter_add.
        aten.max_pool2d_with_indices.default,
        # Sums over windows (avg_pool1d arrives as avg_pool2d); the backward is
        # a sum, at each input element, over the windows that hold it.
        aten.avg_pool2d.default,
        aten.avg_pool2d_backward.default,
    }
)

VIEWS = frozenset(
    {
        aten.view.default,
        aten.permute.default,
        aten.expand.default,
        aten.slice.Tensor,
        aten.select.int,
        aten.unsqueeze.default,
        aten.squeeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.as_strided.default,
        aten.diagonal.default,
        aten.alias.default,
    }
)

INDEXING = frozenset(
    {
        aten.cat.default,
        aten.index.Tensor,
        aten.index_put.default,
        aten.index_select.default,
        aten.gather.default,
        aten.scatter.src,
        aten.scatter.value,
        aten.scatter_add.default,
        aten.select_scatter.default,
        aten.slice_scatter.default,
        aten.diagonal_scatter.default,
        aten.as_strided_scatter.default,
        aten.constant_pad_nd.default,
        aten.flip.default,
        aten.repeat.default,
    }
)

CREATION = frozenset(
    {
        aten.full.default,
        aten.full_like.default,
        aten.scalar_tensor.default,
        aten.empty.memory_format,
        aten.empty_strided.default,
        aten.empty_like.default,
        aten.arange.default,
        aten.arange.start_step,
    }
)

RANDOM = frozenset(
    {
        aten.bernoulli.p,
        aten.native_dropout.default,
        aten.normal.float_float,
        aten.rand.default,
        aten.randn.default,
        aten.rand_like.default,
        aten.randn_like.default,
    }
)

# Kept whole: compilers call a library kernel for these.
LIBRARY_CALLS = frozenset(
    {
        aten.mm.default,
        aten.bmm.default,
        aten.convolution.default,
        aten.convolution_backward.default,
    }
)

CORE_OPS = POINTWISE | REDUCTIONS | VIEWS | INDEXING | CREATION | RANDOM | LIBRARY_CALLS

# Ops the min-cut partitioner may recompute in the backward instead of saving.
RECOMPUTABLE = POINTWISE | VIEWS | CREATION


def is_core(target: object) -> bool:
    """Whether a graph node target is in the core op set."""
    return target in CORE_OPS or target is operator.getitem
