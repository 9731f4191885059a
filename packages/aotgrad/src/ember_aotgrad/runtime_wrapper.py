"""Run compiled aten graphs as the user's graph: one autograd node, input
mutations written back, and outputs that alias inputs returned as their views.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.fx

from . import autocast
from .errors import AotGradError
from .layout import (
    ConstantOutput,
    Dynamic,
    GraphLayout,
    GraphOutput,
    InputAlias,
    OutputSpec,
)

if TYPE_CHECKING:
    from .partition import Partition

Compiler = Callable[[torch.fx.GraphModule, list], Callable]


@dataclass
class BackwardPlan:
    """How the autograd node runs the backward graph.

    The backward is compiled on its first call, with the real saved tensors and
    tangents as example inputs, unless ``compile_now`` compiled it earlier or it
    was loaded from bytes (then ``graph`` and ``compiler`` are None).
    """

    graph: torch.fx.GraphModule | None
    compiler: Compiler | None
    num_saved: int
    tangent_outputs: tuple[int, ...]  # forward outputs that receive a tangent
    grad_inputs: tuple[int, ...]  # inputs that receive a gradient
    num_inputs: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    compiled: Callable | None = field(default=None, repr=False)

    def run(self, args: list) -> Sequence:
        if self.compiled is None:
            self.compiled = self.compiler(self.graph, args)
        return self.compiled(*args)

    def compile_now(self) -> Callable:
        """The compiled backward, compiling it now if it was not yet.

        The example inputs are zero-filled tensors with the sizes, strides and
        dtypes the trace recorded for the saved values and tangents, on ``device``:
        the same layouts the compiled forward produces at run time.
        """
        if self.compiled is None:
            inputs = [
                _zeros_like_traced(node.meta["val"], self.device)
                for node in self.graph.graph.find_nodes(op="placeholder")
            ]
            self.compiled = self.compiler(self.graph, inputs)
        return self.compiled


def _zeros_like_traced(value: object, device: torch.device) -> object:
    """A zero tensor like a traced value, at its example sizes (a traced size
    is that size's example value)."""
    from .symbolic import hint_of  # sympy: only stored graphs pay for it

    if not isinstance(value, torch.Tensor):
        return hint_of(value)
    if value.device.type != "meta":
        device = value.device
    t = torch.empty_strided(
        [hint_of(s) for s in value.shape],
        [hint_of(s) for s in value.stride()],
        dtype=value.dtype,
        device=device,
    )
    return t.zero_()


class AotFunction(torch.autograd.Function):
    """Runs the compiled forward; its backward runs the compiled backward graph."""

    @staticmethod
    def forward(ctx, runner: CompiledAot, *inputs):
        outs = runner.forward(*inputs)
        plan = runner.backward_plan
        num_fw = runner.layout.num_forward_outputs
        ctx.plan = plan
        saved = outs[num_fw:]
        # Sizes saved for a graph with symbolic sizes are ints, kept beside.
        ctx.save_for_backward(*(s for s in saved if isinstance(s, torch.Tensor)))
        ctx.sizes = [None if isinstance(s, torch.Tensor) else s for s in saved]
        fw_outs = tuple(outs[:num_fw])
        differentiable = set(plan.tangent_outputs)
        ctx.mark_non_differentiable(
            *(
                o
                for k, o in enumerate(fw_outs)
                if k not in differentiable and isinstance(o, torch.Tensor)
            )
        )
        return fw_outs

    @staticmethod
    def backward(ctx, *grad_outputs):
        if torch.is_grad_enabled():
            raise AotGradError(
                "double backward (create_graph=True) through a graph compiled by "
                "ember_aotgrad is not supported; run that function without ember"
            )
        plan: BackwardPlan = ctx.plan
        tangents = [grad_outputs[k].contiguous() for k in plan.tangent_outputs]
        tensors = iter(ctx.saved_tensors)
        saved = [next(tensors) if s is None else s for s in ctx.sizes]
        with autocast.off_if_on():  # the backward's dtypes were traced too
            grads = plan.run([*saved, *tangents])
        per_input: list[torch.Tensor | None] = [None] * plan.num_inputs
        for i, g in zip(plan.grad_inputs, grads):
            per_input[i] = g
        return (None, *per_input)


@dataclass
class CompiledAot:
    """The callable aot_compile returns: flat inputs in, flat tuple of outputs out.

    ``forward`` is the compiled forward graph (returning the forward outputs and,
    with a backward, the saved values); ``layout`` maps its outputs to the user's;
    ``eager`` is the torch-level graph, run when a call needs what the compiled
    graphs cannot give (see ``__call__``). ``partition`` is None when the object
    was loaded from bytes (``load_compiled_aot``).
    """

    layout: GraphLayout
    forward: Callable
    eager: torch.fx.GraphModule
    backward_plan: BackwardPlan | None = None
    partition: Partition | None = None  # for inspection: what the forward saves
    # With symbolic sizes: the symbols' inputs and dims, and the relations
    # between sizes that the caller must check before a call (docs/dynamic.md).
    dynamic: Dynamic | None = None
    specialized: str | None = None  # why sizes asked to be symbolic were not
    # False when the caller's own guards check every tensor input's
    # requires_grad and the relations in ``dynamic`` (ember's do): the
    # per-call re-check is then skipped.
    check_inputs: bool = True
    # The inputs' data pointers at the last call found to share no memory.
    _unshared_at: tuple | None = field(default=None, repr=False, compare=False)

    def __call__(self, *inputs):
        # The traced graphs hold autocast's casts as ops; the caller's autocast
        # must not cast their ops again (the eager graph has its own regions).
        if autocast.any_enabled():
            with torch._C._DisableAutocast():
                return self._run(inputs)
        return self._run(inputs)

    def _run(self, inputs: tuple) -> tuple:
        if self._must_run_eagerly(inputs):
            out = self.eager(*inputs)
            return tuple(out) if isinstance(out, (tuple, list)) else (out,)
        plan = self.backward_plan
        if plan is not None and plan.tangent_outputs and torch.is_grad_enabled():
            outs = AotFunction.apply(self, *inputs)
        elif torch.is_grad_enabled():
            # No output to differentiate (an optimizer step, a training step
            # with its backward inside): no autograd node, and no history from
            # the library calls on inputs that require grad (a gradient made
            # by a matmul with a weight would otherwise require grad itself).
            with torch.no_grad():
                outs = self.forward(*inputs)
        else:
            outs = self.forward(*inputs)
        num_user = self.layout.num_user_outputs
        if self.layout.mutated_inputs:
            with torch.no_grad():
                for k, i in enumerate(self.layout.mutated_inputs):
                    if outs[num_user + k] is not inputs[i]:  # else written there
                        inputs[i].copy_(outs[num_user + k])
        return tuple(
            self._user_output(spec, outs, inputs) for spec in self.layout.outputs
        )

    def _must_run_eagerly(self, inputs: tuple) -> bool:
        # The graphs give gradients only to the inputs that required grad when they
        # were traced, a graph that writes to an input assumed that no other
        # input shares its memory, and one with symbolic sizes assumed relations
        # between them. A caller whose guards check all of that (ember's, which
        # hold the relations too) sets check_inputs=False: none of it is redone.
        if (
            self.check_inputs
            and self.dynamic is not None
            and not self.dynamic.holds(inputs)
        ):
            return True
        if self.check_inputs and torch.is_grad_enabled():
            plan = self.backward_plan
            has_grad = () if plan is None else plan.grad_inputs
            for i, t in enumerate(inputs):
                if (
                    isinstance(t, torch.Tensor)
                    and t.requires_grad
                    and i not in has_grad
                ):
                    return True
        if self.layout.mutated_inputs:
            return self._shares_memory(inputs)
        return False

    def _shares_memory(self, inputs: tuple) -> bool:
        # Reading every storage costs about a third of an optimizer step's
        # call. The graphs are specialized to sizes and strides, so inputs at
        # the same addresses as at a call that shared nothing occupy the same
        # disjoint memory as then: comparing data pointers is enough.
        try:
            at = tuple([t.data_ptr() for t in inputs])
        except (AttributeError, RuntimeError):  # a non-tensor, or no storage
            at = None
        if at is not None and at == self._unshared_at:
            return False
        shared = _storages_shared(inputs, self.layout.mutated_inputs)
        if not shared:
            self._unshared_at = at
        return shared

    @staticmethod
    def _user_output(spec: OutputSpec, outs: Sequence, inputs: tuple) -> object:
        if isinstance(spec, GraphOutput):
            return outs[spec.index]
        if isinstance(spec, InputAlias):
            value = inputs[spec.input_index]
            for step in spec.chain:
                value = step.apply(value)
            return value
        assert isinstance(spec, ConstantOutput)
        return spec.value


def _storages_shared(inputs: tuple, mutated: tuple[int, ...]) -> bool:
    written = {inputs[i].untyped_storage().data_ptr() for i in mutated}
    if len(written) < len(mutated):
        return True
    held = 0  # tensors whose memory a written input also holds
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in written:
            held += 1
    return held > len(mutated)
