"""Joint forward+backward graphs run as one autograd node: gradients of small
models match eager, and the autograd.Function behaves like eager at the edges."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from aot_helpers import check_against_eager, graph_of, module_fn

from ember_aotgrad import (
    AotGradError,
    aot_compile,
    default_partition,
    is_core,
    min_cut_partition,
)

PARTITIONERS = [default_partition, min_cut_partition]


class Block(nn.Module):
    """Pre-norm attention and a GELU MLP, as in a small transformer."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (
            a.view(b, t, self.heads, d // self.heads).transpose(1, 2) for a in (q, k, v)
        )
        scores = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        attn = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (attn @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def conv_bn():
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 5 * 5, 3),
    )


MODELS = {
    "mlp": (
        lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)),
        (6, 8),
    ),
    "layernorm_gelu": (
        lambda: nn.Sequential(
            nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 8)
        ),
        (2, 3, 8),
    ),
    "attention_block": (Block, (2, 5, 16)),
    "conv_batchnorm": (conv_bn, (4, 3, 5, 5)),
}


@pytest.mark.parametrize("partitioner", PARTITIONERS, ids=["default", "min_cut"])
@pytest.mark.parametrize("name", MODELS)
def test_model_outputs_gradients_and_buffers_match_eager(name, partitioner):
    make, shape = MODELS[name]
    torch.manual_seed(0)
    fn, state = module_fn(make().train())
    check_against_eager(fn, [torch.randn(shape), *state], partitioner=partitioner)


@pytest.mark.parametrize("name", MODELS)
def test_model_graphs_are_core_only(name):
    make, shape = MODELS[name]
    torch.manual_seed(0)
    fn, state = module_fn(make().train())
    inputs = [torch.randn(shape), *state]
    compiled = aot_compile(graph_of(fn, len(inputs)), inputs, lambda g, e: g)
    for gm in (compiled.forward, compiled.backward_plan.graph):
        outside = {
            str(n.target)
            for n in gm.graph.nodes
            if n.op == "call_function" and not is_core(n.target)
        }
        assert not outside


def test_conv_batchnorm_training_steps_track_eager():
    torch.manual_seed(0)
    eager_model = conv_bn().train()
    model = copy.deepcopy(eager_model)
    fn, state = module_fn(model)
    x = torch.randn(4, 3, 5, 5)
    compiled = aot_compile(graph_of(fn, len(state) + 1), [x, *state], lambda g, e: g)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager_model, model)]
    for _ in range(3):
        x, target = torch.randn(4, 3, 5, 5), torch.randint(0, 3, (4,))
        losses = []
        for run, opt in (
            (eager_model, opts[0]),
            (lambda x: compiled(x, *state)[0], opts[1]),
        ):
            opt.zero_grad()
            loss = F.cross_entropy(run(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0])
    for a, e in zip(model.state_dict().values(), eager_model.state_dict().values()):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)


def test_non_differentiable_and_grad_free_outputs():
    def fn(x, y):
        return (x.argmax(-1), y * 2, (x * y).sum(-1), x.shape[0])

    x, y = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4)
    compiled = check_against_eager(fn, [x, y])
    idx, y2, s, n = compiled(x, y)
    assert not idx.requires_grad and not y2.requires_grad and s.requires_grad
    assert n == 3


def test_unused_inputs_get_no_gradient():
    def fn(x, w):
        return (torch.tanh(x) * 3,)

    x, w = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    check_against_eager(fn, [x, w])
    compiled = aot_compile(graph_of(fn, 2), [x, w], lambda g, e: g)
    compiled(x, w)[0].sum().backward()
    assert w.grad is None and x.grad is not None


def test_only_some_outputs_reach_the_loss():
    def fn(x):
        return (torch.sin(x), torch.cos(x))

    x = torch.randn(5, requires_grad=True)
    compiled = aot_compile(graph_of(fn, 1), [x], lambda g, e: g)
    compiled(x)[1].sum().backward()
    torch.testing.assert_close(x.grad, -torch.sin(x.detach()))


def test_retain_graph_allows_a_second_backward():
    def fn(x):
        return (torch.exp(x).sum(),)

    x = torch.randn(4, requires_grad=True)
    compiled = aot_compile(graph_of(fn, 1), [x], lambda g, e: g)
    (out,) = compiled(x)
    out.backward(retain_graph=True)
    out.backward()
    torch.testing.assert_close(x.grad, 2 * torch.exp(x.detach()))
    with pytest.raises(RuntimeError, match="second time"):
        out.backward()


def test_double_backward_raises_a_clear_error():
    def fn(x):
        return ((x**3).sum(),)

    x = torch.randn(3, requires_grad=True)
    compiled = aot_compile(graph_of(fn, 1), [x], lambda g, e: g)
    (out,) = compiled(x)
    with pytest.raises(AotGradError, match="double backward"):
        torch.autograd.grad(out, x, create_graph=True)


def test_the_backward_compiler_gets_the_backward_graph_on_first_backward():
    seen = []

    def bw_compiler(gm, example_inputs):
        seen.append((type(gm).__name__, len(example_inputs)))
        return gm

    x = torch.randn(4, requires_grad=True)
    compiled = aot_compile(
        graph_of(lambda x: (torch.sigmoid(x) * x,), 1),
        [x],
        lambda g, e: g,
        bw_compiler,
    )
    out = compiled(x)[0]
    assert seen == []
    out.sum().backward()
    out2 = compiled(x)[0]
    out2.sum().backward()
    assert len(seen) == 1 and seen[0][0] == "BackwardGraph"


def test_grad_mode_off_or_new_grad_inputs_at_call_time():
    def fn(x, w):
        return ((x * w).sum(),)

    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    compiled = aot_compile(graph_of(fn, 2), [x, w], lambda g, e: g)
    with torch.no_grad():
        assert not compiled(x, w)[0].requires_grad
    x.requires_grad_(True)
    compiled(x, w)[0].backward()
    torch.testing.assert_close(x.grad, w.detach())
    torch.testing.assert_close(w.grad, x.detach())
