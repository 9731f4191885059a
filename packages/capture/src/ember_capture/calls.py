"""What attribute reads, calls, subscripts, iteration and truth mean for each value.

Tensor operations become graph nodes; metadata reads (``x.shape``, ``x.dtype``)
become constants, guarded through the tensor's own guard; Python constants fold;
user functions, methods and nn.Module forwards are inlined by a child interpreter;
builtins with a meaning of their own live in ``builtin_calls.py``.
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

from . import autocast, builtin_calls
from .guards import Guard, GuardKind, module_has_no_hooks
from .source import (
    AttrSource,
    ItemSource,
    KeysSource,
    LenSource,
    ModuleEntrySource,
    Source,
)
from .variables import (
    AutocastExitValue,
    BoundFunctionValue,
    ConstValue,
    ContextExitValue,
    DataclassValue,
    DictValue,
    FunctionValue,
    GeneratorValue,
    IteratorValue,
    ListValue,
    MethodValue,
    ModuleValue,
    NamedTupleValue,
    ObjectValue,
    SuperValue,
    TensorValue,
    TupleValue,
    UserObjectValue,
    Value,
)

if TYPE_CHECKING:
    from .bytecode_interp import Interpreter

# Tensor attributes that are facts about metadata: captured as constants.
_TENSOR_META_ATTRS = frozenset(
    {
        "shape",
        "dtype",
        "ndim",
        "requires_grad",
        "layout",
        "is_sparse",
        "is_sparse_csr",
        "is_quantized",
        "is_nested",
        "is_mkldnn",
    }
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
# Tensor methods that change a tensor's autograd identity, which a graph cannot
# express (a graph's intermediate never becomes a new leaf): they break the graph,
# so the tensor that comes out is the graph input of the next one.
_TENSOR_AUTOGRAD_METHODS = {
    "requires_grad_": (
        "turning on gradients of a tensor with requires_grad_() inside the "
        "compiled function",
        "the graph breaks here; call requires_grad_() before the compiled "
        "function to keep one graph",
    ),
    "retain_grad": (
        "retain_grad() inside the compiled function",
        "call it outside the compiled function",
    ),
}
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
        "use_deterministic_algorithms",
        "set_printoptions",
        "set_num_threads",
        "save",
        "load",
        "compile",
        # autocast switches: a with-block over torch.autocast is captured instead
        "set_autocast_enabled",
        "set_autocast_dtype",
        "set_autocast_cache_enabled",
        "autocast_increment_nesting",
        "autocast_decrement_nesting",
        "clear_autocast_cache",
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
    torch.are_deterministic_algorithms_enabled: (
        lambda: torch.are_deterministic_algorithms_enabled()
    ),
    torch.is_inference_mode_enabled: lambda: torch.is_inference_mode_enabled(),
    torch.is_autocast_enabled: lambda *device: torch.is_autocast_enabled(
        *(d.value for d in device)
    ),
    torch._C._is_any_autocast_enabled: lambda: torch._C._is_any_autocast_enabled(),
    torch._C._len_torch_dispatch_stack: lambda: torch._C._len_torch_dispatch_stack(),
    # Inputs are plain tensors (checked when wrapped): no __torch_function__.
    torch._C._has_torch_function: lambda *args: False,
    torch._C._has_torch_function_unary: lambda *args: False,
    torch._C._has_torch_function_variadic: lambda *args: False,
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

# Python functions that are pure on constants: folded at capture time.
_PURE_FUNCTIONS = frozenset(
    {
        *(v for v in vars(operator).values() if callable(v)),
        *(v for v in vars(math).values() if callable(v)),
        builtins.abs, builtins.round, builtins.divmod, builtins.int, builtins.float,
        builtins.bool, builtins.str, builtins.len, builtins.range, builtins.pow,
        builtins.repr, builtins.format, builtins.slice, builtins.set,
        builtins.frozenset, builtins.sorted, builtins.chr, builtins.ord, torch.Size,
        torch.device, torch.finfo, torch.iinfo,
    }
)  # fmt: skip

# Constant types whose methods are pure and may be folded (str.join, tuple.index...).
_FOLDABLE_METHOD_TYPES = (
    str, int, float, bool, complex, tuple, bytes, frozenset, set, torch.Size,
    torch.dtype, torch.device, slice, range,
)  # fmt: skip

# Containers whose length decides truthiness and iteration: guarded by length.
_MODULE_CONTAINERS = (
    torch.nn.ModuleList,
    torch.nn.Sequential,
    torch.nn.ModuleDict,
    torch.nn.ParameterList,
    torch.nn.ParameterDict,
)


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
        # attribute access (its export submodule imports torch's own compiler).
        for name, obj in vars(namespace).items():
            if name.startswith("_") or name in _TORCH_SIDE_EFFECTS:
                continue
            if callable(obj) and not isinstance(obj, (type, types.ModuleType)):
                ids.add(id(obj))
    # The C bindings of aten ops, private names included (torch._native_...).
    for namespace in (
        torch._C._VariableFunctions,
        torch._C._nn,
        torch._C._linalg,
        torch._C._fft,
        torch._C._special,
    ):
        for name in dir(namespace):
            if not name.startswith("__") and name not in _TORCH_SIDE_EFFECTS:
                ids.add(id(getattr(namespace, name)))
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
    if isinstance(obj, ConstValue):
        # A constant is guarded by value: its attributes need no guard of their
        # own, and its methods fold (a bound method is a new object each time).
        real = getattr(obj.value, name)
        if callable(real) and not isinstance(real, type):
            return MethodValue(obj, name)
        return tx.output.wrap_trusted(real)
    if isinstance(obj, ObjectValue) and obj.source is not None:
        written = tx.output.attr_writes.get((id(obj.value), name))
        if written is not None:
            return written
        return tx.output.wrap(getattr(obj.value, name), AttrSource(obj.source, name))
    if isinstance(obj, ObjectValue) and isinstance(obj.value, types.ModuleType):
        return tx.output.wrap_trusted(getattr(obj.value, name))  # torch's own code
    if isinstance(obj, (ObjectValue, ConstValue)):
        real = getattr(obj.value, name)
        if callable(real) and not isinstance(real, type):
            return MethodValue(obj, name)
        return tx.output.wrap_trusted(real)
    if isinstance(obj, NamedTupleValue) and name in obj.fields:
        return obj.items[obj.fields.index(name)]
    if isinstance(obj, DataclassValue) and name in obj.fields:
        return obj.fields[name]
    if isinstance(obj, SuperValue):
        return _super_attr(tx, obj, name)
    if isinstance(obj, (DictValue, ListValue, TupleValue, NamedTupleValue)):
        return MethodValue(obj, name)
    raise tx.unsupported(f"reading attribute {name!r} of a {describe_value(obj)}")


def _tensor_attr(tx: Interpreter, t: TensorValue, name: str) -> Value:
    if name in _TENSOR_META_ATTRS:
        return ConstValue(getattr(t.meta, name))
    if name == "device":
        return ConstValue(t.device)
    if name in ("is_cuda", "is_cpu", "is_meta", "is_mps", "is_xpu"):
        return ConstValue(t.device.type == name.removeprefix("is_"))
    if name in _TENSOR_VIEW_ATTRS:
        return tx.output.call_tensor_op("call_function", getattr, (t, name), {})
    if callable(getattr(torch.Tensor, name, None)):
        return MethodValue(t, name)
    if not hasattr(torch.Tensor, name):
        raise AttributeError(f"'Tensor' object has no attribute {name!r}")
    raise tx.unsupported(
        f"reading tensor attribute {name!r}", "compute it outside the compiled code"
    )


def _instance_attr(tx: Interpreter, obj: Value, name: str) -> Value:
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
        fget = ObjectValue(cls_attr.fget, _class_attr_source(obj, name, "fget"))
        return tx.inline(fget, [obj], {})
    if name in getattr(instance, "__dict__", {}):
        return tx.output.wrap(instance.__dict__[name], source)
    class_source = _class_attr_source(obj, name)
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


def _class_attr_source(obj: Value, name: str, *attrs: str) -> Source:
    """``type(obj).name`` (then ``attrs``): where a method's function lives."""
    source = AttrSource(AttrSource(obj.source, "__class__"), name)
    for attr in attrs:
        source = AttrSource(source, attr)
    return source


