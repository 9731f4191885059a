"""Scatter-style writes on both loop targets against eager torch: scatter,
scatter_add, scatter_reduce (every reduction, with and without self),
index_add, index_copy, index_put with integer indices and with a boolean mask,
masked_fill with a tensor value, embedding_dense_backward. Duplicate indices,
non-contiguous inputs, NaN, size-0 and size-1 dims, out-of-range indices.
The tests of what runs through torch, and of how the C++ target splits a
scatter across threads, are the C++ target's."""

import math

import pytest
import torch
from conftest import check, raises_like_torch

aten = torch.ops.aten


def one_scatter_kernel(compiled):
    assert compiled.fallback_ops == ()
    assert [k.kind for k in compiled.kernels] == ["loop"]
    assert compiled.kernels[0].checks_indices


def test_scatter_add_with_duplicates_fuses_producers(loops):
    def fn(x, idx, src):
        # The base (x * 2) and the values (exp(src)) are computed in the kernel.
        base = aten.mul.Tensor(x, 2)
        return (aten.scatter_add.default(base, 0, idx, aten.exp.default(src)),)

    x, src = torch.randn(5, 4), torch.randn(7, 3)
    idx = torch.tensor([[0, 1, 1]] * 4 + [[4, 4, 0]] * 3)  # many duplicates
    compiled = loops(fn, x, idx, src)
    check(compiled, fn, x, idx, src, rtol=1e-6, atol=1e-6)
    one_scatter_kernel(compiled)
    assert "scatter_sum" in compiled.cpp_source


def test_scatter_set_and_value_and_old_reduce_forms(loops):
    def fn(x, idx, src):
        return (
            aten.scatter.src(x, 1, idx, src),
            aten.scatter.value(x, 0, idx, -1.5),
            aten.scatter.reduce(x, 0, idx, src, reduce="multiply"),
            aten.scatter.value_reduce(x, 1, idx, 2.0, reduce="add"),
        )

    x, src = torch.randn(4, 6), torch.randn(3, 5)
    # Distinct positions along dim 1 per row (scatter without reduce has no
    # defined winner for duplicates); along dim 0 only the constant repeats.
    idx = torch.stack([torch.randperm(4) for _ in range(3)])
    compiled = loops(fn, x, idx, src)
    check(compiled, fn, x, idx, src, rtol=1e-6, atol=1e-6)
    assert compiled.fallback_ops == ()


@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_every_reduction(loops, reduce, include_self):
    def fn(x, idx, src):
        return (
            aten.scatter_reduce.two(x, 0, idx, src, reduce, include_self=include_self),
        )

    x, src = torch.randn(6, 3), torch.randn(8, 3)
    src[2, 1] = math.nan  # propagates through amax/amin as in torch
    x[5, 0] = math.nan
    idx = torch.randint(0, 5, (8, 3))  # row 5 is never targeted
    compiled = loops(fn, x, idx, src)
    check(compiled, fn, x, idx, src, rtol=1e-5, atol=1e-6)
    one_scatter_kernel(compiled)


def test_scatter_reduce_integer_mean_runs_through_torch(cpp):
    def fn(x, idx, src):
        return (aten.scatter_reduce.two(x, 0, idx, src, "mean"),)

    x, src = torch.randint(-9, 9, (4,)), torch.randint(-9, 9, (6,))
    idx = torch.randint(0, 4, (6,))
    compiled = cpp(fn, x, idx, src)
    check(compiled, fn, x, idx, src)
    assert compiled.fallback_ops == ("aten.scatter_reduce.two",)


