"""Each lowering against eager torch on fresh random data, including
non-contiguous, transposed and broadcast inputs, 0-d tensors, size-0 and size-1
dims, NaN and inf: on the C++ target, and on the Triton target too where it
runs (``loops``; ``nox -s triton`` runs it under Triton's interpreter). What
a test says about the C++ source holds for the C++ target only."""

import math

import pytest
import torch
from conftest import check, lowered, raises_like_torch

from ember_codegen import CodegenError

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
def test_unary_ops_with_nan_and_inf(loops, op):
    x = special(6, 7)
    fn = lambda a: (op(a), op(aten.t.default(a)))  # noqa: E731 - a one-line graph
    check(loops(fn, x), fn, x)


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
def test_binary_ops_broadcast_and_transposed(loops, op):
    def fn(x, y, s):
        t = aten.t.default(x)
        col = aten.expand.default(aten.unsqueeze.default(y, 1), [4, 5])
        return (op(x, y), op(t, col), op(x, s), op(s, s))

    a, b, s = special(5, 4), special(4), torch.tensor(0.5)
    a[1, 1] = b[1] = 0.5  # equal elements, for the comparisons
    check(loops(fn, a, b, s), fn, a, b, s)


def test_type_promotion_int_bool_double(loops):
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
    check(loops(fn, f, i, b, d), fn, f, i, b, d)


def test_zero_d_size_zero_and_size_one(loops):
    def fn(s, e, o):
        return (
            aten.mul.Tensor(s, 3.0),
            aten.exp.default(e),
            aten.sum.dim_IntList(e, [1]),
            aten.add.Tensor(o, s),
            aten.amax.default(o, [0], True),
        )

    s, e, o = torch.tensor(1.5), torch.randn(0, 3), torch.randn(1, 4)
    check(loops(fn, s, e, o), fn, s, e, o)


def test_views_are_index_math(loops):
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
    compiled = loops(fn, x)
    check(compiled, fn, x)
    # Views are index math: only the three outputs get memory, and the loops
    # read x directly (one loop per output shape family).
    assert compiled.wrapper_source.count("empty_strided(") == 3
    assert len(compiled.loops()) == 2
    assert all(k.kind == "loop" for k in compiled.kernels)


def test_cat_split_and_non_contiguous_input(loops):
    def fn(a, b):
        parts = aten.split.Tensor(a, 3, 1)
        gates = aten.unsafe_split.Tensor(a, 4, 1)  # what GRU and LSTM cells use
        sized = aten.unsafe_split_with_sizes.default(b, [1, 1], 1)
        return (
            aten.cat.default([a, b], 1),
            aten.cat.default([parts[1], parts[0]], 0),
            aten.mul.Tensor(parts[2], 2),
            aten.sub.Tensor(gates[0], gates[1]),
            aten.add.Tensor(sized[1], sized[0]),
        )

    a = torch.randn(8, 4).t()  # (4, 8), transposed strides
    b = torch.randn(4, 2)
    compiled = loops(fn, a, b)
    check(compiled, fn, a, b)
    assert lowered(compiled)


@pytest.mark.parametrize("dims, keepdim", [([1], False), ([0], True), ([0, 1], False)])
def test_reductions(loops, dims, keepdim):
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
    check(loops(fn, x), fn, x, rtol=1e-4, atol=1e-5)


def test_reductions_propagate_nan_and_inf(loops):
    def fn(x):
        return (
            aten.amax.default(x, [1]),
            aten.sum.dim_IntList(x, [1]),
            aten.max.default(x),
        )

    x = torch.randn(4, 37)
    x[0, 3], x[1, 30], x[2, 0] = math.nan, math.inf, -math.inf
    check(loops(fn, x), fn, x)


def test_long_float_sum_stays_accurate(loops):
    fn = lambda x: (aten.sum.default(x), aten.mean.dim(x, [0]))  # noqa: E731
    x = torch.rand(300_000) + 1e3
    check(loops(fn, x), fn, x, rtol=1e-6, atol=0)


def test_softmax_log_softmax_layer_norm_gelu(loops):
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
    check(loops(fn, x, w, b), fn, x, w, b, rtol=1e-5, atol=1e-5)
    x[0, 0] = math.nan
    check(loops(fn, x, w, b), fn, x, w, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [1, 7, 64, 130, 1029])
def test_softmax_and_layer_norm_rows_with_non_finite_values(loops, length):
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
    compiled = loops(fn, x, w, b, rows)
    check(compiled, fn, x, w, b, rows, rtol=1e-5, atol=1e-5)
    empty = torch.randn(0, length)  # no rows
    check(loops(fn, empty, w, b, rows[:0]), fn, empty, w, b, rows[:0])


def test_exp_within_one_ulp_of_float64_down_into_denormals(cpp):
    """ember_exp, the C++ target's own exp (Triton's is its library's)."""
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


def test_log_within_one_ulp_of_float64_over_every_binade(cpp):
    """ember_log (the C++ target's own log) on a sample of every positive
    float's bit pattern (denormals and both sides of sqrt(2) included), and
    torch's value at the edges."""
    fn = lambda x: (aten.log.default(x),)  # noqa: E731
    bits = torch.arange(1, 0x7F800000, 4099, dtype=torch.int64).to(torch.int32)
    edges = [0.0, -0.0, -1.0, math.inf, -math.inf, math.nan, 1.0, 2.0**-149]
    x = torch.cat([bits.view(torch.float32), torch.tensor([*edges, 1.4142135])])
    compiled = cpp(fn, x)
    assert "ember_log(" in compiled.cpp_source
    got = compiled(x)[0]
    exact = torch.log(x.double())
    spacing = torch.nextafter(exact.float(), torch.tensor(math.inf)) - exact.float()
    finite = torch.isfinite(exact)
    ulps = (got.double() - exact).abs() / spacing.double()
    assert ulps[finite].max() <= 1.0
    assert torch.equal(
        got[~finite].nan_to_num(7.0), torch.log(x)[~finite].nan_to_num(7.0)
    )