def _super_attr(tx: Interpreter, sup: SuperValue, name: str) -> Value:
    mro = type(sup.receiver.value).__mro__
    start = mro.index(sup.cls) + 1
    for index in range(start, len(mro)):
        if name in mro[index].__dict__:
            mro_source = ItemSource(
                AttrSource(AttrSource(sup.receiver.source, "__class__"), "__mro__"),
                index,
            )
            source = ItemSource(AttrSource(mro_source, "__dict__"), name)
            attr = mro[index].__dict__[name]
            if isinstance(attr, types.FunctionType):
                return BoundFunctionValue(attr, sup.receiver, source)
            raise tx.unsupported(f"super().{name} of kind {type(attr).__name__}")
    raise tx.unsupported(f"super().{name}: no such attribute")


# -- calls ----------------------------------------------------------------------


def call(tx: Interpreter, fn: Value, args: list[Value], kwargs: dict[str, Value]):
    """The value of ``fn(*args, **kwargs)``."""
    if isinstance(fn, MethodValue):
        return _call_method(tx, fn, args, kwargs)
    if isinstance(fn, BoundFunctionValue):
        function = ObjectValue(fn.func, fn.source)
        return tx.inline(function, [fn.receiver, *args], kwargs)
    if isinstance(fn, FunctionValue):
        return tx.inline(fn, args, kwargs)
    if isinstance(fn, ModuleValue):
        return _call_module(tx, fn, args, kwargs)
    if isinstance(fn, ContextExitValue):
        set_grad_mode(tx, fn.restore)
        return ConstValue(None)
    if isinstance(fn, AutocastExitValue):
        autocast.exit_block(tx, fn)
        return ConstValue(None)
    if isinstance(fn, (ObjectValue, ConstValue)):
        return _call_object(tx, fn, args, kwargs)
    raise tx.unsupported(f"calling a {describe_value(fn)}")


