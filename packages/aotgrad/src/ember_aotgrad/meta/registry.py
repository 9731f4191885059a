"""The registry of meta rules, the call that consults it, and the dispatch mode
that runs torch-level code on meta tensors through it."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ..dispatch_mode import DispatchMode

NOT_COVERED = object()  # meta_result's answer when no rule covers the call


class Decline(Exception):
    """A rule does not cover these arguments: torch's meta kernel runs."""


Rule = Callable[..., object]  # rule(func, *args, **kwargs) -> result; may Decline
RULES: dict[torch._ops.OpOverload, Rule] = {}


def meta_rule(*ops: torch._ops.OpOverload) -> Callable[[Rule], Rule]:
    """Registers the decorated ``rule(func, *args, **kwargs)`` for ``ops``."""

    def register(rule: Rule) -> Rule:
        for op in ops:
            RULES[op] = rule
        return rule

    return register


def meta_result(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    """``func(*args, **kwargs)`` on meta tensors by ember's rule, or NOT_COVERED
    when no rule covers the call (then the caller runs torch's kernel)."""
    rule = RULES.get(func) or family_rule(func)
    if rule is None:
        return NOT_COVERED
    try:
        return rule(func, *args, **kwargs)
    except Exception:  # Decline, or arguments a rule did not foresee (a short
        # list, an odd type): torch's kernel answers, or raises its own error
        return NOT_COVERED


class MetaRulesMode(DispatchMode):
    """Runs the aten ops it sees on meta tensors through ember's rules; every
    other call runs as it is (for callers that run torch-level code on meta
    tensors, as capture does)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = meta_result(func, args, kwargs)
        if result is NOT_COVERED:
            return func(*args, **kwargs)
        return result


# Rules for whole families of ops (pointwise.py has one): each answers an op
# with its rule or None. Asked once per op.
FAMILIES: list[Callable[[torch._ops.OpOverload], Rule | None]] = []


@functools.cache
def family_rule(func: torch._ops.OpOverload) -> Rule | None:
    """The rule of the first family that takes ``func``, or None."""
    for family in FAMILIES:
        rule = family(func)
        if rule is not None:
            return rule
    return None
