"""The C++ target's fusion, memory planning, fallbacks, errors and kernel cache:
structure is asserted on ``compiled.kernels`` and the generated source."""

import ctypes
import math
import multiprocessing
import re

import pytest
import torch
from conftest import aten_graph, check

from ember_codegen import CodegenError, CompiledGraph, compile_graph
from ember_codegen.render.cpp.build import load_library

aten = torch.ops.aten


def test_matmul_bias_relu_is_one_extern_and_one_loop(cpp):
    def fn(x, w, b):
        return (aten.relu.default(aten.addmm.default(b, x, aten.t.default(w))),)

    x, w, b = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32)
    compiled = cpp(fn, x, w, b)
    check(compiled, fn, x, w, b)
    assert [k.kind for k in compiled.kernels] == ["extern", "loop"]
    assert compiled.fallback_ops == ()
    # The transpose is a strided view handed to the library, not a copy.
    assert "as_strided(w, (16, 32), (1, 16)" in compiled.wrapper_source
    # Through torch's public function: the same kernel, less Python per call.
    assert "= torch.addmm(b, x, " in compiled.wrapper_source


def test_mm_add_relu_epilogue_fuses_into_one_loop(cpp):
    def fn(x, w, b):
        return (aten.relu.default(aten.add.Tensor(aten.mm.default(x, w), b)),)

    x, w, b = torch.randn(8, 16), torch.randn(16, 32), torch.randn(32)
    compiled = cpp(fn, x, w, b)
    check(compiled, fn, x, w, b)
    assert [k.kind for k in compiled.kernels] == ["extern", "loop"]
    assert compiled.loops()[0].ops == ("aten.add.Tensor", "aten.relu.default")


def test_kernel_source_is_one_kernel_without_the_preamble(cpp):
    def fn(x, w):
        y = aten.mm.default(x, w)
        return (aten.relu.default(y), aten.sum.dim_IntList(aten.exp.default(x), [0]))

    x, w = torch.randn(8, 16), torch.randn(16, 4)
    compiled = cpp(fn, x, w)
    names = [k.name for k in compiled.loops()]
    assert len(names) == 2
    for name in names:
        text = compiled.kernel_source(name)
        assert text.startswith(f"// {name}: aten.")
        assert f'extern "C" void {name}(' in text
        assert "#include" not in text and text in compiled.cpp_source
        (other,) = set(names) - {name}
        assert f" void {other}(" not in text
    with pytest.raises(KeyError, match="no generated kernel named 'kernel9'"):
        compiled.kernel_source("kernel9")


def test_every_scalar_op_has_a_cpp_template_and_others_are_refused():
    from ember_codegen.ir.nodes import Call, Const, ScalarOp
    from ember_codegen.render.cpp.expr import SCALAR_OPS

    assert set(SCALAR_OPS) == set(ScalarOp)
    one = Const(1.0, torch.float32)
    assert Call("add", (one, one), torch.float32).op is ScalarOp.ADD
    with pytest.raises(ValueError, match="'softplus' is not a valid ScalarOp"):
        Call("softplus", (one,), torch.float32)


def chain10(x, y):
    z = aten.mul.Tensor(x, 1.5)
    z = aten.add.Tensor(z, y)
    z = aten.relu.default(z)
    z = aten.sub.Tensor(z, x)
    z = aten.exp.default(z)
    z = aten.mul.Tensor(z, z)
    z = aten.minimum.default(z, y)
    z = aten.clamp.default(z, -2.0, 2.0)
    z = aten.div.Tensor(z, 3.0)
    return (aten.neg.default(z),)


def test_ten_op_pointwise_chain_is_one_loop_with_no_intermediates(cpp):
    x, y = torch.randn(64, 33), torch.randn(33)
    compiled = cpp(chain10, x, y)
    check(compiled, chain10, x, y)
    assert len(compiled.kernels) == 1
    assert len(compiled.loops()[0].ops) == 9  # ten nodes; aten.mul.Tensor twice
    assert compiled.wrapper_source.count("empty_strided(") == 1  # the output only
    assert compiled.cpp_source.count("for (int64_t i") == 2  # one loop nest


def _passes_over_input(cpp_source: str, name: str) -> int:
    """Loop nests of the kernel that read ``name``: a nest is one pass."""
    outer = re.findall(r"^  for \(int64_t i0.*?^  }$", cpp_source, re.S | re.M)
    return sum(1 for nest in outer if f"{name}[" in nest) or cpp_source.count(
        f"{name}["
    )


def test_softmax_is_one_kernel_reading_each_row_once_from_memory(cpp):
    fn = lambda x: (aten._softmax.default(x, -1, False),)  # noqa: E731
    x = torch.randn(64, 100)
    compiled = cpp(fn, x)
    check(compiled, fn, x)
    # max, sum(exp) and the normalized output share one parallel loop over rows:
    # each row is read from memory once and stays in cache for the three passes.
    assert len(compiled.kernels) == 1
    assert _passes_over_input(compiled.cpp_source, "x") == 1
    assert compiled.wrapper_source.count("empty_strided(") == 1
    # exp(x - max) is computed once per element: the sum pass stores it in the
    # output row, and the output pass scales it in place.
    output_stage = compiled.cpp_source.split("{  // buf2 = aten._softmax")[1]
    assert "ember_exp" not in output_stage and "buf2[100*i0 + i1];" in output_stage


