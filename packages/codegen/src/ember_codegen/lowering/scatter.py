"""Lowering rules for ops that write at positions read from index tensors
(scatter, scatter_add, scatter_reduce, index_add, index_copy, index_put with
integer indices, embedding_dense_backward) as ``Scatter`` nodes; for writes
through a boolean mask of static shape (index_put with a mask, masked_fill with
a tensor value) as ``where``; and for writes into a select or slice view
(select_scatter, slice_scatter and the select/slice backward ops) as a lazy
``select`` over the position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..ir.indexing import ZERO, Index
from ..ir.nodes import Call, Const, Expr, IndexValue, ReduceKind
from .core import TV, Lowerer, Unsupported, cast, constant, register
from .index import advanced_index, index_tensor, indirect_position, with_checks
from .pointwise import broadcast_load, call, operand

aten = torch.ops.aten

# scatter's and scatter_reduce's reduce names -> how values combine.
_KINDS: dict[str, ReduceKind] = {
    "add": ReduceKind.SUM,
    "sum": ReduceKind.SUM,
    "multiply": ReduceKind.PROD,
    "prod": ReduceKind.PROD,
    "amax": ReduceKind.MAX,
    "amin": ReduceKind.MIN,
}

Position = Callable[[tuple[Index, ...]], Sequence[Index | Expr]]
Value = Callable[[tuple[Index, ...]], Expr]


def _out(lo: Lowerer) -> torch.Tensor:
    meta = lo.out_meta
    if not isinstance(meta, torch.Tensor) or not meta.dim():
        raise Unsupported  # 0-d scatters treat the tensor as one element
    return meta


def scatter_into(
    lo: Lowerer,
    base: TV | None,
    src_sizes: Sequence[int],
    target: Position,
    value: Value,
    kind: ReduceKind | None,
    negative: bool,
    include_self: bool = True,
    mean: bool = False,
) -> TV:
    """The node's output: ``base`` (zeros when None) with, for each source
    position ``r`` in order, ``value(r)`` written (``kind`` None) or combined
    at ``target(r)``: loop index math, and index-tensor values that are valid
    in ``[-size, size)`` when ``negative``, else in ``[0, size)``."""
    out = _out(lo)
    if kind in (ReduceKind.SUM, ReduceKind.PROD) and out.dtype == torch.bool:
        raise Unsupported  # torch's bool sums are logical ors: leave them to it

    def init(i: tuple[Index, ...]) -> Expr:
        return lo.load(base, i) if base is not None else constant(0, out.dtype)

    def write(r: tuple[Index, ...]) -> tuple[list[Index], Expr]:
        at, checks = indirect_position(tuple(out.shape), target(r))
        return at, with_checks(cast(value(r), out.dtype), checks, negative)

    return lo.scatter(out, init, src_sizes, write, kind, include_self, mean)


def _kind(reduce: str) -> ReduceKind:
    if reduce not in _KINDS:
        raise Unsupported  # a reduction torch may add later: let torch run it
    return _KINDS[reduce]


def _dim(dim: int, ndim: int) -> int:
    return dim % max(ndim, 1)


def _source(lo: Lowerer, src: object, dtype: torch.dtype) -> Value:
    """value(r) of a source tensor read at ``r``, or of a scalar."""
    if isinstance(src, TV):
        return lambda r: cast(lo.load(src, r), dtype)
    if isinstance(src, (bool, int, float)):
        return lambda r: constant(src, dtype)
    raise Unsupported


# --- scatter family: out[..., index[r], ...] (dim d) <- src[r] ---------------------


def _scatter(
    lo: Lowerer,
    a: TV,
    dim: int,
    index: TV,
    src: object,
    kind: ReduceKind | None,
    include_self: bool = True,
    mean: bool = False,
) -> TV:
    index = index_tensor(index)
    if not a.sizes or len(index.sizes) != len(a.sizes):
        raise Unsupported
    d = _dim(dim, len(a.sizes))

    def target(r):
        return [*r[:d], lo.load(index, r), *r[d + 1 :]]

    value = _source(lo, src, _out(lo).dtype)
    return scatter_into(
        lo, a, index.sizes, target, value, kind, False, include_self, mean
    )


@register(aten.scatter.src, aten.scatter.value)
def _scatter_set(lo: Lowerer, a: TV, dim: int, index: TV, src):
    return _scatter(lo, a, dim, index, src, None)


@register(aten.scatter.reduce, aten.scatter.value_reduce)
def _scatter_reduce_old(lo: Lowerer, a: TV, dim: int, index: TV, src, *, reduce):
    return _scatter(lo, a, dim, index, src, _kind(reduce))


@register(aten.scatter_add.default)
def _scatter_add(lo: Lowerer, a: TV, dim: int, index: TV, src: TV):
    return _scatter(lo, a, dim, index, src, ReduceKind.SUM)


@register(aten.scatter_reduce.two)
def _scatter_reduce(
    lo: Lowerer, a: TV, dim: int, index: TV, src: TV, reduce: str, *, include_self=True
):
    if reduce == "mean":
        if not a.dtype.is_floating_point:
            raise Unsupported  # torch floors integer means
        return _scatter(lo, a, dim, index, src, ReduceKind.SUM, include_self, True)
    return _scatter(lo, a, dim, index, src, _kind(reduce), include_self)


# --- index_add / index_copy: out.select(d, index[k]) <- source.select(d, k) -------


def _index_dim(
    lo: Lowerer, a: TV, dim: int, index: TV, source: TV, kind, alpha=1
) -> TV:
    index = index_tensor(index)
    if not a.sizes or len(source.sizes) != len(a.sizes) or len(index.sizes) > 1:
        raise Unsupported
    d = _dim(dim, len(a.sizes))
    dtype = _out(lo).dtype

    def target(r):
        k = lo.load(index, [r[d]] if index.sizes else [])
        return [*r[:d], k, *r[d + 1 :]]

    def value(r):
        v = cast(lo.load(source, r), dtype)
        return v if alpha == 1 else call("mul", v, constant(alpha, dtype))

    return scatter_into(lo, a, source.sizes, target, value, kind, False)


@register(aten.index_add.default)
def _index_add(lo: Lowerer, a: TV, dim: int, index: TV, source: TV, *, alpha=1):
    return _index_dim(lo, a, dim, index, source, ReduceKind.SUM, alpha)


@register(aten.index_copy.default)
def _index_copy(lo: Lowerer, a: TV, dim: int, index: TV, source: TV):
    return _index_dim(lo, a, dim, index, source, None)


# --- index_put: out[indices] <- values --------------------------------------------


@register(aten.index_put.default)
def _index_put(lo: Lowerer, a: TV, indices, values: TV, accumulate: bool = False):
    masks = [t for t in indices if isinstance(t, TV) and t.dtype == torch.bool]
    if masks:
        return _masked_put(lo, a, indices, values, accumulate)
    sizes, position = advanced_index(lo, a.sizes, indices)
    if len(values.sizes) > len(sizes):
        raise Unsupported
    dtype = _out(lo).dtype
    kind = ReduceKind.SUM if accumulate else None

    def value(r):
        return cast(broadcast_load(lo, values, r), dtype)

    return scatter_into(lo, a, sizes, position, value, kind, True)


def _masked_put(lo: Lowerer, a: TV, indices, values: TV, accumulate: bool) -> TV:
    """``a[..., mask, ...] = values`` with one boolean mask whose shape is
    static: a ``where``, when ``values`` broadcasts over the selected elements
    without knowing how many there are (its dim there is 1 or missing)."""
    given = [(p, t) for p, t in enumerate(indices) if t is not None]
    if len(given) != 1:
        raise Unsupported  # several masks, or a mask with integer indices
    p, mask = given[0]
    k = len(mask.sizes)
    if tuple(a.sizes[p : p + k]) != tuple(mask.sizes):
        raise Unsupported
    # a[mask] has dims (*a.sizes[:p], count, *a.sizes[p + k:]); count's is p.
    result_ndim = p + 1 + len(a.sizes) - p - k
    offset = result_ndim - len(values.sizes)
    if offset < 0 or (offset <= p and values.sizes[p - offset] != 1):
        raise Unsupported  # values sized by the data-dependent count
    out = _out(lo)

    def body(i):
        selected = lo.load(mask, i[p : p + k])
        at_result = (*i[:p], ZERO, *i[p + k :])
        v = cast(broadcast_load(lo, values, at_result), out.dtype)
        old = cast(lo.load(a, i), out.dtype)
        new = call("add", old, v) if accumulate else v
        return call("where", selected, new, old, dtype=out.dtype)

    return lo.pointwise(out.shape, out.dtype, body, out.stride())


@register(aten.masked_fill.Tensor)
def _masked_fill_tensor(lo: Lowerer, a, mask, value: TV):
    if not isinstance(value, TV) or value.sizes:
        raise Unsupported
    out = lo.out_meta

    def body(index):
        return call(
            "where",
            operand(lo, mask, index, torch.bool),
            cast(lo.load(value, []), out.dtype),
            operand(lo, a, index, out.dtype),
            dtype=out.dtype,
        )

    return lo.pointwise(out.shape, out.dtype, body, out.stride())


# --- embedding_dense_backward: grad_weight[indices[p]] += grad[p] -----------------


@register(aten.embedding_dense_backward.default)
def _embedding_backward(
    lo: Lowerer, grad: TV, indices: TV, num_weights, padding_idx, scale_grad_by_freq
):
    indices = index_tensor(indices)
    if scale_grad_by_freq or len(grad.sizes) != len(indices.sizes) + 1:
        raise Unsupported
    k = len(indices.sizes)
    dtype = _out(lo).dtype

    def target(r):
        return [lo.load(indices, r[:k]), r[k]]

    def value(r):
        v = cast(lo.load(grad, r), dtype)
        if padding_idx < 0:
            return v
        row = cast(lo.load(indices, r[:k]), torch.int64)
        skip = call("eq", row, constant(padding_idx, torch.int64), dtype=torch.bool)
        return call("where", skip, constant(0, dtype), v, dtype=dtype)

    return scatter_into(lo, None, grad.sizes, target, value, ReduceKind.SUM, False)


# --- writes into a select or slice view: position tests, no scatter loop -----------


def _into_view(
    lo: Lowerer,
    base: TV | None,
    src: TV,
    d: int,
    begin: int,
    step: int,
    length: int | None,
) -> TV:
    """``base`` (zeros when None) with dim ``d``'s positions ``begin + k*step``
    (k < ``length``) taken from ``src``, whose dim ``d`` is k; with ``length``
    None (a select), position ``begin`` only, and src has no dim ``d``."""
    out = lo.out_meta
    if step <= 0:
        raise Unsupported

    def body(i):
        old = lo.load(base, i) if base is not None else constant(0, out.dtype)
        at = IndexValue(i[d])
        if length is None:
            inside = Call("eq", (at, Const(begin, torch.int64)), torch.bool)
            picked = [*i[:d], *i[d + 1 :]]
        else:
            end = begin + (length - 1) * step + 1
            inside = Call(
                "and",
                (
                    Call("ge", (at, Const(begin, torch.int64)), torch.bool),
                    Call("lt", (at, Const(end, torch.int64)), torch.bool),
                ),
                torch.bool,
            )
            if step != 1:
                phase = IndexValue((i[d] - begin) % step)
                on_step = Call("eq", (phase, Const(0, torch.int64)), torch.bool)
                inside = Call("and", (inside, on_step), torch.bool)
            picked = [*i[:d], (i[d] - begin) // step, *i[d + 1 :]]
        # select reads src only where the position is inside the view.
        new = cast(lo.load(src, picked), out.dtype)
        return Call("select", (inside, new, cast(old, out.dtype)), out.dtype)

    return lo.pointwise(out.shape, out.dtype, body, out.stride())


def _select_at(sizes: Sequence[int], dim: int, index: int) -> tuple[int, int]:
    d = _dim(dim, len(sizes))
    return d, index + sizes[d] if index < 0 else index


def _slice_range(sizes: Sequence[int], dim: int, start, step) -> tuple[int, int]:
    d = _dim(dim, len(sizes))
    size = sizes[d]  # torch clamps the start into [0, size], as in slice
    begin = 0 if start is None else start + size if start < 0 else start
    return d, min(max(begin, 0), size)


@register(aten.select_scatter.default)
def _select_scatter(lo: Lowerer, a: TV, src: TV, dim: int, index: int):
    d, at = _select_at(a.sizes, dim, index)
    return _into_view(lo, a, src, d, at, 1, None)


@register(aten.select_backward.default)
def _select_backward(lo: Lowerer, grad: TV, input_sizes, dim: int, index: int):
    d, at = _select_at(input_sizes, dim, index)
    return _into_view(lo, None, grad, d, at, 1, None)


@register(aten.slice_scatter.default)
def _slice_scatter(lo: Lowerer, a: TV, src: TV, dim=0, start=None, end=None, step=1):
    d, begin = _slice_range(a.sizes, dim, start, step)
    return _into_view(lo, a, src, d, begin, step, src.sizes[d])


@register(aten.slice_backward.default)
def _slice_backward(lo: Lowerer, grad: TV, input_sizes, dim, start, end, step):
    d, begin = _slice_range(input_sizes, dim, start, step)
    return _into_view(lo, None, grad, d, begin, step, grad.sizes[d])
