"""What an optimizer step asks of the loop targets: multiply-adds rounded as
torch's kernels round them (bit for bit), inputs updated in place when the
graph declares ``input_updates``, and (the C++ target's) many small stages in
one kernel."""

import pytest
import torch
from conftest import LOOP_TARGETS, aten_graph

from ember_codegen import compile_graph

aten = torch.ops.aten

EXACT = {
    "add_alpha": lambda a, b, c: (aten.add.Tensor(a, b, alpha=-0.37),),
    "sub_alpha": lambda a, b, c: (aten.sub.Tensor(a, b, alpha=0.37),),
    "mul_then_add": lambda a, b, c: (aten.add.Tensor(aten.mul.Scalar(a, 0.9), b),),
    "addcmul": lambda a, b, c: (aten.addcmul.default(a, b, c, value=0.3),),
    "addcdiv": lambda a, b, c: (
        aten.add.Tensor(
            a,
            aten.div.Tensor(
                aten.mul.Scalar(b, -0.3), aten.add.Scalar(aten.abs.default(c), 1)
            ),
        ),
    ),
    "lerp_near_start": lambda a, b, c: (aten.lerp.Scalar(a, b, 0.1),),
    "lerp_near_end": lambda a, b, c: (aten.lerp.Scalar(a, b, 0.9),),
    "lerp_tensor": lambda a, b, c: (
        aten.lerp.Tensor(a, b, aten.clamp.default(c, 0.0, 1.0)),
    ),
    "pow_tensor_0d": lambda a, b, c: (
        aten.pow.Tensor_Tensor(
            aten.abs.default(aten.select.int(a, 0, 0)), aten.select.int(b, 0, 0)
        ),
    ),
}


@pytest.mark.parametrize("n", [128, 37])
@pytest.mark.parametrize("name", EXACT)
def test_multiply_adds_round_as_torchs_kernels(loops, name, n):
    fn = EXACT[name]
    torch.manual_seed(0)
    inputs = [torch.randn(n), torch.randn(n), torch.randn(n)]
    compiled = loops(fn, *inputs)
    assert compiled.fallback_ops == ()
    for got, want in zip(compiled(*inputs), fn(*inputs)):
        assert torch.equal(got, want)


def _updating_graph(fn, updates):
    gm = aten_graph(fn)
    gm.meta["input_updates"] = updates
    return gm


@pytest.mark.parametrize("target", LOOP_TARGETS)
def test_an_input_update_is_written_in_place(kernel_cache, target):
    def step(p, g, m):
        m_new = aten.lerp.Scalar(m, g, 0.1)
        p_new = aten.add.Tensor(p, m_new, alpha=-0.01)
        return (p_new, m_new)

    torch.manual_seed(0)
    inputs = [torch.randn(64, 8), torch.randn(64, 8), torch.randn(64, 8)]
    want = step(*[t.clone() for t in inputs])
    gm = _updating_graph(step, ((0, 0), (1, 2)))
    compiled = compile_graph(gm, inputs, target=target, cache_dir=kernel_cache)
    p, _, m = inputs
    got = compiled(*inputs)
    assert got[0] is p and got[1] is m  # written where they live, no new buffer
    assert torch.equal(p, want[0]) and torch.equal(m, want[1])
    assert "# updated in place" in compiled.wrapper_source
    assert "empty_strided" not in compiled.wrapper_source
    if target == "cpp":
        # One pointer per updated input, so every pointer stays __restrict__.
        assert compiled.cpp_source.count("__restrict__") == 3


@pytest.mark.parametrize("target", LOOP_TARGETS)
def test_an_input_read_after_its_update_keeps_a_buffer(kernel_cache, target):
    def step(p, g):
        p_new = aten.add.Tensor(p, g)
        return (p_new, aten.sum.default(p))  # the old value, read after

    inputs = [torch.randn(16), torch.randn(16)]
    want = step(*[t.clone() for t in inputs])
    gm = _updating_graph(step, ((0, 0),))
    compiled = compile_graph(gm, inputs, target=target, cache_dir=kernel_cache)
    got = compiled(*inputs)
    assert got[0] is not inputs[0]
    torch.testing.assert_close(got[1], want[1])
    assert torch.equal(got[0], want[0])


@pytest.mark.parametrize("target", LOOP_TARGETS)
def test_a_transposed_read_of_the_input_keeps_a_buffer(kernel_cache, target):
    def step(p):
        return (aten.add.Tensor(p, aten.t.default(p)),)

    inputs = [torch.randn(8, 8)]
    want = step(inputs[0].clone())
    gm = _updating_graph(step, ((0, 0),))
    compiled = compile_graph(gm, inputs, target=target, cache_dir=kernel_cache)
    got = compiled(*inputs)
    assert got[0] is not inputs[0] and torch.equal(got[0], want[0])


def test_small_stages_of_a_big_kernel_run_on_one_thread(cpp):
    """An update of many small tensors and a big one: no team for the small
    loops (a team per small loop cost more than the loop)."""

    def step(a, b, c):
        return (aten.mul.Scalar(a, 2.0), aten.mul.Scalar(b, 3.0), aten.neg.default(c))

    inputs = [torch.randn(64), torch.randn(32), torch.randn(256, 256)]
    compiled = cpp(step, *inputs)
    for got, want in zip(compiled(*inputs), step(*inputs)):
        assert torch.equal(got, want)
    assert compiled.cpp_source.count("#pragma omp parallel for") == 1
