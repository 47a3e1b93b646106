"""Root finding for calibrations: the smallest noise scale whose accounted eps stays within the
target, in log-log coordinates (secant steps with a bracket), and the RDP-tight scale over a fixed
order grid.  The PLD tightening on top of it is :mod:`.tighten`."""

from __future__ import annotations

import math
from typing import Callable

from ..accountant.validation import InputError
from ..accountant.roots import brentq

__all__ = []

#: tolerance of the RDP-tight noise a PLD calibration starts from: it is only a feasible start and
#: a note (``rdp_tight_noise``), so its last digits are not worth the fixed-order iterations
PLD_START_RTOL = 1e-7


def start_rtol(accountant: str, rtol: float = 1e-9) -> float:
    """Tolerance of the RDP-tight solve: ``rtol`` for ``accountant="rdp"``, coarser as a PLD start.

    Args:
        accountant: the calibration's route, ``"rdp"`` or ``"pld"``.
        rtol: the calibration's own tolerance.

    Returns:
        ``rtol`` for ``"rdp"``, else ``max(rtol, PLD_START_RTOL)``.
    """
    return rtol if accountant == "rdp" else max(rtol, PLD_START_RTOL)


#: the one error of every noise search that finds no feasible noise level
NO_FEASIBLE_NOISE = ("no noise level meets the target epsilon: eps stayed above it at every noise level tried. "
                     "Either eps does not decrease with the noise, or delta is so small that the RDP "
                     "accountant cannot certify the target: its eps has a floor of about log(1/delta) / "
                     "(largest order - 1), e.g. 0.37 at delta=1e-170 with orders up to 1024. Raise the "
                     "target epsilon or delta, or use accountant='best' (no such floor).")


def smallest_scale(eps_of: Callable[[float], float], target: float, start: float = 1.0,
                   rtol: float = 1e-9, log_step: float = 2.0) -> float:
    """Smallest ``t > 0`` (to relative tolerance ``rtol``) with ``eps_of(t) <= target``.

    ``eps_of`` must be non-increasing in ``t``.  The root is bracketed geometrically, refined by
    Brent's method on ``log t``, and the returned point is always on the feasible side: it is
    re-checked, and nudged up until ``eps_of(t) <= target`` holds (never overshoots).

    Args:
        eps_of: eps as a function of the scale ``t > 0``, non-increasing.
        target: the target eps.
        start: the first scale tried, > 0.
        rtol: relative tolerance on ``t``.
        log_step: the step of the geometric bracketing, in ``log t``.

    Returns:
        The smallest feasible scale found (``eps_of(t) <= target``).

    Raises:
        InputError: if no scale up to ``e^700`` is feasible (``NO_FEASIBLE_NOISE``).
    """
    f = lambda lt: eps_of(math.exp(lt)) - target  # noqa: E731
    lo = hi = math.log(start)
    if f(hi) > 0:
        while f(hi) > 0:
            lo, hi = hi, hi + log_step
            if hi > 700:
                raise InputError(NO_FEASIBLE_NOISE)
    else:
        while f(lo) <= 0:
            hi, lo = lo, lo - log_step
            if lo < -700:
                return math.exp(hi)
    root = brentq(f, lo, hi, xtol=rtol / 4, rtol=1e-15, maxiter=200)
    t = math.exp(root)
    step = rtol / 8
    while eps_of(t) > target:
        t = math.exp(root) * (1.0 + step)
        step *= 2.0
    return t


#: a short grid for the coarse stage of :func:`tight_scale`
COARSE_ORDERS = tuple(range(2, 65)) + (80, 96, 128, 192, 256, 512, 1024)


