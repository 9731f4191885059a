"""torch.optim through ember.compile: ``ember.compile(opt.step)`` and functions
that call ``opt.step()``, for SGD, Adam, AdamW and RMSprop in their for-loop
and foreach forms, compared with eager's parameters and state after 5 steps,
with compiles counted (a learning rate a scheduler changes reuses the graph)."""

import pytest
import torch

import ember

SHAPES = [(16, 8), (16,), (4, 16), (4,)]

CASES = [
    ("SGD", {}),
    ("SGD", {"momentum": 0.9}),
    ("SGD", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1}),
    ("Adam", {}),
    ("Adam", {"weight_decay": 0.1, "amsgrad": True}),
    ("AdamW", {}),
    ("AdamW", {"amsgrad": True}),
    ("RMSprop", {}),
    ("RMSprop", {"momentum": 0.9, "centered": True, "weight_decay": 0.1}),
]


def _params() -> list[torch.nn.Parameter]:
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s)) for s in SHAPES]


def _same_gradients(*param_lists) -> None:
    for params in zip(*param_lists):
        g = torch.randn_like(params[0])
        for p in params:
            p.grad = g.clone()


def _assert_matches(eager, compiled, exact: bool) -> None:
    """Parameters and state equal: bit for bit, or within 1e-6 of each
    tensor's scale where eager's kernels round differently (docs/aotgrad.md,
    "Optimizers"); a momentum buffer of grad / sqrt(...) reaches 1e2."""
    assert len(eager) == len(compiled)
    for a, b in zip(eager, compiled):
        if exact:
            assert torch.equal(a, b)
        else:
            scale = max(1.0, a.abs().max().item())
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6 * scale)


def _state(opt) -> list[torch.Tensor]:
    return [
        v
        for group in opt.param_groups
        for p in group["params"]
        for v in opt.state[p].values()
        if isinstance(v, torch.Tensor)
    ]


@pytest.mark.parametrize("foreach", [False, True], ids=["for_loop", "foreach"])
@pytest.mark.parametrize(("kind", "options"), CASES, ids=lambda c: str(c))
def test_compiled_step_matches_eager(kind, options, foreach):
    ember.reset()
    eager_params, params = _params(), _params()
    make = getattr(torch.optim, kind)
    eager = make(eager_params, lr=1e-2, foreach=foreach, **options)
    opt = make(params, lr=1e-2, foreach=foreach, **options)
    step = ember.compile(opt.step, fullgraph=True)
    for _ in range(5):
        _same_gradients(eager_params, params)
        eager.step()
        step()
    # SGD's kernels are eager's own ops; Adam's bias corrections are float32
    # tensors when compiled (Python floats in eager), and eager's sqrt and
    # sqrt-based steps come from MKL, one ulp off the correctly rounded value.
    exact = kind == "SGD"
    _assert_matches(eager_params, params, exact)
    _assert_matches(_state(eager), _state(opt), exact)
    stats = ember.stats()
    # The first step also creates the state; the second on reads it.
    assert stats["compiles"] == (1 if not _state(eager) else 2)
    assert stats["eager_calls"] == 0


@pytest.mark.parametrize("kind", ["SGD", "AdamW", "RMSprop"])
def test_learning_rate_from_a_scheduler_is_a_graph_input(kind):
    ember.reset()
    eager_params, params = _params(), _params()
    make = getattr(torch.optim, kind)
    options = {"momentum": 0.9} if kind != "AdamW" else {}
    eager = make(eager_params, lr=1e-2, foreach=True, **options)
    opt = make(params, lr=1e-2, foreach=True, **options)
    schedulers = [torch.optim.lr_scheduler.ExponentialLR(o, 0.8) for o in (eager, opt)]
    step = ember.compile(opt.step)
    for _ in range(6):
        _same_gradients(eager_params, params)
        eager.step()
        step()
        for s in schedulers:
            s.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-2 * 0.8**6)
    _assert_matches(eager_params, params, exact=kind == "SGD")
    assert ember.stats()["compiles"] == 2


def test_training_function_calling_step_and_zero_grad():
    """``opt.step()`` and ``opt.zero_grad()`` inside a compiled function: the
    gradients are read as inputs, and set to None after the graph, as eager."""
    ember.reset()
    eager_params, params = _params(), _params()
    eager = torch.optim.AdamW(eager_params, lr=1e-2, foreach=True)
    opt = torch.optim.AdamW(params, lr=1e-2, foreach=True)

    def update(opt):
        opt.step()
        opt.zero_grad()

    compiled = ember.compile(update, fullgraph=True)
    for _ in range(3):
        _same_gradients(eager_params, params)
        update(eager)
        compiled(opt)
        assert all(p.grad is None for p in params)
    _assert_matches(eager_params, params, exact=False)
    assert ember.stats()["compiles"] == 2


def test_new_parameter_groups_and_missing_gradients_recompile():
    """A parameter without a gradient is skipped as in eager; adding a param
    group changes what the step reads, and the guards see it."""
    ember.reset()
    eager_params, params = _params(), _params()
    eager = torch.optim.SGD(eager_params[:2], lr=0.1, momentum=0.9)
    opt = torch.optim.SGD(params[:2], lr=0.1, momentum=0.9)
    step = ember.compile(opt.step)
    _same_gradients(eager_params, params)
    eager_params[1].grad = params[1].grad = None
    eager.step()
    step()
    eager.add_param_group({"params": eager_params[2:], "lr": 0.05})
    opt.add_param_group({"params": params[2:], "lr": 0.05})
    for _ in range(2):
        _same_gradients(eager_params, params)
        eager.step()
        step()
    _assert_matches(eager_params, params, exact=True)
    _assert_matches(_state(eager), _state(opt), exact=True)
