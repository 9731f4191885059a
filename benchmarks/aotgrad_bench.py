"""aotgrad: bytes saved for backward per training step, tracing time, step time.

For a 4-layer GELU MLP and a small transformer block, prints one Markdown row per
way of running a training step (forward + backward): eager autograd, aotgrad with
the default partition, aotgrad with the min-cut partition (both running the aten
graphs with torch, i.e. backend "aot_eager"), and torch.compile as the reference
(left out with --no-torch-compile; its saved bytes are not measured). Saved bytes
are the distinct storages autograd keeps for backward, model inputs and
parameters excluded, measured with saved_tensors_hooks. Times are medians over
--repeats runs; tracing (compile) time is reported apart from step time.

Usage: python benchmarks/aotgrad_bench.py [--repeats N] [--no-torch-compile]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from ember_aotgrad import aot_compile, default_partition, min_cut_partition


class GeluMLP(nn.Module):
    def __init__(self, dim=256, hidden=512, layers=4):
        super().__init__()
        sizes = [dim] + [hidden] * (layers - 1) + [dim]
        self.layers = nn.ModuleList(
            nn.Linear(a, b) for a, b in itertools.pairwise(sizes)
        )

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.gelu(x)
        return x


class Block(nn.Module):
    """Pre-norm causal attention and a GELU MLP."""

    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (
            a.view(b, t, self.heads, d // self.heads).transpose(1, 2) for a in (q, k, v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def functional_graph(model: nn.Module, num_inputs: int) -> torch.fx.GraphModule:
    """A graph over (inputs..., parameters...), as capture hands to a backend."""
    names = [n for n, _ in model.named_parameters()]

    def run(*args):
        params = dict(zip(names, args[num_inputs:]))
        return (torch.func.functional_call(model, params, args[:num_inputs]),)

    graph = torch.fx.Graph()
    args = [graph.placeholder(f"a{i}") for i in range(num_inputs + len(names))]
    graph.output(graph.call_function(run, tuple(args)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def saved_bytes(step, held: list[torch.Tensor]) -> int:
    held_ptrs = {t.untyped_storage().data_ptr() for t in held}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in held_ptrs:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = step()
    out.sum().backward()
    return sum(seen.values())


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(name, model, x, repeats, with_torch_compile):
    params = list(model.parameters())
    inputs = [x, *params]

    def training_step(forward):
        def step():
            for p in params:
                p.grad = None
            forward().sum().backward()

        return step

    rows = []
    eager_forward = lambda: model(x)  # noqa: E731
    eager_ms = median_time(training_step(eager_forward), repeats) * 1e3
    rows.append(("eager autograd", saved_bytes(eager_forward, inputs), None, eager_ms))

    for label, partitioner in (
        ("aotgrad default", default_partition),
        ("aotgrad min-cut", min_cut_partition),
    ):
        gm = functional_graph(model, 1)
        trace_s = median_time(
            lambda gm=gm, p=partitioner: aot_compile(
                gm, inputs, lambda g, e: g, partitioner=p
            ),
            3,
        )
        compiled = aot_compile(gm, inputs, lambda g, e: g, partitioner=partitioner)
        forward = lambda c=compiled: c(*inputs)[0]  # noqa: E731
        training_step(forward)()  # the backward graph is compiled on first use
        ms = median_time(training_step(forward), repeats) * 1e3
        rows.append((label, saved_bytes(forward, inputs), trace_s, ms))

    if with_torch_compile:
        compiled_model = torch.compile(model)
        start = time.perf_counter()
        training_step(lambda: compiled_model(x))()
        first_s = time.perf_counter() - start
        ms = median_time(training_step(lambda: compiled_model(x)), repeats) * 1e3
        # Not measured: under saved_tensors_hooks torch.compile may not run the
        # graphs it compiled, so the hook's count would not describe them.
        rows.append(("torch.compile (first step)", None, first_s, ms))

    eager_bytes = rows[0][1]
    print(f"\n### {name}\n")
    print("| run | saved KiB | vs eager | trace/compile s | step ms | eager/step |")
    print("|---|---|---|---|---|---|")
    for label, nbytes, trace_s, ms in rows:
        trace_cell = "-" if trace_s is None else f"{trace_s:.3f}"
        bytes_cells = (
            "n/a | n/a"
            if nbytes is None
            else f"{nbytes / 1024:.1f} | {nbytes / eager_bytes:.2f}"
        )
        print(
            f"| {label} | {bytes_cells} | {trace_cell} | {ms:.2f} | "
            f"{eager_ms / ms:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-torch-compile", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    with_tc = not args.no_torch_compile
    bench(
        "4-layer GELU MLP (64x256, hidden 512)",
        GeluMLP(),
        torch.randn(64, 256),
        args.repeats,
        with_tc,
    )
    bench(
        "transformer block (8x32x64, 4 heads)",
        Block(),
        torch.randn(8, 32, 64),
        args.repeats,
        with_tc,
    )


if __name__ == "__main__":
    main()