def tight_scale(build, target: float, delta: float, conversion: str = "improved", start: float = 1.0,
                rtol: float = 1e-9, exact: bool = True) -> float:
    """Smallest noise scale ``t`` whose RDP accountant ``build(t)`` spends at most ``target``.

    Stage 1 solves on a short integer grid of orders (coarse, 1e-3).  Stage 2 fixes the optimal
    order of the full accountant at that noise and solves at that single order (any fixed order
    gives a valid eps, so each step is sound; each evaluation costs one order); it repeats while
    the optimal order moves.  ``exact``: the orders are found as precisely as the accountant's
    reports find them and the answer is re-checked with the full accountant's report; without
    it (a PLD calibration's start, whose own report re-checks), the orders are found to 1e-3
    (eps is stationary in the order: it moves by ~1e-6 relative at most) and the answer is
    feasible at its fixed order -- a valid eps, so a sound start.

    Args:
        build: maps a noise scale (> 0) to the accountant of the run at that scale.
        target: the target eps, > 0.
        delta: the target delta, in (0, 1).
        conversion: the RDP-to-(eps, delta) conversion.
        start: the first scale tried, > 0.
        rtol: relative tolerance on the scale.
        exact: find the orders as precisely as the reports do and re-check with the full
            accountant (see above).

    Returns:
        The smallest scale found whose RDP eps is at most ``target``.

    Raises:
        InputError: if no scale is feasible (``NO_FEASIBLE_NOISE``), raised by the searches.
    """
    import numpy as np

    from ..accountant import best_epsilon, rdp_to_dp

    coarse = np.array(COARSE_ORDERS, dtype=float)
    t = loglog_scale(lambda s: best_epsilon(coarse, build(s).rdp(coarse), delta, conversion)[0],
                     target, start=start, rtol=1e-3)
    seen = set()
    order = None
    for _ in range(5):
        if exact:
            order = build(t).epsilon_report(delta, "rdp", conversion).order
        else:
            order = build(t).optimal_order(delta, conversion, START_ORDER_RTOL, near=order)[1]
        if order in seen:
            break
        seen.add(order)
        prev = t
        t = loglog_scale(lambda s, a=order: float(rdp_to_dp(a, build(s).rdp([a])[0], delta, conversion)),
                         target, start=t, rtol=rtol)
        # the noise moved by less than the tolerance: the optimal order, which moves with it and
        # enters eps only to second order (eps is stationary in the order there), has settled.
        # Every fixed-order answer is feasible, so stopping here is sound.
        if abs(t - prev) <= rtol * t:
            break
        # (exact=False: the order, found to 1e-3, moves ~2x the noise's relative move; after a
        # move below 1e-4 another search would land within its tolerance of this order, and the
        # noise -- second order in the order -- would move by less than ~1e-8)
        if not exact and abs(t - prev) <= 1e-4 * t:
            break
    while exact and build(t).get_epsilon(delta, "rdp", conversion) > target:  # guard; not expected to trigger
        t *= 1.0 + rtol
    # A cliff: at a fixed order the subsampled RDP can jump by orders of magnitude as the noise
    # drops (amplification fails above an order ~ z^2 log(1/q)), so the fixed-order solve stops at
    # the jump although a smaller order certifies the target at less noise (DP-SGD q = 0.01, 1000
    # steps, eps 3, delta 1e-150: z 4.48 with eps 2.38).  The full accountant's eps -- the minimum
    # over the orders, monotone in the noise -- is then solved directly from there.
    eps_full = build(t).get_epsilon(delta, "rdp", conversion)
    if eps_full < target * (1.0 - CLIFF_GAP):
        t = smallest_scale(lambda s: build(s).get_epsilon(delta, "rdp", conversion), target, start=t,
                           rtol=rtol if exact else 1e-6)
    return t


#: a fixed-order answer whose full-accountant eps is this far below the target stopped at a cliff
CLIFF_GAP = 1e-4


#: tolerance of the optimal order in a PLD calibration's RDP start (``tight_scale(exact=False)``)
START_ORDER_RTOL = 1e-3


def loglog_scale(eps_of: Callable[[float], float], target: float, start: float = 1.0,
                 rtol: float = 1e-9, max_step: float = 3.0) -> float:
    """Smallest ``t > 0`` (within ``rtol`` relative of the root) with ``eps_of(t) <= target``, for
    a non-increasing ``eps_of`` that is smooth in log-log coordinates (RDP eps against the noise:
    slope between -1 and -2).  Secant steps on ``log(eps / target)`` against ``log t`` (at most
    ``max_step`` per step until the root is bracketed, then Illinois-safeguarded inside the
    bracket; :func:`loglog_root`): a handful of evaluations where bisection-based
    :func:`smallest_scale` needs 10-20.  The returned point was evaluated and is feasible.

    Args:
        eps_of: eps as a function of the scale ``t > 0``, non-increasing.
        target: the target eps, > 0.
        start: the first scale tried, > 0.
        rtol: relative tolerance on ``t``.
        max_step: the largest step in ``log t`` before the root is bracketed.

    Returns:
        A feasible scale within ``rtol`` of the root.

    Raises:
        ValueError: if ``eps_of`` returns NaN.
        InputError: if no feasible scale is found (``NO_FEASIBLE_NOISE``, from
            :func:`loglog_root`).
    """
    def f(x):
        e = eps_of(math.exp(x))
        if math.isnan(e):
            raise ValueError(f"eps is NaN at noise scale {math.exp(x)!r}")
        return math.log(e / target) if e > 0 else -math.inf

    x0 = math.log(start)
    f0 = f(x0)
    x1 = x0 + (min(max(f0, -max_step), max_step) if math.isfinite(f0) else
               (max_step if f0 > 0 else -max_step))
    return math.exp(loglog_root(f, x0, f0, x1, rtol, predict=True, max_step=max_step))


#: a search with ``predict`` stops at a feasible point the secant puts this many ``rtol`` above the
#: root (the secant through two nearby points of the nearly linear curve is accurate to a few %)
PREDICT_WITHIN = 0.75


