"""C++ source for the loop IR's scalar expressions: the preamble every
translation unit starts with (``preamble.h``), the scalar-op templates, exact
literals, and ``Body``, which writes one loop body with each distinct
subexpression named once.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources

import torch

from ...ir.indexing import Index, Indirect, offset, render, var
from ...ir.nodes import (
    C_TYPES,
    HALF_TYPES,
    Call,
    Const,
    Expr,
    IndexValue,
    Load,
    ReduceKind,
    walk,
)

# The text every translation unit starts with (NaN-propagating max/min, libm
# through builtins, a vectorizable exp, index checks): a header file of the
# package, pasted into each unit so that a unit compiles alone and its cache
# key covers it.
PREAMBLE = (resources.files(__package__) / "preamble.h").read_text()

# Every ScalarOp as a C++ template over the argument code {0}, {1}, ... and the
# result type {T}. "select" is rendered lazily (only the taken branch is
# evaluated).
SCALAR_OPS: dict[str, str] = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "neg": "(-{0})",
    "abs": "ember::abs({0})",
    "relu": "({0} < {T}(0) ? {T}(0) : {0})",
    "exp": "ember_exp({0})",
    "log": "ember_log({0})",
    "sqrt": "ember::sqrt({0})",
    "rsqrt": "({T}(1) / ember::sqrt({0}))",
    "reciprocal": "({T}(1) / {0})",
    "sigmoid": "({T}(1) / ({T}(1) + ember_exp(-{0})))",
    "tanh": "ember_tanh({0})",
    "sin": "ember::sin({0})",
    "cos": "ember::cos({0})",
    "erf": "ember_erf({0})",
    "log1p": "ember::log1p({0})",
    "expm1": "ember::expm1({0})",
    "asin": "ember::asin({0})",
    "acos": "ember::acos({0})",
    "atan": "ember::atan({0})",
    "sinh": "ember::sinh({0})",
    "cosh": "ember::cosh({0})",
    "tan": "ember::tan({0})",
    "asinh": "ember::asinh({0})",
    "acosh": "ember::acosh({0})",
    "atanh": "ember::atanh({0})",
    "atan2": "ember::atan2({0}, {1})",
    "fmod": "ember::fmod({0}, {1})",
    "remainder": "ember_remainder({0}, {1})",
    # Integers by a nonzero constant other than -1 (the lowering sees to it):
    # C++'s % truncates like fmod; Python's modulo moves by one divisor.
    "int_fmod": "({0} % {1})",
    "int_remainder": "ember_int_remainder({0}, {1})",
    # torch's sign: NaN and -0.0 give +0 (neither compare holds).
    "sign": "static_cast<{T}>(({T}(0) < {0}) - ({0} < {T}(0)))",
    "signbit": "ember::signbit({0})",
    "floor": "ember::floor({0})",
    "ceil": "ember::ceil({0})",
    "trunc": "ember::trunc({0})",
    # Half to even under the default rounding mode, as torch.round.
    "round": "ember::nearbyint({0})",
    "pow": "ember::pow({0}, {1})",
    "fma": "ember::fma({0}, {1}, {2})",
    "maximum": "ember_max({0}, {1})",
    "minimum": "ember_min({0}, {1})",
    "clamp_min": "({0} < {1} ? {1} : {0})",
    "clamp_max": "({0} > {1} ? {1} : {0})",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    "not": "(!{0})",
    "and": "({0} && {1})",
    "or": "({0} || {1})",
    # Integers only (bool's bitwise not is "not"): the promoted int is cast back.
    "bitwise_not": "static_cast<{T}>(~{0})",
    "bitwise_and": "static_cast<{T}>({0} & {1})",
    "bitwise_or": "static_cast<{T}>({0} | {1})",
    "bitwise_xor": "static_cast<{T}>({0} ^ {1})",
    "where": "({0} ? {1} : {2})",
    "select": "({0} ? {1} : {2})",
    "cast": "static_cast<{T}>({0})",
    "index_clamp": "ember_clamp_index({0}, {1})",
    "index_check": "ember_check_index({0}, {1}, {2}, {3}, &ember_oob)",
}

COMBINE = {
    ReduceKind.SUM: "{0} + {1}",
    ReduceKind.PROD: "{0} * {1}",
    ReduceKind.MAX: "ember_max({0}, {1})",
    ReduceKind.MIN: "ember_min({0}, {1})",
}

# argmax/argmin: whether the value and position {2}, {3} replace {0}, {1}; by the
# kind whose values they compare (and whose identity they start from).
ARG_KINDS = {
    ReduceKind.ARGMAX: ReduceKind.MAX,
    ReduceKind.ARGMIN: ReduceKind.MIN,
    ReduceKind.ARGMAX_LAST_NAN: ReduceKind.MAX,
}
ARG_TAKES = {
    ReduceKind.ARGMAX: "ember_arg_takes<true, false>({0}, {1}, {2}, {3})",
    ReduceKind.ARGMIN: "ember_arg_takes<false, false>({0}, {1}, {2}, {3})",
    ReduceKind.ARGMAX_LAST_NAN: "ember_arg_takes<true, true>({0}, {1}, {2}, {3})",
}
# The position an argmax/argmin accumulator starts from: above any real one,
# so the first element always replaces the identity, even when equal to it.
NO_POSITION = "std::numeric_limits<int64_t>::max()"


def value_type(dtype: torch.dtype) -> str:
    """The C type a value of ``dtype`` is computed in (float for the 16-bit
    floats, whose buffers hold ``C_TYPES``' bit patterns)."""
    return "float" if dtype in HALF_TYPES else C_TYPES[dtype]


def load_code(dtype: torch.dtype, element: str) -> str:
    """C++ reading buffer element ``element`` of ``dtype`` as a value."""
    half = HALF_TYPES.get(dtype)
    return f"ember_load_{half}({element})" if half else element


def store_code(dtype: torch.dtype, value: str) -> str:
    """C++ for the buffer element of ``dtype`` that holds value ``value``."""
    half = HALF_TYPES.get(dtype)
    return (
        f"ember_store_{half}({value})"
        if half
        else f"static_cast<{C_TYPES[dtype]}>({value})"
    )


def identity(kind: ReduceKind, dtype: torch.dtype) -> str:
    """C++ for the value a ``kind`` accumulation of ``dtype`` starts from (of
    the compared values, for argmax and argmin)."""
    t = value_type(dtype)
    kind = ARG_KINDS.get(kind, kind)
    if kind == ReduceKind.SUM:
        return f"{t}(0)"
    if kind == ReduceKind.PROD:
        return f"{t}(1)"
    big = "infinity()" if dtype.is_floating_point else "max()"
    small = "-std::numeric_limits<{t}>::infinity()" if dtype.is_floating_point else ""
    if kind == ReduceKind.MAX:
        return small.format(t=t) or f"std::numeric_limits<{t}>::lowest()"
    return f"std::numeric_limits<{t}>::{big}"


def literal(value: bool | int | float, dtype: torch.dtype) -> str:
    """C++ source for a constant of ``dtype``, exact to the bit. A 16-bit float
    constant is a float, as torch's kernels hold a scalar operand (their opmath);
    rules that compare with it round it first."""
    t = value_type(dtype)
    if dtype == torch.bool:
        return "true" if value else "false"
    if not dtype.is_floating_point:
        if value == -(2**63):
            return "std::numeric_limits<int64_t>::min()"
        return f"{t}({int(value)}LL)" if dtype == torch.int64 else f"{t}({int(value)})"
    value = float(value)
    if math.isnan(value):
        return f"std::numeric_limits<{t}>::quiet_NaN()"
    if math.isinf(value):
        return f"{'-' if value < 0 else ''}std::numeric_limits<{t}>::infinity()"
    if dtype == torch.float64:
        return repr(value)
    exact = struct.unpack("f", struct.pack("f", value))[0] == value
    return f"{value!r}f" if exact else f"static_cast<float>({value!r})"


@dataclass
class Scope:
    """What a kernel body can name: local reduction results and buffer strides."""

    locals_: dict[str, str]  # reduction name -> C variable holding this row's value
    strides: dict[str, tuple[int, ...]]
    # reduction name -> (value in its body, "buffer[offset]" to store it at)
    spills: dict[str, list[tuple[Expr, str]]] = field(default_factory=dict)
    # The graph is compiled for many sizes: loops are shaped alike for all.
    varying: bool = False


class Body:
    """Writes one loop body, naming each distinct subexpression once (CSE)."""

    def __init__(
        self, scope: Scope, indent: str, ops: dict[str, str] | None = None
    ) -> None:
        self.scope, self.indent = scope, indent
        self.ops = {**SCALAR_OPS, **(ops or {})}  # per-body templates win
        self.lines: list[str] = []
        self.names: dict[Expr, str] = {}

    def value(self, e: Expr) -> str:
        if isinstance(e, Const):
            return literal(e.value, e.dtype)
        if e in self.names:
            return self.names[e]
        if isinstance(e, Load) and e.name in self.scope.locals_:
            return self.scope.locals_[e.name]
        if isinstance(e, Call) and e.op == "select":
            code = self.inline(e)
        elif isinstance(e, Call):
            code = apply(e, [self.value(a) for a in e.args], self.ops, self.stored)
        else:
            code = self._leaf(e)
        name = f"t{len(self.names)}"
        self.names[e] = name
        self.lines.append(f"{self.indent}const {value_type(e.dtype)} {name} = {code};")
        return name

    def stored(self, e: Expr) -> bool:
        """Whether ``e`` is read from a buffer (so it holds its dtype's value
        exactly), not a reduction's local or an arithmetic result."""
        return isinstance(e, Load) and e.name not in self.scope.locals_

    def inline(self, e: Expr) -> str:
        """``e`` as one expression with no new temporaries (for lazy branches)."""
        if isinstance(e, Const):
            return literal(e.value, e.dtype)
        if e in self.names:
            return self.names[e]
        if isinstance(e, Load) and e.name in self.scope.locals_:
            return self.scope.locals_[e.name]
        if isinstance(e, Call):
            return apply(e, [self.inline(a) for a in e.args], self.ops, self.stored)
        return self._leaf(e, lambda v: f"({self.inline(v)})")

    def _leaf(self, e: Load | IndexValue, sub: Callable[[Expr], str] | None = None):
        """A load or index value; ``sub`` writes the value of an indirect index
        (a named temporary by default, an inline expression in lazy branches)."""
        sub = sub or self.value

        def leaf(term: Indirect) -> str:
            return sub(term.value)

        if isinstance(e, IndexValue):
            return f"static_cast<{value_type(e.dtype)}>({render(e.index, leaf)})"
        at = render(offset(e.index, self.scope.strides[e.name]), leaf)
        return load_code(e.dtype, f"{e.name}[{at}]")


def apply(
    e: Call,
    args: list[str],
    ops: dict[str, str] = SCALAR_OPS,
    stored: Callable[[Expr], bool] = lambda e: isinstance(e, Load),
) -> str:
    """C++ for the call ``e`` on argument code ``args``, from template ``ops``;
    ``stored`` tells a value read from a buffer (see ``Body.stored``)."""
    if e.op == "cast":
        return _cast(e, args[0], stored(e.args[0]))
    return ops[e.op].format(*args, T=value_type(e.dtype))


def _cast(e: Call, arg: str, stored: bool) -> str:
    """A conversion. A 16-bit float value is held in float: converting to one
    rounds to it; converting from one rounds first, unless the value was read
    from a buffer (an arithmetic result of that dtype is not rounded till then)."""
    (source,) = e.args
    from_half = HALF_TYPES.get(source.dtype)
    if from_half and not stored:
        arg = f"ember_round_{from_half}({arg})"
    to_half = HALF_TYPES.get(e.dtype)
    if to_half:
        return f"ember_round_{to_half}(static_cast<float>({arg}))"
    return f"static_cast<{value_type(e.dtype)}>({arg})"


def numel(sizes) -> int:
    """The number of elements of a tensor with ``sizes``."""
    return math.prod(sizes)


def calls(e: Expr, op: str) -> bool:
    """Whether ``e`` calls scalar op ``op`` anywhere, indirect indices included."""
    return any(isinstance(x, Call) and x.op == op for x in walk(e))


def open_loops(sizes, first: int, prefix: str, indent: str, lines: list[str]) -> str:
    """Append one ``for`` per size (``prefix`` + dim from ``first``) to ``lines``;
    returns the body's indent."""
    for d, size in enumerate(sizes):
        v = f"{prefix}{first + d}"
        lines.append(f"{indent}for (int64_t {v} = 0; {v} < {size}; ++{v}) {{")
        indent += "  "
    return indent


def close_loops(count: int, indent: str, lines: list[str]) -> None:
    """Append ``count`` closing braces, outdenting from ``indent``."""
    for _ in range(count):
        indent = indent[:-2]
        lines.append(f"{indent}}}")


def ivar(d: int) -> Index:
    """Outer or output loop variable ``i{d}`` as an index."""
    return var(f"i{d}", 2**62)  # the loop's own variable: never folded away
