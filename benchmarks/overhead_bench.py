"""Per-call overhead and cold vs warm first call, measured in one run.

Overhead: median time per call of a compiled function minus eager's, for x + 1 on
a one-element tensor and for a 10-parameter module with nothing to fuse, next to
torch.compile's (skip it with --no-torch-compile). Cold vs warm: the demo block's
first call in a new process with an empty cache folder, then in another new process
with the same folder, with the time per compile stage; then both again with the
one-time torch._dynamo import (which torch's own meta kernels trigger; see
docs/capture.md) done before the timer starts. Run: python benchmarks/overhead_bench.py
"""

from __future__ import annotations

import argparse
import json
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
import json, sys, time, torch, ember
from ember.backends import CompileLog, resolve_backend
from ember.config import Config
from ember.demo import Block
from ember_runtime import Counters
seconds = {}
if sys.argv[1] == "preimport":
    start = time.perf_counter()
    import torch._dynamo
    seconds["import"] = time.perf_counter() - start
torch.manual_seed(0)
model = Block().eval()
x = torch.randn(8, 32, 64)
# The backend gets its own Counters so the stage times show whether or not the
# umbrella passes the compiled function's counters to it.
counters, log = Counters(), CompileLog()
backend = resolve_backend("ember", Config.from_options(), log, counters)
compiled = ember.compile(model, backend=backend)
with torch.no_grad():
    start = time.perf_counter()
    compiled(x)
    seconds["first"] = time.perf_counter() - start
seconds.update(ember.stats()["compile_seconds"])
seconds.update(counters.compile_seconds)
print(json.dumps({"seconds": seconds, "cache": log.cache_results}))
"""

STAGES = ("capture", "aotgrad", "codegen", "cache_key", "cache_load", "cache_store")


def first_call(cache_dir: str, preimport: bool) -> dict:
    """The demo block's first call in a new process: seconds per stage."""
    env = dict(os.environ, EMBER_CACHE_DIR=cache_dir)
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL, "preimport" if preimport else "plain"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def first_call_rows() -> list[list[str]]:
    """Cold then warm, each in a new process, plainly and with the one-time
    torch._dynamo import (see docs/capture.md) done before the timer starts."""
    rows, firsts = [], {}
    for preimport in (False, True):
        with tempfile.TemporaryDirectory() as cache_dir:
            for kind in ("cold", "warm"):
                result = first_call(cache_dir, preimport)
                s = result["seconds"]
                firsts[kind, preimport] = s["first"]
                name = f"{kind}{', import done before' if preimport else ''}"
                stages = [f"{s.get(stage, 0.0) * 1e3:.0f}" for stage in STAGES]
                rest = s["first"] - s["convert"]
                rows.append(
                    [
                        name,
                        ",".join(result["cache"]),
                        f"{s['first'] * 1e3:.0f}",
                        *stages,
                        f"{rest * 1e3:.0f}",
                        f"{s.get('import', 0.0) * 1e3:.0f}",
                    ]
                )
    for preimport in (False, True):
        ratio = firsts["warm", preimport] / firsts["cold", preimport]
        label = "warm / cold" + (", import done before" if preimport else "")
        rows.append([label, "", f"{ratio:.3f}", *[""] * (len(STAGES) + 2)])
    return rows


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

    print()
    header = (
        "| demo block, first call in a new process | disk cache | first call ms | "
        + " | ".join(f"{stage} ms" for stage in STAGES)
        + " | rest ms | import torch._dynamo ms |"
    )
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for row in first_call_rows():
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
