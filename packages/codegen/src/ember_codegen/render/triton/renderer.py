"""The Triton target behind the renderer interface: the kernels' module
(``kernels.emit_source``) and the loop wrapper, which launches each kernel on
its grid with the buffers' tensors."""

from __future__ import annotations

import importlib.util
import os

import torch

from .. import Rendered, Scheduled
from ..loop_wrapper import Launch, render_loops
from .kernels import emit_source, grid

LAUNCH = Launch(
    "triton",
    "Triton",
    lambda kernel, args: f"{kernel.name}[({grid(kernel)},)]({', '.join(args)})",
    pointers=False,
    checks_indices=lambda kernel: False,  # such kernels are not rendered yet
)


def interpreted() -> bool:
    """Whether Triton runs kernels on CPU tensors here (its interpreter)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


class TritonRenderer:
    description = (
        "Triton kernels (GPU; CPU tensors under TRITON_INTERPRET=1), "
        "library calls for matmul/conv"
    )

    needs = (
        "Triton (pip install 'ember-codegen[triton]') and a CUDA device, or "
        "TRITON_INTERPRET=1 to run its kernels on CPU tensors"
    )

    def available(self) -> bool:
        if importlib.util.find_spec("triton") is None:
            return False
        return interpreted() or torch.cuda.is_available()

    def render(self, scheduled: Scheduled) -> Rendered:
        return render_loops(scheduled, emit_source, LAUNCH)


RENDERER = TritonRenderer()
