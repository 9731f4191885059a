"""Guards: the facts about the frame that a captured graph depends on.

A guard is a kind from a small vocabulary, a source and the expected value. A
GuardSet prints as readable text and compiles into one pure-Python check function;
when the check fails it can name the first failing guard with old and new values.
"""

from __future__ import annotations

import enum
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from types import CodeType, FunctionType
from typing import Any

from .checks import (
    CHECK_SCOPE,
    MODULES_NAME,
    CellView,
    CompiledCheck,
    GlobalState,
    TensorSpec,
)
from .portable import PortableGuards, encode
from .source import (
    AttrSource,
    ItemSource,
    SharedReads,
    Source,
    key_text,
)

_MODULES = {MODULES_NAME: sys.modules}


class GuardKind(enum.Enum):
    TENSOR_MATCH = "tensor_match"  # type, dtype, device, sizes, strides, requires_grad
    EQUALS_MATCH = "equals_match"  # a Python constant, by type and value
    ID_MATCH = "id_match"  # functions, classes, modules: by identity
    TYPE_MATCH = "type_match"  # objects whose attributes are read separately
    NO_HOOKS = "no_hooks"  # an inlined nn.Module call: no module or global hooks
    # a module call whose forward hooks are inlined: no backward or global hooks
    ONLY_FORWARD_HOOKS = "only_forward_hooks"
    SAME_OBJECT = "same_object"  # two sources that name one tensor (tied weights)
    KEY_NOT_IN = "key_not_in"  # a builtin read: no module global shadows it
    # a dict keyed by tensors (an optimizer's state): its keys, by identity
    KEYS_ARE = "keys_are"
    NO_GRAD_HOOKS = "no_grad_hooks"  # a leaf a backward in the graph writes .grad of
    GLOBAL_STATE = "global_state"  # grad mode, default dtype, deterministic flag
    SIZES = "sizes"  # relations between symbolic sizes (docs/dynamic.md)


@dataclass(frozen=True, slots=True)
class SizeRelation:
    """A relation between sizes that a capture assumed: ``python`` is its
    check over the names in ``reads`` (each the size of a source's dim),
    ``text`` the relation as the provider prints it."""

    python: str
    text: str
    reads: tuple[tuple[str, Source, int | None], ...]  # dim None: an int itself

    def __str__(self) -> str:
        names = {n: _size_text(s.name(), d, ".size({})") for n, s, d in self.reads}
        return with_sizes(self.python, names)


def _size_text(value: str, dim: int | None, template: str) -> str:
    """``value``'s size at ``dim`` (``template`` names it), or ``value``
    itself for an integer symbol."""
    return value if dim is None else value + template.format(dim)


def with_sizes(text: str, names: dict[str, str]) -> str:
    """``text`` (Python over symbols' names) with each name replaced by
    ``names[name]``."""
    return re.sub(r"\bs\d+\b", lambda m: names.get(m.group(0), m.group(0)), text)


@dataclass(frozen=True, slots=True)
class Guard:
    kind: GuardKind
    source: Source | None
    expected: Any

    def __str__(self) -> str:
        where = self.source.name() if self.source is not None else "torch"
        match self.kind:
            case GuardKind.TENSOR_MATCH:
                return f"{where} is {self.expected}"
            case GuardKind.EQUALS_MATCH:
                return f"{where} == {self.expected[1]!r}"
            case GuardKind.ID_MATCH:
                return f"{where} is {_short_repr(self.expected)}"
            case GuardKind.TYPE_MATCH:
                return f"type({where}) is {self.expected.__qualname__}"
            case GuardKind.NO_HOOKS:
                return f"{where} has no hooks"
            case GuardKind.ONLY_FORWARD_HOOKS:
                return f"{where} has no backward or global hooks"
            case GuardKind.SAME_OBJECT:
                return f"{where} is {self.expected.name()}"
            case GuardKind.KEY_NOT_IN:
                return f"{self.expected!r} not in {where}"
            case GuardKind.NO_GRAD_HOOKS:
                return f"{where} has no gradient hooks"
            case GuardKind.KEYS_ARE:
                return f"{where} are the same {len(self.expected)} objects"
            case GuardKind.SIZES:
                return " and ".join(str(r) for r in self.expected)
            case GuardKind.GLOBAL_STATE:
                s = self.expected
                return (
                    f"torch.is_grad_enabled() == {s.grad_enabled}, default dtype "
                    f"{s.default_dtype}, deterministic == {s.deterministic}, "
                    f"autocast == {s.autocast}, "
                    f"inference mode == {s.inference_mode}, dispatch modes == "
                    f"{s.dispatch_modes}"
                )
        raise AssertionError(self.kind)


