"""DistributedDataParallel in one process (gloo, world size 1): a graph compiled
inside DDP's forward is split at DDP's buckets, each piece its own autograd
node, with eager's gradients; outside DDP the same code is one graph. The
two-process tests are in integration_tests/test_distributed.py."""

import operator
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.fx
from torch.nn.parallel import DistributedDataParallel as DDP

import ember
from ember.distributed import BucketCaps, bucket_pieces


@pytest.fixture(scope="module")
def process_group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _mlp(layers=4, width=16):
    torch.manual_seed(0)
    parts = []
    for _ in range(layers):
        parts += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*parts)


LAYER_BYTES = (16 * 16 + 16) * 4


def _compiled_nodes(out):
    seen, todo, found = set(), [out.grad_fn], 0
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        found += node.name() == "AotFunctionBackward"
        todo += [parent for parent, _ in node.next_functions]
    return found


@pytest.mark.parametrize("static_graph", [False, True])
def test_graph_compiled_inside_ddp_is_split_at_its_buckets(process_group, static_graph):
    eager = DDP(_mlp(), bucket_cap_mb=LAYER_BYTES / 2**20, static_graph=static_graph)
    compiled = ember.compile(
        DDP(_mlp(), bucket_cap_mb=LAYER_BYTES / 2**20, static_graph=static_graph)
    )
    for _ in range(3):
        x = torch.randn(5, 16)
        want, got = eager(x), compiled(x)
        torch.testing.assert_close(got, want)
        assert _compiled_nodes(got) == 4  # one piece per layer: one per bucket
        want.square().sum().backward()
        got.square().sum().backward()
    for a, b in zip(eager.parameters(), compiled.parameters()):
        torch.testing.assert_close(b.grad, a.grad)
    forward = compiled._compiled_forward
    assert forward.log.bucket_pieces == [4]
    assert forward.dispatcher.counters.compiles == 1


def test_outside_ddp_the_graph_is_one_piece(process_group):
    model = _mlp()
    compiled = ember.compile(model)
    out = compiled(torch.randn(5, 16))
    assert _compiled_nodes(out) == 1
    assert compiled._compiled_forward.log.bucket_pieces == []


def test_the_wrapped_module_is_restored_after_each_call(process_group):
    model = _mlp()
    ddp = DDP(model)
    compiled = ember.compile(ddp)
    compiled(torch.randn(5, 16))
    with pytest.raises(RuntimeError):
        compiled(torch.randn(5, 7))  # the model's own error, raised in its forward
    assert ddp.module is model
    assert list(compiled.state_dict()) == list(ddp.state_dict())


def _graph_with_a_size_between_layers():
    """``y = tanh(x @ w1); n = y.size(0); z = (y @ w2) * n``, built by hand: an
    int passes from the first layer's nodes to the second's."""
    graph = torch.fx.Graph()
    x, w1, w2 = (graph.placeholder(name) for name in ("x", "w1", "w2"))
    y = graph.call_function(torch.tanh, (graph.call_function(torch.matmul, (x, w1)),))
    n = graph.call_method("size", (y, 0))
    z = graph.call_function(
        operator.mul, (graph.call_function(torch.matmul, (y, w2)), n)
    )
    graph.output((z,))
    example = [torch.randn(3, 4), torch.randn(4, 4), torch.randn(4, 4)]
    for node in graph.nodes:  # what capture records: meta values
        if node.op == "placeholder":
            node.meta["example_value"] = example[["x", "w1", "w2"].index(node.name)]
        elif node.target == "size":
            node.meta["example_value"] = 3
        elif node.op != "output":
            node.meta["example_value"] = torch.empty(3, 4, device="meta")
    return torch.fx.GraphModule(torch.nn.Module(), graph), example


def test_pieces_end_where_buckets_fill_and_never_pass_a_non_tensor():
    gm, example = _graph_with_a_size_between_layers()
    sizes = {id(example[1]): 64, id(example[2]): 64}
    names = [
        [n.name for n in piece]
        for piece in bucket_pieces(gm, example, sizes, BucketCaps(64, 64))
    ]
    # The size is read by the second layer's mul: the layers stay together.
    assert names == [["matmul", "tanh", "size", "matmul_1", "mul"]]
    mul = next(n for n in gm.graph.nodes if n.target is operator.mul)
    mul.args = (mul.args[0], 3)
    gm.graph.erase_node(next(n for n in gm.graph.nodes if n.target == "size"))
    gm.recompile()
    names = [
        [n.name for n in piece]
        for piece in bucket_pieces(gm, example, sizes, BucketCaps(64, 64))
    ]
    assert names == [["matmul", "tanh"], ["matmul_1", "mul"]]


def test_explain_reports_the_split(process_group):
    ddp = DDP(_mlp(layers=2), bucket_cap_mb=LAYER_BYTES / 2**20)
    report = ember.explain(ddp)(torch.randn(5, 16))
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert report.bucket_pieces == [2]
    assert "graph split at DDP's buckets into 2 pieces" in str(report)


class ModeInTheMiddle(torch.nn.Module):
    """Four layers; the second runs without grad, or the second and third
    under autocast."""

    def __init__(self, mode):
        super().__init__()
        torch.manual_seed(0)
        self.mode = mode
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(4))

    def forward(self, x):
        x = torch.tanh(self.layers[0](x))
        if self.mode == "no_grad":
            with torch.no_grad():
                x = torch.tanh(self.layers[1](x))
            x = torch.tanh(self.layers[2](x))
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                x = torch.tanh(self.layers[2](torch.tanh(self.layers[1](x))))
            x = x.float()
        return torch.tanh(self.layers[3](x))


# Autocast: within two bfloat16 roundings of eager (the fused code rounds
# where eager does not, as test_autocast.py explains).
BF16 = 2 * torch.finfo(torch.bfloat16).eps


@pytest.mark.parametrize(
    ("mode", "pieces", "tol"), [("no_grad", 3, None), ("autocast", 2, BF16)]
)
def test_no_piece_boundary_inside_a_grad_mode_or_autocast_block(
    process_group, mode, pieces, tol
):
    def ddp(model):
        return DDP(
            model, bucket_cap_mb=LAYER_BYTES / 2**20, find_unused_parameters=True
        )

    eager, compiled = (
        ddp(ModeInTheMiddle(mode)),
        ember.compile(ddp(ModeInTheMiddle(mode))),
    )
    for _ in range(2):
        x = torch.randn(5, 16)
        want, got = eager(x), compiled(x)
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
        want.sum().backward()
        got.sum().backward()
    for a, b in zip(eager.parameters(), compiled.parameters()):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad, rtol=tol, atol=tol)
    assert compiled._compiled_forward.log.bucket_pieces == [pieces]
