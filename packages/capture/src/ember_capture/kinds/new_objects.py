"""Objects of user classes made inside the function (a cache, a config holder):
``__init__`` and the methods, properties and dunders are inlined, attribute
writes change the object's values in place, and the object is rebuilt once,
after the graph, if it outlives the function or a graph break."""

from __future__ import annotations

import copyreg
import dataclasses
import inspect
import types
from typing import TYPE_CHECKING

import torch

from .. import builtin_calls
from ..behaviour import (
    call,
    constant,
    copy_of,
    deep_copy,
    del_attr,
    describe_value,
    get_attr,
    parts,
    python_type,
    rebuild,
    set_attr,
)
from ..source import AttrSource, Source
from ..variables import (
    BoundFunctionValue,
    ConstValue,
    DictValue,
    NewObjectValue,
    ObjectValue,
    Value,
)

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter
    from ..emit import Emitter


def allocatable(cls: type) -> bool:
    """A class whose instances capture can stand for: ``object`` allocates it
    (no ``__new__``, C base or ``__del__`` of its own), it is not abstract, and
    its attribute hooks, if it has them, are Python functions (inlined)."""
    hooks = ("__getattribute__", "__setattr__", "__delattr__")
    return (
        cls.__new__ is object.__new__
        and not hasattr(cls, "__del__")
        and not inspect.isabstract(cls)
        and not issubclass(cls, torch.nn.Module)
        and all(_own_hook(cls, name) is not _NOT_PYTHON for name in hooks)
    )


def is_plain_class(cls: type) -> bool:
    """A class capture constructs itself: allocatable, called the way ``type``
    calls classes, with a Python ``__init__`` (inlined) or none. Plain
    dataclasses have a kind of their own."""
    return (
        allocatable(cls)
        and type(cls).__call__ is type.__call__
        and _own_hook(cls, "__init__") is not _NOT_PYTHON
        and not (dataclasses.is_dataclass(cls) and builtin_calls.plain_dataclass(cls))
    )


def copies_by_state(cls: type) -> bool:
    """``copy.copy`` and ``copy.deepcopy`` of a ``cls`` go object's default way:
    a fresh object given (copies of) the original's ``__dict__``."""
    return (
        allocatable(cls)
        and not hasattr(cls, "__copy__")
        and not hasattr(cls, "__deepcopy__")
        and cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and getattr(cls, "__getstate__", None) is getattr(object, "__getstate__", None)
        and not hasattr(cls, "__setstate__")
        and cls not in copyreg.dispatch_table
        and not any("__slots__" in k.__dict__ for k in cls.__mro__)
    )


def copy_with_state(
    tx: Interpreter,
    original: Value,
    state: DictValue,
    cls_source: Source | None,
    memo: dict[int, Value] | None,
) -> NewObjectValue:
    """The copy of ``original`` (whose ``__dict__`` is ``state``) that
    ``copy.copy`` (``memo`` None) or ``copy.deepcopy`` makes."""
    cls = python_type(original)
    if not copies_by_state(cls):
        raise tx.unsupported(
            f"copying a {cls.__qualname__}, whose class changes how it is copied"
        )
    copied = new_object(cls, cls_source)
    if memo is None:
        copied.attrs.items.update(state.items)
    else:
        memo[id(original)] = copied  # before its attributes: they may hold it
        copied.attrs.items.update(
            {k: deep_copy(tx, v, memo) for k, v in state.items.items()}
        )
    return copied


_NOT_PYTHON = object()


def _own_hook(cls: type, name: str) -> types.FunctionType | object | None:
    """The class's Python ``name`` (``__init__``, ``__setattr__``...), None when
    it is object's own, ``_NOT_PYTHON`` when a C base defines it."""
    hook = inspect.getattr_static(cls, name)
    if hook is getattr(object, name):
        return None
    return hook if isinstance(hook, types.FunctionType) else _NOT_PYTHON


