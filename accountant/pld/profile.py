"""The privacy profile ``delta(eps)`` of a composition from its privacy-loss distributions: a
two-sided bracket at one ``eps`` (:func:`pld_delta`), certified upper bounds at many ``eps`` from one
composition a direction (:func:`pld_profile`), and each direction's whole certified upper profile on
``eps >= 0`` (:func:`pld_upper_profiles`, what the attack risk of :mod:`.tradeoff` reads).

The constructions are :mod:`.pld`'s (the module text there: connect-the-dots upper steps,
Hoeffding's lower end, the FFT composition with its charged masses); this module reads ``delta``
off the composed masses instead of solving for ``eps``.
"""

from __future__ import annotations

import math

import numpy as np

from .. import validation
from .bracket import lower_usable, rounding_gap, sum_error
from .compose import compose_steps
from .allocation import discretised_steps
from .pairs import MEMORY_CAP, OverCap, checked_events, directions, grid_step
from ..validation import InputError

__all__ = ["pld_delta", "pld_profile", "pld_upper_profiles"]


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


def pld_delta(events, epsilon: float, discretization: float = 1e-4, memory_cap: int = MEMORY_CAP):
    """``(lower, upper)`` bracket of ``delta(epsilon)`` of a composition at grid ``discretization``.

    Args:
        events: an iterable of events or ``(event, count)`` pairs.
        epsilon: the epsilon at which delta is bracketed (a real number).
        discretization: the grid step, in (0, ``MAX_DISCRETIZATION``].
        memory_cap: bytes one composition may use.

    Returns:
        A tuple ``(lower, upper)`` of floats in [0, 1]; ``(0.0, 0.0)`` for no events.

    Raises:
        InputError: if an argument is out of range, an event is unsupported, or a composition
            needs more than ``memory_cap`` bytes.
    """
    e = validation.real(epsilon, "epsilon")
    h = grid_step(discretization)
    ev = checked_events(events)
    if not ev:
        return 0.0, 0.0
    K = sum(k for _, k in ev)
    tau = 1e-15 / K
    lows, ups = [], []
    for direction in directions(ev):
        try:
            steps, lsteps = discretised_steps(ev, h, tau, direction, memory_cap, lower=True)
        except OverCap:
            steps, lsteps = None, None
        comp = compose_steps(steps, h, 1e-16, memory_cap)[0] if steps else None
        if comp is None:
            raise InputError(f"discretization={h!r} is not allowed: the composition needs more than "
                             f"memory_cap={memory_cap} bytes; choose a coarser grid.")
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
            lcomp = compose_steps(lsteps, h, 1e-16, memory_cap)[0]
            if lcomp is not None:
                low = lcomp.lower_mass
                e_rel = e - lcomp.shift + lcomp.shift_error     # the grid's anchor (a larger eps: less delta)
                lo = max(lo, _delta_fin(low, lcomp.lo, h, e_rel) - lcomp.alias - sum_error(low))
        lows.append(max(lo, 0.0))
        ups.append(up)
    return max(lows), max(ups)


def pld_profile(events, epsilons, discretization: float = 1e-3, memory_cap: int = MEMORY_CAP) -> np.ndarray:
    """Certified upper bounds on ``delta(eps)`` at every ``eps`` in ``epsilons`` from ONE composition
    per direction (the worse direction at each eps): the privacy profile the trade-off curve of
    :mod:`.tradeoff` is built from.  Same pessimistic construction as :func:`pld_delta`'s upper end.

    Args:
        events: an iterable of events or ``(event, count)`` pairs.
        epsilons: finite epsilons (a number or a 1-d array-like).
        discretization: the grid step, in (0, ``MAX_DISCRETIZATION``].
        memory_cap: bytes one composition may use.

    Returns:
        A float array of upper bounds on delta, one per epsilon (zeros for no events).

    Raises:
        InputError: if ``epsilons`` is not a 1-d array of finite numbers, an argument is out of
            range, an event is unsupported, or a composition needs more than ``memory_cap`` bytes.
    """
    eps = np.atleast_1d(np.asarray(epsilons, dtype=float))
    if eps.ndim != 1 or not np.all(np.isfinite(eps)):
        raise InputError(f"epsilons={epsilons!r} is not allowed: expected finite numbers.")
    h = grid_step(discretization)
    ev = checked_events(events)
    if not ev:
        return np.zeros(eps.shape)
    out = np.zeros(eps.shape)
    for comp in _upper_compositions(ev, h, memory_cap):
        out = np.maximum(out, [_delta_upper(comp, h, float(e)) for e in eps])
    return out


def _upper_compositions(ev, h: float, memory_cap: int):
    """The connect-the-dots composition of each direction (remove, then add) at grid ``h``: what the
    profiles read their certified upper bounds from."""
    tau = 1e-15 / sum(k for _, k in ev)
    for direction in directions(ev):
        try:
            steps = discretised_steps(ev, h, tau, direction, memory_cap)
        except OverCap:
            steps = None
        comp = compose_steps(steps, h, 1e-16, memory_cap)[0] if steps else None
        if comp is None:
            raise InputError(f"discretization={h!r} is not allowed: the composition needs more than "
                             f"memory_cap={memory_cap} bytes; choose a coarser grid.")
        yield comp


def pld_upper_profiles(events, discretization: float = 1e-4, memory_cap: int = MEMORY_CAP) -> list:
    """The certified upper profile of each direction at every ``eps >= 0`` the composition can
    tell apart: ``[(eps, delta_upper), ...]`` (one pair of arrays per direction, in the order
    remove, add), ``eps`` = 0 and every grid point of the composed loss above 0.

    ``delta`` of a discrete loss is linear in ``e^eps`` between its atoms, so these points carry
    the whole profile on ``eps >= 0``: what the attack-risk terms of :mod:`.tradeoff` need
    (``inf_eps e^eps a + delta(eps)``).  Same pessimistic construction as :func:`pld_profile`:
    the finite atoms of the connect-the-dots composition with their round-off added, the
    infinite-loss, wrapped-around and summation-error masses, and the suffix sums' rounding.

    Args:
        events: an iterable of events or ``(event, count)`` pairs.
        discretization: the grid step, in (0, ``MAX_DISCRETIZATION``].
        memory_cap: bytes one composition may use.

    Returns:
        A list of ``(eps, delta_upper)`` pairs of float arrays, one per direction
        (``[(zeros(1), zeros(1))]`` for no events).

    Raises:
        InputError: if an argument is out of range, an event is unsupported, or a composition
            needs more than ``memory_cap`` bytes.
    """
    from .bracket import suffix_rounding, suffix_sums

    h = grid_step(discretization)
    ev = checked_events(events)
    if not ev:
        return [(np.zeros(1), np.zeros(1))]
    out = []
    for comp in _upper_compositions(ev, h, memory_cap):
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
