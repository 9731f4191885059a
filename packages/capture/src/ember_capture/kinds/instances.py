"""nn.Module instances and objects of user classes read from the frame:
attributes read the way Python would (the module's parameters, buffers and
submodules, properties inlined, methods bound), attribute writes recorded and
replayed, module calls inlined behind a no-hooks guard, and the containers
(ModuleList, ModuleDict, ...) indexed and iterated under a length guard."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .. import builtin_calls
from ..behaviour import (
    call,
    constant,
    contains,
    copy_of,
    describe_value,
    get_attr,
    guarded_len,
    item_of,
    iterate,
    length,
    python_type,
    rebuild,
    set_attr,
    truth,
)
from ..checks import module_has_no_hooks, module_has_only_forward_hooks
from ..guards import Guard, GuardKind
from ..source import AttrSource, ItemSource, KeysSource, ModuleEntrySource, Source
from ..torch_ops import MODULE_CONTAINERS
from ..variables import (
    BoundFunctionValue,
    ConstValue,
    DictValue,
    ListValue,
    MethodValue,
    ModuleValue,
    ObjectValue,
    TensorValue,
    UserObjectValue,
    Value,
)
from .hooks import call_with_hooks
from .new_objects import bound_member, copy_with_state

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter
    from ..emit import Emitter


# Readers that answer ``obj.name`` for particular objects (os.environ.get, a
# logger's methods) before Python's own lookup; None passes to the next.
STAND_INS: list[Callable[[Value, str], Value | None]] = []


@python_type.register(ModuleValue, UserObjectValue)
def _type(v: Value) -> type:
    return type(v.value)


@get_attr.register(ModuleValue, UserObjectValue)
def _attr(tx: Interpreter, obj: Value, name: str) -> Value:
    """``obj.name`` for an nn.Module or user object, read the way Python would."""
    instance = obj.value
    written = tx.output.attr_writes.get((id(instance), name))
    if written is not None:
        return written
    for reader in STAND_INS:
        stand_in = reader(obj, name)
        if stand_in is not None:
            return stand_in
    if obj.source is None:  # one of torch's modules, made in the function
        method = inspect.getattr_static(type(instance), name, None)
        if isinstance(method, types.FunctionType):
            return BoundFunctionValue(method, obj, None)
        return tx.output.wrap_trusted(getattr(instance, name))
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
        plain = not isinstance(instance, torch.nn.Module)
        return tx.output.wrap(instance.__dict__[name], source, object_attr=plain)
    class_source = class_attr_source(obj, name)
    if cls_attr is getattr(torch.nn.Module, name, None) and (
        (ModuleValue, name) in builtin_calls.METHOD_HANDLERS
    ):
        return MethodValue(obj, name)  # nn.Module's own iteration methods
    owner = ObjectValue(type(instance), AttrSource(obj.source, "__class__"))
    method = bound_member(cls_attr, obj, owner, class_source)
    if method is not None:
        return method
    return tx.output.wrap(getattr(instance, name), source)


def _stateless_torch_module(cls: type) -> bool:
    return issubclass(cls, torch.nn.Module) and cls.__module__.startswith(
        "torch.nn.modules."
    )


@builtin_calls.constructs(_stateless_torch_module)
def _construct_module(tx: Interpreter, cls_value: Value, args, kwargs) -> Value:
    """``nn.CrossEntropyLoss()``, ``nn.GELU()``... made inside the function:
    built now from constant arguments, as torch's own code that holds no
    parameters or buffers; rebuilt as that same object if it escapes."""
    cls = cls_value.value
    if any(isinstance(a, TensorValue) for a in [*args, *kwargs.values()]):
        raise tx.unsupported(
            f"constructing a {cls.__qualname__} from a tensor, which it would "
            "hold as a parameter or buffer",
            "build the module in __init__ and call it in forward",
        )
    module = cls(*[constant(tx, a) for a in args], **_constants(tx, kwargs))
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        raise tx.unsupported(
            f"constructing a {cls.__qualname__}, which holds parameters or buffers",
            "build the module in __init__ and call it in forward",
        )
    return ModuleValue(module)


def _constants(tx: Interpreter, kwargs: dict[str, Value]) -> dict[str, object]:
    return {k: constant(tx, v) for k, v in kwargs.items()}


def class_attr_source(obj: Value, name: str, *attrs: str) -> Source:
    """``type(obj).name`` (then ``attrs``): where a method's function lives."""
    source = AttrSource(AttrSource(obj.source, "__class__"), name)
    for attr in attrs:
        source = AttrSource(source, attr)
    return source


