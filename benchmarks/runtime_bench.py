"""Per-call overhead of ember_runtime: the Dispatcher plus a compiled guard check.

Two workloads: ``x + 1`` on a one-element tensor, and an nn.Module with 10
parameters and 2 inputs whose forward is one ``torch.cat`` (nothing to fuse). The
entry each dispatcher runs is the eager function itself, so a row's time minus
eager's is exactly what the runtime adds (for the module, eager is ``forward``
called directly, as the dispatcher calls it; torch.compile's overhead is measured
against the module call it wraps). Guards are built as the umbrella builds
them from capture's guards: a TensorCheck per tensor source, one reader over the
sources, and one generated expression for the other guards (type, hooks, global
state). torch.compile is timed on the same workload as the reference (skip it with
--no-torch-compile); its compile time is printed separately. Everything runs under
torch.no_grad(). Times are medians over --repeats runs of --calls calls.
"""

from __future__ import annotations

import argparse
import statistics
import time
import types
from collections.abc import Callable

import torch

from ember_capture import module_has_no_hooks
from ember_runtime import (
    Dispatcher,
    GuardedEntry,
    GuardSpec,
    TensorCheck,
    compile_guards,
    native_available,
)


def global_state() -> tuple:
    """capture's GLOBAL_STATE guard value."""
    return (
        torch.is_grad_enabled(),
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
    )


def build_spec(
    f_locals: dict, tensor_sources: list[str], read_sources: list[str], others: str
) -> GuardSpec:
    """The GuardSpec the umbrella would build: ``tensor_sources`` name the guarded
    tensors (for messages), ``read_sources`` are the expressions that read them,
    ``others`` is the generated expression for every non-tensor guard."""
    scope = {
        "___no_hooks": module_has_no_hooks,
        "___global_state": global_state,
        "___state": global_state(),
        "___type_self": type(f_locals.get("self")),
    }
    read = eval(f"lambda L: ({', '.join(read_sources)},)", scope)
    other = eval(f"lambda L: {others}", scope)
    checks = tuple(
        TensorCheck.of(name, value)
        for name, value in zip(tensor_sources, read(f_locals), strict=True)
    )
    return GuardSpec(checks, read, other)


def dispatched(
    fn: types.FunctionType, spec: GuardSpec | None, native: bool
) -> Callable:
    """A Dispatcher whose one entry runs ``fn`` itself behind ``spec``'s guards
    (no guards at all when ``spec`` is None: the dispatcher's own cost)."""

    def convert(args: tuple, kwargs: dict) -> GuardedEntry:
        if spec is None:
            return GuardedEntry(lambda L: True, lambda L: None, fn)
        guards = compile_guards(spec, native=native)
        return GuardedEntry(guards.check, guards.failure, fn)

    return Dispatcher(fn, convert)


def add_one(x):
    return x + 1


class TenParams(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for i in range(10):
            self.register_parameter(f"p{i}", torch.nn.Parameter(torch.randn(4)))

    def forward(self, x, y):
        p = (self.p0, self.p1, self.p2, self.p3, self.p4)
        q = (self.p5, self.p6, self.p7, self.p8, self.p9)
        return torch.cat((x, y, *p, *q))


def trivial_workload() -> dict:
    x = torch.randn(1)
    f_locals = {"x": x}
    spec = build_spec(f_locals, ["L['x']"], ["L['x']"], "___global_state() == ___state")
    return {
        "name": "x + 1, one-element tensor",
        "fn": add_one,
        "args": (x,),
        "eager": add_one,
        "user_args": (x,),
        "specs": {"": spec},
    }


def module_workload() -> dict:
    m = TenParams()
    x, y = torch.randn(4), torch.randn(4)
    f_locals = {"self": m, "x": x, "y": y}
    names = [f"L['self'].p{i}" for i in range(10)] + ["L['x']", "L['y']"]
    params = [f"L['self']._parameters['p{i}']" for i in range(10)]
    others = (
        "type(L['self']) is ___type_self and ___no_hooks(L['self']) "
        "and ___global_state() == ___state"
    )
    return {
        "name": "10-parameter module, 2 inputs",
        "fn": TenParams.forward,
        "args": (m, x, y),
        "eager": m,
        "user_args": (x, y),
        "specs": {
            " (attribute reads)": build_spec(f_locals, names, names, others),
            " (_parameters reads)": build_spec(
                f_locals, names, [*params, "L['x']", "L['y']"], others
            ),
        },
    }


def per_call_us(
    paths: dict[str, tuple[Callable, tuple]], calls: int, repeats: int
) -> dict[str, float]:
    """Median µs per call of each path; the paths take turns within each repeat,
    so a burst of load from elsewhere on the machine hits all of them alike."""
    times: dict[str, list[float]] = {label: [] for label in paths}
    for fn, args in paths.values():
        for _ in range(100):
            fn(*args)
    for _ in range(repeats):
        for label, (fn, args) in paths.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            times[label].append((time.perf_counter() - start) / calls)
    return {label: statistics.median(t) * 1e6 for label, t in times.items()}


def run(workload: dict, calls: int, repeats: int, torch_compile: bool) -> None:
    fn, args = workload["fn"], workload["args"]
    user, user_args = workload["eager"], workload["user_args"]
    # The dispatcher rows run fn(*args); torch.compile wraps what the user calls.
    paths = {"eager": (fn, args)}
    baselines = {"eager": "eager"}
    if user is not fn:
        paths["eager, module call"] = (user, user_args)
        baselines["eager, module call"] = "eager, module call"
    paths["dispatcher, no guards"] = (dispatched(fn, None, False), args)
    natives = [True, False] if native_available() else [False]
    for suffix, spec in workload["specs"].items():
        for native in natives:
            label = ("C++ guards" if native else "Python guards") + suffix
            paths[label] = (dispatched(fn, spec, native), args)
    compile_s = None
    if torch_compile:
        compiled = torch.compile(user)
        start = time.perf_counter()
        compiled(*user_args)
        compile_s = time.perf_counter() - start
        paths["torch.compile"] = (compiled, user_args)
        baselines["torch.compile"] = list(baselines)[-1]
    us = per_call_us(paths, calls, repeats)
    overhead = {label: us[label] - us[baselines.get(label, "eager")] for label in paths}
    tc = overhead.get("torch.compile")
    print(f"\n### {workload['name']}\n")
    print("| path | µs per call | overhead vs eager, µs | overhead / torch.compile's |")
    print("|---|---|---|---|")
    for label in paths:
        ratio = f"{overhead[label] / tc:.2f}" if tc else "-"
        print(f"| {label} | {us[label]:.2f} | {overhead[label]:.2f} | {ratio} |")
    if compile_s is not None:
        print(f"\ntorch.compile first call (compile time): {compile_s:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--no-torch-compile", action="store_true")
    args = parser.parse_args()
    print(f"C++ guard extension built: {native_available()}")
    with torch.no_grad():
        for workload in (trivial_workload(), module_workload()):
            run(workload, args.calls, args.repeats, not args.no_torch_compile)


if __name__ == "__main__":
    main()
