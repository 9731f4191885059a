"""Callables with a meaning of their own: builtins, grad-mode managers, classes.

``HANDLERS`` maps a real callable (``len``, ``zip``, ``torch.no_grad``...) to the
function that interprets a call of it; ``METHOD_HANDLERS`` maps (value kind, method
name) to the same for methods of lists, tuples and dicts. Each handler is registered
next to its code.
"""

from __future__ import annotations

import builtins
import collections
import copy
import dataclasses
import itertools
import operator
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from . import behaviour, grad_mode
from .errors import CaptureError
from .guards import Guard, GuardKind
from .source import HasAttrSource, ModuleEntrySource, NamedMembersSource
from .variables import (
    ConstValue,
    DataclassValue,
    DictValue,
    GeneratorValue,
    GradModeValue,
    IteratorValue,
    ListValue,
    ModuleValue,
    NamedTupleValue,
    NewObjectValue,
    ObjectKey,
    ObjectValue,
    SuperValue,
    SymIntValue,
    TensorValue,
    TupleValue,
    UserObjectValue,
    Value,
)

if TYPE_CHECKING:
    from .bytecode_interp import Interpreter

HANDLERS: dict[object, Callable[..., Value]] = {}
METHOD_HANDLERS: dict[tuple[type, str], Callable[..., Value]] = {}


def handles(*targets: object):
    def register(handler):
        for target in targets:
            HANDLERS[target] = handler
        return handler

    return register


def handles_method(kinds: tuple[type, ...], *names: str):
    def register(handler):
        for kind in kinds:
            for name in names:
                METHOD_HANDLERS[(kind, name)] = handler
        return handler

    return register


# -- builtins -----------------------------------------------------------------------


@handles(builtins.len)
def _len(tx, obj: Value) -> Value:
    return ConstValue(behaviour.length(tx, obj))


@handles(builtins.bool)
def _bool(tx, *obj: Value) -> Value:
    return ConstValue(bool(obj) and behaviour.truth(tx, obj[0]))


@handles(builtins.isinstance)
def _isinstance(tx, obj: Value, classes: Value) -> Value:
    return ConstValue(
        issubclass(behaviour.python_type(obj), behaviour.constant(tx, classes))
    )


@handles(builtins.issubclass)
def _issubclass(tx, cls: Value, classes: Value) -> Value:
    return ConstValue(
        issubclass(behaviour.constant(tx, cls), behaviour.constant(tx, classes))
    )


@handles(builtins.type)
def _type(tx, obj: Value, *rest: Value) -> Value:
    if rest:
        raise tx.unsupported("creating a class with type(name, bases, dict)")
    if isinstance(obj, (UserObjectValue, ModuleValue, NewObjectValue)):
        # Read where the object's class is, so ``type(self).forward`` is the
        # function itself (guarded), as in Python, not a method of a constant.
        return behaviour.get_attr(tx, obj, "__class__")
    return ObjectValue(behaviour.python_type(obj))


@handles(builtins.callable)
def _callable(tx, obj: Value) -> Value:
    cls = behaviour.python_type(obj)
    return ConstValue(any("__call__" in k.__dict__ for k in cls.__mro__))


@handles(builtins.getattr)
def _getattr(tx, obj: Value, name: Value, default: Value | None = None) -> Value:
    attr = behaviour.constant(tx, name)
    if default is None:
        return behaviour.get_attr(tx, obj, attr)
    found = _look_up(tx, obj, attr)
    return default if found is None else found


@handles(builtins.hasattr)
def _hasattr(tx, obj: Value, name: Value) -> Value:
    return ConstValue(_look_up(tx, obj, behaviour.constant(tx, name)) is not None)


def _look_up(tx, obj: Value, attr: str) -> Value | None:
    """``obj.attr``, or None where reading it raises AttributeError, also from
    inside an inlined ``__getattribute__``, ``__getattr__`` or property (Python's
    getattr with a default and hasattr catch those too)."""
    try:
        return behaviour.get_attr(tx, obj, attr)
    except AttributeError:
        pass
    except CaptureError as e:
        if not isinstance(e.__cause__, AttributeError) or e.break_point is not None:
            raise
    _guard_missing(tx, obj, attr)
    return None


def _guard_missing(tx, obj: Value, attr: str) -> None:
    """The answer "no such attribute" holds only while it stays missing."""
    if obj.source is not None:
        source = HasAttrSource(obj.source, attr)
        tx.output.guards.add(Guard(GuardKind.EQUALS_MATCH, source, (bool, False)))