def _brief(value: object) -> str:
    """A value for a message: a tensor (a dict's key) by type and size."""
    if type(value) in (list, tuple):
        return f"[{', '.join(_brief(v) for v in value)}]"
    return key_text(value)


def _short_repr(obj: object) -> str:
    name = obj.co_qualname if isinstance(obj, CodeType) else _name_of(obj)
    return f"<{type(obj).__name__} {name}>" if name else f"<{type(obj).__name__}>"


def _name_of(obj: object) -> str | None:
    """``__qualname__`` or ``__name__``, where reading them works (torch.classes
    raises RuntimeError for any name it does not know)."""
    for attr in ("__qualname__", "__name__"):
        try:
            name = getattr(obj, attr, None)
        except Exception:
            continue
        if isinstance(name, str):
            return name
    return None


def _tensor_difference(value: object, spec: TensorSpec) -> str:
    if type(value) is not spec.type:
        return f"type changed from {spec.type.__name__} to {type(value).__name__}"
    for field, label in (
        ("dtype", "dtype"),
        ("device", "device"),
        ("shape", "size"),
        ("requires_grad", "requires_grad"),
    ):
        new = getattr(value, field)
        old = getattr(spec, field)
        if field == "shape" and spec.dynamic:
            if not spec.sizes_match(new, value.stride()):
                return spec.size_difference(new, value.stride())
            continue
        if (tuple(new) if field == "shape" else new) != old:
            dims = _dims_changed(old, tuple(new)) if field == "shape" else ""
            return f"{label} changed from {_fmt(old)} to {_fmt(new)}{dims}"
    return f"stride changed from {list(spec.stride)} to {list(value.stride())}"


def _dims_changed(old: tuple[int, ...], new: tuple[int, ...]) -> str:
    """`` (size(0): 4 -> 5)``: the dims that changed, when the rank did not."""
    if len(old) != len(new):
        return ""
    dims = [
        f"size({d}): {a} -> {b}" for d, (a, b) in enumerate(zip(old, new)) if a != b
    ]
    return f" ({', '.join(dims)})"


def _fmt(v: object) -> str:
    return str(list(v)) if isinstance(v, tuple) else str(v)


# How each kind is checked: (expression template, explanation of a failure).
# The template names the value as {v} and the expected object as {e}.
_CHECKS: dict[GuardKind, tuple[str, Callable[[Any, Any], str]]] = {
    GuardKind.TENSOR_MATCH: ("___tensor_matches({v}, {e})", _tensor_difference),
    GuardKind.EQUALS_MATCH: (
        "(type({v}) is {e}[0] and {v} == {e}[1])",
        lambda v, e: f"value changed from {_brief(e[1])} to {_brief(v)}",
    ),
    GuardKind.ID_MATCH: (
        "{v} is {e}",
        lambda v, e: f"object changed from {_short_repr(e)} to {_short_repr(v)}",
    ),
    GuardKind.TYPE_MATCH: (
        "type({v}) is {e}",
        lambda v, e: f"type changed from {e.__qualname__} to {type(v).__qualname__}",
    ),
    GuardKind.SAME_OBJECT: (
        "{v} is {e}",
        lambda v, e: "is no longer the same object as the source it aliased",
    ),
    GuardKind.NO_HOOKS: (
        "___no_hooks({v})",
        lambda v, e: "a forward or backward hook was registered",
    ),
    GuardKind.ONLY_FORWARD_HOOKS: (
        "___only_forward_hooks({v})",
        lambda v, e: "a backward or global hook was registered",
    ),
    GuardKind.KEY_NOT_IN: (
        "{e} not in {v}",
        lambda v, e: f"a module global {e!r} now shadows the builtin",
    ),
    GuardKind.NO_GRAD_HOOKS: (
        "___no_grad_hooks({v})",
        lambda v, e: "a gradient hook was registered",
    ),
    GuardKind.KEYS_ARE: (
        "___same_objects({v}, {e})",
        lambda v, e: f"its keys changed ({len(e)} before, {len(v)} now, or others)",
    ),
    GuardKind.GLOBAL_STATE: (
        "___global_state() == {e}",
        lambda v, e: f"torch global state changed from {e} to {v}",
    ),
    # {e} is the relations' own Python, over the sizes it reads (GuardChecker)
    GuardKind.SIZES: (
        "{e}",
        lambda v, e: "no longer " + " and ".join(str(r) for r in e),
    ),
}


