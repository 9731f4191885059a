"""Every Hugging Face family of test_huggingface.py through
``torch.compile(model, backend="ember")``: torch's capture, ember's aotgrad and
codegen. Eval logits and one training step's loss and gradients against eager,
on two batch and sequence sizes (torch.compile makes the changed sizes symbolic
on its recompile, and ember keeps them so); no graph may fall back to torch."""

from __future__ import annotations

import pytest
import torch
from test_huggingface import ATOL, FAMILIES, RTOL, SIZES, _compile_quietly, _step

from ember import torch_backend


@pytest.fixture(autouse=True)
def fresh_torch_compile():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def _ran_as_ember(before: int) -> None:
    """The graphs compiled since ``before`` all ran ember's code generation."""
    results = torch_backend.LOG.cache_results[before:]
    assert results and all(r == "miss" for r in results), results


@pytest.mark.parametrize("name", list(FAMILIES))
def test_eval_logits_match_eager(name: str) -> None:
    family = FAMILIES[name]
    torch.manual_seed(0)
    model = family.build().eval()
    compiled = torch.compile(model, backend="ember")
    before = len(torch_backend.LOG.cache_results)
    reasons = len(torch_backend.LOG.eager_graph_reasons)
    for batch, seq in SIZES:
        inputs = family.inputs(batch, seq)
        with torch.no_grad():
            expected = model(**inputs).logits
            actual = _compile_quietly(compiled, inputs).logits
        torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL)
    _ran_as_ember(before)
    assert torch_backend.LOG.eager_graph_reasons[reasons:] == []


@pytest.mark.parametrize("name", list(FAMILIES))
def test_training_step_matches_eager(name: str) -> None:
    family = FAMILIES[name]
    torch.manual_seed(0)
    model = family.build().train()
    compiled = torch.compile(model, backend="ember")
    before = len(torch_backend.LOG.cache_results)
    reasons = len(torch_backend.LOG.eager_graph_reasons)
    for batch, seq in SIZES:
        inputs = {**family.inputs(batch, seq), "labels": family.labels(batch, seq)}
        expected_loss, expected_grads = _step(model, inputs)
        actual_loss, actual_grads = _step(compiled, inputs)
        # torch.compile's module holds the model as _orig_mod.
        actual_grads = {
            k.removeprefix("_orig_mod."): g for k, g in actual_grads.items()
        }
        torch.testing.assert_close(actual_loss, expected_loss, rtol=RTOL, atol=ATOL)
        assert actual_grads.keys() == expected_grads.keys()
        for key, grad in expected_grads.items():
            torch.testing.assert_close(
                actual_grads[key], grad, rtol=RTOL, atol=ATOL, msg=key
            )
    _ran_as_ember(before)
    assert torch_backend.LOG.eager_graph_reasons[reasons:] == []