# Each branch's edges (erf: 0.5, 2, 4 and 3.92, where it rounds to 1; tanh: 0.7
# and 44, where its exp overflows), tiny and denormal inputs.
EDGES_OF = {
    aten.erf.default: [0.5, 2.0, 4.0, 3.92, 1e-30, 2.0**-149, 1e-40],
    aten.tanh.default: [0.7, 44.0, 9.01, 1e-30, 2.0**-149, 1e-40],
}


@pytest.mark.parametrize("op", list(EDGES_OF), ids=str)
def test_vectorized_math_one_float_from_float64_and_exact_at_the_edges(loops, op):
    fn = lambda x: (op(x),)  # noqa: E731
    edges = torch.tensor(EDGES_OF[op]).repeat(3)
    nudge = torch.tensor([1.0, 1 + 2**-23, 1 - 2**-24])
    edges = edges * nudge.repeat_interleave(len(EDGES_OF[op]))
    x = torch.cat([torch.linspace(-12, 12, 200_001), edges, -edges])
    got = loops(fn, x)(x)[0]
    rounded = op(x.double()).float()  # the correctly rounded result, nearly always
    steps = (got.view(torch.int32).long() - rounded.view(torch.int32).long()).abs()
    assert steps.max() <= 1  # at most one float away
    special = torch.tensor([math.nan, math.inf, -math.inf, 0.0, -0.0, 100.0, -100.0])
    got = loops(fn, special)(special)[0]
    torch.testing.assert_close(got, op(special), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got.signbit(), op(special).signbit())


def test_reductions_over_leading_dims_run_by_columns(loops):
    """Bias gradients and other sums over rows: lanes along the contiguous
    output, each folding its column in order; tails, NaN, ties, several
    reduced dims, keepdim, a team of threads and a long float sum."""

    def fn(x, y, z, tall):
        return (
            aten.sum.dim_IntList(x, [0]),
            aten.amax.default(y, [0, 1]),
            aten.amin.default(y, [0, 1], True),
            aten.argmax.default(x, 0),
            aten.argmin.default(y, 1),
            aten.prod.dim_int(aten.mul.Tensor(x, 0.01), 0),
            aten.sum.dim_IntList(z, [0, 1]),
            aten.sum.dim_IntList(tall, [0]),
        )

    x = torch.randn(300, 70)
    x[7, 3], x[9, 3] = math.nan, math.inf
    x[5, 4] = x[200, 4] = 50.0  # a tie: the first row wins
    y = torch.randn(5, 33, 130)
    y[1, 2, 129] = -math.inf
    z = torch.randn(64, 32, 96)  # enough work for the team
    tall = torch.randn(20_000, 12)
    compiled = loops(fn, x, y, z, tall)
    by_columns = compiled.cpp_source.count("by columns")
    if compiled.target == "cpp":  # each reduces over outer dims
        assert by_columns == 8, compiled.cpp_source
    got = compiled(x, y, z, tall)
    for a, e in zip(got, fn(x, y, z, tall)):
        torch.testing.assert_close(a, e, equal_nan=True, rtol=1e-5, atol=1e-4)
    exact = tall.double().sum(0)
    assert ((got[-1].double() - exact).abs() < 2e-3).all()  # cascaded, not serial


def test_chained_reductions_over_leading_dims_run_by_columns(loops):
    """A reduction that reads an earlier one (variance: its mean; logsumexp:
    its max; max with values: a gather at the argmax) over a middle or first
    dim still runs by columns, each lane keeping its results; equal to eager,
    NaN, infinities and ties included, and in bfloat16."""

    def fn(x, h):
        mean = aten.div.Scalar(aten.sum.dim_IntList(x, [1]), 64)
        centered = aten.sub.Tensor(x, aten.unsqueeze.default(mean, 1))
        var = aten.div.Scalar(
            aten.sum.dim_IntList(aten.mul.Tensor(centered, centered), [1]), 63
        )
        big = aten.amax.default(x, [0], True)
        shifted = aten.exp.default(aten.sub.Tensor(x, big))
        lse = aten.add.Tensor(
            aten.log.default(aten.sum.dim_IntList(shifted, [0], True)), big
        )
        values, indices = aten.max.dim(x, 1)
        half = aten.amax.default(aten.mul.Tensor(h, h), [1])
        return var, lse, values, indices, half

    x = torch.randn(8, 64, 16)
    x[2, 5, 7] = math.nan
    x[:, 3, 9] = math.inf
    x[4, 10, 11] = x[4, 20, 11] = 40.0  # a tie: the first wins
    h = torch.randn(4, 32, 16, dtype=torch.bfloat16)
    compiled = loops(fn, x, h)
    # var (2 reductions, 1 division), logsumexp (2), max (argmax, gather), bf16 amax
    if compiled.target == "cpp":
        assert compiled.cpp_source.count("by columns") == 8, compiled.cpp_source
        assert "_col[k]" in compiled.cpp_source
    for got, want in zip(compiled(x, h), fn(x, h)):
        torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-5)


