"""``loss.backward()`` inside the compiled function: the gradients of the
graph's leaf inputs become one ``torch.autograd.grad`` node, which aotgrad runs
while it traces (so the forward, the backward and the optimizer step that reads
the gradients are one graph and fuse), and they are accumulated into ``.grad``
as eager's AccumulateGrad does: set where it was None, added in place where not.

What would change eager's meaning breaks the graph with a reason instead:
``create_graph``, ``retain_graph`` (a later backward outside could not reach the
graph's autograd history), ``inputs=``, a gradient hook on a leaf, and a leaf
input that requires grad but is not a leaf of autograd (its gradient flows on
into history outside the compiled function).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..behaviour import constant, is_none
from ..guards import Guard, GuardKind
from ..variables import ConstValue, TensorValue, Value
from .tensors import TENSOR_METHOD_HANDLERS, read_grad

if TYPE_CHECKING:
    from ..bytecode_interp import Interpreter

_PARAMETERS = ("gradient", "retain_graph", "create_graph", "inputs")


def _backward(tx: Interpreter, loss: TensorValue, args, kwargs) -> Value:
    given = dict(zip(_PARAMETERS, args)) | kwargs
    for name in ("retain_graph", "create_graph"):
        if name in given and constant(tx, given[name]):
            raise tx.unsupported(
                f"loss.backward({name}=True) inside the compiled function",
                "call backward outside the compiled function",
            )
    if "inputs" in given and not is_none(given["inputs"]):
        raise tx.unsupported(
            "loss.backward(inputs=...) inside the compiled function",
            "call backward outside the compiled function",
        )
    if not loss.meta.requires_grad:
        raise tx.unsupported("backward of a tensor that does not require grad")
    gradient = given.get("gradient")
    if gradient is None or is_none(gradient):
        if loss.meta.numel() != 1:
            raise tx.unsupported("backward of a non-scalar tensor without gradient")
        gradient = None
    leaves = [_checked_leaf(tx, t) for t in _leaf_inputs(tx, loss)]
    example = tuple(torch.empty_like(t.meta, requires_grad=False) for t in leaves)
    grads = tx.output.call_with_example(
        torch.autograd.grad,
        ((loss,), tuple(leaves)),
        {
            "grad_outputs": None if gradient is None else (gradient,),
            # aotgrad may trace autograd again over the same graph (outputs
            # that still require grad); eager frees it, but nothing here reads
            # it after this call.
            "retain_graph": True,
            "allow_unused": True,
            "materialize_grads": True,
        },
        example,
    )
    for leaf, grad in zip(leaves, grads.items):
        _accumulate(tx, leaf, grad)
    tx.output.ran_backward = True
    return ConstValue(None)


def _leaf_inputs(tx: Interpreter, loss: TensorValue) -> list[TensorValue]:
    """The graph inputs ``loss`` depends on through values that require grad,
    in input order."""
    seen: set[torch.fx.Node] = set()
    todo = [loss.node]
    found: set[torch.fx.Node] = set()
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "placeholder":
            found.add(node)
            continue
        for arg in node.all_input_nodes:
            if _requires_grad(arg.meta.get("example_value")):
                todo.append(arg)
    return [tx.output.input_value(n) for n in tx.output.graph.nodes if n in found]


def _requires_grad(example: object) -> bool:
    """Whether a node's value (a tensor, or the tuple ``chunk`` returns) has
    a tensor that requires grad."""
    if isinstance(example, (tuple, list)):
        return any(_requires_grad(e) for e in example)
    return isinstance(example, torch.Tensor) and example.requires_grad


def _checked_leaf(tx: Interpreter, t: TensorValue) -> TensorValue:
    real = tx.output.real_tensor(t)
    name = t.source.user_name()
    if not real.is_leaf:
        raise tx.unsupported(
            f"backward into {name}, which requires grad and is not a leaf: its "
            "gradient flows on into autograd history outside the compiled function",
            "call backward outside the compiled function, or pass it detached",
        )
    if real._backward_hooks or getattr(real, "_post_accumulate_grad_hooks", None):
        raise tx.unsupported(
            f"backward into {name}, which has a gradient hook",
            "call backward outside the compiled function",
        )
    tx.output.guards.add(Guard(GuardKind.NO_GRAD_HOOKS, t.source, None))
    return t


def _accumulate(tx: Interpreter, leaf: TensorValue, grad: Value) -> None:
    """AccumulateGrad: ``leaf.grad = grad`` where it was None, else
    ``leaf.grad += grad`` in place (the same tensor object keeps the sum)."""
    current = read_grad(tx, leaf)
    if is_none(current):
        real = tx.output.real_tensor(leaf)
        tx.output.write_attr(leaf, "grad", grad, owner=real)
        return
    tx.output.call_tensor_op("call_method", "add_", (current, grad), {})


TENSOR_METHOD_HANDLERS["backward"] = _backward
