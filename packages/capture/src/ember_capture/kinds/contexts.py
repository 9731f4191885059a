"""Context managers capture follows: the exits of grad-mode blocks (grad_mode.py)
and autocast blocks (autocast.py), and rebuilding an autocast object."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import autocast
from ..behaviour import call, rebuild
from ..grad_mode import set_grad_mode
from ..variables import (
    AutocastExitValue,
    AutocastValue,
    ConstValue,
    ContextExitValue,
    Value,
)

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter
    from ..emit import Emitter


@call.register(ContextExitValue)
def _exit_grad_mode(tx: Interpreter, fn: ContextExitValue, args, kwargs) -> Value:
    set_grad_mode(tx, fn.restore)
    return ConstValue(None)


@call.register(AutocastExitValue)
def _exit_autocast(tx: Interpreter, fn: AutocastExitValue, args, kwargs) -> Value:
    autocast.exit_block(tx, fn)
    return ConstValue(None)


@rebuild.register(AutocastValue)
def _rebuild_autocast(out: Emitter, v: AutocastValue) -> str:
    if v.source is not None:
        return out.read(v.source)
    return autocast.build_code(v, out.constant)
