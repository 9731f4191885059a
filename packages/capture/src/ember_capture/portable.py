"""Guards in a form another process can check: the check's Python text, and each
object it compares with written as JSON that names the object instead of
holding it (a module by its name, a function or class by module and qualified
name, a code object by a fingerprint of its contents).

A new process rebuilds the check from this without capturing again
(docs/capture.md, "Portable guards"). This module and checks.py are all that
takes: neither imports the rest of capture.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import sys
import types
import typing
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch._library import custom_ops

from .checks import CHECK_SCOPE, CellView, CompiledCheck, GlobalState, TensorSpec
from .float_inputs import float_tensor


class NotPortable(Exception):
    """A guard compares with an object that has no name another process
    could look up (an instance, a tensor, a function made inside a call)."""


def code_fingerprint(code: types.CodeType) -> str:
    """SHA-256 over what a code object is: its bytecode, constants (nested code
    by their own fingerprint), names, flags, file and line table. Equal
    fingerprints in two processes mean the same code from the same place."""
    return hashlib.sha256(_code_text(code).encode()).hexdigest()


def _code_text(code: types.CodeType) -> str:
    consts = [
        _code_text(c) if isinstance(c, types.CodeType) else _const_text(c)
        for c in code.co_consts
    ]
    parts = (
        code.co_code.hex(),
        repr(consts),
        repr(code.co_names),
        repr(code.co_varnames),
        repr(code.co_freevars),
        repr(code.co_cellvars),
        repr(
            (
                code.co_argcount,
                code.co_posonlyargcount,
                code.co_kwonlyargcount,
                code.co_flags,
            )
        ),
        code.co_filename,
        code.co_qualname,
        str(code.co_firstlineno),
        code.co_linetable.hex(),
        code.co_exceptiontable.hex(),
    )
    return "\0".join(parts)


def _const_text(value: object) -> str:
    # a frozenset's repr follows string hashing, which differs between processes
    if isinstance(value, frozenset):
        return f"frozenset({sorted(_const_text(v) for v in value)})"
    if isinstance(value, tuple):
        return f"({', '.join(_const_text(v) for v in value)},)"
    return f"{type(value).__name__}:{value!r}"


def _lookup(module: str, qualname: str) -> object:
    """The object ``module.qualname`` in this process; LookupError when the
    module was never imported here or has no such name (nothing is imported)."""
    try:
        value: object = sys.modules[module]
        for part in qualname.split("."):
            value = getattr(value, part)
    except (KeyError, AttributeError) as e:
        raise LookupError(f"{module}.{qualname} is not found") from e
    return value


def _names_of(obj: object) -> list[tuple[str, str]]:
    """The ``(module, qualified name)`` pairs under which ``obj`` might be
    found again: torch's functions name a class that is not where they live
    (``torch.matmul`` says ``_VariableFunctionsClass.matmul``), and a method
    descriptor names only its class."""
    if isinstance(obj, enum.Enum):
        cls = type(obj)
        return [(cls.__module__, f"{cls.__qualname__}.{obj.name}")]
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    name = getattr(obj, "__name__", None)
    # a method descriptor names only its class; a builtin bound to a class
    # (``object.__new__``) only that class
    owner = getattr(obj, "__objclass__", None)
    bound_to = getattr(obj, "__self__", None)
    if owner is None and isinstance(bound_to, type):
        owner = bound_to
    if module is None and owner is not None:
        module, qualname = owner.__module__, f"{owner.__qualname__}.{name}"
    if not isinstance(module, str):
        return []
    found = [(module, n) for n in dict.fromkeys((qualname, name)) if isinstance(n, str)]
    if module == "builtins" and isinstance(name, str):
        found.append(("types", name))  # NoneType and the like live there
    return found


_PLAIN = (type(None), bool, int, str)

# The objects of capture's own that transformed code calls, by name.
_HELPERS: dict[str, object] = {"float_tensor": float_tensor}


def encode(value: object, read: str | None = None) -> Any:
    """JSON that ``decode`` turns back into ``value``. An object with no name
    (a code object, a function made at run time, a ``functools.partial``) is
    written as what it must be: ``decode`` reads the object with the guard's
    expression ``read`` from the call being served and accepts it when it is
    the same code (fingerprint), the same function (code and defaults) or the
    same partial (function, arguments). Raises NotPortable."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is float:
        return ["float", value.hex()]
    if kind in (tuple, list):
        return [kind.__name__, [encode(v) for v in value]]
    if kind is torch.dtype:
        return ["dtype", str(value).removeprefix("torch.")]
    if kind is torch.device:
        return ["device", str(value)]
    if kind is GlobalState:
        return ["GlobalState", [encode(v) for v in value]]
    if kind is TensorSpec:
        return ["TensorSpec", [encode(getattr(value, f)) for f in _SPEC_FIELDS]]
    if kind is types.CodeType:
        if read is None:
            raise NotPortable(f"the code of {value.co_qualname} is read from nowhere")
        return ["code", code_fingerprint(value), read]
    for name, helper in _HELPERS.items():
        if value is helper:
            return ["helper", name]
    if kind is torch._ops._OpNamespace:  # ``torch.ops.<namespace>``
        return ["op_namespace", value.name]
    if kind is torch._ops.OpOverloadPacket:  # ``torch.ops.<namespace>.<op>``
        namespace, op = value._qualified_op_name.split("::")
        return ["op", namespace, op, operator_text(value)]
    if isinstance(value, types.ModuleType):
        name = getattr(value, "__name__", None)
        if isinstance(name, str) and sys.modules.get(name) is value:
            return ["module", name]
        raise NotPortable(f"the module {name} is not in sys.modules under its name")
    for where in _names_of(value):
        path = _path_to(value, where)
        if path is not None:
            return ["global", *where, path, _what(value)]
    if read is not None and kind is functools.partial:
        parts = [value.func, value.args, tuple(sorted(value.keywords.items()))]
        return ["partial", read, encode(parts)]
    if read is not None and typing.get_origin(value) is not None:
        # a type annotation object (``int | None``, ``list[int]``): made anew
        # by each ``|`` or subscript, so the same one is recognized by parts
        parts = [typing.get_origin(value), typing.get_args(value)]
        return ["annotation", read, kind.__qualname__, encode(parts)]
    if read is not None and kind in _SETTINGS_ONLY:
        # a grad-mode object (``@torch.no_grad()`` keeps one per decorated
        # function): what it does is its type and its setting
        setting = {a: getattr(value, a) for a in _SETTINGS_ONLY[kind]}
        return ["settings", read, encode(kind), encode(sorted(setting.items()))]
    if read is not None and kind is types.FunctionType:
        code = value.__code__
        defaults = [value.__defaults__, sorted((value.__kwdefaults__ or {}).items())]
        return ["function", read, code_fingerprint(code), encode(defaults)]
    text = repr(value)
    text = text if len(text) < 80 else text[:77] + "..."
    raise NotPortable(f"{text} has no name to look it up by")