def test_integer_scatter_add_and_index_add(loops):
    def fn(x, idx, src, rows):
        return (
            aten.scatter_add.default(x, 1, idx, src),
            aten.index_add.default(x, 0, rows, src, alpha=3),
        )

    x, src = torch.randint(-5, 5, (3, 4)), torch.randint(-5, 5, (3, 4))
    idx, rows = torch.randint(0, 4, (3, 4)), torch.tensor([2, 0, 2])
    compiled = loops(fn, x, idx, src, rows)
    check(compiled, fn, x, idx, src, rows)
    assert compiled.fallback_ops == ()


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_add_and_index_copy_on_non_contiguous_inputs(loops, dim):
    def fn(x, rows, src, perm):
        xt = aten.t.default(x)  # (4, 5) read through a transpose
        return (
            aten.index_add.default(xt, dim, rows, src, alpha=0.5),
            aten.index_copy.default(xt, dim, perm, src),
        )

    x = torch.randn(5, 4)
    d = dim % 2
    n = 3
    sizes = [4, 5]
    sizes[d] = n
    src = torch.randn(*reversed(sizes)).t()  # non-contiguous source
    rows = torch.tensor([1, 1, 0])  # duplicates accumulate
    perm = torch.randperm((4, 5)[d])[:n]  # distinct: index_copy's winner is defined
    compiled = loops(fn, x, rows, src, perm)
    check(compiled, fn, x, rows, src, perm, rtol=1e-6, atol=1e-6)
    assert compiled.fallback_ops == ()


@pytest.mark.parametrize("accumulate", [True, False])
def test_index_put_with_integer_indices(loops, accumulate):
    def fn(x, i, j, rows, elements, columns):
        return (
            aten.index_put.default(x, [i], rows, accumulate),  # whole rows
            aten.index_put.default(x, [i, j], elements, accumulate),  # elements
            aten.index_put.default(x, [None, j], columns, accumulate),  # columns
        )

    x = torch.randn(6, 5)
    # Negative indices count from the end; with accumulate, duplicates add up
    # (without it, which duplicate wins is not defined, so there are none).
    i = torch.tensor([0, 5, -1, 2]) if accumulate else torch.tensor([0, -1, 2, -4])
    j = torch.tensor([4, 0, -2, 1])
    rows, elements = torch.randn(4, 5), torch.randn(4)
    columns = torch.randn(6, 1)  # broadcast over the four indexed columns
    compiled = loops(fn, x, i, j, rows, elements, columns)
    check(compiled, fn, x, i, j, rows, elements, columns, rtol=1e-6, atol=1e-6)
    assert compiled.fallback_ops == ()


def test_index_put_with_a_boolean_mask_is_a_where(loops):
    def fn(x, value, row):
        mask = aten.gt.Scalar(x, 0)
        rows = aten.lt.Scalar(aten.select.int(x, 1, 0), 0)
        return (
            aten.index_put.default(x, [mask], value, False),  # x[x > 0] = v
            aten.index_put.default(x, [mask], value, True),  # x[x > 0] += v
            aten.index_put.default(x, [rows], row, False),  # x[rows] = row
            aten.index_put.default(x, [None, aten.gt.Scalar(row, 0)], value, True),
            aten.masked_fill.Tensor(x, mask, value),
        )

    x, value, row = torch.randn(5, 4), torch.tensor(-2.5), torch.randn(4)
    compiled = loops(fn, x, value, row)
    check(compiled, fn, x, value, row)
    assert compiled.fallback_ops == ()
    assert len(compiled.loops()) == 1  # all pointwise: one fused loop


def test_index_put_with_a_mask_and_per_element_values_runs_through_torch(cpp):
    def fn(x, values):
        return (aten.index_put.default(x, [aten.gt.Scalar(x, 0)], values, False),)

    x = torch.tensor([[1.0, -1.0], [2.0, -3.0]])
    values = torch.tensor([7.0, 8.0])  # one per selected element: count is data
    compiled = cpp(fn, x, values)
    check(compiled, fn, x, values)
    assert compiled.fallback_ops == ("aten.index_put.default",)


def test_embedding_dense_backward_skips_the_padding_row(loops):
    def fn(grad, tokens):
        return (
            aten.embedding_dense_backward.default(grad, tokens, 7, 2, False),
            aten.embedding_dense_backward.default(grad, tokens, 7, -1, False),
        )

    grad, tokens = torch.randn(3, 4, 5), torch.randint(0, 7, (3, 4))
    tokens[0, :2] = 2
    compiled = loops(fn, grad, tokens)
    check(compiled, fn, grad, tokens, rtol=1e-6, atol=1e-6)
    assert compiled.fallback_ops == ()


