"""The public entry: prepare a captured graph for backend compilers.

``aot_compile`` traces the torch-level graph to functional aten ops (applying
decompositions). With no gradient needed it compiles that forward graph; otherwise
it traces the joint forward+backward graph, partitions it, and runs the two
compiled halves as one autograd node (see docs/aotgrad.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import torch
import torch.fx

from .decompositions import default_decompositions
from .partition import Partitioner, min_cut_partition
from .recorder import Decompositions
from .runtime_wrapper import BackwardPlan, CompiledAot, Compiler
from .trace import trace, trace_device

log = logging.getLogger("ember.aotgrad")


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
    partitioner: Partitioner = min_cut_partition,
    dynamic_dims: Mapping[int, Sequence[int]] | None = None,
) -> CompiledAot:
    """A callable taking ``gm``'s flat inputs and returning its flat outputs (a tuple).

    ``fw_compiler(aten_gm, example_inputs)`` receives the functional forward aten
    graph; when an input requires grad under grad mode, ``bw_compiler`` (default:
    ``fw_compiler``) receives the backward graph on the first backward call.
    ``decompositions`` defaults to the built-in table. ``dynamic_dims`` maps an
    input's index to the dims whose size may change between calls (an integer
    input listed with ``()`` is a symbol itself): the graphs
    the compilers receive then compute those sizes from their inputs, and
    ``CompiledAot.dynamic`` lists the relations between sizes the caller must
    check. When an op made the trace specialize, ``CompiledAot.specialized``
    says why and the relations pin each size to its example (docs/dynamic.md).
    Raises AotGradError, naming the op and the user's line, for a graph that
    cannot be traced.
    """
    table = default_decompositions() if decompositions is None else decompositions
    inputs = list(example_inputs)
    if not needs_backward(inputs):
        traced = trace(gm, inputs, table, dynamic_dims=dynamic_dims)
        _mark_input_updates(traced.gm, traced.layout)
        log.info("forward graph (inference):\n%s", traced.gm.code)
        compiled = fw_compiler(traced.gm, inputs)
        return CompiledAot(
            traced.layout,
            compiled,
            gm,
            dynamic=traced.dynamic,
            specialized=traced.specialized,
        )
    traced = trace(gm, inputs, table, joint=True, dynamic_dims=dynamic_dims)
    layout = traced.layout
    part = partitioner(traced.gm, layout.num_forward_outputs)
    plan = BackwardPlan(
        part.backward,
        bw_compiler or fw_compiler,
        len(part.saved),
        layout.tangent_outputs,
        layout.grad_inputs,
        len(inputs),
        trace_device(inputs),
    )
    _mark_input_updates(part.forward, layout)
    log.info("forward graph:\n%s", part.forward.code)
    log.info("backward graph:\n%s", part.backward.code)
    compiled = fw_compiler(part.forward, inputs)
    return CompiledAot(
        layout,
        compiled,
        gm,
        plan,
        part,
        dynamic=traced.dynamic,
        specialized=traced.specialized,
    )


# The forward graph's meta entry naming its in-place updates of inputs.
INPUT_UPDATES = "input_updates"


def _mark_input_updates(forward: torch.fx.GraphModule, layout) -> None:
    """``forward.meta["input_updates"]``: (output index, input index) for each
    output that is the new value of an input written in place. The runtime
    wrapper copies it into that input afterwards, so a compiler may write it
    there directly and return the input itself (docs/aotgrad.md)."""
    first = layout.num_user_outputs
    forward.meta[INPUT_UPDATES] = tuple(
        (first + k, i) for k, i in enumerate(layout.mutated_inputs)
    )
