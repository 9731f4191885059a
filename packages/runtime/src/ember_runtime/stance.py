"""The compiler's stance: what every dispatcher does on a call, process-wide.

``FORCE_EAGER`` (or an ``eagerly()`` block) runs each function as it is;
``EAGER_ON_RECOMPILE`` and ``FAIL_ON_RECOMPILE`` change only a miss that would
compile again (an entry exists, none matches). One setting for all threads,
as torch.compiler.set_stance's.
"""

from __future__ import annotations

import enum
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
    depth = 0  # eagerly() blocks entered and not left
    eager = False  # read on every call: FORCE_EAGER, or inside eagerly()

    def update(self) -> None:
        self.eager = self.stance is Stance.FORCE_EAGER or self.depth > 0


STATE = _State()


def set_stance(stance: Stance | str) -> Stance:
    """Make ``stance`` (a Stance or its value) the current one; returns the
    one it replaces. Raises ValueError for an unknown name."""
    try:
        new = Stance(stance)
    except ValueError:
        valid = ", ".join(repr(s.value) for s in Stance)
        raise ValueError(f"unknown stance {stance!r}; valid stances: {valid}") from None
    old, STATE.stance = STATE.stance, new
    STATE.update()
    return old


def get_stance() -> Stance:
    return STATE.stance


@contextmanager
def eagerly() -> Iterator[None]:
    """Every compiled function called inside the block runs as Python."""
    STATE.depth += 1
    STATE.update()
    try:
        yield
    finally:
        STATE.depth -= 1
        STATE.update()
