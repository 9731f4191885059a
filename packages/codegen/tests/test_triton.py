"""The Triton target on the lowering's op families, against eager: under
Triton's interpreter on CPU tensors (``nox -s triton`` sets TRITON_INTERPRET=1),
or on the GPU with EMBER_TEST_DEVICE=cuda (benchmarks/gpu_check.py). Each case
says whether its graph runs as Triton kernels or, for what the target does not
render yet, through torch, and either way matches eager."""

import json
import os

import pytest
import torch
from conftest import TRITON_SOURCES, aten_graph, check, raises_like_torch
from test_cpp_pipeline import chain10

from ember_codegen import CompiledGraph, compile_graph

pytest.importorskip("triton")
DEVICE = torch.device(os.environ.get("EMBER_TEST_DEVICE", "cpu"))
if DEVICE.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip(
        "Triton on CPU tensors needs TRITON_INTERPRET=1", allow_module_level=True
    )

aten = torch.ops.aten


def _randn(*sizes, dtype=torch.float32):
    return torch.randn(*sizes, dtype=dtype, device=DEVICE)


def _nan_rows(*sizes):
    x = _randn(*sizes)
    x[1, 3] = float("nan")
    return x


def _layer_norm(x, w, b):
    out = aten.native_layer_norm.default(x, [32], w, b, 1e-5)
    return (out[0], out[1], out[2])


