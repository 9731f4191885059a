"""Training code through capture: optimizer state in dicts keyed by tensors,
gradients read and written, float hyperparameters as graph inputs, numbers
passed as tensors, foreach ops, and ``loss.backward()`` inside the graph. Each
is compared with eager on fresh data, with captures counted."""

import collections
import weakref

import torch
from conftest import CaptureCache

from ember_capture import capture


def _state_step(state, params, lr):
    """A hand-written optimizer: lazily created state keyed by each parameter."""
    for p in params:
        if p.grad is None:
            continue
        s = state[p]
        if len(s) == 0:
            s["buf"] = torch.zeros_like(p)
        s["buf"].mul_(0.9).add_(p.grad)
        with torch.no_grad():
            p.add_(s["buf"], alpha=-lr)


def _params():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(4))]
    for p in params:
        p.grad = torch.randn_like(p)
    return params


def test_state_keyed_by_parameters_is_created_then_read():
    eager_params, params = _params(), _params()
    eager_state = collections.defaultdict(dict)
    state = collections.defaultdict(dict)
    cache = CaptureCache(_state_step)
    for _ in range(3):
        _state_step(eager_state, eager_params, 0.1)
        cache(state, params, 0.1)
    for a, b in zip(eager_params, params):
        assert torch.equal(a, b)
        assert torch.equal(eager_state[a]["buf"], state[b]["buf"])
    # The first call fills the state (a new graph); the keys are then guarded.
    assert cache.captures == 2 and not cache.breaks and not cache.refused
    assert list(state) == params  # the replay keyed the state by the parameters


def test_keys_are_guarded_by_identity():
    params = _params()
    state = collections.defaultdict(dict)
    cache = CaptureCache(_state_step)
    cache(state, params, 0.1)
    cache(state, params, 0.1)
    # Equal values, other objects: the state is keyed by the new ones.
    eager, other = _params(), _params()
    eager_state, other_state = (
        collections.defaultdict(
            dict, {q: {"buf": state[p]["buf"].clone()} for q, p in zip(qs, params)}
        )
        for qs in (eager, other)
    )
    _state_step(eager_state, eager, 0.1)
    cache(other_state, other, 0.1)
    assert all(torch.equal(a, b) for a, b in zip(eager, other))
    assert cache.captures == 3


def test_a_float_in_a_param_group_is_an_input():
    """``group["lr"]`` changes every step: one capture, eager's values."""

    def update(groups):
        for group in groups:
            for p in group["params"]:
                with torch.no_grad():
                    p.add_(p.grad, alpha=-group["lr"])
                    p.mul_(1 - group["lr"] * group["weight_decay"])

    eager_params, params = _params(), _params()
    cache = CaptureCache(update)
    for step in range(4):
        lr = 0.1 / (step + 1)
        update([{"params": eager_params, "lr": lr, "weight_decay": 0.01}])
        cache([{"params": params, "lr": lr, "weight_decay": 0.01}])
        for a, b in zip(eager_params, params):
            assert torch.equal(a, b)  # add(alpha=) is one fused multiply-add
    assert cache.captures == 1


def test_float_inputs_of_one_value_share_a_tensor_only_where_safe():
    """A float input's tensor is made once per value: 0.0 and -0.0 stay apart,
    and one first made under inference_mode still joins a training graph."""

    def scale(x, a):
        return x * a

    cache = CaptureCache(scale)
    x = torch.randn(4)
    for a in (0.0, -0.0, 0.0):
        assert torch.equal(cache(x, a).signbit(), (x * a).signbit())
    with torch.inference_mode():
        cache(x, 0.25)
    w = torch.randn(4, requires_grad=True)
    cache(w, 0.25).sum().backward()  # saves the 0.25 tensor for its backward
    assert torch.equal(w.grad, torch.full((4,), 0.25))
    assert cache.captures == 3  # inference_mode and requires_grad are guarded


