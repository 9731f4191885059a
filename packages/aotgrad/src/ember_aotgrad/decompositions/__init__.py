"""Decompositions from composite and backward aten ops down to the core op set.

``default_decompositions()`` is the table aot_compile uses; forward.py,
backward.py and foreach.py hold the rules, each registered next to its code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import backward, foreach, forward  # noqa: F401  (modules register rules)
from .registry import DECOMPOSITIONS, register_decomposition

# The table as aotgrad ships it, before anyone registers or removes a rule
# (``table_changes`` names the difference for cache keys).
BUILTIN_RULES = dict(DECOMPOSITIONS)


def default_decompositions() -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """A copy of the built-in table, safe to extend or trim."""
    return dict(DECOMPOSITIONS)


__all__ = [
    "BUILTIN_RULES",
    "DECOMPOSITIONS",
    "default_decompositions",
    "register_decomposition",
]
