"""Functionalization: in-place ops and writes through views become functional ops.

Every tensor the tracer sees is a ``Ref``: a chain of view steps from a ``Storage``
(the memory it lives in) and the graph node holding its current value. A write
through a view is undone step by step with each view's inverse (``select`` becomes
``select_scatter``, ...) into a new value of the whole storage; other views of that
storage are regenerated from it when next used. See docs/aotgrad.md.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.fx

from .errors import AotGradError
from .layout import IDENTITY_VIEWS, ViewStep

aten = torch.ops.aten


@dataclass(eq=False, slots=True)
class Storage:
    """One piece of memory: the node of its current value and a write counter."""

    node: torch.fx.Node
    input_index: int | None = None  # the graph input that owns it, if any
    version: int = 0
    # Written while grad mode was on: an input that requires grad may then not
    # be (eager refuses it for a leaf); under no_grad it may (an optimizer step).
    written_with_grad: bool = False


@dataclass(eq=False, slots=True)
class Ref:
    """What the trace knows about one tensor object."""

    storage: Storage
    chain: tuple[ViewStep, ...]
    node: torch.fx.Node
    version: int


# Views that change nothing about the data layout; they add no graph node.
Emit = Callable[..., torch.fx.Node]  # emit(op, *args, **kwargs) -> node with meta val


def replay(emit: Emit, step: ViewStep, node: torch.fx.Node) -> torch.fx.Node:
    """The node of ``step`` applied to ``node``'s value."""
    if step.is_identity:
        return node
    out = emit(step.op, node, *step.args, **dict(step.kwargs))
    return out if step.index is None else emit(operator.getitem, out, step.index)


# view op -> rule(emit, parent, src, step) giving parent's value with the view's
# elements replaced by src.
INVERSE_VIEWS: dict[torch._ops.OpOverload, Callable[..., torch.fx.Node]] = {}


def register_inverse(*ops: torch._ops.OpOverload):
    def register(rule):
        for op in ops:
            INVERSE_VIEWS[op] = rule
        return rule

    return register


def _shape(node: torch.fx.Node) -> list[int]:
    return list(node.meta["val"].shape)


def reshape_node(emit: Emit, src: torch.fx.Node, shape: list[int]) -> torch.fx.Node:
    """``src`` viewed as ``shape``, through a contiguous copy when strides forbid it."""
    try:
        src.meta["val"].view(shape)
    except RuntimeError:
        src = emit(aten.clone.default, src, memory_format=torch.contiguous_format)
    return emit(aten.view.default, src, shape)


@register_inverse(*IDENTITY_VIEWS)
def _identity_inverse(emit, parent, src, step):
    return src


@register_inverse(
    aten.view.default,
    aten._unsafe_view.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.unsqueeze.default,
)
def _reshape_inverse(emit, parent, src, step):
    return reshape_node(emit, src, _shape(parent))


@register_inverse(aten.permute.default)
def _permute_inverse(emit, parent, src, step):
    (dims,) = step.args
    rank = len(dims)
    inverse = [0] * rank
    for i, d in enumerate(dims):
        inverse[d % rank] = i
    return emit(aten.permute.default, src, inverse)


@register_inverse(aten.transpose.int)
def _transpose_inverse(emit, parent, src, step):
    return emit(aten.transpose.int, src, *step.args)


@register_inverse(aten.t.default)
def _t_inverse(emit, parent, src, step):
    return emit(aten.t.default, src)


@register_inverse(aten.select.int)
def _select_inverse(emit, parent, src, step):
    return emit(aten.select_scatter.default, parent, src, *step.args)


@register_inverse(aten.slice.Tensor)
def _slice_inverse(emit, parent, src, step):
    return emit(aten.slice_scatter.default, parent, src, *step.args)


@register_inverse(aten.diagonal.default)
def _diagonal_inverse(emit, parent, src, step):
    return emit(aten.diagonal_scatter.default, parent, src, *step.args)


@register_inverse(aten.as_strided.default)
def _as_strided_inverse(emit, parent, src, step):
    return emit(aten.as_strided_scatter.default, parent, src, *step.args)


@register_inverse(aten.split.Tensor, aten.split_with_sizes.default)
def _split_inverse(emit, parent, src, step):
    sizes, dim = step.args[0], step.args[1] if len(step.args) > 1 else 0
    dim = dim % len(_shape(parent))
    if isinstance(sizes, int):
        start = sizes * step.index
        end = min(start + sizes, _shape(parent)[dim])
    else:
        start = sum(sizes[: step.index])
        end = start + sizes[step.index]
    return emit(aten.slice_scatter.default, parent, src, dim, start, end)


@register_inverse(aten.unbind.int)
def _unbind_inverse(emit, parent, src, step):
    dim = step.args[0] if step.args else 0
    return emit(aten.select_scatter.default, parent, src, dim, step.index)


