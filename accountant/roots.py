"""Bracketing root finding and 1-D minimisation without importing scipy.optimize.

scipy.optimize costs ~0.4 s to import (it pulls in scipy.linalg), which dominated the start-up of
the command line -- and the first calibration of a process, which refines the RDP order once; these
three classic algorithms are all the accountant needs.
"""

from __future__ import annotations

import math

from .validation import InputError

__all__ = ["brentq", "golden_min", "bounded_min"]

_EPS = 2.220446049250313e-16


def brentq(f, a: float, b: float, xtol: float = 1e-14, rtol: float = 4 * _EPS, maxiter: int = 200) -> float:
    """Brent's method (Brent 1973, "zeroin") for a root of ``f`` in ``[a, b]`` with ``f(a) f(b) <= 0``.

    Converges superlinearly on smooth functions and never leaves the bracket (falls back to
    bisection), so it always terminates with ``|b - a| <= 2 (xtol + rtol |x|)``.

    Args:
        f: a continuous function of one float, returning a float.
        a: the lower end of the bracket.
        b: the upper end of the bracket.
        xtol: the absolute tolerance on the root.
        rtol: the relative tolerance on the root.
        maxiter: the most iterations; the current estimate is returned when they run out.

    Returns:
        The root estimate (a float within the bracket).

    Raises:
        ValueError: if ``f(a)`` and ``f(b)`` are both non-zero and of the same sign.
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
    """Golden-section search for the minimum of a unimodal ``f`` on ``[lo, hi]``: ``(x, f(x))``.

    Args:
        f: a unimodal function of one float, returning a float.
        lo: the lower end of the interval.
        hi: the upper end of the interval.
        xtol: the relative (to ``max(1, |x|)``) width of the final interval.
        maxiter: the most iterations.

    Returns:
        A tuple ``(x, f(x))``: the best point found and its value.
    """
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


def bounded_min(f, lo: float, hi: float, xatol: float = 1e-5, maxiter: int = 500):
    """Brent's bounded minimisation of ``f`` on ``[lo, hi]``: ``(x, f(x), converged)``.

    Golden-section steps safeguarding parabolic interpolation through the three best points
    (Brent 1973, "Algorithms for minimization without derivatives", ch. 5, procedure *localmin*;
    the Fortran ``fmin`` of Forsythe, Malcolm & Moler 1977).  The step sequence is the one of
    ``scipy.optimize.minimize_scalar(method="bounded")`` -- the same tolerances
    ``tol1 = sqrt(2.2e-16) |x| + xatol / 3`` and the same updates -- so it returns the same
    point, without the ~0.4 s import.  ``converged`` is False when ``maxiter`` evaluations ran out
    or a value was NaN.

    Args:
        f: a function of one float, returning a float.
        lo: the lower bound, finite.
        hi: the upper bound, finite, ``>= lo``.
        xatol: the absolute tolerance on ``x``.
        maxiter: the most evaluations of ``f``.

    Returns:
        A tuple ``(x, f(x), converged)``: the minimiser found, its value, and a bool.

    Raises:
        InputError: if a bound is not finite or ``lo > hi``.
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise InputError(f"bounded_min: bounds ({lo!r}, {hi!r}) must be finite with lo <= hi.")
    sqrt_eps = math.sqrt(2.2e-16)
    golden = 0.5 * (3.0 - math.sqrt(5.0))
    a, b = lo, hi
    v = w = x = a + golden * (b - a)        # x: best so far; w: second best; v: previous w
    fx = f(x)
    fv = fw = fx
    d = e = 0.0                             # the last step and the one before it
    fu = math.inf
    n = 1
    xm = 0.5 * (a + b)
    tol1 = sqrt_eps * abs(x) + xatol / 3.0
    tol2 = 2.0 * tol1
    ok = True
    while abs(x - xm) > tol2 - 0.5 * (b - a):
        take_golden = True
        if abs(e) > tol1:                   # try the parabola through v, w, x
            take_golden = False
            r = (x - w) * (fx - fv)
            q = (x - v) * (fx - fw)
            p = (x - v) * q - (x - w) * r
            q = 2.0 * (q - r)
            if q > 0.0:
                p = -p
            q = abs(q)
            r, e = e, d
            if abs(p) < abs(0.5 * q * r) and q * (a - x) < p < q * (b - x):
                d = p / q
                u = x + d
                if u - a < tol2 or b - u < tol2:        # too close to an end: a minimal step
                    d = tol1 * (1.0 if xm >= x else -1.0)
            else:
                take_golden = True
        if take_golden:
            e = (a - x) if x >= xm else (b - x)
            d = golden * e
        step = max(abs(d), tol1)
        u = x + (step if d >= 0.0 else -step)
        fu = f(u)
        n += 1
        if fu <= fx:
            if u >= x:
                a = x
            else:
                b = x
            v, fv = w, fw
            w, fw = x, fx
            x, fx = u, fu
        else:
            if u < x:
                a = u
            else:
                b = u
            if fu <= fw or w == x:
                v, fv = w, fw
                w, fw = u, fu
            elif fu <= fv or v == x or v == w:
                v, fv = u, fu
        xm = 0.5 * (a + b)
        tol1 = sqrt_eps * abs(x) + xatol / 3.0
        tol2 = 2.0 * tol1
        if n >= maxiter:
            ok = False
            break
    if math.isnan(x) or math.isnan(fx) or math.isnan(fu):
        ok = False
    return x, fx, ok
