"""The built-in demo: ``python -m ember.demo``.

Compiles a small transformer-style block with ember, checks it against eager on
fresh inputs, and prints what was captured, the generated code, and timings.
"""

from __future__ import annotations

import statistics
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


def main() -> None:
    torch.manual_seed(0)
    model = Block().eval()
    compiled = ember.compile(model)
    x = torch.randn(8, 32, 64)

    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(x)
        first_call = time.perf_counter() - start
        worst = (out - model(x)).abs().max().item()
        for _ in range(3):  # fresh data, same compiled entry
            y = torch.randn(8, 32, 64)
            worst = max(worst, (compiled(y) - model(y)).abs().max().item())
        eager_ms = _median_ms(model, x)
        ember_ms = _median_ms(compiled, x)
        report = ember.explain(model)(x)

    print("ember demo: a transformer block, batch 8 x 32 tokens x 64 features\n")
    print(report)
    counters = compiled._compiled_forward.dispatcher.counters
    print(f"\ncompiles: {counters.compiles}, guard hits: {counters.hits}")
    print(f"largest difference from eager over 4 inputs: {worst:.2e}")
    print(f"first call (capture + aotgrad + codegen + run): {first_call * 1e3:.1f} ms")
    print(
        f"steady state: ember {ember_ms:.3f} ms, eager {eager_ms:.3f} ms "
        f"(ember/eager = {ember_ms / eager_ms:.2f})"
    )
    print("\ngenerated code (first 16 lines):")
    print("\n".join(report.generated_code[0].splitlines()[:16]))
    if worst > 1e-4:
        raise SystemExit(f"demo failed: ember differs from eager by {worst}")


if __name__ == "__main__":
    main()
