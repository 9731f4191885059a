"""Lowering rules for reductions (sum, mean, amax, var, argmax, max.dim, any,
...), the composites built from them (softmax, log_softmax, layer_norm), and
the extern library kernels (matmul and convolution through torch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..ir.indexing import ZERO, Index, Indirect
from ..ir.nodes import Expr, IndexValue, ReduceKind
from .core import (
    TV,
    Lowerer,
    Unsupported,
    cast,
    constant,
    extern,
    register,
)
from .layout import index_test
from .pointwise import call

aten = torch.ops.aten

# A float32 sum over more elements than this accumulates in float64: our loop
# adds in order, where torch's cascade sum keeps the error small for long rows.
LONG_SUM = 4096


def _dims(a: TV, dims) -> list[int]:
    nd = len(a.sizes)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(nd))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % max(nd, 1) for d in dims}) if nd else []


def reduce(
    lo: Lowerer,
    a: TV,
    dims: Sequence[int],
    kind: ReduceKind,
    dtype: torch.dtype,
    fn: Callable[[Expr, tuple], Expr] | None = None,
) -> TV:
    """``a`` reduced over ``dims`` (no keepdim); ``fn(value, out_index)`` maps each
    loaded element first."""
    kept = [d for d in range(len(a.sizes)) if d not in dims]
    reduce_sizes = [a.sizes[d] for d in dims]
    numel = 1
    for s in reduce_sizes:
        numel *= s
    acc = (
        torch.float64
        if kind == ReduceKind.SUM and dtype == torch.float32 and numel > LONG_SUM
        else None
    )

    def body(index, rindex):
        value = cast(_reduced_load(lo, a, dims, index, rindex), dtype)
        return fn(value, index) if fn else value

    return lo.reduction(
        [a.sizes[d] for d in kept], reduce_sizes, kind, dtype, body, acc
    )


def _reduced_load(lo: Lowerer, a: TV, dims: Sequence[int], index, rindex) -> Expr:
    """``a`` at output index ``index`` (its kept dims) and ``rindex`` (``dims``)."""
    src = [ZERO] * len(a.sizes)
    kept = [d for d in range(len(a.sizes)) if d not in dims]
    for d, i in zip(kept, index):
        src[d] = i
    for d, r in zip(dims, rindex):
        src[d] = r
    return lo.load(a, src)


def keep_dims(lo: Lowerer, red: TV, ndim: int, dims: Sequence[int]) -> TV:
    """``red`` viewed with size-1 dims put back at ``dims``: a view, as torch's
    keepdim result is the reduction's own memory (so a graph output that views
    it again aliases the reduction's buffer instead of copying it twice)."""
    it = iter(red.sizes)
    sizes = [1 if d in dims else next(it) for d in range(ndim)]
    kept = [d for d in range(ndim) if d not in dims]
    return lo.pointwise(
        sizes, red.dtype, lambda i: lo.load(red, [i[d] for d in kept]), view=True
    )


def _finish(lo: Lowerer, red: TV, a: TV, dims, keepdim: bool) -> TV:
    return keep_dims(lo, red, len(a.sizes), dims) if keepdim else red


def _map(lo: Lowerer, t: TV, fn: Callable[[Expr], Expr]) -> TV:
    return lo.pointwise(t.sizes, t.dtype, lambda i: fn(lo.load(t, i)))


def _out_dtype(lo: Lowerer) -> torch.dtype:
    meta = lo.out_meta
    return (meta[0] if isinstance(meta, (tuple, list)) else meta).dtype


@register(aten.sum.dim_IntList, aten.sum.default)
def _sum(lo: Lowerer, a: TV, dim=None, keepdim=False, *, dtype=None):
    dims = _dims(a, dim)
    return _finish(
        lo, reduce(lo, a, dims, ReduceKind.SUM, _out_dtype(lo)), a, dims, keepdim
    )


@register(aten.prod.dim_int, aten.prod.default)
def _prod(lo: Lowerer, a: TV, dim=None, keepdim=False, *, dtype=None):
    dims = _dims(a, dim)
    return _finish(
        lo, reduce(lo, a, dims, ReduceKind.PROD, _out_dtype(lo)), a, dims, keepdim
    )