CASES = {
    "pointwise chain": (chain10, lambda: (_randn(16, 33), _randn(33))),
    "broadcast over a transposed input": (
        lambda x, b: (aten.add.Tensor(aten.t.default(x), b),),
        lambda: (_randn(24, 10), _randn(24)),
    ),
    "sum over each dim": (
        lambda x: (
            aten.sum.dim_IntList(x, [2]),
            aten.sum.dim_IntList(x, [1], True),
            aten.sum.dim_IntList(x, [0]),
        ),
        lambda: (_randn(4, 6, 40),),
    ),
    "amax and amin propagate NaN": (
        lambda x: (aten.amax.default(x, [1]), aten.amin.default(x, [0])),
        lambda: (_nan_rows(6, 9),),
    ),
    "mean and var": (
        lambda x: (
            aten.mean.dim(x, [1]),
            aten.var.correction(x, [1], correction=1),
        ),
        lambda: (_randn(5, 300),),
    ),
    "softmax over a long row (looped reduction)": (
        lambda x: (aten._softmax.default(x, 1, False),),
        lambda: (_randn(3, 2500),),
    ),
    "layer norm": (
        _layer_norm,
        lambda: (_randn(2, 7, 32), _randn(32), _randn(32)),
    ),
    "gelu, tanh, sigmoid, erf": (
        lambda x: (
            aten.gelu.default(x),
            aten.tanh.default(x),
            aten.sigmoid.default(x),
            aten.erf.default(x),
        ),
        lambda: (_randn(9, 13) * 4,),
    ),
    "concatenation (masked branches)": (
        lambda a, b: (aten.cat.default([a, b], 1),),
        lambda: (_randn(4, 3), _randn(4, 5)),
    ),
    "where, comparisons and casts": (
        lambda x, y: (
            aten.where.self(aten.gt.Tensor(x, y), x, y),
            aten._to_copy.default(aten.mul.Tensor(x, 3), dtype=torch.float64),
            aten.ne.Scalar(x, 0.5),
        ),
        lambda: (_randn(6, 7), _randn(6, 7)),
    ),
    "bfloat16 computed in float32": (
        lambda x, y: (aten.mul.Tensor(aten.add.Tensor(x, y), y),),
        lambda: (
            _randn(8, 16, dtype=torch.bfloat16),
            _randn(8, 16, dtype=torch.bfloat16),
        ),
    ),
    "bfloat16 reductions, and their result used again": (
        lambda x: (
            aten.sum.dim_IntList(x, [1]),
            aten.amax.default(x, [1]),
            aten.sub.Tensor(x, aten.sum.dim_IntList(x, [1], True)),
            aten.mul.Tensor(
                aten._to_copy.default(aten.add.Tensor(x, x), dtype=torch.float32), 3
            ),
        ),
        lambda: (_randn(6, 40, dtype=torch.bfloat16),),
    ),
    "int64 index values past int32": (
        lambda x: (
            aten.add.Tensor(
                aten.mul.Scalar(
                    aten.arange.default(10, dtype=torch.int64, device=DEVICE), 10**9
                ),
                x,
            ),
        ),
        lambda: (torch.zeros(10, dtype=torch.int64, device=DEVICE),),
    ),
    "buffers named like the kernel's own names": (
        lambda mask, tl, pid: (aten.add.Tensor(aten.mul.Tensor(mask, tl), pid),),
        lambda: (_randn(5, 6), _randn(5, 6), _randn(6)),
    ),
    "index_select, embedding and gather (index checks)": (
        lambda x, i, e, g: (
            aten.index_select.default(x, 0, i),
            aten.embedding.default(e, i),
            aten.gather.default(x, 1, g),
        ),
        lambda: (
            _randn(5, 4),
            torch.tensor([4, 0, 2, 4], device=DEVICE),
            _randn(6, 3),
            torch.randint(0, 4, (5, 2), device=DEVICE),
        ),
    ),
    "round (half to even), sign and signbit": (
        lambda x, i: (
            aten.round.default(x),
            aten.sign.default(x),
            aten.signbit.default(x),
            aten.sign.default(i),
            aten.signbit.default(i),
        ),
        lambda: (
            torch.cat(
                [
                    _randn(20) * 4,
                    torch.tensor(
                        [0.5, 1.5, 2.5, -0.5, -2.5, -0.4, 0.49999997, 1e8, -0.0, 0.0],
                        device=DEVICE,
                    ),
                ]
            ),
            torch.randint(-3, 4, (12,), device=DEVICE),
        ),
    ),
    "prod over a dim and over all, floats and integers": (
        lambda x, i: (
            aten.prod.dim_int(x, 1),
            aten.prod.default(x),
            aten.prod.dim_int(i, 0),
        ),
        lambda: (
            torch.rand(4, 7, device=DEVICE) + 0.5,
            torch.randint(-3, 4, (5, 3), device=DEVICE),
        ),
    ),
    "argmax and argmin: first occurrence, NaN first, looped rows": (
        lambda x, i, long: (
            aten.argmax.default(x, 1),
            aten.argmin.default(x, 0),
            aten.argmax.default(x),
            aten.argmin.default(i, 1),
            aten.argmax.default(long, 1),
        ),
        lambda: (
            torch.tensor(
                [
                    [1.0, 3.0, 3.0, 2.0],
                    [float("nan"), 1.0, float("nan"), 5.0],
                    [-float("inf")] * 4,
                    [2.0, -2.0, 2.0, -2.0],
                ],
                device=DEVICE,
            ),
            torch.randint(-3, 4, (5, 6), device=DEVICE),
            _randn(3, 2500),  # more than one block of lanes
        ),
    ),
    "constants stored in their own dtype, sign of 16-bit floats": (
        lambda d, i, h: (
            aten.full_like.default(d, 0.1),
            aten.full_like.default(i, 2**40 + 1),
            aten.sign.default(h),
            aten.mul.Tensor(aten.sign.default(h), h),
        ),
        lambda: (
            torch.zeros(4, dtype=torch.float64, device=DEVICE),
            torch.zeros(4, dtype=torch.int64, device=DEVICE),
            _randn(6, dtype=torch.bfloat16),
        ),
    ),
    "matmul epilogue": (
        lambda x, w, b: (aten.relu.default(aten.add.Tensor(aten.mm.default(x, w), b)),),
        lambda: (_randn(8, 16), _randn(16, 12), _randn(12)),
    ),
    "cumsum of a long row (a scan in blocks)": (
        lambda x: (aten.cumsum.default(x, 1), aten.cumprod.default(x, 0)),
        lambda: (_randn(3, 2100),),
    ),
    "helpers: asinh, atan2, log1p": (
        lambda x, y: (
            aten.atan2.default(aten.asinh.default(x), y),
            aten.log1p.default(aten.abs.default(y)),
            aten.pow.Tensor_Tensor(aten.abs.default(x), y),
        ),
        lambda: (_randn(4, 9) * 50, _randn(4, 9)),
    ),
    "scatters with repeated targets, in torch's order": (
        lambda x, i, s: (
            aten.scatter_add.default(aten.mul.Tensor(x, 2), 1, i, aten.exp.default(s)),
            aten.scatter_reduce.two(x, 1, i, s, "amax", include_self=False),
            aten.scatter_reduce.two(x, 1, i, s, "prod"),
            aten.index_put.default(
                x,
                [aten.select.int(i, 0, 0)],
                aten.expand.default(
                    aten.unsqueeze.default(aten.select.int(s, 0, 0), 1), [5, 8]
                ),
                True,
            ),
        ),
        lambda: (
            _randn(3, 8),
            torch.randint(0, 3, (3, 5), device=DEVICE),
            _nan_rows(3, 5),
        ),
    ),
}

