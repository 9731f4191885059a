"""Symbolic sizes as graph nodes: a size expression becomes integer ops over
``aten.sym_size.int`` reads of the graph's inputs, so the graph computes every
size from the tensors it is given (and torch can run it as it is).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import sympy
import torch
import torch.fx

from .rules import NoShapeRule

sym_size = torch.ops.aten.sym_size.int


class SizeNodes:
    """Emits (once each) the nodes computing size expressions in ``graph``.

    ``sources`` maps each symbol to the node of a tensor and the dim whose size
    it is, or to an integer input's node and None. With ``value_of`` (an
    expression's SymInt), each node's ``meta["val"]`` holds its value, as a
    tensor node's does: the partitioner weighs a saved size by it, and a
    backward compiled ahead of its first call gets its example from it.
    """

    def __init__(
        self,
        graph: torch.fx.Graph,
        value_of: Callable[[sympy.Basic], object] | None = None,
    ) -> None:
        self.graph = graph
        self.value_of = value_of
        self.sources: dict[sympy.Symbol, tuple[torch.fx.Node, int | None]] = {}
        self._memo: dict[sympy.Basic, torch.fx.Node] = {}

    def node(self, expr: sympy.Basic) -> torch.fx.Node | int | float:
        """A node (or number) whose value is ``expr`` at run time."""
        if expr.is_Integer:
            return int(expr)
        if expr.is_Number:  # in a float expression: ``(d // h) ** 0.5``
            return float(expr)
        found = self._memo.get(expr)
        if found is None:
            emit = _EMITTERS.get(expr.func)
            if emit is None:
                raise NoShapeRule(f"size expression {expr} has no graph form")
            found = self._memo[expr] = emit(self, expr)
            if self.value_of is not None and "val" not in found.meta:
                found.meta["val"] = self.value_of(expr)
        return found

    def call(
        self, op: Callable, *args: object, value: sympy.Basic | None = None
    ) -> torch.fx.Node:
        """A node calling ``op``; ``value``: the expression it computes."""
        node = self.graph.call_function(op, args)
        if self.value_of is not None and value is not None:
            node.meta["val"] = self.value_of(value)
        return node


def _symbol(nodes: SizeNodes, expr: sympy.Symbol) -> torch.fx.Node:
    source, dim = nodes.sources[expr]
    return source if dim is None else nodes.call(sym_size, source, dim)


def _fold(op: Callable) -> Callable[[SizeNodes, sympy.Basic], torch.fx.Node]:
    def emit(nodes: SizeNodes, expr: sympy.Basic) -> torch.fx.Node:
        first, *rest = sorted(expr.args, key=sympy.default_sort_key)
        out, partial = nodes.node(first), first
        for term in rest:
            partial = expr.func(partial, term)
            out = nodes.call(op, out, nodes.node(term), value=partial)
        return out

    return emit


def _mul(nodes: SizeNodes, expr: sympy.Mul) -> torch.fx.Node:
    _num, den = sympy.fraction(expr)
    if den != 1:
        raise NoShapeRule(f"size expression {expr} is not an integer")
    return _fold(operator.mul)(nodes, expr)


def _floor(nodes: SizeNodes, expr: sympy.Basic) -> torch.fx.Node:
    num, den = sympy.fraction(sympy.together(expr.args[0]))
    top = nodes.node(sympy.expand(num))
    return nodes.call(operator.floordiv, top, nodes.node(sympy.expand(den)))


def _ceiling(nodes: SizeNodes, expr: sympy.Basic) -> torch.fx.Node:
    # ceil(p / q) = (p + q - 1) // q for the positive q of sizes and steps
    num, den = sympy.fraction(sympy.together(expr.args[0]))
    top = nodes.node(sympy.expand(num + den - 1))
    return nodes.call(operator.floordiv, top, nodes.node(den))


def _pow(nodes: SizeNodes, expr: sympy.Pow) -> torch.fx.Node:
    base, exp = expr.args
    return nodes.call(operator.pow, nodes.node(base), nodes.node(exp))


def _mod(nodes: SizeNodes, expr: sympy.Mod) -> torch.fx.Node:
    return nodes.call(operator.mod, *(nodes.node(a) for a in expr.args))


_EMITTERS: dict[type, Callable] = {
    sympy.Symbol: _symbol,
    sympy.Add: _fold(operator.add),
    # A division of sizes sits inside floor or ceiling; a bare fraction is a
    # float expression's (``d / 2``), computed in floats as Python does.
    sympy.Mul: _fold(operator.mul),
    sympy.floor: _floor,
    sympy.ceiling: _ceiling,
    sympy.Pow: _pow,
    sympy.Mod: _mod,
    sympy.Max: _fold(torch.sym_max),
    sympy.Min: _fold(torch.sym_min),
}


def to_python(expr: sympy.Basic) -> str:
    """``expr`` (a size expression or a relation between sizes) as Python
    source over the symbols' names, exact in integers (``//``, not floats)."""
    emit = _PYTHON.get(expr.func)
    if emit is not None:
        return emit(expr)
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Rational:
        return f"({expr.p} / {expr.q})"
    if expr.is_Float:
        return repr(float(expr))
    if expr in (sympy.true, sympy.false):
        return str(bool(expr))
    raise NoShapeRule(f"size expression {expr} has no Python form")


