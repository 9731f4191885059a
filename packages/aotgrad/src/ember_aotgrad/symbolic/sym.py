"""Symbolic sizes of our own: sympy expressions behind torch's SymInt protocol.

A ``SymNode`` pairs an expression over size symbols with its hint (its value
for the example inputs). torch calls the node's methods for SymInt arithmetic
and, when it must know a value (``bool(s0 > 16)``, ``int(s0)``), one of its
``guard_*`` methods: the answer comes from the hint, and the relation it
assumed is recorded in the node's ``ShapeEnv`` as a guard that the caller
checks before reusing the result for other sizes (docs/dynamic.md).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable

import sympy
import torch

from .values import NoShapeRule


class ShapeEnv:
    """The symbols of one trace, their hints, and the relations it assumed.

    Sizes 0 and 1 are never symbols (callers specialize them), so every symbol
    is at least 2: a relation that holds for all such values is not a guard.
    """

    def __init__(self) -> None:
        self.hints: dict[sympy.Symbol, int] = {}
        self.by_name: dict[str, sympy.Symbol] = {}
        self.guards: list[sympy.Basic] = []
        self._shifted: dict[sympy.Symbol, sympy.Expr] = {}

    def symbol(self, name: str, hint: int) -> sympy.Symbol:
        """A new size symbol ``name`` whose example value is ``hint`` (>= 2)."""
        if hint < 2:
            raise ValueError(f"{name}: size {hint} is specialized, not a symbol")
        sym = sympy.Symbol(name, integer=True, positive=True)
        self.hints[sym] = hint
        self.by_name[name] = sym
        # s = t + 2 with t >= 0 lets sympy decide what holds for all sizes >= 2
        offset = sympy.Symbol(f"{name}_", integer=True, nonnegative=True)
        self._shifted[sym] = offset + 2
        return sym

    def sym_int(self, expr: sympy.Expr | int) -> torch.SymInt | int:
        """``expr`` as a torch.SymInt (an int when it has no symbols)."""
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return int(expr)
        return torch.SymInt(SymNode(self, expr, self.evaluate(expr), int))

    def value(self, expr: sympy.Expr) -> object:
        """``expr`` as the torch symbolic number of its kind: a SymInt for an
        integer expression, a SymFloat for a float one (``(d // h) ** 0.5``)."""
        expr = sympy.sympify(expr)
        if expr.is_Number:
            return int(expr) if expr.is_Integer else float(expr)
        if expr.is_integer:  # sympy knows it from the integer symbols
            return torch.SymInt(SymNode(self, expr, int(self.evaluate(expr)), int))
        return torch.SymFloat(SymNode(self, expr, float(self.evaluate(expr)), float))

    def evaluate(self, expr: sympy.Basic) -> object:
        """``expr``'s value at the hints."""
        value = expr.xreplace({s: sympy.Integer(h) for s, h in self.hints.items()})
        if value in (sympy.true, sympy.false):
            return bool(value)
        if value.is_Integer:
            return int(value)
        if value.is_Number:
            return float(value)
        raise ValueError(f"{expr} has symbols without a hint")

    def assume(self, relation: sympy.Basic, holds: bool) -> None:
        """Records that ``relation`` was taken to be ``holds`` (true at the hints)."""
        fact = relation if holds else sympy.Not(relation)
        if isinstance(fact, sympy.core.relational.Relational) and fact.lhs.is_Number:
            fact = fact.reversed  # reads as ``s0 >= 4``
        if fact in (sympy.true, True):
            return
        if fact in (sympy.false, False):
            raise AssertionError(f"relation {relation} contradicts the example sizes")
        if self.always(fact) or fact in self.guards:
            return
        self.guards.append(fact)

    def decide(self, relation: sympy.Basic) -> bool:
        """``relation``'s truth for these sizes: known for all sizes, or read
        off the hints and recorded as a guard."""
        known = self.statically(relation)
        if known is not None:
            return known
        holds = bool(self.evaluate(relation))
        self.assume(relation, holds)
        return holds

    def always(self, fact: sympy.Basic) -> bool:
        """Whether ``fact`` holds for every size >= 2 (when sympy can tell)."""
        if fact in (sympy.true, True):
            return True
        if isinstance(fact, sympy.Not):
            return self.never(fact.args[0])
        if isinstance(fact, sympy.And):
            return all(self.always(a) for a in fact.args)
        if isinstance(fact, sympy.Or):
            return any(self.always(a) for a in fact.args)
        test = _SIGN_TESTS.get(type(fact))
        if test is None:
            return False
        # Sizes are s = t + 2 with t >= 0: a polynomial in the t's whose terms
        # are all >= 0 has a sign sympy can read.
        diff = sympy.expand((fact.lhs - fact.rhs).xreplace(self._shifted))
        return test(diff) is True

    def never(self, fact: sympy.Basic) -> bool:
        """Whether ``fact`` fails for every size >= 2 (when sympy can tell)."""
        if fact in (sympy.false, False):
            return True
        negated = sympy.Not(fact)
        return not isinstance(negated, sympy.Not) and self.always(negated)

    def statically(self, expr: sympy.Basic) -> bool | None:
        """True or False when ``expr`` (a relation) has one value for all sizes."""
        if self.always(expr):
            return True
        if self.never(expr):
            return False
        return None


_SIGN_TESTS: dict[type, Callable[[sympy.Expr], bool | None]] = {
    sympy.StrictLessThan: lambda d: d.is_negative,
    sympy.LessThan: lambda d: d.is_nonpositive,
    sympy.StrictGreaterThan: lambda d: d.is_positive,
    sympy.GreaterThan: lambda d: d.is_nonnegative,
    sympy.Equality: lambda d: d.is_zero,
    sympy.Unequality: lambda d: d.is_nonzero,
}


def _expr(value: object) -> sympy.Basic:
    if isinstance(value, SymNode):
        return value.expr
    if isinstance(value, bool):
        return sympy.true if value else sympy.false
    return sympy.sympify(value)


def _hint(value: object) -> object:
    return value.hint if isinstance(value, SymNode) else value


class SymNode:
    """One symbolic int, float or bool (torch's SymNode protocol).

    The method names below are the ones torch's SymInt, SymFloat and SymBool
    call on their node; each returns a new node or, for the guards, a plain
    value read from the hint.
    """

    def __init__(self, env: ShapeEnv, expr: sympy.Basic, hint: object, pytype: type):
        self.env = env
        self.expr = expr
        self.hint = hint
        self.pytype = pytype

    # -- kind ---------------------------------------------------------------------

    def is_int(self) -> bool:
        return self.pytype is int

    def is_float(self) -> bool:
        return self.pytype is float

    def is_bool(self) -> bool:
        return self.pytype is bool

    def is_nested_int(self) -> bool:
        return False

    def is_symbolic(self) -> bool:
        return True

    def is_constant(self) -> bool:
        return False

    def has_hint(self) -> bool:
        return True

    def require_hint(self) -> object:
        return self.hint

    def maybe_as_int(self) -> int | None:
        return int(self.expr) if self.expr.is_Integer else None

    def maybe_as_float(self) -> float | None:
        return None

    def maybe_as_bool(self) -> bool | None:
        return None

    def nested_int(self) -> None:
        return None

    def wrap_int(self, num: int) -> SymNode:
        return SymNode(self.env, sympy.Integer(num), num, int)

    def wrap_float(self, num: float) -> SymNode:
        return SymNode(self.env, sympy.Float(num), num, float)

    def wrap_bool(self, num: bool) -> SymNode:
        return SymNode(self.env, sympy.true if num else sympy.false, num, bool)

    def clone(self) -> SymNode:
        return self

    def str(self) -> str:
        return str(self.expr)

    def _graph_repr(self) -> str:
        return str(self.expr)

    def __str__(self) -> str:
        return str(self.expr)

    def __repr__(self) -> str:
        return f"SymNode({self.expr}, hint={self.hint})"

    # -- the value, with a guard ------------------------------------------------------

    def _guard(self) -> object:
        if _has_fractions(self.expr):
            # Float arithmetic: sympy's form of it need not round as the user's
            # Python did, so the sizes it reads are pinned instead.
            for sym in sorted(self.expr.free_symbols, key=str):
                self.env.assume(sympy.Eq(sym, self.env.hints[sym]), True)
        elif self.pytype is bool:
            self.env.assume(self.expr, bool(self.hint))
        elif not self.expr.is_Number:
            self.env.assume(sympy.Eq(self.expr, self.hint), True)
        return self.hint

    def guard_int(self, file: str = "", line: int = 0) -> int:
        return int(self._guard())

    def guard_float(self, file: str = "", line: int = 0) -> float:
        return float(self._guard())

    def guard_bool(self, file: str = "", line: int = 0) -> bool:
        return bool(self._guard())

    def _known_or_guard(self) -> bool:
        known = self.env.statically(self.expr)
        return known if known is not None else self.guard_bool()

    def expect_true(self, file: str = "", line: int = 0) -> bool:
        return self._known_or_guard()

    def expect_size(self, file: str = "", line: int = 0) -> bool:
        return True

    def guard_size_oblivious(self, file: str = "", line: int = 0) -> bool:
        return self._known_or_guard()

    def guard_or_false(self, file: str = "", line: int = 0) -> bool:
        return self._known_or_guard()

    def guard_or_true(self, file: str = "", line: int = 0) -> bool:
        return self._known_or_guard()

    def statically_known_true(self, file: str = "", line: int = 0) -> bool:
        return self.env.statically(self.expr) is True

    def bool_(self) -> bool:
        return self.guard_bool()

    def int_(self) -> int:
        return self.guard_int()

    def float_(self) -> float:
        return self.guard_float()

    # -- layouts (torch asks these of symbolic sizes and strides) ---------------

    def is_contiguous(self, sizes: list, strides: list) -> SymNode:
        return self.wrap_bool(_dense(sizes, strides, range(len(sizes) - 1, -1, -1)))

    def is_non_overlapping_and_dense(self, sizes: list, strides: list) -> SymNode:
        order = sorted(range(len(sizes)), key=lambda d: _hint(strides[d]))
        return self.wrap_bool(_dense(sizes, strides, order))

    def is_non_overlapping_and_dense_indicator(self, sizes: list, strides: list):
        dense = self.is_non_overlapping_and_dense(sizes, strides)
        return self.wrap_int(int(dense.hint))

    def is_channels_last_contiguous_2d(self, sizes: list, strides: list) -> SymNode:
        return self.wrap_bool(len(sizes) == 4 and _dense(sizes, strides, (1, 3, 2, 0)))

    def is_channels_last_contiguous_3d(self, sizes: list, strides: list) -> SymNode:
        dense = len(sizes) == 5 and _dense(sizes, strides, (1, 4, 3, 2, 0))
        return self.wrap_bool(dense)

    def is_channels_last_strides_2d(self, sizes: list, strides: list) -> SymNode:
        return self.is_channels_last_contiguous_2d(sizes, strides)

    def is_channels_last_strides_3d(self, sizes: list, strides: list) -> SymNode:
        return self.is_channels_last_contiguous_3d(sizes, strides)

    def sym_sum(self, args: list) -> SymNode:
        total = sympy.Add(*(_expr(a) for a in args))
        return SymNode(self.env, total, sum(_hint(a) for a in args), int)

    def sym_ite(self, then: SymNode, other: SymNode) -> SymNode:
        return then if self.guard_bool() else other


def _has_fractions(expr: sympy.Basic) -> bool:
    """Whether ``expr`` computes in floats (a float, or a fraction outside a
    floor or ceiling)."""
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        return False
    if isinstance(expr, sympy.Number):
        return not expr.is_Integer
    return any(_has_fractions(a) for a in expr.args)


def _dense(sizes: list, strides: list, order: Iterable[int]) -> bool:
    """Whether the hints of ``strides`` are those of a dense tensor whose dims,
    innermost first, are ``order`` (size-1 dims may have any stride)."""
    expected = 1
    for d in order:
        size, stride = _hint(sizes[d]), _hint(strides[d])
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _floordiv(a, b):
    return sympy.floor(a / b)


def _binary(name: str, on_hints: Callable, on_exprs: Callable, result: type | None):
    def method(self: SymNode, other: SymNode) -> SymNode:
        hint = on_hints(self.hint, other.hint)
        pytype = result or (float if float in (self.pytype, other.pytype) else int)
        return SymNode(self.env, on_exprs(self.expr, other.expr), hint, pytype)

    method.__name__ = name
    setattr(SymNode, name, method)


def _unary(name: str, on_hint: Callable, on_expr: Callable, result: type | None):
    def method(self: SymNode) -> SymNode:
        return SymNode(
            self.env, on_expr(self.expr), on_hint(self.hint), result or self.pytype
        )

    method.__name__ = name
    setattr(SymNode, name, method)


for _name, _on_hints, _on_exprs in (
    ("add", operator.add, operator.add),
    ("sub", operator.sub, operator.sub),
    ("mul", operator.mul, operator.mul),
    ("floordiv", operator.floordiv, _floordiv),
    ("int_floordiv", operator.floordiv, _floordiv),
    ("mod", operator.mod, sympy.Mod),
    ("pow", operator.pow, operator.pow),
    ("pow_by_natural", operator.pow, operator.pow),
    ("sym_min", min, sympy.Min),
    ("sym_max", max, sympy.Max),
):
    _binary(_name, _on_hints, _on_exprs, None)
for _name in ("truediv", "float_truediv", "int_truediv", "float_pow"):
    _op = operator.pow if _name == "float_pow" else operator.truediv
    _binary(_name, _op, _op, float)
for _name, _on_hints, _on_exprs in (
    ("eq", operator.eq, sympy.Eq),
    ("ne", operator.ne, sympy.Ne),
    ("lt", operator.lt, sympy.Lt),
    ("le", operator.le, sympy.Le),
    ("gt", operator.gt, sympy.Gt),
    ("ge", operator.ge, sympy.Ge),
    ("sym_and", lambda a, b: a and b, sympy.And),
    ("sym_or", lambda a, b: a or b, sympy.Or),
):
    _binary(_name, _on_hints, _on_exprs, bool)
for _name, _on_hint, _on_expr, _result in (
    ("neg", operator.neg, operator.neg, None),
    ("abs", abs, sympy.Abs, None),
    ("sym_not", operator.not_, sympy.Not, bool),
    ("sym_float", float, lambda e: e, float),
    ("sym_int", int, sympy.floor, int),
    ("ceil", math.ceil, sympy.ceiling, int),
    ("floor", math.floor, sympy.floor, int),
):
    _unary(_name, _on_hint, _on_expr, _result)


def _no_form(name: str) -> None:
    def method(self: SymNode) -> SymNode:
        raise NoShapeRule(
            f"math.{name} of a symbolic size ({self.expr}) has no exact graph form"
        )

    method.__name__ = f"sym_{name}"
    setattr(SymNode, method.__name__, method)


# math.sqrt, math.sin, ... of a size (torch calls these on a SymFloat's node):
# computed in the graph, the float need not round as eager's math does, so the
# sizes stay fixed, and the reason says so (instead of an AttributeError).
for _name in (
    "sqrt",
    "cos",
    "cosh",
    "sin",
    "sinh",
    "tan",
    "tanh",
    "asin",
    "acos",
    "atan",
    "log2",
):
    _no_form(_name)


def expr_of(value: object) -> sympy.Basic:
    """The expression of a SymInt, SymFloat or SymBool (or a number) as sympy."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return value.node.expr
    return _expr(value)