# Not rendered yet: the graph runs through torch, and still matches eager.
THROUGH_TORCH = {
    "pow of float64 tensors": (
        lambda x, y: (aten.pow.Tensor_Tensor(x, y),),
        lambda: (
            _randn(3, 8, dtype=torch.float64).abs(),
            _randn(3, 8, dtype=torch.float64),
        ),
    ),
}


def _compile(fn, inputs, tmp_path):
    compiled = compile_graph(
        aten_graph(fn), list(inputs), target="triton", cache_dir=tmp_path
    )
    if compiled.target == "triton":  # compiled for a GPU at the session's end
        TRITON_SOURCES.add(compiled.cpp_source)
    return compiled


@pytest.mark.parametrize("name", list(CASES))
def test_renders_as_triton_kernels_and_matches_eager(name, tmp_path):
    fn, make = CASES[name]
    inputs = make()
    compiled = _compile(fn, inputs, tmp_path)
    assert compiled.target == "triton" and compiled.loops()
    for kernel in compiled.loops():
        assert compiled.kernel_source(kernel.name).startswith("@triton.jit")
    # A fused bfloat16 chain rounds once, at its store (as the C++ target and
    # Inductor do); eager rounds after each op.
    half = any(t.dtype == torch.bfloat16 for t in inputs)
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if half else {"rtol": 1e-4, "atol": 1e-5}
    check(compiled, fn, *inputs, **tolerance)
    check(compiled, fn, *make(), **tolerance)  # fresh data, same kernels


@pytest.mark.parametrize("name", list(THROUGH_TORCH))
def test_what_is_not_rendered_yet_runs_through_torch(name, tmp_path):
    fn, make = THROUGH_TORCH[name]
    inputs = make()
    compiled = _compile(fn, inputs, tmp_path)
    assert compiled.target == "torch"
    check(compiled, fn, *inputs)


LONG_REDUCTIONS = {
    "sum": (lambda x: (aten.sum.default(x),), lambda: (_randn(100_003),)),
    "amax with a NaN": (
        lambda x: (aten.amax.default(x),),
        lambda: (aten.index_fill.int_Scalar(_randn(50_000), 0, _at(4097), NAN),),
    ),
    "min of integers": (
        lambda i: (aten.amin.default(i),),
        lambda: (torch.randint(-9, 9, (40_000,), device=DEVICE),),
    ),
    "sums of 3 long rows": (
        lambda y: (aten.sum.dim_IntList(y, [1]),),
        lambda: (_randn(3, 20_000),),
    ),
    "squared norm of bfloat16": (
        lambda h: (aten.sum.default(aten.mul.Tensor(h, h), dtype=torch.float32),),
        lambda: (_randn(30_000, dtype=torch.bfloat16),),
    ),
    # later pointwise stages run in the final program, after the fold
    "mean (a sum, then a division)": (
        lambda x: (aten.mean.default(x),),
        lambda: (_randn(100_003),),
    ),
    "a sum, and stages over each row's sum and the rows": (
        lambda y: (
            aten.sum.dim_IntList(y, [1]),
            aten.mul.Tensor(aten.sum.dim_IntList(y, [1], True), 0.5),
            aten.add.Tensor(
                aten.expand.default(aten.sum.dim_IntList(y, [1], True), [3, 7]), 1.0
            ),
        ),
        lambda: (_randn(3, 20_000),),
    ),
}


