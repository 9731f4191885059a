"""Each lowering of the C++ target against eager torch on fresh random data,
including non-contiguous, transposed and broadcast inputs, 0-d tensors, size-0
and size-1 dims, NaN and inf."""

import math

import pytest
import torch
from conftest import check

aten = torch.ops.aten


def special(*shape):
    """Random values with NaN, inf and -inf sprinkled in."""
    x = torch.randn(*shape)
    flat = x.view(-1)
    for value, at in ((math.nan, 0), (math.inf, 3), (-math.inf, 5)):
        if flat.numel() > at:
            flat[at] = value
    return x


UNARY = [
    aten.neg.default,
    aten.abs.default,
    aten.relu.default,
    aten.exp.default,
    aten.log.default,
    aten.sqrt.default,
    aten.rsqrt.default,
    aten.tanh.default,
    aten.sigmoid.default,
    aten.sin.default,
    aten.erf.default,
    aten.reciprocal.default,
    aten.floor.default,
    aten.silu.default,
]


@pytest.mark.parametrize("op", UNARY, ids=str)
def test_unary_ops_with_nan_and_inf(cpp, op):
    x = special(6, 7)
    fn = lambda a: (op(a), op(aten.t.default(a)))  # noqa: E731 - a one-line graph
    check(cpp(fn, x), fn, x)


BINARY = [
    aten.add.Tensor,
    aten.sub.Tensor,
    aten.mul.Tensor,
    aten.div.Tensor,
    aten.maximum.default,
    aten.minimum.default,
    aten.eq.Tensor,
    aten.lt.Tensor,
    aten.ge.Tensor,
]


@pytest.mark.parametrize("op", BINARY, ids=str)
def test_binary_ops_broadcast_and_transposed(cpp, op):
    def fn(x, y, s):
        t = aten.t.default(x)
        col = aten.expand.default(aten.unsqueeze.default(y, 1), [4, 5])
        return (op(x, y), op(t, col), op(x, s), op(s, s))

    a, b, s = special(5, 4), special(4), torch.tensor(0.5)
    a[1, 1] = b[1] = 0.5  # equal elements, for the comparisons
    check(cpp(fn, a, b, s), fn, a, b, s)


def test_type_promotion_int_bool_double(cpp):
    def fn(f, i, b, d):
        return (
            aten.add.Tensor(f, i),
            aten.mul.Tensor(i, b),
            aten.add.Tensor(i, 3),
            aten.div.Tensor(i, 2),
            aten.add.Tensor(f, d),
            aten.mul.Tensor(aten._to_copy.default(f, dtype=torch.int32), 2),
            aten.where.self(b, f, i),
            aten.logical_not.default(b),
            aten.sum.dim_IntList(b, [0]),
        )

    f = torch.randn(3, 4)
    i = torch.randint(-5, 5, (3, 4))
    b = torch.rand(3, 4) > 0.5
    d = torch.randn(4, dtype=torch.float64)
    check(cpp(fn, f, i, b, d), fn, f, i, b, d)


def test_zero_d_size_zero_and_size_one(cpp):
    def fn(s, e, o):
        return (
            aten.mul.Tensor(s, 3.0),
            aten.exp.default(e),
            aten.sum.dim_IntList(e, [1]),
            aten.add.Tensor(o, s),
            aten.amax.default(o, [0], True),
        )

    s, e, o = torch.tensor(1.5), torch.randn(0, 3), torch.randn(1, 4)
    check(cpp(fn, s, e, o), fn, s, e, o)


def test_views_are_index_math(cpp):
    def fn(x):
        v = aten.view.default(x, [2, 3, 8])
        p = aten.permute.default(v, [2, 0, 1])
        c = aten.clone.default(p, memory_format=torch.contiguous_format)
        flat = aten.view.default(c, [8, 6])
        sl = aten.slice.Tensor(flat, 1, 1, 5, 2)
        sel = aten.select.int(v, 1, -1)
        sq = aten.squeeze.dim(aten.unsqueeze.default(sel, 0), 0)
        return (aten.add.Tensor(flat, 1), aten.mul.Tensor(sl, 2), aten.neg.default(sq))

    x = torch.randn(6, 8)
    compiled = cpp(fn, x)
    check(compiled, fn, x)
    # Views are index math: only the three outputs get memory, and the loops
    # read x directly (one loop per output shape family).
    assert compiled.wrapper_source.count("empty_strided(") == 3
    assert len(compiled.loops()) == 2
    assert all(k.kind == "loop" for k in compiled.kernels)


def test_cat_split_and_non_contiguous_input(cpp):
    def fn(a, b):
        parts = aten.split.Tensor(a, 3, 1)
        return (
            aten.cat.default([a, b], 1),
            aten.cat.default([parts[1], parts[0]], 0),
            aten.mul.Tensor(parts[2], 2),
        )

    a = torch.randn(8, 4).t()  # (4, 8), transposed strides
    b = torch.randn(4, 2)
    check(cpp(fn, a, b), fn, a, b)


@pytest.mark.parametrize("dims, keepdim", [([1], False), ([0], True), ([0, 1], False)])
def test_reductions(cpp, dims, keepdim):
    def fn(x):
        return (
            aten.sum.dim_IntList(x, dims, keepdim),
            aten.mean.dim(x, dims, keepdim),
            aten.amax.default(x, dims, keepdim),
            aten.amin.default(x, dims, keepdim),
            aten.var.correction(x, dims, correction=1, keepdim=keepdim),
            aten.prod.dim_int(x, dims[0], keepdim),
        )

    x = torch.randn(6, 40)
    check(cpp(fn, x), fn, x, rtol=1e-4, atol=1e-5)