def test_softmax_is_at_most_two_passes_over_memory_and_prefetches_the_next_row(
    cpp,
):
    fn = lambda x: (aten._softmax.default(x, -1, False),)  # noqa: E731
    x = torch.randn(64, 1024)
    compiled = cpp(fn, x)
    check(compiled, fn, x)
    kernel = compiled.cpp_source.split("// kernel0")[1]
    # Over memory: one read of each row (the max loop) and one write (the
    # exp loop stores into the output row, which the last loop scales in cache).
    assert len(compiled.loops()) == 1 and _passes_over_input(kernel, "x") == 1
    assert kernel.count("ember_exp(") == 1  # one exp per element, no tail
    # While the exp loop works on a cached row, the next row is fetched: one
    # prefetch per 64-byte line of a 64-lane block.
    exp_loop = kernel.split("// buf1 = sum")[1].split("// buf2")[0]
    assert exp_loop.count("__builtin_prefetch(&x[1024*i0 + rb + 10") == 4
    assert "buf0_acc[64]" in kernel


def rotary(q, k, freqs):
    cos, sin = aten.cos.default(freqs), aten.sin.default(freqs)

    def rotate(x):
        turned = aten.mul.Tensor(aten.flip.default(x, [-1]), sin)
        return aten.add.Tensor(aten.mul.Tensor(x, cos), turned)

    return rotate(q), rotate(k)


def test_a_costly_value_read_by_every_head_is_computed_once(cpp):
    # Rotary embeddings: cos and sin of one (positions, dim) table, read by
    # each of q's 4 heads and k's 2 in each batch row: stored once, not
    # recomputed at each of the twelve reads per element.
    q, k, freqs = torch.randn(2, 4, 16, 8), torch.randn(2, 2, 16, 8), torch.randn(16, 8)
    compiled = cpp(rotary, q, k, freqs)
    check(compiled, rotary, q, k, freqs)
    assert compiled.cpp_source.count("ember::cos(") == 1
    assert compiled.cpp_source.count("ember::sin(") == 1
    # Read once per element (one head, one batch row) it stays inlined.
    one = torch.randn(1, 1, 16, 8)
    compiled = cpp(rotary, one, one, freqs)
    check(compiled, rotary, one, one, freqs)
    assert compiled.cpp_source.count("ember::cos(") == 2


def test_full_reductions_split_across_threads_deterministically(cpp):
    def fn(x, y):
        return (aten.sum.default(x), aten.amax.default(y, [0, 1]), aten.mean.default(y))

    x, y = torch.randn(300_001), torch.randn(300, 200)
    y[7, 9] = math.nan
    compiled = cpp(fn, x, y)
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            # torch's float32 sum of 300k values is off by ~1e-4; ours
            # accumulates in float64, so it is held to float64's sum instead.
            check(compiled, fn, x, y, rtol=1e-5, atol=1e-3)
            exact = x.double().sum().float()
            torch.testing.assert_close(compiled(x, y)[0], exact, rtol=1e-7, atol=0)
            first = compiled(x, y)
            again = compiled(x, y)
            for a, b in zip(first, again):  # bit for bit, NaN included
                torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    finally:
        torch.set_num_threads(threads)
    # One split loop for x, one for y's max and sum (same range: one loop).
    assert compiled.cpp_source.count("omp_get_thread_num() == 0") == 2


def test_long_rows_softmax_stores_exp_once_and_stays_accurate(cpp):
    fn = lambda x: (aten._softmax.default(x, -1, False),)  # noqa: E731
    x = torch.randn(3, 5000) * 5
    x[1, 7] = math.inf
    x[2, 9] = math.nan
    compiled = cpp(fn, x)
    check(compiled, fn, x, rtol=1e-5, atol=1e-7)
    kernel = compiled.cpp_source.split("// kernel0")[1]
    assert kernel.count("ember_exp(") == 2  # the sum's vector loop and its tail


def test_decomposed_softmax_also_fuses_into_one_kernel(cpp):
    def fn(x):
        m = aten.amax.default(x, [-1], True)
        e = aten.exp.default(aten.sub.Tensor(x, m))
        return (aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True)),)

    x = torch.randn(16, 50)
    compiled = cpp(fn, x)
    check(compiled, fn, x)
    assert len(compiled.kernels) == 1 and len(compiled.loops()) == 1


def test_mean_and_variance_share_one_sum_and_feed_the_epilogue(cpp):
    def fn(x):
        mean = aten.mean.dim(x, [1], True)
        var = aten.var.correction(x, [1], correction=0, keepdim=True)
        return (aten.div.Tensor(aten.sub.Tensor(x, mean), aten.sqrt.default(var)),)

    x = torch.randn(8, 64)
    compiled = cpp(fn, x)
    check(compiled, fn, x, rtol=1e-5, atol=1e-5)
    assert len(compiled.kernels) == 1
    # The variance's own mean is the mean's sum, computed once; then the sum
    # of squared deviations.
    assert compiled.cpp_source.count(" = sum of ") == 2
    assert "= sum of aten.mean.dim\n" in compiled.cpp_source


def test_a_transposed_result_loops_innermost_along_its_contiguous_dim(cpp):
    """``k.transpose(-2, -1) * scale`` keeps the input's strides: the loop over
    the dim that both the read and the write step through by one runs inside,
    so neither strides through memory."""

    def fn(k):
        return (aten.mul.Scalar(aten.transpose.int(k, -2, -1), 0.125),)

    k = torch.randn(2, 3, 40, 16)
    compiled = cpp(fn, k)
    check(compiled, fn, k)
    source = compiled.cpp_source
    inner = source.index("for (int64_t i2 = 0; i2 < 16; ++i2)")
    assert source.index("for (int64_t i3 = 0; i3 < 40; ++i3)") < inner
    assert compiled(k)[0].stride() == fn(k)[0].stride()


