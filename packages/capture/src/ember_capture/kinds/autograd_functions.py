"""``torch.autograd.Function`` subclasses: ``Fn.apply(*args)``.

Where no gradient is wanted (grad mode off, or no input that requires grad),
apply is exactly the user's ``forward``, which is inlined with a context object
that keeps what it is given. Where one is, the user's ``backward`` must give the
gradient: capture first runs forward and then backward on the graph's values as
a check (their guards are kept; a graph break, a Python side effect or a
missing backward refuses), drops what that added, and puts one ``Fn.apply``
node in the graph, tagged so that aotgrad traces it for real, forward and
backward, into aten ops."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch.autograd.function import _SingleLevelFunction

from .. import builtin_calls
from ..behaviour import call
from ..source import AttrSource
from ..variables import ConstValue, ObjectValue, TensorValue, TupleValue, Value
from .new_objects import new_object

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter


class ForwardContext:
    """The ``ctx`` capture gives forward and backward: it keeps what forward
    saves and sets, as torch's context does."""

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
    if not (torch.is_grad_enabled() and any(t.meta.requires_grad for t in tensors)):
        return _forward(tx, fn_class, list(args), kwargs)[0]
    if kwargs:
        raise tx.unsupported(f"{cls.__qualname__}.apply with keyword arguments")
    _check_backward(tx, fn_class, list(args))
    return tx.output.call_tensor_op("call_function", applier(cls), tuple(args), {})


@functools.cache
def applier(fn_class: type[torch.autograd.Function]) -> Callable[..., object]:
    """The graph node's target for a Function whose forward and backward
    capture checked: ``fn_class.apply``, as a plain function the graph's code
    can name. aotgrad runs it, so autograd records the user's backward, which
    it then traces like any code of torch ops."""

    def apply(*args: object) -> object:
        return fn_class.apply(*args)

    apply.__name__ = apply.__qualname__ = f"apply_{fn_class.__name__}"
    return apply


def _forward(tx: Interpreter, fn_class: Value, args: list, kwargs: dict):
    """(forward's result, the ctx it was given) with the user's forward inlined."""
    cls = fn_class.value
    source = AttrSource(fn_class.source, "forward") if fn_class.source else None
    forward = ObjectValue(cls.forward, source)
    ctx = new_object(ForwardContext, None)
    needs = tuple(isinstance(a, TensorValue) and a.meta.requires_grad for a in args)
    ctx.attrs.items["needs_input_grad"] = ConstValue(needs)
    if cls.setup_context is _SingleLevelFunction.setup_context:
        return call(tx, forward, [ctx, *args], kwargs), ctx
    result = call(tx, forward, args, kwargs)  # forward takes no ctx
    setup_source = AttrSource(fn_class.source, "setup_context") if source else None
    setup = ObjectValue(cls.setup_context, setup_source)
    call(tx, setup, [ctx, TupleValue(tuple(args)), result], {})
    return result, ctx


def _check_backward(tx: Interpreter, fn_class: Value, args: list) -> None:
    """Run forward, then backward on gradients shaped like forward's outputs,
    as capture would, then take back every node and value that added: what is
    left are the guards on what they read. Refuses what the real apply could
    not be traced as."""
    cls = fn_class.value
    if cls.backward is _SingleLevelFunction.backward:
        raise tx.unsupported(f"{cls.__qualname__} has no backward")
    nodes, effects = len(tx.output.graph.nodes), len(tx.output.side_effects)
    try:
        result, ctx = _forward(tx, fn_class, args, {})
        grads = [
            tx.output.call_tensor_op("call_function", torch.ones_like, (t,), {})
            for t in _tensors(result)
        ]
        source = AttrSource(fn_class.source, "backward") if fn_class.source else None
        call(tx, ObjectValue(cls.backward, source), [ctx, *grads], {})
        if len(tx.output.side_effects) != effects:
            raise tx.unsupported(
                f"{cls.__qualname__}'s forward or backward changes Python state"
            )
    finally:
        tx.output.drop_nodes_after(nodes)
        del tx.output.side_effects[effects:]


def _tensors(result: Value) -> list[TensorValue]:
    if isinstance(result, TensorValue):
        return [result]
    if isinstance(result, TupleValue):
        return [t for t in result.items if isinstance(t, TensorValue)]
    return []