def _extreme(kind: ReduceKind):
    def rule(lo: Lowerer, a: TV, dim=None, keepdim=False):
        dims = _dims(a, dim)
        if any(a.sizes[d] == 0 for d in dims):
            raise Unsupported  # torch raises on an empty max; let it say so
        return _finish(lo, reduce(lo, a, dims, kind, a.dtype), a, dims, keepdim)

    return rule


register(aten.amax.default, aten.max.default)(_extreme(ReduceKind.MAX))
register(aten.amin.default, aten.min.default)(_extreme(ReduceKind.MIN))


def arg_extreme(lo: Lowerer, a: TV, dims: Sequence[int], kind: ReduceKind) -> TV:
    """The int64 flat position (row-major over ``dims``) of the first maximum
    (``ARGMAX``) or minimum (``ARGMIN``) of ``a``, NaN counting as both."""
    if any(a.sizes[d] == 0 for d in dims):
        raise Unsupported  # torch raises on an empty argmax; let it say so
    kept = [d for d in range(len(a.sizes)) if d not in dims]
    return lo.reduction(
        [a.sizes[d] for d in kept],
        [a.sizes[d] for d in dims],
        kind,
        torch.int64,
        lambda index, rindex: _reduced_load(lo, a, dims, index, rindex),
        acc_dtype=a.dtype,
    )


def _arg_rule(kind: ReduceKind):
    def rule(lo: Lowerer, a: TV, dim=None, keepdim=False):
        if a.dtype == torch.bool:
            raise Unsupported  # torch's argmax rejects bool; let it say so
        dims = _dims(a, dim)
        out = arg_extreme(lo, a, dims, kind)
        if keepdim:  # without a dim, every dim is kept as size 1
            return keep_dims(lo, out, len(a.sizes), dims)
        return out

    return rule


register(aten.argmax.default)(_arg_rule(ReduceKind.ARGMAX))
register(aten.argmin.default)(_arg_rule(ReduceKind.ARGMIN))


def _extreme_dim(kind: ReduceKind, values_only: ReduceKind):
    def rule(lo: Lowerer, a: TV, dim: int, keepdim=False):
        dims = _dims(a, dim)
        if lo.items_read == frozenset({0}):
            # Nobody reads the indices (`x.max(d).values`): the values are
            # amax's, which compare equal (they may differ from the first
            # maximum's bits only between tied -0.0 and 0.0, as Inductor's),
            # one reduction without positions, shared with the graph's own amax.
            values = _extreme(values_only)(lo, a, dim, keepdim)
            return values, None
        at = arg_extreme(lo, a, dims, kind)
        d = dims[0] if dims else None

        def value(index):
            # The element at the returned position, so the value is exactly
            # torch's (the first of tied -0.0 and 0.0, NaN's own bits).
            if d is None:  # a 0-d input: its only element
                return lo.load(a, [])
            src = list(index)
            src.insert(d, Index(((Indirect(lo.load(at, index), a.sizes[d]), 1),)))
            return lo.load(a, src)

        values = lo.pointwise(at.sizes, a.dtype, value)
        return _finish(lo, values, a, dims, keepdim), _finish(lo, at, a, dims, keepdim)

    return rule


register(aten.max.dim)(_extreme_dim(ReduceKind.ARGMAX, ReduceKind.MAX))
register(aten.min.dim)(_extreme_dim(ReduceKind.ARGMIN, ReduceKind.MIN))


def _pair(value) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])


def _clamped(position: Index, size: int) -> Index:
    """``position`` clamped into ``[0, size)``, as an index term."""
    zero, last = constant(0, torch.int64), constant(size - 1, torch.int64)
    value = call("minimum", call("maximum", IndexValue(position), zero), last)
    return Index(((Indirect(value, size), 1),))


