"""Autocast regions of a torch-level graph become explicit casts in the aten
graph (traced on meta tensors that report the CPU device); the caller's own
autocast changes neither the trace nor the compiled graphs' dtypes."""

import operator

import pytest
import torch
import torch.fx
import torch.nn.functional as F

from ember_aotgrad import AotGradError, aot_compile, trace_to_aten

aten = torch.ops.aten
ENTER, EXIT = torch.amp._enter_autocast, torch.amp._exit_autocast


def with_region(fn, num_inputs, dtype, enabled=True):
    """A torch-level graph running ``fn`` inside ``torch.autocast("cpu", dtype)``,
    as capture writes a with-block over autocast."""
    graph = torch.fx.Graph()
    args = [graph.placeholder(f"x{i}") for i in range(num_inputs)]
    mode = graph.call_function(ENTER, ("cpu", dtype, enabled, True))
    out = graph.call_function(fn, tuple(args))
    graph.call_function(EXIT, (mode,))
    graph.output(out)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def linear_relu(x, w, b):
    return (torch.relu(F.linear(x, w, b)), x @ w.t())


def inputs(requires_grad=False):
    return [
        torch.randn(4, 8, requires_grad=requires_grad),
        torch.randn(5, 8, requires_grad=requires_grad),
        torch.randn(5, requires_grad=requires_grad),
    ]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_regions_trace_to_explicit_casts(dtype):
    gm = with_region(linear_relu, 3, dtype)
    aten_gm = trace_to_aten(gm, inputs())
    targets = [n.target for n in aten_gm.graph.nodes if n.op == "call_function"]
    assert targets.count(aten._to_copy.default) == 5  # x, w, b; x, w again
    assert ENTER not in targets and all(
        isinstance(t, torch._ops.OpOverload) or t is operator.getitem for t in targets
    )
    a = inputs()
    with torch.autocast("cpu", dtype=dtype):
        want = linear_relu(*a)
    got = aten_gm(*a)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == dtype
        torch.testing.assert_close(g, w, atol=0.02, rtol=0.01)


def test_a_disabled_region_inside_an_enabled_one():
    def fn(x, w, b):
        return (x @ w.t(),)

    graph = torch.fx.Graph()
    x, w, b = (graph.placeholder(n) for n in "xwb")
    outer = graph.call_function(ENTER, ("cpu", torch.bfloat16, True, True))
    inner = graph.call_function(ENTER, ("cpu", torch.bfloat16, False, True))
    out = graph.call_function(fn, (x, w, b))
    graph.call_function(EXIT, (inner,))
    graph.call_function(EXIT, (outer,))
    graph.output(out)
    aten_gm = trace_to_aten(torch.fx.GraphModule(torch.nn.Module(), graph), inputs())
    assert aten._to_copy.default not in [n.target for n in aten_gm.graph.nodes]
    assert aten_gm(*inputs())[0].dtype == torch.float32


def test_the_callers_autocast_does_not_reach_the_trace_or_the_compiled_graphs():
    gm = torch.fx.symbolic_trace(linear_relu)
    compiled = aot_compile(gm, inputs(), lambda g, _: g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        aten_gm = trace_to_aten(gm, inputs())
        a = inputs()
        got = compiled(*a)
    assert aten._to_copy.default not in [n.target for n in aten_gm.graph.nodes]
    for g, w in zip(got, linear_relu(*a)):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, w)


def test_joint_trace_under_a_region_gives_eager_gradients():
    dtype = torch.bfloat16
    gm = with_region(linear_relu, 3, dtype)
    compiled = aot_compile(gm, inputs(True), lambda g, _: g)
    a = inputs(True)
    b = [t.detach().clone().requires_grad_() for t in a]
    with torch.autocast("cpu", dtype=dtype):
        want = linear_relu(*b)
    got = compiled(*a)
    sum(o.float().sum() for o in want).backward()
    with torch.autocast("cpu", dtype=dtype):  # the backward's dtypes were traced
        sum(o.float().sum() for o in got).backward()
    for g, w in zip([*got, *(t.grad for t in a)], [*want, *(t.grad for t in b)]):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, atol=0.05, rtol=0.02)


def test_a_failed_trace_leaves_the_autocast_state_as_it_was():
    def bad(x, w, b):
        raise RuntimeError("no")

    gm = with_region(bad, 3, torch.float16)
    with pytest.raises(AotGradError):
        trace_to_aten(gm, inputs())
    assert not torch.is_autocast_enabled("cpu")
    assert torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_an_op_whose_kernel_autocasts_inside_is_refused():
    gm = with_region(lambda x: (torch.linalg.pinv(x),), 1, torch.bfloat16)
    with pytest.raises(AotGradError, match=r"linalg_pinv.* under autocast"):
        trace_to_aten(gm, [torch.randn(5, 4)])