@handles(builtins.setattr)
def _setattr(tx, obj: Value, name: Value, value: Value) -> Value:
    behaviour.set_attr(tx, obj, behaviour.constant(tx, name), value)
    return ConstValue(None)


@handles(builtins.delattr)
def _delattr(tx, obj: Value, name: Value) -> Value:
    behaviour.del_attr(tx, obj, behaviour.constant(tx, name))
    return ConstValue(None)


@handles(copy.copy)
def _copy(tx, obj: Value) -> Value:
    return behaviour.copy_of(tx, obj, None)


@handles(copy.deepcopy)
def _deepcopy(tx, obj: Value, memo: Value | None = None) -> Value:
    if memo is not None and not behaviour.is_none(memo):
        raise tx.unsupported("copy.deepcopy with a memo of the caller's")
    return behaviour.deep_copy(tx, obj, {})


@handles(builtins.iter)
def _iter(tx, obj: Value) -> Value:
    if isinstance(obj, (IteratorValue, GeneratorValue)):
        return obj
    return IteratorValue(behaviour.iterate(tx, obj))


@handles(builtins.next)
def _next(tx, it: Value, default: Value | None = None) -> Value:
    if not isinstance(it, (IteratorValue, GeneratorValue)):
        raise tx.unsupported(f"next() of a {behaviour.describe_value(it)}")
    item = it.next()
    if item is None:
        if default is None:
            raise tx.unsupported("next() of an exhausted iterator (StopIteration)")
        return default
    return item


@handles(builtins.list)
def _list(tx, obj: Value | None = None) -> Value:
    return ListValue([] if obj is None else behaviour.iterate(tx, obj))


@handles(builtins.tuple)
def _tuple(tx, obj: Value | None = None) -> Value:
    return TupleValue(() if obj is None else tuple(behaviour.iterate(tx, obj)))


@handles(builtins.dict)
def as_dict(tx, obj: Value | None = None, **kwargs: Value) -> DictValue:
    """``dict(obj, **kwargs)``: a new DictValue from a dict or from pairs."""
    items: dict[object, Value] = {}
    if isinstance(obj, DictValue):
        items.update(obj.items)
    elif obj is not None:
        for pair in behaviour.iterate(tx, obj):
            k, v = behaviour.iterate(tx, pair)
            items[behaviour.key(tx, k)] = v
    items.update(kwargs)
    return DictValue(items)


@handles(collections.defaultdict)
def _defaultdict(
    tx, factory: Value | None = None, obj: Value | None = None, **kwargs: Value
) -> DictValue:
    made = as_dict(tx, obj, **kwargs)
    return DictValue(made.items, default_factory=factory or ConstValue(None))


@handles(builtins.zip)
def _zip(tx, *iterables: Value, strict: Value | None = None) -> Value:
    columns = [behaviour.iterate(tx, it) for it in iterables]
    strict_on = strict is not None and behaviour.constant(tx, strict)
    if strict_on and len({len(c) for c in columns}) > 1:
        raise tx.unsupported("zip(strict=True) over different lengths")
    return IteratorValue([TupleValue(row) for row in zip(*columns)])


@handles(builtins.map)
def _map(tx, fn: Value, *iterables: Value) -> Value:
    # Eager's map is lazy; calling fn on every item now gives the same items
    # as long as the consumer drains it, which list(), for and zip() do.
    columns = [behaviour.iterate(tx, it) for it in iterables]
    return IteratorValue(
        [behaviour.call(tx, fn, list(row), {}) for row in zip(*columns)]
    )


@handles(builtins.filter)
def _filter(tx, fn: Value, iterable: Value) -> Value:
    items = behaviour.iterate(tx, iterable)
    if behaviour.is_none(fn):
        return IteratorValue([i for i in items if behaviour.truth(tx, i)])
    kept = [i for i in items if behaviour.truth(tx, behaviour.call(tx, fn, [i], {}))]
    return IteratorValue(kept)


@handles(builtins.enumerate)
def _enumerate(tx, iterable: Value, start: Value | None = None) -> Value:
    first = 0 if start is None else behaviour.constant(tx, start)
    items = behaviour.iterate(tx, iterable)
    return IteratorValue(
        [TupleValue((ConstValue(first + i), v)) for i, v in enumerate(items)]
    )


