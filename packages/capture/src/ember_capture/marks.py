"""What a user marks on their own functions: never captured (a call of it is a
graph break and runs as Python), or put in the graph as one opaque call (its
output's metadata from a run on meta tensors; a later stage traces into it)."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)

_NEVER = "__ember_never_capture__"
_IN_GRAPH = "__ember_call_in_graph__"


def never_capture(fn: F) -> F:
    """Mark ``fn`` (a Python function) so that capture never traces it: a call
    of it from captured code is a graph break, and capturing it directly
    raises CaptureError. Returns ``fn``."""
    return _mark(fn, _NEVER, "never_capture")


def call_in_graph(fn: F) -> F:
    """Mark ``fn`` so that capture puts each call of it in the graph as one
    ``call_function`` node instead of tracing its code: it must take and return
    tensors (and plain values) and run on meta tensors. Returns ``fn``."""
    return _mark(fn, _IN_GRAPH, "call_in_graph")


def never_captured(fn: object) -> bool:
    """Whether ``fn`` (or the function of a bound method) is marked never_capture."""
    return _marked(fn, _NEVER)


def called_in_graph(fn: object) -> bool:
    """Whether ``fn`` is marked call_in_graph."""
    return _marked(fn, _IN_GRAPH)


def _mark(fn: F, attr: str, what: str) -> F:
    target = fn.__func__ if isinstance(fn, types.MethodType) else fn
    if not isinstance(target, types.FunctionType):
        raise TypeError(
            f"{what} takes a Python function, not {type(fn).__name__}; "
            "wrap the callable in a def"
        )
    setattr(target, attr, True)
    return fn


def _marked(fn: object, attr: str) -> bool:
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    return isinstance(fn, types.FunctionType) and fn.__dict__.get(attr, False)
