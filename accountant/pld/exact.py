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
from .pairs import directions, dominating_pairs
from .shared import EpsilonBracket

__all__ = []

#: the most lattice points a composition may span (beyond: the grid answers)
MAX_POINTS = 1 << 13
#: the relative slack of each end's delta (round-off is below 1e-12 for MAX_POINTS-point compositions)
SLACK = 1e-9
#: the error allowed each unit loss (absolute) and each product ``n u`` (relative): 16 ulp of 1
LOSS_ERR = 2.0 ** -48
#: a composition with fewer positive losses than this is bracketed over Python floats, lists in place
#: of arrays: the same operations in the same order (numpy's sum is the sequential one below 8 terms;
#: its float64 ``exp`` and ``expm1`` are the C library's, as ``math``'s, but on AVX-512 builds, where
#: they may differ in the last bit: far below SLACK), without numpy's fixed cost per call, which is
#: most of the time at a few atoms
FEW = 8


def lattice_bracket(ev, d: float):
    """The exact bracket of ``eps(d)`` where every event has one finite pair on a common lattice, else None.

    Args:
        ev: a tuple of checked ``(event, count)`` pairs, not empty.
        d: the target delta (checked).

    Returns:
        An :class:`~.shared.EpsilonBracket` (``discretization`` 0.0, converged), or None where an event
        has another pair or the lattice would span more than ``MAX_POINTS`` points.
    """
    lower = upper = 0.0
    for direction in directions(ev):
        pm = _composed(ev, direction)
        if pm is None:
            return None
        root = _root_few if type(pm[0]) is list else _root
        lo, up = root(*pm, d * (1.0 + SLACK), "lower"), root(*pm, d * (1.0 - SLACK), "upper")
        lower, upper = lo if lo > lower else lower, up if up > upper else upper     # (max's values)
    return EpsilonBracket(lower, upper, d, 0.0, True, ("exact: finite pairs composed on their lattice",))


def _composed(ev, direction):
    """``(losses, P-masses, P(L = +inf), unit)`` of the composition on the lattice, or None: its
    positive losses carrying mass, increasing (every delta of :func:`_root` is at ``eps >= 0``), as
    lists where they are fewer than ``FEW``.  The few atoms of each pair are read in Python (exact: a
    minimum, roundings, comparisons); the compositions are numpy's convolutions (a sequential Python one
    is not the same in floating point: numpy's dot product per output is BLAS's, measured to differ in
    the last bit for ~9 % of the outputs of short random vectors)."""
    pairs = []
    for e, k in ev:
        ps = dominating_pairs(e, direction)
        if len(ps) != 1 or not isinstance(ps[0], FinitePair):
            return None
        if ps[0].atom_count > MAX_POINTS + 2:        # (a discrete Gaussian: more points than any lattice holds)
            L = ps[0].arrays[0]
            if np.unique(L[np.isfinite(L)]).size > MAX_POINTS + 1:
                return None
        pairs.append((ps[0], k))
    inf = u = math.inf                           # (-inf < l < inf: l is finite)
    for pr, _ in pairs:                          # the unit: the smallest finite non-zero |loss|
        for l in pr.losses:
            if l != 0.0 and -inf < l < inf:
                l = l if l > 0.0 else -l
                if l < u:
                    u = l
    if u == inf:
        u = 1.0
    # (abs, min and max below as comparisons: the same values, without a call each)
    span, total, start, log_fin = 0, None, 0, 0.0
    for pr, k in pairs:
        n, mass, p_inf, lo, hi = [], [], -0.0, 0, 0    # (p_inf: the sequential sum of _sum; no finite atom: 0, 0)
        for l, p in zip(pr.losses, pr.p):
            if l == inf:
                p_inf += p
            elif l > -inf:
                x = l / u
                if not -inf < x < inf:           # beyond the lattice's range
                    return None
                j = round(x)
                r, tol = x - j, 1e-12 * ((j if j > 0 else -j) or 1)
                if r > tol or r < -tol:
                    return None                  # not on the lattice
                if not n:
                    lo = hi = j
                elif j < lo:
                    lo = j
                elif j > hi:
                    hi = j
                n.append(j)
                mass.append(p)
        span += k * (hi - lo)
        if span >= MAX_POINTS:
            return None
        m = [0.0] * (hi - lo + 1)
        for j, p in zip(n, mass):
            m[j - lo] += p
        power = m if k == 1 else _power(np.array(m), k)      # (one release: its masses, as a list)
        total, start = (power if total is None else np.convolve(total, power)), start + lo * k
        if p_inf:                                # (a zero adds log1p(0) = 0: nothing)
            log_fin += k * math.log1p(-p_inf) if p_inf < 1.0 else -inf
    p_inf = -math.expm1(log_fin)
    first = 1 - start if start < 1 else 0        # the first positive lattice point, (start + j) u > 0
    if len(total) - first < FEW:
        lp, pp = [], []
        for j, t in enumerate((total if type(total) is list else total.tolist())[first:], first):
            if t > 0.0:
                lp.append((start + j) * u)
                pp.append(t)
        return lp, pp, p_inf, u
    total = np.asarray(total)
    keep = first + (total[first:] > 0.0).nonzero()[0]
    return (start + keep) * u, total[keep], p_inf, u


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