@handles(typing.cast)
def _cast(tx, typ: Value, value: Value) -> Value:
    return value


@handles(itertools.chain)
def _chain(tx, *iterables: Value) -> Value:
    return IteratorValue([i for it in iterables for i in behaviour.iterate(tx, it)])


@handles(itertools.chain.from_iterable)
def _chain_from_iterable(tx, iterables: Value) -> Value:
    return _chain(tx, *behaviour.iterate(tx, iterables))


@handles(builtins.reversed)
def _reversed(tx, seq: Value) -> Value:
    return IteratorValue(list(reversed(behaviour.iterate(tx, seq))))


@handles(builtins.sum)
def _sum(tx, iterable: Value, start: Value | None = None) -> Value:
    total = ConstValue(0) if start is None else start
    for item in behaviour.iterate(tx, iterable):
        total = behaviour.call(tx, ConstValue(operator.add), [total, item], {})
    return total


def _keys(tx, items: list[Value], key: Value) -> list[object]:
    """The constant ``key(item)`` of each item (key is any callable: a lambda,
    a function, a bound method, inlined)."""
    return [behaviour.constant(tx, behaviour.call(tx, key, [i], {})) for i in items]


def _min_max(fn: Callable) -> Callable[..., Value]:
    def handler(tx, *args: Value, **kwargs: Value) -> Value:
        items = behaviour.iterate(tx, args[0]) if len(args) == 1 else list(args)
        key = kwargs.pop("key", None)
        if key is not None and not behaviour.is_none(key):
            if not items:
                if "default" not in kwargs:
                    raise tx.unsupported(f"{fn.__name__}() of an empty sequence")
                return kwargs["default"]
            keys = _keys(tx, items, key)
            return items[keys.index(fn(keys))]  # the first of equal keys, as Python
        if any(isinstance(i, TensorValue) for i in items):
            raise tx.unsupported(
                f"{fn.__name__}() over tensors (it compares their data)",
                "use torch.minimum / torch.maximum",
            )
        if items and any(isinstance(i, SymIntValue) for i in items):
            # sizes: the winner by guarded relations, so ``max(n - w, 0)`` with
            # a symbolic n stays one graph for every n on the same side of w
            wins = operator.gt if fn is builtins.max else operator.lt
            best = items[0]
            for item in items[1:]:
                beats = behaviour.call(tx, ConstValue(wins), [item, best], {})
                if behaviour.truth(tx, beats):
                    best = item
            return best
        return behaviour.fold(tx, fn, [TupleValue(tuple(items))], kwargs)

    return handler


def _any_all(fn: Callable) -> Callable[..., Value]:
    # Stops at the deciding item, like the builtin: a generator is not drained.
    def handler(tx, iterable: Value) -> Value:
        it = _iter(tx, iterable)
        return ConstValue(fn(behaviour.truth(tx, i) for i in iter(it.next, None)))

    return handler


@handles(builtins.sorted)
def _sorted(
    tx, iterable: Value, key: Value | None = None, reverse: Value | None = None
):
    items = behaviour.iterate(tx, iterable)
    flag = bool(behaviour.constant(tx, reverse)) if reverse is not None else False
    if key is None or behaviour.is_none(key):
        keys = [behaviour.constant(tx, i) for i in items]
    else:
        keys = _keys(tx, items, key)
    order = sorted(range(len(items)), key=keys.__getitem__, reverse=flag)
    return ListValue([items[i] for i in order])


for _fn in (builtins.min, builtins.max):
    HANDLERS[_fn] = _min_max(_fn)
for _fn in (builtins.any, builtins.all):
    HANDLERS[_fn] = _any_all(_fn)


@handles(builtins.abs)
def _abs(tx, obj: Value) -> Value:
    return behaviour.call(tx, ConstValue(operator.abs), [obj], {})


@handles(builtins.print)
def _print(tx, *args: Value, **kwargs: Value) -> Value:
    raise tx.unsupported(
        "print() inside the compiled function",
        "remove the print, or print the returned values instead",
    )


@handles(builtins.super)
def _super(tx, *args: Value) -> Value:
    if args:
        cls, receiver = args
        return SuperValue(behaviour.constant(tx, cls), receiver)
    if "__class__" not in tx.code.co_freevars or not tx.code.co_varnames:
        raise tx.unsupported("super() outside a method")
    cls = tx.cell("__class__").value
    receiver = tx.load_local(tx.code.co_varnames[0])
    return SuperValue(behaviour.constant(tx, cls), receiver)