def test_per_channel_vectors_do_not_pull_their_dim_inside(cpp):
    """BatchNorm's backward reads five per-channel vectors beside two whole
    NCHW tensors: the vectors step by one along the channels but span 16
    floats, which stay in cache whichever loop runs inside, so the loop over
    the image's rows (contiguous in the tensors) stays innermost."""

    def fn(x, g, a, b, c, d, e):
        def per_channel(v):
            return aten.view.default(v, [16, 1, 1])

        y = aten.mul.Tensor(aten.sub.Tensor(x, per_channel(a)), per_channel(b))
        y = aten.add.Tensor(aten.mul.Tensor(y, per_channel(c)), per_channel(d))
        return (aten.mul.Tensor(aten.sub.Tensor(g, y), per_channel(e)),)

    inputs = [torch.randn(2, 16, 8, 8), torch.randn(2, 16, 8, 8)]
    inputs += [torch.randn(16) for _ in range(5)]
    compiled = cpp(fn, *inputs)
    check(compiled, fn, *inputs)
    source = compiled.cpp_source
    inner = source.index("for (int64_t i3 = 0; i3 < 8; ++i3)")
    assert source.index("for (int64_t i1 = 0; i1 < 16; ++i1)") < inner


def test_a_column_result_keeps_its_loop_on_the_thread_team(cpp):
    """A (n, 1) result of a transposed row: moving its only long dim inside
    would take the loop off the OpenMP team, so the logical order stays."""

    def fn(x):
        return (aten.mul.Scalar(aten.transpose.int(x, 0, 1), 3.0),)

    x = torch.randn(1, 65536)
    compiled = cpp(fn, x)
    # (The size-1 dim's stride is 1 where eager's is 65536: compare values.)
    torch.testing.assert_close(compiled(x)[0], fn(x)[0])
    source = compiled.cpp_source
    loop = source.index("for (int64_t i0 = 0; i0 < 65536; ++i0)")
    assert "#pragma omp parallel for" in source[:loop]


def test_stages_reading_each_other_across_the_row_keep_the_row_inner(cpp):
    """A stage that reads another stage's row elsewhere than at its own
    element (a flip of a transposed product) needs that row complete first."""

    def fn(x):
        y = aten.mul.Scalar(aten.transpose.int(x, 0, 1), 2.0)
        z = aten.add.Tensor(y, aten.flip.default(y, [1]))
        return (y, z)

    x = torch.randn(24, 20)
    compiled = cpp(fn, x)
    check(compiled, fn, x)


def _heads_back_to_rows(o):
    """Attention's output (batch * heads, seq, dim) back to (batch * seq, model
    dim), as nn.MultiheadAttention does before its output projection."""
    o = aten.view.default(o, [4, 4, 64, 32])
    o = aten.permute.default(o, [0, 2, 1, 3])
    o = aten.clone.default(o, memory_format=torch.contiguous_format)
    return aten.view.default(o, [256, 128])


def test_a_copy_viewed_flat_is_computed_in_its_own_layout(cpp):
    """The copy of a permute, viewed flat for a matmul, is computed as the copy
    (no division or modulo in its loops) and the flat view is free: the copy's
    buffer is made in the flat shape, and the view is never made."""

    def fn(a, b, w):
        return (aten.mm.default(_heads_back_to_rows(aten.bmm.default(a, b)), w),)

    inputs = torch.randn(16, 64, 64), torch.randn(16, 64, 32), torch.randn(128, 128)
    compiled = cpp(fn, *inputs)
    check(compiled, fn, *inputs)
    assert "%" not in compiled.cpp_source.split('extern "C"', 1)[1]
    assert re.search(r"buf\d+ = empty_strided\(\(256, 128\)", compiled.wrapper_source)
    assert re.search(r"buf\d+ = buf\d+  # made in this shape", compiled.wrapper_source)
    assert ".view(" not in compiled.wrapper_source


def test_a_projection_is_called_as_linear_on_the_unflattened_input(cpp):
    """``mm(x.view(-1, d), w.t())`` of a row-major weight is the library call
    ``F.linear(x, w)`` makes: the wrapper makes neither view, and the product
    (read only by a kernel) keeps x's leading dims. The epilogue is written
    into the product's memory, seen in the output's shape. Same bits as eager."""

    def fn(x, w):
        h = aten.mul.Tensor(x, 2.0)
        flat = aten.view.default(h, [16, 32])
        y = aten.mm.default(flat, aten.t.default(w))
        return (aten.relu.default(y),)

    x, w = torch.randn(2, 8, 32), torch.randn(24, 32)
    compiled = cpp(fn, x, w)
    source = compiled.wrapper_source
    assert "torch.nn.functional.linear(buf" in source
    assert source.count("as_strided(") == 1  # the view written into
    assert re.search(
        r"buf\d+ = as_strided\(buf\d+, \(16, 24\), \(24, 1\)\)  # written into", source
    )
    assert "view(" not in source
    assert torch.equal(compiled(x, w)[0], fn(x, w)[0])


def test_a_projection_that_is_an_output_keeps_its_rows(cpp):
    """The product returned to the caller has the mm's own shape: the linear
    call takes the flat rows (the kernel's buffer, made in that shape), and
    neither the flat view nor the weight's transpose is made."""

    def fn(x, w):
        flat = aten.view.default(aten.mul.Tensor(x, 2.0), [16, 32])
        return (aten.mm.default(flat, aten.t.default(w)),)

    x, w = torch.randn(2, 8, 32), torch.randn(24, 32)
    compiled = cpp(fn, x, w)
    check(compiled, fn, x, w)
    source = compiled.wrapper_source
    assert re.search(r"linear\(buf\d+, w\)", source)
    assert "empty_strided((16, 32)" in source and "made in this shape" in source
    assert "as_strided" not in source and ".view(" not in source


def test_a_product_another_call_reads_whole_keeps_its_rows(cpp):
    """A view that is all of the product binds the product itself, so a
    product some library call reads that way keeps the mm's own shape."""

    def fn(x, w, b, w2):
        flat = aten.view.default(aten.mul.Tensor(x, 2.0), [16, 32])
        y = aten.mm.default(flat, aten.t.default(w))
        z = aten.addmm.default(b, aten.view.default(y, [16, 24]), aten.t.default(w2))
        return (aten.relu.default(y), z)

    inputs = [torch.randn(2, 8, 32), torch.randn(24, 32)]
    inputs += [torch.randn(5), torch.randn(5, 24)]
    compiled = cpp(fn, *inputs)
    check(compiled, fn, *inputs)


