"""ember.compile with codegen_target="triton": the demo block and a training
step, against eager, under Triton's interpreter on CPU tensors (``nox -s
triton`` sets TRITON_INTERPRET=1)."""

import os

import pytest
import torch
from conftest import train_block_like_eager

import ember
from ember.demo import Block

pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip(
        "Triton on CPU tensors needs TRITON_INTERPRET=1", allow_module_level=True
    )

OPTIONS = {"codegen_target": "triton"}


def test_demo_block_runs_triton_kernels_and_matches_eager():
    torch.manual_seed(0)
    block = Block().eval()
    compiled = ember.compile(block, options=OPTIONS)
    with torch.no_grad():
        for batch in (2, 3):
            x = torch.randn(batch, 8, 64)
            torch.testing.assert_close(compiled(x), block(x))
    log = compiled._compiled_forward.log
    assert log.eager_graph_reasons == [] and log.fallback_ops == set()
    assert all("target 'triton'" in code for code in log.generated_code)
    assert "@triton.jit" in log.generated_code[-1]


def test_training_step_gradients_match_eager():
    compiled = train_block_like_eager(
        lambda block: ember.compile(block, options=OPTIONS), steps=2
    )
    log = compiled._compiled_forward.log
    assert sum("target 'triton'" in code for code in log.generated_code) >= 2
