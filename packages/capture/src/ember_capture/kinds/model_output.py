"""transformers' ModelOutput built inside the function: a dataclass whose fields
that are not None are also its items, in order (``out.logits``, ``out["logits"]``,
``out[0]``, ``out.to_tuple()``, ``len(out)``). Recognised by the base class's
qualified name, so capture does not import transformers."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .. import builtin_calls
from ..behaviour import (
    constant,
    contains,
    get_attr,
    is_none,
    item_of,
    iterate,
    length,
    truth,
)
from ..variables import (
    ConstValue,
    ListValue,
    MethodValue,
    ModelOutputValue,
    TensorValue,
    TupleValue,
    Value,
)

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter

BASE = "transformers.utils.generic.ModelOutput"
_METHODS = frozenset({"to_tuple", "keys", "values", "items", "get"})


def is_model_output(cls: type) -> bool:
    return dataclasses.is_dataclass(cls) and any(
        f"{k.__module__}.{k.__qualname__}" == BASE for k in cls.__mro__
    )


@builtin_calls.constructs(is_model_output)
def _build(tx: Interpreter, cls_value: Value, args, kwargs) -> Value:
    cls = cls_value.value
    names = [f.name for f in dataclasses.fields(cls)]
    values = builtin_calls.bind_fields(tx, cls, args, kwargs)
    first, rest = values[0], values[1:]
    alone = all(is_none(v) for v in rest)
    if alone and not isinstance(first, TensorValue) and not is_none(first):
        # __post_init__ may unpack an iterable first field into fields
        raise tx.unsupported(
            f"constructing a {cls.__qualname__} from one non-tensor value"
        )
    return ModelOutputValue(cls, dict(zip(names, values)))


def _present(out: ModelOutputValue) -> dict[str, Value]:
    """The items: the fields that are not None, in order."""
    return {k: v for k, v in out.fields.items() if not is_none(v)}


@get_attr.register(ModelOutputValue)
def _attr(tx: Interpreter, out: ModelOutputValue, name: str) -> Value:
    if name in out.fields:
        return out.fields[name]
    if name in _METHODS:
        return MethodValue(out, name)
    raise tx.unsupported(f"reading attribute {name!r} of a {out.cls.__qualname__}")


@item_of.register(ModelOutputValue)
def _item(tx: Interpreter, out: ModelOutputValue, k: object) -> Value:
    present = _present(out)
    if isinstance(k, str):
        if k not in present:
            raise tx.unsupported(f"reading missing key {k!r} (KeyError)")
        return present[k]
    picked = list(present.values())[k]
    return TupleValue(tuple(picked)) if isinstance(k, slice) else picked


@iterate.register(ModelOutputValue)
def _keys(tx: Interpreter, out: ModelOutputValue) -> list[Value]:
    return [ConstValue(k) for k in _present(out)]


@length.register(ModelOutputValue)
def _length(tx: Interpreter, out: ModelOutputValue) -> int:
    return len(_present(out))


@contains.register(ModelOutputValue)
def _contains(tx: Interpreter, out: ModelOutputValue, item: Value) -> bool:
    return constant(tx, item) in _present(out)


@truth.register(ModelOutputValue)
def _truth(tx: Interpreter, out: ModelOutputValue) -> bool:
    return bool(_present(out))


@builtin_calls.handles_method((ModelOutputValue,), "to_tuple")
def _to_tuple(tx: Interpreter, out: ModelOutputValue) -> Value:
    return TupleValue(tuple(_present(out).values()))


@builtin_calls.handles_method((ModelOutputValue,), "keys")
def _keys_method(tx: Interpreter, out: ModelOutputValue) -> Value:
    return ConstValue(dict.fromkeys(_present(out)).keys())


@builtin_calls.handles_method((ModelOutputValue,), "values")
def _values(tx: Interpreter, out: ModelOutputValue) -> Value:
    return ListValue(list(_present(out).values()))


@builtin_calls.handles_method((ModelOutputValue,), "items")
def _items(tx: Interpreter, out: ModelOutputValue) -> Value:
    return ListValue([TupleValue((ConstValue(k), v)) for k, v in _present(out).items()])


@builtin_calls.handles_method((ModelOutputValue,), "get")
def _get(tx: Interpreter, out: ModelOutputValue, k: Value, default=None) -> Value:
    present = _present(out)
    name = constant(tx, k)
    if name in present:
        return present[name]
    return default if default is not None else ConstValue(None)
