"""Graph breaks: when capture stops at an instruction it cannot put in a graph.

The transformed function then runs the graph captured so far, rebuilds the value
stack and the live locals from its outputs, runs the instruction that broke as
CPython would (a call, or a branch on a tensor's value), and returns what a resume
function (resume.py) computes from there. The call that broke and the resume
functions go through the ``hook`` given to ``CaptureResult.build``, so the runtime
compiles them on their first call, each with its own guards.
"""

from __future__ import annotations

import builtins
import dis
import inspect
import types

from .bytecode import CONDITIONAL_JUMPS, jumps_backward
from .bytecode_interp import BreakPoint
from .call_routing import is_user_callable
from .emit import Emitter
from .errors import CaptureError
from .grad_mode import GradModeExit
from .output_graph import OutputGraph
from .result import HOOK_CELL, RESUME_CELL, CaptureResult
from .resume import StackEntry, handlers_covering, make_resume_code
from .side_effects import written_values
from .source import GLOBALS_CELL
from .variables import (
    BoundFunctionValue,
    Cell,
    ContextExitValue,
    FunctionValue,
    GeneratorValue,
    GradModeValue,
    IteratorValue,
    ModuleValue,
    NullValue,
    ObjectValue,
    SuperValue,
    TupleValue,
    Value,
)

# A break in a for loop resumes once per iteration left, each in a nested call:
# past this many the function runs eagerly instead.
MAX_LOOP_RESUMES = 32
RESULT = "___call_result"
CONTEXT = "___context"
EXIT = "___context_exit"


def finish_at_break(
    fn: types.FunctionType,
    output: OutputGraph,
    f_locals: dict[str, object],
    error: CaptureError,
) -> CaptureResult | None:
    """The CaptureResult for a break at ``error.break_point``, or None when the
    function cannot resume there (the caller then runs it without a graph; the
    error's reason then also says why it could not resume)."""
    point: BreakPoint | None = error.break_point
    code = fn.__code__
    if point is None:
        return None
    _at_call_site(error, code, point)
    if code.co_flags & inspect.CO_GENERATOR:
        return _cannot_resume(error, "in a generator")
    name = point.inst.opname
    if name not in _EMITTERS and name not in CONDITIONAL_JUMPS:
        return None
    # Each iteration would resume in a new nested call.
    if _inside_while_loop(code, point.inst.offset):
        return _cannot_resume(error, "inside a while loop")
    if any(
        isinstance(v, IteratorValue) and len(v.items) - v.position > MAX_LOOP_RESUMES
        for v in point.stack
    ):
        return _cannot_resume(
            error, f"inside a for loop with more than {MAX_LOOP_RESUMES} items left"
        )
    handlers = handlers_covering(code, point.inst.offset)
    exits = [v for v in point.stack if isinstance(v, ContextExitValue)]
    if "try" in handlers:
        return _cannot_resume(error, "inside a try/except/finally block")
    if len(handlers) != len(exits):
        return _cannot_resume(error, "inside a with block over this context manager")
    if name == "CALL" and not point.containers_unchanged():
        return _cannot_resume(
            error, "after the call had changed a list, dict or object made here"
        )
    live = _live_locals(code, point, f_locals)
    if not all(_rebuildable(v) for v in point.stack) or any(
        isinstance(v, _STACK_ONLY) or not _rebuildable(v) for v in live.values()
    ):
        return _cannot_resume(
            error, "while a function, generator or iterator made here is live"
        )
    output.drop_nodes_after(point.graph_nodes)  # what the instruction began
    del output.side_effects[point.side_effects :]

    emitter = Emitter(fn, output)
    written = written_values(output.side_effects)
    emitter.call_graph([*point.stack, *live.values(), *written])
    emitter.freeze_reads()  # the break's call may change what the resume is passed
    try:
        emitter.replay(output.side_effects)
        emitter.set_grad_mode(point.grad_enabled)
        locals_ = [
            emitter.expr(v) if isinstance(v, Value) else v for v in live.values()
        ]
        emit = _EMITTERS.get(name, _emit_jump)
        resumes = emit(emitter, point, code)
    except TypeError as e:
        return _cannot_resume(error, f"with a value it cannot pass on ({e})")
    codes = []
    for i, (offset, stack, indent) in enumerate(resumes):
        kinds = [kind for kind, _ in stack]
        codes.append(make_resume_code(code, offset, kinds, list(live), point.lineno))
        args = ", ".join(locals_ + [e for _, e in stack if e is not None])
        emitter.body.append(f"{indent}return {RESUME_CELL}{i}({args})")
    return emitter.result(tuple(codes), error)