def test_a_0d_tensor_as_an_ops_number():
    def step(p, a, b, size):
        return p.clone().addcdiv_(a, b, value=-size), torch.add(p, a, alpha=size)

    torch.manual_seed(0)
    args = (torch.randn(5), torch.randn(5), torch.rand(5) + 1, torch.tensor(0.3))
    cache = CaptureCache(step)
    for value in (0.3, 0.7):
        args = (*args[:3], torch.tensor(value))
        for got, want in zip(cache(*args), step(*args)):
            assert torch.equal(got, want)
    assert cache.captures == 1


def test_foreach_ops_with_float_inputs():
    def step(params, grads, lr):
        torch._foreach_add_(params, grads, alpha=-lr)
        return torch._foreach_mul(params, 1 - lr)

    torch.manual_seed(0)
    grads = [torch.randn(3), torch.randn(2, 2)]
    eager = [torch.randn(3), torch.randn(2, 2)]
    mine = [t.clone() for t in eager]
    cache = CaptureCache(step)
    for lr in (0.1, 0.2):
        expected = step(eager, grads, lr)
        got = cache(mine, grads, lr)
        assert all(torch.equal(a, b) for a, b in zip(eager, mine))
        assert all(torch.equal(a, b) for a, b in zip(expected, got))
    assert cache.captures == 1


def test_gradients_read_and_reset():
    def read(params):
        total = sum(p.grad.sum() for p in params if p.grad is not None)
        for p in params:
            p.grad = None
        return total

    params = _params()
    expected = sum(p.grad.sum() for p in params)
    result = capture(read, params)
    assert len(result.graphs) == 1 and result.break_reason is None
    cache = CaptureCache(read)
    torch.testing.assert_close(cache(params), expected)
    assert all(p.grad is None for p in params)


def test_backward_inside_the_graph_accumulates_like_eager():
    def train(model, x):
        loss = model(x).pow(2).sum()
        loss.backward()
        return loss

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())

    eager_model, model = make(), make()
    cache = CaptureCache(train)
    for _ in range(2):
        x = torch.randn(5, 4)
        expected = train(eager_model, x)
        loss = cache(model, x)
        torch.testing.assert_close(loss, expected.detach())
        assert not loss.requires_grad  # its history is spent
        for a, b in zip(eager_model.parameters(), model.parameters()):
            torch.testing.assert_close(a.grad, b.grad)
    # .grad None, then a tensor accumulated in place: two captures, one graph each
    assert cache.captures == 2 and not cache.breaks and not cache.refused
    result = capture(train, model, torch.randn(5, 4))
    ops = [n.target for n in result.graphs[0].gm.graph.nodes]
    assert torch.autograd.grad in ops


def test_backward_with_retain_graph_breaks_with_a_reason():
    def train(model, x):
        loss = model(x).sum()
        loss.backward(retain_graph=True)
        return loss.detach()

    model = torch.nn.Linear(4, 3)
    result = capture(train, model, torch.randn(2, 4))
    assert "loss.backward(retain_graph=True)" in result.break_reason.reason


def test_weak_references_and_bound_functions():
    class Counter:
        def __init__(self):
            self.scale = 2.0

        def apply(self, x):
            return x * self.scale

    counter = Counter()
    ref = weakref.ref(counter)
    func = Counter.apply

    def call(x):
        return func.__get__(ref(), Counter)(x)

    x = torch.randn(3)
    cache = CaptureCache(call)
    torch.testing.assert_close(cache(x), x * 2.0)
    assert cache.captures == 1 and not cache.refused


def test_calling_a_ddp_module_breaks_at_the_call(tmp_path):
    """DDP's forward drives its C++ reducer: the call breaks where the user
    makes it, with a reason naming DDP, not deep inside DDP's forward."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        ddp = DDP(torch.nn.Linear(4, 4))

        def step(x):
            y = x * 2
            return ddp(y).sum()

        result = capture(step, torch.randn(3, 4))
        assert "DistributedDataParallel" in result.break_reason.reason
        assert result.break_reason.location.endswith(
            f":{step.__code__.co_firstlineno + 2}"
        )
    finally:
        dist.destroy_process_group()
