"""The kinds of value the interpreter keeps on its stack and in its locals.

Each kind is a small record: a tensor is an fx node plus a meta tensor (shape, dtype,
strides) and its real device; Python constants, known objects, containers and bound
methods carry their real value and, when read from the frame, the source they came
from. How each kind answers attribute reads, calls and the rest lives in ``kinds/``
(the operations are in ``behaviour.py``).
"""

from __future__ import annotations

from collections.abc import Callable
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
class SymIntValue(Value):
    """A size that changes between calls (docs/dynamic.md): ``node`` computes
    it in the graph, ``value`` is the torch.SymInt (or SymBool, SymFloat) of
    its expression. Python that needs its number reads ``int(value)``, which
    specializes: the relation is guarded."""

    node: torch.fx.Node
    value: object
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class SliceValue(Value):
    """``slice(start, stop, step)`` with a symbolic size among its parts."""

    start: Value
    stop: Value
    step: Value


@dataclass(frozen=True, slots=True, eq=False)
class ConstValue(Value):
    """A Python constant: None, bool, int, float, str, dtype, torch.Size, ..."""

    value: object
    source: Source | None = None


class FloatInputValue(ConstValue):
    """A float argument of the frame, guarded by type only until code reads its
    value: then ``specialize`` adds the guard on the value, as for any constant.

    Arithmetic with floating-point tensors reads it through ``peek`` instead and
    takes it into the graph as an input, so a new value (a loss scale, an
    ``.item()`` passed to a resume function) reuses the compiled code."""

    __slots__ = ("_specialize",)

    def __init__(
        self, value: float, source: Source, specialize: Callable[[], None]
    ) -> None:
        object.__setattr__(self, "_specialize", specialize)
        super().__init__(value, source)

    @property
    def value(self) -> object:
        self._specialize()
        return _CONST_SLOT.__get__(self, ConstValue)

    @value.setter
    def value(self, value: object) -> None:  # only ConstValue.__init__ sets it
        _CONST_SLOT.__set__(self, value)

    def peek(self) -> float:
        """The value, without guarding on it."""
        return _CONST_SLOT.__get__(self, ConstValue)


_CONST_SLOT = ConstValue.__dict__["value"]


class FloatExprValue(FloatInputValue):
    """Python arithmetic on float inputs (``1 - lr * weight_decay``): ``peek``
    computes it from theirs without guarding; reading ``value`` specializes
    them all; a tensor op takes it into the graph as the same arithmetic on
    0-d float64 tensors, which round as Python's floats do."""

    __slots__ = ("op", "operands")

    def __init__(self, op: Callable, operands: tuple[ConstValue, ...]) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "operands", operands)
        peeked = op(*(peek(o) for o in operands))
        super().__init__(peeked, None, self._specialize_operands)

    def _specialize_operands(self) -> None:
        for o in self.operands:
            if isinstance(o, FloatInputValue):
                o._specialize()


def peek(v: ConstValue) -> object:
    """A constant's value; a float input's without guarding on it."""
    return v.peek() if isinstance(v, FloatInputValue) else v.value


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
class SizeValue(TupleValue):
    """A ``torch.Size`` with a symbolic size among its items (``x.shape``)."""


@dataclass(frozen=True, slots=True, eq=False)
class ListValue(Value):
    items: list[Value] = field(default_factory=list)
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class DictValue(Value):
    """A dict with constant keys (or ``ObjectKey``s); built in the function or
    read from the frame. A defaultdict keeps its factory, called on a miss."""

    items: dict[object, Value] = field(default_factory=dict)
    source: Source | None = None
    default_factory: Value | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ObjectKey:
    """A dict key that is an object compared by identity: a tensor (an
    optimizer's state is keyed by its parameters). ``value`` is the key as an
    interpreter value when capture has one; else ``source`` reads it."""

    obj: object
    value: Value | None = None
    source: Source | None = None

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectKey) and other.obj is self.obj


@dataclass(frozen=True, slots=True, eq=False)
class NewObjectValue(Value):
    """An instance of a user class made inside the function: its ``__init__`` was
    inlined, its attributes are values changed in place, and it is rebuilt once
    (one object wherever it is held) if it outlives the graph."""

    cls: type
    attrs: DictValue  # its __dict__, changed in place
    cls_source: Source | None  # where the class was read: its attributes' source
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class NamedTupleValue(Value):
    """A namedtuple, or a torch.return_types struct sequence (what max(dim),
    topk or sort return): a tuple whose items are also read by field name."""

    cls: type
    items: tuple[Value, ...]
    source: Source | None = None

    @property
    def fields(self) -> tuple[str, ...]:
        # Struct sequences have no _fields; Python gives them __match_args__.
        return getattr(self.cls, "_fields", None) or self.cls.__match_args__

    def build_code(self, items: list[str]) -> str:
        """Python source calling the class on ``items`` (already source code)."""
        if hasattr(self.cls, "_fields"):
            return f"({', '.join(items)})"
        return f"(({', '.join(items)},),)"  # a struct sequence takes one tuple

    def build(self, items: list[object]) -> tuple:
        """An instance of the class holding ``items``."""
        return self.cls(*items) if hasattr(self.cls, "_fields") else self.cls(items)


