"""Dynamic shapes: one model called with 20 sequence lengths (docs/dynamic.md).

For the demo block and a tiny Llama (transformers, built from a config), each
variant sees the 20 lengths in turn, in one process: ember with fixed sizes
(``dynamic=False``, one compile per length), ember's default (automatic
dynamic), torch.compile(dynamic=None) as the reference, and eager. Printed per
variant: compiles, total compile seconds (two passes over the lengths, the
first two calls at each: ember compiles a new size of a symbolic graph at its
second call; less eager's time for them), and steady-state µs per call (the
median over rounds of the mean over the 20 lengths). Caches start empty
(fresh temporary folders).
Run ``python benchmarks/dynamic_bench.py [--repeats N] [--no-torch-compile]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable

import torch
from workloads import demo_block

import ember

LENGTHS = [5 + 3 * k for k in range(20)]  # 5 .. 62


def _llama() -> tuple[torch.nn.Module, Callable[[int], tuple]]:
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=256,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    return model, lambda n: (torch.randint(0, 256, (2, n)),)


def _demo() -> tuple[torch.nn.Module, Callable[[int], tuple]]:
    torch.manual_seed(0)
    block, (x,) = demo_block()
    return block, lambda n: (torch.randn(x.shape[0], n, x.shape[2]),)


MODELS = {"demo block": _demo, "tiny llama": _llama}


def _call(fn: Callable, args: tuple) -> object:
    with torch.no_grad():
        return fn(*args)


def _run(fn: Callable, inputs: dict[int, tuple], eager_s: dict[int, float]):
    """Compile seconds: two passes over the lengths, less eager's time."""
    total = 0.0
    for _ in range(2):
        for n, args in inputs.items():
            start = time.perf_counter()
            _call(fn, args)
            total += max(time.perf_counter() - start - eager_s[n], 0.0)
    return total


def _steady_us(fns: dict[str, Callable], inputs: dict[int, tuple], repeats: int):
    """Per variant, the median over rounds of the mean µs per call over the
    lengths; variants take turns within each round."""
    rounds: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(5):
        for name, fn in fns.items():
            per_length = []
            for args in inputs.values():
                for _ in range(2):
                    _call(fn, args)
                start = time.perf_counter()
                for _ in range(repeats):
                    _call(fn, args)
                per_length.append((time.perf_counter() - start) / repeats)
            rounds[name].append(statistics.mean(per_length) * 1e6)
    return {name: statistics.median(r) for name, r in rounds.items()}


def _compiles(fn) -> int:
    dispatcher = getattr(fn, "_compiled_forward", fn).dispatcher
    return dispatcher.counters.compiles


def bench(name: str, repeats: int, with_torch_compile: bool) -> None:
    model, make = MODELS[name]()
    inputs = {n: make(n) for n in LENGTHS}
    eager_s = {}
    for n, args in inputs.items():
        _call(model, args)
        start = time.perf_counter()
        _call(model, args)
        eager_s[n] = time.perf_counter() - start
    cache = tempfile.mkdtemp(prefix="ember-dyn-")
    variants: dict[str, Callable] = {
        "ember static": ember.compile(
            model,
            dynamic=False,
            options={"recompile_limit": 64, "cache_dir": f"{cache}/static"},
        ),
        "ember dynamic": ember.compile(model, options={"cache_dir": f"{cache}/dyn"}),
    }
    if with_torch_compile:
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        torch._dynamo.config.cache_size_limit = 64
        variants["torch.compile"] = torch.compile(model)
    rows = {}
    for label, fn in variants.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seconds = _run(fn, inputs, eager_s)
        if label.startswith("ember"):
            compiles = _compiles(fn)
        else:
            compiles = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        rows[label] = (compiles, seconds)
    for fn in variants.values():  # outputs equal eager at every length
        for args in inputs.values():
            torch.testing.assert_close(
                _logits(_call(fn, args)),
                _logits(_call(model, args)),
                rtol=1e-3,
                atol=1e-4,
            )
    steady = _steady_us({"eager": model, **variants}, inputs, repeats)
    print(f"\n{name}: {len(LENGTHS)} sequence lengths {LENGTHS[0]}..{LENGTHS[-1]}")
    print(f"{'variant':<16}{'compiles':>10}{'compile s':>12}{'µs/call':>10}")
    print(f"{'eager':<16}{'-':>10}{'-':>12}{steady['eager']:>10.0f}")
    for label, (compiles, seconds) in rows.items():
        print(f"{label:<16}{compiles:>10}{seconds:>12.2f}{steady[label]:>10.0f}")


def _logits(out: object) -> torch.Tensor:
    return getattr(out, "logits", out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp())
    torch.set_num_threads(min(torch.get_num_threads(), os.cpu_count() or 1))
    for name in MODELS:
        if args.only in name:
            bench(name, args.repeats, not args.no_torch_compile)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
