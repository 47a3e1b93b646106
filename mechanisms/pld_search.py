"""The PLD root search of a tight calibration: the smallest noise scale whose certified PLD upper end on
eps stays within the target, found coarse to fine from a feasible start (:func:`pld_scale`).  What
the tightening does around it -- the start, the room below the answer, the notes -- is
:mod:`.tighten`; the secant steps are :mod:`.search`'s."""

from __future__ import annotations

import math

from .search import loglog_root

__all__ = []

#: memory cap of one composition during the search for the noise: the accountant's own, so that
#: the search can always run on the grid its report uses
SEARCH_CAP = 1 << 30


#: a PLD search whose smaller scales run over the memory cap stops within this (log) distance
#: of the cap's boundary: the answer there is the cap's, not the tight one, and each near-cap
#: composition costs seconds
CAP_RTOL = 1e-2


#: the coarse bracket of a PLD search (and of a PLD start): rtol, and atol as a fraction of the target
COARSE_RTOL, COARSE_ATOL = 1e-2, 1e-3



def pld_scale(build, target: float, delta: float, start: float, rtol: float = 1e-6) -> tuple[float, bool]:
    """Smallest noise scale whose certified PLD upper bound on eps stays within ``target``, and
    whether a smaller scale was left unexamined because its composition ran over the memory
    cap (``SEARCH_CAP``) or its grid could not tell (upper end above twice the target beside a
    lower end below half of it): ``(scale, capped)``.

    ``start`` is a feasible scale (the RDP-tight one: RDP is sound, so the PLD upper bound there
    is at most ``target`` too).  Coarse to fine: the root is first found on a coarse grid (the
    one the automatic refinement picks at ``start`` for a 1 % bracket -- cheap, and its upper
    end is already within ~1e-4 of the fine one; :func:`_coarse_root`, after a rough root on
    the refinement's first grid where the start is far: :func:`_rough_start`), then on the grid
    the report at that root uses (the automatic grids come from a fixed ladder, so nearby
    scales share it), starting from the coarse root with the coarse slope: one to three
    evaluations of the upper end only (:func:`_fine_root`).  On a fixed grid the upper bound is
    certified and continuous in the scale; the search runs secant steps in log-log coordinates
    (:func:`~.search.loglog_root`).  The answer is then re-checked with the procedure the
    reports use (``epsilon_report(accountant="best")``) and nudged up until it holds: never
    overshoots.  Returns ``start`` when the PLD does not apply or is not smaller, and when
    ``delta`` is at least the chance that the record is used at all (then eps = 0 at every
    noise level: :func:`~dpcalib.accountant.events.never_used_probability`).

    Args:
        build: maps a noise scale (> 0) to the accountant of the run at that scale.
        target: the target eps, > 0.
        delta: the target delta, in (0, 1).
        start: a feasible scale, > 0 (the RDP-tight one).
        rtol: relative tolerance of the search on the scale.

    Returns:
        ``(scale, capped)``: the smallest certified scale (at most ``start``), and whether a
        smaller scale was left unexamined (over the memory cap, or its grid could not tell).
    """
    from ..accountant.events import never_used_probability
    from ..accountant.pld import MIN_DELTA, pld_epsilon

    if delta < MIN_DELTA:
        return start, False
    if delta >= 1.0 - never_used_probability(build(start).events):
        # eps is 0 at every noise level (delta is at least the chance that the record is used at
        # all): no smallest noise exists, and a search would only walk down to the memory cap
        return start, False
    over = []                           # scales (log) over the cap, or where the grid cannot tell
    on = _upper_search(build, target, delta, over)
    # eps ~ 1/scale (Poisson, small eps) to 1/scale^3 (few steps): a first step with the slope of
    # the RDP curve at the start (its grid answer at two scales, ~1 ms), at most 26 % down
    # (PLD-tight noise is rarely further below RDP-tight; where it is, the secant steps go on)
    k0 = _rdp_slope(build, start, delta)
    x0 = _rough_start(build, target, delta, start, on, k0)
    b = pld_epsilon(build(math.exp(x0)).events, delta, rtol=COARSE_RTOL, memory_cap=SEARCH_CAP,
                    atol=COARSE_ATOL * target)
    if not b.upper < target:       # the coarse bracket is too wide to tell: the fine one
        b = pld_epsilon(build(math.exp(x0)).events, delta, memory_cap=SEARCH_CAP, atol=1e-4 * target)
    if not b.upper < target or b.discretization <= 0.0:
        if x0 == math.log(start):
            return start, False
        x0 = math.log(start)
        b = pld_epsilon(build(start).events, delta, rtol=COARSE_RTOL, memory_cap=SEARCH_CAP, atol=COARSE_ATOL * target)
        if not b.upper < target or b.discretization <= 0.0:
            return start, False
    xt, k, slope = _coarse_root(on, b, target, x0, k0)
    xt = _fine_root(build, target, delta, on, b.discretization, xt, k, slope, rtol)
    t = math.exp(xt)
    step = rtol
    while t < start and build(t).epsilon_report(delta, accountant="best").epsilon > target:
        t = min(start, t * (1.0 + step))
        step *= 2.0
    return t, any(x < math.log(t) for x in over)