@register_inverse(aten.expand.default)
def _expand_inverse(emit, parent, src, step):
    # Eager refuses writes through expanded dims, so a write that gets here only
    # touches size-1 broadcasts of a same-shaped tensor.
    return reshape_node(emit, src, _shape(parent))


def is_view_op(func: torch._ops.OpOverload) -> bool:
    returns = func._schema.returns
    return bool(returns) and any(
        r.alias_info is not None and not r.alias_info.is_write for r in returns
    )


def mutated_args(func: torch._ops.OpOverload) -> list[int]:
    """Positions of the schema arguments this op writes to."""
    return [
        i
        for i, a in enumerate(func._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]


# In-place overloads whose functional twin has another overload name.
_FUNCTIONAL_TWINS = {
    aten.bernoulli_.float: aten.bernoulli.p,
    # pow_.Scalar takes a scalar exponent; pow.Scalar is a scalar base.
    aten.pow_.Scalar: aten.pow.Tensor_Scalar,
    aten.pow_.Tensor: aten.pow.Tensor_Tensor,
}


def functional_twin(func: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """The out-of-place op computing what in-place ``func`` writes into ``self``."""
    if func in _FUNCTIONAL_TWINS:
        return _FUNCTIONAL_TWINS[func]
    name = func._schema.name.split("::")[-1]
    packet = getattr(aten, name.rstrip("_"), None) if name.endswith("_") else None
    twin = getattr(packet, func._overloadname, None) if packet is not None else None
    if twin is not None and not _same_arguments(func, twin):
        twin = None  # an overload of the same name with another signature
    if twin is None or mutated_args(twin):
        raise AotGradError(
            f"in-place op {func} has no functional form aotgrad knows; "
            "the graph runs eagerly"
        )
    return twin


def out_twin(func: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The functional overload of an ``out=`` op that writes only its one
    ``out`` tensor (``maximum.out`` -> ``maximum.default``), else None."""
    arguments = func._schema.arguments
    writes = mutated_args(func)
    if len(writes) != 1 or arguments[writes[0]].name != "out":
        return None
    if str(arguments[writes[0]].type) != "Tensor":
        return None
    wanted = [str(a.type) for a in arguments if a.name != "out"]
    packet = getattr(aten, func._schema.name.split("::")[-1])
    for name in packet.overloads():
        twin = getattr(packet, name)
        if twin is not func and [str(a.type) for a in twin._schema.arguments] == wanted:
            return None if mutated_args(twin) else twin
    return None


def with_defaults(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple:
    """``args`` with the positional arguments that torch's dispatcher left out
    because they equal their default: ``bernoulli_(x, 0.5)`` reaches
    ``__torch_dispatch__`` as ``bernoulli_(x)``, and its functional twin
    ``bernoulli.p`` has no default for ``p`` (a twin's default may also differ)."""
    positional = [a for a in func._schema.arguments if not a.kwarg_only]
    missing = positional[len(args) :]
    if any(a.name in kwargs or not a.has_default_value() for a in missing):
        return tuple(args)
    return (*args, *(a.default_value for a in missing))


def _same_arguments(func, twin) -> bool:
    types = [str(a.type) for a in func._schema.arguments]
    return types == [str(a.type) for a in twin._schema.arguments]


def _batch_norm(
    input, weight, bias, running_mean, running_var, training, momentum, eps
):
    # native_batch_norm's schema hides that it updates the running stats in place.
    if not training:
        return aten._native_batch_norm_legit_no_training.default(
            input, weight, bias, running_mean, running_var, momentum, eps
        )
    if running_mean is None:
        return aten._native_batch_norm_legit.no_stats(
            input, weight, bias, True, momentum, eps
        )
    out, mean, invstd, new_mean, new_var = (
        aten._native_batch_norm_legit_functional.default(
            input, weight, bias, running_mean, running_var, True, momentum, eps
        )
    )
    aten.copy_.default(running_mean, new_mean)
    aten.copy_.default(running_var, new_var)
    return out, mean, invstd


def _normal(self, mean=0.0, std=1.0, *, generator=None):
    # No overload of normal takes self and fills it; normal.float_float is what
    # eager's torch.normal(mean, std, size) runs: empty(size).normal_(...), the
    # same draws from the same generator for a contiguous self.
    if not self.is_contiguous():
        raise AotGradError(
            "normal_ on a non-contiguous tensor draws in another order than "
            "aotgrad's functional form; the graph runs eagerly"
        )
    value = aten.normal.float_float(
        mean,
        std,
        list(self.shape),
        generator=generator,
        dtype=self.dtype,
        device=self.device,
    )
    aten.copy_.default(self, value)
    return self


# Ops whose writes functional_twin cannot express: rule(*args) runs under the
# recorder, so the writes it makes are functionalized like any other.
MUTATION_RULES = {
    aten.native_batch_norm.default: _batch_norm,
    aten._native_batch_norm_legit.default: _batch_norm,
    aten.normal_.default: _normal,
}
