"""The Triton target behind the renderer interface: the kernels' module
(``kernels.emit_source``) and the loop wrapper, which launches each kernel on
its grid with the buffers' tensors."""

from __future__ import annotations

import importlib.util
import os

import torch

from ...scheduling.fusion import Kernel
from .. import Rendered, Scheduled
from ..loop_wrapper import Launch, emit_loop_wrapper
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

    def available(self) -> bool:
        if importlib.util.find_spec("triton") is None:
            return False
        return interpreted() or torch.cuda.is_available()

    def render(self, scheduled: Scheduled) -> Rendered:
        lowered = scheduled.lowered
        kernels = [s for s in scheduled.schedule.steps if isinstance(s, Kernel)]
        strides = {name: spec.strides for name, spec in lowered.specs.items()}
        source = emit_source(kernels, strides, scheduled.title) if kernels else ""
        wrapper, infos = emit_loop_wrapper(
            lowered,
            scheduled.schedule,
            scheduled.plan,
            scheduled.title,
            LAUNCH,
            scheduled.check_inputs,
            scheduled.device,
        )
        return Rendered(wrapper, source, infos)


RENDERER = TritonRenderer()