# -- operators that are not tensor ops on every input -----------------------------


@handles(operator.is_)
def _is(tx, a: Value, b: Value) -> Value:
    return ConstValue(_same_object(a, b))


@handles(operator.is_not)
def _is_not(tx, a: Value, b: Value) -> Value:
    return ConstValue(not _same_object(a, b))


def _same_object(a: Value, b: Value) -> bool:
    if isinstance(a, TensorValue) or isinstance(b, TensorValue):
        return (
            isinstance(a, TensorValue)
            and isinstance(b, TensorValue)
            and (a.node is b.node)
        )
    if hasattr(a, "value") and hasattr(b, "value"):
        return a.value is b.value
    return a is b


@handles(operator.contains)
def _contains(tx, container: Value, item: Value) -> Value:
    if isinstance(item, TensorValue):
        raise tx.unsupported(IN_WITH_A_TENSOR)
    return ConstValue(bool(behaviour.contains(tx, container, item)))


IN_WITH_A_TENSOR = "`in` with a tensor (it compares tensor data)"


def not_contains(container: object, item: object) -> bool:
    """``item not in container``: what CONTAINS_OP with its invert bit computes."""
    return item not in container


@handles(not_contains)
def _not_contains(tx, container: Value, item: Value) -> Value:
    return ConstValue(not _contains(tx, container, item).value)


@handles(operator.getitem)
def _getitem(tx, obj: Value, index: Value) -> Value:
    return behaviour.get_item(tx, obj, index)


# -- grad mode ------------------------------------------------------------------------


@handles(torch.no_grad)
def _no_grad(tx) -> Value:
    return GradModeValue(False)


@handles(torch.enable_grad)
def _enable_grad(tx) -> Value:
    return GradModeValue(True)


@handles(torch.set_grad_enabled)
def _set_grad_enabled(tx, mode: Value) -> Value:
    # Like torch, the switch happens at the call, with or without a with-block.
    enabled = bool(behaviour.constant(tx, mode))
    previous = torch.is_grad_enabled()
    grad_mode.set_grad_mode(tx, enabled)
    return GradModeValue(enabled, previous)


# -- constructing objects -------------------------------------------------------------


# Classes with a builder of their own (kinds/): (accepts(cls), build(tx,
# cls_value, args, kwargs)), tried in order before namedtuples and dataclasses;
# ``cls_value`` is the class as the frame read it (its source guards it).
CONSTRUCTORS: list[tuple[Callable[[type], bool], Callable[..., Value]]] = []


def constructs(accepts: Callable[[type], bool]):
    """Register a builder for the classes ``accepts`` says yes to."""

    def register(build: Callable[..., Value]) -> Callable[..., Value]:
        CONSTRUCTORS.append((accepts, build))
        return build

    return register


def construct(tx: Interpreter, cls_value: Value, args, kwargs) -> Value:
    """``cls(*args, **kwargs)`` for the classes capture can build: those kinds/
    registers (objects of plain user classes, ModelOutputs), namedtuples, and
    dataclasses with the generated __init__."""
    cls = cls_value.value
    for accepts, build in CONSTRUCTORS:
        if accepts(cls):
            return build(tx, cls_value, args, kwargs)
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return NamedTupleValue(cls, tuple(bind_fields(tx, cls, args, kwargs)))
    if dataclasses.is_dataclass(cls) and plain_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        values = bind_fields(tx, cls, args, kwargs)
        return DataclassValue(cls, dict(zip(names, values)))
    raise tx.unsupported(
        f"constructing a {behaviour.describe(cls)}",
        "build the object outside the compiled function and pass it in",
    )


def plain_dataclass(cls: type) -> bool:
    """A dataclass capture builds field by field: the generated __init__ for
    every field and no __post_init__."""
    fields = dataclasses.fields(cls)
    return (
        not hasattr(cls, "__post_init__")
        and cls.__dataclass_params__.init
        and all(f.init for f in fields)
    )