def test_float64_and_int32_kernels(loops):
    def fn(d, i):
        return (
            aten._softmax.default(d, -1, False),
            aten.mul.Tensor(aten.add.Tensor(i, i), 3),
            aten.amax.default(i, [0]),
        )

    d = torch.randn(3, 9, dtype=torch.float64)
    i = torch.randint(-100, 100, (4, 5), dtype=torch.int32)
    check(loops(fn, d, i), fn, d, i)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gelu_non_finite_values_match_eager_for_every_layout(loops, approximate, dtype):
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
    check(loops(fn, x, one), fn, x, one, rtol=1e-5, atol=1e-5)


# --- more elementwise ops ----------------------------------------------------------


EDGES = [math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 1.0]


def edge_values(*shape, dtype=torch.float32):
    """Random values after NaN, +-inf, +-0.0, halves (round's ties) and values
    inside and outside [-1, 1] (the inverse trigonometric domains)."""
    x = torch.randn(*shape, dtype=dtype) * 2
    x.view(-1)[: len(EDGES)] = torch.tensor(EDGES, dtype=dtype)[: x.numel()]
    return x


MORE_UNARY = [
    aten.asin.default,
    aten.acos.default,
    aten.atan.default,
    aten.sinh.default,
    aten.cosh.default,
    aten.tan.default,
    aten.asinh.default,
    aten.acosh.default,
    aten.atanh.default,
    aten.round.default,
    aten.sign.default,
    aten.sgn.default,
    aten.isnan.default,
    aten.isinf.default,
    aten.isposinf.default,
    aten.isneginf.default,
    aten.signbit.default,
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", MORE_UNARY, ids=str)
def test_more_unary_ops_on_edge_values(loops, op, dtype):
    def fn(a, s):
        return (op(a), op(aten.t.default(a)), op(s))

    x, s = edge_values(5, 6, dtype=dtype), torch.tensor(-0.0, dtype=dtype)
    compiled = loops(fn, x, s)
    check(compiled, fn, x, s)
    assert lowered(compiled)
    # Signs of zeros (sign gives +0 for -0.0 and NaN, round keeps -0.0) count.
    for got, want in zip(compiled(x, s), fn(x, s)):
        if got.dtype.is_floating_point:
            same_sign(got, want)


def same_sign(got, want):
    """The sign bits agree where torch's result is not NaN (NaN's is noise)."""
    number = ~torch.isnan(want)
    assert torch.equal(torch.signbit(got)[number], torch.signbit(want)[number])


INTEGER_OK = [
    aten.round.default,
    aten.sign.default,
    aten.sgn.default,
    aten.isnan.default,
    aten.isinf.default,
    aten.signbit.default,
    aten.asin.default,  # promotes to float
    aten.atan.default,
]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool], ids=str)
@pytest.mark.parametrize("op", INTEGER_OK, ids=str)
def test_more_unary_ops_on_integers_and_bools(loops, op, dtype):
    fn = lambda a: (op(a),)  # noqa: E731 - a one-line graph
    x = torch.randint(-3, 4, (4, 5)).to(dtype)
    compiled = loops(fn, x)
    if dtype == torch.bool and op == aten.round.default:
        # Eager rejects it (its meta function does not): the fallback raises.
        assert compiled.fallback_ops == ("aten.round.default",)
        raises_like_torch(compiled, fn, x)
        return
    check(compiled, fn, x)
    assert lowered(compiled)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_round_decimals(loops, dtype):
    def fn(a):
        return tuple(aten.round.decimals(a, decimals=d) for d in (-2, -1, 0, 1, 3))

    x = edge_values(4, 6, dtype=dtype) * 317
    x[3] = torch.tensor([2.675, -1.005, 1250.0, 0.125, 1e30, -0.0005], dtype=dtype)
    compiled = loops(fn, x)
    check(compiled, fn, x, rtol=0, atol=0)
    assert lowered(compiled)


DIVISORS = [3.0, -3.0, 0.0, -0.0, math.inf, -math.inf, math.nan, 0.75]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_remainder_fmod_atan2_on_special_divisors(loops, dtype):
    def fn(a, b, col):
        ops = (aten.remainder.Tensor, aten.fmod.Tensor, aten.atan2.default)
        outs = [op(a, b) for op in ops]
        outs += [op(aten.t.default(a), col) for op in ops]  # transposed, broadcast
        outs += [
            aten.remainder.Scalar(a, -2.5),
            aten.fmod.Scalar(a, 2.5),
            aten.remainder.Scalar_Tensor(7.5, b),
        ]
        return tuple(outs)

    a = edge_values(8, 8, dtype=dtype) * 4
    b = torch.tensor(DIVISORS, dtype=dtype).repeat(8, 1).t().contiguous()
    col = torch.tensor(DIVISORS, dtype=dtype).unsqueeze(1)
    compiled = loops(fn, a, b, col)
    check(compiled, fn, a, b, col)
    assert lowered(compiled)
    for got, want in zip(compiled(a, b, col), fn(a, b, col)):
        same_sign(got, want)  # -0.0 too


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_integer_remainder_and_fmod_by_a_constant(loops, dtype):
    """By a nonzero Python number they are lowered (Python's sign rule for
    remainder, C's for fmod; -1 without C++'s overflow); by a tensor, which
    may hold 0, they run through torch, which raises for 0."""

    def fn(i):
        outs = []
        for d in (3, -3, 1, -1, 32):
            outs += [aten.remainder.Scalar(i, d), aten.fmod.Scalar(i, d)]
        return (*outs, aten.fmod.Tensor(i, i))

    info = torch.iinfo(dtype)
    i = torch.randint(-50, 50, (3, 7), dtype=dtype)
    i[0, :3] = torch.tensor([info.min, info.max, 0], dtype=dtype)
    i[2, 0] = 1  # fmod by itself: no zero divisor
    i[i == 0] = 1
    compiled = loops(fn, i)
    check(compiled, fn, i)
    assert compiled.fallback_ops == ("aten.fmod.Tensor",)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.int64], ids=str)