def _at(i):
    return torch.tensor([i], device=DEVICE)


NAN = float("nan")


@pytest.mark.parametrize("name", list(LONG_REDUCTIONS))
def test_a_long_reduction_with_few_rows_runs_in_two_stages(name, tmp_path):
    """Each row's blocks are shared among programs (``kernelN_parts``), whose
    partial values one program per row folds (``kernelN_final``)."""
    fn, make = LONG_REDUCTIONS[name]
    inputs = make()
    compiled = _compile(fn, inputs, tmp_path)
    assert compiled.target == "triton" and compiled.fallback_ops == ()
    assert "def kernel0_parts(" in compiled.cpp_source
    assert "def kernel0_final(" in compiled.cpp_source
    # another order of float32 additions than eager's over 10^4-10^5 values
    check(compiled, fn, *inputs, rtol=1e-5, atol=1e-4)
    check(compiled, fn, *make(), rtol=1e-5, atol=1e-4)


def test_a_long_sum_read_by_a_later_stage_is_rounded_to_float32(tmp_path):
    """A long float32 sum accumulates in float64; the stages after it read
    the float32 value eager returns (a cast to bfloat16 of the float64 one
    failed to compile)."""

    def fn(x):
        total = aten.sum.default(x)
        return (aten._to_copy.default(total, dtype=torch.bfloat16), total)

    x = _randn(100_000)
    compiled = _compile(fn, [x], tmp_path)
    assert compiled.target == "triton"
    check(compiled, fn, x, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("width, warps", [(64, 1), (300, 2), (1000, 4), (5000, 4)])
def test_warps_follow_the_widest_block(width, warps, tmp_path):
    """One warp per 256 lanes of a kernel's widest block (docs/codegen.md)."""

    def fn(x):
        return (aten._softmax.default(x, -1, False),)

    x = _randn(3, width)
    compiled = _compile(fn, [x], tmp_path)
    launches = [ln for ln in compiled.wrapper_source.splitlines() if "kernel0[" in ln]
    assert launches and all(f"num_warps={warps})" in ln for ln in launches)
    check(compiled, fn, x)


def test_autotune_keeps_each_kernels_fastest_warps_on_disk(tmp_path, monkeypatch):
    """autotune=True: a kernel's first launch times a few warp counts on
    copies of its arguments (an update in place is applied once, not once per
    timing) and stores the winner; a graph loaded later launches with it
    without timing again."""
    from ember_codegen.render.triton import tuning

    def step(p, g):
        return (aten.add.Tensor(p, aten.mul.Scalar(g, 0.5)), aten.sum.default(g))

    gm = aten_graph(step)
    gm.meta["input_updates"] = ((0, 0),)
    p, g = _randn(4, 300), _randn(4, 300)
    want = step(p.clone(), g)
    compiled = compile_graph(
        gm, [p, g], target="triton", cache_dir=tmp_path, autotune=True
    )
    got = compiled(p, g)
    assert got[0] is p  # updated in place, once
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    stored = sorted((tmp_path / "tuning").glob("*.json"))
    assert len(stored) == len(compiled.loops())
    for path in stored:
        assert json.loads(path.read_text())["num_warps"] in tuning.WARPS

    def no_timing(*args):
        raise AssertionError("timed again")

    monkeypatch.setattr(tuning, "_median_seconds", no_timing)
    loaded = CompiledGraph.from_bytes(compiled.to_bytes(), cache_dir=tmp_path)
    assert loaded.autotune
    p2 = p.clone()
    torch.testing.assert_close(loaded(p2, g)[0], p + g * 0.5)


def test_autotune_times_on_copies_with_the_arguments_layout(tmp_path):
    """A strided input keeps its strides (written into the kernel) in the
    copies timed; a broadcast one its overlaps; a stored count that is not a
    warp count is ignored."""
    from ember_codegen.render.triton import tuning

    def fn(x, b):
        return (aten.add.Tensor(aten.mul.Tensor(x, 2.0), b),)

    x = _randn(64, 128)[:, ::2]
    b = _randn(64, 1).expand(64, 64)
    compiled = compile_graph(
        aten_graph(fn), [x, b], target="triton", cache_dir=str(tmp_path), autotune=True
    )
    check(compiled, fn, x, b)
    copy = tuning._copy(b)
    assert copy.stride() == b.stride() and torch.equal(copy, b)
    assert copy.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    for text in ('{"num_warps": 4.0}', '{"num_warps": true}', '{"num_warps": 3}'):
        (tmp_path / "bad.json").write_text(text)
        assert tuning._read(tmp_path, "bad") is None


def test_autotune_candidates_are_the_rules_count_halved_and_doubled():
    from ember_codegen.render.triton.tuning import candidates

    assert candidates(4) == (2, 4, 8)
    assert candidates(1) == (1, 2)
    assert candidates(8) == (4, 8)


def test_a_lone_pointwise_stage_spreads_its_blocks_over_rows(tmp_path):
    """Rows of 64 share blocks of 1024 lanes: 63 programs for 1000 rows, not
    1000 programs with 960 idle lanes each (a transposed read too)."""

    def fn(x):
        return (aten.gelu.default(x),)

    x = _randn(1000, 64)
    compiled = _compile(fn, [x], tmp_path)
    assert "kernel0[(63,)](" in compiled.wrapper_source
    check(compiled, fn, x)

    def transposed(x):
        return (aten.add.Tensor(x, aten.t.default(x)),)

    square = _randn(100, 100)
    compiled = _compile(transposed, [square], tmp_path)
    assert "kernel0[(10,)](" in compiled.wrapper_source
    check(compiled, transposed, square)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_a_scatter_that_adds_runs_its_source_blocks_side_by_side(dtype, tmp_path):
    """index_add, scatter_add without self: the initial values, the zeroed
    targets, then atomic adds from blocks of the source (render/triton/
    atomic.py); repeated targets add up."""

    def fn(x, rows, src, idx):
        return (
            aten.index_add.default(x, 0, rows, src),
            aten.scatter_reduce.two(x, 1, idx, src, "sum", include_self=False),
        )

    x, src = (_randn(5, 1500) * 8).to(dtype), (_randn(4, 1500) * 8).to(dtype)
    rows = torch.tensor([3, 0, 3, 3], device=DEVICE)
    idx = torch.randint(0, 40, (4, 1500), device=DEVICE)
    compiled = _compile(fn, [x, rows, src, idx], tmp_path)
    assert compiled.target == "triton" and compiled.fallback_ops == ()
    assert "tl.atomic_add(" in compiled.cpp_source
    assert "def kernel1_zero(" in compiled.cpp_source
    check(compiled, fn, x, rows, src, idx, rtol=1e-5, atol=1e-4)


def test_a_scatter_without_self_through_a_gathered_index_checks_it(tmp_path):
    """The zeroing walk of an atomic scatter reads its target through a
    gathered index, so it takes the out-of-range flag too."""

    def fn(x, table, j, s):
        index = aten.index.Tensor(table, [j])
        return (aten.scatter_reduce.two(x, 0, index, s, "sum", include_self=False),)

    x, s = _randn(4, 3), _randn(4, 3)
    table = torch.tensor([[0, 1, 2], [3, 3, 3], [1, 0, 1]], device=DEVICE)
    j = torch.tensor([1, 1, 0, 2], device=DEVICE)
    compiled = _compile(fn, [x, table, j, s], tmp_path)
    assert compiled.target == "triton" and compiled.fallback_ops == ()
    assert "def kernel0_zero(" in compiled.cpp_source
    check(compiled, fn, x, table, j, s)
    raises_like_torch(
        compiled, fn, x, table, torch.tensor([1, 5, 0, 2], device=DEVICE), s
    )


def test_an_input_named_like_the_out_of_range_flag(tmp_path):
    def fn(oob, idx):
        return (aten.index_select.default(oob, 0, idx),)

    x, idx = _randn(5, 4), torch.tensor([4, 0, 4], device=DEVICE)
    compiled = _compile(fn, [x, idx], tmp_path)
    assert compiled.target == "triton" and compiled.fallback_ops == ()
    check(compiled, fn, x, idx)


def test_an_index_out_of_range_raises_torchs_error(tmp_path):
    def fn(x, i):
        return (aten.mul.Tensor(aten.index_select.default(x, 0, i), 2),)

    x = _randn(5, 4)
    compiled = _compile(fn, (x, torch.tensor([4, 0, 1], device=DEVICE)), tmp_path)
    assert compiled.target == "triton"
    assert "launch_checked(" in compiled.wrapper_source
    raises_like_torch(compiled, fn, x, torch.tensor([4, 9, 1], device=DEVICE))
    raises_like_torch(compiled, fn, x, torch.tensor([4, -1, 1], device=DEVICE))


def test_a_kernel_names_its_aten_ops_and_buffers(tmp_path):
    def fn(x, b):
        return (aten.sum.dim_IntList(aten.relu.default(aten.add.Tensor(x, b)), [1]),)

    x, b = _randn(4, 8), _randn(8)
    compiled = _compile(fn, (x, b), tmp_path)
    (kernel,) = compiled.loops()
    text = compiled.kernel_source(kernel.name)
    assert f"def {kernel.name}(p_x, p_b, " in text
    assert "# aten.add.Tensor, aten.relu.default, aten.sum.dim_IntList" in text
    assert f"{kernel.name}[(4,)](x, b, " in compiled.wrapper_source
    check(compiled, fn, x, b)


@pytest.mark.parametrize(
    "case", ["index_select, embedding and gather (index checks)", "index_add"]
)
def test_a_profile_counts_triton_kernels_as_kernels(case, tmp_path):
    from ember_codegen import profiling

    if case == "index_add":  # a launcher handed to launch_checked
        fn = lambda x, i, s: (aten.index_add.default(x, 0, i, s),)  # noqa: E731
        inputs = (_randn(4, 8), torch.tensor([1, 1, 3], device=DEVICE), _randn(3, 8))
    else:
        fn, make = CASES[case]
        inputs = make()
    compiled = _compile(fn, inputs, tmp_path)
    with profiling() as report:
        compiled(*inputs)
    (profile,) = report.graphs
    timed = {row.name for row in profile.rows if row.kind == "loop" and row.seconds > 0}
    assert timed == {k.name for k in compiled.loops()}


def test_stored_and_loaded_again_without_lowering(tmp_path):
    from ember_codegen import CompiledGraph

    fn, make = CASES["layer norm"]
    inputs = make()
    blob = _compile(fn, inputs, tmp_path).to_bytes()
    loaded = CompiledGraph.from_bytes(blob, cache_dir=tmp_path)
    assert loaded.target == "triton"
    check(loaded, fn, *inputs, rtol=1e-4, atol=1e-5)


def test_the_wrapper_for_a_gpu_checks_and_allocates_on_its_device():
    """What a graph of tensors on cuda:0 gets (written here without a GPU):
    inputs checked against that device, made once, and buffers made on it."""
    from ember_codegen import lower_graph, plan_memory, schedule
    from ember_codegen.render import Scheduled, renderer

    def fn(x, b):
        return (aten.relu.default(aten.add.Tensor(x, b)),)

    lowered = lower_graph(aten_graph(fn), [torch.randn(4, 8), torch.randn(8)])
    steps = schedule(lowered)
    plan = plan_memory(steps, lowered.specs, {n for n in lowered.outputs if n})
    scheduled = Scheduled("fn", lowered, steps, plan, True, "cuda:0")
    source = renderer("triton").render(scheduled).wrapper_source
    compile(source, "wrapper", "exec")
    assert "DEVICE = torch.device('cuda:0')" in source
    assert "x.device == DEVICE" in source and "is_cpu" not in source
    assert "device='cuda:0')" in source