def _upper_search(build, target: float, delta: float, over: list):
    """``on(h)``: the function a search on grid ``h`` solves -- ``log(upper / target)`` at the scale
    ``e^x``, the upper end alone on the search's cap; ``+inf`` (unknown, taken as infeasible) over
    the cap or where the grid cannot tell, each such ``x`` appended to ``over``."""
    from ..accountant.pld import pld_epsilon_at

    def on(h):
        def f(x):
            lo, up = pld_epsilon_at(build(math.exp(x)).events, delta, h, SEARCH_CAP, side="upper")
            if up is None:              # over the memory cap: unknown, taken as infeasible
                over.append(x)
                return math.inf
            if up > 2.0 * target and lo < 0.5 * target:
                # this grid cannot tell (its own bracket spans the target 4x over; near the cap a
                # grid too coarse for the scale -- 1e7 steps at q = 1e-7 gave upper ends of 4-6
                # beside 0.009 at nearby scales): unknown, like a point over the cap
                over.append(x)
                return math.inf
            return math.log(up / target) if up > 0 else -math.inf      # eps = 0 meets any target
        return f
    return on


def _rough_start(build, target: float, delta: float, start: float, on, k0: float) -> float:
    """The log scale the coarse search starts from: ``log(start)``, or -- where eps at the start is
    far below the target -- a rough root (1 %) on the refinement's first grid, whose upper end is
    certified too, so that root is a feasible start.

    Where eps at the start is far below the target (the RDP start 1.7x the answer's noise, eps
    there 40x smaller: q = 1e-4, 378 steps, delta = 1e-8), a 1 % bracket there needs a grid ~10x
    finer than one at the answer: first the rough root and the coarse grid chosen there.  Also
    where that grid's upper end is below 0.7 of the target and the grid's own bracket there is
    wider than the 1 % one asked for next (q = 1e-3, 181 steps, delta = 1e-8: 0.35 of the target
    beside a true eps of 0.13 of it, whose 1 % bracket took a 6.9e-5 grid and five coarse
    evaluations of 0.1 s on it); where it is not, that bracket is the first grid's and the coarse
    search on it finds the root as fast (a million steps)."""
    from ..accountant.pld import first_grid, pld_epsilon_at

    x0 = math.log(start)
    h0 = first_grid(build(start).events, delta)
    f_first = on(h0)
    v0 = f_first(x0)
    rough = math.isfinite(v0) and v0 < math.log(0.3)
    if math.isfinite(v0) and math.log(0.3) <= v0 < math.log(0.7):
        lo0, up0 = pld_epsilon_at(build(start).events, delta, h0, SEARCH_CAP)
        rough = lo0 is None or up0 - lo0 > max(COARSE_RTOL * up0, COARSE_ATOL * target)
    if rough:
        xr = loglog_root(f_first, x0, v0, x0 + max(v0 / -k0, -0.3), 1e-2, predict=True,
                         unknown_rtol=CAP_RTOL, grow=True)
        if math.isfinite(f_first(xr)) and f_first(xr) <= 0.0:
            x0 = xr
    return x0


