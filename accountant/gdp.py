"""Exact (eps, delta) of Gaussian differential privacy (Balle & Wang 2018; Dong, Roth & Su 2019).

A composition of Gaussian mechanisms with noise multipliers ``z_i`` (full batch, no sampling) is
exactly ``mu``-GDP with ``mu = sqrt(sum_i 1/z_i^2)``, and ``mu``-GDP is ``(eps, delta(eps))``-DP
with (Balle & Wang 2018, Thm 8)::

    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).

This is the exact privacy profile: no RDP conversion can give a smaller eps.  All three
functions work in log space (``scipy.special.log_ndtr``), so deltas down to 1e-300 and mu up to
several hundred are handled without underflow; below mu = 0.1 the two terms agree to all but their
last digits, and their log-ratio is integrated instead (:func:`gdp_log_delta`), so that mu down to the
smallest doubles keeps its eps (checked against mpmath in tests/test_extremes.py).
"""

from __future__ import annotations

import math
import sys

import numpy as np
from scipy import special

from . import validation
from .roots import brentq

__all__ = []


#: below this mu the two tails of the profile, ``log Phi(a)`` and ``eps + log Phi(b)``, agree to all but their
#: last digits (they differ by about ``mu / s``, ``s = eps / mu``): their difference is integrated instead
SMALL_MU = 0.1
_EPS = float(np.finfo(float).eps)
#: 8-point Gauss-Legendre nodes and weights on [-1, 1] (the integrand is smooth over a width below 0.1)
_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)


def _mills_excess(x: np.ndarray) -> np.ndarray:
    """``phi(x) / Phi(x) + x`` (> 0), to double precision at every x: from ``erfcx`` where the two terms
    do not cancel (``x >= -3 sqrt 2``), else from the Laplace continued fraction of ``erfcx`` (A&S 7.1.14),
    ``sqrt 2 * (1/2) / (y + 1 / (y + (3/2) / (y + ...)))`` with ``y = -x / sqrt 2``, which has no cancellation."""
    x = np.asarray(x, dtype=float)
    y = -x / math.sqrt(2.0)
    out = np.empty_like(x)
    near = y <= 3.0
    out[near] = math.sqrt(2.0 / math.pi) / special.erfcx(y[near]) + x[near]
    far, t = y[~near], np.zeros(int(np.count_nonzero(~near)))
    for k in range(60, 0, -1):
        t = (k / 2.0) / (far + t)
    out[~near] = math.sqrt(2.0) * t
    return out


def gdp_log_delta(eps: float, mu: float) -> float:
    """``log delta(eps)`` of ``mu``-GDP (no validation; eps >= 0, mu > 0).  ``delta = Phi(a) (1 - e^-D)`` with
    ``D = log Phi(a) - log Phi(b) - eps``; below :data:`SMALL_MU` the subtraction would cancel (and at
    ``mu`` below 1e-16 round to 0: delta 0, eps 0, where eps > 0), so ``D`` is the integral of
    ``phi/Phi + x`` over ``[b, a]`` (``d/dx log Phi = phi/Phi``; ``x`` integrates to ``-eps``).

    Args:
        eps: the privacy parameter epsilon, >= 0 (not checked).
        mu: the GDP parameter, > 0 (not checked).

    Returns:
        ``log delta(eps)`` as a float (``-inf`` where delta rounds to 0 relative to ``Phi(a)``).
    """
    a = -eps / mu + mu / 2.0
    b = -eps / mu - mu / 2.0
    la = float(special.log_ndtr(a))
    if mu < SMALL_MU:
        D = mu / 2.0 * float(np.dot(_GL_W, _mills_excess((a + b) / 2.0 + mu / 2.0 * _GL_X)))
        D *= 1.0 + 64.0 * _EPS                # (the quadrature's and the integrand's rounding, upward)
        return la + math.log(-math.expm1(-D)) if D > 0.0 else -math.inf
    lb = float(special.log_ndtr(b))
    # log of e^eps Phi(b) / Phi(a), < 0, lowered by the rounding of its three terms (4 ulps of each):
    # delta grows as it falls, so delta is never below the computed profile by its rounding
    diff = eps + lb - la - 4.0 * _EPS * (abs(la) + abs(lb) + eps)
    return la + (math.log(-math.expm1(diff)) if diff > -0.6931 else math.log1p(-math.exp(diff)))


