"""The decomposition table: one rule per aten op, registered next to the rule.

A rule takes the op's arguments and calls aten ops under the recorder, so what it
calls is recorded (and decomposed again) in place of the op. A rule may return
NotImplemented for argument combinations it does not handle; the op then stays
whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

DECOMPOSITIONS: dict[torch._ops.OpOverload, Callable[..., Any]] = {}


def register_decomposition(*ops: torch._ops.OpOverload):
    """Registers the decorated function as the rule for each of ``ops``."""

    def register(rule):
        for op in ops:
            if op in DECOMPOSITIONS:
                raise ValueError(f"{op} already has a decomposition rule")
            DECOMPOSITIONS[op] = rule
        return rule

    return register
