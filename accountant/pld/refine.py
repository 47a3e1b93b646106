"""Privacy-loss distributions (PLD) with a certified two-sided bracket on ``eps(delta)``.

Every event the papers use is a Gaussian release, possibly on a subsample.  In units of its
noise multiplier ``z`` (noise std / L2 sensitivity) each step has a *dominating pair* ``(P, Q)``
of one-dimensional Gaussian mixtures (all with std ``z``); its privacy loss ``L = log(dP/dQ)``
under ``P`` and the hockey-stick profile ``delta(eps) = E_P[(1 - e^(eps - L))_+]`` describe the
step completely (Dong, Roth & Su 2019; Zhu, Dong & Wang 2022).  Composition adds independent
losses (the profile of a composition is ``E[delta_A(eps - L_B)]``, monotone in each factor).

Dominating pairs (``N(m) = N(m, z^2)``):

* ``GaussianEvent`` (full batch): ``(N(1), N(0))`` -- Balle & Wang 2018.  Symmetric.
* ``PoissonSampledGaussianEvent`` (add/remove, probability ``q``): the *remove* pair
  ``((1-q) N(0) + q N(1), N(0))`` and the *add* pair ``(N(0), (1-q) N(0) + q N(1))``
  (Zhu, Dong & Wang 2022, Sec. 5, Poisson subsampling).  A neighbouring pair of datasets fixes
  the direction for the whole run, so each direction is composed on its own and the worse one
  is reported -- composing only one direction under-reports (Lebeda, Regehr, Kamath & Steinke
  2024, Sec. 4).
* ``WORSampledGaussianEvent`` (fixed size ``b`` of ``n`` without replacement, replace-one,
  ``gamma = b/n``): ``(gamma P + (1-gamma) Q, Q)`` with ``(P, Q) = (N(1), N(0))`` dominates the
  subsampled Gaussian under substitution (Zhu, Dong & Wang 2022, Sec. 5, sampling without
  replacement; the (eps, delta) form is Balle, Barthe & Gaboardi 2018, Thm 10).  The
  convention: dpcalib's noise multiplier of this event is noise std / *replace-one* sensitivity
  (``2C`` for a sum of clipped terms), which is the shift ``1`` of the pair.  The pair is
  attained: with every other record's contribution at ``-C`` and the replaced one going from
  ``+C`` to ``-C`` the release is exactly ``((1-gamma) N(-bC) + gamma N(-bC + 2C), N(-bC))``
  (tests/test_pld.py integrates that mechanism batch by batch).  Under replace-one the
  *direction* can change from step to step (it depends on the other records' clipped values,
  which the model chooses adaptively), so each step is charged ``max`` of the two directions'
  profiles -- a convex profile, hence a valid one -- before composing.

Discretisation (grid ``h``; losses at ``i*h``):

* **upper** -- each step's loss is rounded to the two neighbouring grid points at random with
  the probability that keeps ``E_P[e^-L]`` (the ``Q``-mass): this is exactly connect-the-dots
  (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022); its profile is the chord of the true
  convex profile between grid points, hence pointwise larger: a dominating pair.  Mass above
  the grid is charged as infinite loss, mass below is rounded up to the lowest grid point.
* **lower** -- the rounding error ``e = L' - L`` of a step has, given ``L``, range exactly
  ``h`` and mean in ``[0, g(h)]`` with ``g(h) = h/(1-e^-h) - 1 - log(h/(1-e^-h)) ~ h^2/8``.
  Hoeffding's inequality over the ``K`` steps: ``sum e <= t + K g(h)`` except with probability
  ``p = exp(-2 t^2 / (K h^2))``, so ``delta(eps) >= delta'(eps + t + K g) - p - (tail mass)``
  (the argument of the PRV accountant, Gopi, Lee & Wutschitz 2021, Thm 5.1, with one-sided
  rounding errors).  Both bounds use the same discrete distribution, so the bracket's width is
  about ``2 t``, i.e. ``O(h sqrt(K))``, not ``O(h K)``.
* **composition** -- one FFT: each step's pmf is folded onto a cyclic grid of ``N`` points,
  the transforms are raised to the counts and multiplied.  ``N`` covers a window
  ``[w_lo, w_hi]`` outside which the composed (discrete) loss has mass at most ``alpha`` on
  each side by a Chernoff bound computed from the discrete steps' moment generating
  functions; the wrapped-around mass (at most ``2 alpha``) is charged to the upper bound and
  subtracted from the lower one.  When delta is small the composition is repeated with the
  pmfs tilted by ``e^(lam L)`` toward the delta-quantile, so that the FFT's round-off stays
  relative to delta (down to delta = 1e-300); the round-off is bounded per bin by a
  floating-point error model (see :func:`compose_steps`) and added to / taken from the masses.

The grid is refined until ``upper - lower <= max(rtol * upper, atol)`` or the memory cap is reached (then
the best certified answer is returned with a note): this module; the bracket on one grid is
:mod:`.grid`'s.  ``delta(eps)`` -- the profile the same
compositions give -- is read in :mod:`.profile`.
"""

