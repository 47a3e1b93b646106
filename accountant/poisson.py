"""RDP of the Poisson-subsampled Gaussian mechanism (Mironov, Talwar & Zhang 2019), exact.

With ``mu0 = N(0, z^2)``, ``mu1 = N(1, z^2)`` and ``mu = (1 - q) mu0 + q mu1`` the mechanism is
``(alpha, log(A_alpha) / (alpha - 1))``-RDP (add/remove adjacency), where
``A_alpha = E_{mu0}[(mu / mu0)^alpha]`` (Mironov et al. 2019, Sec. 3).

Both paths compute ``A_alpha - 1`` directly, never ``A_alpha`` itself, so that the RDP of a
tiny sampling rate (``A_alpha - 1 ~ 1e-14``) keeps all its digits:

* integer ``alpha``: ``A - 1 = sum_{k>=2} C(alpha,k) q^k (1-q)^(alpha-k) (e^{k(k-1)/(2 z^2)} - 1)``
  (the binomial expansion with the ``k = 0, 1`` terms cancelled exactly; all terms >= 0);
* real ``alpha``: ``A - 1 = E_{mu0}[(1 + q w)^alpha - 1 - alpha q w]`` with ``w = mu1/mu0 - 1``
  (``E[w] = 0``); the integrand is >= 0 by Bernoulli's inequality and is integrated by the
  trapezoidal rule in log space over the region that carries the mass.  This is the exact
  divergence, not the series upper bound used by dp-accounting at fractional orders.
"""

from __future__ import annotations

import math

import numpy as np

from . import validation
from .logmath import log1p_exp, log_binomial_sums, log_expm1, logsumexp

__all__ = []


def _log_a_minus_1_int(orders: np.ndarray, q: float, z: float) -> np.ndarray:
    """log(A_alpha - 1) at integer orders, all at once:
    ``(1-q)^alpha sum_{k>=2} C(alpha,k) (q/(1-q))^k (e^{k(k-1)/(2z^2)} - 1)``."""
    k = np.arange(int(orders.max()) + 1, dtype=float)
    with np.errstate(divide="ignore"):
        t = log_expm1(k * (k - 1.0) / (2.0 * z * z))
    log1mq = math.log1p(-q)
    return log_binomial_sums(orders, math.log(q) - log1mq, t) + orders.astype(float) * log1mq


def _log_bernoulli_gap(a: float, t: np.ndarray) -> np.ndarray:
    """log((1 + t)^a - 1 - a t) for t > -1, a > 1 (non-negative by Bernoulli's inequality)."""
    out = np.empty_like(t)
    small = np.abs(a * t) < 0.05
    ts = t[small]
    if ts.size:
        # sum_{k>=2} C(a,k) t^k, generalized binomial coefficients; 14 terms reach 1e-17.
        coef = a * (a - 1.0) / 2.0
        acc = np.zeros_like(ts)
        p = ts * ts
        for kk in range(2, 16):
            acc += coef * p
            coef *= (a - kk) / (kk + 1.0)
            p = p * ts
        with np.errstate(divide="ignore", invalid="ignore"):
            out[small] = np.log(acc)
    tb = t[~small]
    if tb.size:
        big_a = a * np.log1p(tb)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            direct = np.log(np.expm1(np.minimum(big_a, 700.0)) - a * tb)
            huge = big_a + np.log1p(-(1.0 + a * tb) * np.exp(-np.maximum(big_a, 30.0)))
        out[~small] = np.where(big_a > 30.0, huge, direct)
    return out


def _log_a_minus_1_frac(a: float, q: float, z: float) -> float:
    """log(A_alpha - 1) by log-space trapezoid over y = x / z (standard normal units)."""
    log_q = math.log(q)

    def log_integrand(y):
        L = y / z - 1.0 / (2.0 * z * z)
        # t = q (e^L - 1), computed as -q(1 - e^L) or q e^L (1 - e^-L) without overflow
        with np.errstate(over="ignore"):
            t = np.where(L < 700.0, q * np.expm1(np.minimum(L, 700.0)), np.inf)
        lg = np.empty_like(y)
        fin = np.isfinite(t)
        lg[fin] = _log_bernoulli_gap(a, t[fin])
        # beyond exp overflow: log g = a log(q e^L) + log1p(...) ~ a (log q + L)
        lg[~fin] = a * (log_q + L[~fin])
        return lg - 0.5 * y * y

    # coarse scan: the mass sits near y ~ 0 and (for large alpha) near y ~ alpha / z
    y_hi = max(60.0, a / z + 60.0)
    coarse = np.arange(-60.0, y_hi, 0.25)
    gc = log_integrand(coarse)
    m = float(np.max(gc))
    if not m > -math.inf:       # every term underflows (huge z): A_alpha - 1 is below 1e-300
        return -math.inf
    keep = np.nonzero(gc > m - 80.0)[0]
    lo = coarse[max(keep[0] - 1, 0)]
    hi = coarse[min(keep[-1] + 1, coarse.size - 1)]
    # the trapezoid on the real line errs like e^(-2 pi d / h) for an integrand analytic in the
    # strip |Im y| < d: here (1 + q(e^L - 1))^alpha has its nearest branch points at
    # Im y = pi z, and the Gaussian factor grows by at most e^(d^2/2) there, so with d =
    # min(pi z, 5) the step h = min(0.1, z/12) leaves a relative error below e^(-100)
    h = min(0.1, z / 12.0)
    y = np.arange(lo, hi + h, h)
    g = log_integrand(y)
    return math.log(h) - 0.5 * math.log(2.0 * math.pi) + float(logsumexp(g))