def _coarse_root(on, b, target: float, x0: float, k0: float) -> tuple:
    """The root to 1e-4 on the coarse bracket ``b``'s grid, from ``x0`` (where ``b`` was taken):
    ``(x, slope, points)`` -- the slope of ``log(eps)`` against the log scale from the last two
    evaluations (at most -0.1; -1 without two), and the ``(x, value)`` points evaluated."""
    f0 = math.log(b.upper / target) if b.upper > 0 else -math.inf
    x1 = x0 + max(f0 / -k0, -0.3) if math.isfinite(f0) else x0 - 0.3
    slope = []

    def coarse(x, f=on(b.discretization)):
        v = f(x)
        slope.append((x, v))
        return v

    xt = loglog_root(coarse, x0, f0, x1, 1e-4, predict=True, unknown_rtol=CAP_RTOL, grow=True)
    pts = [p for p in slope if math.isfinite(p[1])]
    k = -1.0
    if len(pts) >= 2 and pts[-1][0] != pts[-2][0] and pts[-1][1] != pts[-2][1]:
        k = (pts[-1][1] - pts[-2][1]) / (pts[-1][0] - pts[-2][0])
    return xt, min(k, -0.1), slope


def _fine_root(build, target: float, delta: float, on, h_coarse: float, xt: float, k: float, slope: list,
               rtol: float) -> float:
    """The root on the grid the report at the answer uses, from the coarse root ``xt`` (found on
    ``h_coarse`` with slope ``k``; ``slope`` its evaluated points): the report's grid is predicted
    without evaluating it, the root found there, and again if the answer moves to another grid
    of the ladder (at most three grids)."""
    from ..accountant.pld import pld_epsilon, pld_epsilon_at, report_grid, window_points

    # the span of the fine window in loss units, counted once on the coarse grid (it barely
    # depends on the grid or on a move of the answer)
    span = window_points(build(math.exp(xt)).events, delta, h_coarse) * h_coarse
    h = None
    solved = set()                      # the grids solved on
    feasible = []                       # points whose report's own upper end meets the target
    for _ in range(3):
        # the report's grid, predicted without evaluating it (on the first pass) -- then the
        # report's own grid at the answer found
        ev = build(math.exp(xt)).events
        wide = None                     # (lower, upper) of a report that will stop wide
        if h is None:
            hb, ups = report_grid(ev, delta, with_uppers=True)
            if ups and ups[-1][0] == hb:
                # the prediction composed the report's grid itself: the refinement ends there
                # (memory cap, floor, or converged); its bracket is remembered
                wide = pld_epsilon_at(ev, delta, hb, SEARCH_CAP)
            fc = [v for x, v in slope if x == xt and math.isfinite(v)]
            if fc:
                ups = ups + ((h_coarse, target * math.exp(fc[-1])),)
        else:
            rb = pld_epsilon(ev, delta)
            hb, ups, wide = rb.discretization, (), (rb.lower, rb.upper)
            if rb.upper <= target:
                feasible.append(xt)
        if hb == h or hb <= 0.0:
            break
        if hb in solved and feasible:
            # the report's grid flips between two rungs of the ladder near the root (their
            # widths straddle the tolerance there): the root of the one is not feasible on the
            # other's report and back -- the smallest point whose own report met the target
            # ends it (within the two grids' disagreement, ~1e-6, of either root)
            xt = min(feasible)
            break
        solved.add(hb)
        h = hb
        r = _fine_rtol(rtol, wide)
        # a fine grid of millions of points (a million steps at q = 1e-4: seconds a bracket)
        # is solved to BIG_RTOL: its first feasible evaluation within that of the root ends it
        if span / h >= BIG_POINTS:
            r, accept, aim = max(r, BIG_RTOL), 1.0, 0.1
        else:
            accept, aim = 0.6, 0.3
        f = on(h)

        def close(v, accept=accept, r=r, k=k):
            """Feasible, and within the tolerance of the root by the coarse slope (x - root ~ v / k)."""
            return math.isfinite(v) and v <= 0.0 and v / k <= accept * r
        # the fine upper end at xt extrapolated from the coarse grids' (O(h^2)): a first
        # evaluation just above the root it predicts is usually feasible and within rtol of
        # the root by the coarse slope -- one fine evaluation instead of two
        fp = _extrapolated(ups, h, target)
        ft = None
        if fp is not None:
            x1 = xt - fp / k + aim * r
            f1 = f(x1)
            if close(f1):
                xt = x1
                continue
            if math.isfinite(f1):
                xt, ft = x1, f1
        if ft is None:
            ft = f(xt)
            # the answer of the pass before, on the report's finer grid (its upper end there is the
            # report's, already composed): passing the first guess's test, it is the answer
            if close(ft):
                continue
        if not math.isfinite(ft):
            break
        step = max(-0.05, min(0.05, -ft / k)) + (0.25 * r if ft <= 0 else 0.5 * r)
        xt = loglog_root(f, xt, ft, xt + step, r, predict=True, unknown_rtol=CAP_RTOL)
    return xt