# (input, the mm's rows made from it): the first rows of a buffer, and an
# input whose size-1 dim has another stride than torch gives a new tensor
ROWS = {
    "first_rows": (
        lambda: torch.randn(4, 16, 48),
        lambda x: aten.select.int(aten.mul.Tensor(x, 2.0), 0, 0),
    ),
    "size_1_stride": (
        lambda: torch.randn(64, 48, 1).transpose(1, 2),
        lambda x: aten.view.default(x, [64, 48]),
    ),
}


@pytest.mark.parametrize("case", ROWS)
def test_only_a_whole_row_major_tensor_is_taken_unflattened(cpp, case):
    """Such rows are multiplied as the view they are: linear of the whole
    tensor would multiply every row of it, or fold it another way."""
    make, rows = ROWS[case]

    def fn(x, w):
        product = aten.mm.default(rows(x), aten.t.default(w))
        return (aten.view.default(product, [-1]),)

    x, w = make(), torch.randn(24, 48)
    compiled = cpp(fn, x, w)
    assert torch.equal(compiled(x, w)[0], fn(x, w)[0])


def test_a_backward_matmul_takes_its_weight_and_input_as_they_are(cpp):
    """A backward's ``mm(grad.view(-1, n), view(w))``: the weight's view is all
    of it as it is (the weight itself), and the gradient is taken unflattened
    by ``matmul`` (the same library call); no view is made in Python."""

    def fn(g, w):
        flat = aten.view.default(aten.mul.Tensor(g, 2.0), [16, 24])
        y = aten.mm.default(flat, aten.view.default(w, [24, 32]))
        return (aten.relu.default(y),)

    g, w = torch.randn(2, 8, 24), torch.randn(24, 32)
    compiled = cpp(fn, g, w)
    source = compiled.wrapper_source
    assert re.search(r"torch\.matmul\(buf\d+, w\)", source)
    # one view: the product's, for the relu written into it
    assert source.count("as_strided(") == 1 and "view(" not in source
    assert torch.equal(compiled(g, w)[0], fn(g, w)[0])


def test_an_output_that_views_an_input_whole_is_a_tensor_of_its_own(cpp):
    def fn(x):
        return (aten.view.default(x, [4, 6]), aten.mul.Tensor(x, 2.0))

    x = torch.randn(4, 6)
    compiled = cpp(fn, x)
    out = compiled(x)[0]
    assert out is not x and out.data_ptr() == x.data_ptr()
    check(compiled, fn, x)


def test_a_copy_a_library_call_took_as_a_view_stays_one(cpp):
    """When a library call already took the copy as a view of its source, the
    flat view after it reads the source as it is (the copy has no memory)."""

    def fn(a, b, v, w):
        o = aten.bmm.default(a, b)  # (16, 64, 32)
        heads = aten.clone.default(
            aten.permute.default(o, [1, 0, 2]), memory_format=torch.contiguous_format
        )
        first = aten.bmm.default(heads, v)  # takes the permuted view of o
        rows = aten.view.default(heads, [1024, 32])
        return (first, aten.mm.default(rows, w))

    inputs = (
        torch.randn(16, 64, 64),
        torch.randn(16, 64, 32),
        torch.randn(64, 32, 8),
        torch.randn(32, 8),
    )
    compiled = cpp(fn, *inputs)
    check(compiled, fn, *inputs)
    assert "%" in compiled.cpp_source  # the flat view reads o through div/mod


def test_dead_buffer_memory_is_reused(cpp):
    def fn(x, w):
        a = aten.mm.default(x, w)  # a library output that dies in the next loop
        # (read across: b cannot be written into a's memory as it goes)
        b = aten.add.Tensor(a, aten.t.default(a))
        c = aten.mm.default(b, w)
        d = aten.add.Tensor(c, aten.t.default(c))  # can take a's memory
        return (aten.mm.default(d, w),)

    x, w = torch.randn(512, 512), torch.randn(512, 512)  # 1 MiB: worth reusing
    compiled = cpp(fn, x, w)
    check(compiled, fn, x, w, rtol=1e-4, atol=1e-4)
    assert "reuses the memory of" in compiled.wrapper_source
    small = cpp(fn, x[:64, :64].contiguous(), w[:64, :64].contiguous())
    assert "reuses the memory of" not in small.wrapper_source  # cheaper fresh


def test_op_without_lowering_runs_through_the_fallback_node(cpp):
    def fn(x):
        values = aten.logcumsumexp.default(aten.mul.Tensor(x, 2), 1)
        top = aten.sort.default(values, 1)
        return (aten.add.Tensor(values, 1), top[0], top[1])

    x = torch.randn(4, 6)
    compiled = cpp(fn, x)
    check(compiled, fn, x)
    assert compiled.fallback_ops == ("aten.logcumsumexp.default", "aten.sort.default")
    assert [k.kind for k in compiled.kernels] == [
        "loop",
        "fallback",
        "fallback",
        "loop",
    ]


def test_unsupported_dtype_falls_back_per_node(cpp):
    def fn(h, x):
        return (aten.add.Tensor(h, h), aten.mul.Tensor(x, 2))

    h, x = torch.randn(4, dtype=torch.complex64), torch.randn(4)
    compiled = cpp(fn, h, x)
    check(compiled, fn, h, x)
    assert compiled.fallback_ops == ("aten.add.Tensor",)
    assert len(compiled.loops()) == 1


