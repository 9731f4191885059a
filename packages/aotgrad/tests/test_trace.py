"""trace_to_aten and aot_compile on torch-level graphs built with torch.fx."""

import operator

import pytest
import torch
import torch.fx
import torch.nn.functional as F

from ember_aotgrad import AotGradError, aot_compile, needs_backward, trace_to_aten

aten = torch.ops.aten


def fx_graph(fn):
    return torch.fx.symbolic_trace(fn)


def aten_targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def assert_aten_graph_matches(fn, *inputs):
    gm = fx_graph(fn)
    aten_gm = trace_to_aten(gm, list(inputs))
    for target in aten_targets(aten_gm):
        assert isinstance(target, torch._ops.OpOverload) or target is operator.getitem
    expected = fn(*inputs)
    actual = aten_gm(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
    return aten_gm


def test_thin_path_to_aten_overloads():
    gm = assert_aten_graph_matches(
        lambda x, w, b: (torch.relu(x @ w + b).sum(-1),),
        torch.randn(4, 3),
        torch.randn(3, 5),
        torch.randn(5),
    )
    assert aten_targets(gm) == [
        aten.mm.default,
        aten.add.Tensor,
        aten.relu.default,
        aten.sum.dim_IntList,
    ]


def test_composite_ops_reach_aten_and_multi_output_ops_unpack():
    def fn(x, w):
        a, b = torch.chunk(F.linear(x, w), 2, dim=-1)
        m, i = torch.max(a, dim=0)
        return F.softmax(b, dim=-1), m, i

    gm = assert_aten_graph_matches(fn, torch.randn(4, 6), torch.randn(8, 6))
    assert operator.getitem in aten_targets(gm)


def test_non_contiguous_and_broadcast_inputs():
    x = torch.randn(5, 4).t()
    y = torch.randn(1, 5)
    assert_aten_graph_matches(lambda x, y: (x * y + 1, x.transpose(0, 1)), x, y)


def test_tensor_constants_become_buffers():
    gm = assert_aten_graph_matches(
        lambda x: (x + torch.tensor([1.0, 2.0, 3.0]),), torch.randn(2, 3)
    )
    assert any(n.op == "get_attr" for n in gm.graph.nodes)


def test_user_location_reaches_aten_nodes():
    gm = fx_graph(lambda x: (torch.sigmoid(x) * 2,))
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["user_loc"] = f"model.py:{10 + len(node.name)}"
    aten_gm = trace_to_aten(gm, [torch.randn(3)])
    locs = [
        n.meta.get("user_loc") for n in aten_gm.graph.nodes if n.op == "call_function"
    ]
    assert all(loc and loc.startswith("model.py:") for loc in locs)


def test_decompositions_replace_an_op():
    def silu_rule(x):
        return x * torch.sigmoid(x)

    gm = fx_graph(lambda x: (F.silu(x),))
    x = torch.randn(6)
    aten_gm = trace_to_aten(gm, [x], {aten.silu.default: silu_rule})
    assert aten_targets(aten_gm) == [aten.sigmoid.default, aten.mul.Tensor]
    torch.testing.assert_close(aten_gm(x)[0], F.silu(x))


def test_aot_compile_hands_aten_graph_to_the_compiler():
    seen = []

    def compiler(aten_gm, example_inputs):
        seen.append((aten_gm, example_inputs))
        return aten_gm

    gm = fx_graph(lambda x, y: (torch.tanh(x) - y,))
    x, y = torch.randn(3), torch.randn(3)
    compiled = aot_compile(gm, [x, y], compiler)
    torch.testing.assert_close(compiled(x, y)[0], torch.tanh(x) - y)
    ((aten_gm, inputs),) = seen
    assert aten_targets(aten_gm) == [aten.tanh.default, aten.sub.Tensor]
    assert inputs[0] is x


def test_no_backward_graph_without_grad_mode_or_grad_inputs():
    gm = fx_graph(lambda x: (x * 2,))
    x = torch.randn(3, requires_grad=True)
    assert needs_backward([x])
    with torch.no_grad():
        assert not needs_backward([x])
        compiled = aot_compile(gm, [x], lambda g, e: g)
        out = compiled(x)[0]
    assert compiled.backward_plan is None
    torch.testing.assert_close(out, x.detach() * 2)
    assert not needs_backward([torch.randn(3)])


def test_data_dependent_op_names_the_op_and_line():
    gm = fx_graph(lambda x: (torch.nonzero(x),))
    for node in gm.graph.nodes:
        node.meta["user_loc"] = "model.py:7"
    with pytest.raises(AotGradError, match=r"aten\.nonzero.*model\.py:7"):
        trace_to_aten(gm, [torch.randn(4)])


_lib = torch.library.Library("ember_aotgrad_test", "DEF")
_lib.define("twice(Tensor x) -> Tensor")
_lib.impl("twice", lambda x: x * 2, "CPU")


def test_op_without_meta_kernel_is_traced_on_real_inputs():
    x = torch.randn(3)
    gm = assert_aten_graph_matches(
        lambda x: (torch.ops.ember_aotgrad_test.twice(x) + 1,), x
    )
    assert torch.ops.ember_aotgrad_test.twice.default in aten_targets(gm)
    assert x.device.type == "cpu"


def test_factory_ops_in_the_graph_run_at_call_time():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    zeros = graph.call_function(torch.zeros, (3,))
    noise = graph.call_function(torch.rand, (3,))
    graph.output((graph.call_function(operator.add, (x, zeros)), noise))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    aten_gm = trace_to_aten(gm, [torch.randn(3)])
    assert not any(n.op == "get_attr" for n in aten_gm.graph.nodes)
    assert not torch.equal(aten_gm(torch.ones(3))[1], aten_gm(torch.ones(3))[1])
    torch.manual_seed(3)
    expected = gm(torch.ones(3))
    torch.manual_seed(3)
    for a, e in zip(aten_gm(torch.ones(3)), expected):
        torch.testing.assert_close(a, e)


class _Doubler(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_custom_autograd_function_is_refused_with_its_name_and_line():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    node = graph.call_function(_Doubler.apply, (x,))
    node.meta["user_loc"] = "train.py:42"
    graph.output((node,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    with pytest.raises(AotGradError, match=r"_Doubler.*train\.py:42"):
        aot_compile(gm, [torch.randn(3)], lambda g, e: g)


def test_a_rule_returning_not_implemented_keeps_the_op_whole():
    gm = fx_graph(lambda x: (torch.exp(x),))
    x = torch.randn(4)
    aten_gm = trace_to_aten(gm, [x], {aten.exp.default: lambda x: NotImplemented})
    assert aten_targets(aten_gm) == [aten.exp.default]
    torch.testing.assert_close(aten_gm(x)[0], torch.exp(x))


def test_trace_to_aten_flattens_return_types_outputs():
    class Extremes(torch.nn.Module):
        def forward(self, x):
            return x.max(1), (x.min(0, keepdim=True), torch.isfinite(x))

    x = torch.randn(3, 4)
    x[1, 2] = float("inf")
    gm = trace_to_aten(torch.fx.symbolic_trace(Extremes()), [x])
    top, ((low, low_at), finite) = Extremes()(x)
    expected = (top.values, top.indices, low, low_at, finite)
    actual = gm(x)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


def test_aot_compile_rejects_nested_outputs_by_name():
    gm = torch.fx.symbolic_trace(lambda x: (x.max(1), x + 1))
    with pytest.raises(AotGradError, match="graph output 0 is a max holding tensors"):
        aot_compile(gm, [torch.randn(3, 4)], lambda g, e: g)


def test_a_list_index_is_a_constant_of_the_graph():
    """``x[..., [-2], :]`` (falcon's multi-query attention): on meta tensors
    torch would make the index tensor on the meta device, its values lost."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    picked = g.call_function(operator.getitem, (x, (Ellipsis, [-2], slice(None))))
    rows = g.call_function(operator.getitem, (x, [1, 0, 1]))
    g.output((picked, rows))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    x = torch.randn(2, 3, 4, 5)
    aten_gm = trace_to_aten(gm, [x])
    for got, want in zip(aten_gm(x), (x[..., [-2], :], x[[1, 0, 1]])):
        torch.testing.assert_close(got, want)
