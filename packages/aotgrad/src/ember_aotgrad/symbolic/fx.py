"""Symbolic sizes as graph nodes: a size expression becomes integer ops over
``aten.sym_size.int`` reads of the graph's inputs, so the graph computes every
size from the tensors it is given (and torch can run it as it is).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import sympy
import torch
import torch.fx

from .rules import NoShapeRule

sym_size = torch.ops.aten.sym_size.int


class SizeNodes:
    """Emits (once each) the nodes computing size expressions in ``graph``.

    ``sources`` maps each symbol to the node of a tensor and the dim whose size
    it is.
    """

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.graph = graph
        self.sources: dict[sympy.Symbol, tuple[torch.fx.Node, int]] = {}
        self._memo: dict[sympy.Basic, torch.fx.Node] = {}

    def node(self, expr: sympy.Basic) -> torch.fx.Node | int:
        """A node (or int) whose value is ``expr`` at run time."""
        if expr.is_Integer:
            return int(expr)
        found = self._memo.get(expr)
        if found is None:
            emit = _EMITTERS.get(expr.func)
            if emit is None:
                raise NoShapeRule(f"size expression {expr} has no graph form")
            found = self._memo[expr] = emit(self, expr)
        return found

    def call(self, op: Callable, *args: object) -> torch.fx.Node:
        return self.graph.call_function(op, args)


def _symbol(nodes: SizeNodes, expr: sympy.Symbol) -> torch.fx.Node:
    tensor, dim = nodes.sources[expr]
    return nodes.call(sym_size, tensor, dim)


def _fold(op: Callable) -> Callable[[SizeNodes, sympy.Basic], torch.fx.Node]:
    def emit(nodes: SizeNodes, expr: sympy.Basic) -> torch.fx.Node:
        args = [nodes.node(a) for a in sorted(expr.args, key=sympy.default_sort_key)]
        out = args[0]
        for a in args[1:]:
            out = nodes.call(op, out, a)
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
    if not (exp.is_Integer and exp > 0):
        raise NoShapeRule(f"size expression {expr} is not an integer")
    return nodes.call(operator.pow, nodes.node(base), int(exp))


def _mod(nodes: SizeNodes, expr: sympy.Mod) -> torch.fx.Node:
    return nodes.call(operator.mod, *(nodes.node(a) for a in expr.args))


_EMITTERS: dict[type, Callable] = {
    sympy.Symbol: _symbol,
    sympy.Add: _fold(operator.add),
    sympy.Mul: _mul,
    sympy.floor: _floor,
    sympy.ceiling: _ceiling,
    sympy.Pow: _pow,
    sympy.Mod: _mod,
    sympy.Max: _fold(torch.sym_max),
    sympy.Min: _fold(torch.sym_min),
}
