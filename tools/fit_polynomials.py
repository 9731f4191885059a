"""Print the polynomial coefficients of codegen's float32 erf and tanh
(``ember_erf`` and ``ember_tanh`` in ember_codegen/cpp_expr.py), as the C++
lines that evaluate them.

erf(x) = x + x * S(x^2) for |x| < 0.75 (degree 7 in x^2), and P(a - 1.375) on
[0.75, 2), Q(a - 3) on [2, 4) (degree 12; a = |x|, the subtractions exact);
erf rounds to 1.0f from 3.92 on. tanh(x) = x + x^3 * T(x^2) for |x| < 0.7
(degree 5 in x^2). Each is a least-squares fit at 400 Chebyshev nodes of the
function computed with mpmath at 40 digits, with the coefficients rounded to
float32 one at a time from the lowest, the rest fitted again after each.
Run: ``python tools/fit_polynomials.py``.
"""

from __future__ import annotations

import mpmath
import numpy as np

mpmath.mp.dps = 40
NODES = np.cos(np.pi * (np.arange(400) + 0.5) / 400)  # on [-1, 1]


def erf(values: np.ndarray) -> np.ndarray:
    return np.array([float(mpmath.erf(v)) for v in values])


def tanh(values: np.ndarray) -> np.ndarray:
    return np.array([float(mpmath.tanh(v)) for v in values])


def fit_float32(t: np.ndarray, f: np.ndarray, degree: int) -> list[float]:
    """Coefficients in powers of ``t``, each rounded to float32 in turn: the
    rounding error of one is fitted away by the ones after it."""
    fixed: list[float] = []
    rest = f.copy()
    for k in range(degree + 1):
        powers = np.stack([t**j for j in range(k, degree + 1)], axis=1)
        fit, *_ = np.linalg.lstsq(powers, rest, rcond=None)
        fixed.append(float(np.float32(fit[0])))
        rest = rest - fixed[-1] * t**k
    return fixed


def near_zero(function, cut: float, degree: int, cubic: bool) -> list[float]:
    """R with function(x) = x + x * R(x^2) on |x| < cut, in powers of u = x^2;
    with ``cubic``, function(x) = x + x^3 * R(x^2) instead."""
    u = cut * cut / 2 * (1 + NODES)
    x = np.sqrt(u)
    rest = function(x) / x - 1
    return fit_float32(u, rest / u if cubic else rest, degree)


def around(centre: float, half: float, degree: int) -> list[float]:
    """P with erf(a) = P(a - centre) for a within ``half`` of ``centre``."""
    t = half * NODES
    return fit_float32(t, erf(centre + t), degree)


def horner(var: str, name: str, coefs, other=None) -> list[str]:
    """C++ lines evaluating a polynomial by Horner's rule; with ``other``, each
    coefficient is a select between two polynomials on ``far``."""

    def literal(value: float) -> str:
        return float(value).hex().replace("0000000p", "p") + "f"

    def pick(k: int) -> str:
        if other is None:
            return literal(coefs[k])
        return f"far ? {literal(other[k])} : {literal(coefs[k])}"

    last = len(coefs) - 1
    lines = [f"  float {name} = {pick(last)};"]
    lines += [
        f"  {name} = EMBER_FMA({name}, {var}, {pick(k)});"
        for k in range(last - 1, -1, -1)
    ]
    return lines


def main() -> None:
    print("// ember_erf")
    lines = horner("u", "s", near_zero(erf, 0.75, 7, cubic=False))
    lines += horner("t", "p", around(1.375, 0.625, 12), around(3.0, 1.0, 12))
    print("\n".join(lines))
    print("// ember_tanh")
    print("\n".join(horner("u", "p", near_zero(tanh, 0.7, 5, cubic=True))))


if __name__ == "__main__":
    main()
