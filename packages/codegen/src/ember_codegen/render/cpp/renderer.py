"""The C++ target behind the renderer interface: the kernels' translation unit
(``kernels.emit_source``) and the Python wrapper that calls them
(``wrapper.emit_cpp_wrapper``); the library is built when the graph loads."""

from __future__ import annotations

from ...scheduling.fusion import Kernel
from .. import Rendered, Scheduled
from .build import find_compiler
from .kernels import emit_source
from .wrapper import emit_cpp_wrapper


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
        wrapper, infos = emit_cpp_wrapper(
            lowered,
            scheduled.schedule,
            scheduled.plan,
            scheduled.title,
            scheduled.check_inputs,
        )
        return Rendered(wrapper, source, infos)


RENDERER = CppRenderer()
