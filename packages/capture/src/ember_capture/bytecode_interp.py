"""The symbolic interpreter: runs a code object's bytecode over interpreter values.

One ``Interpreter`` per frame (the compiled function, or a function being inlined)
keeps a value stack, locals and closure cells, and dispatches each instruction to
the handler table in ``opcodes.py``. Branches must be decided by constants, so loops
unroll as they run. All frames share one ``OutputGraph``.
"""

from __future__ import annotations

import builtins
import collections
import dis
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import bytecode, kinds, opcodes  # noqa: F401 - kinds registers the value kinds
from .behaviour import parts, reachable
from .call_routing import user_code
from .errors import CaptureError
from .guards import Guard, GuardKind
from .marks import called_in_graph, never_captured
from .output_graph import OutputGraph
from .source import (
    AttrSource,
    GlobalSource,
    GlobalsSource,
    ImportSource,
    ItemSource,
    LocalSource,
    Source,
)
from .variables import (
    Cell,
    DictValue,
    FunctionValue,
    GeneratorValue,
    ObjectValue,
    TupleValue,
    Value,
)

MAX_INLINE_DEPTH = 64
# Exceptions user code raises while being interpreted (not ember's own bugs).
_PYTHON_ERRORS = (AttributeError, IndexError, KeyError, TypeError, ValueError)
MAX_STEPS = 1_000_000  # instructions per capture: a loop that runs longer is refused


# The wrappers ``torch._disable_dynamo`` puts around torch functions.
_NOT_FOR_DYNAMO = frozenset(
    c for c in torch._disable_dynamo.__code__.co_consts if isinstance(c, types.CodeType)
)

# Types of the module globals of torch's code that change at run time.
_STATE_TYPES = (dict, list, collections.OrderedDict, collections.defaultdict)


