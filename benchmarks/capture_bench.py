"""Capture time: how long ember_capture takes to turn a model's forward into a graph.

Measures the median wall time of `ember_capture.capture(model.forward, x)` (bytecode
interpretation, meta-tensor shape propagation, guards and the transformed function)
for a 2-layer transformer and a 20-layer MLP built from nn.ModuleList. The first
capture in a process also pays torch's one-time lazy imports; it is reported apart.
Run: python benchmarks/capture_bench.py
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from ember_capture import capture


class TransformerLayer(torch.nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 4 * dim),
            torch.nn.GELU(),
            torch.nn.Linear(4 * dim, dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = d // self.heads
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, h).transpose(1, 2) for z in (q, k, v))
        attn = F.softmax(q @ k.transpose(-2, -1) / h**0.5, dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class Transformer(torch.nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(TransformerLayer() for _ in range(layers))

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
