"""The transformed function: same signature as the user's, calls the compiled graphs.

It is generated as Python source (kept readable, registered with linecache so
tracebacks show it), compiled once, and bound to the compiled graphs and constants
through closure cells, so the user's module globals are never touched.
"""

from __future__ import annotations

import inspect
import linecache
import math
import types
from collections.abc import Mapping

_LITERAL_TYPES = (type(None), bool, int, str)


def signature_text(code: types.CodeType) -> str:
    """The parameter list of ``code`` without defaults or annotations."""
    names = code.co_varnames
    posonly, argc, kwonly = (
        code.co_posonlyargcount,
        code.co_argcount,
        code.co_kwonlyargcount,
    )
    parts = list(names[:posonly])
    if posonly:
        parts.append("/")
    parts += names[posonly:argc]
    extra = argc + kwonly
    if code.co_flags & inspect.CO_VARARGS:
        parts.append("*" + names[extra])
        extra += 1
    elif kwonly:
        parts.append("*")
    parts += names[argc : argc + kwonly]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        parts.append("**" + names[extra])
    return ", ".join(parts)


def literal(value: object) -> str | None:
    """``repr(value)`` when it reads back as the same value, else None."""
    if type(value) in _LITERAL_TYPES:
        return repr(value)
    if type(value) is float and math.isfinite(value):
        return repr(value)
    return None


def build_code(
    fn: types.FunctionType, body: list[str], cell_names: list[str]
) -> tuple[str, types.CodeType]:
    """Compile ``body`` as a function with ``fn``'s signature; return source, code."""
    inner = "\n".join("        " + line for line in body)
    factory_params = ", ".join(cell_names)
    source = (
        f"def __ember_factory({factory_params}):\n"
        f"    def __ember_fn({signature_text(fn.__code__)}):\n"
        f"{inner}\n"
        f"    return __ember_fn\n"
    )
    origin = f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"
    filename = f"<ember transformed {fn.__qualname__} from {origin}>"
    register_source(filename, source)
    factory = compile(source, filename, "exec").co_consts[0]
    code = next(c for c in factory.co_consts if isinstance(c, types.CodeType))
    code = code.replace(co_name=fn.__name__, co_qualname=fn.__qualname__)
    return source, code


def register_source(filename: str, source: str) -> None:
    """Lets tracebacks and ``inspect`` show ``source`` for code compiled
    under ``filename`` (a transformed function's, or one a saved entry holds)."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def bind(
    fn: types.FunctionType, code: types.CodeType, cells: Mapping[str, object]
) -> types.FunctionType:
    """A function running ``code`` with ``fn``'s globals, defaults and closure."""
    original = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    closure = tuple(
        original[name] if name in original else types.CellType(cells[name])
        for name in code.co_freevars
    )
    new = types.FunctionType(
        code, fn.__globals__, fn.__name__, fn.__defaults__, closure
    )
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    return new
