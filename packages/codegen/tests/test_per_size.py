"""A graph that reads its sizes from its inputs (``aten.sym_size.int``, as
aotgrad writes graphs with symbolic sizes) compiles once per set of sizes, and
its PerSizeGraph stores and loads (docs/dynamic.md)."""

import operator

import torch
import torch.fx

from ember_codegen import PerSizeGraph, compile_graph, load_per_size_graph
from ember_codegen.specialize import specialize

aten = torch.ops.aten


def _graph():
    """``x.view(2 * x.size(1), x.size(0) // 2).relu()`` written by hand."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    n = g.call_function(aten.sym_size.int, (x, 1))
    m = g.call_function(aten.sym_size.int, (x, 0))
    rows = g.call_function(operator.mul, (2, n))
    cols = g.call_function(operator.floordiv, (m, 2))
    view = g.call_function(aten.view.default, (x, [rows, cols]))
    g.output((g.call_function(aten.relu.default, (view,)),))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _want(x):
    return (x.view(2 * x.size(1), x.size(0) // 2).relu(),)


def test_specialize_folds_the_sizes():
    code = specialize(_graph(), [torch.randn(4, 3)]).code
    assert "sym_size" not in code and "[6, 2]" in code


def test_one_compile_per_set_of_sizes(tmp_path):
    compiles = []

    def compile_one(gm, inputs):
        compiles.append(tuple(inputs[0].shape))
        return compile_graph(gm, inputs, cache_dir=tmp_path)

    compiled = PerSizeGraph(_graph(), [torch.randn(4, 3)], compile_one)
    for shape in [(4, 3), (6, 5), (4, 3), (8, 2)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), _want(x))
    assert compiles == [(4, 3), (6, 5), (8, 2)]
    assert compiled.sizes == [(0, 1), (0, 0)]


def test_a_stored_per_size_graph_loads_and_compiles_new_sizes(tmp_path):
    settings = {"target": "auto", "check_inputs": True}
    first = PerSizeGraph(
        _graph(),
        [torch.randn(4, 3)],
        lambda gm, inputs: compile_graph(gm, inputs, cache_dir=tmp_path),
        settings,
    )
    loaded = load_per_size_graph(first.to_bytes(), cache_dir=tmp_path)
    assert list(loaded.compiled) == [(3, 4)] and loaded.settings == settings
    for shape in [(4, 3), (10, 7)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(loaded(x), _want(x))
    assert len(loaded.compiled) == 2


def test_an_integer_input_is_folded_and_the_kernels_are_cpp(tmp_path):
    """``x[:, :n] * 2`` with ``n`` an integer input (a symbol of aotgrad's):
    the specialized graph takes the tensors only, and compiles to C++."""
    g = torch.fx.Graph()
    x, n = g.placeholder("x"), g.placeholder("n")
    head = g.call_function(aten.slice.Tensor, (x, 1, 0, n))
    g.output((g.call_function(aten.mul.Tensor, (head, 2)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    x = torch.randn(3, 8)
    gm.graph.find_nodes(op="placeholder")[0].meta["val"] = x
    compiled = PerSizeGraph(
        gm, [x, 5], lambda gm, inputs: compile_graph(gm, inputs, cache_dir=tmp_path)
    )
    assert compiled.ints == [1] and compiled.target == "cpp"
    for n in (5, 7, 5):
        torch.testing.assert_close(compiled(x, n), (x[:, :n] * 2,))
    assert list(compiled.compiled) == [(5,), (7,)]


def test_a_loaded_graph_with_a_constant_compiles_new_sizes(tmp_path):
    """A stored graph has lost its traced values, its constants' too (an
    attention mask's scalar, written by aotgrad as a get_attr)."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    n = g.call_function(aten.sym_size.int, (x, 0))
    fill = g.get_attr("fill")
    ones = g.call_function(
        aten.ones.default, ([n],), {"dtype": torch.bool, "device": torch.device("cpu")}
    )
    where = g.call_function(aten.where.self, (ones, x, fill))
    g.output((g.call_function(aten.mul.Tensor, (where, 2)),))
    root = torch.nn.Module()
    root.fill = torch.tensor(-1.0)
    gm = torch.fx.GraphModule(root, g)
    first = PerSizeGraph(
        gm,
        [torch.randn(4)],
        lambda gm, inputs: compile_graph(gm, inputs, cache_dir=tmp_path),
        {"target": "auto", "check_inputs": True},
    )
    loaded = load_per_size_graph(first.to_bytes(), cache_dir=tmp_path)
    x = torch.randn(7)
    torch.testing.assert_close(loaded(x), (x * 2,))
    assert list(loaded.compiled) == [(4,), (7,)]
