"""Issue 14's measurement: nine Hugging Face families (integration_tests' tiny configs)
through ember and torch.compile, in eval and in one training step: graphs and breaks,
agreement with eager, ember's cold compile time, and steady-state speed-ups over eager.

Run: python benchmarks/hf_capture.py [--families gpt2,bert] [--modes eval,train]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from timing import steady_ms

import ember

# The families, their configs and input builders are the integration test's own.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration_tests"))
from test_huggingface import ATOL, FAMILIES, RTOL, SIZES, Family

BATCH, SEQ = SIZES[0]
MODES = ("eval", "train")


@dataclass
class Row:
    family: str
    mode: str
    ember_graphs: int | str = "-"
    ember_breaks: int | str = "-"
    tc_graphs: int | str = "-"
    tc_breaks: int | str = "-"
    matches: str = "-"
    cold_s: float | None = None
    eager_ms: float | None = None
    ember_speedup: float | None = None
    tc_speedup: float | None = None


@contextmanager
def fresh_cache() -> Iterator[None]:
    """EMBER_CACHE_DIR set to an empty temporary folder, so compiling is truly cold."""
    old = os.environ.get("EMBER_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="ember-hf-") as folder:
        os.environ["EMBER_CACHE_DIR"] = folder
        try:
            yield
        finally:
            if old is None:
                del os.environ["EMBER_CACHE_DIR"]
            else:
                os.environ["EMBER_CACHE_DIR"] = old


def call(model: torch.nn.Module, inputs: dict, mode: str) -> torch.Tensor:
    """The timed call: eval logits under no_grad, or one training step (forward,
    then loss.backward() with gradients set to None first, as zero_grad does)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ember's "runs eagerly" notes
        if mode == "eval":
            with torch.no_grad():
                return model(**inputs).logits
        model.zero_grad(set_to_none=True)
        loss = model(**inputs).loss
        loss.backward()
        return loss.detach()


def results(
    model: torch.nn.Module, params: torch.nn.Module, inputs: dict, mode: str
) -> dict[str, torch.Tensor]:
    """One call's logits, or its loss and every gradient of ``params``."""
    out = call(model, inputs, mode)
    if mode == "eval":
        return {"logits": out}
    grads = {
        k: p.grad.clone() for k, p in params.named_parameters() if p.grad is not None
    }
    return {"loss": out, **grads}


def agreement(actual: dict, expected: dict) -> str:
    if actual.keys() != expected.keys():
        return "no: different gradients"
    for key, want in expected.items():
        if not torch.allclose(actual[key], want, rtol=RTOL, atol=ATOL):
            diff = (actual[key] - want).abs().max().item()
            return f"no: {key} (max diff {diff:.1e})"
    return "yes"


def interleaved_ms(calls: dict[str, Callable[[], object]], repeats: int) -> dict:
    """Median milliseconds per call of each of ``calls``, timed in turn within each
    repeat, so that a change in the machine's load reaches them all alike."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def measure(family: Family, mode: str, repeats: int, reference: bool) -> Row:
    row = Row(family.name, mode)
    torch.manual_seed(0)
    model = family.build().train(mode == "train")
    inputs = family.inputs(BATCH, SEQ)
    if mode == "train":
        inputs["labels"] = family.labels(BATCH, SEQ)
    calls = {"eager": functools.partial(call, model, inputs, mode)}

    eager_ms = steady_ms(calls["eager"], (), 5)
    expected = results(model, model, inputs, mode)
    try:
        compiled = ember.compile(model)
        start = time.perf_counter()
        actual = results(compiled, model, inputs, mode)
        row.cold_s = time.perf_counter() - start - eager_ms / 1e3
        row.matches = agreement(actual, expected)
        forward = compiled._compiled_forward  # counted as the test counts
        row.ember_graphs = len(forward.log.graphs)
        row.ember_breaks = len(forward.breaks)
        calls["ember"] = functools.partial(call, compiled, inputs, mode)
    except Exception as error:
        row.matches = f"error: {type(error).__name__}"
        traceback.print_exc()
    if reference:
        try:
            grad = torch.no_grad() if mode == "eval" else torch.enable_grad()
            with grad, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                explained = torch._dynamo.explain(model)(**inputs)
            row.tc_graphs = explained.graph_count
            row.tc_breaks = explained.graph_break_count
            torch._dynamo.reset()
            calls["torch.compile"] = functools.partial(
                call, torch.compile(model), inputs, mode
            )
            calls["torch.compile"]()  # compiles
        except Exception as error:
            row.tc_graphs = f"error: {type(error).__name__}"
            calls.pop("torch.compile", None)
            traceback.print_exc()

    for fn in calls.values():  # warm-up
        for _ in range(3):
            fn()
    ms = interleaved_ms(calls, repeats)
    row.eager_ms = ms["eager"]
    if "ember" in calls:
        row.ember_speedup = ms["eager"] / ms["ember"]
    if "torch.compile" in calls:
        row.tc_speedup = ms["eager"] / ms["torch.compile"]
    torch._dynamo.reset()
    return row


def number(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def table(rows: list[Row]) -> str:
    header = (
        "| family | mode | ember graphs | ember breaks | torch.compile graphs "
        "| torch.compile breaks | ember matches eager | ember cold compile s "
        "| eager ms | ember speed-up | torch.compile speed-up |"
    )
    lines = [header, "|---" * (header.count("|") - 1) + "|"]
    for r in rows:
        cells = [
            r.family,
            r.mode,
            r.ember_graphs,
            r.ember_breaks,
            r.tc_graphs,
            r.tc_breaks,
            r.matches,
            number(r.cold_s),
            number(r.eager_ms),
            number(r.ember_speedup, "x"),
            number(r.tc_speedup, "x"),
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads for torch and ember's kernels (default 1: models this small "
        "gain little from more, and a shared machine makes their timings noisy)",
    )
    args = parser.parse_args()
    names, modes = args.families.split(","), args.modes.split(",")
    unknown = [n for n in names if n not in FAMILIES] + [
        m for m in modes if m not in MODES
    ]
    if unknown:
        parser.error(f"unknown family or mode: {', '.join(unknown)}")

    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # an OpenMP loaded later
    torch.set_num_threads(args.threads)  # torch's, which ember's kernels share
    print(
        f"batch {BATCH}, sequence {SEQ}, {args.threads} thread(s), "
        f"{args.repeats} repeats; speed-up: eager ms / compiled ms"
    )
    rows = []
    for name in names:
        for mode in modes:
            start = time.perf_counter()
            with fresh_cache():
                family, reference = FAMILIES[name], not args.no_torch_compile
                rows.append(measure(family, mode, args.repeats, reference))
            print(f"{name} {mode}: {time.perf_counter() - start:.0f} s", flush=True)
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
