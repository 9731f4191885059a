"""Timing helpers shared by the benchmark scripts (run them from the repo root:
``python benchmarks/<name>.py`` puts this folder on sys.path)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def first_call_seconds(fn: Callable, args: tuple) -> float:
    """Wall time of one call: for a compiled function, the compile included."""
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def steady_ms(fn: Callable, args: tuple, repeats: int) -> float:
    """Median milliseconds per call after three warm-up calls."""
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


# Each variant is timed in this many rounds, the variants taking turns, and its
# median round reported: the shared machine's slow spells then hit all of them.
ROUNDS = 5


def interleaved_ms(calls: dict[str, tuple[Callable, tuple]], repeats: int) -> dict:
    """Per variant (name -> (fn, args)), the median over ROUNDS rounds of its
    steady-state milliseconds, the variants timed in turn within each round."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(ROUNDS):
        for name, (fn, args) in calls.items():
            times[name].append(steady_ms(fn, args, repeats))
    return {name: statistics.median(t) for name, t in times.items()}