def test_in_place_ops_keep_working_through_torch(cpp):
    def fn(x):
        y = aten.clone.default(x)
        aten.add_.Tensor(y, 1)
        return (aten.mul.Tensor(y, 2),)

    x = torch.randn(3)
    compiled = cpp(fn, x)
    check(compiled, fn, x)
    assert compiled.target == "torch"


def test_copies_are_never_aliases_but_views_are(cpp):
    def fn(x):
        return (
            aten.clone.default(x),
            aten._to_copy.default(x, dtype=torch.float32),
            aten.t.default(x),
        )

    x = torch.randn(3, 4)
    compiled = cpp(fn, x)
    check(compiled, fn, x)
    copy, cast, view = compiled(x)
    assert copy.data_ptr() != x.data_ptr() and cast.data_ptr() != x.data_ptr()
    assert view.data_ptr() == x.data_ptr()  # eager's t() is a view too


def test_inputs_unlike_the_examples_run_through_torch(cpp):
    fn = lambda x: (aten.relu.default(aten.add.Tensor(x, 1)),)  # noqa: E731
    compiled = cpp(fn, torch.randn(4, 5))
    for other in (torch.randn(5, 4).t(), torch.randn(3, 3), torch.randn(4, 5).double()):
        check(compiled, fn, other)


_CENTER = """
extern "C" void {name}(const double* __restrict__ total, double* __restrict__ x) {{
  for (int64_t i0 = 0; i0 < 2; ++i0) {{
    for (int64_t i1 = 0; i1 < 1024; ++i1) {{
      for (int64_t i2 = 0; i2 < 2; ++i2) {{
        for (int64_t i3 = 0; i3 < 2; ++i3) {{
          const double t0 = x[4096*i0 + 4*i1 + 2*i2 + i3];
          const double t1 = (total[i1] / 8.0);
          x[4096*i0 + 4*i1 + 2*i2 + i3] = (t0 - t1);
        }}
      }}
    }}
  }}
}}
"""


def test_two_kernels_with_the_same_loops_both_run(kernel_cache):
    """BatchNorm's centering ``x - sum / 8`` in place, twice in one library (a
    graph compiled for many sizes keeps each kernel's own text): GCC 12.2
    folded the second into the first and, with -fno-tree-fre -fno-tree-dce,
    emitted it as a bare return unless -fno-ipa-icf (build.py)."""
    source = "#include <cstdint>\n" + "".join(
        _CENTER.format(name=name) for name in ("kernel0", "kernel1")
    )
    lib, _ = load_library(source, kernel_cache)
    total = torch.randn(1024, dtype=torch.float64)
    for name in ("kernel0", "kernel1"):
        x = torch.randn(2, 1024, 2, 2, dtype=torch.float64)
        want = x - (total / 8).view(1, -1, 1, 1)
        pointers = (ctypes.c_void_p(t.data_ptr()) for t in (total, x))
        getattr(lib, name)(*pointers)
        torch.testing.assert_close(x, want, rtol=0, atol=0)


def test_compiler_error_names_the_source_file(kernel_cache):
    with pytest.raises(CodegenError, match=r"C\+\+ compilation of .*\.cpp failed"):
        load_library('extern "C" void broken( { }\n', kernel_cache)


def test_storable_form_reloads_from_the_disk_cache_or_recompiles(tmp_path):
    def fn(x):
        return (aten._softmax.default(aten.mul.Tensor(x, 3), -1, False),)

    x = torch.randn(4, 8)
    compiled = compile_graph(aten_graph(fn), [x], target="cpp", cache_dir=tmp_path)
    so = compiled.library_path
    assert so.exists() and so.parent == tmp_path
    restored = CompiledGraph.from_bytes(compiled.to_bytes(), cache_dir=tmp_path)
    assert restored.source == compiled.source and restored.kernels == compiled.kernels
    check(restored, fn, x)
    elsewhere = tmp_path / "empty"
    rebuilt = CompiledGraph.from_bytes(compiled.to_bytes(), cache_dir=elsewhere)
    assert rebuilt.library_path.parent == elsewhere and rebuilt.library_path.exists()
    check(rebuilt, fn, x)


def _compile_in_child(cache_dir: str, queue) -> None:
    source = 'extern "C" int answer() { return 42; }\n'
    lib, path = load_library(source, cache_dir)
    queue.put((lib.answer(), str(path)))


def test_two_processes_compiling_the_same_source_is_safe(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_compile_in_child, args=(str(tmp_path), queue))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [r[0] for r in results] == [42, 42]
    assert results[0][1] == results[1][1]
    assert not list(tmp_path.glob("*.tmp"))


def test_generated_source_is_readable(kernel_cache):
    def fn(x, b):
        return (aten.relu.default(aten.add.Tensor(x, b)),)

    gm = aten_graph(fn, user_loc="model.py:7")
    x, b = torch.randn(4, 4), torch.randn(4)
    compiled = compile_graph(gm, [x, b], target="cpp", cache_dir=kernel_cache)
    names = "aten.add.Tensor, aten.relu.default (model.py:7)"
    assert f"// kernel0: {names}" in compiled.cpp_source
    assert f"# kernel0: {names}" in compiled.wrapper_source
    assert compiled.loops()[0].ops == ("aten.add.Tensor", "aten.relu.default")
    assert "buf1[4*i0 + i1] = " in compiled.cpp_source  # named buffers, plain offsets
    assert "#pragma omp" not in compiled.cpp_source  # too small to be worth threads