def _at_call_site(error: CaptureError, code: types.CodeType, point: BreakPoint) -> None:
    """A break inside an inlined call is this frame's break at the call site:
    the reason says so, so that the callee's own break (it is then compiled
    on its own) is not read as the same one counted twice."""
    if (error.filename, error.lineno) in (
        (code.co_filename, point.lineno),
        (None, None),
    ):
        return
    error.reason = f"a call into code that breaks at {error.location} ({error.reason})"
    error.filename, error.lineno = code.co_filename, point.lineno


def _cannot_resume(error: CaptureError, where: str) -> None:
    error.reason = f"{error.reason} (cannot resume {where}: the frame runs as Python)"


def _inside_while_loop(code: types.CodeType, offset: int) -> bool:
    """A backward jump from ``offset`` or after it to before it, with no for
    loop's iterator involved: the loop would re-enter the resume function each
    time. The jump itself counts: 3.11 tests a while loop's condition again at
    its bottom with a conditional backward jump."""
    instructions = list(dis.get_instructions(code))
    for_heads = {i.offset for i in instructions if i.opname == "FOR_ITER"}
    return any(
        jumps_backward(i)
        and i.offset >= offset
        and i.argval <= offset
        and i.argval not in for_heads
        for i in instructions
    )


def _live_locals(code, point: BreakPoint, f_locals) -> dict[str, Value | str]:
    """Locals with a value at the break, in co_varnames order, then cells.

    An argument never read keeps its value: it is passed by its own name (a str).
    """
    live: dict[str, Value | str] = {}
    for name in code.co_varnames:
        if name in point.locals:
            live[name] = point.locals[name]
        elif name in f_locals and name not in point.cells:
            live[name] = name
    for name in code.co_cellvars:
        if point.cells.get(name) is not None:
            live[name] = point.cells[name]
    return live


# Values that exist only inside capture: a break with one of them live cannot resume.
_CAPTURE_ONLY = (FunctionValue, GeneratorValue, GradModeValue, SuperValue, Cell)
# Values a resume function can take back only on its value stack.
_STACK_ONLY = (IteratorValue, ContextExitValue)


def _stack_entries(emitter: Emitter, values: list[Value]) -> list:
    """(how the resume prologue pushes it, the argument expression) per entry."""
    entries = []
    for v in values:
        if isinstance(v, NullValue):
            entries.append((StackEntry.NULL, None))
        elif isinstance(v, IteratorValue):  # the items the loop has not reached
            left = emitter.expr(TupleValue(tuple(v.items[v.position :])))
            entries.append((StackEntry.ITERATOR, left))
        elif isinstance(v, ContextExitValue):
            entries.append(
                (StackEntry.VALUE, emitter.constant(GradModeExit(v.restore)))
            )
        else:
            entries.append((StackEntry.VALUE, emitter.expr(v)))
    return entries


def _rebuildable(v: object) -> bool:
    return not isinstance(v, _CAPTURE_ONLY)


def _next_offset(code: types.CodeType, offset: int) -> int:
    after = [
        i.offset
        for i in dis.get_instructions(code)
        if i.offset > offset and i.opname != "EXTENDED_ARG"
    ]
    return after[0]


