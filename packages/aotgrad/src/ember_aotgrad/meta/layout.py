"""What the rules share: which inputs they take (plain meta tensors, often
row-major), broadcasting, the strides torch gives an elementwise result, and the
probe that asks torch's CPU kernel for a result's dtype."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext

import torch
from torch.utils import _pytree as pytree

from .registry import Decline


def plain_meta(t: torch.Tensor) -> bool:
    return (
        type(t) is torch.Tensor
        and t.device.type == "meta"
        and t.layout == torch.strided
    )


def row_major(t: torch.Tensor) -> bool:
    """A plain meta tensor whose strides are exactly torch's row-major ones
    (also for its size-1 dims, whose strides torch's layout rules read)."""
    return plain_meta(t) and t.stride() == row_major_strides(t.shape)


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def tensors_in(tree: object) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def operands(tree: object, kind: Callable[[torch.Tensor], bool]) -> list[torch.Tensor]:
    """The meta tensors in ``tree``, at least one, each of ``kind``; other
    tensors may only be 0-dim CPU ones (Python numbers torch wrapped). Declines
    otherwise, and for a memory format other than row-major or preserved."""
    leaves = pytree.tree_leaves(tree)
    if any(
        isinstance(x, torch.memory_format)
        and x not in (torch.preserve_format, torch.contiguous_format)
        for x in leaves
    ):
        raise Decline
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    meta = [t for t in tensors if t.device.type == "meta"]
    if not meta or not all(kind(t) for t in meta):
        raise Decline
    if len(meta) < len(tensors) and any(
        t.dim() != 0 or t.device.type != "cpu"
        for t in tensors
        if t.device.type != "meta"
    ):
        raise Decline
    return meta


def require_row_major(tree: object) -> list[torch.Tensor]:
    return operands(tree, row_major)


def broadcast(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The broadcast of ``shapes``; Declines when they do not broadcast (torch's
    kernel then raises its own error)."""
    out: list[int] = []
    for sizes in zip(
        *(reversed((1,) * (max(map(len, shapes)) - len(s)) + tuple(s)) for s in shapes)
    ):
        wide = {s for s in sizes if s != 1}
        if len(wide) > 1:
            raise Decline
        out.append(wide.pop() if wide else 1)
    return tuple(reversed(out))


def probe(
    func: torch._ops.OpOverload,
    args: tuple,
    kwargs: dict,
    shape=None,
    fresh: bool = True,
):
    """``func`` run by its CPU kernel on stand-ins for the meta tensors (ones of
    ``shape(t)``, by default one element of the same rank class: 0-dim stays
    0-dim, as type promotion tells them apart; CPU tensors as they are);
    Declines when it raises, and, when ``fresh``, when its result shares memory
    with an input (``positive`` of a real tensor returns the tensor itself: an
    alias a new meta tensor would not be)."""
    made: list[torch.Tensor] = []

    def stand_in(t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "meta":  # a wrapped number: its kind counts
            return t
        size = shape(t) if shape is not None else (() if t.dim() == 0 else (1,))
        made.append(torch.ones(size, dtype=t.dtype, device="cpu"))
        return made[-1]

    def on_cpu(d: torch.device) -> torch.device:
        return torch.device("cpu")

    args, kwargs = pytree.tree_map_only(torch.Tensor, stand_in, (args, kwargs))
    args, kwargs = pytree.tree_map_only(torch.device, on_cpu, (args, kwargs))
    # The rule stands for the meta kernel, which runs below autocast: the
    # inputs are already in the dtypes autocast gave them.
    casts = torch.is_autocast_enabled("cpu")
    try:
        with torch.autocast("cpu", enabled=False) if casts else nullcontext():
            result = func(*args, **kwargs)
    except Exception as e:
        raise Decline from e
    if fresh:
        inputs = {t.untyped_storage().data_ptr() for t in made} - {0}
        for out in tensors_in(result):
            if out.untyped_storage().data_ptr() in inputs:
                raise Decline
    return result


def empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=dtype, device="meta")


def dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill its memory without gaps or overlaps
    (dims of size 0 or 1 have no say)."""
    step = 1
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1):
        if stride != step:
            return False
        step *= size
    return True


def elementwise_strides(shape: Sequence[int], tensors: Sequence[torch.Tensor]):
    """The strides of an elementwise op's result over ``tensors`` (every
    operand, wrapped numbers too) broadcast to ``shape``, as torch's
    TensorIterator lays it out when its fast path (operands all of the result's
    shape and layout) does not decide otherwise, which callers rule out: dense,
    its dims ordered as the operands' strides order them, operands compared in
    turn, a broadcast dim telling nothing, equal strides putting the smaller
    dim inside."""
    ndim = len(shape)
    spread = [broadcast_strides(t, shape) for t in tensors]

    def outer(a: int, b: int) -> int:
        """1 when dim a must be outside dim b, -1 when inside, 0 when unknown."""
        for strides in spread:
            sa, sb = strides[a], strides[b]
            if sa == 0 or sb == 0:
                continue
            if sa != sb:
                return -1 if sa < sb else 1
            if shape[a] > shape[b]:
                return 1
        return 0

    perm = list(reversed(range(ndim)))  # innermost first; insertion sort
    for i in range(1, ndim):
        moving = i
        for j in reversed(range(i)):
            order = outer(perm[j], perm[moving])
            if order > 0:
                perm[j], perm[moving] = perm[moving], perm[j]
                moving = j
            elif order < 0:
                break
    strides, step = [0] * ndim, 1
    for d in perm:
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


def broadcast_strides(t: torch.Tensor, shape: Sequence[int]) -> tuple[int, ...]:
    lead = len(shape) - t.dim()
    own = [
        0 if size == 1 and shape[lead + d] != 1 else stride
        for d, (size, stride) in enumerate(zip(t.shape, t.stride()))
    ]
    return (0,) * lead + tuple(own)


def channels_last_like(t: torch.Tensor) -> bool:
    """Whether torch suggests channels-last for ``t`` (a 4-D tensor whose
    strides order C, W, H, N from the inside; ambiguous cases are row-major)."""
    if t.dim() != 4 or t.stride()[1] == 0:
        return False
    least = 0
    for d in (1, 3, 2, 0):
        size, stride = t.shape[d], t.stride()[d]
        if size == 0 or stride < least or (d == 0 and least == t.stride()[1]):
            return False
        least = stride * size if size > 1 else stride
    return True


def channels_last_strides(shape: Sequence[int]) -> tuple[int, ...]:
    c, h, w = (max(size, 1) for size in shape[1:])
    return (c * w * h, 1, c * w, c)