class Interpreter:
    """Interprets one frame. ``run()`` returns the frame's return value; for a
    generator frame it returns at each yield with the yielded value, and the next
    ``run()`` continues from there (see GeneratorValue)."""

    def __init__(
        self,
        code: types.CodeType,
        output: OutputGraph,
        *,
        f_globals: dict,
        globals_source: Source | None,
        cells: dict[str, Cell | types.CellType],
        closure_source: Callable[[str], Source] | None,
        closure_owner: Value | None = None,
        locals_: dict[str, Value] | None = None,
        frame_values: dict[str, object] | None = None,
        depth: int = 0,
    ) -> None:
        self.code = code
        self.output = output
        self.f_globals = f_globals
        self.globals_source = globals_source  # None: trusted torch code, unguarded
        self.cells = cells  # free variables: symbolic Cells, or real cells to wrap
        self.closure_source = closure_source  # where a real cell's value is read
        self.closure_owner = closure_owner  # the function whose closure they are
        self.locals: dict[str, Value] = dict(locals_ or {})
        self.frame_values = frame_values or {}  # real values, wrapped on first read
        self.depth = depth
        self.stack: list[Value] = []
        self.kw_names: tuple[str, ...] = ()
        self.return_value: Value | None = None
        self.is_generator = bool(code.co_flags & inspect.CO_GENERATOR)
        self.yielded: Value | None = None  # set by YIELD_VALUE: run() pauses
        self.instructions = list(dis.get_instructions(code))
        self._index = {inst.offset: i for i, inst in enumerate(self.instructions)}
        self.pc = 0
        self.lineno = code.co_firstlineno
        self.break_point: BreakPoint | None = None

    # -- the loop --------------------------------------------------------------

    def run(self) -> Value:
        self.output.frames.append(self)
        try:
            while self.return_value is None:
                inst = self.instructions[self.pc]
                self.pc += 1
                self.output.steps += 1
                if self.output.steps > MAX_STEPS:
                    raise self.unsupported(
                        f"a loop running more than {MAX_STEPS} bytecode steps"
                    )
                if inst.positions is not None and inst.positions.lineno is not None:
                    self.lineno = inst.positions.lineno
                handler = opcodes.HANDLERS.get(inst.opname)
                if self.depth == 0:
                    self._checkpoint(inst)
                if handler is None:
                    raise self.unsupported(
                        bytecode.describe_opcode(inst),
                        "ember's capture does not handle this construct yet; "
                        "the function runs eagerly",
                    )
                handler(self, inst)
                if self.yielded is not None:
                    value, self.yielded = self.yielded, None
                    return value
        except CaptureError as e:
            if self.depth == 0 and e.break_point is None:
                e.break_point = self.break_point
            raise
        except _PYTHON_ERRORS as e:
            # The user's code raising (a missing attribute, a bad index...): run
            # that instruction for real, so the exception comes from Python itself.
            error = self.unsupported(f"{type(e).__name__}: {e}")
            if self.depth == 0:
                error.break_point = self.break_point
            raise error from e
        finally:
            self.output.frames.pop()
        return self.return_value

    def _checkpoint(self, inst: dis.Instruction) -> None:
        """The frame's state before ``inst``: where a graph break would resume."""
        self.break_point = BreakPoint(
            inst,
            list(self.stack),
            dict(self.locals),
            {k: c.value for k, c in self.cells.items() if isinstance(c, Cell)},
            self.kw_names,
            len(self.output.graph.nodes),
            len(self.output.side_effects),
            torch.is_grad_enabled(),
            self.lineno,
            _contents(self.stack, self.locals)
            if inst.opname.startswith("CALL")
            else (),
        )

    def jump(self, inst: dis.Instruction) -> None:
        self.pc = self._index[inst.argval]

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

    def cell(self, name: str) -> Cell:
        """The symbolic cell for a cell or free variable of this frame."""
        cell = self.cells.get(name)
        if isinstance(cell, Cell):
            return cell
        if cell is None:  # a cell variable this frame creates (MAKE_CELL)
            value = self.load_local(name) if self._has_local(name) else None
            cell = Cell(value)
        else:  # the compiled function's own closure: read it, never write it
            real = cell.cell_contents
            value = (
                self.output.wrap_trusted(real)
                if self.closure_source is None
                else self.output.wrap(real, self.closure_source(name))
            )
            owner = None
            if self.closure_owner is not None:
                owner = (self.closure_owner, self.code.co_freevars.index(name))
            cell = Cell(value, writable=False, owner=owner)
        self.cells[name] = cell
        return cell

    def _has_local(self, name: str) -> bool:
        return name in self.locals or name in self.frame_values

    def load_global(self, name: str) -> Value:
        written = self.output.global_writes.get((id(self.f_globals), name))
        if written is not None:
            return written
        if name in self.f_globals:
            value = self.f_globals[name]
            if self.globals_source is None and type(value) in _STATE_TYPES:
                # torch's own state (registries of hooks): read and guarded.
                module = ImportSource(self.f_globals["__name__"])
                return self.output.wrap(value, AttrSource(module, name))
            if self.globals_source is None:
                return self.output.wrap_trusted(value)
            source = (
                GlobalSource(name)
                if isinstance(self.globals_source, GlobalsSource)
                else ItemSource(self.globals_source, name)
            )
            return self.output.wrap(self.f_globals[name], source)
        if not hasattr(builtins, name):
            raise self.unsupported(f"name {name!r} is not defined")
        patched = self.output.global_writes.get((id(vars(builtins)), name))
        if patched is not None:  # ``builtins.abs = ...`` earlier in the capture
            return patched
        own = self.f_globals.get("__builtins__", builtins)
        if own is builtins or own is vars(builtins):
            return self.output.wrap_builtin(name, self.globals_source)
        # Globals with builtins of their own (torch.package gives each module
        # a copy with its own __import__): the real builtin where they hold it.
        if type(own) is not dict or own.get(name) is not getattr(builtins, name):
            raise self.unsupported(
                f"reading the builtin {name!r} of a function with its own __builtins__"
            )
        if self.globals_source is not None:
            entry = ItemSource(ItemSource(self.globals_source, "__builtins__"), name)
            self.output.guards.add(Guard(GuardKind.ID_MATCH, entry, own[name]))
        return self.output.wrap_builtin(name, self.globals_source)

    # -- inlining ----------------------------------------------------------------

    def inline(self, fn: Value, args: list[Value], kwargs: dict) -> Value:
        """Interpret ``fn(*args, **kwargs)`` in a child frame sharing the graph.

        ``fn`` is an ObjectValue holding a Python function (read from somewhere
        with a source, or from torch's own code) or a FunctionValue built here.
        """
        if self.depth >= MAX_INLINE_DEPTH:
            raise self.unsupported(f"inlining deeper than {MAX_INLINE_DEPTH} calls")
        if isinstance(fn, FunctionValue):
            return self._inline_built(fn, args, kwargs)
        func = fn.value
        if not isinstance(func, types.FunctionType):
            raise self.unsupported(f"calling {func!r}")
        if func.__code__ in _NOT_FOR_DYNAMO:
            # torch keeps Dynamo out of this function (Optimizer.zero_grad);
            # ember interprets the function it wraps like any other.
            wrapped_source = fn.source and AttrSource(fn.source, "__wrapped__")
            fn = ObjectValue(func.__wrapped__, wrapped_source)
            func = fn.value
        kept_out = getattr(func, "_torchdynamo_orig_callable", None)
        if getattr(func, "_torchdynamo_disable", False) and callable(kept_out):
            # The same keep-out, made by torch's compiler once it is imported
            # (its wrapper switches the frame hook off and on): torch's own
            # functions are interpreted as they are; a user's function that
            # someone kept out of torch.compile runs as Python.
            module = getattr(kept_out, "__module__", None) or ""
            if module != "torch" and not module.startswith("torch."):
                raise self.unsupported(
                    f"calling {getattr(kept_out, '__qualname__', kept_out)}, "
                    "which is marked torch.compiler.disable",
                    "it runs as Python, between graphs",
                )
            source = fn.source and AttrSource(fn.source, "_torchdynamo_orig_callable")
            fn = ObjectValue(kept_out, source)
            func = fn.value
            if not isinstance(func, types.FunctionType):
                raise self.unsupported(f"calling {func!r}")
        if never_captured(func):
            raise self.unsupported(
                f"calling {func.__qualname__}, which is marked never to be "
                "captured (ember.disable)",
                "it runs as Python, between graphs",
            )
        if called_in_graph(func):
            return self.output.call_tensor_op(
                "call_function", func, tuple(args), kwargs
            )
        code = user_code(func.__code__)  # a function a routed frame made
        if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
            raise self.unsupported(f"calling coroutine {func.__qualname__}")
        # torch's own code, and capture's stand-ins (kinds/), are not patched.
        trusted = (func.__module__ or "").startswith(("torch.", "ember_capture."))
        source = None if trusted else fn.source
        if source is None and not trusted:
            raise self.unsupported(
                f"calling {func.__qualname__}, reached in a way ember cannot guard"
            )
        if source is not None:
            # A function object keeps its identity when its code is replaced.
            replaced = AttrSource(source, "__code__")
            self.output.guards.add(Guard(GuardKind.ID_MATCH, replaced, func.__code__))

        def default(kind: str, key: int | str) -> Value:
            table = func.__defaults__ if kind == "__defaults__" else func.__kwdefaults__
            if source is None:
                return self.output.wrap_trusted(table[key])
            return self.output.wrap(
                table[key], ItemSource(AttrSource(source, kind), key)
            )

        locals_ = self._bind(
            code, func.__qualname__, args, kwargs, len(func.__defaults__ or ()), default
        )
        child = Interpreter(
            code,
            self.output,
            f_globals=func.__globals__,
            globals_source=None
            if source is None
            else AttrSource(source, "__globals__"),
            cells=dict(zip(code.co_freevars, func.__closure__ or ())),
            closure_source=(
                None
                if source is None
                else lambda name: _cell_source(source, code, name)
            ),
            closure_owner=None if source is None else fn,
            locals_=locals_,
            depth=self.depth + 1,
        )
        return GeneratorValue(child) if child.is_generator else child.run()

    def _inline_built(self, fn: FunctionValue, args, kwargs) -> Value:
        code = fn.code
        if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
            raise self.unsupported(f"calling coroutine {code.co_qualname}")

        def default(kind: str, key: int | str) -> Value:
            return fn.defaults[key] if kind == "__defaults__" else fn.kwdefaults[key]

        locals_ = self._bind(
            code, code.co_qualname, args, kwargs, len(fn.defaults), default
        )
        child = Interpreter(
            code,
            self.output,
            f_globals=fn.f_globals,
            globals_source=fn.globals_source,
            cells=dict(zip(code.co_freevars, fn.closure)),
            closure_source=None,
            locals_=locals_,
            depth=self.depth + 1,
        )
        return GeneratorValue(child) if child.is_generator else child.run()

    def _bind(
        self,
        code: types.CodeType,
        qualname: str,
        args: list[Value],
        kwargs: dict[str, Value],
        n_defaults: int,
        default: Callable[[str, int | str], Value],
    ) -> dict[str, Value]:
        """The initial locals of a call, following Python's argument rules."""
        names = code.co_varnames
        argc, posonly, kwonly = (
            code.co_argcount,
            code.co_posonlyargcount,
            code.co_kwonlyargcount,
        )
        positional, keyword_only = names[:argc], names[argc : argc + kwonly]
        star = argc + kwonly
        has_varargs = bool(code.co_flags & inspect.CO_VARARGS)
        has_varkw = bool(code.co_flags & inspect.CO_VARKEYWORDS)
        if len(args) > argc and not has_varargs:
            raise self.unsupported(
                f"calling {qualname}() with {len(args)} positional arguments "
                f"(it takes {argc})"
            )
        bound: dict[str, Value] = dict(zip(positional, args))
        if has_varargs:
            bound[names[star]] = TupleValue(tuple(args[argc:]))
        extra: dict[object, Value] = {}
        for key, value in kwargs.items():
            if key in positional[posonly:] or key in keyword_only:
                if key in bound:
                    raise self.unsupported(f"{qualname}() got {key!r} twice")
                bound[key] = value
            elif has_varkw:
                extra[key] = value
            else:
                raise self.unsupported(
                    f"{qualname}() got an unexpected keyword {key!r}"
                )
        if has_varkw:
            bound[names[star + has_varargs]] = DictValue(extra)
        first_default = argc - n_defaults
        for i, name in enumerate(positional):
            if name not in bound:
                if i < first_default:
                    raise self.unsupported(f"{qualname}() missing argument {name!r}")
                bound[name] = default("__defaults__", i - first_default)
        for name in keyword_only:
            if name not in bound:
                bound[name] = default("__kwdefaults__", name)
        return bound

    # -- errors ------------------------------------------------------------------

    def location(self) -> tuple[str, int]:
        return self.code.co_filename, self.lineno

    def unsupported(self, reason: str, hint: str = "") -> CaptureError:
        return self.output.error(reason, hint)