def _call_method(tx, fn: MethodValue, args, kwargs) -> Value:
    receiver = fn.receiver
    if isinstance(receiver, TensorValue):
        if fn.name in _TENSOR_AUTOGRAD_METHODS:
            raise tx.unsupported(*_TENSOR_AUTOGRAD_METHODS[fn.name])
        if fn.name in _TENSOR_META_METHODS:
            consts = [constant(tx, a) for a in args]
            kw = {k: constant(tx, v) for k, v in kwargs.items()}
            return ConstValue(getattr(receiver.meta, fn.name)(*consts, **kw))
        return tx.output.call_tensor_op(
            "call_method", fn.name, (receiver, *args), kwargs
        )
    handler = builtin_calls.METHOD_HANDLERS.get((type(receiver), fn.name))
    if handler is not None:
        return handler(tx, receiver, *args, **kwargs)
    if isinstance(receiver, ConstValue) and isinstance(
        receiver.value, _FOLDABLE_METHOD_TYPES
    ):
        return fold(tx, getattr(receiver.value, fn.name), args, kwargs)
    if isinstance(receiver, ObjectValue):
        return _call_object(
            tx, ObjectValue(getattr(receiver.value, fn.name)), args, kwargs
        )
    raise tx.unsupported(f"calling .{fn.name}() of a {describe_value(receiver)}")


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
    forward = get_attr(tx, m, "forward")
    return call(tx, forward, args, kwargs)


def _call_object(tx, fn: Value, args, kwargs) -> Value:
    target = fn.value
    handler = builtin_calls.HANDLERS.get(target) if _hashable(target) else None
    if handler is not None:
        return handler(tx, *args, **kwargs)
    if _changes_global_state(target):
        raise tx.unsupported(
            f"calling {describe(target)}, which changes torch's global state",
            "call it outside the compiled function",
        )
    if target in _TORCH_META_FUNCTIONS:
        return ConstValue(_TORCH_META_FUNCTIONS[target](*args, **kwargs))
    if is_torch_op(target) or (
        target in TENSOR_OPERATORS and _any_tensor(args, kwargs)
    ):
        return tx.output.call_tensor_op("call_function", target, tuple(args), kwargs)
    # Before folding: a list of constants is still one object that ``+=`` changes.
    mutable = any(isinstance(a, (ListValue, DictValue)) for a in args)
    if target in _SEQUENCE_OPS and mutable and _is_sequence_op(args):
        return _SEQUENCE_OPS[target](tx, *args)
    if target in _PURE_FUNCTIONS and _all_constant(args, kwargs):
        return fold(tx, target, args, kwargs)
    if target in _SEQUENCE_OPS and _is_sequence_op(args):
        return _SEQUENCE_OPS[target](tx, *args)
    if isinstance(target, type):
        return builtin_calls.construct(tx, fn, args, kwargs)
    if isinstance(target, types.FunctionType):
        return tx.inline(fn, args, kwargs)
    raise tx.unsupported(
        f"calling {describe(target)}",
        "ember cannot trace into this callable; move it outside the compiled code",
    )


