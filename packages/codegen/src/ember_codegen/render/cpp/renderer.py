"""The C++ target behind the renderer interface: the kernels' translation unit
(``kernels.emit_source``) and the Python wrapper that calls them through
ctypes with their buffers' pointers; the library is built when the graph
loads."""

from __future__ import annotations

from ...scheduling.fusion import Kernel
from .. import Rendered, Scheduled
from ..loop_wrapper import Launch, emit_loop_wrapper
from .build import find_compiler
from .kernels import checks_indices, emit_source

# A kernel is a C function taking its buffers' data pointers.
LAUNCH = Launch(
    "cpp",
    "C++",
    lambda kernel, args: f"{kernel.name}({', '.join(args)})",
    pointers=True,
    checks_indices=checks_indices,
)


class CppRenderer:
    description = (
        "fused C++ loop kernels (OpenMP + SIMD), library calls for matmul/conv"
    )

    def available(self) -> bool:
        return find_compiler() is not None

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


RENDERER = CppRenderer()
