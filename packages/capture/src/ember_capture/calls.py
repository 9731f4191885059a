"""What attribute reads, calls and operators mean for each kind of value.

Tensor operations become graph nodes; metadata reads (``x.shape``, ``x.dtype``)
become constants, guarded through the tensor's own guard; Python constants fold;
user functions and nn.Module forwards are inlined by a child interpreter; builtins
are handled by a table registered next to each handler.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import math
import operator
import types
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .guards import Guard, GuardKind, module_has_no_hooks
from .source import AttrSource, ItemSource, Source
from .variables import (
    ConstValue,
    ListValue,
    MethodValue,
    ModuleValue,
    ObjectValue,
    TensorValue,
    TupleValue,
    UserObjectValue,
    Value,
)

if TYPE_CHECKING:
    from .bytecode_interp import Interpreter

# Tensor attributes that are facts about metadata: captured as constants.
_TENSOR_META_ATTRS = frozenset(
    {"shape", "dtype", "ndim", "requires_grad", "layout", "is_sparse", "is_quantized"}
)
# Tensor attributes that compute a new tensor: captured as graph nodes.
_TENSOR_VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag"})
# Tensor methods whose answer depends only on metadata: evaluated on the meta tensor.
_TENSOR_META_METHODS = frozenset(
    {
        "size",
        "dim",
        "ndimension",
        "numel",
        "nelement",
        "stride",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "element_size",
    }
)
# torch functions that change global state or leave the program: never traced.
_TORCH_SIDE_EFFECTS = frozenset(
    {
        "manual_seed",
        "seed",
        "set_rng_state",
        "get_rng_state",
        "set_default_dtype",
        "set_default_device",
        "set_default_tensor_type",
        "set_grad_enabled",
        "use_deterministic_algorithms",
        "set_printoptions",
        "set_num_threads",
        "save",
        "load",
        "compile",
    }
)
# torch functions answered from metadata or guarded global state.
_TORCH_META_FUNCTIONS: dict[Callable, Callable] = {
    torch.is_tensor: lambda v: isinstance(v, TensorValue),
    torch.is_floating_point: lambda v: v.meta.is_floating_point(),
    torch.is_complex: lambda v: v.meta.is_complex(),
    torch.numel: lambda v: v.meta.numel(),
    torch.is_grad_enabled: lambda: torch.is_grad_enabled(),
    torch.get_default_dtype: lambda: torch.get_default_dtype(),
}

# BINARY_OP / unary operators that have a tensor meaning.
TENSOR_OPERATORS = frozenset(
    {
        operator.add, operator.sub, operator.mul, operator.truediv,
        operator.floordiv, operator.mod, operator.pow, operator.matmul,
        operator.and_, operator.or_, operator.xor, operator.lshift, operator.rshift,
        operator.iadd, operator.isub, operator.imul, operator.itruediv,
        operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul,
        operator.iand, operator.ior, operator.ixor, operator.ilshift,
        operator.irshift, operator.neg, operator.pos, operator.invert, operator.abs,
        operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
        operator.getitem,
    }
)  # fmt: skip


def _changes_global_state(fn: object) -> bool:
    # By name, not identity: torch re-wraps some of these functions at run time.
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__name__", None)
    return name in _TORCH_SIDE_EFFECTS and module.startswith("torch")


@functools.cache
def _torch_callables() -> frozenset[int]:
    """ids of the callables in torch's public operator namespaces."""
    ids = set()
    for namespace in (
        torch,
        torch.nn.functional,
        torch.special,
        torch.linalg,
        torch.fft,
        torch.Tensor,
        torch._C.TensorBase,
    ):
        # vars(), not dir()+getattr(): torch loads some submodules lazily on
        # attribute access (torch.export would import torch._dynamo).
        for name, obj in vars(namespace).items():
            if name.startswith("_") or name in _TORCH_SIDE_EFFECTS:
                continue
            if callable(obj) and not isinstance(obj, (type, types.ModuleType)):
                ids.add(id(obj))
    return frozenset(ids)


def is_torch_op(fn: object) -> bool:
    return id(fn) in _torch_callables() or isinstance(
        fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
    )


# -- attribute reads ----------------------------------------------------------


def get_attr(tx: Interpreter, obj: Value, name: str) -> Value:
    """The value of ``obj.name``."""
    if isinstance(obj, TensorValue):
        return _tensor_attr(tx, obj, name)
    if isinstance(obj, (ModuleValue, UserObjectValue)):
        return _instance_attr(tx, obj, name)
    if isinstance(obj, (ObjectValue, ConstValue)) and obj.source is not None:
        return tx.output.wrap(getattr(obj.value, name), AttrSource(obj.source, name))
    if isinstance(obj, (ObjectValue, ConstValue)):
        real = getattr(obj.value, name)
        if callable(real) and not isinstance(real, type):
            return MethodValue(obj, name)
        return ConstValue(real)
    raise tx.unsupported(f"reading attribute {name!r} of a {type(obj).__name__}")