def _concat(tx, a: Value, b: Value) -> Value:
    if type(a) is not type(b):
        raise tx.unsupported(f"adding a {describe_value(a)} and a {describe_value(b)}")
    items = [*a.items, *b.items]
    return ListValue(items) if isinstance(a, ListValue) else TupleValue(tuple(items))


def _repeat(tx, a: Value, b: Value) -> Value:
    seq, times = (a, b) if isinstance(a, (ListValue, TupleValue)) else (b, a)
    items = list(seq.items) * constant(tx, times)
    return ListValue(items) if isinstance(seq, ListValue) else TupleValue(tuple(items))


def _extend_in_place(tx, a: Value, b: Value) -> Value:
    """``lst += items`` extends the list itself; ``tup += tup`` makes a new one."""
    if not isinstance(a, ListValue):
        return _concat(tx, a, b)
    a.items.extend(iterate(tx, b))
    builtin_calls.note_change(tx, a)
    return a


def _repeat_in_place(tx, a: Value, b: Value) -> Value:
    if not isinstance(a, ListValue):
        return _repeat(tx, a, b)
    a.items[:] = list(a.items) * constant(tx, b)
    builtin_calls.note_change(tx, a)
    return a


def _merge(tx, a: Value, b: Value) -> Value:
    if not (isinstance(a, DictValue) and isinstance(b, DictValue)):
        raise tx.unsupported(f"{describe_value(a)} | {describe_value(b)}")
    return DictValue({**a.items, **b.items})


def _merge_in_place(tx, a: Value, b: Value) -> Value:
    if not isinstance(a, DictValue):
        raise tx.unsupported(f"{describe_value(a)} |= {describe_value(b)}")
    a.items.update(builtin_calls.as_dict(tx, b).items)
    builtin_calls.note_change(tx, a)
    return a


# Operators on lists, tuples and dicts: new containers, or (the augmented forms
# on a list or dict) the same one changed in place, as Python does.
_SEQUENCE_OPS = {
    operator.add: _concat,
    operator.mul: _repeat,
    operator.iadd: _extend_in_place,
    operator.imul: _repeat_in_place,
    operator.or_: _merge,
    operator.ior: _merge_in_place,
}


def _is_sequence_op(args) -> bool:
    return len(args) == 2 and any(
        isinstance(a, (ListValue, TupleValue, DictValue)) for a in args
    )


def fold(tx, target: Callable, args, kwargs) -> Value:
    """Call ``target`` now on the constant values of ``args``."""
    try:
        result = target(
            *[constant(tx, a) for a in args],
            **{k: constant(tx, v) for k, v in kwargs.items()},
        )
    except Exception as e:
        raise tx.unsupported(
            f"{describe(target)} raised {type(e).__name__}: {e}",
            "exceptions inside compiled code are not supported yet",
        ) from e
    return constant_value(result)


def constant_value(value: object) -> Value:
    if type(value) is tuple:
        return TupleValue(tuple(constant_value(v) for v in value))
    if type(value) is list:
        return ListValue([constant_value(v) for v in value])
    if type(value) is dict:
        return DictValue({k: constant_value(v) for k, v in value.items()})
    return ConstValue(value)


def constant(tx: Interpreter, v: Value) -> object:
    """The Python value of a value that holds no tensors; unsupported otherwise."""
    if isinstance(v, (ConstValue, ObjectValue)):
        return v.value
    if isinstance(v, TupleValue):
        return tuple(constant(tx, i) for i in v.items)
    if isinstance(v, ListValue):
        return [constant(tx, i) for i in v.items]
    if isinstance(v, DictValue):
        return {k: constant(tx, i) for k, i in v.items.items()}
    if isinstance(v, NamedTupleValue):
        return v.build([constant(tx, i) for i in v.items])
    raise tx.unsupported(f"using a {describe_value(v)} where a constant is needed")