class GuardSet:
    """An ordered, de-duplicated set of guards."""

    def __init__(self, guards: Iterable[Guard] = ()) -> None:
        self._guards: dict[tuple, Guard] = {}
        for g in guards:
            self.add(g)

    def add(self, guard: Guard) -> None:
        key: tuple = (guard.kind, guard.source)
        if guard.kind is GuardKind.KEY_NOT_IN:
            # one dict, one guard per builtin name the code reads through it
            key += (guard.expected,)
        known = self._guards.get(key)
        if guard.kind is GuardKind.SIZES and known is not None:
            # one guard holds every relation between sizes, from every stage
            new = tuple(r for r in guard.expected if r not in known.expected)
            guard = Guard(guard.kind, None, known.expected + new)
            self._guards[key] = guard
            return
        self._guards.setdefault(key, guard)

    def __iter__(self):
        return iter(self._guards.values())

    def __len__(self) -> int:
        return len(self._guards)

    def __str__(self) -> str:
        return "\n".join(str(g) for g in self)

    def compile(self, f_globals: dict, cells: CellView) -> GuardChecker:
        """Build the check for one function object (its globals and closure)."""
        return GuardChecker(tuple(self), f_globals, cells)


# ``{v}`` (the guarded value) and ``{e}`` (what it must be) in a template.
_TEMPLATE_FIELD = re.compile(r"\{([ve])\}")


def _reads(guards: Iterable[Guard]) -> Iterable[Source]:
    """The sources the check reads, in its order, once per read."""
    for guard in guards:
        template, _ = _CHECKS[guard.kind]
        for field in _TEMPLATE_FIELD.findall(template):
            if field == "v" and guard.source is not None:
                yield guard.source
            elif field == "e" and guard.kind is GuardKind.SAME_OBJECT:
                yield guard.expected
            elif field == "e" and guard.kind is GuardKind.SIZES:
                for relation in guard.expected:
                    yield from (source for _, source, _ in relation.reads)


# Attributes of a function that no assignment changes: one function object has
# one globals dict and one tuple of closure cells for as long as it lives.
_FIXED_ATTRS = frozenset({"__globals__", "__closure__"})

_FREE = object()  # ``distinct_guards``: no object is fixed for this source


def distinct_guards(
    guards: Sequence[Guard], through_functions: bool = True
) -> tuple[Guard, ...]:
    """``guards`` without those that check what an earlier one checks: the same
    kind on a source that reads the same object at check time. A source passing
    an ID_MATCH guard is that object (as is a function's ``__globals__`` or
    ``__closure__`` item, once the function is), so every inlined function of
    one module reads ``__globals__['torch']`` from the one dict, and every path
    to the torch module reads ``.float16`` from the one module: one guard each
    checks them all (a T5's 1182 guards had 88 on one enum's four members).
    The guards kept imply the ones dropped, so the check answers the same.

    ``through_functions=False`` keeps the guards read through a function's
    ``__globals__`` and ``__closure__``: in another process a function is
    found again by name or by how it was made (portable.py), not as the one
    object, and two functions that shared a closure cell here need not there."""
    pinned = {g.source: g.expected for g in guards if g.kind is GuardKind.ID_MATCH}

    def pin(source: Source, own: bool) -> object:
        """The object ``source`` is whenever the guards hold, or ``_FREE``;
        ``own``: the source's own ID_MATCH counts (not for the guard on it)."""
        if own and source in pinned:
            return pinned[source]
        base = getattr(source, "base", None)
        if base is None:
            return _FREE
        held = pin(base, True)
        if held is _FREE:
            return _FREE
        if isinstance(source, AttrSource) and source.attr in _FIXED_ATTRS:
            if not through_functions or type(held) is not FunctionType:
                return _FREE
            return getattr(held, source.attr)
        if isinstance(source, ItemSource) and type(held) is tuple:
            index = source.index
            return (
                held[index] if type(index) is int and 0 <= index < len(held) else _FREE
            )
        return _FREE

    def key(source: Source, own: bool) -> object:
        held = pin(source, own)
        if held is not _FREE:
            return ("object", id(held))
        parts = [
            key(value, True) if f.name == "base" else value
            for f in fields(source)
            for value in [getattr(source, f.name)]
        ]
        return (type(source), *parts)

    kept: dict[tuple, Guard] = {}
    for guard in guards:
        where = None if guard.source is None else key(guard.source, False)
        # what the guard compares the source with, where that is not implied
        # by the object the source reads (a name, another source's object)
        extra: tuple = ()
        if guard.kind is GuardKind.KEY_NOT_IN:
            extra = (guard.expected,)
        elif guard.kind is GuardKind.SAME_OBJECT:
            extra = (key(guard.expected, True),)
        kept.setdefault((guard.kind, where, *extra), guard)
    return tuple(kept.values())