def test_logical_and_bitwise_ops(loops, dtype):
    def fn(a, b, row):
        outs = [aten.logical_xor.default(a, b), aten.bitwise_not.default(a)]
        for op in (aten.bitwise_and, aten.bitwise_or, aten.bitwise_xor):
            outs += [op.Tensor(a, b), op.Tensor(aten.t.default(b), row)]
            scalar = True if dtype == torch.bool else -6
            outs += [op.Scalar(a, scalar), op.Scalar_Tensor(scalar, b)]
        return tuple(outs)

    a, b = (torch.randint(-50, 50, (5, 5)).to(dtype) for _ in range(2))
    row = torch.randint(-50, 50, (5,)).to(dtype)
    compiled = loops(fn, a, b, row)
    check(compiled, fn, a, b, row)
    assert lowered(compiled)


def test_logical_xor_of_floats(loops):
    def fn(x, y):  # NaN is true, -0.0 false
        return (aten.logical_xor.default(x, y),)

    x, y = edge_values(3, 4), torch.randn(3, 4)
    compiled = loops(fn, x, y)
    check(compiled, fn, x, y)
    assert lowered(compiled)


# --- copies by index math ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_constant_pad_flip_repeat_roll(loops, dtype):
    value = True if dtype == torch.bool else 3

    def fn(x, e):
        t = aten.t.default(x)  # transposed strides
        return (
            aten.constant_pad_nd.default(x, [1, 2], value),
            aten.constant_pad_nd.default(x, [-1, 2, 3, -2]),  # crops and pads
            aten.constant_pad_nd.default(t, [0, 0, 2, 1], value),
            aten.constant_pad_nd.default(e, [1, 1, 1, 0], value),  # an empty input
            aten.flip.default(x, [0, -1]),
            aten.flip.default(t, [1]),
            aten.repeat.default(x, [2, 1, 3]),
            aten.repeat.default(t, [1, 0]),
            aten.roll.default(x, [2, -7], [0, 1]),
            aten.roll.default(t, [13]),  # flattened
            aten.roll.default(x, [1, 1], [1, 1]),
        )

    x = torch.randint(-9, 9, (4, 6)).to(dtype)
    e = torch.zeros(0, 3, dtype=dtype)
    compiled = loops(fn, x, e)
    check(compiled, fn, x, e)
    assert lowered(compiled)


def test_pad_and_flip_keep_nan_and_feed_library_calls(loops):
    def fn(x, w):
        # A flip into mm needs a tensor: it is copied (torch's as_strided
        # takes no negative strides), not viewed.
        flipped = aten.flip.default(w, [0])
        padded = aten.constant_pad_nd.default(x, [0, 1], math.nan)
        return (aten.mm.default(x, flipped), padded, aten.flip.default(padded, [1]))

    x, w = edge_values(3, 4), torch.randn(4, 5)
    compiled = loops(fn, x, w)
    check(compiled, fn, x, w)
    assert lowered(compiled)


# --- argmax, argmin, max.dim, min.dim, any, all --------------------------------------


def tied(*shape, dtype=torch.float32):
    """Small integers (many ties) with NaN, -inf and a row of equal values."""
    x = torch.randint(-3, 4, shape).to(dtype)
    if dtype.is_floating_point and x.numel() > 20:
        flat = x.view(-1)
        flat[7], flat[15], flat[16] = math.nan, -math.inf, math.nan
        x[-1] = -math.inf  # a row that never beats the identity
    return x


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.int64, torch.int32], ids=str
)
@pytest.mark.parametrize("length", [1, 5, 67, 130])
def test_argmax_argmin_first_index_nan_and_ties(loops, dtype, length):
    def fn(x):
        t = aten.t.default(x)
        outs = []
        for op in (aten.argmax.default, aten.argmin.default):
            outs += [op(x), op(x, 1), op(x, 0, True), op(t, -1), op(x, None, True)]
        return tuple(outs)

    x = tied(6, length, dtype=dtype)
    compiled = loops(fn, x)
    check(compiled, fn, x)
    assert lowered(compiled)


@pytest.mark.parametrize("indices", [True, False], ids=["with indices", "values alone"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool], ids=str)
def test_max_min_dim_values_and_indices(loops, dtype, indices):
    """Without its indices read, ``x.max(d).values`` is lowered as amax (the
    same values, NaN included)."""

    def fn(x, s):
        outs = []
        for op in (aten.max.dim, aten.min.dim):
            for args in ((x, 1), (x, 0, True), (aten.t.default(x), 1), (s, 0)):
                out = op(*args)
                outs += [out[0], out[1]] if indices else [out[0]]
        return tuple(outs)

    x = tied(5, 37, dtype=dtype) if dtype != torch.bool else torch.rand(5, 37) > 0.7
    s = torch.tensor(1, dtype=dtype)  # 0-d
    compiled = loops(fn, x, s)
    check(compiled, fn, x, s)
    assert lowered(compiled)


