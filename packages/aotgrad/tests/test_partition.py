"""Partitioners: the min-cut partition saves fewer bytes than the default one on a
pointwise-heavy model and gives the same gradients; its max-flow finds a
minimum cut."""

import itertools
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from aot_helpers import check_against_eager, graph_of, module_fn

from ember_aotgrad import aot_compile, default_partition, min_cut_partition
from ember_aotgrad.partition import _INF, _FlowGraph


class PointwiseMLP(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = (
            nn.Linear(dim, 64),
            nn.Linear(64, 64),
            nn.Linear(64, dim),
        )

    def forward(self, x):
        h = self.fc1(x)
        h = F.gelu(torch.tanh(h) * 2 + F.silu(h))
        h = self.fc2(h)
        h = torch.sigmoid(h) * h + 1
        return self.fc3(F.gelu(h))


def saved_bytes_at_run_time(run, inputs):
    """Bytes of distinct storages autograd saves for backward, inputs excluded."""
    held = {t.untyped_storage().data_ptr() for t in inputs}
    seen = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in held:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run(*inputs)
    return sum(seen.values()), out


def test_min_cut_saves_fewer_bytes_with_the_same_gradients():
    torch.manual_seed(0)
    fn, state = module_fn(PointwiseMLP())
    inputs = [torch.randn(16, 32), *state]
    measured = {}
    for partitioner in (default_partition, min_cut_partition):
        compiled = check_against_eager(fn, inputs, partitioner=partitioner)
        nbytes, _ = saved_bytes_at_run_time(compiled, inputs)
        measured[partitioner.__name__] = (compiled.partition.saved_bytes, nbytes)
    default, min_cut = measured["default_partition"], measured["min_cut_partition"]
    assert min_cut[0] < default[0]
    assert min_cut[1] < default[1]
    assert min_cut[0] == min_cut[1] and default[0] == default[1]


def test_min_cut_recomputes_pointwise_ops_in_the_backward():
    def fn(x, w):
        h = x @ w
        return ((torch.exp(h) * 3 + h).sum(),)

    x, w = torch.randn(4, 5, requires_grad=True), torch.randn(5, 6, requires_grad=True)
    compiled = aot_compile(
        graph_of(fn, 2), [x, w], lambda g, e: g, partitioner=min_cut_partition
    )
    saved = compiled.partition.saved
    assert [n for n in saved if n.startswith("mm")] and not [
        n for n in saved if "exp" in n
    ]
    bw_ops = {str(n.target) for n in compiled.partition.backward.graph.nodes}
    assert "aten.exp.default" in bw_ops
    check_against_eager(fn, [x, w], partitioner=min_cut_partition)


def test_min_cut_saves_a_pointwise_value_a_backward_matmul_reads():
    # GELU's output feeds the second linear, whose weight gradient (a matmul in
    # the backward) reads it: recomputing it would be a whole extra pass, so it
    # is saved beside the first matmul's output, as eager saves both.
    def fn(x, w1, w2):
        return ((F.gelu(x @ w1) @ w2).sum(),)

    x = torch.randn(4, 5)
    w1, w2 = (
        torch.randn(5, 6, requires_grad=True),
        torch.randn(6, 3, requires_grad=True),
    )
    compiled = aot_compile(
        graph_of(fn, 3), [x, w1, w2], lambda g, e: g, partitioner=min_cut_partition
    )
    saved = compiled.partition.saved
    assert any(n.startswith("mm") for n in saved)
    assert any(n.startswith("mul") for n in saved), saved  # GELU's last multiply
    backward = compiled.partition.backward.graph.nodes
    erfs = [n for n in backward if n.target is torch.ops.aten.erf.default]
    assert len(erfs) == 1  # GELU's derivative; its output is not computed again
    check_against_eager(fn, [x, w1, w2], partitioner=min_cut_partition)


def test_default_partition_saves_what_the_backward_reads():
    def fn(x):
        return ((torch.exp(x) * 3).sum(),)

    x = torch.randn(6, requires_grad=True)
    compiled = aot_compile(
        graph_of(fn, 1), [x], lambda g, e: g, partitioner=default_partition
    )
    assert any("exp" in n for n in compiled.partition.saved)
    bw_ops = {str(n.target) for n in compiled.partition.backward.graph.nodes}
    assert "aten.exp.default" not in bw_ops


def test_checkpointed_nodes_are_recomputed_not_saved():
    """Nodes tagged ``ember_recompute`` (capture tags a torch.utils.checkpoint region)
    are never saved, a matmul included; a random op's result is saved, so the
    backward sees the forward's mask."""

    def fn(x, w1, w2):
        h = torch.relu(x @ w1)
        kept = torch.rand_like(h) > 0.5
        return ((h * kept) @ w2).sum(), kept

    x = torch.randn(4, 5, requires_grad=True)
    w1 = torch.randn(5, 6, requires_grad=True)
    w2 = torch.randn(6, 3, requires_grad=True)
    gm = graph_of(fn, 3)
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["ember_recompute"] = True
    compiled = aot_compile(
        gm, [x, w1, w2], lambda g, e: g, partitioner=min_cut_partition
    )
    saved = compiled.partition.saved
    # untagged, the cut saves mm_default and the mask; tagged, only inputs and
    # the random draw, from which the backward recomputes x @ w1 and the mask
    assert saved == ("arg0", "arg1", "arg2", "rand_like_default"), saved
    bw_ops = [str(n.target) for n in compiled.partition.backward.graph.nodes]
    assert bw_ops.count("aten.mm.default") == 5  # x @ w1 again, then four grads
    assert "aten.rand_like.default" not in bw_ops
    loss, kept = compiled(x, w1, w2)
    loss.backward()
    got = [t.grad for t in (x, w1, w2)]
    for t in (x, w1, w2):
        t.grad = None
    h = torch.relu(x @ w1)
    ((h * kept) @ w2).sum().backward()
    for g, t in zip(got, (x, w1, w2)):
        torch.testing.assert_close(g, t.grad)


def test_the_flow_graph_finds_a_minimum_cut():
    """On random small graphs the cut between the nodes the source still
    reaches and the rest costs as little as the cheapest cut found by trying
    every split of the nodes."""
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 7)
        arcs = [
            (a, b, rng.choice([_INF, *range(1, 10)]))
            for a, b in itertools.permutations(range(n), 2)
            if rng.random() < 0.35
        ]
        arcs += [(_FlowGraph.source, a, rng.randint(1, 9)) for a in range(n) if a % 2]
        arcs += [(a, _FlowGraph.sink, rng.randint(1, 9)) for a in range(n) if a % 3]
        flow = _FlowGraph()
        for a, b, cap in arcs:
            flow.add(a, b, cap)

        best = min(
            _cut(arcs, {_FlowGraph.source, *(a for a in range(n) if mask >> a & 1)})
            for mask in range(2**n)
        )
        side = flow.source_side()
        assert _FlowGraph.sink not in side or best >= _INF
        assert _cut(arcs, side) == best


def _cut(arcs, side) -> int:
    return sum(cap for a, b, cap in arcs if a in side and b not in side)