def new_object(cls: type, cls_source: Source | None) -> NewObjectValue:
    """A fresh instance of ``cls`` with no attributes (``object.__new__``)."""
    return NewObjectValue(cls, DictValue({}), cls_source)


@builtin_calls.constructs(is_plain_class)
def _construct(tx: Interpreter, cls_value: ObjectValue, args, kwargs) -> Value:
    cls = cls_value.value
    obj = new_object(cls, cls_value.source)
    init = _own_hook(cls, "__init__")
    if init is None:
        if args or kwargs:
            raise tx.unsupported(f"{cls.__qualname__}() takes no arguments")
        return obj
    call(tx, member(obj, "__init__", init), args, kwargs)
    return obj


def _class_source(obj: NewObjectValue, name: str) -> Source | None:
    return AttrSource(obj.cls_source, name) if obj.cls_source else None


def member(obj: NewObjectValue, name: str, attr: object) -> BoundFunctionValue:
    """The class's function ``attr`` (found as ``name``) bound to ``obj``."""
    return BoundFunctionValue(attr, obj, _class_source(obj, name))


def _class_attr(tx: Interpreter, obj: NewObjectValue, name: str) -> Value:
    """``obj.name`` found on the class: methods bound to the object, class
    variables read (and guarded) through the class."""
    source = _class_source(obj, name)
    attr = inspect.getattr_static(obj.cls, name)
    method = bound_member(attr, obj, _class_value(obj), source)
    if method is not None:
        return method
    value = getattr(obj.cls, name)
    if source is None:
        return tx.output.wrap_trusted(value)
    return tx.output.wrap(value, source)


def bound_member(
    attr: object, obj: Value, owner: Value, source: Source | None
) -> Value | None:
    """``attr``, found on ``obj``'s class (``owner``) and read from ``source``,
    bound as Python binds it: a function to the object, a classmethod to the
    class, a staticmethod to nothing; None for anything else."""
    if isinstance(attr, types.FunctionType):
        return BoundFunctionValue(attr, obj, source)
    if isinstance(attr, staticmethod):
        return ObjectValue(attr.__func__, source)
    if isinstance(attr, classmethod):
        func_source = AttrSource(source, "__func__") if source else None
        return BoundFunctionValue(attr.__func__, owner, func_source)
    return None


def _class_value(obj: NewObjectValue) -> ObjectValue:
    return ObjectValue(obj.cls, obj.cls_source)


def _part_source(obj: NewObjectValue, name: str, part: str) -> Source | None:
    source = _class_source(obj, name)
    return AttrSource(source, part) if source else None


_MISSING = object()


@get_attr.register(NewObjectValue)
def _attr(tx: Interpreter, obj: NewObjectValue, name: str) -> Value:
    """``obj.name``: through the class's ``__getattribute__`` when it has one,
    else Python's own lookup."""
    hook = _own_hook(obj.cls, "__getattribute__")
    if hook is not None:
        return call(tx, member(obj, "__getattribute__", hook), [ConstValue(name)], {})
    return generic_get_attr(tx, obj, name)


def generic_get_attr(tx: Interpreter, obj: NewObjectValue, name: str) -> Value:
    """``object.__getattribute__(obj, name)``: a property, the object's own
    attribute, the class's, then ``__getattr__``; AttributeError if none."""
    if name == "__class__":
        return _class_value(obj)
    if name == "__dict__":
        return obj.attrs
    described = inspect.getattr_static(obj.cls, name, _MISSING)
    if isinstance(described, property):
        if described.fget is None:
            raise tx.unsupported(f"reading write-only property {name!r}")
        fget = ObjectValue(described.fget, _part_source(obj, name, "fget"))
        return tx.inline(fget, [obj], {})
    if name in obj.attrs.items:
        return obj.attrs.items[name]
    if described is not _MISSING:
        return _class_attr(tx, obj, name)
    fallback = inspect.getattr_static(obj.cls, "__getattr__", None)
    if isinstance(fallback, types.FunctionType):
        return call(tx, member(obj, "__getattr__", fallback), [ConstValue(name)], {})
    raise AttributeError(f"{obj.cls.__qualname__!r} object has no attribute {name!r}")


