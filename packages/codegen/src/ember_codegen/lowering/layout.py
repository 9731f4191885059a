"""Lowering rules for views and layout ops: each is index math over its input,
never a copy, unless the result must exist in memory (then the scheduler
realizes it, or hands an extern a strided view of the input's storage).
flip, repeat, roll and constant_pad_nd are index math too, but copies in torch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import torch

from ..ir.indexing import ZERO, Index, const
from ..ir.nodes import Call, Const, Expr, IndexValue, ReduceKind, contiguous
from .core import TV, Lowerer, Unsupported, constant, register
from .pointwise import broadcast_load

aten = torch.ops.aten


Mapping = Callable[[tuple[Index, ...]], Sequence[Index]]


def view_of(lo: Lowerer, src: TV, meta: torch.Tensor, mapping: Mapping) -> TV:
    """A node reading ``src`` at ``mapping(out_index)``."""
    return reindexed(lo, src, meta, mapping, view=True)


def reindexed(
    lo: Lowerer, src: TV, meta: torch.Tensor, mapping: Mapping, view: bool = False
) -> TV:
    """``src`` read at ``mapping(out_index)``: index math like a view, but a
    new tensor in torch unless ``view`` (flip, repeat, roll copy)."""
    return lo.pointwise(
        meta.shape,
        src.dtype,
        lambda i: lo.load(src, mapping(i)),
        meta.stride(),
        view=view,
    )


def _dim(d: int, ndim: int) -> int:
    return d % max(ndim, 1)


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(lo: Lowerer, a: TV, size):
    out = lo.out_meta
    src_sizes, out_sizes = a.sizes, tuple(out.shape)

    def mapping(index):
        # Flatten the output index row-major, then unflatten it into the input's dims.
        flat = ZERO
        for i, stride in zip(index, contiguous(out_sizes)):
            flat = flat + i * stride
        return [
            (flat // stride) % max(size, 1)
            for size, stride in zip(src_sizes, contiguous(src_sizes))
        ]

    return view_of(lo, a, out, mapping)


@register(aten.expand.default)
def _expand(lo: Lowerer, a: TV, size, implicit=False):
    return view_of(lo, a, lo.out_meta, lambda i: broadcast_load(lo, a, i).index)


@register(aten.permute.default)
def _permute(lo: Lowerer, a: TV, dims):
    dims = [_dim(d, len(a.sizes)) for d in dims]

    def mapping(index):
        src = [ZERO] * len(dims)
        for out_pos, d in enumerate(dims):
            src[d] = index[out_pos]
        return src

    return view_of(lo, a, lo.out_meta, mapping)


@register(aten.t.default)
def _t(lo: Lowerer, a: TV):
    return _permute(lo, a, list(reversed(range(len(a.sizes)))))


@register(aten.transpose.int)
def _transpose(lo: Lowerer, a: TV, dim0: int, dim1: int):
    dims = list(range(len(a.sizes)))
    d0, d1 = _dim(dim0, len(dims)), _dim(dim1, len(dims))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return _permute(lo, a, dims)


@register(aten.unsqueeze.default)
def _unsqueeze(lo: Lowerer, a: TV, dim: int):
    d = dim % (len(a.sizes) + 1)
    return view_of(lo, a, lo.out_meta, lambda i: list(i[:d]) + list(i[d + 1 :]))


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(lo: Lowerer, a: TV, dims=None):
    if dims is None:
        dims = range(len(a.sizes))
    elif isinstance(dims, int):
        dims = [dims]
    dropped = {
        _dim(d, len(a.sizes)) for d in dims if a.sizes[_dim(d, len(a.sizes))] == 1
    }

    def mapping(index):
        it = iter(index)
        return [ZERO if d in dropped else next(it) for d in range(len(a.sizes))]

    return view_of(lo, a, lo.out_meta, mapping)


@register(aten.slice.Tensor)
def _slice(lo: Lowerer, a: TV, dim=0, start=None, end=None, step=1):
    d = _dim(dim, len(a.sizes))
    size = a.sizes[d]  # torch clamps the start into [0, size]; meta gave the length
    begin = 0 if start is None else start + size if start < 0 else start
    begin = min(max(begin, 0), size)

    def mapping(index):
        src = list(index)
        src[d] = index[d] * step + begin
        return src

    return view_of(lo, a, lo.out_meta, mapping)


@register(aten.select.int)
def _select(lo: Lowerer, a: TV, dim: int, index: int):
    d = _dim(dim, len(a.sizes))
    at = index + a.sizes[d] if index < 0 else index
    return view_of(lo, a, lo.out_meta, lambda i: [*i[:d], const(at), *i[d:]])


def _split_views(lo: Lowerer, a: TV, sizes: Sequence[int], dim: int) -> tuple[TV, ...]:
    metas = list(lo.out_meta)
    d = _dim(dim, len(a.sizes))
    views, begin = [], 0
    for meta, size in zip(metas, sizes):
        lo.out_meta = meta
        views.append(_slice(lo, a, d, begin, begin + size, 1))
        begin += size
    return tuple(views)


# unsafe_split (GRU and LSTM cells chunk with it) returns the same views; only
# autograd's view tracking differs.
@register(aten.split.Tensor, aten.unsafe_split.Tensor)
def _split(lo: Lowerer, a: TV, split_size: int, dim: int = 0):
    return _split_views(
        lo, a, [m.shape[_dim(dim, len(a.sizes))] for m in lo.out_meta], dim
    )


@register(aten.split_with_sizes.default, aten.unsafe_split_with_sizes.default)
def _split_with_sizes(lo: Lowerer, a: TV, split_sizes, dim: int = 0):
    return _split_views(lo, a, split_sizes, dim)


@register(aten.unbind.int)
def _unbind(lo: Lowerer, a: TV, dim: int = 0):
    metas = list(lo.out_meta)
    views = []
    for k, meta in enumerate(metas):
        lo.out_meta = meta
        views.append(_select(lo, a, dim, k))
    return tuple(views)


@register(aten.cat.default)
def _cat(lo: Lowerer, tensors, dim: int = 0):
    out = lo.out_meta
    d = _dim(dim, out.dim())
    parts = [t for t in tensors if not (len(t.sizes) == 1 and t.sizes[0] == 0)]
    if not parts or any(t.dtype != out.dtype for t in parts):
        raise Unsupported  # mixed-dtype cat promotes; leave it to torch

    def body(index):
        # Innermost-first: the last part is the default, earlier ones are guarded.
        offsets, begin = [], 0
        for t in parts:
            offsets.append(begin)
            begin += t.sizes[d]
        expr = None
        for t, begin in reversed(list(zip(parts, offsets))):
            src = list(index)
            src[d] = index[d] - begin
            load = lo.load(t, src)
            if expr is None:
                expr = load
                continue
            end = begin + t.sizes[d]
            below = Call(
                "lt", (IndexValue(index[d]), Const(end, torch.int64)), torch.bool
            )
            expr = Call("select", (below, load, expr), out.dtype)
        return expr

    return lo.pointwise(out.shape, out.dtype, body, out.stride())


# --- copies by index math --------------------------------------------------------


@register(aten.flip.default)
def _flip(lo: Lowerer, a: TV, dims):
    flipped = {_dim(d, len(a.sizes)) for d in dims}

    def mapping(index):
        return [
            i * -1 + (a.sizes[d] - 1) if d in flipped else i
            for d, i in enumerate(index)
        ]

    return reindexed(lo, a, lo.out_meta, mapping)


@register(aten.repeat.default)
def _repeat(lo: Lowerer, a: TV, repeats):
    first = len(repeats) - len(a.sizes)  # repeats may add leading dims

    def mapping(index):
        return [i % size if size else i for i, size in zip(index[first:], a.sizes)]

    return reindexed(lo, a, lo.out_meta, mapping)


@register(aten.roll.default)
def _roll(lo: Lowerer, a: TV, shifts, dims=()):
    if not dims:
        # Rolled as the flattened tensor, then put back in shape.
        n = math.prod(a.sizes)
        flat_strides = contiguous(a.sizes)

        def mapping(index):
            flat = ZERO
            for i, stride in zip(index, flat_strides):
                flat = flat + i * stride
            if n:
                flat = (flat + (-shifts[0]) % n) % n
            return [
                (flat // stride) % max(size, 1)
                for size, stride in zip(a.sizes, flat_strides)
            ]

        return reindexed(lo, a, lo.out_meta, mapping)
    ahead = {}  # dim -> how far along it the source sits from the output
    for shift, dim in zip(shifts, dims):
        d = _dim(dim, len(a.sizes))
        if a.sizes[d]:
            ahead[d] = (ahead.get(d, 0) - shift) % a.sizes[d]

    def mapping(index):
        return [
            (i + ahead[d]) % a.sizes[d] if ahead.get(d) else i
            for d, i in enumerate(index)
        ]

    return reindexed(lo, a, lo.out_meta, mapping)


def index_test(op: str, i: Index, bound: int) -> Expr:
    """``i op bound`` (``"ge"``, ``"lt"``, ...) as a bool value."""
    return Call(op, (IndexValue(i), Const(bound, torch.int64)), torch.bool)


@register(aten.constant_pad_nd.default)
def _constant_pad_nd(lo: Lowerer, a: TV, pad, value=0):
    out = lo.out_meta
    nd = len(a.sizes)
    # pad holds (before, after) pairs from the last dim backwards; a negative
    # amount crops. Only the offset of the first element matters here.
    before = [0] * nd
    for k in range(len(pad) // 2):
        before[nd - 1 - k] = pad[2 * k]

    def body(index):
        src, inside = [], []
        for d, i in enumerate(index):
            src.append(i - before[d])
            if before[d] > 0:
                inside.append(index_test("ge", i, before[d]))
            if before[d] + a.sizes[d] < out.shape[d]:
                inside.append(index_test("lt", i, before[d] + a.sizes[d]))
        load = lo.load(a, src)
        if not inside:
            return load
        cond = functools.reduce(lambda x, y: Call("and", (x, y), torch.bool), inside)
        # A lazy select: the load is out of bounds in the padding.
        return Call("select", (cond, load, constant(value, a.dtype)), a.dtype)

    return lo.pointwise(out.shape, out.dtype, body, out.stride())


# --- nearest-neighbour resampling -------------------------------------------------


def _nearest_sources(size: int, out: int, scale: float | None) -> list[int]:
    """The input row torch's upsample_nearest reads for each output row: the
    float32 floor(out_index * scale), capped at the last row."""
    if out == size:
        return list(range(out))
    if out == 2 * size:
        return [o >> 1 for o in range(out)]
    f32 = torch.float32
    step = (
        torch.tensor(1.0 / scale, dtype=f32)
        if scale
        else torch.tensor(size, dtype=f32) / torch.tensor(out, dtype=f32)
    )
    rows = torch.floor(torch.arange(out, dtype=f32) * step).long()
    return rows.clamp(max=size - 1).tolist()


def _nearest_rule(size: int, out: int, scale: float | None) -> tuple[str, int]:
    """How output rows map to input rows, as index math: ("up", k) when each
    input row repeats k times, ("down", m) when every m-th row is kept."""
    sources = _nearest_sources(size, out, scale)
    if out % size == 0 and sources == [o // (out // size) for o in range(out)]:
        return "up", out // size
    if size % out == 0 and sources == [o * (size // out) for o in range(out)]:
        return "down", size // out
    raise Unsupported  # any other ratio runs through torch


@register(aten.upsample_nearest2d.default)
def _upsample_nearest2d(lo: Lowerer, a: TV, output_size, scales_h=None, scales_w=None):
    rules = [
        _nearest_rule(size, out, scale)
        for size, out, scale in zip(a.sizes[-2:], output_size, (scales_h, scales_w))
    ]

    def mapping(index):
        batch = len(index) - 2
        src = list(index[:batch])
        for i, (kind, k) in zip(index[batch:], rules):
            src.append(i // k if kind == "up" else i * k)
        return src

    return reindexed(lo, a, lo.out_meta, mapping)


@register(aten.upsample_nearest2d_backward.default)
def _upsample_nearest2d_backward(
    lo: Lowerer, grad: TV, output_size, input_size, scales_h=None, scales_w=None
):
    """Each input element sums the gradients of the output elements that read
    it: a block of k by k when upsampling by k, one (or none) when
    downsampling."""
    rules = [
        _nearest_rule(size, out, scale)
        for size, out, scale in zip(input_size[-2:], output_size, (scales_h, scales_w))
    ]
    out = lo.out_meta
    block = [k if kind == "up" else 1 for kind, k in rules]
    batch = len(out.shape) - 2

    def element(index, rindex):
        src, kept = list(index[:batch]), []
        for i, r, (kind, k) in zip(index[batch:], rindex, rules):
            if kind == "up":
                src.append(i * k + r)
            else:  # only every k-th input row was read
                src.append(i // k)
                kept.append(index_test("eq", i % k, 0))
        value = lo.load(grad, src)
        if not kept:
            return value
        inside = functools.reduce(lambda x, y: Call("and", (x, y), torch.bool), kept)
        return Call("select", (inside, value, constant(0, grad.dtype)), grad.dtype)

    total = lo.reduction(list(out.shape), block, ReduceKind.SUM, grad.dtype, element)
    return lo.pointwise(
        out.shape, grad.dtype, lambda i: lo.load(total, i), out.stride()
    )
