"""The refinement of the PLD bracket of ``eps(delta)``: the grid is refined until ``upper - lower <=
max(rtol * upper, atol)`` or the memory cap is reached (then the best certified answer is returned with a
note), each grid's bracket from :mod:`.grid`; and the prediction of the grid a refinement ends on (what
a calibration solves on).  The method is :mod:`.pld`'s.  The arguments are trusted: the queries of
:mod:`.queries` check them once.
"""

from __future__ import annotations

import math

from ..validation import InputError
from ..caches import cached
from .shared import EpsilonBracket, LAST_STEP, MAX_DISCRETIZATION, on_ladder
from .grid import epsilon_at, first_grid_of, window_points_of
from .lossdist import aligned_step


__all__ = []


@cached(maxsize=256)
def refined(ev, d, r, cap, h_fixed, a_tol, predict=False):
    """The bracket of :func:`~.queries.pld_epsilon`: the grid refined until the width is within
    ``max(r * upper, a_tol)`` (or on the one grid ``h_fixed``); events are frozen, so answers are
    cached (a calibration asks for the same bracket when it re-checks, reports and certifies).  With
    ``predict``: the grid the refinement is expected to end on and the ``(grid, upper)`` pairs
    composed on the way (:func:`~.queries.report_grid`).

    The arguments are trusted: :func:`~.queries.pld_epsilon` and :func:`~.queries.report_grid`
    check them once, and nothing here checks them again.

    Args:
        ev: a tuple of checked ``(event, count)`` pairs, not empty.
        d: the target delta (checked).
        r: the relative tolerance (checked).
        cap: bytes one composition may use (checked).
        h_fixed: a fixed grid step (checked), or None for the automatic refinement.
        a_tol: the absolute tolerance on the width (checked).
        predict: return the predicted last grid and the ``(grid, upper)`` pairs instead.

    Returns:
        An :class:`~.shared.EpsilonBracket`, or with ``predict`` a tuple ``(grid, ((h, upper), ...))``.

    Raises:
        InputError: if the fixed grid ``h_fixed`` or (automatic) even the coarsest grid needs more
            than ``cap`` bytes: the inputs ask for what the memory cap cannot hold.
    """
    def tol(lo, up):
        t = max(r * up, a_tol)
        return max(t, HUGE_RTOL * up) if lo > HUGE_EPS else t

    def done(lo, up):
        # (an infinite upper end is never within a tolerance: inf - lo <= r * inf would say it is)
        return math.isfinite(up) and up - lo <= tol(lo, up)

    if h_fixed is not None:
        h = h_fixed
        lo, up = epsilon_at(ev, d, h, cap)
        if lo is None:
            raise InputError(f"discretization={h!r} is not allowed: the composition needs more than "
                             f"memory_cap={cap} bytes; choose a coarser grid.")
        return EpsilonBracket(lo, up, d, h, done(lo, up), ())
    h = first_grid_of(ev, d)
    h = _start(ev, d, h, cap)
    # events of the non-Gaussian kinds (their own pairs, :mod:`.lossdist`): atoms, width O(h)
    atomic = any(not getattr(e, "gaussian", False) for e, _ in ev)
    no_lower = 0
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
        if atomic and best is not None and aligned_step(ev, h) == aligned_step(ev, best.discretization):
            # the grid the last one was, once aligned on the heaviest atom (an atom between h/2 and
            # both grids: a sampled Laplace at eps 0.006 on 0.05 and 0.0074): nothing new -- finer
            h = on_ladder(0.5 * h)
            continue
        lo, up = epsilon_at(ev, d, h, cap)
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
        if atomic:
            # a pair with atoms off the grid (a sampled Laplace, randomized response) narrows only
            # ~linearly in h and unevenly (where its atoms fall): a floor is only a grid that does
            # not narrow the bracket at all; the heuristics below would stop far from it
            # (a grid with no lower end yet is not a floor -- for its first few grids)
            no_lower = no_lower + 1 if lo <= 0.0 else 0
            slow = slow + 1 if prev_gap is not None and gap > 0.98 * prev_gap and (lo > 0.0 or no_lower > 2) else 0
            prev_gap, prev_h = gap, h
            if slow >= 2:
                notes.append(f"the bracket stopped narrowing at discretization {h:.3g} (width {gap:.3g})")
                best = EpsilonBracket(lo, up, d, h, False, tuple(notes))
                break
            fac = (0.7 * tol(lo, up) / gap) if gap > 0 else 0.5
            h = on_ladder(h * min(LAST_STEP, max(1.0 / 6, fac)))
            continue
        # a finer grid whose own bracket is no narrower than the coarser one's: the round-off
        # charge, which grows with the number of grid points, already dominates (tiny delta, an
        # atom of most of the mass) -- finer grids only widen it: stop now, not one grid later.
        # Not where the grid is coarser than a tenth of eps and the width still half the grid or
        # more: that width is the grid's own (one sampled step at eps 0.05 on grids 0.05 then
        # 0.0074, widths 0.0057 then h exactly, narrows on the next grids: 1e-4 relative at 2e-4)
        grid_bound = own >= 0.5 * h and h > 0.1 * up
        if prev_own is not None and own >= prev_own and not grid_bound:
            slow = 2
        # a refinement by f in the grid narrows the width by f^2 (both ends O(h^2)) or at least f
        # (a Hoeffding lower end, O(h)); by less than 3/4 of f, with both ends already positive
        # and within 10 %, a floor that does not move with h (round-off against a flat delta(eps):
        # few steps at a small eps) has taken over -- the next grid would only cost more
        if (prev_own is not None and own_lo > 0.0 and prev_lo > 0.0 and prev_own <= 0.1 * up
                and own * 0.75 * (prev_h / h) > prev_own and not grid_bound):
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
    """The refinement's first grid: ``h`` (:func:`~.grid.first_grid_of`) unless its window is predicted above
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
    lo, _ = epsilon_at(ev, d, hp, cap)
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
    lo, up = epsilon_at(ev, d, 2.0 * h, cap) if 2.0 * h <= MAX_DISCRETIZATION else (None, None)
    if lo is None or not 0.0 < own < up - lo < math.inf:
        return 2.0
    return math.log((up - lo) / own) / math.log(2.0)
