"""What generated wrappers see when they run: torch, its aten ops, and the
helpers a loop target's wrapper calls. Loading a stored graph imports this
module, not the renderers that wrote the wrapper (they cost a warm start).
"""

from __future__ import annotations

import torch


def reinterpret(t: torch.Tensor, dtype: torch.dtype, sizes, strides) -> torch.Tensor:
    """A tensor of another dtype and layout over ``t``'s memory (a reused buffer)."""
    out = torch.empty(0, dtype=dtype, device=t.device)
    return out.set_(
        t.untyped_storage(),
        t.storage_offset() * t.element_size() // out.element_size(),
        sizes,
        strides,
    )


def fix_layout(t: torch.Tensor, sizes, strides) -> torch.Tensor:
    """``t`` with exactly the strides the kernels were compiled for."""
    if t.stride() == tuple(strides):
        return t
    return torch.empty_strided(sizes, strides, dtype=t.dtype, device=t.device).copy_(t)


def own_storage(t: torch.Tensor, sizes, strides) -> torch.Tensor:
    """``t``, or a copy of it, whose storage holds its elements laid out as
    ``strides`` from offset 0, as the fresh tensor the graph traced: what
    ``as_strided`` reads (``t`` may be a strided view of other memory)."""
    if t.stride() == tuple(strides) and t.storage_offset() == 0:
        return t
    return torch.empty_strided(sizes, strides, dtype=t.dtype, device=t.device).copy_(t)


# Objects every generated wrapper may name, bound in its globals (the "torch"
# target's, and a loop target's fallback).
WRAPPER_GLOBALS: dict[str, object] = {"torch": torch, "aten": torch.ops.aten}

# What a loop target's wrapper calls besides torch.
WRAPPER_HELPERS = {
    "empty_strided": torch.empty_strided,
    "as_strided": torch.as_strided,
    "reinterpret": reinterpret,
    "fix_layout": fix_layout,
    "own_storage": own_storage,
}