def loglog_root(f, x0: float, f0: float, x1: float, rtol: float, maxiter: int = 40,
                 predict: bool = False, max_step: float = 0.3, unknown_rtol: float | None = None,
                 grow: bool = False) -> float:
    """Smallest feasible ``x`` (``f(x) <= 0``) within ``rtol`` of the root of a decreasing ``f``.

    ``f`` is nearly linear (log eps against log scale), so secant steps from ``(x0, f0)`` and
    ``x1`` find it in a few evaluations; once the root is bracketed the steps stay inside the
    bracket (Illinois-modified regula falsi).  The returned point was evaluated and is feasible.
    With ``predict`` the search also stops at a feasible point that the secant through the last
    two evaluations puts within ``PREDICT_WITHIN * rtol`` above the root (nearly linear ``f``: one evaluation
    fewer, often two; still a feasible evaluated point).

    ``f = +inf`` reads "unknown, taken as infeasible" (a PLD search over its memory cap).  With
    ``unknown_rtol``, a bracket whose infeasible end is such a point stops once it is
    ``unknown_rtol`` wide: the boundary it closes in on is the cap's, not the root's, and
    locating it to ``rtol`` cost a dozen near-cap compositions (3 s each).  With ``grow``, a
    walk that is not bracketed yet doubles its step limit each time the secant asks for more
    (the RDP start can be 40x the PLD answer's noise: 12 steps of 0.3 become 5).

    Args:
        f: a decreasing function of ``x`` (``+inf``: unknown, taken as infeasible).
        x0: the first point.
        f0: ``f(x0)``, already evaluated.
        x1: the second point to evaluate.
        rtol: the width of the final bracket, in ``x``.
        maxiter: the most evaluations of ``f``.
        predict: also stop where the secant puts a feasible point within
            ``PREDICT_WITHIN * rtol`` of the root.
        max_step: the largest step before the root is bracketed.
        unknown_rtol: None, or the width at which a bracket whose infeasible end is unknown stops.
        grow: double ``max_step`` each time the unbracketed secant asks for more.

    Returns:
        The smallest feasible ``x`` evaluated.

    Raises:
        InputError: if no evaluated point is feasible (``NO_FEASIBLE_NOISE``).
    """
    lo = flo = hi = fhi = None                 # lo: infeasible (f > 0), hi: feasible
    last = 0

    def record(x, fx):
        nonlocal lo, flo, hi, fhi, last
        if fx <= 0:
            if hi is None or x < hi:
                if last == +1 and flo is not None:
                    flo *= 0.5                  # Illinois: the same side moved twice
                hi, fhi = x, fx
            last = +1
        else:
            if lo is None or x > lo:
                if last == -1 and fhi is not None:
                    fhi *= 0.5
                lo, flo = x, fx
            last = -1

    record(x0, f0)
    xa, fa, xb = x0, f0, x1
    last_width = math.inf
    for _ in range(maxiter):
        fb = f(xb)
        record(xb, fb)
        if lo is not None and hi is not None and hi - lo <= rtol:
            break
        if (unknown_rtol is not None and lo is not None and hi is not None and flo == math.inf
                and hi - lo <= unknown_rtol):
            break
        if (predict and hi == xb and math.isfinite(fa) and math.isfinite(fb) and fb != fa
                and 0.0 <= xb - (xb - fb * (xb - xa) / (fb - fa)) <= PREDICT_WITHIN * rtol):
            break
        if lo is None or hi is None:              # not bracketed: secant, at most 0.5 per step
            sec = xb - fb * (xb - xa) / (fb - fa) if math.isfinite(fb) and math.isfinite(fa) and fb != fa else None
            if hi is None:                         # everything so far infeasible: go up
                nxt = lo + max_step if sec is None else min(max(sec, lo + rtol / 2), lo + max_step)
                clamped = sec is not None and sec > lo + max_step
            else:                                  # everything feasible: go down
                nxt = hi - max_step if sec is None else max(min(sec, hi - rtol / 2), hi - max_step)
                clamped = sec is not None and sec < hi - max_step
            if grow and clamped:
                max_step *= 2.0
        else:
            # bracketed: the secant through the last two points where it falls inside the bracket
            # and the bracket keeps shrinking by a quarter (superlinear on the smooth curve); else the
            # Illinois step from the bracket's ends (always converges)
            sec = (xb - fb * (xb - xa) / (fb - fa)
                   if math.isfinite(fb) and math.isfinite(fa) and fb != fa else None)
            width = hi - lo
            if sec is not None and lo < sec < hi and width <= 0.75 * last_width:
                nxt = sec
            else:
                # (an end at eps = 0 or eps = inf has no usable value: bisect)
                nxt = (hi - fhi * (hi - lo) / (fhi - flo) if math.isfinite(flo) and math.isfinite(fhi)
                       else 0.5 * (lo + hi))
            last_width = width
            nxt = min(max(nxt, lo + 0.25 * rtol), hi - 0.25 * rtol)
        xa, fa, xb = xb, fb, nxt
    if hi is None:
        raise InputError(NO_FEASIBLE_NOISE)
    return hi
