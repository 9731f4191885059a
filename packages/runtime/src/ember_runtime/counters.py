"""Counters: what the dispatchers did, per function and summed for ``ember.stats()``.

The dispatcher counts calls, hits, misses, compiles and eager calls and times each
convert; the umbrella adds per-stage compile seconds and disk-cache hits.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Counters:
    """Counts for one dispatcher (or, from ``total``, for many).

    Increments on the hot path take no lock, so two threads hitting at once may
    rarely lose a count of ``calls`` or ``hits``; compiles are counted under the
    dispatcher's lock and are exact.
    """

    calls: int = 0
    hits: int = 0  # calls that ran an existing entry
    misses: int = 0  # calls that matched no entry
    compiles: int = 0  # converts that returned an entry
    eager_calls: int = 0  # misses run as the plain function (limit hit, or no capture)
    disk_hits: int = 0  # compiled graphs loaded from the artifact store
    disk_misses: int = 0  # artifact store lookups that found nothing usable
    # seconds per compile stage; "convert" (whole converts) is filled by the
    # dispatcher, the stages inside it by whoever runs them (see ``timed``)
    compile_seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add the time spent in the ``with`` block to ``compile_seconds[stage]``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.compile_seconds[stage] = self.compile_seconds.get(stage, 0.0) + elapsed

    def clear(self) -> None:
        """Zero every count in place (holders of this object see the reset)."""
        fresh = Counters()
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def __add__(self, other: Counters) -> Counters:
        seconds = dict(self.compile_seconds)
        for stage, s in other.compile_seconds.items():
            seconds[stage] = seconds.get(stage, 0.0) + s
        counts = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in dataclasses.fields(self)
            if f.name != "compile_seconds"
        }
        return Counters(**counts, compile_seconds=seconds)

    @classmethod
    def total(cls, counters: Iterable[Counters]) -> Counters:
        """The sum of several dispatchers' counters (new object)."""
        result = cls()
        for c in counters:
            result = result + c
        return result

    def as_dict(self) -> dict[str, object]:
        """A plain dict copy, for printing and for ``ember.stats()``."""
        return dataclasses.asdict(self)
