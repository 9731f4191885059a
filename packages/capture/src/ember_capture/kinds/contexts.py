"""Context managers capture follows: grad-mode blocks (grad_mode.py), autocast
blocks (autocast.py), ``contextlib.contextmanager`` generators (run to their
yield on entry, to their end on exit), profiler ranges (no-ops in a graph), and
user classes whose Python ``__enter__`` and ``__exit__`` are inlined."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch

from .. import autocast, builtin_calls
from ..behaviour import call, describe_value, enter, python_type, rebuild
from ..grad_mode import enter_grad_mode, set_grad_mode
from ..variables import (
    AutocastExitValue,
    AutocastValue,
    BoundFunctionValue,
    ConstValue,
    ContextExitValue,
    GeneratorValue,
    GradModeValue,
    NewObjectValue,
    UserObjectValue,
    Value,
)
from .protocols import dunder

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter
    from ..emit import Emitter


@enter.register(GradModeValue)
def _enter_grad_mode(tx: Interpreter, ctx: GradModeValue, offset: int):
    return enter_grad_mode(tx, ctx), ConstValue(None)


@call.register(ContextExitValue)
def _exit_grad_mode(tx: Interpreter, fn: ContextExitValue, args, kwargs) -> Value:
    set_grad_mode(tx, fn.restore)
    return ConstValue(None)


@enter.register(AutocastValue)
def _enter_autocast(tx: Interpreter, ctx: AutocastValue, offset: int):
    if tx.depth == 0 and offset in tx.output.autocast_to_python:
        raise tx.unsupported(
            "an autocast block with a graph break inside",
            "its with-statement runs as Python; the block is captured on its own",
        )
    return autocast.enter(tx, ctx, offset), ctx  # __enter__ returns the object


@call.register(AutocastExitValue)
def _exit_autocast(tx: Interpreter, fn: AutocastExitValue, args, kwargs) -> Value:
    autocast.exit_block(tx, fn)
    return ConstValue(None)


@rebuild.register(AutocastValue)
def _rebuild_autocast(out: Emitter, v: AutocastValue) -> str:
    if v.source is not None:
        return out.read(v.source)
    return autocast.build_code(v, out.constant)


@enter.register(NewObjectValue, UserObjectValue)
def _enter_object(tx: Interpreter, ctx: Value, offset: int):
    for cls, special in SPECIAL_MANAGERS.items():
        if issubclass(python_type(ctx), cls):
            return special(tx, ctx)
    enter_method, exit_method = dunder(ctx, "__enter__"), dunder(ctx, "__exit__")
    if enter_method is None or exit_method is None:
        raise tx.unsupported(
            f"a with-block over a {describe_value(ctx)}, whose __enter__ or "
            "__exit__ is not Python code"
        )
    return exit_method, call(tx, enter_method, [], {})


def _generator_manager(tx: Interpreter, ctx: Value):
    """``@contextlib.contextmanager``: its generator (made by the manager's
    ``__init__``) runs to its yield now, and to its end at the block's exit."""
    generator = ctx.attrs.items.get("gen") if isinstance(ctx, NewObjectValue) else None
    if not isinstance(generator, GeneratorValue):
        raise tx.unsupported("a with-block over a contextmanager made outside")
    entered = generator.next()
    if entered is None:
        raise tx.unsupported("a contextmanager generator that did not yield")
    return BoundFunctionValue(_finish_generator, generator), entered


def _finish_generator(generator: object, *exc_info: object) -> None:
    """The exit of a contextmanager block (a stand-in that capture handles)."""


@builtin_calls.handles(_finish_generator)
def _finish(tx: Interpreter, generator: GeneratorValue, *exc_info: Value) -> Value:
    if generator.next() is not None:
        raise tx.unsupported("a contextmanager generator that yields twice")
    return ConstValue(False)


def _profiler_range(tx: Interpreter, ctx: Value):
    """``torch.profiler.record_function(name)``: a label for a profiler, which
    a graph has no place for; the block is captured as if it were not there."""
    return BoundFunctionValue(_leave_range, ctx), ctx


def _leave_range(ctx: object, *exc_info: object) -> None:
    """The exit of a profiler range (a stand-in that capture handles)."""


@builtin_calls.handles(_leave_range)
def _leave(tx: Interpreter, ctx: Value, *exc_info: Value) -> Value:
    return ConstValue(None)


# Managers entered their own way, by class (a subclass too).
SPECIAL_MANAGERS = {
    contextlib._GeneratorContextManager: _generator_manager,
    torch.autograd.profiler.record_function: _profiler_range,
}
