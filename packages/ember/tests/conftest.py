"""Helpers shared by the umbrella's tests."""

import json
import os
import subprocess
import sys

import pytest


@pytest.fixture(autouse=True)
def _fresh_cache_dir(tmp_path_factory, monkeypatch):
    """An empty EMBER_CACHE_DIR for each test: what one test (or run) leaves on
    disk (graphs, remembered dynamic dims) must not change another's counts."""
    folder = tmp_path_factory.mktemp("ember-cache")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(folder))


_RUN_MLP = """
import json, os, sys, warnings
os.umask(int(sys.argv[1], 8))
import torch, ember
import torch.nn.functional as F

def mlp(x, w1, w2):
    return torch.tanh(F.gelu(x @ w1) @ w2).sum(-1)

torch.manual_seed(0)
args = [torch.randn(4, 6), torch.randn(6, 8), torch.randn(8, 3)]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compiled = ember.compile(mlp)
    diff = (compiled(*args) - mlp(*args)).abs().max().item()
print(json.dumps({
    "cache": compiled.log.cache_results,
    "diff": diff,
    "warnings": [str(w.message) for w in caught],
}))
"""


def run_mlp(cache_dir, umask: int = 0o022, key: str | None = None) -> dict:
    """A new process that compiles and runs a small MLP with ``cache_dir`` as
    EMBER_CACHE_DIR (and ``key`` as EMBER_CACHE_KEY), under ``umask``: what the
    graph cache did, every warning, and that it matched eager."""
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache_dir))
    if key is not None:
        env["EMBER_CACHE_KEY"] = key
    done = subprocess.run(
        [sys.executable, "-c", _RUN_MLP, oct(umask)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["diff"] < 1e-5
    return result


def train_block_like_eager(compile_model, steps: int = 3):
    """SGD steps of the demo's Block compiled by ``compile_model`` beside an
    eager copy: after each, every gradient and weight equal eager's. Returns
    the compiled module."""
    import torch

    from ember.demo import Block

    torch.manual_seed(0)
    block, reference = Block(), Block()
    reference.load_state_dict(block.state_dict())
    compiled = compile_model(block)
    opt = torch.optim.SGD(block.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(steps):
        x = torch.randn(2, 8, 64)
        for model, optimizer in ((compiled, opt), (reference, opt_ref)):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
        for p, q in zip(block.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
            torch.testing.assert_close(p, q)
    return compiled
