"""The kinds of value the interpreter keeps on its stack and in its locals.

Each kind is a small record: a tensor is an fx node plus a meta tensor (shape, dtype,
strides) and its real device; Python constants, known objects, containers and bound
methods carry their real value and, when read from the frame, the source they came
from. How each kind answers attribute reads and calls lives in ``calls.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.fx

from .source import Source


class Value:
    """Base of every interpreter value."""

    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class TensorValue(Value):
    node: torch.fx.Node
    meta: torch.Tensor  # on the meta device; sizes, strides, dtype, requires_grad
    device: torch.device  # the device the real tensor lives on
    source: Source | None = None
    python_type: type = torch.Tensor  # nn.Parameter for parameters read from modules


@dataclass(frozen=True, slots=True, eq=False)
class ConstValue(Value):
    """A Python constant: None, bool, int, float, str, dtype, torch.Size, ..."""

    value: object
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ObjectValue(Value):
    """An object known by identity: a function, class, Python module or builtin."""

    value: object
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ModuleValue(Value):
    """An nn.Module instance; attribute reads go through its real attributes."""

    value: torch.nn.Module
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class UserObjectValue(Value):
    """An instance of a user class; guarded by type, each attribute read by value."""

    value: object
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class TupleValue(Value):
    items: tuple[Value, ...]
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ListValue(Value):
    items: list[Value] = field(default_factory=list)
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class MethodValue(Value):
    """``obj.name`` where calling it calls the method on ``obj`` (a bound method)."""

    receiver: Value
    name: str
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class NullValue(Value):
    """The NULL that CPython 3.11 pushes below a callable."""

    source: Source | None = None


NULL = NullValue()