def operator_text(op: object) -> str | None:
    """What code compiled around the ``torch.library.custom_op`` ``op`` (an
    operator or one of its overloads) depends on, beyond the operator's own
    function (which runs at call time): its schema and its fake function
    (which gave its outputs' sizes, dtypes and strides), by code and by the
    bytes of its source file (an edit of a helper beside it changes it too).
    None for any other operator (torch's own: the torch version pins them),
    and for a fake function with closure cells or no source file."""
    if isinstance(op, torch._ops.OpOverloadPacket):
        op = getattr(op, "default", None)
    if not isinstance(op, torch._ops.OpOverload):
        return None
    definition = custom_ops.OPDEFS.get(op.name())
    fake = getattr(definition, "_abstract_fn", None)
    if type(fake) is not types.FunctionType or fake.__closure__:
        return None
    source = _source_digest(fake.__code__.co_filename)
    if source is None:
        return None
    code = code_fingerprint(fake.__code__)
    return f"{op._schema}\n{fake.__module__}.{fake.__qualname__} {code} {source}"


@functools.cache
def _source_digest(path: str) -> str | None:
    """SHA-256 of a source file's bytes, read once per process (as its module
    was imported); None when there is no such file."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _what(value: object) -> str:
    """What a named object is, beyond its name: the same name in another
    process may be bound to something else (a patched ``torch.sin``, a class
    whose body was edited). A Python function by its code, a class by
    ``class_fingerprint``, anything else by its type and the names it gives
    itself."""
    if type(value) is types.FunctionType:
        return "code " + code_fingerprint(value.__code__)
    if isinstance(value, type):
        return "class " + class_fingerprint(value)
    names = [getattr(value, a, None) for a in ("__module__", "__qualname__")]
    names.append(getattr(value, "__name__", None))
    return f"{type(value).__qualname__} {[n for n in names if isinstance(n, str)]}"


_CLASS_BODIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def class_fingerprint(cls: type) -> str:
    """SHA-256 over a class's bases (their names, in method resolution order)
    and, for each, the protocol methods it defines (a function by its code,
    anything else by type). Capture decides ``isinstance``, ``issubclass``,
    truth, ``==``, ``len`` and the like from these without a guard of its
    own; a method it runs it inlines, with a guard on that method's code.
    Nothing else of a class's body counts: torch's compiler frontend, once
    used, replaces ``nn.Module.__init__`` in every process that uses it."""
    h = hashlib.sha256()
    for base in cls.__mro__:
        h.update(_class_body(base).encode())
    return h.hexdigest()


def _class_body(cls: type) -> str:
    try:
        return _CLASS_BODIES[cls]
    except (KeyError, TypeError):
        pass
    parts = [f"{cls.__module__}.{cls.__qualname__}"]
    body = vars(cls)
    for name in sorted(_PROTOCOL & body.keys()):
        parts.append(f"{name}={_member_text(body[name])}")
    text = "\n".join(parts)
    with contextlib.suppress(TypeError):  # a class that takes no weak reference
        _CLASS_BODIES[cls] = text
    return text


# The methods Python calls for an operator or a builtin on an object: capture
# answers those (truth, ==, len, in, iteration, attribute access, calls) from
# which class defines them.
_PROTOCOL = frozenset(
    {
        "__bool__",
        "__len__",
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__hash__",
        "__iter__",
        "__contains__",
        "__getitem__",
        "__call__",
        "__getattr__",
        "__getattribute__",
        "__setattr__",
        "__index__",
        "__int__",
        "__float__",
        "__instancecheck__",
        "__subclasscheck__",
    }
)


def _member_text(attr: object) -> str:
    """A method by its code, anything else (``__hash__ = None``) by type."""
    if isinstance(attr, (staticmethod, classmethod)):
        attr = attr.__func__
    if type(attr) is types.FunctionType:
        return code_fingerprint(attr.__code__)
    return type(attr).__qualname__


# What a name may be followed through to reach the object: a decorator's
# wrapper keeps the function as ``__wrapped__`` (functools.wraps), a class's
# classmethod is a new bound method whose ``__func__`` is the function.
_FOLLOW = ("__wrapped__", "__func__")
_MAX_FOLLOW = 4


def _path_to(value: object, where: tuple[str, str]) -> list[str] | None:
    """The attributes (from ``_FOLLOW``) that lead from the object named
    ``where`` to ``value`` itself, or None."""
    try:
        found = _lookup(*where)
    except LookupError:
        return None
    path: list[str] = []
    for _ in range(_MAX_FOLLOW + 1):
        if found is value:
            return path
        step = next((a for a in _FOLLOW if hasattr(found, a)), None)
        if step is None:
            return None
        found = getattr(found, step)
        path.append(step)
    return None


_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(TensorSpec))


def decode(data: Any, read: Callable[[str], object] | None = None) -> object:
    """The object ``encode`` wrote. ``read(expression)`` evaluates a guard's
    read over the frame, for code objects. Raises LookupError when the
    object is not in this process (or the code read differs)."""
    if type(data) is not list:
        return data
    tag, *rest = data
    if tag == "float":
        return float.fromhex(rest[0])
    if tag == "tuple":
        return tuple(decode(v, read) for v in rest[0])
    if tag == "list":
        return [decode(v, read) for v in rest[0]]
    if tag == "dtype":
        dtype = getattr(torch, rest[0], None)
        if type(dtype) is not torch.dtype:
            raise LookupError(f"no dtype torch.{rest[0]}")
        return dtype
    if tag == "device":
        return torch.device(rest[0])
    if tag == "GlobalState":
        return GlobalState(*(decode(v, read) for v in rest[0]))
    if tag == "TensorSpec":
        return TensorSpec(*(decode(v, read) for v in rest[0]))
    if tag == "code":
        fingerprint, expression = rest
        code = _read(read, expression)
        if type(code) is not types.CodeType or code_fingerprint(code) != fingerprint:
            raise LookupError(f"the code read by {expression} is not the same")
        return code
    if tag in ("op_namespace", "op"):
        # torch.ops makes a namespace on first read and keeps it; an operator
        # not registered in this process is not found
        value = getattr(torch.ops, rest[0])
        if tag == "op":
            value = getattr(value, rest[1], None)
            if type(value) is not torch._ops.OpOverloadPacket:
                raise LookupError(f"no operator torch.ops.{rest[0]}.{rest[1]}")
            if operator_text(value) != rest[2]:
                raise LookupError(f"torch.ops.{rest[0]}.{rest[1]} is not what it was")
        return value
    if tag == "module":
        if rest[0] not in sys.modules:
            raise LookupError(f"the module {rest[0]} is not imported")
        return sys.modules[rest[0]]
    if tag == "global":
        module, qualname, *more = rest
        path = more[0] if more else []
        what = more[1] if len(more) > 1 else None
        value = _lookup(module, qualname)
        for step in path:
            if step not in _FOLLOW or not hasattr(value, step):
                raise LookupError(f"{module}.{qualname} has no {step} now")
            value = getattr(value, step)
        if what is not None and _what(value) != what:
            raise LookupError(f"{module}.{qualname} is not what it was")
        return value
    if tag == "partial":
        expression, parts = rest
        found = _read(read, expression)
        func, args, keywords = decode(parts, read)
        if not (
            type(found) is functools.partial
            and found.func is func
            and found.args == args
            and tuple(sorted(found.keywords.items())) == keywords
        ):
            raise LookupError(f"{expression} is not the same partial")
        return found
    if tag == "annotation":
        expression, kind, parts = rest
        found = _read(read, expression)
        origin, args = decode(parts, read)
        if not (
            type(found).__qualname__ == kind
            and typing.get_origin(found) is origin
            and len(typing.get_args(found)) == len(args)
            and all(a is b for a, b in zip(typing.get_args(found), args))
        ):
            raise LookupError(f"{expression} is not the same annotation")
        return found
    if tag == "settings":
        expression, kind, setting = rest
        found = _read(read, expression)
        names = [name for name, _ in decode(setting, read)]
        if not (
            type(found) is decode(kind, read)
            and sorted((a, getattr(found, a, None)) for a in names)
            == decode(setting, read)
        ):
            raise LookupError(f"{expression} is not the same {type(found).__name__}")
        return found
    if tag == "function":
        expression, fingerprint, defaults = rest
        found = _read(read, expression)
        if not (
            type(found) is types.FunctionType
            and code_fingerprint(found.__code__) == fingerprint
            and [found.__defaults__, sorted((found.__kwdefaults__ or {}).items())]
            == decode(defaults, read)
        ):
            raise LookupError(f"{expression} is not the same function")
        return found
    if tag == "helper" and rest[0] in _HELPERS:
        return _HELPERS[rest[0]]
    raise LookupError(f"unknown portable value {tag!r}")


# Objects whose behaviour is their type and these attributes (the rest of
# their state, like a context manager's ``prev``, is set while they run).
_SETTINGS_ONLY: dict[type, tuple[str, ...]] = {
    torch.no_grad: (),
    torch.enable_grad: (),
    torch.inference_mode: ("mode",),
    torch.set_grad_enabled: ("mode",),
}


def _read(read: Callable[[str], object] | None, expression: str) -> object:
    if read is None:
        raise LookupError(f"{expression} cannot be read here")
    return read(expression)


@dataclass(frozen=True)
class PortableGuards:
    """A GuardChecker's check as text: ``body`` is the boolean expression over
    ``L``, ``G``, ``C`` and ``___e<i>`` (``expected`` holds each i's encoded
    value); ``terms`` is each guard alone, as (its description, its
    expression), for naming the one that failed."""

    body: str
    # (i, encoded): ``["same", j]`` when guard i compares with the object
    # guard j does (objects read from the call keep their identities)
    expected: tuple[tuple[int, Any], ...]
    terms: tuple[tuple[str, str], ...]

    def to_json(self) -> dict:
        return {
            "body": self.body,
            "expected": [list(e) for e in self.expected],
            "terms": [list(t) for t in self.terms],
        }

    @classmethod
    def from_json(cls, data: Mapping) -> PortableGuards:
        return cls(
            str(data["body"]),
            tuple((int(i), v) for i, v in data["expected"]),
            tuple((str(d), str(t)) for d, t in data["terms"]),
        )

    def compile(
        self, f_globals: dict, cells: CellView, f_locals: dict
    ) -> PortableCheck:
        """The check for one function object. Code objects are found by
        reading them from ``f_locals`` (the call being served), so the check
        then compares identities, as the capturing process's did. Raises
        LookupError when an expected object is not in this process."""
        frame = {"L": f_locals, "G": f_globals, "C": cells, **CHECK_SCOPE}

        def read(expression: str) -> object:
            try:
                return eval(expression, frame)
            except Exception as e:
                raise LookupError(f"{expression} could not be read") from e

        scope = dict(CHECK_SCOPE)
        for i, value in self.expected:
            if type(value) is list and value and value[0] == "same":
                scope[f"___e{i}"] = scope[f"___e{value[1]}"]
            else:
                scope[f"___e{i}"] = decode(value, read)
        return PortableCheck(self, scope, f_globals, cells)


class PortableCheck(CompiledCheck):
    """``check(f_locals)``, and ``failure(f_locals)`` naming the first guard
    that fails (by its description: the values it read are not kept)."""

    def __init__(
        self, guards: PortableGuards, scope: dict, f_globals: dict, cells: CellView
    ) -> None:
        fn = eval(f"lambda L, G, C: {guards.body}", scope)
        super().__init__(fn, f_globals, cells)
        self._guards = guards
        self._scope = scope

    def failure(self, f_locals: dict) -> str | None:
        # compiled here, not up front: most entries are never asked
        for text, term in self._guards.terms:
            try:
                holds = eval(f"lambda L, G, C: {term}", self._scope)(
                    f_locals, self._g, self._c
                )
            except Exception:
                holds = False
            if not holds:
                return f"{text}: no longer holds"
        return None
