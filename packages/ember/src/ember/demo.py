"""The built-in demo: ``python -m ember.demo``.

Compiles a small transformer-style block with ember, checks it against eager on
fresh inputs, and prints what a user asks first: is it right, is it faster, what
did compiling cost, what was captured, and where the compile report is.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

import ember


class Block(torch.nn.Module):
    """Pre-norm attention followed by a GELU MLP, written as straight-line code."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = d // self.heads
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q = q.view(b, t, self.heads, h).transpose(1, 2)
        k = k.view(b, t, self.heads, h).transpose(1, 2)
        v = v.view(b, t, self.heads, h).transpose(1, 2)
        attn = F.softmax((q @ k.transpose(-2, -1)) / h**0.5, dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def _median_ms(fn, x, repeats: int = 50) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m ember.demo",
        description="Compile a transformer block with ember, check it against "
        "eager, time both, and write the compile report.",
    )
    parser.add_argument(
        "--report",
        default=os.path.join(tempfile.gettempdir(), "ember_demo_report.html"),
        help="where to write the HTML compile report (default: %(default)s)",
    )
    options = parser.parse_args(argv)
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(8, 32, 64)
    with ember.report(options.report, "ember demo: compile report"), torch.no_grad():
        compiled = ember.compile(model)
        start = time.perf_counter()
        out = compiled(x)
        first_call = time.perf_counter() - start
        worst = (out - model(x)).abs().max().item()
        for _ in range(3):  # fresh data, same compiled entry
            y = torch.randn(8, 32, 64)
            worst = max(worst, (compiled(y) - model(y)).abs().max().item())
        eager_ms = _median_ms(model, x)
        ember_ms = _median_ms(compiled, x)
    forward = compiled._compiled_forward
    log, counters = forward.log, forward.dispatcher.counters
    (record,) = log.compiles
    stages = ", ".join(f"{k} {t:.2f}" for k, t in record.stages().items())
    saved = (eager_ms - ember_ms) / 1e3
    repay = f"{record.total / saved:,.0f} calls" if saved > 0 else "never"
    print("ember demo: a transformer block, batch 8 x 32 tokens x 64 features\n")
    print(f"correct   largest difference from eager over 4 inputs: {worst:.2e}")
    print(
        f"speed     ember {ember_ms:.3f} ms per call, eager {eager_ms:.3f} ms: "
        f"{eager_ms / ember_ms:.2f}x eager"
    )
    print(
        f"compile   {record.total:.2f} s ({stages}; "
        f"{_cache_word(record.cache_results)}); first call {first_call:.2f} s"
    )
    print(f"          the compile pays for itself after {repay}")
    print(
        f"graphs    {len(log.graphs)} graph, {len(forward.breaks)} graph breaks, "
        f"{counters.compiles} compile, {counters.hits} guard hits"
    )
    print(f"report    {options.report}  (graphs, guards, kernels, timeline)")
    print("\ngenerated code (first 16 lines):")
    print("\n".join(log.generated_code[0].splitlines()[:16]))
    if worst > 1e-4:
        raise SystemExit(f"demo failed: ember differs from eager by {worst}")


def _cache_word(results: tuple[str, ...]) -> str:
    if results and all(r == "hit" for r in results):
        return "loaded from the disk cache"
    return "compiled, now in the disk cache"


if __name__ == "__main__":
    main()
