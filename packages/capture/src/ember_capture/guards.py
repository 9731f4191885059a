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
from typing import Any, NamedTuple

import torch
from torch.nn.modules import module as nn_module

from .source import (
    MODULES_NAME,
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
class TensorSpec:
    """What a tensor input must be. ``dynamic`` names the dims whose size is a
    symbol (any size >= 2; docs/dynamic.md): ``shape`` holds the example's
    there, and the strides must then be dense in the order the example's were
    (``order``, innermost dim first)."""

    type: type
    dtype: torch.dtype
    device: torch.device
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    requires_grad: bool
    dynamic: tuple[tuple[int, str], ...] = ()
    order: tuple[int, ...] = ()

    @classmethod
    def of(
        cls, t: torch.Tensor, dynamic: tuple[tuple[int, str], ...] = ()
    ) -> TensorSpec:
        order = ()
        if dynamic:
            order = tuple(sorted(range(t.dim()), key=lambda d: (t.stride(d), -d)))
        return cls(
            type(t),
            t.dtype,
            t.device,
            tuple(t.shape),
            t.stride(),
            t.requires_grad,
            dynamic,
            order,
        )

    def __str__(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        names = dict(self.dynamic)
        size = ", ".join(names.get(d, str(s)) for d, s in enumerate(self.shape))
        stride = "dense" if self.dynamic else str(list(self.stride))
        return (
            f"{self.type.__name__}({dtype}, {self.device}, size=[{size}], "
            f"stride={stride}, requires_grad={self.requires_grad})"
        )

    def size_difference(self, shape: torch.Size, stride: tuple[int, ...]) -> str:
        """Why ``sizes_match`` fails, in words."""
        if len(shape) != len(self.shape):
            return f"size changed from {list(self.shape)} to {list(shape)}"
        dynamic = dict(self.dynamic)
        for d, size in enumerate(shape):
            if d in dynamic and size < 2:
                return f"size({d}) is {size} (sizes 0 and 1 are never symbolic)"
            if d not in dynamic and size != self.shape[d]:
                return f"size({d}) changed from {self.shape[d]} to {size}"
        return f"stride {list(stride)} is not dense in the order {list(self.order)}"

    def sizes_match(self, shape: torch.Size, stride: tuple[int, ...]) -> bool:
        """Sizes and strides, where some sizes are symbols."""
        if len(shape) != len(self.shape):
            return False
        dynamic = dict(self.dynamic)
        step = 1
        for d in self.order:
            size = shape[d]
            if d in dynamic:
                if size < 2:
                    return False
            elif size != self.shape[d]:
                return False
            if size != 1 and stride[d] != step:
                return False
            step *= size
        return True


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


# The device types whose autocast capture follows and guards.
AUTOCAST_DEVICES = ("cpu", "cuda")
AutocastState = tuple[tuple[str, torch.dtype], ...] | None


class GlobalState(NamedTuple):
    """torch's global switches that change what a graph computes.

    A named tuple, not a dataclass: it is built and compared on every call."""

    grad_enabled: bool
    default_dtype: torch.dtype
    deterministic: bool
    autocast: AutocastState  # (device type, dtype) per enabled device type
    inference_mode: bool
    dispatch_modes: int  # __torch_dispatch__ modes active (torch code branches on it)

    @classmethod
    def current(cls) -> GlobalState:
        return cls(
            _is_grad_enabled(),
            _get_default_dtype(),
            _deterministic(),
            _autocast(),
            _inference_mode(),
            _dispatch_modes(),
        )


_is_grad_enabled = torch.is_grad_enabled
_get_default_dtype = torch.get_default_dtype
_deterministic = torch.are_deterministic_algorithms_enabled
_inference_mode = torch.is_inference_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_any_autocast = torch._C._is_any_autocast_enabled


def _autocast() -> AutocastState:
    """``(device type, dtype)`` per device type with autocast on, or None when
    none is (one cheap call: the state is read on every guarded call)."""
    if not _any_autocast():
        return None
    return tuple(
        (d, torch.get_autocast_dtype(d))
        for d in AUTOCAST_DEVICES
        if torch.is_autocast_enabled(d)
    )


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


def _tensor_matches(value: object, spec: TensorSpec) -> bool:
    return (
        type(value) is spec.type
        and value.dtype is spec.dtype
        and value.requires_grad is spec.requires_grad
        and (
            spec.sizes_match(value.shape, value.stride())
            if spec.dynamic
            else value.shape == spec.shape and value.stride() == spec.stride
        )
        and value.device == spec.device
    )


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


def _same_objects(values: object, expected: tuple) -> bool:
    return len(values) == len(expected) and all(
        a is b for a, b in zip(values, expected)
    )


def tensor_has_no_grad_hooks(t: torch.Tensor) -> bool:
    """True when a backward accumulating into ``t.grad`` runs no hook of ``t``."""
    return not t._backward_hooks and not getattr(t, "_post_accumulate_grad_hooks", None)


def module_has_no_hooks(module: torch.nn.Module) -> bool:
    """True when calling ``module`` runs exactly its forward (no hooks anywhere)."""
    return not (
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or module._backward_pre_hooks
        or nn_module._global_forward_hooks
        or nn_module._global_forward_pre_hooks
        or nn_module._global_backward_hooks
        or nn_module._global_backward_pre_hooks
    )


def module_has_only_forward_hooks(module: torch.nn.Module) -> bool:
    """True when the only hooks that calling ``module`` runs are its own
    forward hooks and pre-hooks (which capture inlines)."""
    return not (
        module._backward_hooks
        or module._backward_pre_hooks
        or nn_module._global_forward_hooks
        or nn_module._global_forward_pre_hooks
        or nn_module._global_backward_hooks
        or nn_module._global_backward_pre_hooks
    )


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


class CellView:
    """Reads closure cells by free-variable name, for ``C['name']`` in guards."""

    __slots__ = ("_cells",)

    def __init__(self, names: Sequence[str], cells: Sequence[Any] | None) -> None:
        self._cells = dict(zip(names, cells or ()))

    def __getitem__(self, name: str) -> object:
        return self._cells[name].cell_contents


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


def distinct_guards(guards: Sequence[Guard]) -> tuple[Guard, ...]:
    """``guards`` without those that check what an earlier one checks: the same
    kind on a source that reads the same object at check time. A source passing
    an ID_MATCH guard is that object (as is a function's ``__globals__`` or
    ``__closure__`` item, once the function is), so every inlined function of
    one module reads ``__globals__['torch']`` from the one dict, and every path
    to the torch module reads ``.float16`` from the one module: one guard each
    checks them all (a T5's 1182 guards had 88 on one enum's four members).
    The guards kept imply the ones dropped, so the check answers the same."""
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
            return getattr(held, source.attr) if type(held) is FunctionType else _FREE
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


class GuardChecker:
    """``check(L)`` is one generated boolean expression over the frame's locals
    (``distinct_guards`` of the guards: ``guards`` holds those it checks)."""

    def __init__(
        self, guards: tuple[Guard, ...], f_globals: dict, cells: CellView
    ) -> None:
        guards = distinct_guards(guards)
        self.guards = guards
        self._g = f_globals
        self._c = cells
        scope: dict[str, Any] = {
            "___tensor_matches": _tensor_matches,
            "___global_state": GlobalState.current,
            "___no_hooks": module_has_no_hooks,
            "___only_forward_hooks": module_has_only_forward_hooks,
            "___same_objects": _same_objects,
            "___no_grad_hooks": tensor_has_no_grad_hooks,
            **_MODULES,
        }
        # The terms form one ``and`` chain, so a part several guards read is
        # read once (SharedReads), in the order the templates read it.
        shared = SharedReads(_reads(guards))
        terms = []
        for i, guard in enumerate(guards):
            scope[f"___e{i}"] = guard.expected

            def fill(field: re.Match, guard: Guard = guard, i: int = i) -> str:
                if field.group(1) == "v":
                    return "None" if guard.source is None else shared.expr(guard.source)
                # An aliasing guard compares with another source read from the frame.
                if guard.kind is GuardKind.SAME_OBJECT:
                    return shared.expr(guard.expected)
                if guard.kind is GuardKind.SIZES:
                    return " and ".join(
                        with_sizes(
                            r.python,
                            {
                                n: _size_text(shared.expr(s), d, ".shape[{}]")
                                for n, s, d in r.reads
                            },
                        )
                        for r in guard.expected
                    )
                return f"___e{i}"

            terms.append(_TEMPLATE_FIELD.sub(fill, _CHECKS[guard.kind][0]))
        body = " and ".join(terms) or "True"
        self.source = f"lambda L, G, C: {body}"
        self._fn = eval(self.source, scope)

    def check(self, f_locals: dict) -> bool:
        try:
            return self._fn(f_locals, self._g, self._c)
        except Exception:  # a missing attribute or item means the guard failed
            return False

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
