"""Capture time: how long ember_capture takes to turn a model's forward into a graph.

Measures the median wall time of `ember_capture.capture(model.forward, x)` (bytecode
interpretation, meta-tensor shape propagation, guards and the transformed function)
for a 2-layer transformer (the demo's block, twice) and a 20-layer MLP built from
nn.ModuleList. The first
capture in a process also pays torch's one-time lazy imports; it is reported apart.
Run: python benchmarks/capture_bench.py
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from ember.demo import Block
from ember_capture import capture


class Transformer(torch.nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Block() for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class DeepMLP(torch.nn.Module):
    def __init__(self, depth: int = 20, width: int = 64) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(width, width) for _ in range(depth)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.relu(layer(x))
        return x


def time_capture(model: torch.nn.Module, x: torch.Tensor, repeats: int = 20):
    start = time.perf_counter()
    result = capture(model.forward, x)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        capture(model.forward, x)
        times.append(time.perf_counter() - start)
    nodes = len(result.graphs[0].gm.graph.nodes)
    return first, statistics.median(times), nodes, len(result.guards)


def main() -> None:
    cases = {
        "2-layer transformer block (dim 64)": (Transformer(2), torch.randn(4, 16, 64)),
        "20-layer MLP (ModuleList, width 64)": (DeepMLP(), torch.randn(8, 64)),
    }
    print("| model | first capture in process ms | capture ms | fx nodes | guards |")
    print("|---|---|---|---|---|")
    with torch.no_grad():
        for name, (model, x) in cases.items():
            first, median, nodes, guards = time_capture(model, x)
            row = [name, f"{first * 1e3:.1f}", f"{median * 1e3:.1f}", nodes, guards]
            print("| " + " | ".join(map(str, row)) + " |")


if __name__ == "__main__":
    main()