@dataclass(frozen=True, slots=True, eq=False)
class DataclassValue(Value):
    """An instance of a dataclass built inside the function, field by field (or
    a ModelOutput read from the frame: ``source``)."""

    cls: type
    fields: dict[str, Value]
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ModelOutputValue(DataclassValue):
    """A transformers ModelOutput built inside the function, or read from the
    frame (``source``; never changed): a dataclass that is also an ordered
    mapping of its fields that are not None."""


@dataclass(slots=True, eq=False)
class IteratorValue(Value):
    """An iterator over known items; FOR_ITER advances ``position``."""

    items: list[Value]
    position: int = 0
    source: Source | None = None

    def next(self) -> Value | None:
        if self.position >= len(self.items):
            return None
        self.position += 1
        return self.items[self.position - 1]


@dataclass(slots=True, eq=False)
class GeneratorValue(Value):
    """A generator being interpreted lazily: each ``next()`` runs its frame to the
    next yield, so it interleaves with its consumer as in CPython."""

    frame: object  # the paused bytecode_interp.Interpreter
    done: bool = False
    source: Source | None = None

    def next(self) -> Value | None:
        if self.done:
            return None
        value = self.frame.run()
        if self.frame.return_value is not None:  # returned instead of yielding
            self.done = True
            return None
        return value


@dataclass(frozen=True, slots=True, eq=False)
class MethodValue(Value):
    """``obj.name`` for a tensor or constant: calling it calls the method on ``obj``."""

    receiver: Value
    name: str
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class BoundFunctionValue(Value):
    """A Python function bound to ``receiver`` (methods of modules and objects,
    classmethods, functions found through super()); calls are inlined."""

    func: object  # a types.FunctionType, or a slot of object reached by super()
    receiver: Value
    source: Source | None = None  # where ``func`` itself can be read


@dataclass(frozen=True, slots=True, eq=False)
class PartialValue(Value):
    """``functools.partial(fn, *args, **keywords)`` made in the function."""

    fn: Value
    args: tuple[Value, ...]
    keywords: dict[str, Value]
    source: Source | None = None


@dataclass(slots=True, eq=False)
class Cell:
    """A closure cell shared by a frame and the functions it defines."""

    value: Value | None = None
    writable: bool = True  # False for the real cells of a function's closure
    # For a real cell: the function whose closure holds it, and its index there
    # (a nonlocal write is replayed into it); None when it cannot be written.
    owner: tuple[Value, int] | None = None


@dataclass(frozen=True, slots=True, eq=False)
class FunctionValue(Value):
    """A function defined while interpreting (def, lambda, comprehension)."""

    code: object  # a types.CodeType
    defaults: tuple[Value, ...]
    kwdefaults: dict[str, Value]
    closure: tuple[Cell, ...]
    f_globals: dict
    globals_source: Source | None
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class GradModeValue(Value):
    """torch.no_grad() / enable_grad() / set_grad_enabled(b): a context manager."""

    enabled: bool
    previous: bool | None = None  # set_grad_enabled switches at the call: the mode
    source: Source | None = None  # to restore on exit; None for the others


@dataclass(frozen=True, slots=True, eq=False)
class ContextExitValue(Value):
    """The ``__exit__`` BEFORE_WITH leaves on the stack for a grad-mode block."""

    restore: bool  # the grad mode to go back to
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class AutocastValue(Value):
    """torch.autocast(...) (or torch.amp's, torch.cpu.amp's, torch.cuda.amp's): a
    context manager, with the settings the real object resolved."""

    device_type: str
    dtype: torch.dtype
    enabled: bool
    cache_enabled: bool
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class AutocastExitValue(Value):
    """The ``__exit__`` BEFORE_WITH leaves on the stack for an autocast block."""

    mode: torch.fx.Node  # the block's torch.amp._enter_autocast node
    device_type: str
    restore: tuple[bool, torch.dtype]  # enabled and dtype before the block
    offset: int  # the with-statement's BEFORE_WITH, for a break inside the block
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class SuperValue(Value):
    """``super()`` inside a method: attribute lookup starts after ``cls``."""

    cls: type
    receiver: Value
    source: Source | None = None


@dataclass(frozen=True, slots=True, eq=False)
class NullValue(Value):
    """The NULL that CPython 3.11 pushes below a callable."""

    source: Source | None = None


NULL = NullValue()