def bind_fields(tx, cls: type, args, kwargs) -> list[Value]:
    if hasattr(cls, "_fields"):
        names, defaults = list(cls._fields), dict(cls._field_defaults)
    else:
        fields = dataclasses.fields(cls)
        names = [f.name for f in fields]
        defaults = {
            f.name: f.default for f in fields if f.default is not dataclasses.MISSING
        }
    if len(args) > len(names):
        raise tx.unsupported(f"{cls.__qualname__}() with too many arguments")
    bound = dict(zip(names, args))
    for name, value in kwargs.items():
        if name not in names or name in bound:
            raise tx.unsupported(f"{cls.__qualname__}() with argument {name!r}")
        bound[name] = value
    for name in names:
        if name not in bound:
            if name not in defaults:
                raise tx.unsupported(f"{cls.__qualname__}() missing {name!r}")
            bound[name] = behaviour.constant_value(defaults[name])
    return [bound[name] for name in names]


# -- methods of lists, tuples and dicts ------------------------------------------------


def note_change(tx, container: Value) -> None:
    """Note a change to ``container``: one from outside is replayed after the graph."""
    if container.source is not None:
        tx.output.write_contents(container)


@handles_method((DictValue,), "items")
def _dict_items(tx, d: DictValue) -> Value:
    return ListValue(
        [TupleValue((behaviour.key_value(tx, k), v)) for k, v in d.items.items()]
    )


@handles_method((DictValue,), "keys")
def _dict_keys(tx, d: DictValue) -> Value:
    # Constant keys: a real keys view of them iterates, tests membership and
    # takes set operators (``a.keys() | b.keys()``) by folding. It is a
    # snapshot, not a live view of ``d``. Keys found by identity are listed.
    if any(isinstance(k, ObjectKey) for k in d.items):
        return ListValue([behaviour.key_value(tx, k) for k in d.items])
    return ConstValue(dict.fromkeys(d.items).keys())


@handles_method((DictValue,), "values")
def _dict_values(tx, d: DictValue) -> Value:
    return ListValue(list(d.items.values()))


@handles_method((DictValue,), "get")
def _dict_get(tx, d: DictValue, k: Value, default: Value | None = None) -> Value:
    return d.items.get(behaviour.key(tx, k), default or ConstValue(None))


@handles_method((DictValue,), "copy")
def _dict_copy(tx, d: DictValue) -> Value:
    return DictValue(dict(d.items))


@handles_method((DictValue,), "update")
def _dict_update(tx, d: DictValue, other: Value | None = None, **kwargs) -> Value:
    note_change(tx, d)
    d.items.update(as_dict(tx, other, **kwargs).items)
    return ConstValue(None)


@handles_method((DictValue,), "setdefault")
def _dict_setdefault(tx, d: DictValue, k: Value, default: Value | None = None):
    note_change(tx, d)
    return d.items.setdefault(behaviour.key(tx, k), default or ConstValue(None))


@handles_method((DictValue, ListValue), "pop")
def _pop(tx, container: Value, *args: Value) -> Value:
    note_change(tx, container)
    if isinstance(container, DictValue):
        k = behaviour.key(tx, args[0])
        if k not in container.items:
            if len(args) == 1:
                raise tx.unsupported(f"popping missing key {k!r} (KeyError)")
            return args[1]
        return container.items.pop(k)
    index = behaviour.constant(tx, args[0]) if args else -1
    if not container.items:
        raise tx.unsupported("popping from an empty list (IndexError)")
    return container.items.pop(index)


@handles_method((ListValue,), "append")
def _list_append(tx, lst: ListValue, item: Value) -> Value:
    note_change(tx, lst)
    lst.items.append(item)
    return ConstValue(None)


@handles_method((ListValue,), "extend")
def _list_extend(tx, lst: ListValue, items: Value) -> Value:
    note_change(tx, lst)
    lst.items.extend(behaviour.iterate(tx, items))
    return ConstValue(None)


@handles_method((ListValue,), "insert")
def _list_insert(tx, lst: ListValue, index: Value, item: Value) -> Value:
    note_change(tx, lst)
    lst.items.insert(behaviour.constant(tx, index), item)
    return ConstValue(None)


@handles_method((ListValue,), "reverse")
def _list_reverse(tx, lst: ListValue) -> Value:
    note_change(tx, lst)
    lst.items.reverse()
    return ConstValue(None)


@handles_method((ListValue,), "sort")
def _list_sort(tx, lst: ListValue, key: Value | None = None, reverse=None) -> Value:
    if key is not None and not (isinstance(key, ConstValue) and key.value is None):
        raise tx.unsupported("list.sort() with a key function")
    flag = bool(behaviour.constant(tx, reverse)) if reverse is not None else False
    consts = [behaviour.constant(tx, i) for i in lst.items]
    order = sorted(range(len(consts)), key=consts.__getitem__, reverse=flag)
    note_change(tx, lst)
    lst.items[:] = [lst.items[i] for i in order]
    return ConstValue(None)