# Guards whose template's {e} is filled with a read of the frame, not an object.
_EXPECTS_SOURCE = frozenset({GuardKind.SAME_OBJECT, GuardKind.SIZES})


def _term(i: int, guard: Guard, read: Callable[[Source], str]) -> str:
    """Guard ``i``'s check as Python over ``L``, ``G``, ``C`` and ``___e<i>``;
    ``read(source)`` writes how a source is read."""

    def fill(field: re.Match) -> str:
        if field.group(1) == "v":
            return "None" if guard.source is None else read(guard.source)
        # An aliasing guard compares with another source read from the frame.
        if guard.kind is GuardKind.SAME_OBJECT:
            return read(guard.expected)
        if guard.kind is GuardKind.SIZES:
            return " and ".join(
                with_sizes(
                    r.python,
                    {n: _size_text(read(s), d, ".shape[{}]") for n, s, d in r.reads},
                )
                for r in guard.expected
            )
        return f"___e{i}"

    return _TEMPLATE_FIELD.sub(fill, _CHECKS[guard.kind][0])


class GuardChecker(CompiledCheck):
    """``check(L)`` is one generated boolean expression over the frame's locals
    (``distinct_guards`` of the guards: ``guards`` holds those it checks)."""

    def __init__(
        self, guards: tuple[Guard, ...], f_globals: dict, cells: CellView
    ) -> None:
        self._captured = guards
        guards = distinct_guards(guards)
        self.guards = guards
        scope: dict[str, Any] = dict(CHECK_SCOPE)
        scope.update((f"___e{i}", g.expected) for i, g in enumerate(guards))
        # The terms form one ``and`` chain, so a part several guards read is
        # read once (SharedReads), in the order the templates read it.
        shared = SharedReads(_reads(guards))
        body = " and ".join(_term(i, g, shared.expr) for i, g in enumerate(guards))
        self.body = body or "True"
        self.source = f"lambda L, G, C: {self.body}"
        super().__init__(eval(self.source, scope), f_globals, cells)

    def portable(self) -> PortableGuards:
        """This check in a form another process rebuilds without capture
        (portable.py). Raises NotPortable when an expected object has no name
        there (an instance, a tensor kept by identity)."""
        guards = distinct_guards(self._captured, through_functions=False)
        expected: list[tuple[int, Any]] = []
        first: dict[int, int] = {}  # id of an object compared by identity -> i
        for i, guard in enumerate(guards):
            if "{e}" not in _CHECKS[guard.kind][0] or guard.kind in _EXPECTS_SOURCE:
                continue
            if guard.kind is GuardKind.ID_MATCH:
                if id(guard.expected) in first:
                    expected.append((i, ["same", first[id(guard.expected)]]))
                    continue
                first[id(guard.expected)] = i
            read = guard.source.expr() if guard.source is not None else None
            expected.append((i, encode(guard.expected, read)))
        if guards == self.guards:
            body = self.body
        else:  # more guards than this process's check: read them anew
            shared = SharedReads(_reads(guards))
            body = " and ".join(_term(i, g, shared.expr) for i, g in enumerate(guards))
        terms = tuple(
            (str(g), _term(i, g, lambda s: s.expr())) for i, g in enumerate(guards)
        )
        return PortableGuards(body or "True", tuple(expected), terms)

    def failure(self, f_locals: dict) -> str | None:
        """The first failing guard, with what it expected and what it saw."""
        for guard in self.guards:
            single = GuardChecker((guard,), self._g, self._c)
            if single.check(f_locals):
                continue
            where = guard.source.name() if guard.source is not None else "torch"
            if guard.kind is GuardKind.SIZES:
                return f"sizes: {_CHECKS[guard.kind][1](None, guard.expected)}"
            try:
                value = (
                    GlobalState.current()
                    if guard.source is None
                    else eval(
                        guard.source.expr(),
                        {},
                        {"L": f_locals, "G": self._g, "C": self._c, **_MODULES},
                    )
                )
            except Exception as e:
                return f"{where}: could not be read ({type(e).__name__}: {e})"
            return f"{where}: {_CHECKS[guard.kind][1](value, guard.expected)}"
        return None