from __future__ import annotations

import math

from ..validation import InputError
from .. import validation
from ..caches import cached, clear_cache
from .pairs import (EpsilonBracket, LAST_STEP, MAX_DISCRETIZATION, MEMORY_CAP, MIN_DELTA, RTOL, checked_events,
                        grid_step, on_ladder)
from .grid import checked_delta, first_grid, pld_epsilon_at, window_points, window_points_of


__all__ = ["EpsilonBracket", "first_grid", "window_points", "pld_epsilon", "pld_epsilon_at", "report_grid", "clear_cache",
           "MAX_DISCRETIZATION", "MEMORY_CAP", "MIN_DELTA", "RTOL"]


def pld_epsilon(events, delta: float, rtol: float = RTOL, memory_cap: int = MEMORY_CAP,
                discretization: float | None = None, atol: float = 1e-5) -> EpsilonBracket:
    """Certified bracket ``[lower, upper]`` of ``eps(delta)`` for a composition.

    Args:
        events: an iterable of events or ``(event, count)`` pairs (Gaussian, Poisson-sampled
            Gaussian, without-replacement-sampled Gaussian; one neighbouring relation).
        delta: the target delta, in [``MIN_DELTA``, 1).
        rtol: the relative tolerance, in (0, 1]: the grid is refined until
            ``upper - lower <= max(rtol * upper, atol)``.
        memory_cap: bytes one composition may use, >= 2^20; when the next refinement would
            exceed it the best bracket so far is returned with ``converged=False`` and a note.
        discretization: a fixed grid step in (0, 64] (``MAX_DISCRETIZATION``) instead of the
            automatic choice (None).
        atol: the absolute tolerance on the width, in [0, inf).

    Returns:
        The :class:`EpsilonBracket` (``lower``, ``upper``, ``delta``, the final grid,
        ``converged`` and notes).

    Raises:
        InputError: if an argument is out of range, an event is unsupported, or a fixed
            ``discretization`` needs more than ``memory_cap`` bytes.
    """
    d = checked_delta(delta)
    r = validation.in_range(rtol, "rtol", 0.0, 1.0, low_open=True)
    a_tol = validation.in_range(atol, "atol", 0.0, math.inf, high_open=True)
    cap = validation.integer(memory_cap, "memory_cap", low=1 << 20)
    ev = checked_events(events)
    if not ev:
        return EpsilonBracket(0.0, 0.0, d, 0.0, True, ("no events composed",))
    return _pld_epsilon_cached(tuple(ev), d, r, cap, discretization, a_tol)


def report_grid(events, delta: float, rtol: float = RTOL, memory_cap: int = MEMORY_CAP,
                atol: float = 1e-5, with_uppers: bool = False):
    """The grid :func:`pld_epsilon` is expected to end on, without evaluating that grid.

    The automatic refinement picks each next grid by a square-root rule aimed at 0.7 of the
    tolerance; when the rule is not clamped, the next grid is expected to be the last.  This
    runs the refinement up to there (the coarse, cheap grids) and returns that grid -- a
    prediction (a calibration solves on it and checks the report afterwards), not a bracket.
    With ``with_uppers``: ``(grid, ((h, upper), ...))``, the upper ends of the grids the
    prediction composed (coarse to fine; a calibration extrapolates them to the predicted grid).

    Args:
        events: an iterable of events or ``(event, count)`` pairs, as for :func:`pld_epsilon`.
        delta: the target delta, in [``MIN_DELTA``, 1).
        rtol: the relative tolerance of the refinement (as for :func:`pld_epsilon`; not checked).
        memory_cap: bytes one composition may use (not checked).
        atol: the absolute tolerance on the width (not checked).
        with_uppers: also return the ``(grid, upper)`` pairs composed on the way.

    Returns:
        The predicted grid step (a float; 0.0 for no events), or ``(grid, ((h, upper), ...))``
        with ``with_uppers``.

    Raises:
        InputError: if ``delta`` is out of range or an event is unsupported.
    """
    d = checked_delta(delta)
    ev = checked_events(events)
    if not ev:
        return (0.0, ()) if with_uppers else 0.0
    out = _pld_epsilon_cached(tuple(ev), d, rtol, memory_cap, None, atol, True)
    return out if with_uppers else out[0]


