"""Containers: tuples, lists and dicts (made in the function or read from the
frame, changed in place and replayed), named tuples, dataclasses, iterators and
generators; and the operators ``+ * |`` and their in-place forms on them."""

from __future__ import annotations

import collections
import operator
from typing import TYPE_CHECKING

from .. import builtin_calls
from ..behaviour import (
    call,
    constant,
    contains,
    copy_of,
    deep_copy,
    del_item,
    describe_value,
    get_attr,
    get_item,
    is_none,
    item_of,
    iterate,
    key,
    key_value,
    length,
    parts,
    python_type,
    rebuild,
    set_attr,
    set_item,
    truth,
)
from ..source import key_text
from ..variables import (
    ConstValue,
    DataclassValue,
    DictValue,
    GeneratorValue,
    IteratorValue,
    ListValue,
    MethodValue,
    NamedTupleValue,
    SymIntValue,
    TupleValue,
    Value,
)

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter
    from ..emit import Emitter

_SEQUENCES = (TupleValue, ListValue, NamedTupleValue)


@python_type.register(TupleValue)
def _tuple_type(v: TupleValue) -> type:
    return tuple


@python_type.register(ListValue)
def _list_type(v: ListValue) -> type:
    return list


@python_type.register(DictValue)
def _dict_type(v: DictValue) -> type:
    return dict if v.default_factory is None else collections.defaultdict


@python_type.register(NamedTupleValue, DataclassValue)
def _class_type(v: NamedTupleValue | DataclassValue) -> type:
    return v.cls


@parts.register(*_SEQUENCES)
def _sequence_parts(v: Value) -> dict[object, Value]:
    return dict(enumerate(v.items))


@parts.register(DictValue)
def _dict_parts(v: DictValue) -> dict[object, Value]:
    return dict(v.items)


@parts.register(DataclassValue)
def _dataclass_parts(v: DataclassValue) -> dict[object, Value]:
    return dict(v.fields)


def _copied(tx: Interpreter, values, memo) -> list[Value]:
    """The items of a copy: the same values, or deep copies of them."""
    if memo is None:
        return list(values)
    return [deep_copy(tx, v, memo) for v in values]


@copy_of.register(TupleValue, ListValue)
def _copy_sequence(tx: Interpreter, v: Value, memo) -> Value:
    if isinstance(v, TupleValue) and memo is None:
        return v  # copy.copy of a tuple is the tuple
    items = _copied(tx, v.items, memo)
    return ListValue(items) if isinstance(v, ListValue) else TupleValue(tuple(items))


@copy_of.register(NamedTupleValue)
def _copy_named(tx: Interpreter, v: NamedTupleValue, memo) -> Value:
    return (
        v if memo is None else NamedTupleValue(v.cls, tuple(_copied(tx, v.items, memo)))
    )


@copy_of.register(DictValue)
def _copy_dict(tx: Interpreter, v: DictValue, memo) -> Value:
    return DictValue(dict(zip(v.items, _copied(tx, v.items.values(), memo))))


@copy_of.register(DataclassValue)
def _copy_dataclass(tx: Interpreter, v: DataclassValue, memo) -> Value:
    fields = dict(zip(v.fields, _copied(tx, v.fields.values(), memo)))
    return type(v)(v.cls, fields)


@get_attr.register(TupleValue, ListValue, DictValue)
def _method(tx: Interpreter, obj: Value, name: str) -> Value:
    return MethodValue(obj, name)


@get_attr.register(NamedTupleValue)
def _named_field(tx: Interpreter, obj: NamedTupleValue, name: str) -> Value:
    if name in obj.fields:
        return obj.items[obj.fields.index(name)]
    return MethodValue(obj, name)


@get_attr.register(DataclassValue)
def _dataclass_field(tx: Interpreter, obj: DataclassValue, name: str) -> Value:
    if name in obj.fields:
        return obj.fields[name]
    raise tx.unsupported(f"reading attribute {name!r} of a {describe_value(obj)}")


@set_attr.register(DataclassValue)
def _set_field(tx: Interpreter, obj: DataclassValue, name: str, value: Value) -> None:
    if obj.source is not None:
        raise tx.unsupported(f"assigning attribute {name!r} of a {describe_value(obj)}")
    obj.fields[name] = value