@copy_of.register(UserObjectValue)
def _copy(tx: Interpreter, obj: UserObjectValue, memo) -> Value:
    """A copy of an object read from the frame: its ``__dict__`` read (each
    entry guarded), with the writes this function made to it so far."""
    instance = obj.value
    if not hasattr(instance, "__dict__"):
        raise tx.unsupported(f"copying a {describe_value(obj)} without a __dict__")
    state = tx.output.wrap(instance.__dict__, AttrSource(obj.source, "__dict__"))
    items = dict(state.items)
    for (owner, name), value in tx.output.attr_writes.items():
        if owner == id(instance):
            items[name] = value
    cls_source = AttrSource(obj.source, "__class__")
    return copy_with_state(tx, obj, DictValue(items), cls_source, memo)


@set_attr.register(ModuleValue, UserObjectValue)
def _set_attr(tx: Interpreter, obj: Value, name: str, value: Value) -> None:
    if obj.source is None:
        raise tx.unsupported(f"assigning attribute {name!r} of a {describe_value(obj)}")
    tx.output.write_attr(obj, name, value)


# Modules whose forward drives machinery outside any graph (C++ objects of
# torch.distributed): a call of one is a graph break at once, with this reason
# and hint, instead of a break deep inside their forward.
MODULES_CALLED_AS_THEY_ARE: dict[str, tuple[str, str]] = {
    "torch.nn.parallel.distributed.DistributedDataParallel": (
        "calling a DistributedDataParallel module (its forward drives DDP's "
        "C++ reducer)",
        "the call runs as Python between two graphs; the module DDP wraps can "
        "be compiled on its own",
    ),
}


_MODULE_CALL = torch.nn.Module.__call__


def _called_as_it_is(mod: torch.nn.Module) -> tuple[str, str] | None:
    for cls in type(mod).__mro__:
        found = MODULES_CALLED_AS_THEY_ARE.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            return found
    return None


@call.register(ModuleValue)
def _call_module(tx: Interpreter, m: ModuleValue, args, kwargs) -> Value:
    mod = m.value
    as_it_is = _called_as_it_is(mod)
    if as_it_is is not None:
        raise tx.unsupported(*as_it_is)
    if type(mod).__call__ is not _MODULE_CALL:
        # the class defines its own __call__: Python runs that, not forward
        return call(tx, get_attr(tx, m, "__call__"), args, kwargs)
    hooked = not module_has_no_hooks(mod)
    if hooked and (m.source is None or not module_has_only_forward_hooks(mod)):
        raise tx.unsupported(
            f"calling module {type(mod).__qualname__} that has backward or "
            "global hooks",
            "remove those hooks or call the module outside the compiled code",
        )
    if "forward" in mod.__dict__:
        raise tx.unsupported(
            f"calling module {type(mod).__qualname__} whose forward is replaced on "
            "the instance",
            "define forward on the class",
        )
    forward = get_attr(tx, m, "forward")
    if hooked:
        return call_with_hooks(tx, m, forward, args, kwargs)
    if m.source is not None:  # one made in the function has no hooks to add
        tx.output.guards.add(Guard(GuardKind.NO_HOOKS, m.source, None))
    return call(tx, forward, args, kwargs)


@truth.register(ModuleValue)
def _truth(tx: Interpreter, v: ModuleValue) -> bool:
    if isinstance(v.value, MODULE_CONTAINERS):
        return bool(guarded_len(tx, v))
    cls = type(v.value)
    if hasattr(cls, "__bool__") or hasattr(cls, "__len__"):
        raise tx.unsupported(f"the truth of a {cls.__qualname__} module")
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