def test_max_dim_value_is_the_element_at_the_index(loops):
    # The first of tied 0.0 and -0.0 is returned, as in torch (amax may differ).
    def fn(x):
        top, low = aten.max.dim(x, 1), aten.min.dim(x, 1)
        return (top[0], top[1], low[0], low[1])

    x = torch.tensor([[0.0, -0.0, -1.0], [-0.0, 0.0, -1.0], [1.0, -0.0, 0.0]])
    compiled = loops(fn, x)
    for got, want in zip(compiled(x), fn(x)):
        assert torch.equal(got, want)
        assert torch.equal(torch.signbit(got.double()), torch.signbit(want.double()))


def test_argmax_over_many_elements_splits_across_threads(loops):
    fn = lambda x: (aten.argmax.default(x), aten.argmin.default(x))  # noqa: E731
    x = torch.zeros(100_003)  # all ties: the first index, whatever the split
    compiled = loops(fn, x)
    check(compiled, fn, x)
    for at in (99_000, 60_001, 70_000):  # NaNs in several threads' ranges
        x[at] = math.nan
        check(compiled, fn, x)
    x = torch.randint(0, 3, (100_003,)).float()
    x[100_002] = 5.0  # the maximum in the last partial block
    check(compiled, fn, x)
    assert lowered(compiled)


