"""Kernels that repeat within a graph (a model's layers) are compiled once on
both loop targets: the repeats are uses of the first kernel."""

import pytest
import torch
from conftest import check, raises_like_torch

aten = torch.ops.aten


def _layer(x, w):
    h = aten.mm.default(x, w)  # a library call: each layer gets its own kernel
    return aten.relu.default(aten.add.Tensor(aten.mul.Tensor(h, 2.0), 1.0))


def _is_a_use_of(compiled, repeat: str, first: str) -> bool:
    if compiled.target == "cpp":
        text = compiled.kernel_source(repeat)
        return f"// the same loops as {first}, on these buffers" in text
    return f"\n{repeat} = {first}\n" in compiled.cpp_source + "\n"


@pytest.mark.parametrize("cols", [8, 4], ids=["same shapes", "other shapes"])
def test_repeated_layers_compile_their_loops_once(loops, cols):
    """Two layers with the same shapes fuse into kernels that differ only in
    their buffers' names: the second calls the first, so the compiler sees
    the loops once. Layers of other shapes stay two kernels."""

    def fn(x, w1, w2):
        return (_layer(_layer(x, w1), w2),)

    x, w1, w2 = torch.randn(8, 8), torch.randn(8, 8), torch.randn(8, cols)
    compiled = loops(fn, x, w1, w2)
    check(compiled, fn, x, w1, w2)
    first, second = (k.name for k in compiled.loops())
    assert _is_a_use_of(compiled, second, first) == (cols == 8)
    assert "2.0" in compiled.kernel_source(first)
    assert ("2.0" in compiled.kernel_source(second)) == (cols != 8)  # one body


def test_a_repeated_kernel_that_checks_indices_reports_out_of_range(loops):
    """The use that stands in for a repeated kernel returns its index check."""

    def fn(w, i, v):
        a = aten.index_select.default(w, 0, i)
        b = aten.index_select.default(aten.mm.default(a, v), 0, i)
        return (a, b)

    w, v = torch.randn(6, 6), torch.randn(6, 6)
    i = torch.tensor([0, 5, 2, 1, 3, 4])
    compiled = loops(fn, w, i, v)
    check(compiled, fn, w, i, v)
    first, second = (k.name for k in compiled.loops())
    assert _is_a_use_of(compiled, second, first)
    raises_like_torch(compiled, fn, w, torch.tensor([0, 5, 2, 1, 3, 6]), v)


def test_kernels_on_other_dtypes_are_not_repeats(loops):
    """The same loops over a float64 and an int64 input, each cast to float32:
    Triton compiles a kernel per argument types, so they stay two."""

    def fn(x, y, w):
        a = aten.mul.Tensor(aten._to_copy.default(x, dtype=torch.float32), 2.0)
        m = aten.mm.default(a, w)  # each cast gets its own kernel
        b = aten.mul.Tensor(aten._to_copy.default(y, dtype=torch.float32), 2.0)
        return (a, m, b)

    x, y = torch.randn(8, 8, dtype=torch.float64), torch.randint(-9, 9, (8, 8))
    w = torch.randn(8, 8)
    compiled = loops(fn, x, y, w)
    check(compiled, fn, x, y, w)
    assert "the same" not in compiled.cpp_source