def key(tx: Interpreter, v: Value) -> object:
    """A dict key: a hashable constant."""
    k = constant(tx, v)
    if not _hashable(k):
        raise tx.unsupported(f"a dict key of type {type(k).__name__}")
    return k


def keyword(tx: Interpreter, k: object) -> str:
    if not isinstance(k, str):
        raise tx.unsupported(f"a keyword argument named by a {type(k).__name__}")
    return k


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


def describe(target: object) -> str:
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    module = getattr(target, "__module__", None)
    if name:
        return f"{module}.{name}" if module else name
    return f"an object of type {type(target).__qualname__}"


def describe_value(v: Value) -> str:
    if isinstance(v, TensorValue):
        return "tensor"
    if hasattr(v, "value"):
        return type(v.value).__qualname__
    return type(v).__name__.removesuffix("Value").lower()


# -- truth, identity, iteration ---------------------------------------------------


def truth(tx: Interpreter, v: Value) -> bool:
    """``bool(v)``, which must not depend on tensor data."""
    if isinstance(v, TensorValue):
        raise tx.unsupported(
            "branching on a tensor's value (it depends on the data)",
            "use torch.where, or compute the condition outside the compiled code",
        )
    if isinstance(v, ConstValue):
        return bool(v.value)
    if isinstance(v, (TupleValue, ListValue, NamedTupleValue)):
        return bool(v.items)
    if isinstance(v, DictValue):
        return bool(v.items)
    if isinstance(v, ModuleValue) and isinstance(v.value, _MODULE_CONTAINERS):
        return bool(guarded_len(tx, v))
    if isinstance(v, ModuleValue) and (
        hasattr(type(v.value), "__bool__") or hasattr(type(v.value), "__len__")
    ):
        raise tx.unsupported(f"the truth of a {type(v.value).__qualname__} module")
    if isinstance(v, (UserObjectValue, DataclassValue)):
        cls = type(v.value) if isinstance(v, UserObjectValue) else v.cls
        if hasattr(cls, "__bool__") or hasattr(cls, "__len__"):
            raise tx.unsupported(f"the truth of a {cls.__qualname__} object")
    return True


def is_none(v: Value) -> bool:
    return isinstance(v, ConstValue) and v.value is None


def guarded_len(tx: Interpreter, v: ModuleValue) -> int:
    n = len(v.value)
    tx.output.guards.add(Guard(GuardKind.EQUALS_MATCH, LenSource(v.source), (int, n)))
    return n


def iterate(tx: Interpreter, v: Value) -> list[Value]:
    """The items ``iter(v)`` yields (an iterator value is consumed)."""
    if isinstance(v, (TupleValue, ListValue, NamedTupleValue)):
        return list(v.items)
    if isinstance(v, DictValue):
        return [ConstValue(k) for k in v.items]
    if isinstance(v, IteratorValue):
        items = v.items[v.position :]
        v.position = len(v.items)
        return items
    if isinstance(v, GeneratorValue):
        drained = []
        while (item := v.next()) is not None:
            drained.append(item)
        return drained
    if isinstance(v, ConstValue) and isinstance(
        v.value, (tuple, list, range, str, bytes, set, frozenset, dict, torch.Size)
    ):
        return [constant_value(i) for i in v.value]
    if isinstance(v, TensorValue):
        if v.meta.dim() == 0:
            raise tx.unsupported("iterating over a 0-d tensor")
        return [get_item(tx, v, ConstValue(i)) for i in range(v.meta.shape[0])]
    if isinstance(v, ModuleValue) and isinstance(v.value, _MODULE_CONTAINERS):
        n = guarded_len(tx, v)
        if isinstance(v.value, (torch.nn.ModuleDict, torch.nn.ParameterDict)):
            keys = list(v.value)
            source = KeysSource(v.source)
            tx.output.guards.add(Guard(GuardKind.EQUALS_MATCH, source, (list, keys)))
            return [ConstValue(k) for k in keys]
        return [get_item(tx, v, ConstValue(i)) for i in range(n)]
    raise tx.unsupported(f"iterating over a {describe_value(v)}")


# -- grad mode ------------------------------------------------------------------


