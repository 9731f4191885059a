"""Resume functions: the rest of a function after a graph break, as a code object.

A resume function is the user's own bytecode with a short prologue: it takes the
live locals and then the live value stack as arguments, pushes the stack back (a
NULL as PUSH_NULL), and jumps to the instruction after the break. Everything else
(cells, free variables, exception table, line numbers) is the original's, so
tracebacks and ``dis`` read like the user's code. See docs/capture.md, "Graph breaks".
"""

from __future__ import annotations

import dis
import enum
import inspect
import types

from bytecode import Bytecode, CellVar, Instr, Label, TryBegin

from .names import original_name

STACK_ARG = "___stack{}"


def instruction_ordinal(code: types.CodeType, offset: int) -> int:
    """The index of the instruction at ``offset`` among the abstract instructions
    (the ``bytecode`` library drops EXTENDED_ARG; caches are never listed)."""
    ordinal = 0
    for inst in dis.get_instructions(code):
        if inst.offset == offset:
            return ordinal
        if inst.opname != "EXTENDED_ARG":
            ordinal += 1
    raise ValueError(f"no instruction at offset {offset}")


def _restore_handler_depths(bc: Bytecode, code: types.CodeType) -> None:
    """Give each TryBegin the stack depth of its exception-table entry.

    The library recomputes depths by following control flow from the start, which
    a resume function skips; the prologue rebuilds the same stack, so the
    original depths are the right ones."""
    ordinals: dict[int, int] = {}  # id(label) -> ordinal of the instruction after
    pending: list = []
    count = 0
    for item in bc:
        if isinstance(item, Label):
            pending.append(item)
        elif isinstance(item, Instr):
            for label in pending:
                ordinals[id(label)] = count
            pending, count = [], count + 1
    depths = {
        (
            instruction_ordinal(code, e.start),
            instruction_ordinal(code, e.target),
            e.lasti,
        ): e.depth
        for e in dis.Bytecode(code).exception_entries
    }
    count = 0
    for item in bc:
        if isinstance(item, Instr):
            count += 1
        elif isinstance(item, TryBegin):
            key = (count, ordinals[id(item.target)], item.push_lasti)
            item.stack_depth = depths[key]


def _fresh_names(code: types.CodeType, count: int) -> list[str]:
    """``count`` argument names for stack values, unused by ``code`` (a resume
    function's own stack arguments are locals of the next one)."""
    taken = set(code.co_varnames) | set(code.co_cellvars) | set(code.co_freevars)
    names: list[str] = []
    index = 0
    while len(names) < count:
        name = STACK_ARG.format(index)
        if name not in taken:
            names.append(name)
        index += 1
    return names


def handlers_covering(code: types.CodeType, offset: int) -> list[str]:
    """What the exception handlers covering ``offset`` are: "with" for the cleanup
    of a with-block, "try" for anything else (except, finally)."""
    by_offset = {i.offset: i for i in dis.get_instructions(code)}
    kinds = []
    for entry in dis.Bytecode(code).exception_entries:
        if entry.start <= offset < entry.end:
            handler = by_offset[entry.target]
            following = by_offset.get(handler.offset + 2)
            is_with = (
                handler.opname == "PUSH_EXC_INFO"
                and following is not None
                and following.opname == "WITH_EXCEPT_START"
            )
            kinds.append("with" if is_with else "try")
    return kinds


class StackEntry(enum.Enum):
    """How the resume prologue puts one value stack entry back."""

    NULL = "null"  # PUSH_NULL: the NULL CPython keeps below a callable
    VALUE = "value"  # LOAD_FAST of its argument
    ITERATOR = "iterator"  # iter() of its argument, a tuple of the items left:
    # a for loop resumes over a real iterator that capture can read again


def make_resume_code(
    code: types.CodeType,
    offset: int,
    stack: list[StackEntry],
    live_locals: list[str],
    lineno: int,
) -> types.CodeType:
    """A code object that continues ``code`` at the instruction at ``offset``.

    Its arguments are ``live_locals``, then one fresh ``___stack{i}`` name per
    non-NULL stack entry (bottom first); cell variables among them become
    cells. The locals come first so that the original's first argument stays
    local 0, which a zero-argument ``super()`` reads as its instance.
    """
    bc = Bytecode.from_code(code)
    _restore_handler_depths(bc, code)
    target = instruction_ordinal(code, offset)
    label = Label()
    body: list = []
    seen = 0
    for item in bc:  # the original, unchanged; its own prologue is jumped over
        if isinstance(item, Instr):
            if seen == target:
                body.append(label)
            seen += 1
        body.append(item)

    stack_args = _fresh_names(code, sum(e is not StackEntry.NULL for e in stack))
    prologue: list = [Instr("MAKE_CELL", CellVar(name)) for name in bc.cellvars]
    if code.co_freevars:
        prologue.append(Instr("COPY_FREE_VARS", len(code.co_freevars)))
    prologue.append(Instr("RESUME", 0))
    args = iter(stack_args)
    for entry in stack:
        if entry is StackEntry.NULL:
            prologue.append(Instr("PUSH_NULL"))
            continue
        if entry is StackEntry.ITERATOR:
            prologue += [Instr("PUSH_NULL"), Instr("LOAD_CONST", iter)]
        prologue.append(Instr("LOAD_FAST", next(args)))
        if entry is StackEntry.ITERATOR:
            prologue += [Instr("PRECALL", 1), Instr("CALL", 1)]
    # The arguments now live on the stack only: not locals a later break passes on.
    prologue += [Instr("DELETE_FAST", name) for name in stack_args]
    prologue.append(Instr("JUMP_FORWARD", label))
    for instr in prologue:  # what the prologue reads, it reads at the break's line
        instr.lineno = lineno

    resume = Bytecode(prologue + body)
    for attr in ("filename", "first_lineno", "flags", "cellvars", "freevars"):
        setattr(resume, attr, getattr(bc, attr))
    resume.argnames = [*live_locals, *stack_args]
    resume.argcount = len(resume.argnames)
    resume.posonlyargcount = 0
    resume.kwonlyargcount = 0
    resume.flags &= ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    resume.name = f"__resume_{original_name(code.co_name)}_at_{lineno}"
    resume.qualname = resume.name
    # The library cannot follow the handlers the prologue jumps past: keep their
    # original depths, and the original frame size (the prologue needs at most
    # three slots above the stack it rebuilds, for iter()).
    return resume.to_code(
        stacksize=max(code.co_stacksize, len(stack) + 3),
        compute_exception_stack_depths=False,
    )
