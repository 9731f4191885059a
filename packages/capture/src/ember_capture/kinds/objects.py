"""Python objects held by value (constants, folded as Python would) or by where
the frame reads them (modules, functions, classes): calling one routes to a
builtin handler, a tensor op, a fold, a container operator, a constructor, or
inlining its code."""

from __future__ import annotations

import copy
import functools
import inspect
import operator
import types
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import builtin_calls
from ..behaviour import (
    call,
    call_method,
    constant,
    constant_value,
    copy_of,
    describe,
    describe_value,
    fold,
    get_attr,
    hashable,
    is_none,
    item_of,
    iterate,
    python_type,
    rebuild,
    set_attr,
    truth,
)
from ..source import AttrSource, ReferentSource
from ..torch_ops import (
    FOLDABLE_METHOD_TYPES,
    ITERABLE_CONSTANT_TYPES,
    PURE_FUNCTIONS,
    TENSOR_OPERATORS,
    TORCH_META_FUNCTIONS,
    changes_global_state,
    is_torch_op,
)
from ..variables import (
    BoundFunctionValue,
    ConstValue,
    DictValue,
    FloatExprValue,
    FloatInputValue,
    ListValue,
    MethodValue,
    NewObjectValue,
    ObjectValue,
    SymIntValue,
    TensorValue,
    TupleValue,
    UserObjectValue,
    Value,
    peek,
)
from .containers import SEQUENCE_OPS, SIZE_COMPARISONS, holds_sizes, is_sequence_op

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter
    from ..emit import Emitter


@python_type.register(ConstValue, ObjectValue)
def _type(v: Value) -> type:
    return type(v.value)


@python_type.register(FloatInputValue)
def _float_type(v: FloatInputValue) -> type:
    return float  # guarded by type: asking it does not read the value


@get_attr.register(ConstValue)
def _const_attr(tx: Interpreter, obj: ConstValue, name: str) -> Value:
    # A constant is guarded by value: its attributes need no guard of their
    # own, and its methods fold (a bound method is a new object each time).
    return _unguarded_attr(tx, obj, name)


@get_attr.register(ObjectValue)
def _object_attr(tx: Interpreter, obj: ObjectValue, name: str) -> Value:
    if name == "__get__" and isinstance(obj.value, types.FunctionType):
        # A bound method-wrapper is a new object at every read: not guardable.
        return MethodValue(obj, name)
    if obj.source is not None:
        if isinstance(obj.value, types.ModuleType):
            # where its functions' ``global`` statements write too (write_attr
            # records a module's attributes there as well)
            written = tx.output.global_writes.get((id(vars(obj.value)), name))
        else:
            written = tx.output.attr_writes.get((id(obj.value), name))
        if written is not None:
            return written
        return tx.output.wrap(getattr(obj.value, name), AttrSource(obj.source, name))
    if isinstance(obj.value, types.ModuleType):
        return tx.output.wrap_trusted(getattr(obj.value, name))  # torch's own code
    return _unguarded_attr(tx, obj, name)


def _unguarded_attr(tx: Interpreter, obj: Value, name: str) -> Value:
    real = getattr(obj.value, name)
    if callable(real) and not isinstance(real, type):
        return MethodValue(obj, name)
    if isinstance(real, FROZEN_TYPES):
        return ConstValue(real)
    return tx.output.wrap_trusted(real)


# Read-only objects a constant's attributes may be (a signature's parameters):
# constants too, folded as their owner is.
FROZEN_TYPES = (inspect.Signature, inspect.Parameter, types.MappingProxyType)


@builtin_calls.handles(inspect.signature)
def _signature(tx: Interpreter, fn: Value) -> Value:
    """``inspect.signature`` of a function known by identity (its code and
    defaults are guarded with it), or of one bound to a receiver."""
    if isinstance(fn, BoundFunctionValue):
        signature = inspect.signature(fn.func)
        bound = list(signature.parameters.values())[1:]
        return ConstValue(signature.replace(parameters=bound))
    if isinstance(fn, ObjectValue) and isinstance(fn.value, types.FunctionType):
        return ConstValue(inspect.signature(fn.value))
    raise tx.unsupported(f"inspect.signature of a {describe_value(fn)}")


@set_attr.register(ObjectValue)
def _set_attr(tx: Interpreter, obj: ObjectValue, name: str, value: Value) -> None:
    if obj.source is None:
        raise tx.unsupported(f"assigning attribute {name!r} of a {describe_value(obj)}")
    tx.output.write_attr(obj, name, value)


@copy_of.register(ConstValue)
def _copy_constant(tx: Interpreter, v: ConstValue, memo) -> Value:
    return ConstValue(
        copy.deepcopy(v.value) if memo is not None else copy.copy(v.value)
    )