def _joined(separator: str) -> Callable[[sympy.Basic], str]:
    def emit(expr: sympy.Basic) -> str:
        args = sorted(expr.args, key=sympy.default_sort_key)
        return "(" + separator.join(to_python(a) for a in args) + ")"

    return emit


def _py_division(expr: sympy.Basic) -> tuple[str, str]:
    num, den = sympy.fraction(sympy.together(expr.args[0]))
    return to_python(sympy.expand(num)), to_python(sympy.expand(den))


def _py_floor(expr: sympy.Basic) -> str:
    num, den = _py_division(expr)
    return f"({num} // {den})"


def _py_ceiling(expr: sympy.Basic) -> str:
    num, den = _py_division(expr)
    return f"(-(-{num} // {den}))"


def _relation(symbol: str) -> Callable[[sympy.Basic], str]:
    return lambda e: f"({to_python(e.lhs)} {symbol} {to_python(e.rhs)})"


def _call(name: str) -> Callable[[sympy.Basic], str]:
    return lambda e: f"{name}({', '.join(to_python(a) for a in e.args)})"


_PYTHON: dict[type, Callable[[sympy.Basic], str]] = {
    sympy.Symbol: lambda e: e.name,
    sympy.Add: _joined(" + "),
    sympy.Mul: _joined(" * "),
    sympy.floor: _py_floor,
    sympy.ceiling: _py_ceiling,
    sympy.Pow: lambda e: f"({to_python(e.args[0])} ** {to_python(e.args[1])})",
    sympy.Mod: lambda e: f"({to_python(e.args[0])} % {to_python(e.args[1])})",
    sympy.Max: _call("max"),
    sympy.Min: _call("min"),
    sympy.Equality: _relation("=="),
    sympy.Unequality: _relation("!="),
    sympy.StrictLessThan: _relation("<"),
    sympy.LessThan: _relation("<="),
    sympy.StrictGreaterThan: _relation(">"),
    sympy.GreaterThan: _relation(">="),
    sympy.And: _joined(" and "),
    sympy.Or: _joined(" or "),
    sympy.Not: lambda e: f"(not {to_python(e.args[0])})",
}


def predicate(
    relations: Sequence[sympy.Basic], names: Sequence[str]
) -> Callable[..., bool]:
    """A function of the sizes named ``names`` (positional, in that order)
    that is True when every one of ``relations`` holds."""
    body = " and ".join(to_python(r) for r in relations) or "True"
    return eval(f"lambda {', '.join(names)}: {body}", {"max": max, "min": min})
