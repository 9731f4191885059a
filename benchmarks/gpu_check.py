"""The Triton target on a CUDA machine, in one run: codegen's Triton lowering
tests on the GPU, then softmax, layer_norm, a pointwise chain, an MLP block, a
transformer block and one training step, each timed for eager, ember (its
"auto" target picks Triton for CUDA tensors), ember with
``mode="max-autotune"`` and torch.compile with
``triton.testing.do_bench`` (median ms), with the largest difference from
eager, printed as one table.

Run from the repository root on a machine with a GPU, torch with CUDA, triton
and pytest installed, and the ember packages installed:

    python benchmarks/gpu_check.py            # tests, then the table
    python benchmarks/gpu_check.py --no-tests # the table only
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

import ember
from ember.demo import Block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_lowering_tests() -> int:
    """codegen's Triton cases with CUDA tensors (EMBER_TEST_DEVICE=cuda)."""
    env = dict(os.environ, EMBER_TEST_DEVICE="cuda")
    env.pop("TRITON_INTERPRET", None)
    test = os.path.join(ROOT, "packages", "codegen", "tests", "test_triton.py")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", test], env=env
    ).returncode


def chain(x: torch.Tensor) -> torch.Tensor:
    y = torch.relu(x * 1.5 + 0.25) - x
    y = torch.exp(-y * y)
    return torch.clamp(y / 3.0, -2.0, 2.0).neg()


def workloads() -> dict[str, tuple[Callable, tuple, bool]]:
    """name -> (function or module, inputs, whether it is a training step)."""
    cuda = torch.device("cuda")
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    ).to(cuda)
    block = Block(dim=256, heads=8).to(cuda)
    ln = (torch.randn(1024, device=cuda), torch.randn(1024, device=cuda))
    return {
        "softmax (4096, 1024)": (
            lambda x: torch.softmax(x, -1),
            (torch.randn(4096, 1024, device=cuda),),
            False,
        ),
        "layer_norm (4096, 1024)": (
            lambda x: F.layer_norm(x, (1024,), *ln),
            (torch.randn(4096, 1024, device=cuda),),
            False,
        ),
        "pointwise chain (4M)": (chain, (torch.randn(1 << 22, device=cuda),), False),
        "MLP block (64, 1024)": (
            mlp.eval(),
            (torch.randn(64, 1024, device=cuda),),
            False,
        ),
        "transformer block (8, 128, 256)": (
            block.eval(),
            (torch.randn(8, 128, 256, device=cuda),),
            False,
        ),
        "transformer block training step": (
            Block(dim=256, heads=8).to(cuda).train(),
            (torch.randn(8, 128, 256, device=cuda),),
            True,
        ),
    }


def _step(model: torch.nn.Module) -> Callable:
    def step(x: torch.Tensor) -> list:
        for p in model.parameters():
            p.grad = None
        model(x).square().mean().backward()
        return [p.grad for p in model.parameters()]

    return step


def _flat(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for item in value for t in _flat(item)]


def measure(name: str, fn: Callable, inputs: tuple, training: bool) -> str:
    from triton.testing import do_bench

    variants = {
        "eager": fn,
        "ember": ember.compile(fn),
        "ember max-autotune": ember.compile(fn, mode="max-autotune"),
        "torch.compile": torch.compile(fn),
    }
    runs = {k: (_step(v) if training else v) for k, v in variants.items()}
    with torch.set_grad_enabled(training):
        want = [t.clone() for t in _flat(runs["eager"](*inputs))]
        errors = []
        for key in ("ember", "ember max-autotune", "torch.compile"):
            got = _flat(runs[key](*inputs))
            errors.append(max((a - b).abs().max().item() for a, b in zip(got, want)))
        ms = {
            k: do_bench(lambda r=r: r(*inputs), return_mode="median")
            for k, r in runs.items()
        }
    eager = ms["eager"]
    cells = [f"{eager:.3f}"]
    for key in ("ember", "ember max-autotune", "torch.compile"):
        cells += [f"{ms[key]:.3f}", f"{eager / ms[key]:.2f}"]
    cells += [f"{e:.1e}" for e in errors]
    return f"| {name} | {' | '.join(cells)} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-tests", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU", file=sys.stderr)
        return 1
    failed = 0 if args.no_tests else run_lowering_tests()
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print(
        "| workload | eager ms | ember ms | eager/ember | ember max-autotune ms | "
        "eager/ember-mat | torch.compile ms | eager/tc | ember max diff | "
        "ember-mat max diff | tc max diff |"
    )
    print("|---" * 11 + "|")
    for name, (fn, inputs, training) in workloads().items():
        print(measure(name, fn, inputs, training), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
