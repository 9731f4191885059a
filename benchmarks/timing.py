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
