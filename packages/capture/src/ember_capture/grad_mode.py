"""Grad-mode blocks: switched during capture, and across a graph break as a
real object.

Capture switches grad mode at once (so meta tensors follow it) and records the
switch in the graph. A resume function that starts inside ``with
torch.no_grad():`` holds the block's ``__exit__`` on its value stack.
GradModeExit is that object: calling it, on the normal path or from the
with-block's exception handler, restores the grad mode from before the block.
Capture reads it back as a ContextExitValue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .variables import ContextExitValue, GradModeValue

if TYPE_CHECKING:
    from .bytecode_interp import Interpreter


class GradModeExit:
    __slots__ = ("restore",)

    def __init__(self, restore: bool) -> None:
        self.restore = restore

    def __call__(self, *exc_info: object) -> bool:
        torch._C._set_grad_enabled(self.restore)
        return False  # an exception leaving the block propagates

    def __repr__(self) -> str:
        return f"GradModeExit(restore={self.restore})"


def set_grad_mode(tx: Interpreter, enabled: bool) -> None:
    """Switch grad mode now (so meta tensors follow it) and in the graph."""
    torch._C._set_grad_enabled(enabled)
    node = tx.output.graph.call_function(torch._C._set_grad_enabled, (enabled,))
    filename, lineno = tx.output.location()
    node.meta["user_loc"] = f"{filename}:{lineno}"


def enter_grad_mode(tx: Interpreter, ctx: GradModeValue) -> ContextExitValue:
    """Enters ``with torch.no_grad():`` (and friends); the exit restores."""
    if ctx.previous is not None:  # set_grad_enabled(b) already switched
        return ContextExitValue(ctx.previous)
    previous = torch.is_grad_enabled()
    set_grad_mode(tx, ctx.enabled)
    return ContextExitValue(previous)
