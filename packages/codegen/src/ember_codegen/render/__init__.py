"""The renderers: one per target, behind one small interface. A loop target
(``cpp/`` today) gets the scheduled graph and returns the sources of a
CompiledGraph; ``torch.py`` writes a wrapper calling each aten op through torch,
which every graph keeps as its fallback.

This module holds the interface and the data at its seam, and imports no
renderer: a graph loaded from the cache needs none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import CodegenError

if TYPE_CHECKING:
    from ..ir.nodes import LoweredGraph
    from ..scheduling.fusion import Schedule
    from ..scheduling.memory import MemoryPlan


class Unsupported(CodegenError):
    """A renderer has no form yet for part of a graph: the graph runs through
    torch (the "torch" target) instead, and the reason is logged."""


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """One entry of ``CompiledGraph.kernels``: a generated loop, an extern
    library call, or a fallback op; ``ops`` are the aten ops it runs."""

    kind: str  # "loop" | "extern" | "fallback"
    name: str
    ops: tuple[str, ...]
    arity: int = 0  # pointer arguments of a loop kernel
    checks_indices: bool = False  # returns 1 when an index tensor is out of range
    bytes: int = 0  # the buffers it reads and writes, once each (for profiles)


@dataclass(frozen=True, slots=True)
class Scheduled:
    """What a loop renderer is given: the lowered graph, its steps in order
    (kernels, library calls, views) and the memory plan they follow."""

    title: str  # names the graph in comments of the generated code
    lowered: LoweredGraph
    schedule: Schedule
    plan: MemoryPlan
    check_inputs: bool  # whether the wrapper checks each call's inputs
    device: str = "cpu"  # where the inputs are, and the buffers are made
    # compiled once per set of sizes (specialize.PerSizeGraph): a renderer
    # may shape its loops alike for all sizes
    sizes_vary: bool = False


@dataclass(frozen=True, slots=True)
class Rendered:
    """What a loop renderer returns: the Python wrapper defining ``call``, the
    kernels' translation unit, and one KernelInfo per step the wrapper runs."""

    wrapper_source: str
    kernel_source: str
    kernels: tuple[KernelInfo, ...]


class Renderer(Protocol):
    """A loop target."""

    description: str
    needs: str  # what ``available`` wants and the machine lacks, said to a user

    def available(self) -> bool:
        """Whether this machine can build and run what it renders."""

    def render(self, scheduled: Scheduled) -> Rendered:
        """The sources for ``scheduled``; raises CodegenError if it cannot."""


# Loop target -> the module whose RENDERER renders it, imported on first use.
LOOP_TARGETS = {
    "cpp": "ember_codegen.render.cpp.renderer",
    "triton": "ember_codegen.render.triton.renderer",
}
# Loop target -> the module whose ``load_kernels(compiled)`` returns the
# kernels a CompiledGraph's wrapper calls, by name, and the file they were
# loaded from (None: none). Apart from the renderers: a graph loaded from the
# cache imports only this.
KERNEL_LOADERS = {
    "cpp": "ember_codegen.render.cpp.load",
    "triton": "ember_codegen.render.triton.load",
}


# Per loop target, the line its renderer puts before each kernel of a graph's
# source: the C++ build splits a unit there, and ``kernel_source`` finds one.
KERNEL_BREAKS = {"cpp": "// " + "-" * 77, "triton": "# " + "-" * 77}


def renderer(target: str) -> Renderer:
    """The renderer of a loop target (one of LOOP_TARGETS)."""
    return importlib.import_module(LOOP_TARGETS[target]).RENDERER


def load_kernels(target: str) -> Callable[..., tuple[dict[str, Callable], Path | None]]:
    """The kernel loader of a loop target (one of KERNEL_LOADERS)."""
    return importlib.import_module(KERNEL_LOADERS[target]).load_kernels
