"""Callables capture made itself: methods of a value (a builtin handler first,
then the receiver's kind answers), functions bound to an instance and functions
built in the frame (inlined), and ``super()``."""

from __future__ import annotations

import functools
import types
from typing import TYPE_CHECKING

from .. import builtin_calls
from ..behaviour import call, call_method, get_attr, parts, python_type, rebuild
from ..guards import Guard, GuardKind
from ..source import AttrSource, BuiltinDictSource, ItemSource, Source
from ..variables import (
    BoundFunctionValue,
    DictValue,
    FunctionValue,
    MethodValue,
    NewObjectValue,
    ObjectValue,
    PartialValue,
    SuperValue,
    TupleValue,
    Value,
)
from .new_objects import OBJECT_SLOTS

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter
    from ..emit import Emitter


@python_type.register(MethodValue, BoundFunctionValue)
def _method_type(v: Value) -> type:
    return types.MethodType


@builtin_calls.constructs(lambda cls: cls is functools.partial)
def _make_partial(tx: Interpreter, cls_value: Value, args, kwargs) -> Value:
    if not args:
        raise tx.unsupported("functools.partial() without a function")
    return PartialValue(args[0], tuple(args[1:]), dict(kwargs))


@call.register(PartialValue)
def _call_partial(tx: Interpreter, fn: PartialValue, args, kwargs) -> Value:
    return call(tx, fn.fn, [*fn.args, *args], {**fn.keywords, **kwargs})


@get_attr.register(PartialValue)
def _partial_attr(tx: Interpreter, fn: PartialValue, name: str) -> Value:
    parts = {
        "func": fn.fn,
        "args": TupleValue(fn.args),
        "keywords": DictValue(fn.keywords),
    }
    if name not in parts:
        raise tx.unsupported(f"reading attribute {name!r} of a functools.partial")
    return parts[name]


@python_type.register(PartialValue)
def _partial_type(v: PartialValue) -> type:
    return functools.partial


@parts.register(PartialValue)
def _partial_parts(v: PartialValue) -> dict[object, Value]:
    return {"func": v.fn, **dict(enumerate(v.args)), **v.keywords}


@rebuild.register(PartialValue)
def _rebuild_partial(out: Emitter, v: PartialValue) -> str:
    args = [out.expr(v.fn), *(out.expr(a) for a in v.args)]
    args += [f"{k}={out.expr(a)}" for k, a in v.keywords.items()]
    return f"{out.constant(functools.partial)}({', '.join(args)})"


@python_type.register(FunctionValue)
def _function_type(v: FunctionValue) -> type:
    return types.FunctionType


@parts.register(MethodValue, BoundFunctionValue)
def _receiver(v: MethodValue | BoundFunctionValue) -> dict[object, Value]:
    return {"__self__": v.receiver}


@call.register(MethodValue)
def _call_method(tx: Interpreter, fn: MethodValue, args, kwargs) -> Value:
    handler = builtin_calls.METHOD_HANDLERS.get((type(fn.receiver), fn.name))
    if handler is not None:
        return handler(tx, fn.receiver, *args, **kwargs)
    return call_method(tx, fn.receiver, fn.name, args, kwargs)


@call.register(BoundFunctionValue)
def _call_bound(tx: Interpreter, fn: BoundFunctionValue, args, kwargs) -> Value:
    function = ObjectValue(fn.func, fn.source)
    if fn.func in builtin_calls.HANDLERS:  # object's slots, capture's stand-ins
        return call(tx, function, [fn.receiver, *args], kwargs)
    return tx.inline(function, [fn.receiver, *args], kwargs)


@call.register(FunctionValue)
def _call_function(tx: Interpreter, fn: FunctionValue, args, kwargs) -> Value:
    return tx.inline(fn, args, kwargs)


@get_attr.register(SuperValue)
def _super_attr(tx: Interpreter, sup: SuperValue, name: str) -> Value:
    mro = python_type(sup.receiver).__mro__
    start = mro.index(sup.cls) + 1
    for index in range(start, len(mro)):
        if name in mro[index].__dict__:
            source = _class_source(sup.receiver)
            if source is not None:
                mro_source = ItemSource(AttrSource(source, "__mro__"), index)
                source = ItemSource(AttrSource(mro_source, "__dict__"), name)
            attr = mro[index].__dict__[name]
            if isinstance(attr, types.FunctionType):
                return BoundFunctionValue(attr, sup.receiver, source)
            if mro[index] is object and attr in OBJECT_SLOTS:
                return BoundFunctionValue(attr, sup.receiver)
            if mro[index] is dict and name in _DICT_READERS:
                return MethodValue(_builtin_dict(tx, sup.receiver), name)
            raise tx.unsupported(f"super().{name} of kind {type(attr).__name__}")
    raise tx.unsupported(f"super().{name}: no such attribute")


def _class_source(receiver: Value) -> Source | None:
    """Where the receiver's class is read: through the object read from the
    frame, or where the function read the class of an object it made."""
    if isinstance(receiver, NewObjectValue):
        return receiver.cls_source
    return AttrSource(receiver.source, "__class__") if receiver.source else None


@rebuild.register(MethodValue)
def _rebuild_method(out: Emitter, v: MethodValue) -> str:
    return f"{out.expr(v.receiver)}.{v.name}"


@rebuild.register(BoundFunctionValue)
def _rebuild_bound(out: Emitter, v: BoundFunctionValue) -> str:
    if v.source is None:
        raise TypeError(f"a {type(v).__name__} has no value outside capture")
    method_type = out.constant(types.MethodType)
    return f"{method_type}({out.read(v.source)}, {out.expr(v.receiver)})"


# dict's own methods that only read, which a dict subclass reaches with super().
_DICT_READERS = frozenset({"get", "keys", "values", "items", "copy"})


def _builtin_dict(tx: Interpreter, receiver: Value) -> DictValue:
    """A dict subclass's contents as ``dict``'s own methods see them, each
    entry guarded (the keys by value, in order), for reading only: the view has
    no source, so nothing written to it would be replayed."""
    if receiver.source is None:
        raise tx.unsupported("dict methods of a dict subclass made in the function")
    real = receiver.value
    keys = list(dict.keys(real))
    tx.output.guards.add(
        Guard(GuardKind.EQUALS_MATCH, BuiltinDictSource(receiver.source), (list, keys))
    )
    items = {
        k: tx.output.wrap(
            dict.__getitem__(real, k), BuiltinDictSource(receiver.source, k)
        )
        for k in keys
    }
    return DictValue(items)