def _tensor_attr(tx: Interpreter, t: TensorValue, name: str) -> Value:
    if name in _TENSOR_META_ATTRS:
        return ConstValue(getattr(t.meta, name))
    if name == "device":
        return ConstValue(t.device)
    if name == "is_cuda":
        return ConstValue(t.device.type == "cuda")
    if name in _TENSOR_VIEW_ATTRS:
        return tx.output.call_tensor_op("call_function", getattr, (t, name), {})
    if callable(getattr(torch.Tensor, name, None)):
        return MethodValue(t, name)
    raise tx.unsupported(
        f"reading tensor attribute {name!r}", "compute it outside the compiled code"
    )


def _instance_attr(tx: Interpreter, obj: Value, name: str) -> Value:
    """``obj.name`` for an nn.Module or user object, read the way Python would."""
    instance = obj.value
    source = AttrSource(obj.source, name)
    if isinstance(instance, torch.nn.Module):
        for table in ("_parameters", "_buffers", "_modules"):
            entries = instance.__dict__.get(table, {})
            if name in entries:
                return tx.output.wrap(entries[name], source)
    cls_attr = inspect.getattr_static(type(instance), name, None)
    if isinstance(cls_attr, property):
        return tx.inline(
            ObjectValue(cls_attr.fget, _class_attr_source(obj, name, "fget")),
            [obj],
            {},
        )
    if name in getattr(instance, "__dict__", {}):
        return tx.output.wrap(instance.__dict__[name], source)
    if isinstance(cls_attr, types.FunctionType):
        return MethodValue(obj, name)
    return tx.output.wrap(getattr(instance, name), source)


def _class_attr_source(obj: Value, name: str, *attrs: str) -> Source:
    """``type(obj).name`` (then ``attrs``): where a method's function lives."""
    source = AttrSource(AttrSource(obj.source, "__class__"), name)
    for attr in attrs:
        source = AttrSource(source, attr)
    return source


# -- calls ----------------------------------------------------------------------


def call(tx: Interpreter, fn: Value, args: list[Value], kwargs: dict[str, Value]):
    """The value of ``fn(*args, **kwargs)``."""
    if isinstance(fn, MethodValue):
        return _call_method(tx, fn, args, kwargs)
    if isinstance(fn, ModuleValue):
        return _call_module(tx, fn, args, kwargs)
    if isinstance(fn, (ObjectValue, ConstValue)):
        return _call_object(tx, fn, args, kwargs)
    raise tx.unsupported(f"calling a {type(fn).__name__}")


def _call_method(tx, fn: MethodValue, args, kwargs) -> Value:
    receiver = fn.receiver
    if isinstance(receiver, TensorValue):
        if fn.name in _TENSOR_META_METHODS:
            meta_args = [_const(tx, a) for a in args]
            meta_kwargs = {k: _const(tx, v) for k, v in kwargs.items()}
            return ConstValue(
                getattr(receiver.meta, fn.name)(*meta_args, **meta_kwargs)
            )
        return tx.output.call_tensor_op(
            "call_method", fn.name, (receiver, *args), kwargs
        )
    if isinstance(receiver, (ModuleValue, UserObjectValue)):
        method = inspect.getattr_static(type(receiver.value), fn.name)
        source = _class_attr_source(receiver, fn.name)
        return tx.inline(ObjectValue(method, source), [receiver, *args], kwargs)
    if isinstance(receiver, (ConstValue, ObjectValue)):
        return _call_object(
            tx, ObjectValue(getattr(receiver.value, fn.name)), args, kwargs
        )
    raise tx.unsupported(f"calling method {fn.name!r} of a {type(receiver).__name__}")


def _call_module(tx, m: ModuleValue, args, kwargs) -> Value:
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
    forward = inspect.getattr_static(type(mod), "forward")
    source = _class_attr_source(m, "forward")
    return tx.inline(ObjectValue(forward, source), [m, *args], kwargs)


def _call_object(tx, fn: Value, args, kwargs) -> Value:
    target = fn.value
    if _changes_global_state(target):
        raise tx.unsupported(
            f"calling {_describe(target)}, which changes torch's global state",
            "call it outside the compiled function",
        )
    handler = BUILTIN_HANDLERS.get(target) if _hashable(target) else None
    if handler is not None:
        return handler(tx, *args, **kwargs)
    if target in _TORCH_META_FUNCTIONS:
        return ConstValue(_TORCH_META_FUNCTIONS[target](*args, **kwargs))
    if is_torch_op(target) or (
        target in TENSOR_OPERATORS and _any_tensor(args, kwargs)
    ):
        return tx.output.call_tensor_op("call_function", target, tuple(args), kwargs)
    if target in _PURE_FUNCTIONS and _all_constant(args, kwargs):
        return _fold(tx, target, args, kwargs)
    if isinstance(target, types.FunctionType):
        return tx.inline(fn, args, kwargs)
    raise tx.unsupported(
        f"calling {_describe(target)}",
        "ember cannot trace into this callable; move it outside the compiled code",
    )


