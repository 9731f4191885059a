"""Means and variances over no elements are NaN, as eager's, and a variance
whose correction leaves no degrees of freedom divides by zero as eager does
(found by the OpInfo sweep: var and std of a (0, 5) tensor gave -0.0)."""

import pytest
import torch
from aot_helpers import graph_of

from ember_aotgrad import aot_compile


def check_against_eager(fn, inputs):
    """Outputs and gradients as eager's, NaN where eager's are NaN."""
    compiled = aot_compile(graph_of(fn, len(inputs)), inputs, lambda gm, ex: gm)
    results = []
    for run in (fn, compiled):
        xs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
        outs = run(*xs)
        grads = []
        if outs[0].requires_grad:
            outs[0].sum().backward()
            grads = [x.grad for x in xs]
        results.append((outs, grads))
    (want, want_grads), (got, got_grads) = results
    torch.testing.assert_close(got, want, equal_nan=True)
    torch.testing.assert_close(got_grads, want_grads, equal_nan=True)


CASES = {
    "mean": lambda x: (torch.mean(x),),
    "mean_dim": lambda x: (torch.mean(x, 0),),
    "var_unbiased": lambda x: (torch.var(x, True),),
    "var_biased": lambda x: (torch.var(x, correction=0),),
    "var_dim": lambda x: (torch.var(x, 0),),
    "std_unbiased": lambda x: (torch.std(x, True),),
    "std_dim_keepdim": lambda x: (torch.std(x, 0, keepdim=True),),
}


@pytest.mark.parametrize("shape", [(0, 5), (0,), (1, 3)], ids=str)
@pytest.mark.parametrize("name", CASES)
def test_reductions_over_no_elements_match_eager(name, shape):
    check_against_eager(CASES[name], [torch.randn(shape)])


@pytest.mark.parametrize("correction", [2, 3])
def test_variance_with_no_degrees_of_freedom_matches_eager(correction):
    fn = lambda x: (torch.var(x, 1, correction=correction),)  # noqa: E731
    check_against_eager(fn, [torch.randn(4, 2, requires_grad=True)])
