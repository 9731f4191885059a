"""The public entry: compile one aten graph for a target."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.fx

from .compiled import CompiledGraph
from .wrapper import emit_wrapper

# target -> what it generates. "auto" picks the best target available for the inputs.
TARGETS = {
    "torch": "a Python wrapper calling each aten op through torch (always correct)",
}


def compile_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    target: str = "auto",
) -> CompiledGraph:
    """Compile an aten-level GraphModule (flat inputs, flat tuple output).

    ``target`` is "auto" or one of TARGETS. The result is callable with inputs like
    ``example_inputs`` and exposes its source and the ops left to torch.
    """
    if target == "auto":
        target = "torch"
    if target not in TARGETS:
        raise ValueError(
            f"unknown codegen target {target!r}; available: auto, {', '.join(TARGETS)}"
        )
    title = f"{type(gm).__name__}, {sum(1 for _ in gm.graph.nodes)} nodes"
    wrapper = emit_wrapper(gm, title)
    constants = {name: getattr(gm, name) for name in wrapper.constant_names}
    return CompiledGraph(wrapper.source, target, wrapper.fallback_ops, constants)
