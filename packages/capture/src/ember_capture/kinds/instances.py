"""nn.Module instances and objects of user classes read from the frame:
attributes read the way Python would (the module's parameters, buffers and
submodules, properties inlined, methods bound), attribute writes recorded and
replayed, module calls inlined behind a no-hooks guard, and the containers
(ModuleList, ModuleDict, ...) indexed and iterated under a length guard."""

from __future__ import annotations

import collections.abc
import inspect
import types
from typing import TYPE_CHECKING

import torch

from .. import builtin_calls
from ..behaviour import (
    call,
    constant,
    contains,
    describe_value,
    get_attr,
    get_item,
    guarded_len,
    item_of,
    iterate,
    length,
    rebuild,
    set_attr,
    truth,
)
from ..guards import Guard, GuardKind, module_has_no_hooks
from ..source import AttrSource, ItemSource, KeysSource, ModuleEntrySource, Source
from ..torch_ops import MODULE_CONTAINERS
from ..variables import (
    BoundFunctionValue,
    ConstValue,
    ListValue,
    MethodValue,
    ModuleValue,
    ObjectValue,
    UserObjectValue,
    Value,
)
from . import environ

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter
    from ..emit import Emitter


@get_attr.register(ModuleValue, UserObjectValue)
def _attr(tx: Interpreter, obj: Value, name: str) -> Value:
    """``obj.name`` for an nn.Module or user object, read the way Python would."""
    instance = obj.value
    written = tx.output.attr_writes.get((id(instance), name))
    if written is not None:
        return written
    stand_in = environ.reader(instance, name)
    if stand_in is not None:
        return stand_in
    source = AttrSource(obj.source, name)
    if isinstance(instance, torch.nn.Module):
        for table in ("_parameters", "_buffers", "_modules"):
            entries = instance.__dict__.get(table, {})
            if name in entries:
                entry = ModuleEntrySource(obj.source, table, name)
                return tx.output.wrap(entries[name], entry)
    cls_attr = inspect.getattr_static(type(instance), name, None)
    if isinstance(cls_attr, property):
        fget = ObjectValue(cls_attr.fget, class_attr_source(obj, name, "fget"))
        return tx.inline(fget, [obj], {})
    if name in getattr(instance, "__dict__", {}):
        return tx.output.wrap(instance.__dict__[name], source)
    class_source = class_attr_source(obj, name)
    if cls_attr is getattr(torch.nn.Module, name, None) and (
        (ModuleValue, name) in builtin_calls.METHOD_HANDLERS
    ):
        return MethodValue(obj, name)  # nn.Module's own iteration methods
    if isinstance(cls_attr, types.FunctionType):
        return BoundFunctionValue(cls_attr, obj, class_source)
    if isinstance(cls_attr, staticmethod):
        return ObjectValue(cls_attr.__func__, class_source)
    if isinstance(cls_attr, classmethod):
        owner = ObjectValue(type(instance), AttrSource(obj.source, "__class__"))
        func_source = AttrSource(class_source, "__func__")
        return BoundFunctionValue(cls_attr.__func__, owner, func_source)
    return tx.output.wrap(getattr(instance, name), source)


def class_attr_source(obj: Value, name: str, *attrs: str) -> Source:
    """``type(obj).name`` (then ``attrs``): where a method's function lives."""
    source = AttrSource(AttrSource(obj.source, "__class__"), name)
    for attr in attrs:
        source = AttrSource(source, attr)
    return source


@set_attr.register(ModuleValue, UserObjectValue)
def _set_attr(tx: Interpreter, obj: Value, name: str, value: Value) -> None:
    if obj.source is None:
        raise tx.unsupported(f"assigning attribute {name!r} of a {describe_value(obj)}")
    tx.output.write_attr(obj, name, value)


@call.register(ModuleValue)
def _call_module(tx: Interpreter, m: ModuleValue, args, kwargs) -> Value:
    mod = m.value
    if not module_has_no_hooks(mod):
        raise tx.unsupported(
            f"calling module {type(mod).__qualname__} that has hooks",
            "remove the hooks or call the module outside the compiled code",
        )
    if "forward" in mod.__dict__:
        raise tx.unsupported(
            f"calling module {type(mod).__qualname__} whose forward is replaced on "
            "the instance",
            "define forward on the class",
        )
    tx.output.guards.add(Guard(GuardKind.NO_HOOKS, m.source, None))
    forward = get_attr(tx, m, "forward")
    return call(tx, forward, args, kwargs)


@truth.register(ModuleValue, UserObjectValue)
def _truth(tx: Interpreter, v: Value) -> bool:
    if isinstance(v.value, MODULE_CONTAINERS):
        return bool(guarded_len(tx, v))
    cls = type(v.value)
    if hasattr(cls, "__bool__") or hasattr(cls, "__len__"):
        kind = "module" if isinstance(v, ModuleValue) else "object"
        raise tx.unsupported(f"the truth of a {cls.__qualname__} {kind}")
    return True


