"""``generate()`` of Hugging Face families through a compiled forward, as the
transformers docs show it: ``model.forward = ember.compile(model.forward)``.
Each generative family (a causal LM, or an encoder-decoder) is built from a tiny
config (no downloads; a sliding window of 6 tokens where the config has one, so
12 new tokens fill it), and greedy-decodes 12 tokens after a prompt of 7, with
the default dynamic cache and with ``cache_implementation="static"`` where the
family supports it. Per family and cache it prints whether every run's tokens
equal eager's, the entries compiled, graph breaks, whether the recompile limit
sent calls to eager, the first run's seconds (the compiles), the second run's
(what it still compiles: a symbolic graph compiles a new length at its second
call, so the lengths the first run called once), and the steady run against
eager's. The last line counts the runs that matched with no break
and no eager fallback.

Run: python benchmarks/hf_generate.py [--families llama,mistral] [--caches dynamic]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import traceback
import warnings

import torch
import transformers
from hf_sweep import TEXT, VOCAB, config

import ember

PROMPT, NEW = 7, 12
CACHES = ("dynamic", "static")


def build(family: str) -> torch.nn.Module | None:
    """The family's generative model in eval mode, or None (encoder-only)."""
    cfg = config(family)
    if getattr(cfg, "sliding_window", None) is not None:
        cfg.sliding_window = 6
    if hasattr(cfg, "use_sliding_window"):
        cfg.use_sliding_window = True
    torch.manual_seed(0)
    for auto in (
        transformers.AutoModelForCausalLM,
        transformers.AutoModelForSeq2SeqLM,
    ):
        try:
            model = auto.from_config(cfg).eval()
        except ValueError:
            continue
        start = model.generation_config
        if cfg.is_encoder_decoder and start.decoder_start_token_id is None:
            start.decoder_start_token_id = cfg.pad_token_id or 0  # (T5's own rule)
        return model
    return None


def timed(fn, repeats: int = 1) -> tuple[object, float]:
    """The last result and the median seconds of ``repeats`` calls."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - start)
    return out, statistics.median(seconds)


def generate_one(model: torch.nn.Module, cache: str) -> tuple[str, bool]:
    ids = torch.randint(3, VOCAB, (2, PROMPT))
    kwargs = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    if cache != "dynamic":
        kwargs["cache_implementation"] = cache
    run = lambda: model.generate(ids, **kwargs)  # noqa: E731
    eager_forward = model.forward
    with torch.no_grad():
        want, eager = timed(run, 3)
        compiled = ember.compile(eager_forward)
        model.forward = compiled
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                first, first_s = timed(run)
                second, second_s = timed(run)
                steady, steady_s = timed(run, 3)
        finally:
            model.forward = eager_forward
    matched = all(torch.equal(out, want) for out in (first, second, steady))
    limit = any("recompile limit" in str(w.message) for w in caught)
    counters = compiled.dispatcher.counters
    return (
        f"match={'yes' if matched else 'NO'} entries={counters.compiles} "
        f"breaks={len(compiled.breaks)} eager_runs={'YES' if limit else 'no'} "
        f"first={first_s:.2f}s second={second_s:.3f}s "
        f"steady={steady_s * 1e3:.1f}ms eager={eager * 1e3:.1f}ms "
        f"eager/ember={eager / steady_s:.2f}"
    ), matched and not limit and not compiled.breaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(TEXT))
    parser.add_argument("--caches", default=",".join(CACHES))
    args = parser.parse_args()
    os.environ.setdefault("EMBER_CACHE_DIR", tempfile.mkdtemp(prefix="ember-gen-"))
    good = total = 0
    for family in args.families.split(","):
        model = build(family)
        if model is None:
            continue  # encoder-only: nothing to generate
        for cache in args.caches.split(","):
            try:
                line, ok = generate_one(model, cache)
            except Exception as error:
                if cache != "dynamic" and "static" in str(error).lower():
                    print(f"{family:14} {cache:8} not supported by the family")
                    continue
                traceback.print_exc()
                line, ok = f"error: {type(error).__name__}: {str(error)[:200]}", False
            total += 1
            good += ok
            print(f"{family:14} {cache:8} {line}", flush=True)
    print(f"{good} of {total} runs match eager with no break and no eager fallback")


if __name__ == "__main__":
    main()
