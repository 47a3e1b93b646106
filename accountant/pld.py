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
the best certified answer is returned with a note).  ``delta(eps)`` -- the profile the same
compositions give -- is read in :mod:`.pld_profile`.
"""

from __future__ import annotations

import math

from .validation import InputError
from . import validation
from .caches import cached, clear_cache, register
from .pld_compose import loss_window
from .pld_bracket import lower_one, lower_usable, upper_info, upper_one
from .pld_pairs import (ALIAS, EpsilonBracket, MAX_DISCRETIZATION, MEMORY_CAP, MIN_DELTA, OverCap, RTOL, TAIL,
                        aligned_grid, beyond, checked_events, directions, dominating_pairs, grid_step, LAST_STEP,
                        on_ladder)
from . import pld_pairs
from .pld_discretise import discretised_steps
from .pld_blocks import bracket_steps as _steps


__all__ = ["EpsilonBracket", "first_grid", "window_points", "pld_epsilon", "pld_epsilon_at", "report_grid", "clear_cache",
           "MAX_DISCRETIZATION", "MEMORY_CAP", "MIN_DELTA", "RTOL"]


def _delta(delta) -> float:
    d = validation.delta(delta)
    if d < MIN_DELTA:
        raise InputError(f"delta={delta!r} is not allowed: expected a number in [{MIN_DELTA:g}, 1) for the "
                         f"privacy-loss-distribution accountant (below, its FFT round-off is not small "
                         f"against delta); use the RDP or GDP accountant.")
    return d


def pld_epsilon_at(events, delta: float, discretization: float, memory_cap: int = MEMORY_CAP,
                   side: str = "both"):
    """``(lower, upper)`` bracket of ``eps(delta)`` at one grid size (None, None over the cap).

    ``side="upper"`` skips the lower-step compositions (the lower end is then only Hoeffding's,
    from the upper composition); ``side="lower"`` skips the upper compositions where the lower
    steps allow it (the upper end is then +inf).  A calibration's search needs only one end.
    The two ends are computed separately and remembered for the last few compositions, so a
    report at a point the search evaluated composes only its lower end.
    """
    if side not in ("both", "upper", "lower"):
        raise InputError(f"side={side!r} is not allowed: expected 'both', 'upper' or 'lower'.")
    d = _delta(delta)
    h = grid_step(discretization)
    ev = tuple(checked_events(events))
    key = (ev, d, h, memory_cap, cut_level(ev, d, memory_cap))
    if side == "lower":         # every value below is a function of the key alone (no cache state)
        lows = _lower_ends(key, None)
        return (None, None) if lows is _OVER else (max(lows), math.inf)
    ups = _upper_ends(key)
    if ups is _OVER:
        return None, None
    if side == "upper":
        return max(lo for lo, _ in ups), max(up for _, up in ups)
    lows = _lower_ends(key, ups)
    if lows is _OVER:
        return None, None
    return max(lows + [lo for lo, _ in ups]), max(up for _, up in ups)


#: the loss cut follows eps: where a subsampled pair's losses reach past ADAPT_FROM, a subsampled
#: pair's grid ends at the certified upper end of a coarse bracket plus CUT_MARGIN (at most LOSS_CUT)
CUT_MARGIN = 64.0
ADAPT_FROM = 4.0 * CUT_MARGIN
#: the grid of that coarse bracket
CUT_PROBE_GRID = 0.05


@cached(maxsize=256)
def cut_level(ev, d: float, cap: int) -> float | None:
    """Where a bracket of ``eps(d)`` cuts its subsampled pairs' losses (:func:`~.pld_pairs._cut`):
    ``min(LOSS_CUT, eps_up + CUT_MARGIN)`` with ``eps_up`` the certified upper end of the bracket on
    the grid CUT_PROBE_GRID (cut at LOSS_CUT), where some pair's losses reach past ADAPT_FROM with P-mass
    beyond ADAPT_FROM at most ``d / k`` (else None: LOSS_CUT, and nothing is composed here).

    Any level keeps both ends bounds (moving a loss up raises every composition's profile, down
    lowers it); the upper end gives away at most ``sum_i p_i e^(eps - level) <= d e^(eps - eps_up -
    CUT_MARGIN)`` in delta at the eps it reads (``sum_i p_i <= d``: the mass condition), i.e. nothing
    below ``eps_up + 20``, and the lower end loses at most as much.  DP-SRM with a first batch of one
    record at noise 0.027 (losses ~690, eps 0.11): the level falls from 1000 to ~64 and every window
    with it (docs/accounting.md)."""
    tau = _step_tail(ev, d)
    if not any(pair.q < 1.0 and pair.loss_range(tau)[1] > ADAPT_FROM and beyond(pair, ADAPT_FROM)[1] <= d / k
               for e, k in ev for direction in directions(ev) for pair in dominating_pairs(e, direction)):
        return None
    ups = _upper_ends((ev, d, max(first_grid(ev, d), CUT_PROBE_GRID), cap, None))
    if ups is _OVER:
        return None
    up = max(u for _, u in ups)
    level = up + CUT_MARGIN
    return level if math.isfinite(level) and level < pld_pairs.LOSS_CUT else None


def _step_tail(ev, d: float) -> float:
    """Mass each step's tails beyond its grid may hold: ``TAIL * delta`` shared by the K steps."""
    return TAIL * d / max(sum(k for _, k in ev), 1)


