"""Tensors: operations on them become graph nodes, their metadata constants."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .. import builtin_calls
from ..behaviour import (
    call_method,
    constant,
    contains,
    describe_value,
    get_attr,
    get_item,
    iterate,
    key,
    length,
    python_type,
    rebuild,
    set_attr,
    set_item,
    truth,
)
from ..source import AttrSource
from ..torch_ops import (
    TENSOR_AUTOGRAD_METHODS,
    TENSOR_META_ATTRS,
    TENSOR_META_METHODS,
    TENSOR_VIEW_ATTRS,
)
from ..variables import (
    ConstValue,
    MethodValue,
    ObjectKey,
    SizeValue,
    SymIntValue,
    TensorValue,
    Value,
)

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter
    from ..emit import Emitter


@python_type.register(TensorValue)
def _type(t: TensorValue) -> type:
    return t.python_type


@get_attr.register(TensorValue)
def _attr(tx: Interpreter, t: TensorValue, name: str) -> Value:
    if name in TENSOR_META_ATTRS:
        return metadata(tx, t, name, getattr(t.meta, name))
    if name == "device":
        return ConstValue(t.device)
    if name in ("is_cuda", "is_cpu", "is_meta", "is_mps", "is_xpu"):
        return ConstValue(t.device.type == name.removeprefix("is_"))
    if name in TENSOR_VIEW_ATTRS:
        return tx.output.call_tensor_op("call_function", getattr, (t, name), {})
    if name == "grad":
        return read_grad(tx, t)
    if name == "grad_fn" and not t.meta.requires_grad:
        return ConstValue(None)  # no history without grad (guarded with the tensor)
    if callable(getattr(torch.Tensor, name, None)):
        return MethodValue(t, name)
    if not hasattr(torch.Tensor, name):
        raise AttributeError(f"'Tensor' object has no attribute {name!r}")
    raise tx.unsupported(
        f"reading tensor attribute {name!r}", "compute it outside the compiled code"
    )


def read_grad(tx: Interpreter, t: TensorValue) -> Value:
    """``t.grad``: an input's gradient is another input (guarded, None
    included); a tensor the graph computes is no leaf and has none."""
    real = tx.output.real_tensor(t)
    if real is None:
        return ConstValue(None)
    written = tx.output.attr_writes.get((id(real), "grad"))
    if written is not None:
        return written
    return tx.output.wrap(real.grad, AttrSource(t.source, "grad"))


# Tensor methods with a meaning of their own (``backward``: kinds/backward.py).
TENSOR_METHOD_HANDLERS: dict[str, Callable[..., Value]] = {}


@call_method.register(TensorValue)
def _method(tx: Interpreter, t: TensorValue, name: str, args, kwargs) -> Value:
    if name in TENSOR_METHOD_HANDLERS:
        return TENSOR_METHOD_HANDLERS[name](tx, t, args, kwargs)
    if name == "requires_grad_" and _already_set(tx, t, args, kwargs):
        return t  # a no-op, as in eager (transformers' input-grads hook)
    if name in TENSOR_AUTOGRAD_METHODS:
        raise tx.unsupported(*TENSOR_AUTOGRAD_METHODS[name])
    if name in TENSOR_META_METHODS:
        consts = [constant(tx, a) for a in args]
        kw = {k: constant(tx, v) for k, v in kwargs.items()}
        if name == "size" and (consts or kw):
            return tx.output.size_value(t, (consts or list(kw.values()))[0])
        return metadata(tx, t, name, getattr(t.meta, name)(*consts, **kw))
    return tx.output.call_tensor_op("call_method", name, (t, *args), kwargs)


def metadata(tx: Interpreter, t: TensorValue, name: str, value: object) -> Value:
    """A tensor's metadata as a value: a constant, except where sizes are
    symbols (docs/dynamic.md): its sizes stay symbolic, its element count
    too, and anything else built from them is specialized (guarded)."""
    if not has_symbolic_sizes(t):
        return ConstValue(value)
    if name in ("shape", "size"):
        return SizeValue(tuple(tx.output.size_value(t, d) for d in range(t.meta.dim())))
    if name in ("numel", "nelement"):
        return SymIntValue(tx.output.graph.call_method(name, (t.node,)), value)
    return ConstValue(specialized(value))


def has_symbolic_sizes(t: TensorValue) -> bool:
    return any(isinstance(s, torch.SymInt) for s in t.meta.shape)


def specialized(value: object) -> object:
    """``value`` with each symbolic number replaced by its value, guarded."""
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymBool):
        return bool(value)
    if isinstance(value, (tuple, list)):
        return type(value)(specialized(v) for v in value)
    return value


def _already_set(tx: Interpreter, t: TensorValue, args, kwargs) -> bool:
    """``t.requires_grad_(flag)`` that changes nothing: True on a tensor that
    requires grad already (and is not a leaf of the graph's making), False on
    one that does not (``zero_grad(set_to_none=False)`` on a gradient)."""
    flag = args[0] if args else kwargs.get("requires_grad", ConstValue(True))
    if not constant(tx, flag):
        return not t.meta.requires_grad
    return t.meta.requires_grad and torch.is_grad_enabled()


@set_attr.register(TensorValue)
def _set_attr(tx: Interpreter, t: TensorValue, name: str, value: Value) -> None:
    """Two writes: ``t.requires_grad = True`` on a tensor the function made
    from no tensor (T5's zero position bias under gradient checkpointing: a
    graph input or a parameter feeds whatever uses it, so gradients flow as in
    eager), and ``t.grad = g`` on a graph input (None or a tensor of its shape
    and dtype: ``zero_grad()``, a backward in the graph), replayed after it."""
    fresh = t.node.op == "call_function" and not t.node.all_input_nodes
    if name == "requires_grad" and fresh and constant(tx, value) is True:
        return
    real = tx.output.real_tensor(t)
    if name == "grad" and real is not None and _is_gradient(value, real):
        tx.output.write_attr(t, name, value, owner=real)
        return
    raise tx.unsupported(f"assigning attribute {name!r} of a tensor")


def _is_gradient(value: Value, param: torch.Tensor) -> bool:
    """What eager accepts as ``param.grad``: None, or a tensor of its shape
    and dtype."""
    if isinstance(value, ConstValue):
        return value.value is None
    return (
        isinstance(value, TensorValue)
        and value.meta.shape == param.shape
        and value.meta.dtype == param.dtype
    )


@key.register(TensorValue)
def _key(tx: Interpreter, t: TensorValue) -> ObjectKey:
    """A tensor as a dict key (``optimizer.state[p]``): found by identity."""
    real = tx.output.real_tensor(t)
    if real is None:
        raise tx.unsupported("a dict keyed by a tensor the function computes")
    return ObjectKey(real, t, t.source)


@truth.register(TensorValue)
def _truth(tx: Interpreter, t: TensorValue) -> bool:
    raise tx.unsupported(
        "branching on a tensor's value (it depends on the data)",
        "use torch.where, or compute the condition outside the compiled code",
    )


@iterate.register(TensorValue)
def _iterate(tx: Interpreter, t: TensorValue) -> list[Value]:
    if t.meta.dim() == 0:
        raise tx.unsupported("iterating over a 0-d tensor")
    return [get_item(tx, t, ConstValue(i)) for i in range(int(t.meta.shape[0]))]


@contains.register(TensorValue)
def _contains(tx: Interpreter, t: TensorValue, item: Value) -> bool:
    raise tx.unsupported(builtin_calls.IN_WITH_A_TENSOR)


@length.register(TensorValue)
def _length(tx: Interpreter, t: TensorValue) -> int:
    if t.meta.dim() == 0:
        raise tx.unsupported("len() of a 0-d tensor")
    return int(t.meta.shape[0])  # specializes a symbolic size (len() is an int)


@get_item.register(TensorValue)
def _get_item(tx: Interpreter, t: TensorValue, index: Value) -> Value:
    return tx.output.call_tensor_op("call_function", operator.getitem, (t, index), {})


@set_item.register(TensorValue)
def _set_item(tx: Interpreter, t: TensorValue, index: Value, value: Value) -> None:
    tx.output.call_tensor_op("call_function", operator.setitem, (t, index, value), {})


@rebuild.register(TensorValue)
def _rebuild(out: Emitter, t: TensorValue) -> str:
    produced = out.graph_output(t.node)
    if produced is not None:
        return produced
    if t.source is None:
        raise TypeError("a tensor the graph does not return")
    return out.read(t.source)


@describe_value.register(TensorValue)
def _describe(t: TensorValue) -> str:
    return "tensor"


@builtin_calls.constructs(lambda cls: cls in (int, float, bool, complex))
def _number_of_a_tensor(tx: Interpreter, cls_value: Value, args, kwargs) -> Value:
    """``float(t)``, ``int(t)``: the tensor's value as a Python number, which
    no graph can give (numbers from sizes and constants fold before this)."""
    name = cls_value.value.__name__
    if any(isinstance(a, TensorValue) for a in args):
        raise tx.unsupported(
            f"{name}() of a tensor reads its value into Python",
            "the value is not known while capturing: the graph ends here",
        )
    raise tx.unsupported(
        f"constructing a builtins.{name} from these values",
        "compute the number outside the compiled function and pass it in",
    )
