"""Side effects on Python state found during capture, replayed after the graph.

Capture never changes the user's objects. It records each write (an attribute, a
module global, the contents of a list or dict that came from outside), lets later
reads in the same capture see the new value, and the transformed function replays
the writes in order after the graph has run, so Python state ends as eager leaves it.
Calls that only report (logging) are recorded the same way and made in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

from .source import Source
from .variables import DictValue, ListValue, Value


@dataclass(frozen=True, slots=True, eq=False)
class AttrWrite:
    """``target.name = value``."""

    target: Value
    name: str
    value: Value


@dataclass(frozen=True, slots=True, eq=False)
class GlobalWrite:
    """``globals_dict[name] = value`` (STORE_GLOBAL in the compiled function or an
    inlined one; the globals dict is read through ``globals_source``)."""

    globals_source: Source
    name: str
    value: Value


@dataclass(frozen=True, slots=True, eq=False)
class ContentsWrite:
    """The list or dict read from ``container.source`` now holds ``container``'s
    items (append, extend, insert, pop, item assignment, update...)."""

    container: ListValue | DictValue


@dataclass(frozen=True, slots=True, eq=False)
class CellWrite:
    """``nonlocal name; name = value``: the cell at ``index`` of ``function``'s
    closure (a variable of the function that enclosed it) now holds ``value``."""

    function: Value
    index: int
    value: Value


@dataclass(frozen=True, slots=True, eq=False)
class DeferredCall:
    """``fn(*args, **kwargs)`` for a call that only reports (logging): it runs
    after the graph, in order with the other effects."""

    fn: Value
    args: tuple[Value, ...]
    kwargs: dict[str, Value]


SideEffect = AttrWrite | GlobalWrite | CellWrite | ContentsWrite | DeferredCall


def written_values(effects: list[SideEffect]) -> list[Value]:
    """The values the replay needs, so the graph returns the tensors among them."""
    values: list[Value] = []
    for effect in effects:
        if isinstance(effect, ContentsWrite):
            values.append(effect.container)
        elif isinstance(effect, CellWrite):
            values.append(effect.value)
        elif isinstance(effect, DeferredCall):
            values += [effect.fn, *effect.args, *effect.kwargs.values()]
        else:
            values.append(effect.value)
    return values
