"""Python's protocols on objects of user classes (truth, ``len``, items,
iteration, ``in``, calls), answered by inlining the class's own Python dunders:
for objects read from the frame and objects made in the function alike (the
``collections.abc`` mixins among them are answered by mixins.py)."""

from __future__ import annotations

import inspect
import types
from typing import TYPE_CHECKING

from ..behaviour import (
    call,
    constant,
    contains,
    describe_value,
    get_item,
    iterate,
    length,
    python_type,
    truth,
)
from ..variables import (
    BoundFunctionValue,
    NewObjectValue,
    UserObjectValue,
    Value,
)
from .instances import class_attr_source
from .new_objects import member

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter

_OBJECTS = (UserObjectValue, NewObjectValue)


def dunder(obj: Value, name: str) -> BoundFunctionValue | None:
    """``type(obj).name`` bound to ``obj`` when the class defines it in Python."""
    fn = inspect.getattr_static(python_type(obj), name, None)
    if not isinstance(fn, types.FunctionType):
        return None
    if isinstance(obj, NewObjectValue):
        return member(obj, name, fn)
    return BoundFunctionValue(fn, obj, class_attr_source(obj, name))


def _protocol(tx: Interpreter, obj: Value, name: str, what: str, args: list) -> Value:
    method = dunder(obj, name)
    if method is None:
        raise tx.unsupported(f"{what} a {describe_value(obj)}")
    return call(tx, method, args, {})


@call.register(*_OBJECTS)
def _call(tx: Interpreter, obj: Value, args, kwargs) -> Value:
    method = dunder(obj, "__call__")
    if method is None:
        raise tx.unsupported(f"calling a {describe_value(obj)}")
    return call(tx, method, args, kwargs)


@truth.register(*_OBJECTS)
def _truth(tx: Interpreter, obj: Value) -> bool:
    """``__bool__``, else ``__len__``, inlined; true when the class has neither."""
    if dunder(obj, "__bool__") is not None:
        return bool(constant(tx, _protocol(tx, obj, "__bool__", "the truth of", [])))
    if dunder(obj, "__len__") is not None:
        return bool(_length(tx, obj))
    cls = python_type(obj)
    if hasattr(cls, "__bool__") or hasattr(cls, "__len__"):  # a C implementation
        raise tx.unsupported(f"the truth of a {describe_value(obj)} object")
    return True


@length.register(*_OBJECTS)
def _length(tx: Interpreter, obj: Value) -> int:
    return constant(tx, _protocol(tx, obj, "__len__", "len() of", []))


@get_item.register(*_OBJECTS)
def _item(tx: Interpreter, obj: Value, index: Value) -> Value:
    return _protocol(tx, obj, "__getitem__", "indexing", [index])


@iterate.register(*_OBJECTS)
def _iterate(tx: Interpreter, obj: Value) -> list[Value]:
    iterator = _protocol(tx, obj, "__iter__", "iterating over", [])
    if isinstance(iterator, _OBJECTS):  # an iterator object: __next__ would run
        raise tx.unsupported(f"iterating over a {describe_value(obj)} iterator")
    return iterate(tx, iterator)


@contains.register(*_OBJECTS)
def _contains(tx: Interpreter, obj: Value, item: Value) -> bool:
    return truth(tx, _protocol(tx, obj, "__contains__", "`in` on", [item]))