def gdp_delta(eps, mu):
    """Exact ``delta`` of ``mu``-GDP at ``eps`` (Balle & Wang 2018, Thm 8).

    Args:
        eps: the privacy parameter epsilon, in [0, inf).
        mu: the GDP parameter, in (0, inf).

    Returns:
        ``delta(eps)`` as a float in [0, 1].

    Raises:
        InputError: if ``eps`` or ``mu`` is out of range.
    """
    e = validation.in_range(eps, "eps", 0.0, math.inf, high_open=True)
    m = validation.positive(mu, "mu")
    return math.exp(gdp_log_delta(e, m))


def gdp_epsilon(mu, delta):
    """Smallest ``eps >= 0`` with ``delta(eps) <= delta`` for ``mu``-GDP (root of the exact profile;
    0 for ``mu = 0``, inf for ``mu = inf``).

    Formal guarantee: the root is bracketed and refined by Brent's method to ~1e-15 relative and
    the upper end of the final bracket is returned, so ``gdp_delta(result, mu) <= delta``.

    Args:
        mu: the GDP parameter, in [0, inf].
        delta: the target delta, in (0, 1).

    Returns:
        The smallest ``eps`` (a float, ``>= 0``, possibly ``inf``).

    Raises:
        InputError: if ``mu`` or ``delta`` is out of range.
    """
    m = validation.in_range(mu, "mu", 0.0, math.inf)
    d = validation.delta(delta)
    if m == 0.0:                  # identical outputs (noise so large that mu underflowed)
        return 0.0
    if m == math.inf:             # no noise to speak of: eps beyond every float
        return math.inf
    ld = _log_target(d)
    if gdp_log_delta(0.0, m) <= ld:
        return 0.0
    f = lambda e: gdp_log_delta(e, m) - ld  # noqa: E731  (decreasing in e)
    # above: the RDP conversion's eps, mu^2/2 + mu sqrt(2 log(1/delta)) (+1 where mu >= SMALL_MU, as it always
    # was; below, +1 would leave Brent hundreds of halvings from a root near 1e-148 and it stopped far above)
    hi = m * m / 2.0 + m * math.sqrt(2.0 * -ld) + (1.0 if m >= SMALL_MU else 0.0)
    while f(hi) > 0:
        hi *= 2.0
    root = brentq(f, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
    return float(_conservative_side(f, root, +1.0))


def gdp_mu(eps, delta):
    """Largest ``mu`` such that ``mu``-GDP is ``(eps, delta)``-DP (root in mu; delta increases with mu).

    Formal guarantee: ``gdp_delta(eps, result) <= delta``.

    Args:
        eps: the privacy parameter epsilon, in [0, inf).
        delta: the target delta, in (0, 1).

    Returns:
        The largest ``mu`` (a float, > 0).

    Raises:
        InputError: if ``eps`` or ``delta`` is out of range.
    """
    e = validation.in_range(eps, "eps", 0.0, math.inf, high_open=True)
    d = validation.delta(delta)
    ld = _log_target(d)
    f = lambda lm: gdp_log_delta(e, math.exp(lm)) - ld  # noqa: E731  (increasing in log mu)
    lo, hi = -1.0, 1.0
    while f(lo) > 0:
        lo -= 2.0
    while f(hi) < 0:
        hi += 2.0
    root = brentq(f, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    return float(math.exp(_conservative_side(lambda x: f(x), root, -1.0)))


def _log_target(d: float) -> float:
    """``log(d)`` lowered by the rounding error of ``exp(log(.))``, so that a root found in log
    space also satisfies ``gdp_delta(...) <= d`` after exponentiation."""
    ld = math.log(d)
    return ld - 4.0 * np.finfo(float).eps * max(1.0, abs(ld))


def _conservative_side(f, root: float, direction: float) -> float:
    """Move ``root`` in ``direction`` by growing relative steps until ``f(root) <= 0``.

    Brent's root may sit on the wrong side of the exact root by a few ulps; this guarantees the
    returned point satisfies the privacy constraint.  Steps grow geometrically, so this ends in
    a few iterations even where the function is flat or the root is at 0.
    """
    # (relative steps from the root's own size: a floor of 1e-12 moved a root near 1e-148 to 2e-28)
    step = (abs(root) if root != 0.0 else sys.float_info.min) * np.finfo(float).eps
    x = root
    while f(x) > 0:
        x = root + direction * step
        step *= 2.0
    return x
