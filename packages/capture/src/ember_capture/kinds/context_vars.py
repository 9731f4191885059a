"""``contextvars.ContextVar.get()`` in library code: the variable's value now,
guarded on ``var.get()`` itself, so another value in another context recompiles."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from .. import builtin_calls
from ..behaviour import constant
from ..source import ContextVarSource
from ..transform import literal
from ..variables import BoundFunctionValue, Value
from .instances import STAND_INS

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter


def context_var_get(var: contextvars.ContextVar, *default: object) -> object:
    """What ``var.get`` is read as during capture."""
    return var.get(*default)


def _reader(obj: Value, name: str) -> Value | None:
    if isinstance(obj.value, contextvars.ContextVar) and name == "get":
        return BoundFunctionValue(context_var_get, obj)
    return None


STAND_INS.append(_reader)


@builtin_calls.handles(context_var_get)
def _get(tx: Interpreter, var: Value, *default: Value) -> Value:
    fallback = [constant(tx, d) for d in default]
    if fallback and literal(fallback[0]) is None:
        raise tx.unsupported("ContextVar.get with a default that is not a literal")
    source = ContextVarSource(var.source, *fallback, bool(fallback))
    return tx.output.wrap(var.value.get(*fallback), source)
