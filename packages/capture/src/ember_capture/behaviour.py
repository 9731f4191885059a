"""The operations every kind of value answers: attribute reads and writes, calls,
truth, iteration, item access, its constant, its Python type, the values it holds,
its description, and the Python that rebuilds the real object in the transformed
code.

Each operation dispatches on the kind of value (``functools.singledispatch``);
kinds/ registers each kind's answers, one module per family of kinds. The
defaults here say what is not supported, as the user wrote it. The helpers at the
end (folding, keys, descriptions) are shared by the kinds and builtin_calls.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .guards import Guard, GuardKind
from .source import LenSource
from .variables import (
    ConstValue,
    DictValue,
    ListValue,
    ObjectKey,
    TensorValue,
    TupleValue,
    Value,
)

if TYPE_CHECKING:
    from .bytecode_interp import Interpreter
    from .emit import Emitter
    from .variables import ModuleValue


class Operation:
    """An operation answered per value kind: called as the default is, with the
    value at position ``at``; ``@op.register(Kind, ...)`` adds a kind's answer
    (a kind's subclasses share it unless they register their own)."""

    def __init__(self, default: Callable[..., Any], at: int) -> None:
        functools.update_wrapper(self, default)
        self._generic = functools.singledispatch(default)
        self._at = at

    def register(self, *kinds: type) -> Callable[[Callable], Callable]:
        def add(answer: Callable) -> Callable:
            for kind in kinds:
                self._generic.register(kind, answer)
            return answer

        return add

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._generic.dispatch(type(args[self._at]))(*args, **kwargs)


def on_value(at: int) -> Callable[[Callable], Operation]:
    """Makes the decorated default an Operation on its argument ``at``."""
    return lambda default: Operation(default, at)


@on_value(1)
def get_attr(tx: Interpreter, obj: Value, name: str) -> Value:
    """The value of ``obj.name``."""
    raise tx.unsupported(f"reading attribute {name!r} of a {describe_value(obj)}")


@on_value(1)
def set_attr(tx: Interpreter, obj: Value, name: str, value: Value) -> None:
    """``obj.name = value``: recorded and replayed after the graph."""
    raise tx.unsupported(f"assigning attribute {name!r} of a {describe_value(obj)}")


@on_value(1)
def del_attr(tx: Interpreter, obj: Value, name: str) -> None:
    """``del obj.name``."""
    raise tx.unsupported(f"deleting attribute {name!r} of a {describe_value(obj)}")


@on_value(1)
def call(tx: Interpreter, fn: Value, args: list[Value], kwargs: dict[str, Value]):
    """The value of ``fn(*args, **kwargs)``."""
    raise tx.unsupported(f"calling a {describe_value(fn)}")


@on_value(1)
def call_method(
    tx: Interpreter, receiver: Value, name: str, args: list, kwargs: dict
) -> Value:
    """``receiver.name(*args, **kwargs)`` for a method builtin_calls does not
    handle (its METHOD_HANDLERS come first)."""
    raise tx.unsupported(f"calling .{name}() of a {describe_value(receiver)}")


@on_value(1)
def truth(tx: Interpreter, v: Value) -> bool:
    """``bool(v)``, which must not depend on tensor data. A value without a
    ``__bool__`` or ``__len__`` of its own is true, as in Python."""
    return True


@on_value(1)
def iterate(tx: Interpreter, v: Value) -> list[Value]:
    """The items ``iter(v)`` yields (an iterator value is consumed)."""
    raise tx.unsupported(f"iterating over a {describe_value(v)}")


@on_value(1)
def get_item(tx: Interpreter, obj: Value, index: Value) -> Value:
    """The value of ``obj[index]``: a tensor op for a tensor index, else
    ``item_of`` with the index's constant (tensors register their own)."""
    if isinstance(index, TensorValue):
        return tx.output.call_tensor_op(
            "call_function", operator.getitem, (obj, index), {}
        )
    return item_of(tx, obj, constant(tx, index))


@on_value(1)
def contains(tx: Interpreter, container: Value, item: Value) -> bool:
    """``item in container`` (the default: both are constants)."""
    return constant(tx, item) in constant(tx, container)


@on_value(1)
def length(tx: Interpreter, obj: Value) -> int:
    """``len(obj)`` (the default: a constant's)."""
    return len(constant(tx, obj))


@on_value(1)
def item_of(tx: Interpreter, obj: Value, k: object) -> Value:
    """``obj[k]`` for a constant index ``k``."""
    raise tx.unsupported(f"indexing a {describe_value(obj)}")


@on_value(1)
def set_item(tx: Interpreter, obj: Value, index: Value, value: Value) -> None:
    """``obj[index] = value`` for tensors and for containers made in the function."""
    raise tx.unsupported(f"assigning an item of a {describe_value(obj)}")


@on_value(1)
def del_item(tx: Interpreter, obj: Value, index: Value) -> None:
    """``del obj[index]`` for lists and dicts."""
    raise tx.unsupported(f"deleting an item of a {describe_value(obj)}")


@on_value(1)
def constant(tx: Interpreter, v: Value) -> object:
    """The Python value of a value that holds no tensors; unsupported otherwise."""
    raise tx.unsupported(f"using a {describe_value(v)} where a constant is needed")


@on_value(1)
def copy_of(tx: Interpreter, v: Value, memo: dict[int, Value] | None) -> Value:
    """``copy.copy(v)``, or ``copy.deepcopy(v)`` when ``memo`` is given (the
    copies made so far, by id of the original, so shared parts stay shared)."""
    raise tx.unsupported(f"copying a {describe_value(v)}")


def deep_copy(tx: Interpreter, v: Value, memo: dict[int, Value]) -> Value:
    """``copy.deepcopy(v)`` within one deep copy: each original copied once."""
    if id(v) not in memo:
        memo[id(v)] = copy_of(tx, v, memo)
    return memo[id(v)]


@on_value(1)
def enter(tx: Interpreter, ctx: Value, offset: int) -> tuple[Value, Value]:
    """``with ctx:`` at the BEFORE_WITH at ``offset``: (the exit the block's end
    calls with three Nones, what ``__enter__`` returned)."""
    raise tx.unsupported(
        f"a with-block over a {describe_value(ctx)}",
        "ember captures with-blocks over torch.no_grad, torch.enable_grad, "
        "torch.set_grad_enabled, torch.autocast, contextlib's managers and "
        "classes with Python __enter__ and __exit__",
    )


@on_value(1)
def rebuild(out: Emitter, v: Value) -> str:
    """Python that evaluates to the real object ``v`` stands for, in the
    transformed code ``out`` writes. Raises TypeError for values that have no
    real counterpart (iterators, functions built during capture)."""
    raise TypeError(f"a {type(v).__name__} has no value outside capture")


@on_value(0)
def python_type(v: Value) -> type:
    """The Python type of the real object ``v`` stands for (``object`` for the
    kinds that stand for no real object)."""
    return object


@on_value(0)
def parts(v: Value) -> dict[object, Value]:
    """The values ``v`` holds, by index, key or attribute name (a container's
    items, an object's attributes): what the graph must return for ``v`` to be
    rebuilt, and what a call may change in place."""
    return {}


def reachable(roots: list[Value]) -> Iterator[Value]:
    """Every value reachable from ``roots`` through ``parts``, each once, depth
    first in order (objects may hold themselves)."""
    seen: set[int] = set()
    todo = list(reversed(roots))
    while todo:
        v = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        yield v
        todo.extend(reversed(list(parts(v).values())))


@on_value(0)
def describe_value(v: Value) -> str:
    """What a message calls ``v``: the type of the object it stands for."""
    if hasattr(v, "value"):
        return type(v.value).__qualname__
    return type(v).__name__.removesuffix("Value").lower()


# -- helpers shared by the kinds --------------------------------------------------


def fold(tx: Interpreter, target: Callable, args, kwargs) -> Value:
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
    """The value for a Python constant: plain tuples, lists and dicts become
    containers of values (so they can be changed and hold tensors later)."""
    if type(value) is tuple:
        return TupleValue(tuple(constant_value(v) for v in value))
    if type(value) is list:
        return ListValue([constant_value(v) for v in value])
    if type(value) is dict:
        return DictValue({k: constant_value(v) for k, v in value.items()})
    return ConstValue(value)


@on_value(1)
def key(tx: Interpreter, v: Value) -> object:
    """A dict key: a hashable constant (tensors register their own: an
    ``ObjectKey``, found by identity)."""
    k = constant(tx, v)
    if not hashable(k):
        raise tx.unsupported(f"a dict key of type {type(k).__name__}")
    return k


def key_value(tx: Interpreter, k: object) -> Value:
    """A dict key as a value again: a constant, or the object an ``ObjectKey``
    stands for."""
    if not isinstance(k, ObjectKey):
        return ConstValue(k)
    return k.value if k.value is not None else tx.output.wrap(k.obj, k.source)


def keyword(tx: Interpreter, k: object) -> str:
    if not isinstance(k, str):
        raise tx.unsupported(f"a keyword argument named by a {type(k).__name__}")
    return k


def hashable(obj: object) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def describe(target: object) -> str:
    """A callable's qualified name, for messages."""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    module = getattr(target, "__module__", None)
    if name:
        return f"{module}.{name}" if module else name
    return f"an object of type {type(target).__qualname__}"


def is_none(v: Value) -> bool:
    return isinstance(v, ConstValue) and v.value is None


def guarded_len(tx: Interpreter, v: ModuleValue) -> int:
    """The length of a module container, guarded."""
    n = len(v.value)
    tx.output.guards.add(Guard(GuardKind.EQUALS_MATCH, LenSource(v.source), (int, n)))
    return n
