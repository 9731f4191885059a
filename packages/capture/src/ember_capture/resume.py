"""Resume functions: the rest of a function after a graph break, as a code object.

A resume function is the user's own bytecode with a short prologue: it takes the
live value stack and the live locals as arguments, pushes the stack back (a NULL as
PUSH_NULL), and jumps to the instruction after the break. Everything else (cells,
free variables, exception table, line numbers) is the original's, so tracebacks and
``dis`` read like the user's code. See docs/capture.md, "Graph breaks".
"""

from __future__ import annotations

import dis
import inspect
import types

from bytecode import Bytecode, CellVar, Instr, Label

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


def covered_by_exception_table(code: types.CodeType, offset: int) -> bool:
    """True inside a try, with or finally block (a handler covers ``offset``)."""
    return any(
        entry.start <= offset < entry.end
        for entry in dis.Bytecode(code).exception_entries
    )


def make_resume_code(
    code: types.CodeType,
    offset: int,
    stack_is_null: list[bool],
    live_locals: list[str],
    lineno: int,
) -> types.CodeType:
    """A code object that continues ``code`` at the instruction at ``offset``.

    Its arguments are one fresh ``___stack{i}`` name per non-NULL stack entry
    (bottom first), then ``live_locals``; cell variables among them become cells.
    """
    bc = Bytecode.from_code(code)
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

    stack_args = _fresh_names(code, sum(not null for null in stack_is_null))
    prologue: list = [Instr("MAKE_CELL", CellVar(name)) for name in bc.cellvars]
    if code.co_freevars:
        prologue.append(Instr("COPY_FREE_VARS", len(code.co_freevars)))
    prologue.append(Instr("RESUME", 0))
    args = iter(stack_args)
    for null in stack_is_null:
        prologue.append(Instr("PUSH_NULL") if null else Instr("LOAD_FAST", next(args)))
    prologue.append(Instr("JUMP_FORWARD", label))

    resume = Bytecode(prologue + body)
    for attr in ("filename", "first_lineno", "flags", "cellvars", "freevars"):
        setattr(resume, attr, getattr(bc, attr))
    resume.argnames = [*stack_args, *live_locals]
    resume.argcount = len(resume.argnames)
    resume.posonlyargcount = 0
    resume.kwonlyargcount = 0
    resume.flags &= ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    resume.name = f"__resume_{code.co_name}_at_{lineno}".replace("<", "").replace(
        ">", ""
    )
    resume.qualname = resume.name
    return resume.to_code()