@dataclass(frozen=True)
class BreakPoint:
    """The compiled frame just before an instruction capture may stop at."""

    inst: dis.Instruction
    stack: list[Value]
    locals: dict[str, Value]
    cells: dict[str, Value | None]  # this frame's cell variables, by name
    kw_names: tuple[str, ...]
    graph_nodes: int  # nodes in the graph before the instruction ran
    side_effects: int  # writes recorded before the instruction ran
    grad_enabled: bool  # the grad mode the instruction runs under
    lineno: int
    # (value, its parts' ids) for the lists, dicts and objects a call could change
    contents: tuple[tuple[Value, object], ...]

    def containers_unchanged(self) -> bool:
        return all(_snapshot(v) == copy for v, copy in self.contents)


def _contents(stack: list[Value], locals_: dict[str, Value]) -> tuple:
    """(value, what it holds) for every value the stack and locals reach that
    holds others: lists, dicts and objects made in the function, which a call
    may change in place."""
    held = [
        (v, _snapshot(v)) for v in reachable([*stack, *locals_.values()]) if parts(v)
    ]
    return tuple(held)


def _snapshot(v: Value) -> dict[object, int]:
    return {k: id(part) for k, part in parts(v).items()}


def _cell_source(fn_source: Source, code: types.CodeType, name: str) -> Source:
    index = code.co_freevars.index(name)
    return AttrSource(
        ItemSource(AttrSource(fn_source, "__closure__"), index), "cell_contents"
    )