@register(aten.max_pool2d_with_indices.default)
def _max_pool2d(
    lo: Lowerer, x: TV, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False
):
    """The indices as the argmax over each window (of several NaNs the last, as
    torch) and the values as the elements there; where only the values are
    read (inference), the max over each window (NaN if any is NaN) alone. A
    window position in the padding reads the nearest input row or column
    instead of -inf: with unit dilation that element is in the same window and
    comes first in scan order exactly where torch's first valid element would,
    so values, ties and all -inf windows match torch. Windows that never leave
    the input read it without clamping (plain strided loads, which a kernel
    can run by columns)."""
    kernel = _pair(kernel_size)
    step = _pair(stride) if stride else kernel
    pad = _pair(padding)
    if _pair(dilation) != (1, 1) or not x.dtype.is_floating_point:
        raise Unsupported
    values_meta, indices_meta = lo.out_meta
    batch, (height, width) = len(x.sizes) - 2, x.sizes[-2:]
    outs = values_meta.shape[-2:]
    inside = [
        pad[a] == 0 and (outs[a] - 1) * step[a] + kernel[a] <= x.sizes[batch + a]
        for a in range(2)
    ]

    def place(out: Index, window: Index, axis: int) -> Index:
        position = out * step[axis] + window - pad[axis]
        if inside[axis]:
            return position
        return _clamped(position, (height, width)[axis])

    def at(index, rows: Index, cols: Index) -> list[Index]:
        row, col = place(index[batch], rows, 0), place(index[batch + 1], cols, 1)
        return [*index[:batch], row, col]

    def window(index, rindex) -> Expr:
        return lo.load(x, at(index, *rindex))

    shape = list(values_meta.shape)
    if lo.items_read == frozenset({0}):
        # Nobody reads the indices (inference): the max alone.
        values = lo.reduction(
            shape,
            list(kernel),
            ReduceKind.MAX,
            x.dtype,
            window,
            strides=values_meta.stride(),
        )
        return values, None
    position = lo.reduction(
        shape,
        list(kernel),
        ReduceKind.ARGMAX_LAST_NAN,
        torch.int64,
        window,
        acc_dtype=x.dtype,
    )

    def found(index) -> tuple[Index, Index]:
        window_size = kernel[0] * kernel[1]
        at_max = Index(((Indirect(lo.load(position, index), window_size), 1),))
        return at_max // kernel[1], at_max % kernel[1]

    def flat(index) -> Expr:
        *_, row, col = at(index, *found(index))
        return IndexValue(row * width + col)

    # The values are the elements at the positions, as torch's are.
    values = lo.pointwise(
        shape, x.dtype, lambda index: window(index, found(index)), values_meta.stride()
    )
    indices = lo.pointwise(indices_meta.shape, torch.int64, flat, indices_meta.stride())
    return values, indices


def _int(value: Index | int) -> Expr:
    if isinstance(value, int):
        return constant(value, torch.int64)
    return IndexValue(value)


def _inside(position: Index, size: int) -> Expr:
    """Whether ``position`` lies in ``[0, size)``."""
    low, high = index_test("ge", position, 0), index_test("lt", position, size)
    return call("and", low, high, dtype=torch.bool)


def _window_divisor(
    starts: tuple[Index, Index], pool: PoolShape, dtype: torch.dtype
) -> Expr:
    """What avg_pool2d divides a window's sum by, as torch computes it: the
    override, or the window's size clipped to the padded input (with
    count_include_pad) or to the input itself."""
    if pool.divisor_override:
        return constant(pool.divisor_override, dtype)
    counts = []
    for start, k, p, size in zip(starts, pool.kernel, pool.pad, pool.sizes):
        first = _int(start)
        last = call("minimum", call("add", first, _int(k)), _int(size + p))
        if not pool.count_include_pad:
            first = call("maximum", first, _int(0))
            last = call("minimum", last, _int(size))
        counts.append(call("sub", last, first))
    return cast(call("mul", *counts), dtype)


@dataclass(frozen=True)
class PoolShape:
    """avg_pool2d's arguments, per dim (height, width)."""

    kernel: tuple[int, int]
    step: tuple[int, int]
    pad: tuple[int, int]
    sizes: tuple[int, int]  # the input's height and width
    count_include_pad: bool
    divisor_override: int | None


