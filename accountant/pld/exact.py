"""The exact bracket of ``eps(delta)`` for compositions of finite pairs on one lattice: randomized
response, discrete Laplace and pure-DP pairs (:class:`~.lossdist.FinitePair`) whose finite losses are
integer multiples of one unit ``u`` compose into a finite pair on the lattice ``u Z`` -- the product
of the P-measures, the losses added (Dwork & Rothblum 2016; Kairouz, Oh & Viswanath 2015 Thm 3.3 for
k-fold randomized response).  No grid: the composed P-masses are direct convolutions of non-negative
masses (each composed mass within ``3 K`` ulp relative of the exact one, K the steps), and

    ``delta(eps) = P(L = +inf) + sum_(l > eps) P(L = l) (1 - e^(eps - l))``

is a sum of non-negative terms.  The bracket's ends are the roots of ``delta(eps) = target (1 -+ 1e-9)``,
so each end holds whatever the round-off (far below 1e-9) does.  The arguments are trusted: the
queries of :mod:`.queries` check them once.
"""

from __future__ import annotations

import math

import numpy as np

from .lossdist import FinitePair
from .pairs import EpsilonBracket, directions, dominating_pairs

__all__ = []

#: the most lattice points a composition may span (beyond: the grid answers)
MAX_POINTS = 1 << 13
#: the relative slack of each end's delta (round-off is below 1e-12 for MAX_POINTS-point compositions)
SLACK = 1e-9
#: the error allowed each unit loss (absolute) and each product ``n u`` (relative): 16 ulp of 1
LOSS_ERR = 2.0 ** -48


def lattice_bracket(ev, d: float):
    """The exact bracket of ``eps(d)`` where every event has one finite pair on a common lattice, else None.

    Args:
        ev: a tuple of checked ``(event, count)`` pairs, not empty.
        d: the target delta (checked).

    Returns:
        An :class:`~.pairs.EpsilonBracket` (``discretization`` 0.0, converged), or None where an event
        has another pair or the lattice would span more than ``MAX_POINTS`` points.
    """
    lower = upper = 0.0
    for direction in directions(ev):
        pm = _composed(ev, direction)
        if pm is None:
            return None
        losses, p, p_inf, u = pm
        # each loss is known to LOSS_ERR: the unit's own log(p / q) to LOSS_ERR absolute (relative where
        # p / q is near 1: a unit of 0.001 is known to ~1e-16, 500 of its ulps), times the n units of
        # the loss, and the product n u to LOSS_ERR relative; moved out by that (at a delta of 1e-8 a
        # single randomized response's root sits 2e-8 below its atom, where 1e-16 is 1e-8 of delta)
        shift = np.abs(losses) * (1.0 / u + 1.0) * LOSS_ERR
        lower = max(lower, _root(losses - shift, p, p_inf, d * (1.0 + SLACK), "lower"))
        upper = max(upper, _root(losses + shift, p, p_inf, d * (1.0 - SLACK), "upper"))
    return EpsilonBracket(lower, upper, d, 0.0, True, ("exact: finite pairs composed on their lattice",))


def _composed(ev, direction):
    """``(losses, P-masses, P(L = +inf), unit)`` of the composition on the lattice, or None."""
    pairs = []
    for e, k in ev:
        ps = dominating_pairs(e, direction)
        if len(ps) != 1 or not isinstance(ps[0], FinitePair):
            return None
        pairs.append((ps[0], k))
    finite = [np.isfinite(np.asarray(pr.losses, dtype=float)) for pr, _ in pairs]
    ls = np.concatenate([np.asarray(pr.losses, dtype=float)[f] for (pr, _), f in zip(pairs, finite)])
    nz = np.abs(ls[ls != 0.0])
    u = float(nz.min()) if nz.size else 1.0
    span, parts, log_fin = 0, [], 0.0
    for (pr, k), f in zip(pairs, finite):
        l = np.asarray(pr.losses, dtype=float)[f]
        p = np.asarray(pr.p, dtype=float)[f]
        n = np.round(l / u)
        if np.any(np.abs(l / u - n) > 1e-12 * np.maximum(1.0, np.abs(n))):
            return None                          # not on the lattice
        n = n.astype(np.int64)
        lo, hi = (int(n.min()), int(n.max())) if n.size else (0, 0)     # (no finite atom: all at +inf)
        span += k * (hi - lo)
        if span >= MAX_POINTS:
            return None
        m = np.zeros(hi - lo + 1)
        np.add.at(m, n - lo, p)
        parts.append((m, lo, k))
        p_inf = float(np.sum(np.asarray(pr.p, dtype=float)[np.asarray(pr.losses, dtype=float) == math.inf]))
        log_fin += k * math.log1p(-min(p_inf, 1.0)) if p_inf < 1.0 else -math.inf
    total, start = np.ones(1), 0
    for m, lo, k in parts:
        total, start = np.convolve(total, _power(m, k)), start + lo * k
    keep = total > 0.0
    return (start + np.flatnonzero(keep)) * u, total[keep], -math.expm1(log_fin), u


