"""Calls that log through the logging module (``logger.warning_once(...)`` in
library code): not graph operations, so they run after the graph, in order with
the function's other Python side effects, instead of breaking the graph."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .. import builtin_calls
from ..variables import ConstValue, MethodValue, UserObjectValue, Value
from .instances import STAND_INS

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter

# Logger methods that only emit (transformers adds the ``_once`` forms).
LOG_METHODS = frozenset(
    {
        "debug",
        "info",
        "warning",
        "warn",
        "error",
        "exception",
        "critical",
        "fatal",
        "log",
        "warning_once",
        "info_once",
    }
)


def _reader(obj: Value, name: str) -> Value | None:
    if isinstance(obj.value, logging.Logger) and name in LOG_METHODS:
        return MethodValue(obj, name)
    return None


STAND_INS.append(_reader)


def _deferred(name: str):
    def log(tx: Interpreter, logger: UserObjectValue, *args: Value, **kwargs: Value):
        tx.output.defer_call(MethodValue(logger, name), args, kwargs)
        return ConstValue(None)

    return log


for _name in LOG_METHODS:
    builtin_calls.handles_method((UserObjectValue,), _name)(_deferred(_name))
