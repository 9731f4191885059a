"""The public entry: prepare a captured graph for a backend compiler.

``aot_compile`` traces the torch-level graph to aten ops (applying decompositions)
and hands the aten graph to ``fw_compiler``. Graphs that need a backward pass get a
joint forward+backward graph and partitioning; until that lands they are refused
with AotGradError so the caller can keep torch's own autograd (see docs/aotgrad.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.fx

from .errors import AotGradError
from .trace import Decompositions, trace_to_aten

Compiler = Callable[[torch.fx.GraphModule, list], Callable]


def needs_backward(example_inputs: Sequence[object]) -> bool:
    """Whether running on these inputs must build an autograd graph."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs
    )


def aot_compile(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    decompositions: Decompositions | None = None,
) -> Callable:
    """A callable taking ``gm``'s flat inputs and returning its flat outputs.

    ``fw_compiler(aten_gm, example_inputs)`` receives the aten graph (not yet
    functionalized: in-place ops on inputs stay in place). With no input requiring
    grad (or grad mode off) no backward graph is made.
    Raises AotGradError for graphs that need a backward graph (not built yet) or
    that cannot be traced.
    """
    if needs_backward(example_inputs):
        raise AotGradError(
            "graphs with inputs that require grad need the joint forward+backward "
            "graph, which aotgrad does not build yet"
        )
    aten_gm = trace_to_aten(gm, example_inputs, decompositions)
    return fw_compiler(aten_gm, list(example_inputs))