def set_grad_mode(tx: Interpreter, enabled: bool) -> None:
    """Switch grad mode now (so meta tensors follow it) and in the graph."""
    torch._C._set_grad_enabled(enabled)
    node = tx.output.graph.call_function(torch._C._set_grad_enabled, (enabled,))
    filename, lineno = tx.output.location()
    node.meta["user_loc"] = f"{filename}:{lineno}"


def enter_grad_mode(tx: Interpreter, ctx) -> ContextExitValue:
    if ctx.previous is not None:  # set_grad_enabled(b) already switched
        return ContextExitValue(ctx.previous)
    previous = torch.is_grad_enabled()
    set_grad_mode(tx, ctx.enabled)
    return ContextExitValue(previous)


# -- subscripts -----------------------------------------------------------------


def get_item(tx: Interpreter, obj: Value, index: Value) -> Value:
    """The value of ``obj[index]``."""
    if isinstance(obj, TensorValue) or isinstance(index, TensorValue):
        return tx.output.call_tensor_op(
            "call_function", operator.getitem, (obj, index), {}
        )
    k = constant(tx, index)
    if isinstance(obj, (TupleValue, ListValue, NamedTupleValue)):
        picked = obj.items[k]
        if not isinstance(k, slice):
            return picked
        return (
            ListValue(list(picked))
            if isinstance(obj, ListValue)
            else TupleValue(tuple(picked))
        )
    if isinstance(obj, DictValue):
        if k not in obj.items:
            raise tx.unsupported(f"reading missing key {k!r} (KeyError)")
        return obj.items[k]
    if isinstance(obj, ModuleValue):
        if isinstance(k, slice):
            raise tx.unsupported("slicing a module container")
        item = obj.value[k]
        modules = obj.value.__dict__.get("_modules", {})
        if isinstance(k, int) and isinstance(obj.value, _MODULE_CONTAINERS):
            if k < 0:
                guarded_len(tx, obj)  # [-1] names another entry when the list grows
            key = list(modules)[k] if -len(modules) <= k < len(modules) else None
            if key is not None and modules[key] is item:  # length is guarded
                return tx.output.wrap(
                    item, ModuleEntrySource(obj.source, "_modules", key)
                )
        return tx.output.wrap(item, ItemSource(obj.source, k))
    if isinstance(obj, ConstValue):
        return constant_value(obj.value[k])
    raise tx.unsupported(f"indexing a {describe_value(obj)}")


def set_item(tx: Interpreter, obj: Value, index: Value, value: Value) -> None:
    """``obj[index] = value`` for tensors and for containers made in the function."""
    if isinstance(obj, TensorValue):
        tx.output.call_tensor_op(
            "call_function", operator.setitem, (obj, index, value), {}
        )
        return
    if isinstance(obj, ListValue):
        where = constant(tx, index)
        # A slice takes the items of any iterable value: ``lst[1:2] = (a, b)``.
        obj.items[where] = iterate(tx, value) if isinstance(where, slice) else value
    elif isinstance(obj, DictValue):
        obj.items[key(tx, index)] = value
    else:
        raise tx.unsupported(f"assigning an item of a {describe_value(obj)}")
    if obj.source is not None:
        tx.output.write_contents(obj)


def del_item(tx: Interpreter, obj: Value, index: Value) -> None:
    """``del obj[index]`` for lists and dicts."""
    if isinstance(obj, ListValue):
        del obj.items[constant(tx, index)]
    elif isinstance(obj, DictValue):
        k = key(tx, index)
        if k not in obj.items:
            raise tx.unsupported(f"deleting missing key {k!r} (KeyError)")
        del obj.items[k]
    else:
        raise tx.unsupported(f"deleting an item of a {describe_value(obj)}")
    builtin_calls.note_change(tx, obj)


def set_attr(tx: Interpreter, obj: Value, name: str, value: Value) -> None:
    """``obj.name = value``: recorded and replayed after the graph."""
    if isinstance(obj, DataclassValue) and obj.source is None:
        obj.fields[name] = value
        return
    if (
        isinstance(obj, (ModuleValue, UserObjectValue, ObjectValue))
        and obj.source is not None
    ):
        tx.output.write_attr(obj, name, value)
        return
    raise tx.unsupported(f"assigning attribute {name!r} of a {describe_value(obj)}")