def _fold(tx, target, args, kwargs) -> Value:
    try:
        result = target(
            *[_const(tx, a) for a in args],
            **{k: _const(tx, v) for k, v in kwargs.items()},
        )
    except Exception as e:
        raise tx.unsupported(
            f"{_describe(target)} raised {type(e).__name__}: {e}",
            "exceptions inside compiled code are not supported yet",
        ) from e
    return constant_value(result)


def constant_value(value: object) -> Value:
    if type(value) is tuple:
        return TupleValue(tuple(constant_value(v) for v in value))
    if type(value) is list:
        return ListValue([constant_value(v) for v in value])
    return ConstValue(value)


def _const(tx, v: Value) -> object:
    if isinstance(v, (ConstValue, ObjectValue)):
        return v.value
    if isinstance(v, TupleValue):
        return tuple(_const(tx, i) for i in v.items)
    if isinstance(v, ListValue):
        return [_const(tx, i) for i in v.items]
    raise tx.unsupported(f"using a {type(v).__name__} where a constant is needed")


def _any_tensor(args, kwargs) -> bool:
    return any(isinstance(a, TensorValue) for a in [*args, *kwargs.values()])


def _all_constant(args, kwargs) -> bool:
    def ok(v):
        if isinstance(v, (TupleValue, ListValue)):
            return all(ok(i) for i in v.items)
        return isinstance(v, (ConstValue, ObjectValue))

    return all(ok(a) for a in [*args, *kwargs.values()])


def _hashable(obj: object) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def _describe(target: object) -> str:
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    module = getattr(target, "__module__", None)
    if name:
        return f"{module}.{name}" if module else name
    return f"an object of type {type(target).__qualname__}"


# Python functions that are pure on constants: folded at capture time.
_PURE_FUNCTIONS = frozenset(
    {
        *(v for v in vars(operator).values() if callable(v)),
        *(v for v in vars(math).values() if callable(v)),
        builtins.abs, builtins.min, builtins.max, builtins.sum, builtins.round,
        builtins.divmod, builtins.int, builtins.float, builtins.bool, builtins.str,
        builtins.tuple, builtins.list, builtins.len, builtins.range, builtins.pow,
        builtins.all, builtins.any, builtins.sorted, builtins.reversed,
        builtins.zip, builtins.enumerate, builtins.repr, builtins.format,
        builtins.slice, torch.Size,
    }
)  # fmt: skip


# -- builtins with their own meaning ----------------------------------------------

BUILTIN_HANDLERS: dict[object, Callable[..., Value]] = {}


def builtin(*targets: object):
    def register(handler):
        for t in targets:
            BUILTIN_HANDLERS[t] = handler
        return handler

    return register


@builtin(builtins.len)
def _len(tx, obj: Value) -> Value:
    if isinstance(obj, (TupleValue, ListValue)):
        return ConstValue(len(obj.items))
    if isinstance(obj, TensorValue):
        if obj.meta.dim() == 0:
            raise tx.unsupported("len() of a 0-d tensor")
        return ConstValue(obj.meta.shape[0])
    return ConstValue(len(_const(tx, obj)))


@builtin(builtins.isinstance)
def _isinstance(tx, obj: Value, classes: Value) -> Value:
    return ConstValue(issubclass(_python_type(obj), _const(tx, classes)))


def _python_type(v: Value) -> type:
    if isinstance(v, TensorValue):
        return v.python_type
    if isinstance(v, (ConstValue, ObjectValue, ModuleValue, UserObjectValue)):
        return type(v.value)
    if isinstance(v, TupleValue):
        return tuple
    if isinstance(v, ListValue):
        return list
    return type(v)


@builtin(builtins.getattr)
def _getattr(tx, obj: Value, name: Value, default: Value | None = None) -> Value:
    attr = _const(tx, name)
    if default is None:
        return get_attr(tx, obj, attr)
    try:
        return get_attr(tx, obj, attr)
    except AttributeError:
        return default


@builtin(builtins.hasattr)
def _hasattr(tx, obj: Value, name: Value) -> Value:
    try:
        get_attr(tx, obj, _const(tx, name))
    except AttributeError:
        return ConstValue(False)
    return ConstValue(True)


# -- subscripts -----------------------------------------------------------------


def get_item(tx: Interpreter, obj: Value, index: Value) -> Value:
    """The value of ``obj[index]``."""
    if isinstance(obj, TensorValue) or isinstance(index, TensorValue):
        return tx.output.call_tensor_op(
            "call_function", operator.getitem, (obj, index), {}
        )
    key = _const(tx, index)
    if isinstance(obj, (TupleValue, ListValue)):
        picked = obj.items[key]
        if not isinstance(key, slice):
            return picked
        return TupleValue(picked) if isinstance(obj, TupleValue) else ListValue(picked)
    if isinstance(obj, ModuleValue):
        return tx.output.wrap(obj.value[key], ItemSource(obj.source, key))
    if isinstance(obj, ConstValue):
        return constant_value(obj.value[key])
    raise tx.unsupported(f"indexing a {type(obj).__name__}")