@cached(maxsize=256)
def _pld_epsilon_cached(ev, d, r, cap, discretization, a_tol, predict=False):
    """:func:`pld_epsilon` on validated arguments; events are frozen, so answers are cached (a
    calibration asks for the same bracket when it re-checks, reports and certifies).  With
    ``predict``: the grid the refinement is expected to end on and the ``(grid, upper)`` pairs
    composed on the way (:func:`report_grid`)."""
    def tol(lo, up):
        t = max(r * up, a_tol)
        return max(t, HUGE_RTOL * up) if lo > HUGE_EPS else t

    def done(lo, up):
        # (an infinite upper end is never within a tolerance: inf - lo <= r * inf would say it is)
        return math.isfinite(up) and up - lo <= tol(lo, up)

    if discretization is not None:
        h = grid_step(discretization)
        lo, up = pld_epsilon_at(ev, d, h, cap)
        if lo is None:
            raise InputError(f"discretization={h!r} is not allowed: the composition needs more than "
                             f"memory_cap={cap} bytes; choose a coarser grid.")
        return EpsilonBracket(lo, up, d, h, done(lo, up), ())
    h = first_grid(ev, d)
    h = _start(ev, d, h, cap)
    best = None
    notes = []
    trace = []                     # (grid, its own upper end), for a prediction's caller
    prev_gap, slow = None, 0
    prev_own = None                # the previous grid's own width (before intersecting)
    prev_lo = prev_h = None
    h_fail = 0.0                   # the coarsest grid found over the cap (every finer one is too)
    for _ in range(20):
        if best is not None and (h <= h_fail or not _fits(ev, d, best.discretization, h, cap)):
            # over the cap: known, or predicted from the last grid's window (which scales as 1/h) --
            # compose instead the finer of the finest ladder grid predicted to fit and the grid half
            # as fine as the last, among those between the two and predicted to fit
            cands = [c for c in (_finest_fitting(ev, d, best.discretization, cap), on_ladder(0.5 * best.discretization))
                     if c is not None and max(h, h_fail) < c < best.discretization
                     and _fits(ev, d, best.discretization, c, cap)]
            if cands:
                h = min(cands)
                continue
            notes.append(f"memory cap of {cap} bytes reached at discretization {h:.3g}; the bracket "
                         f"is from the finest grid that fits")
            break
        lo, up = pld_epsilon_at(ev, d, h, cap)
        if lo is None:
            h_fail = max(h_fail, h)
        if lo is None and best is None and h < 16.0:  # the first grid does not fit: coarser
            h *= 4.0
            continue
        if lo is None and best is not None and h < best.discretization / 2.1:
            # a long step ran over the cap: a grid half as fine as the last one may still fit
            h = on_ladder(0.5 * best.discretization)
            continue
        if lo is None:
            notes.append(f"memory cap of {cap} bytes reached at discretization {h:.3g}; the bracket "
                         f"is from the finest grid that fits")
            break
        trace.append((h, up))
        own, own_lo = up - lo, lo
        if best is not None:      # every grid's bracket is valid: keep their intersection
            lo, up = max(lo, best.lower), min(up, best.upper)
        best = EpsilonBracket(lo, up, d, h, done(lo, up), tuple(notes))
        if best.converged and lo > HUGE_EPS and up - lo > max(r * up, a_tol):
            notes.append(f"eps is beyond {HUGE_EPS:g} (no privacy is left to tell apart): the bracket is "
                         f"refined to {HUGE_RTOL:g} relative, not rtol={r:g}")
            best = EpsilonBracket(lo, up, d, h, True, tuple(notes))
        if best.converged or not math.isfinite(up):
            break
        gap = up - lo
        # a finer grid narrows the bracket ~4x per halving; twice in a row less than 1.5x (3/4 of
        # a shorter last step's ratio) means a floor refining does not move: stop there
        slow = slow + 1 if prev_gap is not None and gap > prev_gap / min(1.5, 0.75 * prev_h / h) else 0
        # a finer grid whose own bracket is no narrower than the coarser one's: the round-off
        # charge, which grows with the number of grid points, already dominates (tiny delta, an
        # atom of most of the mass) -- finer grids only widen it: stop now, not one grid later
        if prev_own is not None and own >= prev_own:
            slow = 2
        # a refinement by f in the grid narrows the width by f^2 (both ends O(h^2)) or at least f
        # (a Hoeffding lower end, O(h)); by less than 3/4 of f, with both ends already positive
        # and within 10 %, a floor that does not move with h (round-off against a flat delta(eps):
        # few steps at a small eps) has taken over -- the next grid would only cost more
        if (prev_own is not None and own_lo > 0.0 and prev_lo > 0.0 and prev_own <= 0.1 * up
                and own * 0.75 * (prev_h / h) > prev_own):
            slow = 2
        # the width's order in h on the last refinement: 2 (both ends O(h^2)) down to ~1 where the
        # lower end's error dominates (small q: 0.9 seen); taken in [1.5, 2] -- between the
        # coarsest grids it may understate the next refinement's (1.2 beside 3)
        order = 2.0
        if prev_own is not None and 0.0 < own < math.inf and 0.0 < prev_own < math.inf and prev_h > h:
            order = min(2.0, max(1.5, math.log(prev_own / own) / math.log(prev_h / h)))
        prev_gap, prev_own, prev_lo, prev_h = gap, own, own_lo, h
        if slow >= 2:
            notes.append(f"the bracket stopped narrowing at discretization {h:.3g} (width {gap:.3g}; "
                         f"a floating-point floor, finer grids do not help)")
            best = EpsilonBracket(lo, up, d, h, False, tuple(notes))
            break
        # the width is O(K h^2) (both ends O(h^2) per step), nearer O(h) at small q: refine by the
        # root of that order
        fac = (0.7 * tol(lo, up) / gap) ** (1.0 / order) if gap > 0 else 0.5
        h_next = on_ladder(h * min(LAST_STEP, max(1.0 / 6, fac)))
        if gap > 0 and fac < BIG_JUMP and window_points_of(ev, d, h) * h / h_next >= BIG_REFINE:
            # a long step to a composition of seconds: the width's order on fine grids falls below
            # the coarse grids' (a million steps at q = 1e-4, eps 5.6: 2.2, then 1.6 over a 5.7x
            # step), and a grid one rung too coarse costs a second, finer composition -- aim lower,
            # where a rung finer than needed costs ~1.2x instead (a shorter step keeps the usual
            # aim: eps 16 there, 2.4x, met the tolerance with the order of the coarse grids)
            fac = (BIG_AIM * tol(lo, up) / gap) ** (1.0 / order)
            h_next = on_ladder(h * min(LAST_STEP, max(1.0 / 6, fac)))
        # predicted last: the rule is not clamped, or (clamped) the width scaled by (h'/h)^2 is
        # already within the tolerance -- so a prediction need not compose both ends there;
        # unless, on a coarse first grid (>= 1e-3: milliseconds), the width narrowed from the grid
        # 2x coarser at an order below 1.5 that leaves it wide (q = 1e-4: ~1.1; 2 missed 4 in 48)
        if predict and (fac >= 1.0 / 6 or gap * (h_next / h) ** 2 <= tol(lo, up)):
            o1 = _first_order(ev, d, h, cap, own) if len(trace) == 1 and h >= 1e-3 else 2.0
            if o1 >= 1.5 or gap * (h_next / h) ** max(1.0, o1) <= tol(lo, up):
                return h_next, tuple(trace)
        h = h_next
    if predict:
        return (best.discretization if best is not None else 0.0), tuple(trace)
    if best is None:
        raise InputError(f"accountant='pld' is not allowed for these events: their privacy loss is so wide (very "
                         f"small noise) that even the coarsest grid (discretization {h:.3g}) does not fit "
                         f"memory_cap={cap} bytes; use accountant='best' (RDP answers there) or 'rdp', or raise "
                         f"memory_cap.")
    return EpsilonBracket(best.lower, best.upper, d, best.discretization, best.converged, tuple(notes))


