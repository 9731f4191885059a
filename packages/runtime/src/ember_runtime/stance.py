"""The compiler's stance: what every dispatcher does on a call, process-wide.

``FORCE_EAGER`` runs each function as it is (and so does an ``eagerly()``
block, in its thread); ``EAGER_ON_RECOMPILE`` and ``FAIL_ON_RECOMPILE`` change
only a miss that would compile again (an entry exists, none matches). The
stance is one setting for all threads, as torch.compiler.set_stance's.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Stance(enum.Enum):
    DEFAULT = "default"
    FORCE_EAGER = "force_eager"  # run every compiled function as Python
    EAGER_ON_RECOMPILE = "eager_on_recompile"  # a miss with entries runs eagerly
    FAIL_ON_RECOMPILE = "fail_on_recompile"  # a miss with entries raises


class RecompileError(RuntimeError):
    """A function would have compiled again under ``FAIL_ON_RECOMPILE``."""


class _State:
    stance = Stance.DEFAULT
    force_eager = False  # the stance is FORCE_EAGER
    blocks = 0  # eagerly() blocks entered and not left, over all threads
    # Read on every call: force_eager, or some thread is in an eagerly() block
    # (only then is the thread-local depth read).
    maybe_eager = False

    def update(self) -> None:
        self.maybe_eager = self.force_eager or self.blocks > 0


class _Thread(threading.local):
    depth = 0  # eagerly() blocks this thread entered and has not left


STATE = _State()
THREAD = _Thread()
_blocks_lock = threading.Lock()


def set_stance(stance: Stance | str) -> Stance:
    """Make ``stance`` (a Stance or its value) the current one; returns the
    one it replaces. Raises ValueError for an unknown name."""
    try:
        new = Stance(stance)
    except ValueError:
        valid = ", ".join(repr(s.value) for s in Stance)
        raise ValueError(f"unknown stance {stance!r}; valid stances: {valid}") from None
    old, STATE.stance = STATE.stance, new
    STATE.force_eager = new is Stance.FORCE_EAGER
    STATE.update()
    return old


def get_stance() -> Stance:
    return STATE.stance


@contextmanager
def eagerly() -> Iterator[None]:
    """Every compiled function this thread calls inside the block runs as
    Python (other threads keep compiling, as with torch.compiler.disable)."""
    _count_block(1)
    THREAD.depth += 1
    try:
        yield
    finally:
        THREAD.depth -= 1
        _count_block(-1)


def _count_block(step: int) -> None:
    with _blocks_lock:
        STATE.blocks += step
        STATE.update()