def _power(m, k: int):
    """``m`` convolved with itself ``k`` times (direct convolutions by squaring: non-negative terms)."""
    out, base = np.ones(1), m
    while k:
        if k & 1:
            out = np.convolve(out, base)
        k >>= 1
        if k:
            base = np.convolve(base, base)
    return out


def _delta(losses, p, p_inf: float, eps: float) -> float:
    """``delta(eps)`` of the composed pair: a sum of non-negative terms."""
    above = losses > eps
    return p_inf + float(np.sum(p[above] * -np.expm1(eps - losses[above])))


def _root(losses, p, p_inf: float, target: float, side: str) -> float:
    """The root of ``delta(eps) = target`` over ``eps >= 0``: for ``side="upper"`` a point where the sum
    confirms ``delta <= target``, for ``"lower"`` one where it confirms ``delta >= target`` (0 where
    ``delta(0) <= target``; inf where ``P(L = +inf) > target``).

    Between two atoms ``delta(eps) = A - e^eps B`` (``A``, ``B`` the sums of ``p`` and ``p e^(-l)``
    above them): the root is ``log((A - target) / B)``, confirmed by the sum, else bisected."""
    if p_inf > target:
        return math.inf
    if _delta(losses, p, p_inf, 0.0) <= target:
        return 0.0
    pos = losses > 0.0
    lp, pp = losses[pos], p[pos]
    # the atoms around the root: delta at each atom from suffix sums (A - e^l B: a guess near a
    # cancellation), confirmed by the sum at the two atoms, else bisected over the atoms by the sum
    A_s = p_inf + np.cumsum(pp[::-1])[::-1]
    B_s = np.cumsum((pp * np.exp(-lp))[::-1])[::-1]
    guess = np.concatenate((A_s[1:] - np.exp(lp[:-1]) * B_s[1:], [p_inf]))   # delta(lp[j])
    hi = int(np.argmax(guess <= target))
    lo = hi - 1
    if not (_delta(losses, p, p_inf, float(lp[hi])) <= target
            and (lo < 0 or _delta(losses, p, p_inf, float(lp[lo])) > target)):
        lo, hi = -1, lp.size - 1          # delta(lp[lo]) > target (lo = -1: at 0); delta(lp[hi]) = p_inf <= target
        while hi - lo > 1:                # (delta is non-increasing)
            mid = (lo + hi) // 2
            if _delta(losses, p, p_inf, float(lp[mid])) > target:
                lo = mid
            else:
                hi = mid
    left, right = (float(lp[lo]) if lo >= 0 else 0.0), float(lp[hi])
    A, B = p_inf + float(np.sum(pp[hi:])), float(np.sum(pp[hi:] * np.exp(-lp[hi:])))
    c = min(max(math.log((A - target) / B), left), right) if A > target and B > 0.0 else right
    c = min(c * (1.0 + 2.0 ** -50) + 1e-300, right) if side == "upper" else max(c * (1.0 - 2.0 ** -50), left)
    ok = (lambda x: _delta(losses, p, p_inf, x) <= target) if side == "upper" else \
        (lambda x: _delta(losses, p, p_inf, x) >= target)
    if ok(c):
        return c
    a, b = (c, right) if side == "upper" else (left, c)    # ok(b) for upper, ok(a) for lower
    for _ in range(200):
        mid = 0.5 * (a + b)
        if mid <= a or mid >= b:
            break
        if (_delta(losses, p, p_inf, mid) <= target) == (side == "upper"):
            b, a = (mid, a) if side == "upper" else (b, mid)
        else:
            a, b = (mid, b) if side == "upper" else (a, mid)
    return b if side == "upper" else a