def test_check_inputs_false_drops_the_per_call_check(kernel_cache):
    def fn(x, w):
        h = aten.relu.default(aten.mm.default(x, w))
        return (aten.mul.Tensor(h, aten.sum.dim_IntList(x, [1], True)), h)

    x, w = torch.randn(6, 4), torch.randn(4, 6)
    gm = aten_graph(fn)
    checked = compile_graph(gm, [x, w], target="cpp", cache_dir=kernel_cache)
    unchecked = compile_graph(
        gm, [x, w], target="cpp", cache_dir=kernel_cache, check_inputs=False
    )
    assert ".stride() ==" in checked.wrapper_source
    assert ".stride() ==" not in unchecked.wrapper_source
    assert "fallback(" not in unchecked.wrapper_source
    for _ in range(2):  # fresh data, same layout
        x, w = torch.randn(6, 4), torch.randn(4, 6)
        check(unchecked, fn, x, w, rtol=1e-5, atol=1e-5)
    restored = CompiledGraph.from_bytes(unchecked.to_bytes(), cache_dir=kernel_cache)
    assert restored.wrapper_source == unchecked.wrapper_source
    check(restored, fn, x, w, rtol=1e-5, atol=1e-5)


def test_a_pointer_several_kernels_take_is_read_once(cpp):
    def fn(x):
        a = aten.amax.default(x, [1])
        b = aten.mm.default(x, aten.t.default(x))  # closes the first kernel
        return (a, aten.add.Tensor(b, aten.sum.dim_IntList(x, [1], True)))

    x = torch.randn(5, 5)
    compiled = cpp(fn, x)
    check(compiled, fn, x, rtol=1e-5, atol=1e-5)
    assert compiled.wrapper_source.count("x.data_ptr()") == 1
    assert compiled.wrapper_source.count("x_ptr") == 3


def test_the_same_reduction_is_computed_once(cpp):
    """``x.sum(-1)``, ``x.mean(-1)`` and a variance's mean reduce the same
    values, and so do ``amax`` and logsumexp's max: one loop each."""

    def fn(x):
        total = aten.sum.dim_IntList(x, [-1])
        mean = aten.mean.dim(x, [-1])
        biggest = aten.amax.default(x, [-1])
        again = aten.amax.default(x, [-1], True)
        return (total, mean, biggest, aten.exp.default(again))

    x = torch.randn(6, 40)
    compiled = cpp(fn, x)
    check(compiled, fn, x)
    assert compiled.cpp_source.count(" = sum of ") == 1
    assert compiled.cpp_source.count(" = max of ") == 1


def test_max_values_without_indices_share_amax(cpp):
    """``x.max(-1).values`` whose indices nobody reads is amax: no positions
    are tracked, the graph's own amax is the same loop, and the second output
    is one more store in that loop (eager returns two tensors)."""

    def fn(x):
        return (aten.amax.default(x, [-1]), aten.max.dim(x, -1)[0])

    x = torch.randn(6, 40)
    compiled = cpp(fn, x)
    check(compiled, fn, x)
    first, second = compiled(x)
    assert first.data_ptr() != second.data_ptr()
    assert compiled.cpp_source.count(" = max of ") == 1
    assert " = argmax of " not in compiled.cpp_source
    assert compiled.cpp_source.count('extern "C" void kernel') == 1
    assert "// buf1 = aten.max.dim" in compiled.cpp_source  # the copy names its op


def test_a_view_of_a_shared_reduction_is_still_its_own_tensor(cpp):
    """``x.amax(-1)`` and a view of ``x.max(-1).values`` are one reduction but
    two tensors in eager; a reduction and a view of it are one tensor."""

    def fn(x):
        top = aten.amax.default(x, [-1])
        shared = aten.sum.dim_IntList(x, [0])
        return (
            top,
            aten.unsqueeze.default(aten.max.dim(x, -1)[0], -1),
            shared,
            aten.view.default(shared, [5, 1]),
        )

    x = torch.randn(4, 5)
    compiled = cpp(fn, x)
    check(compiled, fn, x)
    top, values, shared, view = compiled(x)
    assert top.untyped_storage().data_ptr() != values.untyped_storage().data_ptr()
    assert shared.untyped_storage().data_ptr() == view.untyped_storage().data_ptr()


def test_outputs_computed_as_one_reduction_are_still_two_tensors(cpp):
    """``(x.sum(1), x.sum(1))`` reduces once, but returns two tensors, as eager
    does: writing into one leaves the other alone."""

    def fn(x):
        return (aten.sum.dim_IntList(x, [1]), aten.sum.dim_IntList(x, [1]))

    x = torch.randn(5, 7)
    compiled = cpp(fn, x)
    check(compiled, fn, x)
    first, second = compiled(x)
    assert first.data_ptr() != second.data_ptr()
    first.add_(1)
    torch.testing.assert_close(second, x.sum(1))
    assert compiled.cpp_source.count(" = sum of ") == 1


def test_a_keepdim_reduction_viewed_again_is_one_kernel_and_no_copy(cpp):
    """A bias gradient, ``x.sum(0, keepdim=True).view(-1)``: the keepdim result
    and its view are views of the reduction's buffer. Returned beside the same
    sum without keepdim, they are still two tensors, as in eager."""

    def bias_grad(x):
        return (aten.view.default(aten.sum.dim_IntList(x, [0], True), [7]),)

    x = torch.randn(5, 7)
    compiled = cpp(bias_grad, x)
    check(compiled, bias_grad, x)
    assert [k.kind for k in compiled.kernels] == ["loop"]
    assert compiled.cpp_source.count('extern "C" void kernel') == 1

    def twice(x):
        kept = aten.sum.dim_IntList(x, [0], True)
        return (aten.view.default(kept, [7]), aten.sum.dim_IntList(x, [0]))

    compiled = cpp(twice, x)
    check(compiled, twice, x)
    first, second = compiled(x)
    assert first.data_ptr() != second.data_ptr()


