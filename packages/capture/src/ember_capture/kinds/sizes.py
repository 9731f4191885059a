"""Symbolic sizes (docs/dynamic.md): arithmetic on them stays in the graph;
Python that needs the number gets it guarded (``int(s0)`` specializes)."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

import torch

from ..behaviour import (
    call_method,
    constant,
    describe_value,
    fold,
    key,
    python_type,
    rebuild,
    truth,
)
from ..builtin_calls import handles
from ..guards import with_sizes
from ..variables import ConstValue, SizeValue, SliceValue, SymIntValue, Value

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter
    from ..emit import Emitter

_PYTHON_TYPES = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


@python_type.register(SymIntValue)
def _type(v: SymIntValue) -> type:
    return _PYTHON_TYPES[type(v.value)]


@constant.register(SymIntValue)
def _constant(tx: Interpreter, v: SymIntValue) -> object:
    return _number(v)


def _number(v: SymIntValue) -> object:
    """The value at this call's sizes; the relation is guarded."""
    return _PYTHON_TYPES[type(v.value)](v.value)


@truth.register(SymIntValue)
def _truth(tx: Interpreter, v: SymIntValue) -> bool:
    return bool(v.value)


@key.register(SymIntValue)
def _key(tx: Interpreter, v: SymIntValue) -> object:
    return _number(v)


@rebuild.register(SymIntValue)
def _rebuild(out: Emitter, v: SymIntValue) -> str:
    """Python computing the size from the inputs' sizes (no guard needed); a
    float is specialized (sympy's form of it need not round as Python does)."""
    if not isinstance(v.value, torch.SymInt):
        return repr(_number(v))
    output = out.output
    python = output.shapes.to_python(output.shapes.expr_of(v.value))
    names = {
        name: out.read(source) if d is None else f"{out.read(source)}.size({d})"
        for name, (source, d) in output.size_sources.items()
    }
    return f"({with_sizes(python, names)})"


@describe_value.register(SymIntValue)
def _describe(v: SymIntValue) -> str:
    return f"{_PYTHON_TYPES[type(v.value)].__name__} (a size)"


@handles(slice)
def _slice(tx: Interpreter, *parts: Value) -> Value:
    """``slice(...)`` (and ``x[a:b]``): kept symbolic when a part is a size."""
    if not any(isinstance(p, SymIntValue) for p in parts):
        return ConstValue(slice(*(constant(tx, p) for p in parts)))
    none = ConstValue(None)
    if len(parts) == 1:
        return SliceValue(none, parts[0], none)
    return SliceValue(parts[0], parts[1], parts[2] if len(parts) > 2 else none)


@python_type.register(SliceValue)
def _slice_type(v: SliceValue) -> type:
    return slice


@constant.register(SliceValue)
def _slice_constant(tx: Interpreter, v: SliceValue) -> slice:
    return slice(*(constant(tx, p) for p in (v.start, v.stop, v.step)))


@rebuild.register(SliceValue)
def _slice_rebuild(out: Emitter, v: SliceValue) -> str:
    return f"slice({', '.join(out.expr(p) for p in (v.start, v.stop, v.step))})"


@describe_value.register(SliceValue)
def _slice_describe(v: SliceValue) -> str:
    return "slice"


@python_type.register(SizeValue)
def _size_type(v: SizeValue) -> type:
    return torch.Size


@constant.register(SizeValue)
def _size_constant(tx: Interpreter, v: SizeValue) -> torch.Size:
    return torch.Size([constant(tx, i) for i in v.items])


@call_method.register(SizeValue)
def _size_method(tx: Interpreter, v: SizeValue, name: str, args, kwargs) -> Value:
    """``numel()`` stays symbolic; other methods read the sizes (guarded)."""
    if name == "numel" and not args and not kwargs:
        total: Value = ConstValue(1)
        for item in v.items:
            total = tx.output.call_size_op(operator.mul, [total, item])
        return total
    return fold(tx, getattr(constant(tx, v), name), args, kwargs)


@rebuild.register(SizeValue)
def _size_rebuild(out: Emitter, v: SizeValue) -> str:
    items = ", ".join(out.expr(i) for i in v.items)
    return f"{out.constant(torch.Size)}([{items}])"


@handles(range)
def _range(tx: Interpreter, *args: Value, **kwargs: Value) -> Value:
    """``range(n)`` with ``n`` a size: its numbers at this call's sizes (a loop
    over it unrolls), the size guarded to its value."""
    if kwargs or not all(isinstance(a, (ConstValue, SymIntValue)) for a in args):
        raise tx.unsupported(
            "constructing a builtins.range from these values",
            "pass the bounds as ints",
        )
    return fold(tx, range, args, {})