_OVER = object()                                   # a composition over the memory cap
_SIDES: dict = {}                                  # (side, events, delta, h, cap) -> ends


register(_SIDES.clear)


def _remember(key, value):
    if len(_SIDES) >= 64:
        _SIDES.pop(next(iter(_SIDES)))
    _SIDES[key] = value
    return value


#: a direction whose untilted window at the grid has at least this many points is first composed
#: on an 8x coarser grid (about 1/8 of the cost): if that one needed a tilted re-composition,
#: so will the fine one, and the fine untilted composition is skipped
HINT_POINTS = 1 << 14


def _upper_ends(key):
    """Per direction ``(Hoeffding lower, upper)`` from the upper steps' compositions.  A later
    direction whose upper end -- on an 8x coarser grid first, then on this one before any
    re-composition -- is at or below an earlier direction's lower end cannot be the worse one:
    it is not refined further (its entry is then that coarser or first upper end).  The 8x
    coarser composition (done for large windows and for later directions) is also the fine
    one's hint (:func:`upper_one`)."""
    if ("upper",) + key in _SIDES:
        return _SIDES[("upper",) + key]
    ev, d, h, cap, level = key
    tau = _step_tail(ev, d)
    out = []
    # blocks (:mod:`.pld_blocks`) give no Hoeffding end -- no earlier direction's lower end to
    # skip a later one by -- and small windows: no coarser composition first
    blocks = False
    for direction in directions(ev):
        floor = max((x for x, _ in out), default=-math.inf)
        coarse = steps = None
        big = False                  # the first direction's fine window is large (hint first)
        if not out:
            try:
                steps = _steps(ev, h, tau, direction, cap, d, level=level)
            except OverCap:
                return _remember(("upper",) + key, _OVER)
            blocks = any(s.block > 1 for s in steps)
            a, b = loss_window(steps, h, math.log(ALIAS * d)) if steps and not blocks else (0, 0)
            big = b - a + 1 >= HINT_POINTS
        if out and blocks:
            # blocks give no lower end here, but only the largest upper end is read: a later
            # direction whose upper end on an 8x coarser grid (certified as any grid's, and cheap)
            # is at or below an earlier one's upper end keeps that coarser end
            ceiling = max(up for _, up in out)
            try:
                coarse = upper_info(_steps(ev, 8.0 * h, tau, direction, cap, d, level=level), 8.0 * h, d, cap, ceiling)
            except OverCap:
                coarse = None
            if coarse is not None and coarse[1] is not None and coarse[1] <= ceiling:
                out.append((coarse[0], coarse[1]))
                continue
            coarse = None
        if (out or big) and not blocks:
            # any grid's upper end is certified: if an 8x coarser grid (8x cheaper) already puts
            # this direction below the earlier one's lower end, the fine one is not needed
            try:
                coarse = upper_info(_steps(ev, 8.0 * h, tau, direction, cap, d, level=level), 8.0 * h, d, cap, floor)
            except OverCap:
                coarse = None
            if coarse is not None and coarse[1] is not None and coarse[1] <= floor:
                out.append((coarse[0], coarse[1]))
                continue
        if steps is None:
            try:
                steps = _steps(ev, h, tau, direction, cap, d, level=level)
            except OverCap:
                return _remember(("upper",) + key, _OVER)
        lo, up = upper_one(steps, h, d, cap, floor, coarse)
        if lo is None:
            return _remember(("upper",) + key, _OVER)
        out.append((lo, up))
    return _remember(("upper",) + key, out)


