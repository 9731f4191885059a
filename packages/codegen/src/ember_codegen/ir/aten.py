"""What codegen's stages need to know of aten ops beyond the lowering rules:
which ops return views and which read a tensor's storage rather than its
values. The scheduler, the memory plan and the renderers all read these.
"""

from __future__ import annotations

import torch

# Ops that read their argument's storage, not only its values: the same
# storage through any view of it. They get the tensor that owns the storage
# (``storage_root``), and the wrapper hands it over in the traced layout.
STORAGE_READERS = frozenset(
    [torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_copy.default]
)


def returns_view(target: object) -> bool:
    """Whether aten's schema says ``target`` returns a view of an argument."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return any(
        r.alias_info is not None and not r.alias_info.is_write
        for r in target._schema.returns
    )
