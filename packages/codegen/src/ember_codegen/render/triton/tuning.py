"""``autotune`` for Triton kernels (``mode="max-autotune"`` in ember): a
kernel's first launch times a few warp counts on copies of its arguments and
keeps the fastest, in a file beside the kernel cache (``tuning/<key>.json``),
so a later process launches it with that count without timing again."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

log = logging.getLogger("ember.codegen")

# Timed launches per candidate after one untimed (which compiles it): more on
# a GPU, where a launch is microseconds; under the interpreter a few do.
REPEATS = {"cuda": 25, "cpu": 2}
WARPS = (1, 2, 4, 8)


def candidates(rule: int) -> tuple[int, ...]:
    """The warp counts timed: the rule's (``kernels.warps``), half and twice it,
    within 1 to 8."""
    return tuple(w for w in WARPS if rule // 2 <= w <= rule * 2)


class Tuned:
    """A ``triton.jit`` kernel whose launches (``tuned[grid](*args,
    num_warps=rule)``) use the fastest warp count found for it. ``source`` is
    the kernel's own source, ``folder`` where winners are kept (None: this
    process only)."""

    def __init__(self, kernel, source: str, folder: Path | None) -> None:
        self.kernel, self.source, self.folder = kernel, source, folder
        self.best: int | None = None

    def __getitem__(self, grid: tuple) -> Callable:
        return functools.partial(self._launch, grid)

    def _launch(self, grid: tuple, *args: object, num_warps: int) -> None:
        if self.best is None:
            key = self._key(grid, args)
            self.best = _read(self.folder, key)
            if self.best is None:
                self.best = self._tune(grid, args, num_warps)
                _write(self.folder, key, self.best)
        self.kernel[grid](*args, num_warps=self.best)

    def _key(self, grid: tuple, args: tuple) -> str:
        import triton

        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        where = "interpreter"
        if device.type == "cuda":
            where = f"{torch.cuda.get_device_name(device)} {triton.__version__}"
        text = "\0".join([self.source, repr(grid), where])
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _tune(self, grid: tuple, args: tuple, rule: int) -> int:
        """Times each candidate on copies of the arguments (a kernel may
        update one in place: timing must not repeat that on the real one)."""
        copies = [_copy(a) if isinstance(a, torch.Tensor) else a for a in args]
        device = next(a.device for a in copies if isinstance(a, torch.Tensor))
        times = {}
        for warps in candidates(rule):

            def run(warps: int = warps) -> None:
                self.kernel[grid](*copies, num_warps=warps)

            times[warps] = _median_seconds(run, device)
        best = min(times, key=times.__getitem__)
        log.info(
            "autotune: %s",
            ", ".join(f"{w} warps {t * 1e6:.1f} us" for w, t in times.items()),
        )
        return best


def _copy(t: torch.Tensor) -> torch.Tensor:
    """``t`` in storage of its own, with its exact layout (offset, strides,
    overlaps): the kernel's index math has them written in."""
    copy = torch.empty(0, dtype=t.dtype, device=t.device)
    return copy.set_(
        t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride()
    )


def _median_seconds(run: Callable[[], None], device: torch.device) -> float:
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    run()  # compiles it
    sync()
    seconds = []
    for _ in range(REPEATS.get(device.type, 2)):
        start = time.perf_counter()
        run()
        sync()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def _read(folder: Path | None, key: str) -> int | None:
    """The stored winner; None when there is none (or it is not a warp
    count: the file only ever holds one, and a wrong one costs speed only)."""
    if folder is None:
        return None
    try:
        warps = json.loads((folder / f"{key}.json").read_text())["num_warps"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return warps if type(warps) is int and warps in WARPS else None


def _write(folder: Path | None, key: str, warps: int) -> None:
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"num_warps": warps}, f)
        os.replace(temp, folder / f"{key}.json")
    except OSError:  # an unwritable folder: the next process times again
        return