@copy_of.register(FloatInputValue)
def _copy_float(tx: Interpreter, v: FloatInputValue, memo) -> Value:
    return v  # a float copies to itself; its value stays unread


@copy_of.register(ObjectValue)
def _copy_object(tx: Interpreter, v: ObjectValue, memo) -> Value:
    if not isinstance(v.value, _COPIED_AS_THEMSELVES):
        raise tx.unsupported(f"copying a {describe_value(v)}")
    return v


# What copy and deepcopy hand back unchanged.
_COPIED_AS_THEMSELVES = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.ModuleType,
)


# Operators on objects of user classes (``a + b`` with a Python ``__add__``):
# operator -> handler; kinds/protocols.py fills it.
OBJECT_OPERATORS: dict[Callable, Callable[..., Value]] = {}
_OBJECTS = (UserObjectValue, NewObjectValue)


@call.register(ConstValue, ObjectValue)
def call_object(tx: Interpreter, fn: Value, args, kwargs) -> Value:
    """A call of a real callable: a builtin handler, a tensor op, a fold, a
    container operator, a constructor, or the function's code inlined."""
    target = fn.value
    handler = builtin_calls.HANDLERS.get(target) if hashable(target) else None
    if handler is not None:
        return handler(tx, *args, **kwargs)
    if changes_global_state(target):
        raise tx.unsupported(
            f"calling {describe(target)}, which changes torch's global state",
            "call it outside the compiled function",
        )
    if target in OBJECT_OPERATORS and any(isinstance(a, _OBJECTS) for a in args):
        return OBJECT_OPERATORS[target](tx, *args)
    if target in TORCH_META_FUNCTIONS:
        return ConstValue(TORCH_META_FUNCTIONS[target](*args, **kwargs))
    if is_torch_op(target) or (
        target in TENSOR_OPERATORS and _any_tensor(args, kwargs)
    ):
        return tx.output.call_tensor_op("call_function", target, tuple(args), kwargs)
    # Before folding: a list of constants is still one object that ``+=`` changes.
    mutable = any(isinstance(a, (ListValue, DictValue)) for a in args)
    if target in SEQUENCE_OPS and mutable and is_sequence_op(args):
        return SEQUENCE_OPS[target](tx, *args)
    if target in FLOAT_ARITHMETIC and _on_float_inputs(target, args, kwargs):
        return FloatExprValue(target, tuple(args))
    if target in SIZE_ARITHMETIC and _on_sizes(args, kwargs):
        return tx.output.call_size_op(target, args)
    if target in SIZE_COMPARISONS and not kwargs and holds_sizes(args):
        return SIZE_COMPARISONS[target](tx, *args)
    if target in PURE_FUNCTIONS and _all_constant(args, kwargs):
        return fold(tx, target, args, kwargs)
    if target in SEQUENCE_OPS and is_sequence_op(args):
        return SEQUENCE_OPS[target](tx, *args)
    if isinstance(target, type):
        return builtin_calls.construct(tx, fn, args, kwargs)
    if isinstance(target, types.FunctionType):
        return tx.inline(fn, args, kwargs)
    if isinstance(target, functools.partial):
        return _call_partial(tx, fn, args, kwargs)
    if isinstance(target, weakref.ref) and fn.source is not None and not args:
        # A weak reference's referent, read through it (None once it died).
        return tx.output.wrap(target(), ReferentSource(fn.source))
    raise tx.unsupported(
        f"calling {describe(target)}",
        "ember cannot trace into this callable; move it outside the compiled code",
    )


# Arithmetic that stays unguarded on float inputs (``1 - lr * weight_decay``).
FLOAT_ARITHMETIC = frozenset(
    {
        operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
        operator.neg, operator.pos, operator.iadd, operator.isub, operator.imul,
        operator.itruediv, operator.ipow,
    }
)  # fmt: skip


# Arithmetic and comparisons that keep a symbolic size symbolic (docs/dynamic.md).
SIZE_ARITHMETIC = frozenset(
    {
        operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
        operator.truediv, operator.neg, operator.pos, operator.pow, operator.iadd,
        operator.isub, operator.imul, operator.ifloordiv, operator.lt, operator.le,
        operator.eq, operator.ne, operator.gt, operator.ge,
    }
)  # fmt: skip


def _on_sizes(args, kwargs) -> bool:
    """Numbers, one of them a symbolic size."""
    return (
        not kwargs
        and any(isinstance(a, SymIntValue) for a in args)
        and all(
            isinstance(a, SymIntValue)
            or (type(a) is ConstValue and type(a.value) in (int, float, bool))
            for a in args
        )
    )