@truth.register(*_SEQUENCES, DictValue)
def _truth(tx: Interpreter, v: Value) -> bool:
    return bool(v.items)


@truth.register(DataclassValue)
def _dataclass_truth(tx: Interpreter, v: DataclassValue) -> bool:
    if hasattr(v.cls, "__bool__") or hasattr(v.cls, "__len__"):
        raise tx.unsupported(f"the truth of a {v.cls.__qualname__} object")
    return True


@iterate.register(*_SEQUENCES)
def _items(tx: Interpreter, v: Value) -> list[Value]:
    return list(v.items)


@iterate.register(DictValue)
def _keys(tx: Interpreter, v: DictValue) -> list[Value]:
    return [key_value(tx, k) for k in v.items]


@iterate.register(IteratorValue)
def _rest(tx: Interpreter, v: IteratorValue) -> list[Value]:
    items = v.items[v.position :]
    v.position = len(v.items)
    return items


@iterate.register(GeneratorValue)
def _drain(tx: Interpreter, v: GeneratorValue) -> list[Value]:
    drained = []
    while (item := v.next()) is not None:
        drained.append(item)
    return drained


@contains.register(DictValue)
def _has_key(tx: Interpreter, d: DictValue, item: Value) -> bool:
    return key(tx, item) in d.items


@length.register(*_SEQUENCES, DictValue)
def _length(tx: Interpreter, v: Value) -> int:
    return len(v.items)


@item_of.register(*_SEQUENCES)
def _sequence_item(tx: Interpreter, obj: Value, k: object) -> Value:
    picked = obj.items[k]
    if not isinstance(k, slice):
        return picked
    if isinstance(obj, ListValue):
        return ListValue(list(picked))
    return TupleValue(tuple(picked))


@get_item.register(DictValue)
def _get_dict_item(tx: Interpreter, obj: DictValue, index: Value) -> Value:
    return _dict_item(tx, obj, key(tx, index))


@item_of.register(DictValue)
def _dict_item(tx: Interpreter, obj: DictValue, k: object) -> Value:
    if k in obj.items:
        return obj.items[k]
    if obj.default_factory is None or is_none(obj.default_factory):
        raise tx.unsupported(f"reading missing key {key_text(k)} (KeyError)")
    made = obj.items[k] = call(tx, obj.default_factory, [], {})
    if obj.source is not None:
        tx.output.write_contents(obj)
    return made


@set_item.register(ListValue)
def _set_list_item(tx: Interpreter, obj: ListValue, index: Value, value: Value):
    where = constant(tx, index)
    # A slice takes the items of any iterable value: ``lst[1:2] = (a, b)``.
    obj.items[where] = iterate(tx, value) if isinstance(where, slice) else value
    if obj.source is not None:
        tx.output.write_contents(obj)


@set_item.register(DictValue)
def _set_dict_item(tx: Interpreter, obj: DictValue, index: Value, value: Value):
    obj.items[key(tx, index)] = value
    if obj.source is not None:
        tx.output.write_contents(obj)


@del_item.register(ListValue)
def _del_list_item(tx: Interpreter, obj: ListValue, index: Value) -> None:
    del obj.items[constant(tx, index)]
    builtin_calls.note_change(tx, obj)


@del_item.register(DictValue)
def _del_dict_item(tx: Interpreter, obj: DictValue, index: Value) -> None:
    k = key(tx, index)
    if k not in obj.items:
        raise tx.unsupported(f"deleting missing key {k!r} (KeyError)")
    del obj.items[k]
    builtin_calls.note_change(tx, obj)


@constant.register(TupleValue)
def _tuple_constant(tx: Interpreter, v: TupleValue) -> object:
    return tuple(constant(tx, i) for i in v.items)


@constant.register(ListValue)
def _list_constant(tx: Interpreter, v: ListValue) -> object:
    return [constant(tx, i) for i in v.items]


@constant.register(DictValue)
def _dict_constant(tx: Interpreter, v: DictValue) -> object:
    return {k: constant(tx, i) for k, i in v.items.items()}


@constant.register(NamedTupleValue)
def _named_constant(tx: Interpreter, v: NamedTupleValue) -> object:
    return v.build([constant(tx, i) for i in v.items])


