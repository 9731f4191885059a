"""``collections.abc``'s mixin methods that catch an exception to answer
(``Mapping.get`` and ``__contains__`` try ``self[key]``; ``Sequence.__iter__``
indexes until IndexError), answered by the contract the ABC states instead, which
inlines without one: transformers' attention registry is such a Mapping."""

from __future__ import annotations

import collections.abc
from typing import TYPE_CHECKING

from .. import builtin_calls
from ..behaviour import constant, get_item, iterate, length
from ..variables import ConstValue, IteratorValue, Value

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter


def _has_key(tx: Interpreter, mapping: Value, key: Value) -> bool:
    # By the Mapping contract, ``key in self`` is ``key in iter(self)``.
    return constant(tx, key) in [constant(tx, k) for k in iterate(tx, mapping)]


@builtin_calls.handles(collections.abc.Mapping.__contains__)
def _contains(tx: Interpreter, mapping: Value, key: Value) -> Value:
    return ConstValue(_has_key(tx, mapping, key))


@builtin_calls.handles(collections.abc.Mapping.get)
def _get(tx: Interpreter, mapping: Value, key: Value, default: Value | None = None):
    if _has_key(tx, mapping, key):
        return get_item(tx, mapping, key)
    return default if default is not None else ConstValue(None)


@builtin_calls.handles(collections.abc.Sequence.__iter__)
def _iter(tx: Interpreter, sequence: Value) -> Value:
    # ``self[i]`` for each ``i`` below ``len(self)``, as the contract says.
    n = length(tx, sequence)
    return IteratorValue([get_item(tx, sequence, ConstValue(i)) for i in range(n)])