def _on_float_inputs(target: Callable, args, kwargs) -> bool:
    """Arithmetic of float inputs and numbers that gives a float."""
    if kwargs or not any(isinstance(a, FloatInputValue) for a in args):
        return False
    if not all(
        isinstance(a, ConstValue) and type(peek(a)) in (int, float) for a in args
    ):
        return False
    try:
        return type(target(*(peek(a) for a in args))) is float
    except ArithmeticError:
        return False  # folding raises it, as eager does


def _call_partial(tx: Interpreter, fn: ObjectValue, args, kwargs) -> Value:
    """``partial(f, *a, **k)(*args, **kwargs)`` is ``f(*a, *args, **k, **kwargs)``;
    the partial's parts are read (and guarded) as attributes of it."""
    if fn.source is None:  # torch's own code: trusted, as its globals are
        parts = fn.value
        func = tx.output.wrap_trusted(parts.func)
        bound = [constant_value(a) for a in parts.args]
        keywords = {k: constant_value(v) for k, v in parts.keywords.items()}
    else:
        func = get_attr(tx, fn, "func")
        bound = iterate(tx, get_attr(tx, fn, "args"))
        keywords = dict(get_attr(tx, fn, "keywords").items)
    return call(tx, func, [*bound, *args], {**keywords, **kwargs})


@call_method.register(ConstValue)
def _const_method(tx: Interpreter, obj: ConstValue, name: str, args, kwargs):
    if not isinstance(obj.value, FOLDABLE_METHOD_TYPES):
        raise tx.unsupported(f"calling .{name}() of a {type(obj.value).__qualname__}")
    return fold(tx, getattr(obj.value, name), args, kwargs)


@call_method.register(ObjectValue)
def _object_method(tx: Interpreter, obj: ObjectValue, name: str, args, kwargs):
    if name == "__get__" and isinstance(obj.value, types.FunctionType):
        # ``func.__get__(obj, cls)``: the function bound to ``obj``.
        if not args or is_none(args[0]):
            return obj
        return BoundFunctionValue(obj.value, args[0], obj.source)
    return call_object(tx, ObjectValue(getattr(obj.value, name)), args, kwargs)


@truth.register(ConstValue)
def _truth(tx: Interpreter, v: ConstValue) -> bool:
    return bool(v.value)


@iterate.register(ConstValue)
def _iterate(tx: Interpreter, v: ConstValue) -> list[Value]:
    if not isinstance(v.value, ITERABLE_CONSTANT_TYPES):
        raise tx.unsupported(f"iterating over a {type(v.value).__qualname__}")
    return [constant_value(i) for i in v.value]


@item_of.register(ConstValue)
def _item(tx: Interpreter, obj: ConstValue, k: object) -> Value:
    return constant_value(obj.value[k])


@item_of.register(ObjectValue)
def _subscript(tx: Interpreter, obj: ObjectValue, k: object) -> Value:
    """``Optional[T]``, ``list[int]``: a type annotation evaluated in code."""
    if not (isinstance(obj.value, type) or type(obj.value).__module__ == "typing"):
        raise tx.unsupported(f"indexing a {describe_value(obj)}")
    return ObjectValue(obj.value[k])


@constant.register(ConstValue, ObjectValue)
def _constant(tx: Interpreter, v: Value) -> object:
    return v.value


@rebuild.register(ConstValue)
def _rebuild_constant(out: Emitter, v: ConstValue) -> str:
    return out.constant(v.value)


@rebuild.register(FloatInputValue)
def _rebuild_float(out: Emitter, v: FloatInputValue) -> str:
    return out.read(v.source)  # still unguarded: pass it on as read


@rebuild.register(FloatExprValue)
def _rebuild_float_expr(out: Emitter, v: FloatExprValue) -> str:
    # Still unguarded: the transformed code does the same arithmetic again.
    operands = ", ".join(out.expr(o) for o in v.operands)
    return f"{out.constant(v.op)}({operands})"


@rebuild.register(ObjectValue)
def _rebuild_object(out: Emitter, v: ObjectValue) -> str:
    return out.read(v.source) if v.source else out.constant(v.value)


def _any_tensor(args, kwargs) -> bool:
    return any(isinstance(a, TensorValue) for a in [*args, *kwargs.values()])


def _all_constant(args, kwargs) -> bool:
    def ok(v):
        if isinstance(v, (TupleValue, ListValue)):
            return all(ok(i) for i in v.items)
        return isinstance(v, (ConstValue, ObjectValue))

    return all(ok(a) for a in [*args, *kwargs.values()])
