"""Closed forms for the non-Gaussian kinds (issue 74, acceptance 2): the oracles dpcalib's brackets are
held to.  Every one is delta(eps) of the k-fold composition, computed exactly (mpmath at high precision,
or sums of non-negative terms in log space), so that ``lower <= eps <= upper`` reads as
``delta(upper) <= target <= delta(lower)``.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
from scipy import special


def _lower_gamma(r: int, z):
    """gamma(r, z) = (r-1)! (1 - e^-z sum_{i<r} z^i / i!) for integer r (entire in z)."""
    s, term = mp.mpf(0), mp.mpf(1)
    for i in range(r):
        s += term
        term = term * z / (i + 1)
    return mp.factorial(r - 1) * (1 - mp.exp(-z) * s)


def _int_power_exp(a, X, r: int):
    """int_0^X s^(r-1) e^(a s) ds."""
    return (-a) ** (-r) * _lower_gamma(r, -a * X)


def laplace_delta(k: int, b: float, eps: float, dps: int = 80) -> float:
    """delta(eps) of k Laplace releases of scale b (sensitivity 1), exactly.

    Under P each step's loss is ``lam V`` (``lam = 1/b``), ``V = 1 - 2 B min(E, 1)`` with ``B`` a fair
    coin and ``E ~ Exp(lam)``; so ``S = sum V = k - 2 (m + t)``: ``n`` coins up, ``m`` of their ``E``
    past 1, the other ``r = n - m`` summing to ``t`` with density ``lam^r e^(-lam t) IH_r(t)`` (IH_r:
    the Irwin-Hall density of r uniforms on [0, 1]).  ``delta = E_P[(1 - e^(eps - lam S))_+]``, each
    piece integrated in closed form.
    """
    with mp.workdps(dps):
        lam, e = mp.mpf(1) / mp.mpf(b), mp.mpf(eps)
        c = (k - e / lam) / 2                      # lam S > eps  <=>  m + t < c
        total = mp.mpf(0)
        for n in range(k + 1):
            wn = mp.binomial(k, n) / mp.mpf(2) ** k
            for m in range(n + 1):
                if m >= c:
                    break
                r = n - m
                w = wn * mp.binomial(n, m) * mp.exp(-lam * m)
                A = mp.exp(e - lam * k + 2 * lam * m)
                if r == 0:
                    total += w * (1 - A)
                    continue
                U = min(c - m, r)
                s = mp.mpf(0)
                for j in range(r + 1):
                    if j >= U:
                        break
                    X = U - j
                    coef = (-1) ** j * mp.binomial(r, j) / mp.factorial(r - 1)
                    s += coef * (mp.exp(-lam * j) * _int_power_exp(-lam, X, r)
                                 - A * mp.exp(lam * j) * _int_power_exp(lam, X, r))
                total += w * lam ** r * s
        return float(total)


def pure_delta(k: int, eps0: float, eps: float, delta0: float = 0.0) -> float:
    """delta(eps) of k (eps0, delta0)-DP releases composed: Kairouz, Oh & Viswanath 2015, Thm 3.3 (the
    optimal composition; for delta0 = 0 it is k-fold binary randomized response).  Log-space sums of
    non-negative terms: exact to double rounding at any k (1e6 included)."""
    i = np.arange(k + 1, dtype=float)
    loss = eps0 * (k - 2 * i)
    keep = loss > eps
    if not keep.any():
        pure = 0.0
    else:
        i = i[keep]
        lp, lq = -np.logaddexp(0.0, -eps0), -np.logaddexp(0.0, eps0)      # log p_hi, log p_lo
        lb = special.gammaln(k + 1) - special.gammaln(i + 1) - special.gammaln(k - i + 1)
        logP = lb + (k - i) * lp + i * lq
        # term = P_i (1 - e^(eps - loss_i)) >= 0
        pure = float(np.sum(np.exp(logP) * -np.expm1(eps - eps0 * (k - 2 * i))))
    return float(-np.expm1(k * np.log1p(-delta0) + np.log1p(-pure)))     # 1 - (1 - d0)^k (1 - pure)


def rr_delta(k: int, p: float, buckets: int, eps: float) -> float:
    """delta(eps) of k releases of randomized response (noise p, buckets): the trinomial of the pair
    (loss eps0 with mass 1 - p + p/B, -eps0 with p/B, 0 with the rest), exactly."""
    hi, lo = 1 - p + p / buckets, p / buckets
    mid = 1.0 - hi - lo
    e0 = math.log(hi / lo)
    tot = 0.0
    lf = special.gammaln
    for a in range(k + 1):
        c = np.arange(0, k - a + 1)
        loss = e0 * (a - c)
        keep = loss > eps
        if not keep.any():
            continue
        c = c[keep]
        lw = lf(k + 1) - lf(a + 1) - lf(c + 1) - lf(k - a - c + 1)
        rest = k - a - c
        with np.errstate(divide="ignore", invalid="ignore"):
            logP = lw + a * math.log(hi) + c * math.log(lo) + np.where(
                rest == 0, 0.0, rest * (math.log(mid) if mid > 0 else -np.inf))
        tot += float(np.sum(np.exp(logP) * -np.expm1(eps - e0 * (a - c))))
    return tot
