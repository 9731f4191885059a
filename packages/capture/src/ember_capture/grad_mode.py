"""Grad-mode blocks across a graph break, as a real object.

A resume function that starts inside ``with torch.no_grad():`` holds the block's
``__exit__`` on its value stack. GradModeExit is that object: calling it, on the
normal path or from the with-block's exception handler, restores the grad mode
from before the block. Capture reads it back as a ContextExitValue.
"""

from __future__ import annotations

import torch


class GradModeExit:
    __slots__ = ("restore",)

    def __init__(self, restore: bool) -> None:
        self.restore = restore

    def __call__(self, *exc_info: object) -> bool:
        torch._C._set_grad_enabled(self.restore)
        return False  # an exception leaving the block propagates

    def __repr__(self) -> str:
        return f"GradModeExit(restore={self.restore})"
