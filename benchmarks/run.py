"""ember's benchmark suite: steady-state speed and compile time, as ratios.

Each workload is timed in one process: eager, ember, and torch.compile as the
reference (skip it with --no-torch-compile). Steady-state times are medians of
repeated calls after warm-up; compile time is the first call's time, measured
separately. Inference workloads run under no_grad; the training step runs the
forward and the backward (gradients set to None between steps, as an optimizer's
zero_grad does). Run with `nox -s bench` (or `python benchmarks/run.py`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from timing import first_call_seconds, steady_ms

import ember
from ember.demo import Block


def thin_path() -> tuple[Callable, tuple]:
    def fn(x, w, b):
        return torch.relu(x @ w + b).sum(-1)

    return fn, (torch.randn(256, 512), torch.randn(512, 512), torch.randn(512))


def transformer_block() -> tuple[Callable, tuple]:
    return Block().eval(), (torch.randn(8, 32, 64),)


WORKLOADS = {
    "thin path (256x512 @ 512x512)": thin_path,
    "demo block": transformer_block,
}


class TrainingStep:
    """One forward and backward of ``model`` (compiled or not) on ``x``."""

    def __init__(self, model: torch.nn.Module, parameters: list) -> None:
        self.model, self.parameters = model, parameters

    def __call__(self, x: torch.Tensor) -> None:
        for p in self.parameters:
            p.grad = None
        self.model(x).sum().backward()


def training_row(repeats: int, reference: bool) -> list:
    """The demo block's training step: eager, ember and torch.compile."""
    block = Block()
    parameters = list(block.parameters())
    inputs = (torch.randn(8, 32, 64),)
    eager = steady_ms(TrainingStep(block, parameters), inputs, repeats)
    step = TrainingStep(ember.compile(block), parameters)
    ember_compile = first_call_seconds(step, inputs)
    row = ["demo block training step", eager, steady_ms(step, inputs, repeats)]
    row.append(ember_compile)
    if reference:
        compiled = TrainingStep(torch.compile(block), parameters)
        row.append(first_call_seconds(compiled, inputs))
        row.append(steady_ms(compiled, inputs, repeats))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--repeats", type=int, default=100)
    args = parser.parse_args()

    torch.manual_seed(0)
    rows = []
    with torch.no_grad():
        for name, make in WORKLOADS.items():
            fn, inputs = make()
            eager = steady_ms(fn, inputs, args.repeats)
            compiled = ember.compile(fn)
            ember_compile = first_call_seconds(compiled, inputs)
            ember_ms = steady_ms(compiled, inputs, args.repeats)
            row = [name, eager, ember_ms, ember_compile]
            if not args.no_torch_compile:
                reference = torch.compile(fn)
                row.append(first_call_seconds(reference, inputs))
                row.append(steady_ms(reference, inputs, args.repeats))
            rows.append(row)
    rows.append(training_row(args.repeats, not args.no_torch_compile))

    header = "| workload | eager ms | ember ms | eager/ember | ember compile s |"
    if not args.no_torch_compile:
        header += " torch.compile compile s | torch.compile ms | tc/ember |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for name, eager, ember_ms, ember_compile, *ref in rows:
        line = (
            f"| {name} | {eager:.3f} | {ember_ms:.3f} | {eager / ember_ms:.2f} "
            f"| {ember_compile:.2f} |"
        )
        if ref:
            tc_compile, tc_ms = ref
            line += f" {tc_compile:.2f} | {tc_ms:.3f} | {tc_ms / ember_ms:.2f} |"
        print(line)


if __name__ == "__main__":
    main()
