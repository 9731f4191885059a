"""Print the polynomial coefficients of codegen's float32 erf (``ember_erf`` in
ember_codegen/cpp_expr.py), as C++ hex literals.

erf(x) = x * S(x^2) for |x| < 0.5 (degree 6 in x^2), and P(t) on [0.5, 2) and
[2, 4) (degree 12 in t, the interval mapped onto [-1, 1]); erf rounds to 1.0f
from 3.92 on. Each is a least-squares fit at 400 Chebyshev nodes of erf computed
with mpmath at 40 digits. Run: ``python tools/fit_erf.py``.
"""

from __future__ import annotations

import mpmath
import numpy as np
from numpy.polynomial import chebyshev, polynomial

mpmath.mp.dps = 40
NODES = np.cos(np.pi * (np.arange(400) + 0.5) / 400)  # on [-1, 1]


def erf(values: np.ndarray) -> np.ndarray:
    return np.array([float(mpmath.erf(v)) for v in values])


def near_zero() -> np.ndarray:
    """S with erf(x) = x * S(x^2) on |x| < 0.5, in powers of u = x^2."""
    u = 0.125 + 0.125 * NODES
    x = np.sqrt(u)
    return polynomial.polyfit(u, erf(x) / x, 6)


def on_interval(lo: float, hi: float) -> np.ndarray:
    """P with erf(x) = P(t), t = (x - centre) / half-width, in powers of t."""
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    fit = chebyshev.chebfit(NODES, erf(centre + half * NODES), 12)
    return chebyshev.cheb2poly(fit)


def horner(var: str, name: str, coefs, other=None) -> list[str]:
    """C++ lines evaluating a polynomial by Horner's rule; with ``other``, each
    coefficient is a select between two polynomials on ``far``."""

    def pick(k: int) -> str:
        if other is None:
            return float(coefs[k]).hex()
        return f"far ? {float(other[k]).hex()} : {float(coefs[k]).hex()}"

    last = len(coefs) - 1
    lines = [f"  double {name} = {pick(last)};"]
    lines += [
        f"  {name} = EMBER_FMA({name}, {var}, {pick(k)});"
        for k in range(last - 1, -1, -1)
    ]
    return lines


def main() -> None:
    lines = horner("u", "s", near_zero())
    lines += horner("t", "p", on_interval(0.5, 2.0), on_interval(2.0, 4.0))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
