"""ember's benchmark suite: steady-state speed and compile time, as ratios.

Each workload is timed in one process: eager, ember, and torch.compile as the
reference (skip it with --no-torch-compile). Steady-state times are medians of
repeated calls after warm-up, the three variants taking turns in rounds
(``timing.interleaved_ms``). Compile time is the first call's time, twice: cold,
in this process with empty caches (ember's and Inductor's folders are fresh
temporary ones), and warm, in a new process that finds the caches this one
filled, counting ``import ember`` for ember (torch.compile imports its compiler
inside its first call), with Python's bytecode caches written as an installed
package has them (a priming process writes them when PYTHONDONTWRITEBYTECODE
is set, as it is on some machines). Inference workloads run under no_grad; the
training step runs the forward and the backward (gradients set to None between
steps, as an optimizer's zero_grad does). Run with `nox -s bench` (or `python
benchmarks/run.py`); ``--profile`` also prints where ember's time goes in each
workload, per kernel and library call (``ember.profile``); ``--only TEXT`` runs
the workloads whose name contains TEXT. The "tc+ember" columns are
``torch.compile(fn, backend="ember")``: torch's capture with ember's aotgrad and
codegen, to set beside Inductor's on the same captured graphs. The last column
is the largest difference of ember's results (outputs, or the training step's
gradients; both ember columns) from eager's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

import torch
from timing import first_call_seconds, interleaved_ms
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
    """A row: steady ms per variant, cold compile s per compiler, the largest
    relative error of ember against eager, and ember's profile."""
    torch.manual_seed(0)
    fn, inputs = workload.make()
    eager = _runner(workload, fn, lambda f: f)
    compiled = _runner(workload, fn, ember.compile)
    with torch.set_grad_enabled(workload.training):
        want = eager(*inputs)
        want = [t.clone() for t in _flat(want)]
        cold = {"ember": first_call_seconds(compiled, inputs)}
        error = _max_error(compiled(*inputs), want)
        calls = {"eager": (eager, inputs), "ember": (compiled, inputs)}
        if reference:
            tc = _runner(workload, fn, torch.compile)
            cold["torch.compile"] = first_call_seconds(tc, inputs)
            calls["torch.compile"] = (tc, inputs)
            # torch's capture with ember's aotgrad and codegen: against the
            # torch.compile column, ember's code generation against Inductor's
            # on the same captured graphs.
            # Its own cache folder, so its cold compile builds its own kernels.
            options = {"cache_dir": os.environ["EMBER_CACHE_DIR"] + "-tc"}
            tc_ember = _runner(
                workload,
                fn,
                lambda f: torch.compile(f, backend="ember", options=options),
            )
            cold["tc+ember"] = first_call_seconds(tc_ember, inputs)
            error = max(error, _max_error(tc_ember(*inputs), want))
            calls["tc+ember"] = (tc_ember, inputs)
        ms = interleaved_ms(calls, repeats)
        report = _profile(compiled, inputs, repeats) if profile else None
    return ms, cold, error, report


# A new process's first call, on the caches the benchmark process filled: the
# time from before ``import ember`` (or torch.compile's first call) to the end
# of the first call. torch is imported before the clock starts, for both.
_WARM_START = """
import sys, time
import torch
torch.set_num_threads({threads})
sys.path.insert(0, {folder!r})
start = time.perf_counter()
if {compiler!r} == "ember":
    import ember
    wrap = ember.compile
else:
    wrap = torch.compile
import run
workload = run.ALL[{name!r}]
torch.manual_seed(0)
fn, inputs = workload.make()
compiled = run._runner(workload, fn, wrap)
with torch.set_grad_enabled(workload.training):
    start_call = time.perf_counter()
    compiled(*inputs)
print(time.perf_counter() - start, time.perf_counter() - start_call)
"""


# Writes the bytecode caches of everything a warm start imports, the modules
# ember imports only when it compiles among them.
_PRIME = """
import sys, torch
sys.path.insert(0, {folder!r})
import ember, run
ember.compile(lambda x: torch.relu(x) + 1)(torch.ones(2))
"""


def _new_process(code: str) -> str:
    """stdout of ``code`` run by a new Python that reads and writes bytecode
    caches: pip writes them when it installs a package (torch's are there), so a
    user's warm start does not compile ember's sources from text."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return out.stdout


def warm_start_seconds(name: str, compiler: str) -> float:
    """Seconds of a new process's warm start (see ``_WARM_START``)."""
    code = _WARM_START.format(
        threads=torch.get_num_threads(),
        folder=os.path.dirname(os.path.abspath(__file__)),
        compiler=compiler,
        name=name,
    )
    return float(_new_process(code).split()[-2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--only", help="run the workloads whose name contains this")
    args = parser.parse_args()
    reference = not args.no_torch_compile
    compilers = ["ember", "torch.compile"] if reference else ["ember"]

    header = "| workload | eager ms | ember ms | eager/ember |"
    if reference:
        header += " torch.compile ms | eager/tc | tc+ember ms | eager/tc+ember |"
    header += "".join(f" {c} cold s |" for c in compilers)
    header += " tc+ember cold s |" if reference else ""
    header += "".join(f" {c} warm s |" for c in compilers)
    header += " max rel. error |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    profiles = []
    with tempfile.TemporaryDirectory() as caches:
        os.environ["EMBER_CACHE_DIR"] = os.path.join(caches, "ember")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(caches, "inductor")
        _new_process(_PRIME.format(folder=os.path.dirname(os.path.abspath(__file__))))
        for name, workload in ALL.items():
            if args.only and args.only not in name:
                continue
            ms, cold, error, report = measure(
                workload, args.repeats, reference, args.profile
            )
            eager, mine = ms["eager"], ms["ember"]
            line = f"| {name} | {eager:.3f} | {mine:.3f} | {eager / mine:.2f} |"
            if reference:
                for variant in ("torch.compile", "tc+ember"):
                    line += f" {ms[variant]:.3f} | {eager / ms[variant]:.2f} |"
            line += "".join(f" {cold[c]:.2f} |" for c in compilers)
            line += f" {cold['tc+ember']:.2f} |" if reference else ""
            line += "".join(f" {warm_start_seconds(name, c):.3f} |" for c in compilers)
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