def test_argmax_of_an_empty_tensor(loops):
    x = torch.randn(0, 3)
    ok = lambda x: (aten.argmax.default(x, 1), aten.max.dim(x, 1)[1])  # noqa: E731
    compiled = loops(ok, x)  # reducing a non-empty dim of an empty tensor
    check(compiled, ok, x)
    assert lowered(compiled)
    # Reducing the empty dim fails on meta tensors already, as in torch.
    with pytest.raises(CodegenError, match="non-zero size"):
        loops(lambda x: (aten.argmax.default(x, 0),), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_any_all_every_form(loops, dtype):
    def fn(x, e, s):
        outs = []
        for name in ("any", "all"):
            op = getattr(aten, name)
            outs += [
                op.default(x),
                op.dim(x, 1),
                op.dim(aten.t.default(x), 1, True),
                op.dims(x, [0, 1], True),
                op.dims(x, None),
                op.dim(e, 0),  # reduces an empty dim: any is False, all True
                op.default(s),
            ]
        return tuple(outs)

    x = (torch.rand(6, 9) > 0.4).to(dtype)
    x[0] = 0  # an all-false row
    x[1] = 1  # an all-true row
    if dtype.is_floating_point:
        x[2, 3], x[3] = math.nan, -0.0  # NaN is true, -0.0 false
    e, s = torch.zeros(0, 4, dtype=dtype), torch.tensor(2, dtype=dtype)
    compiled = loops(fn, x, e, s)
    check(compiled, fn, x, e, s)
    assert lowered(compiled)


NAN, INF = math.nan, math.inf
POOLS = {
    "nan_last_wins": (
        torch.tensor([[[[1.0, NAN, 3.0, NAN], [NAN, 2.0, 0.0, 5.0]]]]),
        (2, 2, 0, False),
    ),
    "all_minus_inf_padded": (torch.full((1, 1, 3, 3), -INF), (3, 2, 1, False)),
    "ties_first_valid": (torch.full((1, 1, 2, 2), 2.0), (2, 1, 1, False)),
    "ceil_mode": (torch.randn(2, 3, 9, 11), (3, 2, 1, True)),
    "channels_last": (
        torch.randn(2, 3, 9, 11).contiguous(memory_format=torch.channels_last),
        ((3, 2), (1, 2), (1, 0), False),
    ),
    "no_batch_dim": (torch.randn(3, 8, 8), (2, 2, 0, False)),
    "many_ties": (torch.randint(0, 3, (2, 2, 6, 6)).float(), (3, 1, 1, False)),
}


@pytest.mark.parametrize("case", POOLS)
def test_max_pool2d_values_and_indices_match_torch(loops, case):
    x, (kernel, stride, padding, ceil_mode) = POOLS[case]

    def fn(x):
        out = aten.max_pool2d_with_indices.default(
            x, kernel, stride, padding, 1, ceil_mode
        )
        return (out[0], out[1])

    compiled = loops(fn, x)
    assert lowered(compiled)
    check(compiled, fn, x)
    assert torch.equal(compiled(x)[1], fn(x)[1])  # the same index, every time


@pytest.mark.parametrize("case", POOLS)
def test_max_pool2d_values_alone_take_no_argmax(loops, case):
    """Inference reads only the values: one max per window (no argmax, no
    gather), run by columns along the output row where it is long enough."""
    x, (kernel, stride, padding, ceil_mode) = POOLS[case]

    def fn(x):
        out = aten.max_pool2d_with_indices.default(
            x, kernel, stride, padding, 1, ceil_mode
        )
        return (aten.relu.default(out[0]),)

    compiled = loops(fn, x)
    check(compiled, fn, x)
    assert "argmax_last_nan of" not in compiled.cpp_source


def test_pooling_a_fused_epilogue_runs_by_columns(loops):
    """BatchNorm (eval) and ReLU before a 2x2 pool, as after a convolution:
    the window is read unclamped (it never leaves the input), lanes along the
    output row."""

    def fn(x, mean, var):
        y = aten.relu.default(
            aten.mul.Tensor(
                aten.sub.Tensor(x, aten.view.default(mean, [8, 1, 1])),
                aten.rsqrt.default(aten.view.default(var, [8, 1, 1])),
            )
        )
        return (aten.max_pool2d_with_indices.default(y, [2, 2], [2, 2])[0],)

    x = torch.randn(2, 8, 32, 32)
    x[0, 1, 4, 5] = math.nan
    compiled = loops(fn, x, torch.randn(8), torch.rand(8) + 0.5)
    check(compiled, fn, x, torch.randn(8), torch.rand(8) + 0.5)
    if compiled.target == "cpp":
        assert "by columns" in compiled.cpp_source
        assert "ember_min(t" not in compiled.cpp_source  # no clamped positions


def test_an_overlapping_window_reads_its_costly_input_stored_once(loops):
    """A 3x3 pool with stride 2 reads most of its input two or four times: the
    BatchNorm + ReLU before it is computed once into a buffer (one kernel),
    not again at every read inside the window loop. The values are the
    elements at the argmax positions, so values and indices agree."""

    def fn(x, mean, var):
        y = aten.relu.default(
            aten.add.Tensor(
                aten.mul.Tensor(
                    aten.sub.Tensor(x, aten.view.default(mean, [8, 1, 1])),
                    aten.rsqrt.default(aten.view.default(var, [8, 1, 1])),
                ),
                0.5,
            )
        )
        out = aten.max_pool2d_with_indices.default(y, [3, 3], [2, 2], [1, 1])
        return (out[0], out[1])

    x, mean, var = torch.randn(2, 8, 12, 12), torch.randn(8), torch.rand(8) + 0.5
    compiled = loops(fn, x, mean, var)
    assert lowered(compiled)
    check(compiled, fn, x, mean, var)
    names = [k.name for k in compiled.loops()]
    pool = [k for k in names if "argmax_last_nan" in compiled.kernel_source(k)]
    assert len(pool) == 1
    source = compiled.kernel_source(pool[0])
    assert "sqrt" not in source and "rsqrt" not in source
    assert " max of" not in source  # the values are read at the positions


def test_a_short_window_pools_without_clamping_cost_in_a_cheap_input(loops):
    """A cheap input (one op) stays inlined into the window: storing it would
    cost more than recomputing it."""

    def fn(x):
        y = aten.mul.Tensor(x, 2.0)
        return (aten.max_pool2d_with_indices.default(y, [3, 3], [2, 2], [1, 1])[0],)

    x = torch.randn(2, 4, 9, 9)
    compiled = loops(fn, x)
    check(compiled, fn, x)
    assert len(compiled.loops()) == 1


def test_max_pool2d_with_dilation_runs_through_torch(loops):
    def fn(x):
        out = aten.max_pool2d_with_indices.default(x, [3, 3], [1, 1], [1, 1], [2, 2])
        return (out[0], out[1])

    x = torch.randn(1, 2, 7, 7)
    compiled = loops(fn, x)
    assert compiled.fallback_ops == ("aten.max_pool2d_with_indices.default",)
    check(compiled, fn, x)


def test_a_loop_reads_a_channels_last_convolution_in_its_compiled_layout(loops):
    """torch's meta kernel says a convolution of a channels-last input is
    row-major; the CPU kernel returns it channels-last. The loop after it
    must still read the right elements."""

    def fn(x, w, b):
        out = aten.convolution.default(
            x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1
        )
        return (aten.mul.Tensor(aten.relu.default(out), 2),)

    x = torch.randn(2, 3, 10, 9).contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(4, 3, 3, 3), torch.randn(4)
    (got,) = loops(fn, x, w, b)(x, w, b)
    torch.testing.assert_close(got, fn(x, w, b)[0])


def _conv(x, w):
    ones = [1, 1]
    return aten.convolution.default(x, w, None, ones, ones, ones, False, [0, 0], 1)


def _bn_relu_pool(y, mean, var, c):
    z = aten.mul.Tensor(
        aten.sub.Tensor(y, aten.view.default(mean, [c, 1, 1])),
        aten.rsqrt.default(aten.view.default(var, [c, 1, 1])),
    )
    return aten.max_pool2d_with_indices.default(aten.relu.default(z), [2, 2])[0]


def test_convolutions_and_what_flows_between_them_run_channels_last(loops):
    """Convolutions take channels-last operands (copied from the row-major
    input and weights), and BatchNorm + ReLU + pooling between two of them
    write channels-last, with the pooling's lanes along the channels, so no
    layout copy sits between the convolutions. The output keeps eager's
    layout."""

    def fn(x, w1, w2, mean, var):
        pooled = _bn_relu_pool(_conv(x, w1), mean, var, 16)
        return (aten.sum.dim_IntList(_conv(pooled, w2), [2, 3]),)

    def inputs():
        return (
            torch.randn(2, 3, 16, 16),
            torch.randn(16, 3, 3, 3),
            torch.randn(8, 16, 3, 3),
            torch.randn(16),
            torch.rand(16) + 0.5,
        )

    compiled = loops(fn, *inputs())
    # oneDNN sums a channels-last convolution in another order than a
    # row-major one: float32 rounding apart, then summed over 64 positions.
    check(compiled, fn, *inputs(), rtol=2e-5, atol=2e-4)
    wrapper = compiled.wrapper_source
    assert wrapper.count("torch.convolution(") == 2
    # Operands copied channels-last: the input, both weights.
    assert "empty_strided((2, 3, 16, 16), (768, 1, 48, 3)" in wrapper
    assert "empty_strided((16, 3, 3, 3), (27, 1, 9, 3)" in wrapper
    assert "empty_strided((8, 16, 3, 3), (144, 1, 48, 16)" in wrapper
    # The pooled activations are written channels-last, lanes along channels.
    assert "empty_strided((2, 16, 8, 8), (1024, 1, 128, 16)" in wrapper
    if compiled.target == "cpp":
        assert "const int64_t i1 = ib + k;" in compiled.cpp_source
    assert compiled(*inputs())[0].stride() == (8, 1)


def test_a_convolution_result_a_view_or_the_output_reads_keeps_its_layout(loops):
    """Only tensors the graph keeps to itself, read by ops that take any
    layout, change layout: a returned convolution, and one a view flattens,
    stay row-major as in eager."""

    def fn(x, w):
        y = _conv(x, w)
        flat = aten.view.default(aten.relu.default(y), [2, -1])
        return (y, flat)

    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    compiled = loops(fn, x, w)
    check(compiled, fn, x, w)
    got, flat = compiled(x, w)
    assert got.stride() == fn(x, w)[0].stride()
    assert "(768, 1, 48, 3)" not in compiled.wrapper_source  # no operand copies
    assert flat.is_contiguous()


def test_what_a_library_call_returns_from_a_channels_last_input_keeps_its_layout(
    loops,
):
    """A convolution whose result is returned runs as eager lays it out, and
    so does an op through torch (erfinv has no lowering): given the
    channels-last activations between, torch returns channels-last results,
    which the wrapper gives back in eager's strides."""

    def fn(x, w1, w2):
        y = aten.relu.default(_conv(x, w1))
        return (_conv(y, w2), aten.erfinv.default(aten.mul.Tensor(y, 0.01)))

    x, w1, w2 = (
        torch.randn(2, 3, 9, 9),
        torch.randn(8, 3, 3, 3),
        torch.randn(4, 8, 3, 3),
    )
    compiled = loops(fn, x, w1, w2)
    assert "(648, 1, 72, 8)" in compiled.wrapper_source  # y is channels-last
    check(compiled, fn, x, w1, w2, rtol=2e-5, atol=2e-4)
    conv = compiled(x, w1, w2)[0]
    assert conv.view(2, -1).shape == (2, 324)  # row-major, as eager's


AVG_POOLS = {
    "padded": ((2, 3, 9, 11), [3, 3], [2, 2], [1, 1], False, True, None),
    "ceil_no_pad_count": ((2, 3, 9, 11), [3, 3], [2, 2], [1, 1], True, False, None),
    "uneven": ((2, 3, 9, 11), [3, 2], [1, 2], [1, 0], True, True, None),
    "tiles": ((1, 2, 8, 8), [2, 2], [2, 2], [0, 0], False, True, None),
    "override_no_batch": ((3, 7, 7), [3, 3], [3, 3], [1, 1], True, False, 5),
    "avg_pool1d": ((2, 4, 1, 16), [1, 2], [1, 2], [0, 0], False, True, None),
}


@pytest.mark.parametrize("case", AVG_POOLS)
def test_avg_pool2d_and_its_backward_match_torch(loops, case):
    shape, *args = AVG_POOLS[case]
    x = torch.randn(*shape)
    x.view(-1)[3] = NAN

    def forward(x):
        return (aten.avg_pool2d.default(x, *args),)

    grad = torch.randn_like(forward(x)[0])

    def backward(grad, x):
        return (aten.avg_pool2d_backward.default(grad, x, *args),)

    for fn, inputs in ((forward, [x]), (backward, [grad, x])):
        compiled = loops(fn, *inputs)
        assert lowered(compiled)
        check(compiled, fn, *inputs)


@pytest.mark.parametrize("literal", [False, True])
@pytest.mark.parametrize("width", [8, 9, 16, 17])
def test_relu_mask_select_over_odd_rows(loops, width, literal):
    """ReLU's backward fused after the relu it recomputes: GCC 12.2 at -O3 with
    -fno-trapping-math read the wrong elements for rows of 9 unless
    -fno-tree-dominator-opts (build.py); in two forms, the zero a loaded
    constant or a literal."""

    def fn(x, a, b):
        mask = aten.le.Scalar(aten.relu.default(x), 0)
        total = aten.add.Tensor(a, b)
        if literal:
            return (aten.masked_fill.Scalar(total, mask, 0.0),)
        return (aten.where.self(mask, aten.scalar_tensor.default(0.0), total),)

    x, a, b = (torch.randn(2, 4, 10, width) for _ in range(3))
    check(loops(fn, x, a, b), fn, x, a, b)


def test_relu_mask_select_of_a_dropout_gradient(loops):
    """Dropout after ReLU, backward: the relu recomputed, compared and
    selected on, the mask scaled. GCC 12.2 at -O3 -march=native with
    -fno-tree-fre wrote zeros everywhere for (4, 5) unless
    -fno-tree-loop-if-convert (build.py); -fno-tree-dominator-opts fixed it
    too but broke the slice test below."""

    def fn(x, mask, tangent):
        scaled = aten.mul.Tensor(
            aten.mul.Tensor(tangent, 3), aten.div.Scalar(mask, 0.5)
        )
        dead = aten.le.Scalar(aten.relu.default(x), 0)
        return (aten.where.self(dead, aten.scalar_tensor.default(0.0), scaled),)

    for shape in [(4, 5), (3, 9), (2, 16), (7, 33)]:
        x, tangent = torch.randn(shape), torch.randn(shape)
        mask = torch.bernoulli(torch.full(shape, 0.5))
        check(loops(fn, x, mask, tangent), fn, x, mask, tangent)


@pytest.mark.parametrize(
    "shape", [(4, 5), (1, 17), (5, 3), (3, 1, 7), (2, 40)], ids=str
)
def test_relu_compares_selected_on_over_small_rows(loops, shape):
    """The pattern GCC 12.2 miscompiled three times (build.py): a relu, a
    comparison of it, a select on that; each comparison and select kind."""

    def fn(x, y):
        relu = aten.relu.default(x)
        zero = aten.scalar_tensor.default(0.0)
        outs = []
        for compare in (aten.le.Scalar, aten.lt.Scalar, aten.gt.Scalar, aten.ge.Scalar):
            for bound in (0, 0.5):
                mask = compare(relu, bound)
                outs.append(aten.where.self(mask, zero, aten.mul.Scalar(y, 3)))
                outs.append(aten.masked_fill.Scalar(y, mask, 0.0))
        return tuple(outs)

    x, y = torch.randn(shape), torch.randn(shape)
    check(loops(fn, x, y), fn, x, y)


def test_cumsum_and_cumprod_fold_in_order_in_torch_accumulate_types(loops):
    """float32 folds in float64 (torch's CPU kernel does), so even a long
    cumsum matches bit for bit; integers and bools give int64."""

    def fn(x, i, b, long, big):
        return (
            aten.cumsum.default(x, 1),
            aten.cumsum.default(x, 0),
            aten.cumprod.default(aten.mul.Scalar(x, 0.5), -1),
            aten.cumsum.default(i, 1),
            aten.cumsum.default(b, 0),
            aten.add.Scalar(aten.cumsum.default(aten.t.default(x), 1), 1),
            aten.cumsum.default(i, 0, dtype=torch.float64),
            aten.cumsum.default(long, 1),
            # each element rounds to float32 first, then folds in float64
            aten.cumsum.default(big, 0, dtype=torch.float32),
            aten.cumprod.default(big, 0, dtype=torch.float32),
        )

    x = torch.randn(5, 70)
    x[1, 3], x[2, 5] = NAN, INF
    i = torch.randint(-5, 5, (5, 70), dtype=torch.int32)
    b, long = torch.rand(5, 70) > 0.5, torch.randn(16, 4096)
    big = torch.tensor([16777217, 1, 16777217, 3])
    compiled = loops(fn, x, i, b, long, big)
    assert lowered(compiled)
    check(compiled, fn, x, i, b, long, big)
    for got, want in zip(
        compiled(x, i, b, long, big)[-3:], fn(x, i, b, long, big)[-3:]
    ):
        assert torch.equal(got, want)
    empty = torch.randn(0, 3)
    check(
        loops(lambda e: (aten.cumsum.default(e, 0),), empty),
        lambda e: (aten.cumsum.default(e, 0),),
        empty,
    )


NEAREST = {
    "up_2": (2, [10, 12], [2.0, 2.0]),
    "up_3": (3, [15, 18], [3.0, 3.0]),
    "sizes_only": (None, [10, 3], [None, None]),
    "mixed": (None, [5, 12], [1.0, 2.0]),
    "odd_ratio_runs_in_torch": (None, [7, 6], [None, None]),
}


@pytest.mark.parametrize("case", NEAREST)
def test_upsample_nearest2d_and_its_backward_match_torch(loops, case):
    _, size, scales = NEAREST[case]
    x = torch.randn(2, 3, 5, 6)
    x[0, 0, 0, 0] = NAN

    def forward(x):
        return (aten.upsample_nearest2d.default(x, size, *scales),)

    grad = torch.randn_like(forward(x)[0])

    def backward(grad):
        return (
            aten.upsample_nearest2d_backward.default(grad, size, [2, 3, 5, 6], *scales),
        )

    in_loops = case != "odd_ratio_runs_in_torch"
    for fn, inputs in ((forward, [x]), (backward, [grad])):
        compiled = loops(fn, *inputs)
        if compiled.target == "cpp":
            assert (compiled.fallback_ops == ()) == in_loops
        check(compiled, fn, *inputs)


@pytest.mark.parametrize("rows", [(2, 4), (0, 2), (1, 3)])
def test_slice_backward_added_over_rows_of_six(loops, rows):
    """A gradient written into rows of planes of 5x6 and added: GCC 12.2 at -O3
    with -fno-tree-dominator-opts (build.py's first workaround for the test
    above, since replaced by -fno-tree-fre) read zeros for the rows inside the
    slice. It was a circular pad's backward (CircularPad3d, pads as large as
    the dims)."""

    def fn(a, b):
        start, end = rows
        grad = aten.slice_backward.default(b, [1, 1, 5, 5, 6], 3, start, end, 1)
        return (aten.add.Tensor(a, grad),)

    a, b = torch.randn(1, 1, 5, 5, 6), torch.randn(1, 1, 5, 2, 6)
    check(loops(fn, a, b), fn, a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_add_and_sub_round_a_python_number_first(loops, dtype):
    """torch's add, sub, rsub and pow take a Python number operand (and
    alpha) of a 16-bit tensor rounded to its dtype; mul and div keep it a
    float. Bit for bit, each op on its own."""
    ops = [
        lambda x: (aten.add.Tensor(x, 0.1),),
        lambda x: (aten.sub.Tensor(x, 0.1),),
        lambda x: (aten.rsub.Scalar(x, 0.1, alpha=3),),
        lambda x: (aten.add.Tensor(x, 257),),
        lambda x: (aten.add.Tensor(x, x, alpha=0.1),),
        lambda x: (aten.pow.Tensor_Scalar(aten.abs.default(x), 0.1),),
        lambda x: (aten.mul.Tensor(x, 0.1),),
        lambda x: (aten.div.Tensor(x, 0.1),),
    ]
    x = (torch.randn(4096) * 3).to(dtype)
    for fn in ops:
        compiled = loops(fn, x)
        assert lowered(compiled)
        assert torch.equal(compiled(x)[0], fn(x)[0])