@set_attr.register(NewObjectValue)
def _set_attr(tx: Interpreter, obj: NewObjectValue, name: str, value: Value) -> None:
    hook = _own_hook(obj.cls, "__setattr__")
    if hook is not None:
        call(tx, member(obj, "__setattr__", hook), [ConstValue(name), value], {})
    else:
        generic_set_attr(tx, obj, name, value)


def generic_set_attr(
    tx: Interpreter, obj: NewObjectValue, name: str, value: Value
) -> None:
    """``object.__setattr__(obj, name, value)``: a property's setter, else the
    object's own attribute."""
    described = inspect.getattr_static(obj.cls, name, None)
    if isinstance(described, property):
        if described.fset is None:
            raise tx.unsupported(f"assigning read-only property {name!r}")
        fset = ObjectValue(described.fset, _part_source(obj, name, "fset"))
        tx.inline(fset, [obj, value], {})
        return
    _plain_slot(tx, obj, name, described)
    obj.attrs.items[name] = value


@del_attr.register(NewObjectValue)
def _del_attr(tx: Interpreter, obj: NewObjectValue, name: str) -> None:
    hook = _own_hook(obj.cls, "__delattr__")
    if hook is not None:
        call(tx, member(obj, "__delattr__", hook), [ConstValue(name)], {})
    else:
        generic_del_attr(tx, obj, name)


def generic_del_attr(tx: Interpreter, obj: NewObjectValue, name: str) -> None:
    """``object.__delattr__(obj, name)``."""
    _plain_slot(tx, obj, name, inspect.getattr_static(obj.cls, name, None))
    if name not in obj.attrs.items:
        raise AttributeError(name)
    del obj.attrs.items[name]


def _plain_slot(tx: Interpreter, obj: NewObjectValue, name: str, described) -> None:
    """Refuse attributes a descriptor other than a slot handles."""
    if hasattr(type(described), "__set__") and not isinstance(
        described, (property, types.MemberDescriptorType)
    ):
        raise tx.unsupported(
            f"changing attribute {name!r} of a {obj.cls.__qualname__}, which a "
            f"{type(described).__qualname__} descriptor handles"
        )


# object's own attribute protocol, which the class's hooks reach with super()
# or by calling object.__getattribute__ / __setattr__ / __delattr__ directly.
OBJECT_SLOTS = {
    object.__getattribute__: generic_get_attr,
    object.__setattr__: generic_set_attr,
    object.__delattr__: generic_del_attr,
}


def _object_slot(slot):
    def handler(tx: Interpreter, obj: Value, *args: Value) -> Value:
        if not isinstance(obj, NewObjectValue):
            raise tx.unsupported(
                f"calling object.{slot.__name__} on a {describe_value(obj)}"
            )
        name = constant(tx, args[0])
        return OBJECT_SLOTS[slot](tx, obj, name, *args[1:]) or ConstValue(None)

    return handler


for _slot in OBJECT_SLOTS:
    builtin_calls.handles(_slot)(_object_slot(_slot))


@copy_of.register(NewObjectValue)
def _copy(tx: Interpreter, obj: NewObjectValue, memo) -> Value:
    return copy_with_state(tx, obj, obj.attrs, obj.cls_source, memo)


@python_type.register(NewObjectValue)
def _type(obj: NewObjectValue) -> type:
    return obj.cls


@parts.register(NewObjectValue)
def _parts(obj: NewObjectValue) -> dict[object, Value]:
    return {"__dict__": obj.attrs}


@describe_value.register(NewObjectValue)
def _describe(obj: NewObjectValue) -> str:
    return obj.cls.__qualname__


@rebuild.register(NewObjectValue)
def _rebuild(out: Emitter, obj: NewObjectValue) -> str:
    return out.new_object(obj.cls, obj, obj.attrs.items)
