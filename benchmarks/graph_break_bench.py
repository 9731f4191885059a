"""What a graph break costs: per-call time of a small function with and without
one break, and how many graphs a model with three prints produces.

Run: python benchmarks/graph_break_bench.py
"""

from __future__ import annotations

import statistics
import time

import torch

import ember


def no_break(x):
    y = x * 2 + 1
    z = y.relu()
    return z - 1


def one_break(x):
    y = x * 2 + 1
    print_nothing()  # an unknown call: the graph breaks here
    z = y.relu()
    return z - 1


def print_nothing() -> None:
    """A callable capture does not enter: builtins.print with no output."""
    print(end="")


class ThreePrints(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)

    def forward(self, x):
        print(end="")
        x = self.a(x).relu()
        print(end="")
        x = self.b(x).relu()
        print(end="")
        return x.sum(-1)


def per_call_us(fn, x, repeats: int = 30) -> float:
    for _ in range(20):
        fn(x)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(200):
            fn(x)
        samples.append((time.perf_counter() - start) / 200)
    return statistics.median(samples) * 1e6


def main() -> None:
    x = torch.randn(8)
    with torch.no_grad():
        eager = per_call_us(one_break, x)
        plain = per_call_us(ember.compile(no_break), x)
        broken = per_call_us(ember.compile(one_break), x)
        report = ember.explain(ThreePrints())(torch.randn(4, 16))
    print("| function (8 floats) | µs per call |")
    print("|---|---|")
    print(f"| eager, with the call | {eager:.1f} |")
    print(f"| ember, no break | {plain:.1f} |")
    print(f"| ember, one break | {broken:.1f} |")
    print(f"| added by the break | {broken - plain:.1f} |")
    print()
    print(
        f"model with three prints: {report.graph_count} graphs, "
        f"{report.graph_break_count} breaks"
    )


if __name__ == "__main__":
    main()
