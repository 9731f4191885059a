"""compile_graph's "torch" target on aten graphs written with torch.ops.aten calls."""

import math

import pytest
import torch
import torch.fx
from conftest import aten_graph

from ember_codegen import CodegenError, CompiledGraph, compile_graph

aten = torch.ops.aten


def thin_path(x, w, b):
    return (
        aten.sum.dim_IntList(
            aten.relu.default(aten.add.Tensor(aten.mm.default(x, w), b)), [-1]
        ),
    )


def test_thin_path_matches_torch_and_reads_well():
    x, w, b = torch.randn(4, 3), torch.randn(3, 5), torch.randn(5)
    compiled = compile_graph(
        aten_graph(thin_path, "model.py:12"), [x, w, b], target="torch"
    )
    torch.testing.assert_close(compiled(x, w, b)[0], torch.relu(x @ w + b).sum(-1))
    assert compiled.target == "torch"
    assert compiled.fallback_ops == (
        "aten.add.Tensor",
        "aten.mm.default",
        "aten.relu.default",
        "aten.sum.dim_IntList",
    )
    src = compiled.source
    assert "# model.py:12" in src
    assert "buf0 = aten.mm.default(x, w)" in src
    assert "del buf0" in src  # freed right after its last use


def test_non_contiguous_broadcast_zero_d_and_empty_inputs():
    def fn(a, b, s):
        return (aten.mul.Tensor(aten.add.Tensor(a, b), s), aten.t.default(a))

    cases = [
        (torch.randn(3, 4).t(), torch.randn(1, 3), torch.tensor(2.5)),
        (torch.randn(0, 3), torch.randn(3), torch.tensor(-1.0)),
        (torch.randn(1, 1), torch.randn(5, 1), torch.tensor(0.0)),
    ]
    for a, b, s in cases:
        compiled = compile_graph(aten_graph(fn), [a, b, s], target="torch")
        out = compiled(a, b, s)
        torch.testing.assert_close(out[0], (a + b) * s)
        torch.testing.assert_close(out[1], a.t())


def test_nan_inf_and_dtype_arguments_are_written_correctly():
    def fn(x):
        y = aten.clamp.default(x, -math.inf, 1.0)
        z = aten.full.default(
            [2], math.nan, dtype=torch.float64, device=torch.device("cpu")
        )
        return (y, z, aten._to_copy.default(x, dtype=torch.int64))

    x = torch.tensor([-math.inf, 0.5, 3.0, math.nan])
    out = compile_graph(aten_graph(fn), [x], target="torch")(x)
    torch.testing.assert_close(out[0], x.clamp(max=1.0), equal_nan=True)
    assert out[1].dtype == torch.float64 and out[1].isnan().all()
    assert out[2].dtype == torch.int64


def test_multi_output_ops_and_getitem():
    def fn(x):
        values = aten.max.dim(x, 1)
        return (values[0], values[1])

    x = torch.randn(3, 5)
    out = compile_graph(aten_graph(fn), [x], target="torch")(x)
    expected = torch.max(x, 1)
    assert torch.equal(out[0], expected.values) and torch.equal(
        out[1], expected.indices
    )


def test_tensor_constants_and_the_storable_form():
    gm = aten_graph(lambda x: (aten.add.Tensor(x, x),))
    gm.register_buffer("_tensor_constant0", torch.tensor([1.0, 2.0]))
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    with gm.graph.inserting_before(node):
        const = gm.graph.get_attr("_tensor_constant0")
    node.args = (node.args[0], const)
    gm.recompile()
    x = torch.randn(2)
    compiled = compile_graph(gm, [x], target="torch")
    restored = CompiledGraph.from_bytes(compiled.to_bytes())
    assert restored.source == compiled.source
    assert restored.fallback_ops == compiled.fallback_ops
    torch.testing.assert_close(restored(x)[0], x + torch.tensor([1.0, 2.0]))


def test_unknown_target_lists_the_available_ones():
    with pytest.raises(ValueError, match="available: auto, cpp, triton, torch"):
        compile_graph(aten_graph(thin_path), [], target="vulkan")


def test_non_aten_node_is_refused():
    gm = torch.fx.symbolic_trace(lambda x: (torch.relu(x),))
    for target in ("torch", "cpp"):
        with pytest.raises(CodegenError, match="not an aten op"):
            compile_graph(gm, [torch.randn(2)], target=target)


def test_registry_alone_holds_every_family():
    """The package's LOWERINGS / lower_graph carry every family's rules even in a
    process that never imported compile_graph (the package exports lazily)."""
    import subprocess
    import sys

    code = (
        "import torch, ember_codegen\n"
        "table = ember_codegen.LOWERINGS\n"
        "assert torch.ops.aten.convolution.default in table\n"
        "assert torch.ops.aten.amax.default in table\n"
        "assert torch.ops.aten.gather.default in table\n"
        "import sys; assert 'ember_codegen.compile' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
