"""ember's benchmark suite: steady-state speed and compile time, as ratios.

Each workload is timed in one process: eager, ember, and torch.compile as the
reference (skip it with --no-torch-compile). Steady-state times are medians of
repeated calls after warm-up; compile time is the first call's time, measured
separately. Inference workloads run under no_grad; the training step runs the
forward and the backward (gradients set to None between steps, as an optimizer's
zero_grad does). Run with `nox -s bench` (or `python benchmarks/run.py`);
``--profile`` also prints where ember's time goes in each workload, per kernel
and library call (``ember.profile``); ``--only TEXT`` runs the workloads whose
name contains TEXT. The last column compares ember's result (outputs, or the
training step's gradients) with eager's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from timing import first_call_seconds, steady_ms
from workloads import WORKLOADS, Workload, demo_block

import ember
from ember_codegen import ProfileReport


class TrainingStep:
    """One forward and backward of ``model`` (compiled or not) on ``x``."""

    def __init__(self, model: torch.nn.Module, parameters: list) -> None:
        self.model, self.parameters = model, parameters

    def __call__(self, *inputs: torch.Tensor) -> list:
        for p in self.parameters:
            p.grad = None
        self.model(*inputs).sum().backward()
        return [p.grad for p in self.parameters]


def _demo_block_training() -> tuple[Callable, tuple]:
    block, inputs = demo_block()
    return block.train(), inputs


ALL = {**WORKLOADS, "demo block training": Workload(_demo_block_training, True)}


def _flat(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for item in value for t in _flat(item)]


def _max_error(got, want) -> float:
    """Largest difference relative to the eager value's magnitude."""
    return max(
        ((a - b).abs().max() / b.abs().max().clamp_min(1e-6)).item()
        for a, b in zip(_flat(got), _flat(want), strict=True)
    )


def _runner(workload: Workload, fn: Callable, wrap: Callable) -> Callable:
    if workload.training:
        return TrainingStep(wrap(fn), list(fn.parameters()))
    return wrap(fn)


def measure(workload: Workload, repeats: int, reference: bool, profile: bool):
    """A row: eager ms, ember ms, ember compile s, [torch.compile s and ms], the
    largest relative error of ember against eager, and ember's profile."""
    torch.manual_seed(0)
    fn, inputs = workload.make()
    eager = _runner(workload, fn, lambda f: f)
    compiled = _runner(workload, fn, ember.compile)
    with torch.set_grad_enabled(workload.training):
        want = eager(*inputs)
        want = [t.clone() for t in _flat(want)]
        eager_ms = steady_ms(eager, inputs, repeats)
        ember_compile = first_call_seconds(compiled, inputs)
        error = _max_error(compiled(*inputs), want)
        ember_ms = steady_ms(compiled, inputs, repeats)
        row = [eager_ms, ember_ms, ember_compile]
        if reference:
            tc = _runner(workload, fn, torch.compile)
            row.append(first_call_seconds(tc, inputs))
            row.append(steady_ms(tc, inputs, repeats))
        report = _profile(compiled, inputs, repeats) if profile else None
    return row, error, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--only", help="run the workloads whose name contains this")
    args = parser.parse_args()
    reference = not args.no_torch_compile

    header = "| workload | eager ms | ember ms | eager/ember | ember compile s |"
    if reference:
        header += " torch.compile compile s | torch.compile ms | eager/tc |"
    header += " max rel. error |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    profiles = []
    for name, workload in ALL.items():
        if args.only and args.only not in name:
            continue
        row, error, report = measure(workload, args.repeats, reference, args.profile)
        eager, ember_ms, ember_compile, *ref = row
        line = (
            f"| {name} | {eager:.3f} | {ember_ms:.3f} | {eager / ember_ms:.2f} "
            f"| {ember_compile:.2f} |"
        )
        if ref:
            tc_compile, tc_ms = ref
            line += f" {tc_compile:.2f} | {tc_ms:.3f} | {eager / tc_ms:.2f} |"
        print(line + f" {error:.1e} |", flush=True)
        if report is not None:
            profiles.append((name, report))
    for name, report in profiles:
        print(f"\n## {name}\n{report}")


def _profile(fn: Callable, inputs: tuple, repeats: int) -> ProfileReport:
    with ember.profile() as report:
        for _ in range(repeats):
            fn(*inputs)
    return report


if __name__ == "__main__":
    main()
