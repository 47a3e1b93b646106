"""Privacy-loss distributions, part 4: the bracket of one grid -- reading ``eps(delta)`` from a
composition (suffix sums with their rounding charged), the re-composition tilted toward the
delta-quantile (split where one step kind's edge atom carries the mass), and each direction's
upper and lower ends.  Composition: :mod:`.compose`; the method: :mod:`accountant.pld`.
The chain runs one way: pairs <- discretise <- compose <- binomial <- blocks <- bracket <- pld.
"""

from __future__ import annotations

import math

import numpy as np

from .binomial import split_composition
from .compose import LAMBDAS, log_mgfs, delta_tilt, compose_steps, loss_window
from .decay import decay_block, decayed_suffix
from .shared import ALIAS, LOWER_RETILT, RETILT, RTOL

__all__ = ["lower_one", "upper_one"]


def suffix_sums(mass: np.ndarray, lo: int, h: float):
    """A_j = sum_{s>=j} m_s and B_j = sum_{s>=j} m_s e^{(j-s)h} for non-negative masses.

    A is a cumulative sum, B :func:`decayed_suffix`; both add non-negative terms, so each
    carries a relative rounding error of at most :func:`suffix_rounding` (``~n u``) --
    relative to the suffix sum itself, hence to the tail delta is read from (:func:`_eps_at`
    charges it).

    Args:
        mass: the non-negative masses (a 1-d float array).
        lo: the grid index of ``mass[0]`` (unused: the sums depend on offsets only).
        h: the grid step, > 0.

    Returns:
        A tuple ``(A, B)`` of float arrays of ``mass``'s length.
    """
    A = np.cumsum(mass[::-1])[::-1]
    B = decayed_suffix(mass, h)
    return A, B


