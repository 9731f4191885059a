"""Calls out of a frame that runs eagerly still reach compiled code: ``route_calls``
rewrites a function capture refused so that each call site passes its callable
through ``hook`` when it is user code. See docs/capture.md, "Frames that run eagerly".
"""

from __future__ import annotations

import functools
import os
import sysconfig
import types
import weakref
from collections.abc import Callable, Sequence

import torch
from bytecode import Bytecode, Instr, Label, TryBegin, TryEnd

from .bytecode import supported

# Stands for the route function in a cached rewrite; each route_calls binds it.
_ROUTE_SLOT = object()

# What a value stack slot holds, as far as following the bytecode tells.
_NULL = "null"  # the NULL CPython 3.11 keeps below a plain callable
_VALUE = "value"  # any object (a callable, a method's self, an argument)
_UNKNOWN = "unknown"  # paths that meet here disagree

Stack = tuple[str, ...]

# Top-level package names of ember itself: its objects are never compiled again.
_EMBER_PACKAGES = frozenset(
    {"ember", "ember_capture", "ember_aotgrad", "ember_codegen", "ember_runtime"}
)


class _Unroutable(Exception):
    """The code has a shape this module does not rewrite: it keeps its own calls."""


class _ByIdentity:
    """A map keyed by object identity that forgets a key when it is collected.

    Code objects compare by value (two functions with the same body are equal),
    so a plain dict or WeakKeyDictionary would mix up different functions."""

    def __init__(self) -> None:
        self._items: dict[int, tuple[weakref.ref, object]] = {}

    def get(self, key: object) -> object | None:
        item = self._items.get(id(key))
        return item[1] if item is not None and item[0]() is key else None

    def put(self, key: object, value: object) -> None:
        ident = id(key)

        def forget(ref: weakref.ref) -> None:
            if self._items.get(ident, (None,))[0] is ref:
                del self._items[ident]

        self._items[ident] = (weakref.ref(key, forget), value)


# original code -> its rewrite with _ROUTE_SLOT (False: cannot be rewritten)
_REWRITES = _ByIdentity()
# a rewrite or a bound rewrite -> the original code it came from
_ORIGINALS = _ByIdentity()


def route_calls(
    fn: types.FunctionType, hook: Callable[[Callable], Callable]
) -> types.FunctionType:
    """A copy of ``fn`` whose calls of user code go through ``hook``.

    Every call site (``f(...)``, ``obj.m(...)``, keyword calls, ``f(*a, **k)``),
    also in the functions, lambdas, comprehensions and generators ``fn`` defines,
    calls ``hook(callee)`` in place of ``callee`` when ``is_user_callable(callee)``,
    and ``callee`` itself otherwise. The call is still made from ``fn``'s frame,
    so ``super()``, ``locals()`` and warnings see the user's frame. The copy has
    ``fn``'s globals, defaults, closure, names, file and line numbers. On a Python
    capture does not support, or for code this module does not rewrite, ``fn``
    itself is returned: its calls then run as they are.
    """
    code = user_code(fn.__code__)  # already routed: start from the user's own
    if not supported():
        return fn
    rewrite = _rewrite(code)
    if rewrite is None:
        return fn
    return _with_code(fn, _bind(rewrite, _router(hook)))


def user_code(code: types.CodeType) -> types.CodeType:
    """The user's own code object for one ``route_calls`` made (also a function,
    lambda or comprehension nested in it), else ``code`` itself. Capture reads
    this one: the routing is only for frames that run as Python."""
    return _ORIGINALS.get(code) or code


def unrouted(fn: types.FunctionType) -> types.FunctionType:
    """``fn``, or a copy running the user's own code when its code is routed."""
    code = user_code(fn.__code__)
    return fn if code is fn.__code__ else _with_code(fn, code)