#: a fine grid whose composition window holds at least this many points (~1 s a bracket here) is
#: solved to :data:`BIG_RTOL` instead of the search's ``rtol``: one fine evaluation instead of
#: two or three, for at most that much more noise than the smallest the grid certifies
BIG_POINTS = 1 << 21
BIG_RTOL = 1e-5


#: the fine stage's tolerance where the report's bracket stops wide (memory cap or floor) is
#: a tenth of its relative width, at most this: locating the root of an upper end 7 % above the
#: lower one to 1e-6 took 7 near-cap compositions (3 s each)
WIDE_RTOL = 1e-4


def _fine_rtol(rtol: float, bracket) -> float:
    """``rtol``, or -- where ``bracket`` (the report's ``(lower, upper)`` on the fine grid) is
    wider than the accountant's own tolerance, so the report will not converge -- a tenth of
    its relative width, at most :data:`WIDE_RTOL`."""
    from ..accountant.pld import RTOL

    if bracket is None or bracket[0] is None or not 0.0 < bracket[1] < math.inf:
        return rtol
    lo, up = bracket
    if up - lo <= max(RTOL * up, 1e-5):
        return rtol
    return max(rtol, min(WIDE_RTOL, 0.1 * (up - lo) / up))


def _rdp_slope(build, start: float, delta: float) -> float:
    """``d log eps / d log scale`` of the RDP accountant's grid answer at ``start`` (a first
    secant slope for the PLD search: two grid answers, ~1 ms), within [-4, -1]; -1 where it is
    not defined.  A heuristic only -- the PLD's own slope differs -- that saves a search step
    where eps falls steeply (few steps, small noise)."""
    try:
        e0, e1 = (build(start * math.exp(dx)).epsilon_report(delta, "rdp", refine=False).epsilon
                  for dx in (0.0, 0.02))
        k = math.log(e1 / e0) / 0.02
    except (ValueError, ZeroDivisionError, OverflowError):
        return -1.0
    return min(max(k, -4.0), -1.0) if math.isfinite(k) else -1.0


def _extrapolated(ups, h: float, target: float) -> float | None:
    """``log(upper / target)`` on grid ``h`` extrapolated (or interpolated) from ``(grid, upper)``
    pairs of other grids at the same point, assuming ``upper = U + C g^2``: from the two finest
    grids at least 15 % apart; None where that is not possible or not plausible (C <= 0, or a
    correction beyond 1 %).  A guess for the next evaluation, never an answer."""
    pts = sorted({g: u for g, u in ups
                  if abs(g / h - 1.0) > 1e-9 and u is not None and 0.0 < u < math.inf}.items())
    for i in range(1, len(pts)):
        (gb, ub), (ga, ua) = pts[0], pts[i]
        if ga >= 1.15 * gb:
            c = (ua - ub) / (ga * ga - gb * gb)
            u = ub - c * (gb * gb - h * h)
            if c <= 0.0 or not abs(u / ub - 1.0) <= 1e-2:
                return None
            return math.log(u / target)
    return None