def _pool_shape(x: TV, kernel_size, stride, padding, count_include_pad, divisor):
    kernel = _pair(kernel_size)
    return PoolShape(
        kernel,
        _pair(stride) if stride else kernel,
        _pair(padding),
        tuple(x.sizes[-2:]),
        count_include_pad,
        divisor,
    )


@register(aten.avg_pool2d.default)
def _avg_pool2d(
    lo: Lowerer,
    x: TV,
    kernel_size,
    stride=(),
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    """A sum over each window of the input elements inside it (padding adds
    nothing), divided as torch divides."""
    if not x.dtype.is_floating_point:
        raise Unsupported
    pool = _pool_shape(
        x, kernel_size, stride, padding, count_include_pad, divisor_override
    )
    out, batch = lo.out_meta, len(x.sizes) - 2

    def starts(index) -> tuple[Index, Index]:
        return tuple(index[batch + d] * pool.step[d] - pool.pad[d] for d in range(2))

    def element(index, rindex):
        rows, cols = (start + r for start, r in zip(starts(index), rindex))
        inside = call(
            "and",
            _inside(rows, pool.sizes[0]),
            _inside(cols, pool.sizes[1]),
            dtype=torch.bool,
        )
        at = [
            *index[:batch],
            _clamped(rows, pool.sizes[0]),
            _clamped(cols, pool.sizes[1]),
        ]
        return call(
            "select", inside, lo.load(x, at), constant(0, x.dtype), dtype=x.dtype
        )

    total = lo.reduction(
        list(out.shape), list(pool.kernel), ReduceKind.SUM, x.dtype, element
    )
    return lo.pointwise(
        out.shape,
        x.dtype,
        lambda index: call(
            "div", lo.load(total, index), _window_divisor(starts(index), pool, x.dtype)
        ),
        out.stride(),
    )


@register(aten.avg_pool2d_backward.default)
def _avg_pool2d_backward(
    lo: Lowerer,
    grad: TV,
    x: TV,
    kernel_size,
    stride,
    padding,
    ceil_mode,
    count_include_pad,
    divisor_override,
):
    """Each input element sums grad / divisor over the windows that hold it:
    at most ceil(kernel / stride) per dim, the last of them at output
    (position + pad) // stride."""
    if not x.dtype.is_floating_point:
        raise Unsupported
    pool = _pool_shape(
        x, kernel_size, stride, padding, count_include_pad, divisor_override
    )
    out, batch = lo.out_meta, len(x.sizes) - 2
    outputs = grad.sizes[-2:]
    reach = [-(-k // s) for k, s in zip(pool.kernel, pool.step)]

    def element(index, rindex):
        windows, tests = [], []
        for d in range(2):
            last = (index[batch + d] + pool.pad[d]) // pool.step[d]
            w = last - rindex[d]
            start = w * pool.step[d] - pool.pad[d]
            reaches = call(
                "lt",
                call("sub", _int(index[batch + d]), _int(start)),
                _int(pool.kernel[d]),
                dtype=torch.bool,
            )
            tests.append(call("and", _inside(w, outputs[d]), reaches, dtype=torch.bool))
            windows.append(w)
        at = [*index[:batch], *(_clamped(w, n) for w, n in zip(windows, outputs))]
        starts = tuple(w * pool.step[d] - pool.pad[d] for d, w in enumerate(windows))
        share = call(
            "div", lo.load(grad, at), _window_divisor(starts, pool, grad.dtype)
        )
        valid = call("and", *tests, dtype=torch.bool)
        return call("select", valid, share, constant(0, grad.dtype), dtype=grad.dtype)

    total = lo.reduction(list(out.shape), reach, ReduceKind.SUM, grad.dtype, element)
    return lo.pointwise(
        out.shape, grad.dtype, lambda i: lo.load(total, i), out.stride()
    )


def _cumulative(kind: ReduceKind):
    # torch folds a float32 cumsum in float64 on CPU (its accumulate type), and
    # integers and bools in int64.
    def rule(lo: Lowerer, a: TV, dim: int, *, dtype=None):
        out = lo.out_meta
        if not a.sizes or out.dtype not in (torch.float32, torch.float64, torch.int64):
            raise Unsupported
        acc = torch.float64 if out.dtype.is_floating_point else torch.int64
        # Each element is first rounded to the output dtype, as torch converts
        # the input before folding (int64 or float64 into float32 rounds).
        return lo.scan(
            out,
            _dims(a, dim)[0],
            kind,
            acc,
            lambda index: cast(lo.load(a, index), out.dtype),
        )

    return rule


register(aten.cumsum.default)(_cumulative(ReduceKind.SUM))
register(aten.cumprod.default)(_cumulative(ReduceKind.PROD))


def _truth(kind: ReduceKind):
    # any is a max of bools (false < true), all is a min; NaN is true, as in torch.
    def rule(lo: Lowerer, a: TV, dim=None, keepdim=False):
        dims = _dims(a, dim)
        out = reduce(lo, a, dims, kind, _out_dtype(lo))
        return _finish(lo, out, a, dims, keepdim)

    return rule


register(aten.any.default, aten.any.dim, aten.any.dims)(_truth(ReduceKind.MAX))
register(aten.all.default, aten.all.dim, aten.all.dims)(_truth(ReduceKind.MIN))


def _count(a: TV, dims) -> int:
    n = 1
    for d in dims:
        n *= a.sizes[d]
    return n


def mean(lo: Lowerer, a: TV, dims, dtype: torch.dtype) -> TV:
    total = reduce(lo, a, dims, ReduceKind.SUM, dtype)
    n = _count(a, dims)
    return _map(lo, total, lambda s: call("div", s, constant(n, dtype)))


@register(aten.mean.dim, aten.mean.default)
def _mean(lo: Lowerer, a: TV, dim=None, keepdim=False, *, dtype=None):
    out = _out_dtype(lo)
    if not out.is_floating_point:
        raise Unsupported
    dims = _dims(a, dim)
    return _finish(lo, mean(lo, a, dims, out), a, dims, keepdim)


def variance(lo: Lowerer, a: TV, dims, correction, dtype) -> tuple[TV, TV]:
    """(var, mean) over ``dims``, both without keepdim; two passes in one loop nest."""
    m = mean(lo, a, dims, dtype)

    def centered_square(value, index):
        d = call("sub", value, lo.load(m, index))
        return call("mul", d, d)

    squares = reduce(lo, a, dims, ReduceKind.SUM, dtype, centered_square)
    n = _count(a, dims) - correction
    var = _map(lo, squares, lambda s: call("div", s, constant(max(n, 0), dtype)))
    return var, m


def _correction(correction) -> float:
    return 1 if correction is None else correction


@register(aten.var.correction)
def _var(lo: Lowerer, a: TV, dim=None, *, correction=None, keepdim=False):
    if not a.dtype.is_floating_point:
        raise Unsupported
    dims = _dims(a, dim)
    var, _ = variance(lo, a, dims, _correction(correction), a.dtype)
    return _finish(lo, var, a, dims, keepdim)


@register(aten.var_mean.correction)
def _var_mean(lo: Lowerer, a: TV, dim=None, *, correction=None, keepdim=False):
    if not a.dtype.is_floating_point:
        raise Unsupported
    dims = _dims(a, dim)
    var, m = variance(lo, a, dims, _correction(correction), a.dtype)
    return _finish(lo, var, a, dims, keepdim), _finish(lo, m, a, dims, keepdim)


# --- composites ------------------------------------------------------------------


def _softmax_parts(lo: Lowerer, a: TV, dim: int):
    if not a.dtype.is_floating_point or _out_dtype(lo) != a.dtype:
        raise Unsupported
    dims = _dims(a, dim)
    if any(a.sizes[d] == 0 for d in dims):
        raise Unsupported
    biggest = reduce(lo, a, dims, ReduceKind.MAX, a.dtype)
    kept = [d for d in range(len(a.sizes)) if d not in dims]

    def at_row(t: TV, index) -> Expr:
        return lo.load(t, [index[d] for d in kept])

    def shifted(value: Expr, row) -> Expr:
        return call("sub", value, lo.load(biggest, row))

    total = reduce(
        lo,
        a,
        dims,
        ReduceKind.SUM,
        a.dtype,
        lambda v, row: call("exp", shifted(v, row)),
    )
    return biggest, total, at_row


@register(aten._softmax.default)
def _softmax(lo: Lowerer, a: TV, dim: int, half_to_float: bool):
    biggest, total, at_row = _softmax_parts(lo, a, dim)

    def body(index):
        x = lo.load(a, index)
        e = call("exp", call("sub", x, at_row(biggest, index)))
        # torch's softmax kernel scales by the reciprocal of the sum, as here.
        return call("mul", e, call("reciprocal", at_row(total, index)))

    return lo.pointwise(a.sizes, a.dtype, body, lo.out_meta.stride())


@register(aten._log_softmax.default)
def _log_softmax(lo: Lowerer, a: TV, dim: int, half_to_float: bool):
    biggest, total, at_row = _softmax_parts(lo, a, dim)

    def body(index):
        shifted = call("sub", lo.load(a, index), at_row(biggest, index))
        return call("sub", shifted, call("log", at_row(total, index)))

    return lo.pointwise(a.sizes, a.dtype, body, lo.out_meta.stride())


@register(aten.native_layer_norm.default)
def _layer_norm(lo: Lowerer, a: TV, normalized_shape, weight, bias, eps: float):
    out_meta = lo.out_meta[0]
    if not a.dtype.is_floating_point or out_meta.dtype != a.dtype:
        raise Unsupported
    dims = list(range(len(a.sizes) - len(normalized_shape), len(a.sizes)))
    var, m = variance(lo, a, dims, 0, a.dtype)
    rstd = _map(
        lo, var, lambda v: call("rsqrt", call("add", v, constant(eps, a.dtype)))
    )
    kept = [d for d in range(len(a.sizes)) if d not in dims]
    offset = len(kept)

    def body(index):
        row = [index[d] for d in kept]
        y = call(
            "mul", call("sub", lo.load(a, index), lo.load(m, row)), lo.load(rstd, row)
        )
        if weight is not None:
            y = call("mul", y, cast(lo.load(weight, index[offset:]), a.dtype))
        if bias is not None:
            y = call("add", y, cast(lo.load(bias, index[offset:]), a.dtype))
        return y

    out = lo.pointwise(a.sizes, a.dtype, body, out_meta.stride())
    return (
        out,
        keep_dims(lo, m, len(a.sizes), dims),
        keep_dims(lo, rstd, len(a.sizes), dims),
    )


# --- extern library kernels ------------------------------------------------------

EXTERN_OPS = (
    aten.mm.default,
    aten.bmm.default,
    aten.addmm.default,
    aten.baddbmm.default,
    aten.convolution_backward.default,
)


def _extern_rule(op):
    def rule(lo: Lowerer, *args, **kwargs):
        return extern(lo, op, args, kwargs)

    return rule


for _op in EXTERN_OPS:
    register(_op)(_extern_rule(_op))


def _channels_last(lo: Lowerer, a: TV) -> TV:
    """``a`` (4-D) laid out channels-last: itself, or a copy."""
    strides = a.meta.contiguous(memory_format=torch.channels_last).stride()
    if lo.specs[a.name].strides == strides:
        return a
    return lo.pointwise(a.sizes, a.dtype, lambda index: lo.load(a, index), strides)


@register(aten.convolution.default)
def _convolution(lo: Lowerer, x: TV, weight: TV, *args, **kwargs):
    """A convolution whose result codegen keeps channels-last
    (channels_last.py) takes channels-last operands, which oneDNN runs faster
    and for which it returns that layout; others run as eager lays them out."""
    out = lo.out_meta
    if not out.is_contiguous(memory_format=torch.channels_last) or out.is_contiguous():
        return extern(lo, aten.convolution.default, (x, weight, *args), kwargs)
    x, weight = _channels_last(lo, x), _channels_last(lo, weight)
    args = (x, weight, *args)
    return extern(lo, aten.convolution.default, args, kwargs, exact_layout=True)
