"""The privacy profile ``delta(eps)`` of a composition from its privacy-loss distributions: a
two-sided bracket at one ``eps`` (:func:`delta_bracket`), certified upper bounds at many ``eps`` from one
composition a direction (:func:`upper_bounds`), and each direction's whole certified upper profile on
``eps >= 0`` (:func:`upper_profiles`, what the attack risk of :mod:`~dpcalib.accountant.tradeoff` reads).

The constructions are :mod:`.pld`'s (the package text there: connect-the-dots upper steps,
Hoeffding's lower end, the FFT composition with its charged masses); this module reads ``delta``
off the composed masses instead of solving for ``eps``.  Every function here trusts its arguments:
the queries of :mod:`.queries` (``pld_delta``, ``pld_profile``, ``pld_upper_profiles``) check them once.
"""

from __future__ import annotations

import math

import numpy as np

from .pairs import directions
from .shared import OverCap
from .compose import compose_steps
from .allocation import discretised_steps
from .bracket import lower_usable, rounding_gap, suffix_rounding, suffix_sums, sum_error

__all__ = []


def _delta_fin(mass: np.ndarray, lo: int, h: float, eps: float) -> float:
    """sum_s mass_s (1 - e^(eps - (lo+s) h))_+ (finite atoms only)."""
    s = np.arange(mass.size)
    j = math.floor(eps / h) - lo + 1            # first window index strictly above eps
    j = max(j, 0)
    if j >= mass.size:
        return 0.0
    m = mass[j:]
    return float(np.sum(m) - np.sum(m * np.exp(eps - (lo + s[j:]) * h)))


def _delta_upper(comp, h: float, eps: float) -> float:
    """Certified upper bound on ``delta(eps)`` from an upper composition: its finite atoms, the
    infinite-loss mass, the wrapped-around mass and the summation error."""
    m = comp.upper_mass
    return min(1.0, _delta_fin(m, comp.lo, h, eps) + comp.inf + comp.alias + sum_error(m))


def delta_bracket(ev, e: float, h: float, cap: int):
    """``(lower, upper)`` bracket of ``delta(e)`` of a composition at grid ``h``.  The arguments are
    trusted (:func:`~.queries.pld_delta` checks them).

    Args:
        ev: checked ``(event, count)`` pairs, not empty.
        e: the epsilon (checked: finite, >= 0).
        h: the grid step (checked).
        cap: bytes one composition may use (checked).

    Returns:
        A tuple ``(lower, upper)`` of floats in [0, 1].

    Raises:
        OverCap: if a composition needs more than ``cap`` bytes.
    """
    K = sum(k for _, k in ev)
    tau = 1e-15 / K
    lows, ups = [], []
    for direction in directions(ev):
        try:
            steps, lsteps = discretised_steps(ev, h, tau, direction, cap, lower=True)
        except OverCap:
            steps, lsteps = None, None
        comp = compose_steps(steps, h, 1e-16, cap)[0] if steps else None
        if comp is None:
            raise OverCap()
        up = _delta_upper(comp, h, e)
        p = max(1e-4 * up, 1e-300)
        t = h * math.sqrt(K * math.log(1.0 / p) / 2.0)
        shift = t + K * rounding_gap(h)
        if K * h <= shift:
            shift, p = K * h, 0.0
        low = comp.lower_mass
        lo = (_delta_fin(low, comp.lo, h, e + shift) - comp.alias - comp.bad - p
              - sum_error(low))
        if lower_usable(lsteps):
            lcomp = compose_steps(lsteps, h, 1e-16, cap)[0]
            if lcomp is not None:
                low = lcomp.lower_mass
                e_rel = e - lcomp.shift + lcomp.shift_error     # the grid's anchor (a larger eps: less delta)
                lo = max(lo, _delta_fin(low, lcomp.lo, h, e_rel) - lcomp.alias - sum_error(low))
        lows.append(max(lo, 0.0))
        ups.append(up)
    return max(lows), max(ups)


def upper_bounds(ev, eps: np.ndarray, h: float, cap: int) -> np.ndarray:
    """Certified upper bounds on ``delta(eps)`` at every ``eps`` from ONE composition per direction
    (the worse direction at each eps).  The arguments are trusted (:func:`~.queries.pld_profile`
    checks them).

    Args:
        ev: checked ``(event, count)`` pairs, not empty.
        eps: a 1-d float array of epsilons (checked: finite, >= 0).
        h: the grid step (checked).
        cap: bytes one composition may use (checked).

    Returns:
        A float array of upper bounds on delta, one per epsilon.

    Raises:
        OverCap: if a composition needs more than ``cap`` bytes.
    """
    out = np.zeros(eps.shape)
    for comp in _upper_compositions(ev, h, cap):
        out = np.maximum(out, [_delta_upper(comp, h, float(e)) for e in eps])
    return out


def _upper_compositions(ev, h: float, cap: int):
    """The connect-the-dots composition of each direction (remove, then add) at grid ``h``: what the
    profiles read their certified upper bounds from (OverCap over the cap)."""
    tau = 1e-15 / sum(k for _, k in ev)
    for direction in directions(ev):
        try:
            steps = discretised_steps(ev, h, tau, direction, cap)
        except OverCap:
            steps = None
        comp = compose_steps(steps, h, 1e-16, cap)[0] if steps else None
        if comp is None:
            raise OverCap()
        yield comp


def upper_profiles(ev, h: float, cap: int) -> list:
    """The certified upper profile of each direction at every ``eps >= 0`` the composition can
    tell apart: ``[(eps, delta_upper), ...]`` (one pair of arrays per direction, in the order
    remove, add), ``eps`` = 0 and every grid point of the composed loss above 0.

    ``delta`` of a discrete loss is linear in ``e^eps`` between its atoms, so these points carry
    the whole profile on ``eps >= 0``: what the attack-risk terms of the trade-off curves need
    (``inf_eps e^eps a + delta(eps)``).  Same pessimistic construction as :func:`upper_bounds`:
    the finite atoms of the connect-the-dots composition with their round-off added, the
    infinite-loss, wrapped-around and summation-error masses, and the suffix sums' rounding.
    The arguments are trusted (:func:`~.queries.pld_upper_profiles` checks them).

    Args:
        ev: checked ``(event, count)`` pairs, not empty.
        h: the grid step (checked).
        cap: bytes one composition may use (checked).

    Returns:
        A list of ``(eps, delta_upper)`` pairs of float arrays, one per direction.

    Raises:
        OverCap: if a composition needs more than ``cap`` bytes.
    """
    out = []
    for comp in _upper_compositions(ev, h, cap):
        m = comp.upper_mass
        c = comp.inf + comp.alias + sum_error(m)
        A, B = suffix_sums(m, comp.lo, h)
        slack = 4.0 * suffix_rounding(m.size, h)
        j0 = max(0, -comp.lo)
        eps = (comp.lo + np.arange(j0, m.size)) * h
        dl = A[j0:] - B[j0:] + slack * A[j0:] + c
        if comp.lo > 0 or eps.size == 0:          # no atom at 0: add eps = 0 itself
            d0 = _delta_fin(m, comp.lo, h, 0.0) * (1.0 + slack) + c
            eps, dl = np.concatenate(([0.0], eps)), np.concatenate(([d0], dl))
        out.append((eps, np.clip(dl, 0.0, 1.0)))
    return out
