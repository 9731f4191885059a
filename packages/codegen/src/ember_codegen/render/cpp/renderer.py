"""The C++ target behind the renderer interface: the kernels' translation unit
(``kernels.emit_source``) and the Python wrapper that calls them through
ctypes with their buffers' pointers; the library is built when the graph
loads."""

from __future__ import annotations

import functools

from .. import Rendered, Scheduled
from ..loop_wrapper import Launch, render_loops
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

    needs = "a C++ compiler (g++ or clang++ on PATH, or CXX); target 'torch' needs none"

    def available(self) -> bool:
        return find_compiler() is not None

    def render(self, scheduled: Scheduled) -> Rendered:
        emit = functools.partial(emit_source, varying=scheduled.sizes_vary)
        return render_loops(scheduled, emit, LAUNCH)


RENDERER = CppRenderer()
