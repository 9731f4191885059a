"""``torch.autograd.Function`` subclasses: ``Fn.apply(*args)``. Where no
gradient is wanted (grad mode off, or no input that requires grad), apply is
exactly the user's ``forward``, which is inlined with a context object that
keeps what it is given; where one is, the user's ``backward`` would have to
replace autograd's, which the graph cannot hold yet: a graph break."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.autograd.function import _SingleLevelFunction

from .. import builtin_calls
from ..behaviour import call
from ..source import AttrSource
from ..variables import ConstValue, ObjectValue, TensorValue, Value
from .new_objects import new_object

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter


class ForwardContext:
    """The ``ctx`` a forward inlined without autograd receives: it keeps what
    forward saves and sets, as torch's context does, for no backward."""

    needs_input_grad: tuple[bool, ...] = ()

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def save_for_forward(self, *tensors):
        self.saved_for_forward = tensors

    def mark_dirty(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        pass


@builtin_calls.handles(torch.autograd.Function.apply.__func__)
def _apply(tx: Interpreter, fn_class: Value, *args: Value, **kwargs: Value) -> Value:
    cls = fn_class.value
    tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, TensorValue)]
    if torch.is_grad_enabled() and any(t.meta.requires_grad for t in tensors):
        raise tx.unsupported(
            f"{cls.__qualname__}.apply on tensors that require grad (its backward "
            "would replace autograd's, which ember does not capture yet)",
            "call it under torch.no_grad(), or outside the compiled function",
        )
    source = AttrSource(fn_class.source, "forward") if fn_class.source else None
    forward = ObjectValue(cls.forward, source)
    if cls.setup_context is not _SingleLevelFunction.setup_context:
        return call(tx, forward, list(args), kwargs)  # forward takes no ctx
    ctx = new_object(ForwardContext, None)
    ctx.attrs.items["needs_input_grad"] = ConstValue(tuple(False for _ in args))
    return call(tx, forward, [ctx, *args], kwargs)
