"""Indirect indexing on both loop targets (gather, index_select, embedding, advanced
indexing) against eager torch: negative indices, int32 and int64 index tensors,
broadcast index tensors, non-contiguous sources, out-of-range indices, and the
scatter-style backward ops aotgrad emits for them (test_scatter.py has the
scatter family itself)."""

import math

import pytest
import torch
from conftest import check, raises_like_torch

aten = torch.ops.aten

INDEX_DTYPES = [torch.int64, torch.int32]


def source(*shape):
    x = torch.randn(*shape)
    x.view(-1)[:3] = torch.tensor([math.nan, math.inf, -math.inf])
    return x


@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=str)
def test_index_select_and_embedding(loops, dtype):
    def fn(x, idx, scalar, w, tokens):
        return (
            aten.index_select.default(x, 0, idx),
            aten.index_select.default(aten.t.default(x), 1, idx),
            aten.index_select.default(x, 1, scalar),
            aten.embedding.default(w, tokens),
            aten.mul.Tensor(aten.embedding.default(w, aten.t.default(tokens)), 2),
        )

    x, w = source(5, 4), source(7, 3)
    idx = torch.tensor([4, 0, 0, 2], dtype=dtype)
    scalar = torch.tensor(3, dtype=dtype)
    tokens = torch.randint(0, 7, (2, 3), dtype=dtype)
    compiled = loops(fn, x, idx, scalar, w, tokens)
    check(compiled, fn, x, idx, scalar, w, tokens)
    assert compiled.fallback_ops == ()
    for bad in (torch.tensor([0, 5, 1, 1], dtype=dtype), idx - 5):
        raises_like_torch(compiled, fn, x, bad, scalar, w, tokens)
    raises_like_torch(compiled, fn, x, idx, scalar, w, tokens - 7)


@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=str)
def test_gather_on_contiguous_and_transposed_sources(loops, dtype):
    def fn(x, idx, rows):
        return (
            aten.gather.default(x, 1, idx),
            aten.gather.default(aten.t.default(x), 0, aten.t.default(idx)),
            aten.gather.default(x, 0, rows),
        )

    x = source(6, 5)
    idx = torch.randint(0, 5, (6, 3), dtype=dtype)
    rows = torch.randint(0, 6, (2, 5), dtype=dtype)
    compiled = loops(fn, x, idx, rows)
    check(compiled, fn, x, idx, rows)
    assert compiled.fallback_ops == ()
    bad = idx.clone()
    bad[2, 1] = -1  # gather accepts no negative index
    raises_like_torch(compiled, fn, x, bad, rows)
    bad[2, 1] = 5
    raises_like_torch(compiled, fn, x, bad, rows)


@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=str)
def test_advanced_indexing_with_negative_and_broadcast_indices(loops, dtype):
    def fn(x, i, j, k):
        return (
            aten.index.Tensor(x, [i]),
            aten.index.Tensor(x, [i, j]),  # adjacent: the broadcast dims stay put
            aten.index.Tensor(x, [None, j, k]),
            aten.index.Tensor(x, [i, None, k]),  # split by a slice: dims go first
            aten.index.Tensor(aten.permute.default(x, [2, 0, 1]), [k]),
        )

    x = source(4, 5, 6)
    i = torch.tensor([[-4], [3], [-1]], dtype=dtype)  # (3, 1)
    j = torch.tensor([0, -5, 4, 2], dtype=dtype)  # (4,)
    k = torch.tensor([-6, 5, 0, 1], dtype=dtype)
    compiled = loops(fn, x, i, j, k)
    check(compiled, fn, x, i, j, k)
    assert compiled.fallback_ops == ()
    raises_like_torch(compiled, fn, x, i, j, k - 1)  # -7 is out of range


def test_zero_d_and_empty_index_tensors(loops):
    def fn(x, s, e):
        return (
            aten.index.Tensor(x, [s, None]),
            aten.index.Tensor(x, [None, e]),
            aten.index_select.default(x, 0, e),
            aten.gather.default(x, 0, aten.view.default(e, [0, 1])),
        )

    x, s, e = source(3, 4), torch.tensor(-2), torch.zeros(0, dtype=torch.int64)
    check(loops(fn, x, s, e), fn, x, s, e)