@rebuild.register(TupleValue)
def _rebuild_tuple(out: Emitter, v: TupleValue) -> str:
    items = [out.expr(i) for i in v.items]
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


@rebuild.register(ListValue, DictValue)
def _rebuild_container(out: Emitter, v: Value) -> str:
    if v.source is not None:  # the caller's own object (replay updated it)
        return out.read(v.source)
    return out.built(v)


@rebuild.register(NamedTupleValue)
def _rebuild_named(out: Emitter, v: NamedTupleValue) -> str:
    items = [out.expr(i) for i in v.items]
    return f"{out.constant(v.cls)}{v.build_code(items)}"


@rebuild.register(DataclassValue)
def _rebuild_dataclass(out: Emitter, v: DataclassValue) -> str:
    if v.source is not None:  # read from the frame (never changed): itself
        return out.read(v.source)
    fields = ", ".join(f"{k}={out.expr(i)}" for k, i in v.fields.items())
    return f"{out.constant(v.cls)}({fields})"


# -- operators -------------------------------------------------------------------


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


def _equal(tx, a: Value, b: Value) -> bool:
    """``a == b`` of two tuples or lists whose items are numbers, some of them
    symbolic sizes (``h.size() == (b, 4)``, as nn.RNN checks its hidden
    state): item by item, each size relation decided or guarded, never the
    sizes pinned to their values."""
    sequences = (TupleValue, ListValue)
    a, b = _as_sequence(a), _as_sequence(b)
    if not (isinstance(a, sequences) and isinstance(b, sequences)):
        raise tx.unsupported(f"{describe_value(a)} == {describe_value(b)}")
    if isinstance(a, ListValue) != isinstance(b, ListValue):
        return False  # a list never equals a tuple
    if len(a.items) != len(b.items):
        return False
    for x, y in zip(a.items, b.items):
        x, y = _as_sequence(x), _as_sequence(y)
        if isinstance(x, SymIntValue) or isinstance(y, SymIntValue):
            same = truth(tx, tx.output.call_size_op(operator.eq, [x, y]))
        elif isinstance(x, ConstValue) and isinstance(y, ConstValue):
            same = x.value == y.value
        elif isinstance(x, sequences) and isinstance(y, sequences):
            same = _equal(tx, x, y)
        else:
            raise tx.unsupported(f"{describe_value(a)} == {describe_value(b)}")
        if not same:
            return False
    return True


def _as_sequence(v: Value) -> Value:
    """A constant tuple, torch.Size or list (a mask's fixed ``size()``,
    compared with a tuple holding a symbolic length) as a sequence of
    constants."""
    if isinstance(v, ConstValue) and isinstance(v.value, (tuple, list)):
        items = [ConstValue(i) for i in v.value]
        return (
            ListValue(items) if isinstance(v.value, list) else TupleValue(tuple(items))
        )
    return v


# == and != of sequences holding symbolic sizes (others fold as constants).
SIZE_COMPARISONS = {
    operator.eq: lambda tx, a, b: ConstValue(_equal(tx, a, b)),
    operator.ne: lambda tx, a, b: ConstValue(not _equal(tx, a, b)),
}


def holds_sizes(args) -> bool:
    """Whether a binary operator compares sequences with a symbolic size (in
    them, or in a sequence they hold)."""
    return len(args) == 2 and any(_holds_size(a) for a in args)


def _holds_size(v: Value) -> bool:
    """Whether the sequence ``v`` holds a symbolic size, at any depth."""
    return isinstance(v, (TupleValue, ListValue)) and any(
        isinstance(i, SymIntValue) or _holds_size(i) for i in v.items
    )


# Operators on lists, tuples and dicts: new containers, or (the augmented forms
# on a list or dict) the same one changed in place, as Python does.
SEQUENCE_OPS = {
    operator.add: _concat,
    operator.mul: _repeat,
    operator.iadd: _extend_in_place,
    operator.imul: _repeat_in_place,
    operator.or_: _merge,
    operator.ior: _merge_in_place,
}


def is_sequence_op(args) -> bool:
    """Whether a binary operator's operands make it a container operation."""
    return len(args) == 2 and any(
        isinstance(a, (ListValue, TupleValue, DictValue)) for a in args
    )