def test_size_zero_and_size_one_dims(loops):
    def fn(x, idx, src, none, empty_src):
        return (
            aten.scatter_add.default(x, 1, idx, src),  # x is (3, 1)
            aten.scatter_add.default(x, 0, none, empty_src),  # no source elements
            aten.index_add.default(x, 0, aten.select.int(idx, 1, 0), src),
        )

    x, src = torch.randn(3, 1), torch.randn(3, 1)
    idx = torch.zeros(3, 1, dtype=torch.int64)
    none, empty_src = torch.zeros(0, 1, dtype=torch.int64), torch.randn(0, 1)
    compiled = loops(fn, x, idx, src, none, empty_src)
    check(compiled, fn, x, idx, src, none, empty_src)
    assert compiled.fallback_ops == ()


def test_out_of_range_indices_raise_torchs_error_and_write_nothing_outside(loops):
    def fn(x, idx, src, rows):
        return (
            aten.scatter_add.default(x, 0, idx, src),
            aten.index_add.default(x, 0, rows, src),
            aten.index_put.default(x, [rows], src, True),
        )

    x, src = torch.randn(4, 3), torch.randn(2, 3)
    idx, rows = torch.tensor([[0, 3, 1], [2, 2, 0]]), torch.tensor([3, 0])
    compiled = loops(fn, x, idx, src, rows)
    check(compiled, fn, x, idx, src, rows)
    for bad_idx, bad_rows in [
        (idx + 1, rows),  # 4: past the end
        (idx - 1, rows),  # -1: scatter takes no negative index
        (idx, torch.tensor([3, 4])),
        (idx, torch.tensor([-1, 0])),  # index_add takes no negative index
        (idx, torch.tensor([-5, 0])),
    ]:
        before = x.clone()
        raises_like_torch(compiled, fn, x, bad_idx, src, bad_rows)
        assert torch.equal(x, before)  # inputs are never written


@pytest.mark.parametrize("step", [1, 2])
def test_writes_into_select_and_slice_views_and_their_backward_ops(loops, step):
    def fn(x, row, cols, grad_row, grad_cols, empty):
        return (
            aten.select_scatter.default(x, row, 0, -2),
            aten.slice_scatter.default(x, cols, 1, 1, None, step),
            aten.select_backward.default(grad_row, [6, 5], 1, 3),
            aten.slice_backward.default(grad_cols, [6, 5], 0, -5, 9, step),
            aten.slice_scatter.default(x, empty, 1, 2, 2),  # writes nothing
        )

    x = torch.randn(6, 5)
    row = torch.randn(5)
    cols = torch.randn(6, len(range(1, 5, step)))
    grad_row = torch.randn(6)
    grad_cols = torch.randn(len(range(1, 6, step)), 5)
    empty = torch.randn(6, 0)
    compiled = loops(fn, x, row, cols, grad_row, grad_cols, empty)
    check(compiled, fn, x, row, cols, grad_row, grad_cols, empty)
    assert compiled.fallback_ops == ()


def test_large_scatters_split_a_free_dim_across_threads(cpp):
    def fn(x, rows, cols, src, i, j, values):
        return (
            aten.index_add.default(x, 0, rows, src),  # last source dim is free
            aten.scatter_add.default(x, 1, cols, src),  # first source dim is free
            aten.index_put.default(x, [i, j], values, True),  # none: serial
        )

    x, src = torch.randn(300, 256), torch.randn(200, 256)
    rows, cols = torch.randint(0, 300, (200,)), torch.randint(0, 256, (200, 256))
    i, j = torch.randint(0, 300, (40_000,)), torch.randint(0, 256, (40_000,))
    values = torch.randn(40_000)
    compiled = cpp(fn, x, rows, cols, src, i, j, values)
    bad_rows, bad_cols = rows.clone(), cols.clone()
    bad_rows[150], bad_cols[120, 200] = 300, -1
    threads = torch.get_num_threads()
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            check(compiled, fn, x, rows, cols, src, i, j, values, rtol=1e-5, atol=1e-5)
            raises_like_torch(compiled, fn, x, bad_rows, cols, src, i, j, values)
            raises_like_torch(compiled, fn, x, rows, bad_cols, src, i, j, values)
    finally:
        torch.set_num_threads(threads)
    source = compiled.cpp_source
    assert source.count("ember_lo = 256 * ember_t / ember_nt") == 1
    assert source.count("#pragma omp parallel for reduction(|:ember_bad)") == 1