def test_computed_indices_fuse_into_the_reading_loop(loops):
    def fn(w, tokens, x):
        # sort runs through torch: a fallback between two loops
        shifted = aten.sort.default(aten.add.Tensor(tokens, 3), 1)[0]
        rows = aten.embedding.default(w, aten.sub.Tensor(shifted, 2))
        pooled = aten.sum.dim_IntList(rows, [1])
        first = aten.select.int(tokens, 0, 1)
        picked = aten.cat.default([aten.index.Tensor(x, [first]), x], 0)
        return (pooled, aten.t.default(picked))

    w, x = source(8, 8), source(7, 8)
    tokens = torch.randint(0, 7, (3, 5))
    compiled = loops(fn, w, tokens, x)
    check(compiled, fn, w, tokens, x)
    # The index math (-2), embedding and the sum are one loop; index and cat
    # (through a view of the index tensor) are another.
    assert compiled.fallback_ops == ("aten.sort.default",)
    assert [k.kind for k in compiled.kernels] == ["loop", "fallback", "loop", "loop"]
    pooled, picked = compiled.loops()[1:]
    assert pooled.ops == (
        "aten.sub.Tensor",
        "aten.embedding.default",
        "aten.sum.dim_IntList",
    )
    assert "aten.index.Tensor" in picked.ops and "aten.cat.default" in picked.ops
    assert pooled.checks_indices and picked.checks_indices


def test_scatter_style_backward_ops_are_loop_kernels(loops):
    def fn(grad, idx, rows, tokens, emb_grad):
        # fx folds this full() into a constant that three get_attr nodes read.
        zeros = aten.full.default([5, 4], 0.0, dtype=torch.float32)
        computed = aten.zeros_like.default(grad)  # a loop's buffer
        return (
            aten.index_put.default(zeros, [idx], aten.mul.Tensor(grad, 2), True),
            aten.index_add.default(zeros, 0, idx, grad),
            aten.scatter_add.default(zeros, 1, rows, grad),
            aten.scatter_add.default(computed, 0, rows, grad),
            aten.embedding_dense_backward.default(emb_grad, tokens, 6, -1, False),
        )

    grad, emb_grad = torch.randn(5, 4), torch.randn(2, 3, 4)
    idx = torch.tensor([0, 4, 4, 1, 0])
    rows = torch.randint(0, 4, (5, 4))
    tokens = torch.randint(0, 6, (2, 3))
    compiled = loops(fn, grad, idx, rows, tokens, emb_grad)
    check(compiled, fn, grad, idx, rows, tokens, emb_grad, rtol=1e-6, atol=1e-6)
    assert compiled.fallback_ops == ()
    # One scatter kernel per op; the zeros and grad * 2 fuse into them.
    assert [k.kind for k in compiled.kernels] == ["loop"] * 5
    assert all(k.checks_indices for k in compiled.kernels)


def test_indices_into_fused_views_concatenations_and_reshapes(loops):
    def fn(a, b, idx, cols):
        both = aten.cat.default([a, aten.mul.Tensor(b, 2)], 0)  # (9, 4)
        t = aten.clone.default(aten.t.default(a), memory_format=torch.contiguous_format)
        flat = aten.view.default(t, [2, 10])  # div/mod index math over a
        return (
            aten.index_select.default(both, 0, idx),
            aten.index.Tensor(flat, [None, idx]),
            aten.amax.default(aten.index_select.default(both, 1, cols), [0]),
        )

    a, b = source(5, 4), source(4, 4)
    idx, cols = torch.tensor([8, 0, 3, 5, 1, 2]), torch.tensor([3, 3, 0])
    compiled = loops(fn, a, b, idx, cols)
    check(compiled, fn, a, b, idx, cols)
    assert compiled.fallback_ops == ()
    raises_like_torch(compiled, fn, a, b, idx + 4, cols)
    raises_like_torch(compiled, fn, a, b, idx, cols + 1)