def test_feature_maps_flattened_for_a_linear_are_a_view_not_a_copy(cpp):
    """A CNN head, ``x.flatten(1) @ w`` on (N, C, 2, 2) maps: the flat index
    ``(i // 4) * 4 + ((i // 2) % 2) * 2 + i % 2`` is ``i``, so the matmul takes
    the maps' buffer (it was a copy kernel), made in the flat shape."""

    def head(x, shift, w):
        maps = aten.sub.Tensor(x, aten.view.default(shift, [1, 6, 1, 1]))
        return (aten.mm.default(aten.view.default(maps, [3, 24]), w),)

    x, shift, w = torch.randn(3, 6, 2, 2), torch.randn(6), torch.randn(24, 5)
    compiled = cpp(head, x, shift, w)
    check(compiled, head, x, shift, w)
    assert [k.kind for k in compiled.kernels] == ["loop", "extern"]
    assert "empty_strided((3, 24)" in compiled.wrapper_source
    assert "made in this shape" in compiled.wrapper_source


def test_an_epilogue_is_written_into_the_memory_it_reads_last(loops):
    """A bias add after a library call, and a softmax after its scores' matmul,
    write into the buffer they read for the last time: no allocation. A buffer
    read later again, or read at other elements than the one written, gets
    memory of its own."""

    def fn(x, w, b):
        scores = aten.mm.default(x, w)
        probs = aten._softmax.default(aten.add.Tensor(scores, b), -1, False)
        out = aten.mm.default(probs, w)
        return (aten.add.Tensor(out, b),)

    x, w, b = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16)
    compiled = loops(fn, x, w, b)
    check(compiled, fn, x, w, b)
    source = compiled.wrapper_source
    assert source.count("# written into") == 2
    assert "empty_strided" not in source

    def kept(x, w):
        y = aten.mm.default(x, w)
        across = aten.add.Tensor(y, aten.t.default(y))  # reads y[j, i] too
        again = aten.relu.default(y)  # y is still read by the next kernel
        return (across, aten.mul.Tensor(again, y))

    square = torch.randn(16, 16)
    compiled = loops(kept, square, w)
    check(compiled, kept, square, w)
    assert "# written into" not in compiled.wrapper_source.split("kernel1")[0]

    def read_between(x, w):
        # e's costly exp is not stored into the output (y's memory) during the
        # sum of e while the sum of y still reads y
        y = aten.mm.default(x, w)
        e = aten.exp.default(aten.sub.Tensor(y, aten.amax.default(y, [1], True)))
        s = aten.sum.dim_IntList(e, [1], True)
        t = aten.sum.dim_IntList(aten.flip.default(y, [1]), [1], True)
        return (aten.mul.Tensor(aten.div.Tensor(e, s), t),)

    compiled = loops(read_between, x, w)
    check(compiled, read_between, x, w)
    assert "# written into" in compiled.wrapper_source

    def reads_itself(x, w):
        # the output reads y besides exp(y - max): exp is not stored over y
        y = aten.mm.default(x, w)
        e = aten.exp.default(aten.sub.Tensor(y, aten.amax.default(y, [1], True)))
        s = aten.sum.dim_IntList(e, [1], True)
        return (aten.add.Tensor(aten.div.Tensor(e, s), y),)

    compiled = loops(reads_itself, x, w)
    check(compiled, reads_itself, x, w)
    assert "# written into" in compiled.wrapper_source


def test_scores_viewed_with_their_batch_dims_split_take_the_products_memory(loops):
    """``q @ k.T`` of 4-D tensors is a 3-D ``bmm`` viewed back to 4-D; the
    masked softmax over it is written into the bmm's memory all the same."""

    def attention(q, k, v):
        scores = aten.view.default(
            aten.bmm.default(
                aten.view.default(q, [4, 8, 16]),
                aten.view.default(aten.transpose.int(k, -2, -1), [4, 16, 8]),
            ),
            [2, 2, 8, 8],
        )
        mask = aten.triu.default(aten.ones.default([8, 8], dtype=torch.bool), 1)
        probs = aten._softmax.default(
            aten.masked_fill.Scalar(scores, mask, float("-inf")), -1, False
        )
        out = aten.bmm.default(
            aten.view.default(probs, [4, 8, 8]), aten.view.default(v, [4, 8, 16])
        )
        return (aten.view.default(out, [2, 2, 8, 16]), probs)

    q, k, v = (torch.randn(2, 2, 8, 16) for _ in range(3))
    compiled = loops(attention, q, k, v)
    check(compiled, attention, q, k, v)
    assert re.search(
        r"buf\d+ = as_strided\(buf\d+, \(2, 2, 8, 8\), \(128, 64, 8, 1\)\)"
        r"  # written into",
        compiled.wrapper_source,
    )
    assert "empty_strided" not in compiled.wrapper_source


def test_a_stage_takes_memory_laid_out_in_another_dim_order(loops):
    """``h`` is stored in x's dim order under its permuted shape (not row-major);
    the output, ``h`` permuted back (row-major) plus a product, is written into
    h's memory and seen in its own shape through ``as_strided`` (``view``
    cannot: h's tensor is not contiguous)."""

    def fn(x, a, b):
        h = aten.permute.default(x, [0, 2, 3, 1])
        for _ in range(6):  # costly enough to store once for its two readers
            h = aten.mul.Tensor(aten.tanh.default(aten.sin.default(h)), 2.0)
        s = aten.sum.dim_IntList(h, [1, 2])
        scale = aten.select.int(aten.select.int(s, 0, 0), 0, 0)
        m = aten.mm.default(a, aten.mul.Tensor(b, scale))
        back = aten.permute.default(h, [0, 3, 1, 2])
        return (aten.add.Tensor(back, aten.view.default(m, [2, 4, 6, 6])),)

    x, a, b = torch.randn(2, 4, 6, 6), torch.randn(8, 5), torch.randn(5, 36)
    compiled = loops(fn, x, a, b)
    check(compiled, fn, x, a, b)
    assert re.search(
        r"= as_strided\(buf\d+, \(2, 4, 6, 6\), \(144, 36, 6, 1\)\)  # written into",
        compiled.wrapper_source,
    )