def suffix_rounding(n: int, h: float) -> float:
    """Relative rounding error bound of :func:`decayed_suffix` and of a suffix cumsum of ``n``
    non-negative terms: ``n`` additions; the block weights (``exp`` of an argument of at most
    32, rounded: ``<= 34 u`` each, and three of them per term); per doubling pass of the
    carries a weight (``exp`` of an argument below 746: ``<= 747 u``) and two roundings.

    Args:
        n: the number of terms, >= 0.
        h: the grid step, > 0.

    Returns:
        The relative bound (a float, a multiple of the machine epsilon).
    """
    nb = -(-n // decay_block(n, h)) if n else 0
    passes = max(0, nb - 1).bit_length()
    return (n + 2 + 140 + 750 * passes) * float(np.finfo(float).eps)


def _eps_at(mass: np.ndarray, lo: int, h: float, c: float, delta: float, side: int) -> float:
    """Smallest eps with  sum_s mass_s (1 - e^(eps - (lo+s) h))_+ + c <= delta  (may be +-inf).

    ``mass >= 0``.  The suffix sums of non-negative terms carry a relative rounding error of at
    most ``r = suffix_rounding(n, h)`` (``~n u``); the profile at a grid point, ``A - B``, is
    moved by ``4 r A`` toward the conservative side (``side=+1``: up, for the upper bound;
    ``-1``: down, for the lower bound).
    """
    n = mass.size
    A, B = suffix_sums(mass, lo, h)
    slack = 4.0 * suffix_rounding(n, h) * side
    cl = float(c)
    dl = float(delta)

    def prof(Aj, Bj):
        return Aj - Bj + slack * Aj + cl

    if c >= delta and side > 0:
        return math.inf
    if prof(A[0], B[0]) <= dl:          # reached at or below the window's first point: below it
        j, floor = 0, -math.inf          # the formula holds (-inf: all the mass is within delta)
    else:
        # the first grid point lo + j (j = 1 .. n; j = n: beyond the window, delta = c) where the
        # profile is at most delta, by bisection: the profile is non-increasing in exact
        # arithmetic.  Where round-off made it wiggle, bisection still ends on a point j with
        # R(j - 1) > delta >= R(j), which is sound on both sides: for the upper end R >= the
        # true profile, so R(j) <= delta puts the true crossing at or below j; for the lower end
        # R <= the true profile, so R(j - 1) > delta puts it above j - 1.
        def R(j):
            return cl if j >= n else prof(float(A[j]), float(B[j]))

        if R(n) > dl:
            return math.inf
        i, j = 0, n                     # R(i) > delta >= R(j)
        while j - i > 1:
            m = (i + j) // 2
            if R(m) <= dl:
                j = m
            else:
                i = m
        if j >= n:
            return (lo + n - 1) * h
        # the crossing is in (x_(j-1), x_j], where delta(eps) = A_j - e^(eps - x_j) B_j + c (the
        # atoms at or below x_(j-1) no longer count).  If that is <= delta already at the left
        # end (num <= 0: e.g. no atom above x_(j-1), or the slack charged at x_(j-1) alone kept
        # R(j - 1) above delta), the answer is x_(j-1) itself: the true profile is continuous
        # there, so the upper end stays certified, and the lower end (R <= true profile) stays
        # below the truth.  Never below x_(j-1): R(j - 1) > delta.
        floor = (lo + j - 1) * h
    num = A[j] * (1 + slack) + cl - dl
    if num <= 0.0:
        return floor
    return max((lo + j) * h + float(np.log(num / (B[j] * (1 - slack)))), floor)


def sum_error(mass: np.ndarray) -> float:
    """Bound on the rounding of a sum of n non-negative terms in double precision.

    Args:
        mass: the non-negative terms (a float array).

    Returns:
        The absolute bound (a float, > 0).
    """
    return 2.0 * (mass.size + 2) * float(np.finfo(float).eps) * float(np.sum(mass)) + 1e-300


def rounding_gap(h: float) -> float:
    """The per-step term ``K * rounding_gap(h)`` of the Hoeffding shift of a bracket's lower end.

    Args:
        h: the grid step, > 0.

    Returns:
        ``r - 1 - log r`` with ``r = h / (1 - e^-h)`` (a float, >= 0).
    """
    r = h / -math.expm1(-h)
    return r - 1.0 - math.log(r)


def _retilt(steps, comp, h, delta, alpha, cap_bytes, r_min, threshold=RETILT):
    """A second composition tilted toward the delta-quantile (reading only bins above
    ``r_min``) when the first one's round-off charge there exceeds ``threshold * delta``; None
    if not needed or not possible."""
    j = max(0, r_min - comp.lo)
    if not (float(np.sum(comp.err[j:])) > threshold * delta and comp.count > 1):
        return None
    return _tilted(steps, h, delta, alpha, cap_bytes, r_min, comp.mass.size)


def _tilted(steps, h, delta, alpha, cap_bytes, r_min, n0):
    """The composition tilted toward the delta-quantile, reading only bins above ``r_min``: the
    largest tilt up to the Chernoff-optimal one whose window is at most 4 times ``n0`` (the
    untilted window; a steep tilt makes the wrapped-around tail expensive); None if no tilt
    helps or over the memory cap."""
    if sum(s.count for s in steps) <= 1:
        return None
    logm = log_mgfs(steps, h)
    lam = delta_tilt(logm[0], math.log(delta))
    for cand in [lam] + [float(c) for c in LAMBDAS[::-1] if c < lam]:
        a, b = loss_window(steps, h, math.log(alpha), cand, logm, r_min)
        if b - a + 1 <= 4 * n0 + 16:
            lam = cand
            break
    else:
        lam = 0.0
    if lam <= 0.0:
        return None
    if SPLIT and len(steps) == 1:
        comp = split_composition(steps[0], h, alpha, cap_bytes, lam, r_min)
        if comp is not None:
            return comp
    return compose_steps(steps, h, alpha, cap_bytes, lam, r_min)[0]


#: compose one step kind's tilted re-composition split (:func:`~.binomial.split_composition`)
SPLIT = True


def upper_one(steps, h, delta, cap_bytes, floor=-math.inf, hint=None):
    """``(lower, upper)`` of one direction at grid h: :func:`upper_info` without ``retilted``.

    Args:
        steps, h, delta, cap_bytes, floor, hint: as :func:`upper_info`.

    Returns:
        A tuple ``(lower, upper)`` of floats, or ``(None, None)`` over the memory cap.
    """
    return upper_info(steps, h, delta, cap_bytes, floor, hint)[:2]


def upper_info(steps, h, delta, cap_bytes, floor=-math.inf, hint=None):
    """``(lower, upper, retilted)`` of one direction at grid h from its connect-the-dots steps, and
    whether a tilted composition was needed; ``(None, None, False)`` over the memory cap.  The lower
    end is Hoeffding's, read from the same composition.

    A first composition without tilt gives a bracket; if its round-off charge above the lower
    end exceeds ``RETILT * delta`` (small delta, many steps), a composition tilted toward the
    delta-quantile, reading only bins above that lower end, gives another; both are valid and
    the result is their intersection.  ``floor`` is a lower bound on the answer from another
    direction: when the first upper end is already at or below it, this direction cannot be
    the worse one and is not re-composed.

    ``hint``: ``(lower, upper, retilted)`` of the same direction on a coarser grid (both ends
    valid for this one too).  When that composition had to be re-tilted, the untilted one is
    skipped here: the tilted composition reads the bins above the coarse lower end, and the
    result is intersected with the coarse bracket.

    Args:
        steps: the upper (connect-the-dots) steps of one direction.
        h: the grid step, > 0.
        delta: the target delta, in (0, 1).
        cap_bytes: the memory a composition may use, in bytes.
        floor: a lower bound on the answer from another direction (``-inf``: none).
        hint: ``(lower, upper, retilted)`` on a coarser grid, or None.

    Returns:
        A tuple ``(lower, upper, retilted)``; ``(0.0, 0.0, False)`` for no steps and
        ``(None, None, False)`` over the memory cap.
    """
    if not steps:
        return 0.0, 0.0, False
    alpha = ALIAS * delta
    if hint is not None and hint[2] and hint[0] is not None:
        lo_c, up_c, _ = hint
        lo_, hi_ = loss_window(steps, h, math.log(alpha))
        comp2 = _tilted(steps, h, delta, alpha, cap_bytes, math.floor(lo_c / h) - 1, hi_ - lo_ + 1)
        if comp2 is not None:
            lo2, up2 = _read_bracket(comp2, h, delta)
            lower, upper = max(lo_c, lo2), min(up_c, up2)
            return lower, max(upper, lower), True
    comp, _ = compose_steps(steps, h, alpha, cap_bytes)
    if comp is None:
        return None, None, False
    lower, upper = _read_bracket(comp, h, delta)
    if upper <= floor:
        return lower, upper, False
    comp2 = _retilt(steps, comp, h, delta, alpha, cap_bytes, math.floor(lower / h) - 1)
    if comp2 is not None:
        lo2, up2 = _read_bracket(comp2, h, delta)
        lower, upper = max(lower, lo2), min(upper, up2)
    return lower, max(upper, lower), comp2 is not None


def lower_one(lower_steps, h, delta, cap_bytes, upper=None):
    """The lower end of one direction from the composition of its lower steps
    (:func:`~.discretise.lower_step`; usable ones), re-composed tilted when the round-off charge exceeds
    ``LOWER_RETILT * delta`` -- or, with the bracket's ``upper`` end known, where the charge
    decides the bracket's width (:func:`_round_off_decides`: then above ``RETILT * delta``, as
    the upper end's); None over the memory cap.

    Args:
        lower_steps: the usable lower steps of one direction (:func:`lower_usable`).
        h: the grid step, > 0.
        delta: the target delta, in (0, 1).
        cap_bytes: the memory a composition may use, in bytes.
        upper: the bracket's upper end, or None if not known.

    Returns:
        The lower end (a float, >= 0), or None over the memory cap.
    """
    alpha = ALIAS * delta
    lcomp, _ = compose_steps(lower_steps, h, alpha, cap_bytes)
    if lcomp is None:
        return None
    lower = _read_lower(lcomp, h, delta)
    threshold = LOWER_RETILT
    if upper is not None and math.isfinite(upper) and _round_off_decides(lcomp, h, delta, lower, upper):
        threshold = RETILT
    lcomp2 = _retilt(lower_steps, lcomp, h, delta, alpha, cap_bytes,
                     math.floor((lower - lcomp.shift) / h) - 1, threshold)
    if lcomp2 is not None:
        lower = max(lower, _read_lower(lcomp2, h, delta))
    return lower


def _round_off_decides(comp, h, delta, lower, upper) -> bool:
    """Whether the round-off charged to a lower composition decides its bracket: the bracket is
    wider than the default tolerance, and the lower end read without the charge (not a bound;
    only a measure of the charge's effect) is above the certified one by more than a quarter of
    the width that would remain.  (q = 2.8e-4, 1e5 steps, delta = 1e-5: a charge under
    ``LOWER_RETILT`` moved the lower end by 2.7e-4 beside a width of 1.4e-4 without it -- the
    bracket then refined to a grid 2.4x finer.)"""
    free = _read_lower(comp, h, delta, charged=False)
    return upper - lower > RTOL * upper and free - lower > 0.25 * (upper - free)


def lower_usable(lower_steps) -> bool:
    """Lower steps exist for every event and none is empty (an empty one bounds nothing).

    Args:
        lower_steps: a sequence of lower steps (:class:`~.shared.Step` or None).

    Returns:
        True when the sequence is non-empty and every step has positive finite mass.
    """
    return bool(lower_steps) and all(s is not None and float(np.sum(s.mass)) > 0.0 for s in lower_steps)


def _read_lower(comp, h, delta, charged=True):
    """Lower end from a composition of lower steps: their profile is below the true one, so
    (minus the wrapped-around mass and the round-off) the eps it reads is a lower bound.  With
    ``charged=False`` the round-off is not taken off: not a bound, only a measure of its effect."""
    mass = comp.lower_mass if charged else np.clip(comp.mass, 0.0, 1.0)
    x = _eps_at(mass, comp.lo, h, -comp.alias, delta, -1)
    return max(x + comp.shift - comp.shift_error, 0.0)


def _read_bracket(comp, h, delta):
    clipped = comp.upper_mass
    c_up = comp.inf + comp.alias
    upper = _eps_at(clipped, comp.lo, h, c_up, delta, +1) + comp.shift + comp.shift_error
    if comp.blocked:          # a block's atoms are not within h of the true loss: no Hoeffding end
        return 0.0, max(upper, 0.0)
    p = 1e-6 * delta
    K = comp.count
    t = h * math.sqrt(K * math.log(1.0 / p) / 2.0)
    shift = t + K * rounding_gap(h)
    if K * h <= shift:        # each rounding error is below h: the sum is below K h surely
        shift, p = K * h, 0.0
    low = comp.lower_mass
    c_lo = comp.alias + comp.bad + p
    x = _eps_at(low, comp.lo, h, -c_lo, delta, -1) + comp.shift - comp.shift_error
    lower = x - shift
    return max(lower, 0.0), max(upper, 0.0)
