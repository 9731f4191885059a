"""``torch.utils.checkpoint.checkpoint(fn, *args)``: the function is inlined and
the graph nodes it adds are tagged ``ember_recompute``, so aotgrad's partitioner
recomputes them in the backward from the region's inputs instead of saving
them, as eager checkpointing does (random ops excepted: their results are
saved, which keeps the masks eager's RNG replay would give)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch.utils.checkpoint

from .. import builtin_calls
from ..behaviour import call, describe_value
from ..variables import ObjectValue, Value

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter

# checkpoint's own keywords that change only how eager saves and replays.
_EAGER_ONLY = frozenset(
    {"use_reentrant", "preserve_rng_state", "determinism_check", "debug", "early_stop"}
)


@builtin_calls.handles(torch.utils.checkpoint.checkpoint)
def _checkpoint(tx: Interpreter, function: Value, *args: Value, **kwargs: Value):
    context_fn = kwargs.pop("context_fn", None)
    if context_fn is not None and not (
        isinstance(context_fn, ObjectValue)
        and context_fn.value is torch.utils.checkpoint.noop_context_fn
    ):
        raise tx.unsupported(
            f"checkpoint with a context_fn ({describe_value(context_fn)}), such as "
            "a selective checkpoint policy"
        )
    passed = {k: v for k, v in kwargs.items() if k not in _EAGER_ONLY}
    tx.output.checkpoint_depth += 1
    try:
        return call(tx, function, list(args), passed)
    finally:
        tx.output.checkpoint_depth -= 1
