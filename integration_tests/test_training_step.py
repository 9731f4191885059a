"""A whole training step as one compiled entry: forward, loss,
``loss.backward()``, ``opt.step()`` and ``opt.zero_grad()`` in one graph,
compared with eager's losses, parameters and gradients; what cannot keep
eager's meaning (retain_graph, gradient hooks) breaks the graph and still
matches eager."""

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.demo import Block


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)
    )


def _block() -> torch.nn.Module:
    return Block(dim=16, heads=2)


MODELS = {"mlp": (_mlp, (4, 8), (4, 4)), "demo_block": (_block, (2, 5, 16), (2, 5, 16))}


def _pair(make_model, make_optimizer):
    made = []
    for _ in range(2):
        torch.manual_seed(0)
        model = make_model()
        made.append((model, make_optimizer(model.parameters())))
    return made


def train_step(model, opt, x, target):
    loss = F.mse_loss(model(x), target)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def _assert_close(eager_model, model):
    for a, b in zip(eager_model.parameters(), model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _adamw(params):
    return torch.optim.AdamW(params, lr=1e-2, foreach=True)


def _sgd(params):
    return torch.optim.SGD(params, lr=1e-2, momentum=0.9)


# Not AdamW on the block: the key bias of attention gets a gradient that is 0
# up to rounding (softmax ignores a shift per row), which Adam scales to a
# full step of either sign, so one ulp of difference flips the update.
@pytest.mark.parametrize(
    ("name", "make_optimizer"),
    [("mlp", _adamw), ("mlp", _sgd), ("demo_block", _sgd)],
    ids=["mlp-adamw_foreach", "mlp-sgd_momentum", "demo_block-sgd_momentum"],
)
def test_training_step_is_one_graph_and_matches_eager(name, make_optimizer):
    ember.reset()
    make_model, x_shape, y_shape = MODELS[name]
    (eager_model, eager_opt), (model, opt) = _pair(make_model, make_optimizer)
    compiled = ember.compile(train_step, fullgraph=True)
    for _ in range(3):
        x, y = torch.randn(x_shape), torch.randn(y_shape)
        expected = train_step(eager_model, eager_opt, x, y)
        loss = compiled(model, opt, x, y)
        torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-6)
        # The loss's autograd history is spent, as eager's is after backward.
        assert not loss.requires_grad
        _assert_close(eager_model, model)
        assert all(p.grad is None for p in model.parameters())
    assert ember.stats()["compiles"] == 2  # the first step also creates the state
    assert ember.stats()["eager_calls"] == 0
    explained = ember.explain(train_step)(model, opt, x, y)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    assert not explained.eager_graph_reasons


def accumulate(model, x, target):
    loss = F.mse_loss(model(x), target)
    loss.backward()
    return loss.detach()


def test_gradients_accumulate_into_grad_as_in_eager():
    """Without zero_grad: the first backward sets ``.grad``, later ones add to
    the same tensor in place; the user reads the gradients after the call."""
    ember.reset()
    (eager_model, _), (model, _) = _pair(_mlp, lambda ps: None)
    compiled = ember.compile(accumulate, fullgraph=True)
    grads = None
    for _ in range(3):
        x, y = torch.randn(4, 8), torch.randn(4, 4)
        accumulate(eager_model, x, y)
        compiled(model, x, y)
        if grads is None:
            grads = [p.grad for p in model.parameters()]
        assert all(p.grad is g for p, g in zip(model.parameters(), grads))
        for a, b in zip(eager_model.parameters(), model.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    assert ember.stats()["compiles"] == 2  # .grad: None, then a tensor


def test_gradients_made_by_library_calls_carry_no_history():
    """Two linears without bias: each weight's gradient is a matmul whose
    operands come from the other weight, which requires grad. In eager the
    gradients require no grad; the compiled step's must not either (they
    would hold an autograd graph, and the next backward could not add into
    them in place)."""
    ember.reset()
    (eager_model, _), (model, _) = _pair(
        lambda: torch.nn.Sequential(
            torch.nn.Linear(8, 16, bias=False), torch.nn.Linear(16, 4, bias=False)
        ),
        lambda ps: None,
    )
    compiled = ember.compile(accumulate, fullgraph=True)
    for _ in range(2):
        x, y = torch.randn(4, 8), torch.randn(4, 4)
        accumulate(eager_model, x, y)
        compiled(model, x, y)
        for a, b in zip(eager_model.parameters(), model.parameters()):
            assert not b.grad.requires_grad and b.grad.grad_fn is None
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)


def retaining_step(model, opt, x, target):
    loss = F.mse_loss(model(x), target)
    loss.backward(retain_graph=True)
    opt.step()
    opt.zero_grad()
    return loss.detach()


def test_retain_graph_and_gradient_hooks_break_with_a_reason():
    ember.reset()
    (eager_model, eager_opt), (model, opt) = _pair(
        _mlp, lambda ps: torch.optim.SGD(ps, lr=0.1)
    )
    x, y = torch.randn(4, 8), torch.randn(4, 4)
    # repeat=0: the step must run once, as the eager model's does
    explained = ember.explain(retaining_step, repeat=0)(model, opt, x, y)
    assert "loss.backward(retain_graph=True)" in str(explained.break_reasons[0])
    retaining_step(eager_model, eager_opt, x, y)
    _assert_close(eager_model, model)

    # A hook added after the first compile is seen: the guard recompiles, the
    # backward runs eagerly and the hook runs, as in eager.
    compiled = ember.compile(train_step)
    compiled(model, opt, x, y)
    train_step(eager_model, eager_opt, x, y)
    seen = []
    for m in (eager_model, model):
        m[0].weight.register_hook(lambda g: seen.append(g.shape) or g * 0)
    compiled(model, opt, x, y)
    train_step(eager_model, eager_opt, x, y)
    assert len(seen) == 2
    _assert_close(eager_model, model)
    explained = ember.explain(train_step)(model, opt, x, y)
    reason = str(explained.break_reasons[0])
    assert "backward into model['0'].weight, which has a gradient hook" in reason
