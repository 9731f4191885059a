"""Dropout in training through the whole pipeline: nothing falls back to torch,
the same draws as eager under the same seed, and the gradient is mask * scale."""

import warnings

import pytest
import torch

import ember


@pytest.fixture(autouse=True)
def _fresh():
    ember.reset()
    yield


@pytest.mark.parametrize("p", [0.1, 0.5, 0.7])
def test_dropout_in_training_compiles_and_matches_eager(p):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(p))
    compiled = ember.compile(model)
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "runs as captured, with torch" fails
        torch.manual_seed(1)
        got = compiled(x)
    torch.manual_seed(1)
    want = model(x)
    torch.testing.assert_close(got, want)


def test_compiled_dropout_keeps_eager_statistics_and_gradient():
    dropout = torch.nn.Dropout(0.5)
    compiled = ember.compile(lambda t: dropout(t) * 3)
    x = torch.ones(512, 512, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = compiled(x)
    kept = out != 0
    assert 0.49 < kept.float().mean().item() < 0.51
    assert torch.equal(out[kept], torch.full_like(out[kept], 6.0))  # 3 / (1 - p)
    out.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() * 6.0)


@pytest.mark.parametrize("then", ["matmul", "scale"])
def test_dropout_after_relu_trains_as_eager(then):
    # The backward recomputes the relu, compares it and selects: GCC 12.2 once
    # compiled that kernel to write zeros (codegen's build.py flags).
    torch.manual_seed(0)
    x, w = torch.randn(4, 5), torch.randn(5, 6)

    def fn(x, w):
        h = torch.nn.functional.dropout(torch.relu(x), 0.5, True)
        return h @ w if then == "matmul" else h * 3

    compiled = ember.compile(fn, fullgraph=True)
    grads = []
    for run in (fn, compiled):
        inputs = [x.clone().requires_grad_(), w.clone().requires_grad_()]
        torch.manual_seed(1)
        run(*inputs).sum().backward()
        grads.append([t.grad for t in inputs])
    torch.testing.assert_close(grads[1], grads[0])
    assert grads[1][0].abs().sum() > 0
