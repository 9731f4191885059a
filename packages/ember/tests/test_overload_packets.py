"""An aten op called through its overload packet (``torch.ops.aten.op(...)``, no
overload name) is captured and compiled like any call: the graph cache reads
the packet's namespace from its name (a packet's attributes are its overloads,
so ``packet.namespace`` raised "has no overload name 'namespace'")."""

import warnings

import pytest
import torch

import ember

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    ember.reset()
    yield


def softmax_backward(g, y):
    return aten._softmax_backward_data(g, y, 1, torch.float32)


def upsample_aa(x):
    return aten._upsample_bilinear2d_aa(x, [6, 5], False)


def batch_norm_with_update(x, w, b, mean, var):
    return aten._batch_norm_with_update(x, w, b, mean, var, 0.1, 1e-5)


CASES = {
    "_softmax_backward_data": (softmax_backward, lambda: [torch.randn(3, 4)] * 2),
    "_upsample_bilinear2d_aa": (upsample_aa, lambda: [torch.randn(1, 2, 4, 4)]),
    "_batch_norm_with_update": (
        batch_norm_with_update,
        lambda: [
            *[torch.randn(4, 3, 2), torch.rand(3), torch.randn(3)],
            *[torch.zeros(3), torch.ones(3)],  # running mean and variance
        ],
    ),
}


def _run(fn, inputs, grad):
    inputs = [t.clone().requires_grad_(grad and i < 3) for i, t in enumerate(inputs)]
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    grads = None
    if grad:
        loss = outs[0].sum() if outs[0].requires_grad else None
        wrt = [t for t in inputs if t.requires_grad]
        grads = torch.autograd.grad(loss, wrt, allow_unused=True) if loss else None
    return outs, inputs, grads


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", CASES)
def test_op_called_through_its_packet_is_captured_and_matches_eager(name, grad):
    fn, make = CASES[name]
    inputs = make()
    want, eager_inputs, want_grads = _run(fn, inputs, grad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an op left to torch may say so
        got, got_inputs, got_grads = _run(
            ember.compile(fn, backend="ember"), inputs, grad
        )
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_inputs, eager_inputs)  # running stats updated
    if want_grads is not None:
        torch.testing.assert_close(got_grads, want_grads)