#: a refinement whose next grid's window is predicted at this many points or more (a composition of
#: ~1 s here) in a long step (to a grid more than 1 / BIG_JUMP times finer) aims at BIG_AIM of the
#: tolerance instead of 0.7
BIG_REFINE = 1 << 20
BIG_AIM = 0.4
BIG_JUMP = 1.0 / 3.0


#: beyond this eps (the loss cut's scale: e^eps overflows any double, and no privacy is left to tell
#: apart) a bracket is refined to HUGE_RTOL relative only -- rtol there made the report of a run with
#: noise 0.01 (eps ~ 6e4) compose windows of 1e7 points for minutes
HUGE_EPS = 1000.0
HUGE_RTOL = 1e-3
#: a first grid whose window would be larger than this many points is composed only after a grid with a
#: window of about PROBE_POINTS has shown that eps is not beyond HUGE_EPS
BIG_WINDOW = 1 << 22
PROBE_POINTS = 1 << 18
#: bytes per window point of a composition (compose.compose_steps refuses beyond cap / this)
_BYTES_PER_POINT = 48


def _start(ev, d, h, cap) -> float:
    """The refinement's first grid: ``h`` (:func:`first_grid`) unless its window is predicted above
    BIG_WINDOW points.  Then a probe grid with a window of ~PROBE_POINTS is composed (its bracket is
    cached), and the first grid is the probe grid where its lower end is beyond HUGE_EPS; else, where
    ``h``'s window is predicted over the cap from the probe's (:func:`_fits`), the finest ladder grid
    predicted to fit -- a grid over the cap costs the seconds of its steps to find out, then 4x
    coarser is tried (ClipD2P at 10^9 iterations: 4.7 and 7.2 s for two such grids, 12 s of a report
    row's 46 s, before the grid that fits, 4.88e-5, which the probe predicts); else ``h``."""
    hc = max(h, 0.05)
    wc = window_points_of(ev, d, hc)
    if wc * hc / h <= BIG_WINDOW:
        return h
    hp = min(MAX_DISCRETIZATION, hc * wc / PROBE_POINTS)
    if hp <= h:
        return h
    lo, _ = pld_epsilon_at(ev, d, hp, cap)
    if lo is None:
        return h
    if lo > HUGE_EPS:
        return hp
    if not _fits(ev, d, hp, h, cap):
        g = _finest_fitting(ev, d, hp, cap)
        if g is not None and h < g < hp:
            return g
    return h