def _lower_ends(key, ups):
    """Per direction the lower end from the lower steps' compositions.  With the upper ends
    known (``ups``), a direction whose upper end is at or below another direction's lower end
    is skipped (its lower end cannot be the larger one); without them, a later direction is
    skipped when its upper end on an 8x coarser grid is at or below the lower ends found before
    it.  Where a direction's lower steps are unusable its Hoeffding end (from
    :func:`_upper_ends`) is used.  Only the maximum of the list is ever read."""
    ev, d, h, cap, level = key
    skip = tuple(ups is not None and len(ups) > 1 and
                 ups[i][1] <= max(lo for k, (lo, _) in enumerate(ups) if k != i)
                 for i in range(len(directions(ev))))
    ck = ("lower", skip, ups is not None) + key    # (the upper ends steer a re-tilt: lower_one)
    if ck in _SIDES:
        return _SIDES[ck]
    tau = _step_tail(ev, d)
    out = []
    for i, (direction, skipped) in enumerate(zip(directions(ev), skip)):
        if skipped or (ups is not None and out and ups[i][1] <= max(out)):
            continue                 # (its lower end is at most its upper end: not the maximum)
        if ups is None and out:
            # lower end only (no upper ends known): a later direction whose upper end -- on an 8x
            # coarser grid, certified as any grid's -- is at or below the lower end found so far
            # cannot raise the maximum; it is not composed (for Poisson DP-SGD the add direction,
            # ~40 % of the cost)
            try:
                c = upper_info(_steps(ev, 8.0 * h, tau, direction, cap, d, level=level), 8.0 * h, d, cap, max(out))
            except OverCap:
                c = None
            if c is not None and c[1] is not None and c[1] <= max(out):
                continue
        try:
            lsteps = _steps(ev, h, tau, direction, cap, d, lower=True, level=level)
        except OverCap:
            return _remember(ck, _OVER)
        hl = h
        if not lower_usable(lsteps):
            # a bin holding nearly all the mass mid-way between two grid points (below a thin
            # tail: small q and noise) breaks the lower steps; on a grid that puts that atom on
            # a grid point they usually exist (:func:`~.pld_pairs.aligned_grid`) -- else Hoeffding's end
            ha = aligned_grid(ev, h)
            if ha is not None:
                try:
                    la = _steps(ev, ha, tau, direction, cap, d, lower=True, level=level)
                except OverCap:
                    la = None
                if la is not None and lower_usable(la):
                    lsteps, hl = la, ha
        if not lower_usable(lsteps):                       # Hoeffding's end from the upper steps
            u = _upper_ends(key)
            if u is _OVER:
                return _remember(ck, _OVER)
            out.append(u[directions(ev).index(direction)][0])
            continue
        lo = lower_one(lsteps, hl, d, cap, None if ups is None else max(up for _, up in ups))
        if lo is None:
            return _remember(ck, _OVER)
        out.append(lo)
    return _remember(ck, out or [0.0])


def pld_epsilon(events, delta: float, rtol: float = RTOL, memory_cap: int = MEMORY_CAP,
                discretization: float | None = None, atol: float = 1e-5) -> EpsilonBracket:
    """Certified bracket ``[lower, upper]`` of ``eps(delta)`` for a composition.

    Args:
      events: an iterable of events or ``(event, count)`` pairs (Gaussian, Poisson-sampled
        Gaussian, without-replacement-sampled Gaussian; one neighbouring relation).
      delta: target delta in (0, 1).
      rtol, atol: the grid is refined until ``upper - lower <= max(rtol * upper, atol)``.
      memory_cap: bytes one composition may use; when the next refinement would exceed it the
        best bracket so far is returned with ``converged=False`` and a note.
      discretization: a fixed grid step in (0, 64] (``MAX_DISCRETIZATION``) instead of the
        automatic choice.
    """
    d = _delta(delta)
    r = validation.in_range(rtol, "rtol", 0.0, 1.0, low_open=True)
    a_tol = validation.in_range(atol, "atol", 0.0, math.inf, high_open=True)
    cap = validation.integer(memory_cap, "memory_cap", low=1 << 20)
    ev = checked_events(events)
    if not ev:
        return EpsilonBracket(0.0, 0.0, d, 0.0, True, ("no events composed",))
    return _pld_epsilon_cached(tuple(ev), d, r, cap, discretization, a_tol)


