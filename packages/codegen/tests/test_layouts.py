"""Ops run through torch get their tensors in the layout the graph traced.

A copy (clone, contiguous) whose values are a plain re-indexing of another
tensor is computed as index math; handed to an op that runs through torch it
could be a strided view of that tensor. Some ops read more than the values:
``as_strided`` reads the storage, and internal kernels such as
``_embedding_bag`` assume the contiguous indices their public wrapper made. So
such an argument is a real tensor with the traced strides and storage offset.
"""

import torch
from conftest import check

aten = torch.ops.aten


def test_a_contiguous_copy_passed_to_a_torch_op_is_contiguous(loops):
    # F.embedding_bag makes the indices contiguous, then calls _embedding_bag,
    # whose CPU kernel reads them as contiguous memory.
    def fn(weight, indices):
        flat = aten.view.default(indices, [25])
        flat = aten.clone.default(flat, memory_format=torch.contiguous_format)
        offsets = aten.arange.start_step(0, 25, 5, dtype=torch.int64)
        bags = aten._embedding_bag.default(weight, flat, offsets, False, 1)
        return (bags[0],)

    weight = torch.randn(10, 5)
    indices = torch.randint(0, 10, (5, 10))[:, ::2]  # every other column
    compiled = loops(fn, weight, indices)
    check(compiled, fn, weight, indices)
    assert compiled.fallback_ops == ("aten._embedding_bag.default",)


def test_as_strided_of_an_expanded_copy_reads_the_copy(loops):
    # A circular pad's backward: autograd's as_strided of a copy of the
    # expanded gradient of a sum, and as_strided_scatter into that copy.
    def fn(grad):
        full = aten.clone.default(aten.expand.default(grad, [2, 5, 6]))
        part = aten.as_strided.default(full, [2, 5], [30, 6], 1)
        part = aten.mul.Tensor(part, 2.0)
        out = aten.as_strided_scatter.default(full, part, [2, 5], [30, 6], 1)
        return (aten.as_strided.default(full, [2, 3], [6, 2], 7), out)

    grad = torch.tensor(3.0)
    compiled = loops(fn, grad)
    check(compiled, fn, grad)


def test_as_strided_of_a_transposed_copy_reads_the_copy(loops):
    def fn(x):
        copy = aten.clone.default(
            aten.permute.default(x, [1, 0]), memory_format=torch.contiguous_format
        )
        return (aten.as_strided.default(copy, [3, 2], [1, 3], 1),)

    x = torch.randn(4, 3)
    check(loops(fn, x), fn, x)


def test_as_strided_reaching_outside_a_view_runs_through_torch(loops):
    # The slice's own elements do not hold what as_strided reads, so no copy of
    # them can stand in for the slice: the graph runs as torch runs it.
    def fn(x):
        y = aten.mul.Tensor(x, 2.0)
        part = aten.slice.Tensor(y, 0, 1, 2)
        return (aten.as_strided.default(part, [2, 3], [3, 1], 0),)

    x = torch.randn(3, 3)
    compiled = loops(fn, x)
    check(compiled, fn, x)


def test_as_strided_of_a_copy_of_a_slice_reads_the_copy(loops):
    # The copy's values are the slice's, in the same strides, but its storage
    # starts at the slice's first element.
    def fn(x):
        copy = aten.clone.default(aten.slice.Tensor(x, 0, 1, 3))
        return (aten.as_strided.default(copy, [2], [1], 0),)

    x = torch.randn(4, 3)
    check(loops(fn, x), fn, x)


def test_as_strided_of_a_view_of_a_copy_reads_the_copy(loops):
    def fn(x):
        copy = aten.clone.default(aten.slice.Tensor(x, 0, 1, 3))
        row = aten.select.int(copy, 0, 1)
        return (aten.as_strided.default(row, [2], [1], 1),)

    x = torch.randn(4, 3)
    check(loops(fn, x), fn, x)


def test_memory_a_torch_op_returns_a_view_of_is_never_reused(loops):
    # as_strided's result is a view of y's memory: once y is dead, a later
    # buffer of the same size (z) must not take that memory while the view lives.
    def fn(x, w):
        y = aten.mul.Tensor(x, 2.0)
        view = aten.as_strided.default(y, [512, 1024], [1024, 1], 0)
        z = aten.exp.default(aten.add.Tensor(x, 1.0))
        m = aten.mm.default(z, w)
        return (aten.add.Tensor(view, m),)

    x = torch.randn(512, 1024)  # 2 MiB buffers: above the reuse threshold
    w = torch.randn(1024, 1) / 100
    compiled = loops(fn, x, w)
    check(compiled, fn, x, w, rtol=1e-4, atol=1e-4)


def test_a_view_of_a_copy_is_never_an_alias_of_the_original(loops):
    # repeat_interleave(x, 1): clone(expand(x)) viewed flat. Eager's result is
    # the copy's memory; a writer into it must not change x.
    def fn(x):
        col = aten.expand.default(aten.unsqueeze.default(x, 1), [12, 1])
        copy = aten.clone.default(col, memory_format=torch.contiguous_format)
        return (aten.view.default(copy, [12]), aten.t.default(aten.clone.default(x)))

    x = torch.randn(12)
    compiled = loops(fn, x)
    check(compiled, fn, x)
    flat, row = compiled(x)
    assert flat.data_ptr() != x.data_ptr() and row.data_ptr() != x.data_ptr()


def test_as_strided_without_an_offset_starts_at_its_input(loops):
    def fn(x):
        copy = aten.clone.default(aten.slice.Tensor(x, 0, 1, 3))
        row = aten.select.int(copy, 0, 1)
        return (aten.as_strided.default(row, [2], [1]),)

    x = torch.randn(4, 3)
    check(loops(fn, x), fn, x)


def test_a_view_of_a_torch_op_result_reads_it_in_its_real_strides(loops):
    # _linalg_svd's CPU kernel returns Vh column-major where its meta kernel says
    # row-major: torch.svd's V (Vh transposed) came back as Vh itself.
    def fn(x):
        _, s, vh = aten._linalg_svd.default(x, False)
        return (aten.t.default(vh), s)

    x = torch.randn(3, 3)
    # The values; the strides are the meta kernel's (eager's V is row-major).
    torch.testing.assert_close(loops(fn, x)(x), fn(x))


def test_an_output_expanded_along_its_last_dims_is_computed(loops):
    """A second output that expands a reduction another output returns gets
    its own memory, laid out as eager's view (stride 0 along the expanded
    dims): every position of a block writes the same address."""

    def fn(x):
        total = aten.sum.dim_IntList(x, [1])
        again = aten.unsqueeze.default(aten.sum.dim_IntList(x, [1]), 1)
        return (total, aten.expand.default(again, [4, 5]))

    x = torch.randn(4, 5)
    compiled = loops(fn, x)
    check(compiled, fn, x)
    total, expanded = compiled(x)
    assert total.untyped_storage().data_ptr() != expanded.untyped_storage().data_ptr()