@iterate.register(ModuleValue)
def _iterate(tx: Interpreter, v: ModuleValue) -> list[Value]:
    if not isinstance(v.value, MODULE_CONTAINERS):
        raise tx.unsupported(f"iterating over a {type(v.value).__qualname__}")
    n = guarded_len(tx, v)
    if isinstance(v.value, (torch.nn.ModuleDict, torch.nn.ParameterDict)):
        keys = list(v.value)
        source = KeysSource(v.source)
        tx.output.guards.add(Guard(GuardKind.EQUALS_MATCH, source, (list, keys)))
        return [ConstValue(k) for k in keys]
    return [item_of(tx, v, i) for i in range(n)]


@item_of.register(ModuleValue)
def _item(tx: Interpreter, obj: ModuleValue, k: object) -> Value:
    if isinstance(k, slice):
        if not isinstance(obj.value, _SLICED_AS_LISTS):
            raise tx.unsupported(f"slicing a {type(obj.value).__qualname__}")
        # ``layers[:n]`` is iterated or indexed: its entries, under the length
        # guard (a Sequential's slice is called, so it is not a list).
        n = guarded_len(tx, obj)
        return ListValue([item_of(tx, obj, i) for i in range(n)[k]])
    item = obj.value[k]
    modules = obj.value.__dict__.get("_modules", {})
    if isinstance(k, int) and isinstance(obj.value, MODULE_CONTAINERS):
        if k < 0:
            guarded_len(tx, obj)  # [-1] names another entry when the list grows
        name = list(modules)[k] if -len(modules) <= k < len(modules) else None
        if name is not None and modules[name] is item:  # length is guarded
            return tx.output.wrap(item, ModuleEntrySource(obj.source, "_modules", name))
    return tx.output.wrap(item, ItemSource(obj.source, k))


@contains.register(ModuleValue)
def _module_contains(tx: Interpreter, m: ModuleValue, item: Value) -> bool:
    iterate(tx, m)  # guards the container's length (and a dict's keys)
    return constant(tx, item) in m.value


@length.register(ModuleValue)
def _module_length(tx: Interpreter, m: ModuleValue) -> int:
    return guarded_len(tx, m)


# -- the protocols of user classes: their Python dunders, inlined ----------------


def _dunder(obj: Value, name: str) -> BoundFunctionValue | None:
    """``type(obj).name`` bound to ``obj`` when the class defines it in Python."""
    fn = inspect.getattr_static(type(obj.value), name, None)
    if isinstance(fn, types.FunctionType):
        return BoundFunctionValue(fn, obj, class_attr_source(obj, name))
    return None


@get_item.register(UserObjectValue)
def _object_item(tx: Interpreter, obj: UserObjectValue, index: Value) -> Value:
    method = _dunder(obj, "__getitem__")
    if method is None:
        raise tx.unsupported(f"indexing a {describe_value(obj)}")
    return call(tx, method, [index], {})


@contains.register(UserObjectValue)
def _object_contains(tx: Interpreter, obj: UserObjectValue, item: Value) -> bool:
    test = inspect.getattr_static(type(obj.value), "__contains__", None)
    if test is collections.abc.Mapping.__contains__:
        # The mixin tries ``self[key]`` and catches KeyError; by the Mapping
        # contract that is ``key in iter(self)``, which inlines without one.
        keys = [constant(tx, k) for k in iterate(tx, obj)]
        return constant(tx, item) in keys
    method = _dunder(obj, "__contains__")
    if method is None:
        raise tx.unsupported(f"`in` on a {describe_value(obj)}")
    return truth(tx, call(tx, method, [item], {}))


@iterate.register(UserObjectValue)
def _object_iterate(tx: Interpreter, obj: UserObjectValue) -> list[Value]:
    method = _dunder(obj, "__iter__")
    if method is None:
        raise tx.unsupported(f"iterating over a {describe_value(obj)}")
    iterator = call(tx, method, [], {})
    if isinstance(iterator, UserObjectValue):  # an iterator object: __next__ runs
        raise tx.unsupported(f"iterating over a {describe_value(obj)} iterator")
    return iterate(tx, iterator)


@length.register(UserObjectValue)
def _object_length(tx: Interpreter, obj: UserObjectValue) -> int:
    method = _dunder(obj, "__len__")
    if method is None:
        raise tx.unsupported(f"len() of a {describe_value(obj)}")
    return constant(tx, call(tx, method, [], {}))


# Module containers whose slices become lists of their entries.
_SLICED_AS_LISTS = (torch.nn.ModuleList, torch.nn.ParameterList)


@rebuild.register(ModuleValue)
def _rebuild_module(out: Emitter, v: ModuleValue) -> str:
    return out.read(v.source) if v.source else out.constant(v.value)


@rebuild.register(UserObjectValue)
def _rebuild_object(out: Emitter, v: UserObjectValue) -> str:
    if not v.source:
        raise TypeError(f"a {type(v).__name__} has no value outside capture")
    return out.read(v.source)