def first_grid(events, delta: float) -> float:
    """The grid the automatic refinement of :func:`pld_epsilon` starts on: ``0.5 / sqrt(K log(1e6 /
    delta))`` (K steps; the bracket's width is ~``K h^2``), taken on the ladder, at most 0.05."""
    d = _delta(delta)
    K = sum(k for _, k in checked_events(events))
    return on_ladder(min(0.05, 0.5 / math.sqrt(max(K, 1) * math.log(1e6 / d))))


def window_points(events, delta: float, discretization: float) -> int:
    """Grid points of the first direction's untilted composition window at grid
    ``discretization`` (the size of the FFT one bracket at that grid costs; tilted re-compositions
    are no larger).  The window is the Chernoff window of :func:`~.pld_compose.loss_window`, so
    its span in loss units barely depends on the grid: a caller may evaluate it on a coarse grid
    ``h_c`` (cheap) and scale by ``h_c / h`` for a fine one.  0 where there is nothing to compose."""
    return _window_points(tuple(checked_events(events)), _delta(delta), grid_step(discretization))


@cached(maxsize=256)
def _window_points(ev, d, h) -> int:
    """:func:`window_points` on validated arguments (a refinement asks it of every grid it composed)."""
    try:
        steps = discretised_steps(ev, h, _step_tail(ev, d), directions(ev)[0], MEMORY_CAP, delta=d,
                                  level=cut_level(ev, d, MEMORY_CAP)) if ev else []
    except OverCap:
        return MEMORY_CAP // 8
    if not steps:
        return 0
    a, b = loss_window(steps, h, math.log(ALIAS * d))
    return int(b - a + 1)


def report_grid(events, delta: float, rtol: float = RTOL, memory_cap: int = MEMORY_CAP,
                atol: float = 1e-5, with_uppers: bool = False):
    """The grid :func:`pld_epsilon` is expected to end on, without evaluating that grid.

    The automatic refinement picks each next grid by a square-root rule aimed at 0.7 of the
    tolerance; when the rule is not clamped, the next grid is expected to be the last.  This
    runs the refinement up to there (the coarse, cheap grids) and returns that grid -- a
    prediction (a calibration solves on it and checks the report afterwards), not a bracket.
    With ``with_uppers``: ``(grid, ((h, upper), ...))``, the upper ends of the grids the
    prediction composed (coarse to fine; a calibration extrapolates them to the predicted grid).
    """
    d = _delta(delta)
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
    h = _huge_start(ev, d, h, cap) or h
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
        if gap > 0 and fac < BIG_JUMP and _window_points(ev, d, h) * h / h_next >= BIG_REFINE:
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
#: bytes per window point of a composition (pld_compose.compose_steps refuses beyond cap / this)
_BYTES_PER_POINT = 48


def _huge_start(ev, d, h, cap) -> float | None:
    """A coarser first grid where eps is huge: None unless the first grid's window is predicted above
    BIG_WINDOW points and a probe grid with a window of ~PROBE_POINTS puts the lower end beyond
    HUGE_EPS (then the probe grid, whose bracket is cached)."""
    hc = max(h, 0.05)
    wc = _window_points(ev, d, hc)
    if wc * hc / h <= BIG_WINDOW:
        return None
    hp = min(MAX_DISCRETIZATION, hc * wc / PROBE_POINTS)
    if hp <= h:
        return None
    lo, _ = pld_epsilon_at(ev, d, hp, cap)
    return hp if lo is not None and lo > HUGE_EPS else None


def _fits(ev, d, h_known, h, cap) -> bool:
    """Whether the first direction's window at grid ``h`` is predicted to fit the cap, from its window
    at ``h_known`` (composed before: its steps are cached) scaled by ``h_known / h`` -- the window
    in loss units barely moves between fine grids (a blocked composition, :mod:`.pld_blocks`, ends on
    the same distribution and window).  Over 1.1 times the cap the composition's own check
    (:func:`~.pld_compose.compose_steps`) would refuse it, after the seconds its steps cost; at or
    below, that check decides.  Stopping early costs only a wider bracket, with the cap's note."""
    return _BYTES_PER_POINT * _window_points(ev, d, h_known) * h_known / h <= 1.1 * cap


def _finest_fitting(ev, d, h_known, cap) -> float | None:
    """The finest ladder grid whose predicted window (:func:`_fits`) fits the cap; None where the
    prediction is not a finite positive grid."""
    x = _BYTES_PER_POINT * _window_points(ev, d, h_known) * h_known / cap
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
