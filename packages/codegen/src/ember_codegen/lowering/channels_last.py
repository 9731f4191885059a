"""Which 4-D tensors of a graph the C++ target keeps in channels-last order.

oneDNN's CPU convolutions run faster on channels-last (NHWC) operands than on
row-major (NCHW) ones, and return channels-last results for them. So a graph's
convolutions take channels-last operands, and the tensors that flow from one
convolution to the next (batch norm, activations, pooling) stay channels-last,
which saves the layout copies between them. Only values the graph keeps to
itself change layout: an output, or a tensor that a view or another op that
depends on its strides reads, keeps the layout eager gives it. docs/codegen.md
("Channels-last convolutions") gives the rule and the measurements.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Set

import torch
import torch.fx

aten = torch.ops.aten

_FLOAT_TYPES = (torch.float32, torch.bfloat16, torch.float16)

# Ops whose result takes the layout of their 4-D input when that input is
# channels-last (pooling windows, besides the pointwise ops).
_FOLLOWERS = frozenset([aten.max_pool2d_with_indices.default, aten.avg_pool2d.default])

# Ops that read their tensor inputs by logical index, whatever their strides
# (beside the pointwise and reduction ops, and the followers above).
_ANY_LAYOUT_READERS = frozenset(
    [aten.convolution.default, aten._native_batch_norm_legit_no_training.default]
)


def _tagged(target: object, tag: torch.Tag) -> bool:
    """Whether ``target`` is a functional aten op with ``tag`` (an in-place
    op's result is its input, whose layout is not its own to choose)."""
    return (
        isinstance(target, torch._ops.OpOverload)
        and tag in target.tags
        and not target._schema.is_mutable
    )


def _follows_input(node: torch.fx.Node) -> bool:
    """Whether ``node`` computes a result as eager lays it out from its inputs'
    layout (a plain pointwise op: a clone or copy with an explicit memory
    format asks for a layout of its own)."""
    if node.target in _FOLLOWERS:
        return True
    return _tagged(node.target, torch.Tag.pointwise) and "memory_format" not in (
        node.kwargs
    )


def _reads_any_layout(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return all(_reads_any_layout(user) for user in node.users)
    return (
        node.target in _ANY_LAYOUT_READERS
        or _tagged(node.target, torch.Tag.reduction)
        or _follows_input(node)
    )


def _row_major_4d(value: object) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and value.dim() == 4
        and value.dtype in _FLOAT_TYPES
        and value.is_contiguous()
        and not value.is_contiguous(memory_format=torch.channels_last)
    )


def _pays(node: torch.fx.Node, metas: Mapping[torch.fx.Node, object]) -> bool:
    """A 2-D convolution oneDNN runs (not transposed; the C++ target's tensors
    are CPU tensors)."""
    x = metas.get(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else None
    transposed = node.args[6] if len(node.args) > 6 else False
    return (
        torch.backends.mkldnn.is_available()
        and isinstance(x, torch.Tensor)
        and x.dim() == 4
        and x.dtype in _FLOAT_TYPES
        and not transposed
    )


def keeps_channels_last(
    node: torch.fx.Node,
    metas: Mapping[torch.fx.Node, object],
    chosen: Set[torch.fx.Node],
) -> bool:
    """Whether codegen lays ``node``'s result out channels-last, given eager's
    meta values of it and the nodes before it (``metas``) and the nodes before
    it that it chose (``chosen``): a convolution that oneDNN runs, or an op
    that follows the layout of a chosen input, whose first result is row-major
    4-D in eager and is read only by ops that read any layout (not by the
    graph's output node, a view, or a library call that may read strides)."""
    if node.op != "call_function":
        return False
    if node.target is aten.convolution.default:
        if not _pays(node, metas):
            return False
    elif not (_follows_input(node) and any(a in chosen for a in node.all_input_nodes)):
        return False
    meta = metas[node]
    first = meta[0] if isinstance(meta, (tuple, list)) and meta else meta
    return _row_major_4d(first) and all(_reads_any_layout(u) for u in node.users)


def channels_last_meta(meta: object) -> object:
    """``meta`` (a tensor or a tuple of them) with its row-major 4-D tensors
    laid out channels-last."""
    if isinstance(meta, (tuple, list)):
        return type(meta)(channels_last_meta(m) for m in meta)
    if isinstance(meta, torch.Tensor) and meta.dim() == 4 and meta.is_contiguous():
        return meta.contiguous(memory_format=torch.channels_last)
    return meta
