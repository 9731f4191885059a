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


def test_max_autotune_times_warps_once_and_keeps_the_winner(tmp_path):
    """mode="max-autotune": each kernel's first launch times a few warp counts
    and writes the winner beside the kernel cache; a new compile of the same
    graph (a new process, or here another cache folder's twin) reads it."""
    torch.manual_seed(0)
    block = Block().eval()
    options = {**OPTIONS, "cache_dir": tmp_path}
    x = torch.randn(2, 8, 64)
    with torch.no_grad():
        tuned = ember.compile(block, mode="max-autotune", options=options)
        torch.testing.assert_close(tuned(x), block(x))
        winners = sorted((tmp_path / "kernels" / "tuning").glob("*.json"))
        assert winners  # one per Triton kernel launched
        ember.reset()
        again = ember.compile(block, mode="max-autotune", options=options)
        torch.testing.assert_close(again(x), block(x))
    assert sorted((tmp_path / "kernels" / "tuning").glob("*.json")) == winners
