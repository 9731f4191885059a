"""Where a compile is, and a word on stderr when it takes long.

Each stage of a convert runs inside ``stage(counters, name)``, which times it
into the function's Counters and names it as the current stage; a compile
still running after ``SLOW_COMPILE_SECONDS`` says so once, naming the function
and that stage (on the ``ember.progress`` logger, at WARNING).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ember_runtime import Counters

from .logs import progress

SLOW_COMPILE_SECONDS = 2.0

_current = threading.local()  # .stages: the stages entered, innermost last


@contextmanager
def stage(counters: Counters, name: str) -> Iterator[None]:
    """Time the block into ``counters.compile_seconds[name]``; it is the
    current stage while it runs."""
    with current(name), counters.timed(name):
        yield


@contextmanager
def current(name: str) -> Iterator[None]:
    """Name the block as the current stage (for a block timed otherwise)."""
    stages = _stages()
    stages.append(name)
    try:
        yield
    finally:
        stages.pop()


@contextmanager
def watched(function: str) -> Iterator[None]:
    """Run one compile of ``function``; if it is still running after
    SLOW_COMPILE_SECONDS, say so once, with the stage it is in."""
    stages = _stages()
    start = time.perf_counter()

    def say() -> None:
        where = stages[-1] if stages else "capture"
        progress.warning(
            "ember: compiling %s is taking a while (%.1f s so far, now in %s)",
            function,
            time.perf_counter() - start,
            where,
        )

    timer = threading.Timer(SLOW_COMPILE_SECONDS, say)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _stages() -> list[str]:
    if not hasattr(_current, "stages"):
        _current.stages = []
    return _current.stages
