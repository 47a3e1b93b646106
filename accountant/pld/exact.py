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
    """``(losses, P-masses, P(L = +inf), unit)`` of the composition on the lattice, or None.  The
    few atoms of each pair are read in Python (exact: a minimum, roundings, comparisons); the
    compositions are numpy's convolutions."""
    pairs = []
    for e, k in ev:
        ps = dominating_pairs(e, direction)
        if len(ps) != 1 or not isinstance(ps[0], FinitePair):
            return None
        pairs.append((ps[0], k))
    u = min((abs(l) for pr, _ in pairs for l in pr.losses if l != 0.0 and math.isfinite(l)), default=1.0)
    span, total, start, log_fin = 0, None, 0, 0.0
    for pr, k in pairs:
        atoms = [(l / u, p) for l, p in zip(pr.losses, pr.p) if math.isfinite(l)]
        if not all(math.isfinite(x) for x, _ in atoms):
            return None                          # (a loss beyond the lattice's range)
        n = [round(x) for x, _ in atoms]
        if any(abs(x - j) > 1e-12 * max(1.0, abs(j)) for (x, _), j in zip(atoms, n)):
            return None                          # not on the lattice
        lo, hi = (min(n), max(n)) if n else (0, 0)     # (no finite atom: all at +inf)
        span += k * (hi - lo)
        if span >= MAX_POINTS:
            return None
        m = np.zeros(hi - lo + 1)
        for j, (_, p) in zip(n, atoms):
            m[j - lo] += p
        power = _power(m, k)
        total, start = (power if total is None else np.convolve(total, power)), start + lo * k
        p_inf = float(np.add.reduce(np.array([p for l, p in zip(pr.losses, pr.p) if l == math.inf])))
        log_fin += k * math.log1p(-min(p_inf, 1.0)) if p_inf < 1.0 else -math.inf
    keep = total > 0.0
    return (start + np.flatnonzero(keep)) * u, total[keep], -math.expm1(log_fin), u


def _power(m, k: int):
    """``m`` convolved with itself ``k`` times, ``k >= 1`` (direct convolutions by squaring:
    non-negative terms)."""
    out, base = None, m
    while k:
        if k & 1:
            out = base if out is None else np.convolve(out, base)
        k >>= 1
        if k:
            base = np.convolve(base, base)
    return out


def _delta(losses, p, p_inf: float, eps: float) -> float:
    """``delta(eps)`` of the composed pair: a sum of non-negative terms (``losses`` increasing: those
    above ``eps`` are a suffix; the sum of ``p (e^(eps - l) - 1)`` is subtracted, the sum of the
    negated terms exactly)."""
    i = losses.searchsorted(eps, "right")
    return p_inf - float(np.add.reduce(p[i:] * np.expm1(eps - losses[i:])))


def _root(losses, p, p_inf: float, target: float, side: str) -> float:
    """The root of ``delta(eps) = target`` over ``eps >= 0``: for ``side="upper"`` a point where the sum
    confirms ``delta <= target``, for ``"lower"`` one where it confirms ``delta >= target`` (0 where
    ``delta(0) <= target``; inf where ``P(L = +inf) > target``).  ``losses`` increasing.

    Between two atoms ``delta(eps) = A - e^eps B`` (``A``, ``B`` the sums of ``p`` and ``p e^(-l)``
    above them): the root is ``log((A - target) / B)``, confirmed by the sum, else bisected."""
    if p_inf > target:
        return math.inf
    pos = losses.searchsorted(0.0, "right")
    lp, pp = losses[pos:], p[pos:]          # the positive losses: every delta below is at eps >= 0
    if _delta(lp, pp, p_inf, 0.0) <= target:
        return 0.0
    # the atoms around the root: delta at each atom from suffix sums (A - e^l B: a guess near a
    # cancellation), confirmed by the sum at the two atoms, else bisected over the atoms by the sum
    A_s = p_inf + pp[::-1].cumsum()[::-1]
    B_s = (pp * np.exp(-lp))[::-1].cumsum()[::-1]
    guess = A_s[1:] - np.exp(lp[:-1]) * B_s[1:]                  # delta(lp[j]), j < last; delta(last) = p_inf
    below = np.flatnonzero(guess <= target)
    hi = int(below[0]) if below.size else lp.size - 1
    lo = hi - 1
    if not (_delta(lp, pp, p_inf, float(lp[hi])) <= target
            and (lo < 0 or _delta(lp, pp, p_inf, float(lp[lo])) > target)):
        lo, hi = -1, lp.size - 1          # delta(lp[lo]) > target (lo = -1: at 0); delta(lp[hi]) = p_inf <= target
        while hi - lo > 1:                # (delta is non-increasing)
            mid = (lo + hi) // 2
            if _delta(lp, pp, p_inf, float(lp[mid])) > target:
                lo = mid
            else:
                hi = mid
    left, right = (float(lp[lo]) if lo >= 0 else 0.0), float(lp[hi])
    A, B = p_inf + float(np.add.reduce(pp[hi:])), float(np.add.reduce(pp[hi:] * np.exp(-lp[hi:])))
    c = min(max(math.log((A - target) / B), left), right) if A > target and B > 0.0 else right
    c = min(c * (1.0 + 2.0 ** -50) + 1e-300, right) if side == "upper" else max(c * (1.0 - 2.0 ** -50), left)
    ok = (lambda x: _delta(lp, pp, p_inf, x) <= target) if side == "upper" else \
        (lambda x: _delta(lp, pp, p_inf, x) >= target)
    if ok(c):
        return c
    a, b = (c, right) if side == "upper" else (left, c)    # ok(b) for upper, ok(a) for lower
    for _ in range(200):
        mid = 0.5 * (a + b)
        if mid <= a or mid >= b:
            break
        if (_delta(lp, pp, p_inf, mid) <= target) == (side == "upper"):
            b, a = (mid, a) if side == "upper" else (b, mid)
        else:
            a, b = (mid, b) if side == "upper" else (a, mid)
    return b if side == "upper" else a
