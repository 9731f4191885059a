"""Pointwise ops: one rule for the whole family (every op torch tags pointwise,
of the plain kind), and the copy's rule."""

from __future__ import annotations

import torch

from .layout import (
    broadcast,
    broadcast_strides,
    dense,
    elementwise_strides,
    operands,
    plain_meta,
    probe,
    row_major,
    row_major_strides,
    tensors_in,
)
from .registry import FAMILIES, Decline, Rule, meta_rule

aten = torch.ops.aten


def _pointwise_family(func: torch._ops.OpOverload) -> Rule | None:
    """The pointwise rule for a pointwise op of the plain kind: one tensor
    returned, no lists, functional or in place on self, no random numbers."""
    tags = func.tags
    if torch.Tag.pointwise not in tags or torch.Tag.nondeterministic_seeded in tags:
        return None
    schema = func._schema
    returns = schema.returns
    if len(returns) != 1 or str(returns[0].type) != "Tensor":
        return None
    for arg in schema.arguments:
        if isinstance(arg.type, torch.ListType) or "Generator" in str(arg.type):
            return None
    writes = [a for a in schema.arguments if a.alias_info and a.alias_info.is_write]
    if not writes:
        return _pointwise
    if writes == [schema.arguments[0]] and not schema.arguments[0].kwarg_only:
        return _pointwise_in_place
    return None


FAMILIES.append(_pointwise_family)


# Pointwise ops whose CPU kernels do not lay their result out as TensorIterator
# does over their inputs as given (found by reviews and tests/test_meta_rules.py's
# layout sweeps): they take the row-major path only. where copies a condition
# that is not bool first; ldexp is composite (it reaches no dispatch mode).
OWN_LAYOUTS = frozenset(
    {
        aten.mvlgamma.default,
        aten.angle.default,
        aten.where.self,
        aten.ldexp.Tensor,
    }
)


# Binary ops whose kernels hand TensorIterator their operands in the schema's
# order (self, other): inputs that order dims differently are laid out as the
# first one orders them, as the rule's comparison does.
SCHEMA_ORDER = frozenset(
    {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor}
)


def _pointwise(func, *args, **kwargs) -> torch.Tensor:
    metas = operands((args, kwargs), plain_meta)
    tensors = tensors_in((args, kwargs))
    shape = broadcast(*(t.shape for t in tensors))
    dtype = probe(func, args, kwargs).dtype
    if all(row_major(t) for t in metas):
        strides = row_major_strides(shape)
    elif func in OWN_LAYOUTS:
        raise Decline
    else:
        strides = _laid_out(shape, metas, tensors, dtype, func in SCHEMA_ORDER)
    return torch.empty_strided(shape, strides, dtype=dtype, device="meta")


def _laid_out(shape, metas, tensors, dtype, in_order: bool) -> tuple[int, ...]:
    """The result's strides when some input is not row-major, in the cases
    where TensorIterator's choice does not hang on details this rule does not
    model; Declines otherwise:
    - a size-0 or size-1 dim (their strides follow its fast path, which a
      Python number operand turns off, and ties);
    - an input of a dtype other than the result's (it copies an input of
      another dtype than the one it computes in first, and a broadcast or
      sliced input's copy has new strides: int / int computes in float);
    - inputs that order two dims differently (then the order in which its
      kernel lists them decides, which is the schema's only for ``in_order``
      ops)."""
    if any(size < 2 for size in shape):
        raise Decline
    if any(t.dtype != dtype for t in metas):
        raise Decline
    strides = elementwise_strides(shape, tensors)
    if in_order:
        return strides
    for t in metas:
        own = broadcast_strides(t, shape)
        for a in range(len(shape)):
            for b in range(a + 1, len(shape)):
                if own[a] == 0 or own[b] == 0:
                    continue
                if own[a] == own[b] or (own[a] < own[b]) != (strides[a] < strides[b]):
                    raise Decline
    return strides


def _pointwise_in_place(func, target, *args, **kwargs) -> torch.Tensor:
    tensors = operands((target, args, kwargs), plain_meta)
    if target.device.type != "meta":
        raise Decline
    if any(st == 0 and n > 1 for n, st in zip(target.shape, target.stride())):
        raise Decline  # a broadcast target: eager refuses to write it
    if broadcast(*(t.shape for t in tensors)) != tuple(target.shape):
        raise Decline
    # raises where the result cannot be cast to the target's dtype
    probe(func, (target, *args), kwargs, fresh=False)
    return target


@meta_rule(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(func, x, mask, value) -> torch.Tensor:
    """Eager fills a row-major copy of ``x`` broadcast to the mask's shape."""
    operands((x, mask, value), plain_meta)
    if mask.dtype != torch.bool:
        raise Decline
    shape = broadcast(x.shape, mask.shape)
    dtype = probe(func, (x, mask, value), {}).dtype
    return torch.empty(shape, dtype=dtype, device="meta")


@meta_rule(aten.clone.default)
def _clone(func, x, memory_format=None) -> torch.Tensor:
    """A copy keeps the strides of a dense input (odd size-1 strides too)."""
    (x,) = operands((x, memory_format), plain_meta)
    return torch.empty_strided(
        x.shape, _preserved(x, memory_format), dtype=x.dtype, device="meta"
    )


@meta_rule(
    aten.empty_like.default,
    aten.zeros_like.default,
    aten.ones_like.default,
    aten.full_like.default,
)
def _like(func, x, *args, memory_format=None, **kwargs) -> torch.Tensor:
    """A new tensor like ``x``: its strides as a copy's, its dtype as given."""
    (x,) = operands((x, memory_format), plain_meta)
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "meta":
        raise Decline
    if kwargs.get("layout") not in (None, torch.strided) or kwargs.get("pin_memory"):
        raise Decline
    dtype = probe(func, (x, *args), kwargs).dtype
    strides = _preserved(x, memory_format)
    return torch.empty_strided(x.shape, strides, dtype=dtype, device="meta")


def _preserved(x: torch.Tensor, memory_format) -> tuple[int, ...]:
    """The strides torch gives a copy of ``x`` that preserves its format."""
    if x.numel() == 0:
        raise Decline
    if memory_format is torch.contiguous_format:
        return row_major_strides(x.shape)
    if dense(x):
        return tuple(x.stride())
    return elementwise_strides(x.shape, [x])
