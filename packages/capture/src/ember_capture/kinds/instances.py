"""nn.Module instances and objects of user classes read from the frame:
attributes read the way Python would (the module's parameters, buffers and
submodules, properties inlined, methods bound), attribute writes recorded and
replayed, module calls inlined behind a no-hooks guard, and the containers
(ModuleList, ModuleDict, ...) indexed and iterated under a length guard."""

from __future__ import annotations

import inspect
import types
from typing import TYPE_CHECKING

import torch

from .. import builtin_calls
from ..behaviour import (
    call,
    describe_value,
    get_attr,
    guarded_len,
    item_of,
    iterate,
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
    MethodValue,
    ModuleValue,
    ObjectValue,
    UserObjectValue,
    Value,
)

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
        raise tx.unsupported("slicing a module container")
    item = obj.value[k]
    modules = obj.value.__dict__.get("_modules", {})
    if isinstance(k, int) and isinstance(obj.value, MODULE_CONTAINERS):
        if k < 0:
            guarded_len(tx, obj)  # [-1] names another entry when the list grows
        name = list(modules)[k] if -len(modules) <= k < len(modules) else None
        if name is not None and modules[name] is item:  # length is guarded
            return tx.output.wrap(item, ModuleEntrySource(obj.source, "_modules", name))
    return tx.output.wrap(item, ItemSource(obj.source, k))


@rebuild.register(ModuleValue)
def _rebuild_module(out: Emitter, v: ModuleValue) -> str:
    return out.read(v.source) if v.source else out.constant(v.value)


@rebuild.register(UserObjectValue)
def _rebuild_object(out: Emitter, v: UserObjectValue) -> str:
    if not v.source:
        raise TypeError(f"a {type(v).__name__} has no value outside capture")
    return out.read(v.source)