def _with_code(fn: types.FunctionType, code: types.CodeType) -> types.FunctionType:
    """A copy of ``fn`` (globals, defaults, closure, names, attributes) on ``code``."""
    copy = types.FunctionType(
        code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    copy.__doc__ = fn.__doc__
    copy.__annotations__ = fn.__annotations__
    copy.__dict__.update(fn.__dict__)
    return copy


def is_user_callable(obj: object) -> bool:
    """Whether a call of ``obj`` is user code ember should compile on its own.

    True for a Python function or a method bound to one, unless its code lives in
    torch, the standard library or ember, or is code ``route_calls`` made (a
    function defined inside a routed frame is new on each call, and routes its
    own calls already); and for an ``nn.Module``, unless it is ember's own or a
    torch module without submodules (one torch op, like a torch function).
    """
    test = _USER_TESTS.get(type(obj))
    if test is not None:
        return test(obj)
    return isinstance(obj, torch.nn.Module) and _user_module(obj)


def _user_function(fn: types.FunctionType) -> bool:
    code = fn.__code__
    return (
        _ORIGINALS.get(code) is None
        and not _library_file(code.co_filename)
        and _top_package(fn.__module__) not in _EMBER_PACKAGES
    )


def _user_method(method: types.MethodType) -> bool:
    func = method.__func__
    return type(func) is types.FunctionType and _user_function(func)


def _user_module(module: torch.nn.Module) -> bool:
    package = _top_package(type(module).__module__)
    if package in _EMBER_PACKAGES:
        return False
    return package != "torch" or bool(module._modules)


_USER_TESTS: dict[type, Callable[[object], bool]] = {
    types.FunctionType: _user_function,
    types.MethodType: _user_method,
}


def _top_package(module: str | None) -> str:
    return (module or "").partition(".")[0]


def _under(path: str, folders: Sequence[str]) -> bool:
    return any(path.startswith(folder) for folder in folders)


_TORCH_DIRS = (os.path.realpath(os.path.dirname(torch.__file__)) + os.sep,)
_STDLIB_DIRS = tuple(
    os.path.realpath(sysconfig.get_paths()[key]) + os.sep
    for key in ("stdlib", "platstdlib")
)
_INSTALLED = frozenset({"site-packages", "dist-packages"})


@functools.cache
def _library_file(filename: str) -> bool:
    """Code in torch or the standard library (installed packages are user code,
    even where they live under the standard library's folder; so is code with a
    made-up file name, such as ``exec``'s ``<string>``, except frozen modules)."""
    if filename.startswith("<"):
        return filename.startswith("<frozen ")
    path = os.path.realpath(filename)
    if _under(path, _TORCH_DIRS):
        return True
    return _under(path, _STDLIB_DIRS) and not _INSTALLED & set(path.split(os.sep))


def _router(hook: Callable[[Callable], Callable]) -> Callable[[object], object]:
    def route(callee: object) -> object:
        return hook(callee) if is_user_callable(callee) else callee

    return route


def _bind(rewrite: types.CodeType, route: Callable) -> types.CodeType:
    """``rewrite`` (and the rewrites nested in it) with ``route`` in its slot."""

    def bound(const: object) -> object:
        if const is _ROUTE_SLOT:
            return route
        if isinstance(const, types.CodeType) and _ORIGINALS.get(const) is not None:
            return _bind(const, route)
        return const

    code = rewrite.replace(co_consts=tuple(bound(c) for c in rewrite.co_consts))
    _ORIGINALS.put(code, _ORIGINALS.get(rewrite))
    return code


def _rewrite(code: types.CodeType) -> types.CodeType | None:
    """The routed version of ``code`` with ``_ROUTE_SLOT`` for the route function,
    made once per code object; None when its shape is not one this rewrites."""
    cached = _REWRITES.get(code)
    if cached is None:
        try:
            cached = _rewrite_uncached(code)
        except _Unroutable:
            cached = False
        _REWRITES.put(code, cached)
        if cached:
            _ORIGINALS.put(cached, code)
    return cached or None


def _rewrite_uncached(code: types.CodeType) -> types.CodeType:
    bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    items = list(bc)
    handlers = _covering_handlers(items)
    states = _stack_states(items, handlers)
    before: dict[int, list[Instr]] = {}
    for i, item in enumerate(items):
        site = _CALL_SITES.get(item.name) if isinstance(item, Instr) else None
        if site is not None and states[i] is not None:
            placed = site(items, i, states[i], handlers)
            if placed is not None:
                before[placed[0]] = placed[1]
    body: list = []
    for i, item in enumerate(items):
        body += before.get(i, ())
        body += _replaced(item)
    bc.clear()
    bc.extend(body)
    # Each inserted sequence goes at most one slot above the stack it starts
    # from; exception handlers keep the depths of the original table.
    return bc.to_code(
        stacksize=code.co_stacksize + 1, compute_exception_stack_depths=False
    )


def _replaced(item: object) -> list:
    """What stands for one item of the original code in the rewrite."""
    if not isinstance(item, Instr):
        return [item]
    if item.name == "LOAD_METHOD":
        # NULL and the bound method, in place of method and self (or NULL and
        # attribute): the call below then always finds a plain callable to route.
        at = item.location
        return [
            Instr("LOAD_ATTR", item.arg, location=at),
            Instr("PUSH_NULL", location=at),
            Instr("SWAP", 2, location=at),
        ]
    if item.name == "LOAD_CONST" and isinstance(item.arg, types.CodeType):
        nested = _rewrite(item.arg)
        if nested is not None:
            return [Instr("LOAD_CONST", nested, location=item.location)]
    return [item]


def _route_slot(depth: int, at: object) -> list[Instr]:
    """Replace the value ``depth`` slots from the top with ``route(value)``:
    bring it to the top, call ``route`` on it method-style (CALL 0 with ``route``
    in the slot below, so nothing else is touched), put the result back."""
    swap = [Instr("SWAP", depth, location=at)] if depth > 1 else []
    return [
        *swap,
        Instr("LOAD_CONST", _ROUTE_SLOT, location=at),
        Instr("SWAP", 2, location=at),
        Instr("PRECALL", 0, location=at),
        Instr("CALL", 0, location=at),
        *swap,
    ]


def _is(item: object, name: str) -> bool:
    return isinstance(item, Instr) and item.name == name


def _safe_under_handler(handler: TryBegin | None, null_slot: int) -> bool:
    """An exception inside the inserted code unwinds to the handler's depth: the
    slots it reorders must all lie above that depth."""
    return handler is None or handler.stack_depth <= null_slot


def _plain_call(items: list, i: int, stack: Stack, handlers: list) -> tuple | None:
    """``[KW_NAMES] PRECALL n CALL n`` over NULL, callable, n arguments: route the
    callable before KW_NAMES (the inserted CALL would consume its names)."""
    n = items[i].arg
    start = i - 1
    if not (_is(items[start], "PRECALL") and items[start].arg == n):
        return None
    if start > 0 and _is(items[start - 1], "KW_NAMES"):
        start -= 1
    null_slot = len(stack) - n - 2
    if null_slot < 0 or stack[null_slot] != _NULL:
        return None  # method-style: a with-block's exit, a decorator, a comprehension
    if not _safe_under_handler(handlers[start], null_slot):
        return None
    return start, _route_slot(n + 1, items[start].location)


def _splat_call(items: list, i: int, stack: Stack, handlers: list) -> tuple | None:
    """``CALL_FUNCTION_EX`` over NULL, callable, the args tuple (and kwargs)."""
    depth = 2 + (items[i].arg & 1)
    null_slot = len(stack) - depth - 1
    if null_slot < 0 or stack[null_slot] != _NULL:
        return None
    if not _safe_under_handler(handlers[i], null_slot):
        return None
    return i, _route_slot(depth, items[i].location)


_CALL_SITES = {"CALL": _plain_call, "CALL_FUNCTION_EX": _splat_call}


def _covering_handlers(items: list) -> list[TryBegin | None]:
    """Per item, the exception handler whose range covers it (ranges do not nest
    in 3.11's exception table)."""
    current = None
    covering = []
    for item in items:
        if isinstance(item, TryBegin):
            current = item
        elif isinstance(item, TryEnd) and item.entry is current:
            current = None
        covering.append(current)
    return covering


def _stack_states(items: list, handlers: list) -> list[Stack | None]:
    """The kind of each value stack slot before each item, following jumps and
    exception handlers from the first instruction; None where unreachable.

    Only NULLs matter: every instruction not in ``_EFFECTS`` is taken to pop and
    push as many slots as its net stack effect. That is sound because no other
    instruction pushes a NULL or consumes one.
    """
    labels = {id(item): i for i, item in enumerate(items) if isinstance(item, Label)}
    states: list[Stack | None] = [None] * (len(items) + 1)
    work: list[int] = []

    def enter(index: int, stack: Stack) -> None:
        old = states[index]
        if old is not None:
            if len(old) != len(stack):
                raise _Unroutable
            stack = tuple(a if a == b else _UNKNOWN for a, b in zip(old, stack))
            if stack == old:
                return
        states[index] = stack
        work.append(index)

    enter(0, ())
    while work:
        i = work.pop()
        stack = states[i]
        if i == len(items):
            raise _Unroutable  # runs off the end
        item = items[i]
        if not isinstance(item, Instr):
            enter(i + 1, stack)
            continue
        handler = handlers[i]
        if handler is not None:  # an exception here lands at the handler
            depth = handler.stack_depth
            if not isinstance(depth, int) or depth > len(stack):
                raise _Unroutable
            pushed = (_VALUE,) * (1 + int(handler.push_lasti))
            enter(labels[id(handler.target)], stack[:depth] + pushed)
        if item.has_jump():
            enter(labels[id(item.arg)], _after(item, stack, jump=True))
        if not item.is_final():
            enter(i + 1, _after(item, stack, jump=False))
    return states


def _popped(stack: Stack, count: int) -> Stack:
    if count > len(stack):
        raise _Unroutable
    return stack[: len(stack) - count]


def _swap(stack: Stack, instr: Instr) -> Stack:
    k = instr.arg
    if k > len(stack):
        raise _Unroutable
    slots = list(stack)
    slots[-1], slots[-k] = slots[-k], slots[-1]
    return tuple(slots)


def _copy(stack: Stack, instr: Instr) -> Stack:
    if instr.arg > len(stack):
        raise _Unroutable
    return (*stack, stack[-instr.arg])


# The instructions that push, move or consume a NULL (and RETURN_GENERATOR, whose
# net effect of 0 leaves out the value the generator's first send pushes).
_EFFECTS: dict[str, Callable[[Stack, Instr], Stack]] = {
    "PUSH_NULL": lambda s, i: (*s, _NULL),
    "LOAD_GLOBAL": lambda s, i: (*s, _NULL, _VALUE) if i.arg[0] else (*s, _VALUE),
    # rewritten to LOAD_ATTR, PUSH_NULL, SWAP 2 (see _replaced)
    "LOAD_METHOD": lambda s, i: (*_popped(s, 1), _NULL, _VALUE),
    "SWAP": _swap,
    "COPY": _copy,
    "PRECALL": lambda s, i: s,
    "KW_NAMES": lambda s, i: s,
    "CALL": lambda s, i: (*_popped(s, i.arg + 2), _VALUE),
    "CALL_FUNCTION_EX": lambda s, i: (*_popped(s, 3 + (i.arg & 1)), _VALUE),
    "RETURN_GENERATOR": lambda s, i: (*s, _VALUE),
}


def _after(instr: Instr, stack: Stack, *, jump: bool) -> Stack:
    effect = _EFFECTS.get(instr.name)
    if effect is not None:
        return effect(stack, instr)
    delta = instr.stack_effect(jump=jump)
    return _popped(stack, max(0, -delta)) + (_VALUE,) * max(0, delta)