def _fits(ev, d, h_known, h, cap) -> bool:
    """Whether the first direction's window at grid ``h`` is predicted to fit the cap, from its window
    at ``h_known`` (composed before: its steps are cached) scaled by ``h_known / h`` -- the window
    in loss units barely moves between fine grids (a blocked composition, :mod:`.blocks`, ends on
    the same distribution and window).  Over 1.1 times the cap the composition's own check
    (:func:`~.compose.compose_steps`) would refuse it, after the seconds its steps cost; at or
    below, that check decides.  Stopping early costs only a wider bracket, with the cap's note."""
    return _BYTES_PER_POINT * window_points_of(ev, d, h_known) * h_known / h <= 1.1 * cap


def _finest_fitting(ev, d, h_known, cap) -> float | None:
    """The finest ladder grid whose predicted window (:func:`_fits`) fits the cap; None where the
    prediction is not a finite positive grid."""
    x = _BYTES_PER_POINT * window_points_of(ev, d, h_known) * h_known / cap
    if not x > 0.0 or not math.isfinite(x):
        return None
    g = on_ladder(x)
    return g if g >= x else on_ladder(g * 2.0 ** 0.25 * (1.0 + 1e-12))   # the next rung up, exactly


def _first_order(ev, d, h, cap, own) -> float:
    """The order at which the width ``own`` on grid ``h`` narrowed from the grid 2x coarser's (one
    coarse composition; 2 where it cannot tell): a prediction's guess."""
    lo, up = pld_epsilon_at(ev, d, 2.0 * h, cap) if 2.0 * h <= MAX_DISCRETIZATION else (None, None)
    if lo is None or not 0.0 < own < up - lo < math.inf:
        return 2.0
    return math.log((up - lo) / own) / math.log(2.0)