def _emit_call(emitter: Emitter, point: BreakPoint, code) -> list:
    n = point.inst.arg
    stack = point.stack
    operands = stack[len(stack) - n :]
    fn, below = stack[len(stack) - n - 1], stack[len(stack) - n - 2]
    if not isinstance(below, NullValue):
        fn, operands = below, [fn, *operands]
    rest = stack[: len(stack) - n - 2]
    split = len(operands) - len(point.kw_names)
    args = [emitter.expr(a) for a in operands[:split]]
    args += [f"{k}={emitter.expr(v)}" for k, v in zip(point.kw_names, operands[split:])]
    callee = emitter.expr(fn)
    if isinstance(fn, (ObjectValue, BoundFunctionValue, ModuleValue)) and _is_user(fn):
        callee = f"{HOOK_CELL}({callee})"
    call = f"{RESULT} = {callee}({', '.join(args)})"
    exits = [v for v in reversed(rest) if isinstance(v, ContextExitValue)]
    if exits:  # an exception from the call leaves the with-blocks it is inside
        emitter.body += ["try:", f"    {call}", "except BaseException:"]
        emitter.body += [
            f"    {emitter.constant(GradModeExit(v.restore))}(None, None, None)"
            for v in exits
        ]
        emitter.body.append("    raise")
    else:
        emitter.body.append(call)
    after = _stack_entries(emitter, rest)
    return [
        (
            _next_offset(code, point.inst.offset),
            [*after, (StackEntry.VALUE, RESULT)],
            "",
        )
    ]


def _emit_before_with(emitter: Emitter, point: BreakPoint, code) -> list:
    """Enter a context manager capture does not know for real, as CPython's
    BEFORE_WITH does: the resume function starts inside the block holding the
    real ``__exit__``, so its own exception handler calls it."""
    ctx, rest = point.stack[-1], point.stack[:-1]
    kind = emitter.constant(type)
    method = emitter.constant(types.MethodType)
    emitter.body += [
        f"{CONTEXT} = {emitter.expr(ctx)}",
        f"{EXIT} = {method}({kind}({CONTEXT}).__exit__, {CONTEXT})",
        f"{RESULT} = {kind}({CONTEXT}).__enter__({CONTEXT})",
    ]
    after = _stack_entries(emitter, rest)
    pushed = [(StackEntry.VALUE, EXIT), (StackEntry.VALUE, RESULT)]
    return [(_next_offset(code, point.inst.offset), [*after, *pushed], "")]


def _emit_import(emitter: Emitter, point: BreakPoint, code) -> list:
    """Import a module not imported yet as IMPORT_NAME does, then resume with
    the module on the stack (the resume function finds it imported)."""
    level, fromlist, rest = point.stack[-2], point.stack[-1], point.stack[:-2]
    importer = emitter.constant(builtins.__import__)
    args = f"{point.inst.argval!r}, {GLOBALS_CELL}, None"
    args += f", {emitter.expr(fromlist)}, {emitter.expr(level)}"
    emitter.body.append(f"{RESULT} = {importer}({args})")
    after = _stack_entries(emitter, rest)
    return [
        (
            _next_offset(code, point.inst.offset),
            [*after, (StackEntry.VALUE, RESULT)],
            "",
        )
    ]


def _is_user(fn: Value) -> bool:
    """A callable ember should compile on its own, by route_calls' rule: user
    code, not a builtin, torch or the standard library (json.dumps runs as it
    is, not as frames that each break again)."""
    if isinstance(fn, BoundFunctionValue):
        return is_user_callable(fn.func)
    return is_user_callable(fn.value)


def _emit_jump(emitter: Emitter, point: BreakPoint, code) -> list:
    test, pops = CONDITIONAL_JUMPS[point.inst.opname]
    stack = point.stack
    cond = emitter.expr(stack[-1])
    below = _stack_entries(emitter, stack[:-1])
    jumped = below if pops else [*below, (StackEntry.VALUE, cond)]
    emitter.body.append(f"if {test.format(cond)}:")
    return [
        (point.inst.argval, jumped, "    "),
        (_next_offset(code, point.inst.offset), below, ""),
    ]


# How the transformed code runs each instruction a break can happen at (the
# conditional jumps use _emit_jump).
_EMITTERS = {
    "CALL": _emit_call,
    "BEFORE_WITH": _emit_before_with,
    "IMPORT_NAME": _emit_import,
}