@handles_method((ListValue,), "remove")
def _list_remove(tx, lst: ListValue, item: Value) -> Value:
    consts = [behaviour.constant(tx, i) for i in lst.items]
    target = behaviour.constant(tx, item)
    if target not in consts:
        raise tx.unsupported(f"removing {target!r}, which is not in the list")
    note_change(tx, lst)
    del lst.items[consts.index(target)]
    return ConstValue(None)


@handles_method((ListValue, DictValue), "clear")
def _clear(tx, container: Value) -> Value:
    note_change(tx, container)
    container.items.clear()
    return ConstValue(None)


@handles_method((DictValue,), "popitem")
def _dict_popitem(tx, d: DictValue) -> Value:
    if not d.items:
        raise tx.unsupported("popitem() of an empty dict (KeyError)")
    note_change(tx, d)
    k, v = d.items.popitem()
    return TupleValue((ConstValue(k), v))


@handles_method((ListValue,), "copy")
def _list_copy(tx, lst: ListValue) -> Value:
    return ListValue(list(lst.items))


@handles_method((ListValue, TupleValue, NamedTupleValue), "count")
def _count(tx, seq: Value, item: Value) -> Value:
    consts = [behaviour.constant(tx, i) for i in seq.items]
    return ConstValue(consts.count(behaviour.constant(tx, item)))


@handles_method((ListValue, TupleValue, NamedTupleValue), "index")
def _index(tx, seq: Value, item: Value) -> Value:
    consts = [behaviour.constant(tx, i) for i in seq.items]
    target = behaviour.constant(tx, item)
    if target not in consts:
        raise tx.unsupported(f"{target!r} is not in the sequence (ValueError)")
    return ConstValue(consts.index(target))


@handles_method((NamedTupleValue,), "_asdict")
def _asdict(tx, nt: NamedTupleValue) -> Value:
    if not hasattr(nt.cls, "_fields"):  # a struct sequence has no _asdict
        raise tx.unsupported(f"{nt.cls.__qualname__}._asdict()")
    return DictValue(dict(zip(nt.fields, nt.items)))


# -- nn.Module's iteration methods: the real module tree, each item with a source ----


def _member_source(module: ModuleValue, dotted: str, table: str):
    """Where ``module.<dotted>`` lives, read through the modules' own tables."""
    *path, leaf = dotted.split(".")
    source = module.source
    for part in path:
        source = ModuleEntrySource(source, "_modules", part)
    return ModuleEntrySource(source, table, leaf)


def _named(tx, module: ModuleValue, pairs, table: str, with_names: bool) -> Value:
    items = []
    for name, value in pairs:
        source = module.source if name == "" else _member_source(module, name, table)
        wrapped = tx.output.wrap(value, source)
        items.append(TupleValue((ConstValue(name), wrapped)) if with_names else wrapped)
    return IteratorValue(items)


def _module_iterator(method: str, table: str, with_names: bool):
    def handler(tx, module: ModuleValue, *args: Value, **kwargs: Value) -> Value:
        real_args = [behaviour.constant(tx, a) for a in args]
        real_kwargs = {k: behaviour.constant(tx, v) for k, v in kwargs.items()}
        if "prefix" in real_kwargs or len(real_args) > 1:
            raise tx.unsupported(f"module.{method}() with a name prefix")
        named = "named_" + method.removeprefix("named_")
        pairs = list(getattr(module.value, named)(*real_args, **real_kwargs))
        # The set of members is a fact too: registering one must recompile.
        members = NamedMembersSource(module.source, named, tuple(real_args))
        names = [name for name, _ in pairs]
        tx.output.guards.add(Guard(GuardKind.EQUALS_MATCH, members, (list, names)))
        return _named(tx, module, pairs, table, with_names)

    return handler


for _method, _table in (
    ("parameters", "_parameters"),
    ("buffers", "_buffers"),
    ("children", "_modules"),
    ("modules", "_modules"),
):
    METHOD_HANDLERS[(ModuleValue, _method)] = _module_iterator(_method, _table, False)
    METHOD_HANDLERS[(ModuleValue, "named_" + _method)] = _module_iterator(
        _method, _table, True
    )
