"""Index expressions of the loop IR: affine sums of loop variables, floor
division and modulo, simplified with the variables' ranges so that views of
contiguous data come out as plain ``i0*C + i1`` offsets instead of div/mod chains.
An ``Indirect`` term is a value read at run time (gather, embedding, index).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Var:
    """A loop variable that runs over ``[0, size)``."""

    name: str
    size: int


@dataclass(frozen=True, slots=True)
class Div:
    """``floor(num / den)`` of a non-negative index."""

    num: Index
    den: int


@dataclass(frozen=True, slots=True)
class Mod:
    """``num % den`` of a non-negative index."""

    num: Index
    den: int


@dataclass(frozen=True, slots=True)
class Indirect:
    """A position read at run time: ``value`` is an IR expression (an element of
    an index tensor, already wrapped and clamped into ``[0, size)``), so the
    simplifier knows only its range."""

    value: object
    size: int


Term = Var | Div | Mod | Indirect


@dataclass(frozen=True, slots=True)
class Index:
    """``const + sum(coef * term)``; build with ``index()``, ``var()``, ``+``, ``*``."""

    terms: tuple[tuple[Term, int], ...]
    const: int = 0

    def __add__(self, other: Index | int) -> Index:
        other = other if isinstance(other, Index) else Index((), other)
        return _normalize(self.terms + other.terms, self.const + other.const)

    __radd__ = __add__

    def __sub__(self, other: Index | int) -> Index:
        return self + (other * -1 if isinstance(other, Index) else -other)

    def __mul__(self, k: int) -> Index:
        if k == 0:
            return ZERO
        return Index(tuple((t, c * k) for t, c in self.terms), self.const * k)

    __rmul__ = __mul__

    def __floordiv__(self, den: int) -> Index:
        return _div(self, den)

    def __mod__(self, den: int) -> Index:
        return _mod(self, den)

    def __str__(self) -> str:
        return render(self)


ZERO = Index(())


def offset(index: Sequence[Index], strides: Sequence[int]) -> Index:
    """The flat element offset of a logical index in memory with ``strides``."""
    total = ZERO
    for i, s in zip(index, strides):
        total = total + i * s
    return total


def const(value: int) -> Index:
    return Index((), value)


def var(name: str, size: int) -> Index:
    return Index(((Var(name, size), 1),))


def bounds(e: Index | Term) -> tuple[int, int]:
    """Inclusive lower and upper bound of an index or term."""
    if isinstance(e, (Var, Indirect)):
        return 0, max(e.size - 1, 0)
    if isinstance(e, Div):
        lo, hi = bounds(e.num)
        return lo // e.den, hi // e.den
    if isinstance(e, Mod):
        lo, hi = bounds(e.num)
        return (lo, hi) if lo >= 0 and hi < e.den else (0, e.den - 1)
    lo = hi = e.const
    for term, coef in e.terms:
        tlo, thi = bounds(term)
        lo += min(coef * tlo, coef * thi)
        hi += max(coef * tlo, coef * thi)
    return lo, hi


def _normalize(terms, const_: int) -> Index:
    merged: dict[Term, int] = {}
    for term, coef in terms:
        merged[term] = merged.get(term, 0) + coef
    # A size-1 variable is always 0; a one-valued term is a constant.
    for term in list(merged):
        lo, hi = bounds(term)
        if lo == hi:
            const_ += lo * merged.pop(term)
    # (x // d) * k * d + (x % d) * k == x * k: a view of a view of contiguous data.
    for term in list(merged):
        if isinstance(term, Mod) and term in merged:
            k = merged[term]
            div = _as_term(_div(term.num, term.den))
            if merged.get(div) == k * term.den:
                del merged[term], merged[div]
                rest = term.num * k
                return _normalize(
                    tuple(merged.items()) + rest.terms, const_ + rest.const
                )
    ordered = sorted(
        ((t, c) for t, c in merged.items() if c != 0), key=lambda tc: render_term(tc[0])
    )
    return Index(tuple(ordered), const_)


def _as_term(e: Index) -> Term | None:
    """The one term ``e`` is (``x // 4`` for ``(x // 2) // 2``, as ``_div``
    writes it), or None."""
    if e.const == 0 and len(e.terms) == 1 and e.terms[0][1] == 1:
        return e.terms[0][0]
    return None


def _split_by_factor(e: Index, den: int) -> tuple[int, Index, Index] | None:
    """``(f, A, R)`` with ``e == f*A + R``, ``f`` dividing ``den``, ``0 <= R < f``."""
    factors = sorted({math.gcd(den, abs(c)) for _, c in e.terms} - {1}, reverse=True)
    for f in factors:
        big = tuple((t, c // f) for t, c in e.terms if c % f == 0)
        small = tuple((t, c) for t, c in e.terms if c % f != 0)
        rest = Index(small, e.const % f)
        lo, hi = bounds(rest)
        if lo >= 0 and hi < f:
            return f, _normalize(big, e.const // f), rest
    return None


def _div(e: Index, den: int) -> Index:
    if den == 1:
        return e
    lo, hi = bounds(e)
    if lo >= 0 and hi < den:
        return ZERO
    split = _split_by_factor(e, den)
    if split is not None:  # (f*A + R) // (f*m) == A // m when 0 <= R < f
        f, a, _ = split
        return _div(a, den // f)
    quotient = [(t, c // den) for t, c in e.terms if c % den == 0]
    rest = Index(tuple((t, c) for t, c in e.terms if c % den != 0), e.const % den)
    q = _normalize(tuple(quotient), e.const // den)
    if len(rest.terms) == 1 and rest.const == 0 and rest.terms[0][1] == 1:
        inner = rest.terms[0][0]
        if isinstance(inner, Div):  # (x // a) // b == x // (a * b)
            return q + _div(inner.num, inner.den * den)
    return q + Index(((Div(rest, den), 1),))


def _mod(e: Index, den: int) -> Index:
    if den == 1:
        return ZERO
    rest = Index(tuple((t, c) for t, c in e.terms if c % den != 0), e.const % den)
    rest = _normalize(rest.terms, rest.const)
    lo, hi = bounds(rest)
    if lo >= 0 and hi < den:
        return rest
    split = _split_by_factor(rest, den)
    if split is not None:  # (f*A + R) % (f*m) == f*(A % m) + R when 0 <= R < f
        f, a, r = split
        return _mod(a, den // f) * f + r
    return Index(((Mod(rest, den), 1),))


def substitute(e: Index, mapping: dict[str, Index]) -> Index:
    """``e`` with each variable named in ``mapping`` replaced by its index."""
    out = const(e.const)
    for term, coef in e.terms:
        out = out + _subst_term(term, mapping) * coef
    return out


def _subst_term(term: Term, mapping: dict[str, Index]) -> Index:
    if isinstance(term, Var):
        return mapping.get(term.name, Index(((term, 1),)))
    if isinstance(term, Indirect):
        return Index(((term, 1),))
    if isinstance(term, Div):
        return substitute(term.num, mapping) // term.den
    return substitute(term.num, mapping) % term.den


def map_indirect(e: Index, fn: Callable[[object], object]) -> Index:
    """``e`` with the value of each ``Indirect`` term replaced by ``fn(value)``."""
    if not indirect_terms(e):
        return e
    out = const(e.const)
    for term, coef in e.terms:
        if isinstance(term, Indirect):
            out = out + Index(((Indirect(fn(term.value), term.size), 1),)) * coef
        elif isinstance(term, Div):
            out = out + map_indirect(term.num, fn) // term.den * coef
        elif isinstance(term, Mod):
            out = out + map_indirect(term.num, fn) % term.den * coef
        else:
            out = out + Index(((term, 1),)) * coef
    return out


def indirect_terms(e: Index) -> list[Indirect]:
    """The ``Indirect`` terms of ``e``, nested ones included."""
    found = []
    for term, _ in e.terms:
        if isinstance(term, Indirect):
            found.append(term)
        elif isinstance(term, (Div, Mod)):
            found += indirect_terms(term.num)
    return found


Leaf = Callable[[Indirect], str]


def var_step(flat: Index, name: str) -> int | None:
    """How far ``flat`` moves when loop variable ``name`` grows by one, or None
    when it appears inside a division or modulo."""
    step = 0
    for term, coef in flat.terms:
        if isinstance(term, Var):
            step += coef if term.name == name else 0
        elif isinstance(term, (Div, Mod)) and var_step(term.num, name) != 0:
            return None
    return step


def unit_stride_dim(flats: Sequence[Index], sizes: Sequence[int]) -> int:
    """The loop dim (``i{d}``) along which the most memory the flat offsets
    ``flats`` cover is read or written by steps of exactly one element (it
    vectorizes): each offset counts the elements it spans over the loops (a
    per-channel vector read inside a whole tensor's loops counts its channels,
    not the tensor's size: it stays in cache whichever loop runs innermost).
    The last dim, unless another beats it; ties keep the last, and size-1 dims
    never win."""

    def footprint(flat: Index) -> int:
        return math.prod(n for d, n in enumerate(sizes) if var_step(flat, f"i{d}") != 0)

    def unit_steps(d: int) -> int:
        return sum(footprint(f) for f in flats if var_step(f, f"i{d}") == 1)

    last = len(sizes) - 1
    best = max((d for d in range(last) if sizes[d] > 1), key=unit_steps, default=last)
    return best if unit_steps(best) > unit_steps(last) else last


def render_term(term: Term, leaf: Leaf | None = None, floor_div: str = "/") -> str:
    if isinstance(term, Var):
        return term.name
    if isinstance(term, Indirect):
        return leaf(term) if leaf else f"[{term.value!r}]"
    op = floor_div if isinstance(term, Div) else "%"
    return f"(({render(term.num, leaf, floor_div)}) {op} {term.den})"


def render(e: Index, leaf: Leaf | None = None, floor_div: str = "/") -> str:
    """C source of a non-negative index; all variables are int64. ``leaf``
    writes each ``Indirect`` term (the C variable holding its value);
    ``floor_div="//"`` writes Python's (and Triton's) integer division."""
    parts = []
    for term, coef in e.terms:
        t = render_term(term, leaf, floor_div)
        parts.append(t if coef == 1 else f"{coef}*{t}")
    if e.const or not parts:
        parts.append(str(e.const))
    return " + ".join(parts).replace("+ -", "- ")