def _exp(x: float) -> float:
    """``e^x`` as numpy's: inf beyond the float range (``math.exp`` raises there)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _sum(x) -> float:
    """``np.add.reduce(x)`` as a float (:func:`_root_few` sums lists sequentially: numpy's below 8 terms)."""
    return float(np.add.reduce(x))


def _delta(lp, pp, p_inf: float, eps: float) -> float:
    """``delta(eps)``, ``eps >= 0``, of the composed pair from its positive losses ``lp`` (increasing:
    those above ``eps`` are a suffix) and their masses: a sum of non-negative terms (the sum of
    ``p (e^(eps - l) - 1)`` is subtracted: the sum of the negated terms, exactly)."""
    if type(lp) is list:                  # (the sequential sum of _sum, in one loop)
        s = -0.0
        for l, p in zip(lp, pp):
            if l > eps:
                s += p * math.expm1(eps - l)
        return p_inf - s
    i = lp.searchsorted(eps, "right")
    return p_inf - _sum(pp[i:] * np.expm1(eps - lp[i:]))


def _first_below(lp, pp, w, p_inf: float, target: float) -> int:
    """The first atom ``j`` whose delta, from suffix sums (``A - e^l B``, with ``A``, ``B`` the sums of
    ``pp`` and of ``w = pp e^(-lp)`` above it: a guess near a cancellation), is at most ``target``
    (the last atom's delta is ``p_inf``, at most ``target``); arrays (:func:`_root_few` has the list
    case)."""
    A_s = p_inf + pp[::-1].cumsum()[::-1]
    B_s = w[::-1].cumsum()[::-1]
    below = np.flatnonzero(A_s[1:] - np.exp(lp[:-1]) * B_s[1:] <= target)
    return int(below[0]) if below.size else lp.size - 1


def _root(lp, pp, p_inf: float, u: float, target: float, side: str) -> float:
    """The root of ``delta(eps) = target`` over ``eps >= 0`` of the composition of :func:`_composed`:
    for ``side="upper"`` a point where the sum confirms ``delta <= target``, for ``"lower"`` one where
    it confirms ``delta >= target`` (0 where ``delta(0) <= target``; inf where ``P(L = +inf) > target``).

    Each loss is known to LOSS_ERR: the unit's own ``log(p / q)`` to LOSS_ERR absolute (relative where
    ``p / q`` is near 1: a unit of 0.001 is known to ~1e-16, 500 of its ulps), times the n units of the
    loss, and the product ``n u`` to LOSS_ERR relative; so each is moved out by that, down for the lower
    end and up for the upper (at a delta of 1e-8 a single randomized response's root sits 2e-8 below
    its atom, where 1e-16 is 1e-8 of delta).  Between two atoms ``delta(eps) = A - e^eps B`` (``A``,
    ``B`` the sums of ``p`` and ``p e^(-l)`` above them): the root is ``log((A - target) / B)``,
    confirmed by the sum, else bisected.  Arrays (:func:`_root_few`: the lists of fewer than ``FEW`` atoms)."""
    if p_inf > target:
        return math.inf
    g = 1.0 / u + 1.0
    lp = lp - lp * g * LOSS_ERR if side == "lower" else lp + lp * g * LOSS_ERR
    w = pp * np.exp(-lp)
    if _delta(lp, pp, p_inf, 0.0) <= target:
        return 0.0
    # the atoms around the root: the guess of _first_below, confirmed by the sum at the two atoms,
    # else bisected over the atoms by the sum
    # (the last atom's delta is p_inf <= target: no sum confirms it, and one atom is the last)
    hi = _first_below(lp, pp, w, p_inf, target) if len(lp) > 1 else 0
    lo = hi - 1
    if not ((hi == len(lp) - 1 or _delta(lp, pp, p_inf, float(lp[hi])) <= target)
            and (lo < 0 or _delta(lp, pp, p_inf, float(lp[lo])) > target)):
        lo, hi = _bisected(lp, pp, p_inf, target)
    left, right = (float(lp[lo]) if lo >= 0 else 0.0), float(lp[hi])
    A, B = p_inf + _sum(pp[hi:]), _sum(w[hi:])
    return _end(lp, pp, p_inf, target, side, left, right, A, B)


def _root_few(lp, pp, p_inf: float, u: float, target: float, side: str) -> float:
    """:func:`_root` over lists (fewer than ``FEW`` atoms): the same operations in the same order --
    the losses moved out, ``w`` and the sum of ``delta(0)`` in one pass, the suffix sums of
    :func:`_first_below` as running sums from the end (numpy's cumsum), ``A`` and ``B`` the
    sequential sums of :func:`_sum` -- in loops of their own, without numpy's fixed cost per call."""
    if p_inf > target:
        return math.inf
    g = 1.0 / u + 1.0
    up = side == "upper"
    exp, expm1 = math.exp, math.expm1
    ls, w, s = [], [], -0.0
    for l, p in zip(lp, pp):              # (delta(0): the list sum of _delta, at eps = 0.0)
        l = l + l * g * LOSS_ERR if up else l - l * g * LOSS_ERR
        ls.append(l)
        w.append(p * exp(-l))
        if l > 0.0:
            s += p * expm1(0.0 - l)
    if p_inf - s <= target:
        return 0.0
    n = len(ls)                           # the atoms around the root: as _root's
    if n == 1:                            # (one atom: hi = 0, lo = -1, no guess or confirmation, one-term sums)
        return _end(ls, pp, p_inf, target, side, 0.0, float(ls[0]), p_inf + (-0.0 + pp[0]), -0.0 + w[0])
    hi, a, b = n - 1, 0.0, 0.0
    for j in range(n - 2, -1, -1):        # (_first_below's guess)
        a, b = a + pp[j + 1], b + w[j + 1]
        if (p_inf + a) - _exp(ls[j]) * b <= target:
            hi = j
    lo = hi - 1
    if not ((hi == n - 1 or _delta(ls, pp, p_inf, float(ls[hi])) <= target)
            and (lo < 0 or _delta(ls, pp, p_inf, float(ls[lo])) > target)):
        lo, hi = _bisected(ls, pp, p_inf, target)
    sa = sb = -0.0
    for j in range(hi, n):
        sa += pp[j]
        sb += w[j]
    # (float: a pair's losses may be numpy scalars; the ends are Python floats, as _root's)
    return _end(ls, pp, p_inf, target, side, float(ls[lo]) if lo >= 0 else 0.0, float(ls[hi]), p_inf + sa, sb)


def _bisected(lp, pp, p_inf: float, target: float) -> tuple:
    """``(lo, hi)``, adjacent atoms with ``delta(lp[lo]) > target >= delta(lp[hi])``, bisected over the
    atoms by the sum (delta is non-increasing; ``lo = -1``: at 0, where ``delta > target``; the last
    atom's delta is ``p_inf <= target``)."""
    lo, hi = -1, len(lp) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _delta(lp, pp, p_inf, float(lp[mid])) > target:
            lo = mid
        else:
            hi = mid
    return lo, hi


def _end(lp, pp, p_inf: float, target: float, side: str, left: float, right: float, A: float, B: float) -> float:
    """The end of :func:`_root` between the atoms ``left < right`` (``A``, ``B``: the sums above them):
    ``log((A - target) / B)`` nudged out, confirmed by the sum, else bisected."""
    # (min(max(x, left), right) and the nudges below as conditionals: the same values, ties and NaN
    # included -- max(x, y) is y only where y > x, min(x, y) y only where y < x -- without a call each)
    if A > target and B > 0.0:
        c = math.log((A - target) / B)
        c = left if left > c else c
        c = right if right < c else c
    else:
        c = right
    if side == "upper":
        c = c * (1.0 + 2.0 ** -50) + 1e-300
        c = right if right < c else c
        if _delta(lp, pp, p_inf, c) <= target:
            return c
    else:
        c = c * (1.0 - 2.0 ** -50)
        c = left if left > c else c
        if _delta(lp, pp, p_inf, c) >= target:
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
