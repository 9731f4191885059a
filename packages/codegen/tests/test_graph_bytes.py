"""A GraphModule stored by ``graph_to_bytes`` comes back node for node: calls
with constant arguments stay calls (a random op draws anew), and the nodes' and
the graph's meta survive."""

import operator

import pytest
import torch
import torch.fx
import torch.nn.functional as F

from ember_codegen import graph_from_bytes, graph_to_bytes

aten = torch.ops.aten


def _graph() -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    n = g.call_function(aten.sym_size.int, (x, 0))
    noise = g.call_function(
        aten.rand.default,
        ([4, 8],),
        {"dtype": torch.float32, "device": torch.device("cpu"), "pin_memory": False},
    )
    zero = g.call_function(aten.scalar_tensor.default, (0.0,), {"dtype": torch.float32})
    total = g.call_function(aten.add.Tensor, (x, noise))
    head = g.call_function(operator.getitem, (total, (slice(None, n), Ellipsis)))
    kept = g.call_function(
        aten.where.self, (g.call_function(aten.gt.Scalar, (head, 0.5)), zero, head)
    )
    scale = g.get_attr("scale")
    # F.max_pool1d is made inside boolean_dispatch: pickle cannot name it
    pooled = g.call_function(F.max_pool1d, (x, 2))
    g.output((kept, g.call_function(torch.mul, (x, scale)), noise, pooled))
    root = torch.nn.Module()
    root.scale = torch.nn.Parameter(torch.arange(8.0))
    gm = torch.fx.GraphModule(root, g, class_name="ForwardGraph")
    gm.meta["input_updates"] = ((0, 1),)
    for node in gm.graph.nodes:
        node.meta["user_loc"] = f"model.py:{len(node.name)}"
        node.meta["val"] = "a traced value"
    return gm


def test_the_same_nodes_targets_and_meta_come_back():
    gm = _graph()
    loaded = graph_from_bytes(graph_to_bytes(gm))
    assert loaded.code == gm.code
    assert type(loaded).__name__ == "ForwardGraph"
    assert loaded.meta == {"input_updates": ((0, 1),)}
    for old, new in zip(gm.graph.nodes, loaded.graph.nodes):
        assert (new.op, new.name, new.target) == (old.op, old.name, old.target)
        assert new.meta == {"user_loc": old.meta["user_loc"]}  # not traced values
    assert torch.equal(loaded.scale, gm.scale)
    x = torch.randn(4, 8)
    torch.manual_seed(3)
    want = gm(x)
    torch.manual_seed(3)
    for got, expected in zip(loaded(x), want):
        assert torch.equal(got, expected)


def test_a_call_with_constant_arguments_stays_a_call():
    """Pickling the GraphModule traced it again on load and froze
    ``rand([4, 8])`` into one tensor: the same noise on every call."""
    loaded = graph_from_bytes(graph_to_bytes(_graph()))
    assert "_tensor_constant" not in loaded.code
    x = torch.randn(4, 8)
    assert not torch.equal(loaded(x)[2], loaded(x)[2])


def test_a_subgraph_attribute_is_stored_the_same_way():
    inner = _graph()
    g = torch.fx.Graph()
    x = g.placeholder("x")
    body = g.get_attr("body")
    g.output((g.call_module("body", (x,)), body))
    root = torch.nn.Module()
    root.body = inner
    gm = torch.fx.GraphModule(root, g)
    loaded = graph_from_bytes(graph_to_bytes(gm))
    assert loaded.body.code == inner.code
    assert loaded.body.meta == inner.meta


def test_a_target_that_does_not_pickle_raises():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output((g.call_function(lambda t: t + 1, (x,)),))
    with pytest.raises(Exception, match="lambda"):
        graph_to_bytes(torch.fx.GraphModule(torch.nn.Module(), g))


def test_a_graph_with_its_own_calling_convention_raises():
    """Pytree in/out specs live in the graph's code generator, not its nodes:
    storing such a graph would change how it is called."""

    class Flat(torch.fx.graph.CodeGen):
        pass

    gm = _graph()
    gm.graph.set_codegen(Flat())
    with pytest.raises(ValueError, match="Flat"):
        graph_to_bytes(gm)