#: the most points a real-order quadrature may take; beyond (tiny noise, where eps is huge
#: anyway: z < 6e-3 or alpha / z > 5e4), the chord bound below is used
QUADRATURE_POINTS = 200_000


def _quadrature_points(a: float, z: float) -> float:
    """Points of the coarse scan of :func:`_log_a_minus_1_frac`, or its fine step's worst case
    over a 100-wide range (both grow like ``alpha / z`` and ``1 / z``)."""
    return max((max(60.0, a / z + 60.0) + 60.0) / 0.25, 100.0 / min(0.1, z / 12.0))


def _log_a_minus_1_chord(a: float, q: float, z: float) -> float:
    """An upper bound on log(A_alpha - 1) at a real order from the neighbouring integer orders:
    ``log A_alpha`` is convex in alpha (a log moment generating function of the privacy loss), so
    it lies below its chord between ``floor(alpha)`` and ``floor(alpha) + 1`` (``A_1 = 1``)."""
    lo = math.floor(a)
    th = a - lo
    ends = np.array([float(lo), float(lo + 1)])
    la = np.zeros(2)
    ints = ends >= 2.0
    la[ints] = log1p_exp(_log_a_minus_1_int(ends[ints], q, z))
    log_a = (1.0 - th) * la[0] + th * la[1]
    return float(log_expm1(log_a)) if log_a > 0.0 else -math.inf


def poisson_gaussian_rdp(alpha, q, noise_multiplier):
    """RDP of the Poisson-subsampled Gaussian mechanism at order(s) ``alpha`` (exact).

    Mironov, Talwar & Zhang (2019): sample each record independently with probability ``q``,
    add ``N(0, z^2 Delta^2 I)`` to the sum of the sampled records' contributions (L2-sensitivity
    ``Delta`` under add/remove).  Returns ``log(A_alpha)/(alpha - 1)``.

    Formal guarantee: exact at integer and real orders (relative error <= 1e-10 against mpmath
    quadrature in the tested range alpha in (1, 4096], z >= 0.1, q in [1e-7, 1]).  Where a real
    order would need more than ``QUADRATURE_POINTS`` quadrature points (z < 6e-3 or alpha / z >
    5e4, where eps is astronomically large anyway), an upper bound: the chord of the convex
    ``log A_alpha`` between the neighbouring integer orders.

    Edge cases: ``q = 0`` -> 0; ``q = 1`` -> ``alpha / (2 z^2)`` (no amplification).

    Args:
        alpha: the order(s), each in (1, inf), scalar or array.
        q: the sampling probability, in [0, 1].
        noise_multiplier: ``z``, noise std / L2 sensitivity, in (0, inf).

    Returns:
        The RDP value(s): a float for a scalar ``alpha``, else an array shaped like ``alpha``.

    Raises:
        InputError: if an order, ``q`` or ``noise_multiplier`` is out of range.
    """
    a = validation.orders_array(alpha, "alpha")
    qq = validation.probability(q, "q")
    z = validation.positive(noise_multiplier, "noise_multiplier")
    flat = a.ravel()
    out = np.empty(flat.shape)
    if qq == 0.0:
        out[:] = 0.0
    elif qq == 1.0:
        out[:] = flat / (2.0 * z * z)
    else:
        is_int = flat == np.round(flat)
        lam1 = np.empty(flat.shape)
        if is_int.any():
            lam1[is_int] = _log_a_minus_1_int(flat[is_int], qq, z)
        for i in np.nonzero(~is_int)[0]:
            a_i = float(flat[i])
            if _quadrature_points(a_i, z) > QUADRATURE_POINTS:
                lam1[i] = _log_a_minus_1_chord(a_i, qq, z)
            else:
                lam1[i] = _log_a_minus_1_frac(a_i, qq, z)
        out[:] = log1p_exp(lam1) / (flat - 1.0)
    out = out.reshape(a.shape)
    return float(out) if out.ndim == 0 else out
