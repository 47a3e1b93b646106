"""Bracketing root finding and 1-D minimisation without importing scipy.optimize.

scipy.optimize costs ~0.4 s to import (it pulls in scipy.linalg), which dominated the start-up of
the command line; these two classic algorithms are all the accountant needs.
"""

from __future__ import annotations

import math

__all__ = ["brentq", "golden_min"]

_EPS = 2.220446049250313e-16


def brentq(f, a: float, b: float, xtol: float = 1e-14, rtol: float = 4 * _EPS, maxiter: int = 200) -> float:
    """Brent's method (Brent 1973, "zeroin") for a root of ``f`` in ``[a, b]`` with ``f(a) f(b) <= 0``.

    Converges superlinearly on smooth functions and never leaves the bracket (falls back to
    bisection), so it always terminates with ``|b - a| <= 2 (xtol + rtol |x|)``.
    """
    fa, fb = f(a), f(b)
    if fa == 0:
        return a
    if fb == 0:
        return b
    if (fa > 0) == (fb > 0):
        raise ValueError(f"brentq: f(a)={fa!r} and f(b)={fb!r} must have opposite signs.")
    c, fc = a, fa
    d = e = b - a
    for _ in range(maxiter):
        if (fb > 0) == (fc > 0):
            c, fc = a, fa
            d = e = b - a
        if abs(fc) < abs(fb):
            a, b, c = b, c, b
            fa, fb, fc = fb, fc, fb
        tol = 2.0 * _EPS * abs(b) + 0.5 * (xtol + rtol * abs(b))
        m = 0.5 * (c - b)
        if abs(m) <= tol or fb == 0:
            return b
        if abs(e) >= tol and abs(fa) > abs(fb):
            s = fb / fa
            if a == c:  # secant
                p, q = 2.0 * m * s, 1.0 - s
            else:  # inverse quadratic interpolation
                q, r = fa / fc, fb / fc
                p = s * (2.0 * m * q * (q - r) - (b - a) * (r - 1.0))
                q = (q - 1.0) * (r - 1.0) * (s - 1.0)
            if p > 0:
                q = -q
            p = abs(p)
            if 2.0 * p < min(3.0 * m * q - abs(tol * q), abs(e * q)):
                e, d = d, p / q
            else:
                d = e = m
        else:
            d = e = m
        a, fa = b, fb
        b += d if abs(d) > tol else math.copysign(tol, m)
        fb = f(b)
    return b


def golden_min(f, lo: float, hi: float, xtol: float = 1e-12, maxiter: int = 300):
    """Golden-section search for the minimum of a unimodal ``f`` on ``[lo, hi]``: ``(x, f(x))``."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(maxiter):
        if hi - lo <= xtol * max(1.0, abs(x1)):
            break
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = f(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = f(x2)
    return (x1, f1) if f1 <= f2 else (x2, f2)
