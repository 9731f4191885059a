"""Lowering rules for indirect indexing: gather, index_select, embedding and
advanced indexing (``aten.index.Tensor``) read their source at positions loaded
from index tensors, as ``Indirect`` index terms, so they fuse like any load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..ir.indexing import Index, Indirect
from ..ir.nodes import Call, Const, Expr
from .core import TV, Lowerer, Unsupported, cast, register
from .pointwise import broadcast_load

aten = torch.ops.aten

INDEX_DTYPES = (torch.int64, torch.int32)


def read_indirect(
    lo: Lowerer, src: TV, index: Sequence[Index | Expr], negative: bool
) -> Expr:
    """``src`` read at ``index``, whose entries are loop-index math or values of
    index tensors (Exprs). ``negative``: an index in ``[-size, 0)`` counts from
    the end, as in ``aten.index``; otherwise it is out of range, as in gather.

    The read address is clamped into the tensor, and the value carries a check
    that makes the kernel report an out-of-range index (see ``render/cpp/preamble.h``).
    """
    at, checks = indirect_position(src.sizes, index)
    return with_checks(lo.load(src, at), checks, negative)


def indirect_position(
    sizes: Sequence[int], index: Sequence[Index | Expr]
) -> tuple[list[Index], list[tuple[Expr, int]]]:
    """The position ``index`` names in a tensor of ``sizes``, each index-tensor
    value (an Expr) wrapped and clamped into its dim, and the (value, size)
    pairs that ``with_checks`` must check."""
    at: list[Index] = []
    checks: list[tuple[Expr, int]] = []
    for d, i in enumerate(index):
        if isinstance(i, Index):
            at.append(i)
            continue
        size = sizes[d]
        if size == 0:
            raise Unsupported  # every index is out of range: torch raises
        value = cast(i, torch.int64)
        clamped = Call("index_clamp", (value, Const(size, torch.int64)), torch.int64)
        at.append(Index(((Indirect(clamped, size), 1),)))
        checks.append((value, size))
    return at, checks


def with_checks(value: Expr, checks: list[tuple[Expr, int]], negative: bool) -> Expr:
    """``value`` wrapped in an ``index_check`` per index-tensor value: valid in
    ``[-size, size)`` when ``negative``, else in ``[0, size)``."""
    for v, size in checks:
        low = Const(-size if negative else 0, torch.int64)
        value = Call(
            "index_check", (value, v, low, Const(size, torch.int64)), value.dtype
        )
    return value


def index_tensor(t: object) -> TV:
    if not isinstance(t, TV) or t.dtype not in INDEX_DTYPES:
        raise Unsupported  # boolean masks have data-dependent shapes
    return t


def _out(lo: Lowerer) -> torch.Tensor:
    if not isinstance(lo.out_meta, torch.Tensor):
        raise Unsupported
    return lo.out_meta


@register(aten.index_select.default)
def _index_select(lo: Lowerer, a: TV, dim: int, index: TV):
    index = index_tensor(index)
    if not a.sizes:
        raise Unsupported
    d = dim % len(a.sizes)
    out = _out(lo)

    def body(i):
        picked = lo.load(index, [i[d]] if index.sizes else [])
        return read_indirect(lo, a, [*i[:d], picked, *i[d + 1 :]], negative=False)

    return lo.pointwise(out.shape, a.dtype, body, out.stride())


@register(aten.gather.default)
def _gather(lo: Lowerer, a: TV, dim: int, index: TV, *, sparse_grad: bool = False):
    index = index_tensor(index)
    if not a.sizes or len(index.sizes) != len(a.sizes):
        raise Unsupported
    d = dim % len(a.sizes)
    out = _out(lo)

    def body(i):
        picked = lo.load(index, i)
        return read_indirect(lo, a, [*i[:d], picked, *i[d + 1 :]], negative=False)

    return lo.pointwise(out.shape, a.dtype, body, out.stride())


@register(aten.embedding.default)
def _embedding(lo: Lowerer, weight: TV, indices: TV, padding_idx=-1, *_):
    indices = index_tensor(indices)
    if len(weight.sizes) != 2:
        raise Unsupported
    k = len(indices.sizes)
    out = _out(lo)

    def body(i):
        row = lo.load(indices, i[:k])
        return read_indirect(lo, weight, [row, i[k]], negative=False)

    return lo.pointwise(out.shape, weight.dtype, body, out.stride())


def advanced_index(
    lo: Lowerer, sizes: Sequence[int], indices: Sequence[object]
) -> tuple[tuple[int, ...], Callable[[tuple[Index, ...]], list[Index | Expr]]]:
    """For ``a[indices]`` (integer index tensors, ``None`` for whole dims) on
    a tensor of ``sizes``: the result's sizes, and the map from a result index
    to the position it reads in ``a`` (Exprs for the indexed dims)."""
    given = [(d, index_tensor(t)) for d, t in enumerate(indices) if t is not None]
    if not given:
        raise Unsupported
    positions = [d for d, _ in given]
    batch = tuple(torch.broadcast_shapes(*(t.sizes for _, t in given)))
    rest = [d for d in range(len(sizes)) if d not in positions]
    # torch puts the broadcast index dims where the indexed dims were when those
    # are adjacent, and first otherwise.
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    first = positions[0] if adjacent else 0
    kept = [sizes[d] for d in rest]

    def position(i: tuple[Index, ...]) -> list[Index | Expr]:
        b = i[first : first + len(batch)]
        others = iter([*i[:first], *i[first + len(batch) :]])
        picked = dict((d, broadcast_load(lo, t, b)) for d, t in given)
        return [picked[d] if d in picked else next(others) for d in range(len(sizes))]

    return (*kept[:first], *batch, *kept[first:]), position


@register(aten.index.Tensor)
def _index(lo: Lowerer, a: TV, indices):
    sizes, position = advanced_index(lo, a.sizes, indices)
    out = _out(lo)
    if tuple(out.shape) != sizes:
        raise Unsupported

    def body(i):
        return read_indirect(lo, a, position(i), negative=True)

    return lo.pointwise(out.shape, a.dtype, body, out.stride())