def test_reductions_propagate_nan_and_inf(cpp):
    def fn(x):
        return (
            aten.amax.default(x, [1]),
            aten.sum.dim_IntList(x, [1]),
            aten.max.default(x),
        )

    x = torch.randn(4, 37)
    x[0, 3], x[1, 30], x[2, 0] = math.nan, math.inf, -math.inf
    check(cpp(fn, x), fn, x)


def test_long_float_sum_stays_accurate(cpp):
    fn = lambda x: (aten.sum.default(x), aten.mean.dim(x, [0]))  # noqa: E731
    x = torch.rand(300_000) + 1e3
    check(cpp(fn, x), fn, x, rtol=1e-6, atol=0)


def test_softmax_log_softmax_layer_norm_gelu(cpp):
    def fn(x, w, b):
        ln = aten.native_layer_norm.default(x, [24], w, b, 1e-5)
        return (
            aten._softmax.default(x, -1, False),
            aten._softmax.default(x, 0, False),
            aten._log_softmax.default(x, 1, False),
            ln[0],
            ln[1],
            ln[2],
            aten.gelu.default(x),
            aten.gelu.default(x, approximate="tanh"),
        )

    x, w, b = torch.randn(5, 24) * 4, torch.randn(24), torch.randn(24)
    check(cpp(fn, x, w, b), fn, x, w, b, rtol=1e-5, atol=1e-5)
    x[0, 0] = math.nan
    check(cpp(fn, x, w, b), fn, x, w, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [1, 7, 64, 130, 1029])
def test_softmax_and_layer_norm_rows_with_non_finite_values(cpp, length):
    def fn(x, w, b, rows):
        out = aten.native_layer_norm.default(x, [length], w, b, 1e-5)
        # The saved mean of a row holding an infinity is inf or NaN in torch
        # depending on where the infinity sits (its running mean); compare it
        # on the other rows.
        finite_rows = aten.index_select.default(out[1], 0, rows)
        return (
            aten._softmax.default(x, -1, False),
            aten._log_softmax.default(x, -1, False),
            out[0],
            finite_rows,
            out[2],
        )

    x, w, b = torch.randn(6, length) * 3, torch.randn(length), torch.randn(length)
    x[1, length // 2] = math.nan
    x[2, 0] = math.inf
    x[3, length - 1] = -math.inf
    x[4] = -math.inf  # softmax of an all -inf row is NaN in torch
    x[5, :] = -80.0 - 30.0 * torch.arange(length)  # exp underflows, denormals
    rows = torch.tensor([0, 1, 5])
    compiled = cpp(fn, x, w, b, rows)
    check(compiled, fn, x, w, b, rows, rtol=1e-5, atol=1e-5)
    empty = torch.randn(0, length)  # no rows
    check(cpp(fn, empty, w, b, rows[:0]), fn, empty, w, b, rows[:0])


def test_exp_within_one_ulp_of_float64_down_into_denormals(cpp):
    fn = lambda x: (aten.exp.default(x),)  # noqa: E731
    x = torch.cat([torch.linspace(-110, 95, 100_003), torch.linspace(-104, -87, 997)])
    got = cpp(fn, x)(x)[0]
    exact = torch.exp(x.double())
    spacing = torch.nextafter(exact.float(), torch.tensor(math.inf)) - exact.float()
    tiny = torch.tensor(2.0**-149, dtype=torch.float64)
    ulps = (got.double() - exact).abs() / torch.maximum(spacing.double(), tiny)
    finite = torch.isfinite(exact.float())
    assert ulps[finite].max() <= 1.0
    assert torch.equal(got[~finite], exact.float()[~finite])  # inf where it overflows


def test_float64_and_int32_kernels(cpp):
    def fn(d, i):
        return (
            aten._softmax.default(d, -1, False),
            aten.mul.Tensor(aten.add.Tensor(i, i), 3),
            aten.amax.default(i, [0]),
        )

    d = torch.randn(3, 9, dtype=torch.float64)
    i = torch.randint(-100, 100, (4, 5), dtype=torch.int32)
    check(cpp(fn, d, i), fn, d, i)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gelu_non_finite_values_match_eager_for_every_layout(cpp, approximate, dtype):
    """Eager's float32 erf-gelu returns NaN for +inf on a contiguous tensor (its
    vectorized kernel) and inf otherwise; the compiled graph must agree."""

    def fn(x, one):
        gelu = lambda t: aten.gelu.default(t, approximate=approximate)  # noqa: E731
        return (
            gelu(x),
            gelu(aten.t.default(x)),
            gelu(aten.slice.Tensor(x, 1, 0, 3)),
            gelu(aten.add.Tensor(x, 1)),  # a fused intermediate, contiguous in eager
            gelu(one),
        )

    x = torch.randn(4, 5, dtype=dtype) * 3
    x[0, :4] = torch.tensor([math.inf, -math.inf, math.nan, 3e38], dtype=dtype)
    x[2, 1] = -3e38
    one = torch.tensor([math.inf], dtype=dtype)
    check(cpp(fn, x, one), fn, x, one, rtol=1e-5, atol=1e-5)
