"""``profiling()``: per compiled graph, the time of each loop kernel and library
call on the real inputs, with its bytes; results unchanged while profiling."""

import torch
from conftest import aten_graph

from ember_codegen import compile_graph, profiling

aten = torch.ops.aten


def mm_then_pointwise(x, w):
    y = aten.mm.default(x, w)
    return (aten.relu.default(aten.add.Tensor(y, 1.0)), aten.sum.dim_IntList(y, [1]))


def test_rows_name_each_kernel_and_library_call(cpp):
    x, w = torch.randn(64, 32), torch.randn(32, 48)
    compiled = cpp(mm_then_pointwise, x, w)
    with profiling() as report:
        for _ in range(3):
            got = compiled(x, w)
    want = mm_then_pointwise(x, w)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    (graph,) = report.graphs
    assert graph.calls == 3
    kinds = [row.kind for row in graph.rows]
    assert kinds.count("extern") == 1 and "loop" in kinds and kinds[-1] == "wrapper"
    (mm,) = [row for row in graph.rows if row.kind == "extern"]
    assert mm.ops == ("aten.mm.default",)
    assert mm.bytes == (64 * 32 + 32 * 48 + 64 * 48) * 4  # both operands, the result
    assert all(row.seconds > 0 for row in graph.rows)
    assert sum(row.seconds for row in graph.rows) <= graph.seconds
    assert report.bandwidth > 0
    text = str(report)
    assert "aten.mm.default" in text and "us per call over 3 calls" in text


def test_a_graph_through_torch_has_a_row_per_op(kernel_cache):
    x, w = torch.randn(8, 4), torch.randn(4, 4)
    compiled = compile_graph(aten_graph(mm_then_pointwise), [x, w], target="torch")
    with profiling(measure_bandwidth=False) as report:
        compiled(x, w)
    ops = [row.ops[0] for row in report.graphs[0].rows if row.kind == "torch"]
    assert ops == [
        "aten.mm.default",
        "aten.add.Tensor",
        "aten.relu.default",
        "aten.sum.dim_IntList",
    ]


def test_outside_the_block_nothing_is_recorded(cpp):
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    compiled = cpp(mm_then_pointwise, x, w)
    with profiling(measure_bandwidth=False) as report:
        pass
    compiled(x, w)
    assert report.graphs == []
