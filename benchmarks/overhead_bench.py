"""Per-call overhead and cold vs warm first call, measured in one run.

Overhead: median time per call of a compiled function minus eager's, for x + 1 on
a one-element tensor and for a 10-parameter module with nothing to fuse, next to
torch.compile's (skip it with --no-torch-compile). Cold vs warm: the demo block's
first call in a new process with an empty cache folder, then in another new process
with the same folder. Run: python benchmarks/overhead_bench.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import ember


class TenParameters(torch.nn.Module):
    """Five small linear layers: ten parameters, nothing worth fusing."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(5))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x + y


def per_call_us(fn, args, repeats: int) -> float:
    for _ in range(20):
        fn(*args)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(100):
            fn(*args)
        samples.append((time.perf_counter() - start) / 100)
    return statistics.median(samples) * 1e6


def overhead_rows(repeats: int, reference: bool) -> list[list[str]]:
    cases = {
        "x + 1, one-element tensor": (lambda x: x + 1, (torch.randn(1),)),
        "10-parameter module, 2 inputs": (
            TenParameters(),
            (torch.randn(2, 4), torch.randn(2, 4)),
        ),
    }
    rows = []
    with torch.no_grad():
        for name, (fn, args) in cases.items():
            eager = per_call_us(fn, args, repeats)
            ours = per_call_us(ember.compile(fn), args, repeats)
            row = [name, f"{eager:.1f}", f"{ours:.1f}", f"{ours - eager:.1f}"]
            if reference:
                theirs = per_call_us(torch.compile(fn), args, repeats)
                row += [f"{theirs:.1f}", f"{theirs - eager:.1f}"]
            rows.append(row)
    return rows


_FIRST_CALL = """
import time, torch, ember
from ember.demo import Block
torch.manual_seed(0)
model = Block().eval()
x = torch.randn(8, 32, 64)
compiled = ember.compile(model)
with torch.no_grad():
    start = time.perf_counter()
    compiled(x)
    print(time.perf_counter() - start)
"""


def first_call_seconds(cache_dir: str) -> float:
    env = dict(os.environ, EMBER_CACHE_DIR=cache_dir)
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    reference = not args.no_torch_compile

    header = "| workload | eager µs | ember µs | ember overhead µs |"
    if reference:
        header += " torch.compile µs | torch.compile overhead µs |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for row in overhead_rows(args.repeats, reference):
        print("| " + " | ".join(row) + " |")

    with tempfile.TemporaryDirectory() as cache_dir:
        cold = first_call_seconds(cache_dir)
        warm = first_call_seconds(cache_dir)
    print()
    print("| demo block, first call in a new process | seconds |")
    print("|---|---|")
    print(f"| cold (empty cache folder) | {cold:.3f} |")
    print(f"| warm (same folder) | {warm:.3f} |")
    print(f"| warm / cold | {warm / cold:.2f} |")


if __name__ == "__main__":
    main()
