"""``os.environ`` reads in library code (``os.environ.get("FLAG")``): answered
from the environment now and guarded on that variable alone, instead of
inlining Mapping.get over every variable (which catches KeyError)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .. import builtin_calls
from ..behaviour import constant
from ..guards import Guard, GuardKind
from ..source import EnvironSource
from ..variables import ConstValue, ObjectValue, Value
from .instances import STAND_INS

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter


def environ_get(key: str, default: object = None) -> object:
    """What ``os.environ.get`` is read as during capture."""
    return os.environ.get(key, default)


def _reader(obj: Value, name: str) -> Value | None:
    """The stand-in for ``obj.name`` when it is a read of the environment."""
    if obj.value is os.environ and name == "get":
        return ObjectValue(environ_get)
    return None


STAND_INS.append(_reader)


@builtin_calls.handles(environ_get)
def _get(tx: Interpreter, key: Value, default: Value | None = None) -> Value:
    name = constant(tx, key)
    if not isinstance(name, str):
        raise tx.unsupported(f"os.environ.get of a {type(name).__qualname__}")
    value = os.environ.get(name)
    tx.output.guards.add(
        Guard(GuardKind.EQUALS_MATCH, EnvironSource(name), (type(value), value))
    )
    if value is None:
        return default if default is not None else ConstValue(None)
    return ConstValue(value)
