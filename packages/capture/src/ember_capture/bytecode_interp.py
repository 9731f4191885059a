"""The symbolic interpreter: runs a code object's bytecode over interpreter values.

One ``Interpreter`` per frame (the compiled function, or a function being inlined)
keeps a value stack and locals and dispatches each instruction to the handler table
in ``opcodes.py``. All frames share one ``OutputGraph``.
"""

from __future__ import annotations

import builtins
import dis
import inspect
import types
from collections.abc import Callable

from . import opcodes
from .errors import CaptureError
from .output_graph import OutputGraph
from .source import (
    AttrSource,
    GlobalSource,
    GlobalsSource,
    ItemSource,
    LocalSource,
    Source,
)
from .variables import ObjectValue, TupleValue, Value

MAX_INLINE_DEPTH = 64


class Interpreter:
    """Interprets one frame. ``run()`` returns the frame's return value."""

    def __init__(
        self,
        code: types.CodeType,
        output: OutputGraph,
        *,
        f_globals: dict,
        globals_source: Source | None,
        closure: tuple[types.CellType, ...] | None,
        closure_source: Callable[[str], Source] | None,
        locals_: dict[str, Value] | None = None,
        frame_values: dict[str, object] | None = None,
        depth: int = 0,
    ) -> None:
        self.code = code
        self.output = output
        self.f_globals = f_globals
        self.globals_source = globals_source  # None: trusted torch code, unguarded
        self.cells = dict(zip(code.co_freevars, closure or ()))
        self.closure_source = closure_source
        self.locals: dict[str, Value] = dict(locals_ or {})
        self.frame_values = frame_values or {}  # real values, wrapped on first read
        self.depth = depth
        self.stack: list[Value] = []
        self.kw_names: tuple[str, ...] = ()
        self.return_value: Value | None = None
        self.instructions = list(dis.get_instructions(code))
        self.lineno = code.co_firstlineno

    # -- the loop --------------------------------------------------------------

    def run(self) -> Value:
        self.output.frames.append(self)
        try:
            for inst in self.instructions:
                if inst.positions is not None and inst.positions.lineno is not None:
                    self.lineno = inst.positions.lineno
                handler = opcodes.HANDLERS.get(inst.opname)
                if handler is None:
                    raise self.unsupported(
                        _describe_opcode(inst),
                        "ember's capture does not handle this construct yet; "
                        "the function runs eagerly",
                    )
                handler(self, inst)
                if self.return_value is not None:
                    return self.return_value
        finally:
            self.output.frames.pop()
        raise self.unsupported("reaching the end of the bytecode without a return")

    # -- stack -----------------------------------------------------------------

    def push(self, value: Value) -> None:
        self.stack.append(value)

    def pop(self) -> Value:
        return self.stack.pop()

    def popn(self, n: int) -> list[Value]:
        if n == 0:
            return []
        values = self.stack[-n:]
        del self.stack[-n:]
        return values

    # -- names -----------------------------------------------------------------

    def load_local(self, name: str) -> Value:
        if name not in self.locals:
            if name not in self.frame_values:
                raise self.unsupported(f"reading local {name!r} before it is assigned")
            self.locals[name] = self.output.wrap(
                self.frame_values[name], LocalSource(name)
            )
        return self.locals[name]

    def load_deref(self, name: str) -> Value:
        if name in self.locals or name in self.frame_values:
            return self.load_local(name)
        if name not in self.cells:
            raise self.unsupported(f"reading closure variable {name!r}")
        value = self.cells[name].cell_contents
        if self.closure_source is None:
            return self.output.wrap_trusted(value)
        return self.output.wrap(value, self.closure_source(name))

    def load_global(self, name: str) -> Value:
        if name in self.f_globals:
            if self.globals_source is None:
                return self.output.wrap_trusted(self.f_globals[name])
            source = (
                GlobalSource(name)
                if isinstance(self.globals_source, GlobalsSource)
                else ItemSource(self.globals_source, name)
            )
            return self.output.wrap(self.f_globals[name], source)
        if not hasattr(builtins, name):
            raise self.unsupported(f"name {name!r} is not defined")
        return self.output.wrap_builtin(name, self.globals_source)

    # -- inlining ----------------------------------------------------------------

    def inline(self, fn: ObjectValue, args: list[Value], kwargs: dict) -> Value:
        """Interpret ``fn(*args, **kwargs)`` in a child frame sharing the graph."""
        func = fn.value
        if not isinstance(func, types.FunctionType):
            raise self.unsupported(f"calling {func!r}")
        if func.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
            raise self.unsupported(
                f"calling generator or coroutine {func.__qualname__}"
            )
        if self.depth >= MAX_INLINE_DEPTH:
            raise self.unsupported(f"inlining deeper than {MAX_INLINE_DEPTH} calls")
        trusted = func.__module__ is not None and func.__module__.startswith("torch.")
        fn_source = None if trusted else fn.source
        # A function with no source must share its defining frame's globals.
        if fn_source is None and not trusted and func.__globals__ is not self.f_globals:
            raise self.unsupported(f"calling {func.__qualname__} built at run time")
        child = Interpreter(
            func.__code__,
            self.output,
            f_globals=func.__globals__,
            globals_source=(
                None
                if trusted
                else self.globals_source
                if fn_source is None
                else AttrSource(fn_source, "__globals__")
            ),
            closure=func.__closure__,
            closure_source=(
                None
                if trusted or fn_source is None
                else lambda name: _cell_source(fn_source, func, name)
            ),
            locals_=self._bind(func, fn_source, args, kwargs),
            depth=self.depth + 1,
        )
        return child.run()

    def _bind(self, func, fn_source, args, kwargs) -> dict[str, Value]:
        sig = inspect.signature(func)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise self.unsupported(f"calling {func.__qualname__}: {e}") from e
        result: dict[str, Value] = {}
        positional = [
            p.name
            for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        defaults = func.__defaults__ or ()
        for name, param in sig.parameters.items():
            if name in bound.arguments:
                value = bound.arguments[name]
                if param.kind == param.VAR_POSITIONAL:
                    value = TupleValue(tuple(value))
                elif param.kind == param.VAR_KEYWORD:
                    if value:
                        raise self.unsupported(
                            f"calling {func.__qualname__} with **{name}"
                        )
                    raise self.unsupported(f"a function taking **{name}")
                result[name] = value
            elif param.kind == param.VAR_POSITIONAL:
                result[name] = TupleValue(())
            elif param.kind == param.VAR_KEYWORD:
                raise self.unsupported(f"a function taking **{name}")
            elif param.kind == param.KEYWORD_ONLY:
                result[name] = self._default(
                    param.default, fn_source, "__kwdefaults__", name
                )
            else:
                index = positional.index(name) - (len(positional) - len(defaults))
                result[name] = self._default(
                    param.default, fn_source, "__defaults__", index
                )
        return result

    def _default(self, value, fn_source, attr, key) -> Value:
        if fn_source is None:
            return self.output.wrap_trusted(value)
        return self.output.wrap(value, ItemSource(AttrSource(fn_source, attr), key))

    # -- errors ------------------------------------------------------------------

    def location(self) -> tuple[str, int]:
        return self.code.co_filename, self.lineno

    def unsupported(self, reason: str, hint: str = "") -> CaptureError:
        return self.output.error(reason, hint)


def _cell_source(fn_source: Source, func: types.FunctionType, name: str) -> Source:
    index = func.__code__.co_freevars.index(name)
    return AttrSource(
        ItemSource(AttrSource(fn_source, "__closure__"), index), "cell_contents"
    )


# What the user wrote, for opcodes capture does not handle yet (by opname prefix).
_CONSTRUCTS = {
    "POP_JUMP": "control flow (if, while, and/or, conditional expression)",
    "JUMP": "control flow (a loop or branch)",
    "GET_ITER": "a for loop or comprehension",
    "FOR_ITER": "a for loop or comprehension",
    "STORE_ATTR": "assigning an attribute",
    "STORE_GLOBAL": "assigning a global variable",
    "STORE_SUBSCR": "assigning to an item",
    "MAKE_FUNCTION": "defining a function or lambda",
    "BUILD_MAP": "building a dict",
    "BUILD_CONST_KEY_MAP": "building a dict",
    "BUILD_SET": "building a set",
    "FORMAT_VALUE": "an f-string",
    "BEFORE_WITH": "a with-block",
    "PUSH_EXC_INFO": "exception handling",
    "RAISE_VARARGS": "raising an exception",
    "LOAD_ASSERTION_ERROR": "an assert",
    "YIELD_VALUE": "a generator",
    "IMPORT_NAME": "an import",
}


def _describe_opcode(inst: dis.Instruction) -> str:
    arg = f" {inst.argrepr}" if inst.argrepr else ""
    for prefix, construct in _CONSTRUCTS.items():
        if inst.opname.startswith(prefix):
            return f"{construct} (bytecode {inst.opname})"
    return f"bytecode {inst.opname}{arg}"