def test_a_library_output_taken_is_first_put_in_its_meta_layout(loops):
    """A convolution of a channels-last input returns channels-last memory
    where its meta kernel says row-major; the epilogue written into it reads
    it at the meta layout's addresses, so the wrapper first lays it out so
    (``fix_layout``), as for any kernel reading it. (The output's strides
    follow the meta kernel's, not eager's: values are compared.)"""

    def fn(x, w):
        y = aten.convolution.default(
            x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1
        )
        return (aten.mul.Tensor(aten.permute.default(y, [0, 2, 3, 1]), 2.0),)

    x = torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)
    w = torch.randn(8, 4, 3, 3)
    compiled = loops(fn, x, w)
    torch.testing.assert_close(compiled(x, w)[0], fn(x, w)[0])
    assert "fix_layout(buf0" in compiled.wrapper_source
    assert "# written into buf0" in compiled.wrapper_source


def test_writing_into_memory_laid_out_unlike_the_stage_keeps_each_layout(loops):
    """``y`` (a transpose's relu, column-major) is written over by ``exp(y.t())``
    (row-major at the same addresses): the output is a strided view of y's
    memory in its own layout, not ``view`` (y's tensor is not contiguous)."""

    def fn(x, w):
        y = aten.relu.default(aten.t.default(x))
        s = aten.mm.default(y, w)  # (y needs a buffer of its own)
        return (aten.exp.default(aten.t.default(y)), s)

    x, w = torch.randn(6, 4), torch.randn(6, 3)
    compiled = loops(fn, x, w)
    check(compiled, fn, x, w)
    assert "# written into" in compiled.wrapper_source


def test_no_value_is_stored_early_over_what_a_reduction_sharing_the_loop_reads(
    loops,
):
    """The sum of ``exp(y)`` would store each exp into the output, which is y's
    memory, while the sum of y read back to front shares its loop."""

    def fn(x, w):
        y = aten.mm.default(x, w)
        t = aten.sum.dim_IntList(aten.flip.default(y, [-1]), [-1], True)
        e = aten.exp.default(y)
        s = aten.sum.dim_IntList(e, [-1], True)
        return (aten.mul.Tensor(aten.div.Tensor(e, s), t),)

    x, w = torch.randn(4, 8), torch.randn(8, 64) * 0.1
    compiled = loops(fn, x, w)
    check(compiled, fn, x, w)
    assert "# written into" in compiled.wrapper_source


def test_a_stage_written_into_reused_memory_is_a_tensor_of_its_own_shape(loops):
    """``cumsum(x)`` reuses the dead product's memory (1 MiB, another shape) and
    its doubling is written there and returned: in its own shape and dtype."""

    def fn(x, a, b, c):
        e = aten.mm.default(aten.mm.default(a, b), c)
        s = aten.cumsum.default(x, 1)
        return (aten.mul.Tensor(s, 2.0), e)

    x, a = torch.randn(512, 512), torch.randn(256, 8)
    b, c = torch.randn(8, 1024), torch.randn(1024, 4)
    compiled = loops(fn, x, a, b, c)
    check(compiled, fn, x, a, b, c, rtol=1e-4, atol=1e-4)
    assert "reuses the memory of" in compiled.wrapper_source
    assert "reinterpret(" in compiled.wrapper_source


def test_a_chain_of_takes_keeps_track_of_a_tensor_that_is_not_contiguous(loops):
    """``out1`` is written into ``h``'s memory (h stored in x's dim order, not
    row-major) and read by kernels only, so its name is bound to h's tensor as
    it is; the output written into out1's memory is then a tensor of its own
    layout over that memory (``reinterpret``), not a ``view`` of h's tensor."""

    def costly(h):
        for _ in range(6):  # stored once for its two readers
            h = aten.mul.Tensor(aten.tanh.default(aten.sin.default(h)), 2.0)
        return h

    def scaled(t, a, b):
        s = aten.sum.dim_IntList(t, [1, 2])
        scale = aten.select.int(aten.select.int(s, 0, 0), 0, 0)
        return aten.view.default(
            aten.mm.default(a, aten.mul.Tensor(b, scale)), [2, 4, 6, 6]
        )

    def fn(x, a, b):
        h = costly(aten.permute.default(x, [0, 2, 3, 1]))
        back = aten.permute.default(h, [0, 3, 1, 2])
        out1 = costly(aten.add.Tensor(back, scaled(h, a, b)))
        again = scaled(aten.permute.default(out1, [0, 2, 3, 1]), a, b)
        return (aten.add.Tensor(out1, again),)

    x, a, b = torch.randn(2, 4, 6, 6), torch.randn(8, 5), torch.randn(5, 36)
    compiled = loops(fn, x, a, b)
    check(compiled, fn, x, a, b, rtol=1e-4, atol=1e-3)  # (twelve sin and tanh)
    assert compiled.wrapper_source.count("# written into") == 2


def test_a_returned_view_that_is_all_of_its_base_is_the_base(cpp):
    """A backward's weight gradient, ``view(mm(...))`` in the mm's own shape, is
    returned as the product itself (no view made); a view of a base that is
    returned too stays a tensor of its own, as eager's is."""

    def fn(g, x):
        product = aten.mm.default(aten.t.default(g), x)
        return (aten.view.default(product, [6, 5]), aten.relu.default(x))

    def both(g, x):
        product = aten.mm.default(aten.t.default(g), x)
        return (aten.view.default(product, [6, 5]), product)

    g, x = torch.randn(4, 6), torch.randn(4, 5)
    compiled = cpp(fn, g, x)
    check(compiled, fn, g, x)
    assert "as_strided" not in compiled.wrapper_source.split("torch.mm", 1)[1]
    twice = cpp(both, g, x)
    check(twice, both, g, x)
    view, product = twice(g, x)
    assert view is not product and view.data_ptr() == product.data_ptr()
