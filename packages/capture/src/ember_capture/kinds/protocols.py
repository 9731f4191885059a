"""Python's protocols on objects of user classes (truth, ``len``, items,
iteration, ``in``, calls, binary operators and comparisons), answered by
inlining the class's own Python dunders:
for objects read from the frame and objects made in the function alike (the
``collections.abc`` mixins among them are answered by mixins.py)."""

from __future__ import annotations

import inspect
import operator
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
    ConstValue,
    NewObjectValue,
    UserObjectValue,
    Value,
)
from .instances import class_attr_source
from .new_objects import member
from .objects import OBJECT_OPERATORS

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


# Binary operators and their Python dunders: (the left operand's, the right's
# reflected one); in-place forms fall back to the plain dunder, as Python does.
_BINARY = {
    operator.add: ("__add__", "__radd__"),
    operator.sub: ("__sub__", "__rsub__"),
    operator.mul: ("__mul__", "__rmul__"),
    operator.matmul: ("__matmul__", "__rmatmul__"),
    operator.truediv: ("__truediv__", "__rtruediv__"),
    operator.floordiv: ("__floordiv__", "__rfloordiv__"),
    operator.mod: ("__mod__", "__rmod__"),
    operator.pow: ("__pow__", "__rpow__"),
    operator.and_: ("__and__", "__rand__"),
    operator.or_: ("__or__", "__ror__"),
    operator.xor: ("__xor__", "__rxor__"),
    operator.lshift: ("__lshift__", "__rlshift__"),
    operator.rshift: ("__rshift__", "__rrshift__"),
    operator.eq: ("__eq__", "__eq__"),
    operator.ne: ("__ne__", "__ne__"),
    operator.lt: ("__lt__", "__gt__"),
    operator.le: ("__le__", "__ge__"),
    operator.gt: ("__gt__", "__lt__"),
    operator.ge: ("__ge__", "__le__"),
}
_IN_PLACE = {
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.imatmul: operator.matmul,
    operator.itruediv: operator.truediv,
    operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod,
    operator.ipow: operator.pow,
    operator.iand: operator.and_,
    operator.ior: operator.or_,
    operator.ixor: operator.xor,
}


def _not_implemented(v: Value) -> bool:
    return isinstance(v, ConstValue) and v.value is NotImplemented


def _binary(op, in_place: str | None = None):
    forward, reflected = _BINARY[op]

    def apply(tx: Interpreter, lhs: Value, rhs: Value) -> Value:
        """``lhs <op> rhs`` the way Python tries the operands' dunders."""
        tries = [(lhs, in_place, rhs)] if in_place else []
        tries += [(lhs, forward, rhs), (rhs, reflected, lhs)]
        for obj, name, other in tries:
            method = dunder(obj, name) if isinstance(obj, _OBJECTS) else None
            if method is None:
                continue
            result = call(tx, method, [other], {})
            if not _not_implemented(result):
                return result
        if op is operator.ne:  # object's __ne__ inverts __eq__
            return ConstValue(
                not truth(tx, OBJECT_OPERATORS[operator.eq](tx, lhs, rhs))
            )
        if op is operator.eq:  # object's __eq__ is identity
            return call(tx, ConstValue(operator.is_), [lhs, rhs], {})
        raise tx.unsupported(
            f"{forward} between a {describe_value(lhs)} and a {describe_value(rhs)}"
        )

    return apply


for _op in _BINARY:
    OBJECT_OPERATORS[_op] = _binary(_op)
for _op, _plain in _IN_PLACE.items():
    OBJECT_OPERATORS[_op] = _binary(_plain, f"__i{_BINARY[_plain][0][2:]}")
