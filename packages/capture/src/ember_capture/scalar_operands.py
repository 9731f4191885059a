"""Numbers an op takes that capture keeps out of the guards: a 0-d tensor
(``p.addcdiv_(a, b, value=-step_size)``, as torch's optimizers write under
compilation) or a float input (``p.add_(grad, alpha=-lr)`` with ``lr`` from a
param group, which a scheduler changes every step).

Eager reads a tensor there with ``.item()``, which no graph can hold, and
guarding a float on its value would compile again at every new value. Each
rule rewrites the call into ops that take the number as a tensor operand and
round as eager's kernel does; a call without a rule reads the number (a float
input is then guarded on its value).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .variables import FloatInputValue, ListValue, TensorValue, TupleValue, Value

if TYPE_CHECKING:
    from .output_graph import OutputGraph

# A rule gets the graph, the call's kind, its per-tensor name (``add_``), its
# arguments, and the keyword holding the number; it returns the call's value.
Rule = Callable[["OutputGraph", str, str, tuple, dict, str], Value]

_KEYWORD_RULES: dict[str, tuple[str, Rule]] = {}  # op name -> (keyword, rule)
_LISTS = (ListValue, TupleValue)  # a foreach op's tensor lists


def _number_as_tensor(graph: OutputGraph, number: Value, like: TensorValue) -> Value:
    """``number`` (a float input or a 0-d tensor) as a 0-d tensor of ``like``'s
    dtype, the dtype eager converts the number to."""
    if isinstance(number, FloatInputValue):
        return graph.float_tensor(number, like.meta.dtype)
    return number


def _call(graph: OutputGraph, kind: str, name: str, args: tuple, kwargs: dict):
    target = name if kind == "call_method" else getattr(torch, name)
    return graph.call_tensor_op(kind, target, args, kwargs)


def _scale_first_factor(graph, kind, name, args, kwargs, keyword) -> Value:
    """``addcdiv(self, t1, t2, value=v)`` -> ``addcdiv(self, t1 * v, t2)``:
    torch's kernel computes ``value * t1`` first, and this rounds alike."""
    kwargs = dict(kwargs)
    self, t1, *rest = args
    scale = _number_as_tensor(graph, kwargs.pop(keyword), self)
    t1 = graph.call_tensor_op("call_function", operator.mul, (t1, scale), {})
    return _call(graph, kind, name, (self, t1, *rest), kwargs)


def _alpha_as_factor(graph, kind, name, args, kwargs, keyword) -> Value:
    """``add(self, other, alpha=a)`` -> ``addcmul(self, other, a)``: torch's
    kernel is one fused multiply-add, as addcmul's is (``sub``: ``-a``)."""
    kwargs = dict(kwargs)
    self, other = args
    alpha = _number_as_tensor(graph, kwargs.pop(keyword), self)
    if name.startswith("sub"):
        alpha = graph.call_tensor_op("call_function", operator.neg, (alpha,), {})
    in_place = "_" if name.endswith("_") else ""
    return _call(graph, kind, f"addcmul{in_place}", (self, other, alpha), kwargs)


for _name, _keyword, _rule in (
    ("addcdiv", "value", _scale_first_factor),
    ("addcmul", "value", _scale_first_factor),
    ("add", "alpha", _alpha_as_factor),
    ("sub", "alpha", _alpha_as_factor),
):
    _KEYWORD_RULES[_name] = _KEYWORD_RULES[f"{_name}_"] = (_keyword, _rule)


def _is_number_operand(v: object) -> bool:
    return isinstance(v, FloatInputValue) or (
        isinstance(v, TensorValue) and v.meta.dim() == 0
    )


def _op_name(kind: str, target: object) -> str | None:
    if kind == "call_method":
        return target if isinstance(target, str) else None
    if getattr(torch, getattr(target, "__name__", ""), None) is target:
        return target.__name__
    return None


def _foreach(graph: OutputGraph, name: str, args: tuple, kwargs: dict) -> Value:
    """``torch._foreach_add_(xs, ys, alpha=-lr)`` as ``xs[i].add_(ys[i],
    alpha=-lr)`` at each position (what torch's CPU kernel does), so the float
    input reaches the per-tensor rules."""
    per_tensor = name.removeprefix("_foreach_")
    positional, keywords = _parameters(per_tensor)
    # A foreach op takes as positional what its per-tensor op takes by keyword
    # (``_foreach_addcmul_(xs, a, b, value)`` and ``x.addcmul_(a, b, value=v)``).
    kwargs = {**dict(zip(keywords, args[1 + positional :])), **kwargs}
    args = args[: 1 + positional]
    results = []
    for i in range(len(args[0].items)):
        at = tuple(a.items[i] if isinstance(a, _LISTS) else a for a in args)
        results.append(graph.call_tensor_op("call_method", per_tensor, at, kwargs))
    if per_tensor.endswith("_"):
        return ListValue(list(args[0].items))
    return ListValue(results)


def _parameters(method: str) -> tuple[int, list[str]]:
    """How many arguments after ``self`` the aten op ``method`` takes by
    position, and the names of those it takes by keyword."""
    packet = getattr(torch.ops.aten, method)
    arguments = getattr(packet, packet.overloads()[0])._schema.arguments
    positional = sum(not a.kwarg_only for a in arguments) - 1
    return positional, [a.name for a in arguments if a.kwarg_only]


def rewrite_number_operands(
    graph: OutputGraph, kind: str, target: object, args: tuple, kwargs: dict
) -> Value | None:
    """The value of the call, made of ops that take its numbers as tensors, or
    None when the call needs no rewrite."""
    name = _op_name(kind, target)
    if name is None:
        return None
    if name.startswith("_foreach_") and isinstance(args[0], _LISTS):
        others = [*args[1:], *kwargs.values()]
        if any(isinstance(a, FloatInputValue) for a in others):
            return _foreach(graph, name, args, kwargs)
        return None
    keyword, rule = _KEYWORD_RULES.get(name, (None, None))
    if rule is None or not _is_number_operand(kwargs.get(keyword)):
        return None
    if not all(isinstance(a, TensorValue) for a in args):
        return None
    return rule(graph, kind, name, args, kwargs, keyword)
