"""PLD tightening of a calibration: from a feasible (RDP-tight) scale down to the smallest scale whose
certified PLD upper bound on eps stays within the target, the lower end of the noise that any
calibration could reach, the notes a report carries, and the certification of a returned noise
(:func:`certify`: the best certified eps).  The root finding it uses is :mod:`.search`."""

from __future__ import annotations

import math
import time
from typing import Callable

from ..accountant.validation import InputError
from ..accountant import PoissonSampledGaussianEvent, PrivacyAccountant
from .search import NO_FEASIBLE_NOISE, loglog_root, smallest_scale, tight_scale

__all__ = ["SEARCH_CAP", "PROGRESS_DELAY", "CAP_RTOL", "BIG_POINTS", "BIG_RTOL", "calibrate_poisson", "pld_scale", "lower_scale", "pld_tighten", "cap_note", "floor_note",
           "rdp_start", "pld_start", "rdp_tight_text", "check_accountant", "certify", "ACCOUNTANTS", "WOR_START_LABEL",
           "WOR_START_SUFFIX"]

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
    end is already within ~1e-4 of the fine one), then on the grid the report at that root uses
    (the automatic grids come from a fixed ladder, so nearby scales share it), starting from
    the coarse root with the coarse slope: one to three evaluations of the upper end only.  On a
    fixed grid the upper bound is certified and continuous in the scale; the search runs secant
    steps in log-log coordinates (:func:`loglog_root`).  The answer is then re-checked with
    the procedure the reports use (``epsilon_report(accountant="best")``) and nudged up until it
    holds: never overshoots.  Returns ``start`` when the PLD does not apply or is not smaller,
    and when ``delta`` is at least the chance that the record is used at all (then eps = 0 at
    every noise level: :func:`~dpcalib.accountant.events.never_used_probability`).
    """
    from ..accountant.events import never_used_probability
    from ..accountant.pld import MIN_DELTA, first_grid, pld_epsilon, pld_epsilon_at, report_grid, window_points

    if delta < MIN_DELTA:
        return start, False
    if delta >= 1.0 - never_used_probability(build(start).events):
        # eps is 0 at every noise level (delta is at least the chance that the record is used at
        # all): no smallest noise exists, and a search would only walk down to the memory cap
        return start, False
    over = []                           # scales (log) over the cap, or where the grid cannot tell

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

    # eps ~ 1/scale (Poisson, small eps) to 1/scale^3 (few steps): a first step with the slope of
    # the RDP curve at the start (its grid answer at two scales, ~1 ms), at most 26 % down
    # (PLD-tight noise is rarely further below RDP-tight; where it is, the secant steps go on)
    k0 = _rdp_slope(build, start, delta)
    x0 = math.log(start)
    # where eps at the start is far below the target (the RDP start 1.7x the answer's noise, eps
    # there 40x smaller: q = 1e-4, 378 steps, delta = 1e-8), a 1 % bracket there needs a grid
    # ~10x finer than one at the answer: first a rough root (1 %) on the refinement's first grid
    # -- its upper end is certified too, so that root is a feasible start -- and the coarse grid
    # chosen there.  Also where that grid's upper end is below 0.7 of the target and the grid's
    # own bracket there is wider than the 1 % one asked for next (q = 1e-3, 181 steps, delta =
    # 1e-8: 0.35 of the target beside a true eps of 0.13 of it, whose 1 % bracket took a 6.9e-5
    # grid and five coarse evaluations of 0.1 s on it); where it is not, that bracket is the
    # first grid's and the coarse search on it finds the root as fast (a million steps)
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
    k = min(k, -0.1)
    # the fine stage, on the grid the report at the answer uses (again if the answer moves to
    # another grid of the ladder); the span of its window in loss units, counted once on the
    # coarse grid (it barely depends on the grid or on a move of the answer)
    span = window_points(build(math.exp(xt)).events, delta, b.discretization) * b.discretization
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
                ups = ups + ((b.discretization, target * math.exp(fc[-1])),)
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
    t = math.exp(xt)
    step = rtol
    while t < start and build(t).epsilon_report(delta, accountant="best").epsilon > target:
        t = min(start, t * (1.0 + step))
        step *= 2.0
    return t, any(x < math.log(t) for x in over)


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


def lower_scale(build, target: float, delta: float, scale: float, h: float, lower: float | None,
                rtol: float = 1e-4) -> float | None:
    """The noise scale below which the PLD *lower* bound already exceeds ``target``.

    No noise below it can meet the target with the same dominating pairs, so
    ``scale / lower_scale - 1`` is the room left by a tight calibration at ``scale``.  Secant
    steps in log-log coordinates from ``(scale, lower)`` on the grid ``h`` of the bracket,
    ending on a scale whose lower bound is above the target (so the reported room is not
    overstated).  ``lower`` None: the lower bound at ``scale`` on ``h`` is evaluated first (a
    secant from another grid's lower end -- the bracket's, on a grid 2x finer -- pointed the wrong
    way and crawled: 40 compositions, 120 s, for DP-SRM in the fuzz, docs/testing.md).
    """
    from ..accountant.pld import pld_epsilon_at

    def eps_lo(s):
        lo = pld_epsilon_at(build(s).events, delta, h, SEARCH_CAP, side="lower")[0]
        return 0.0 if lo is None else lo          # over the memory cap: unknown, not large

    if lower is None:
        lower = eps_lo(scale)

    if not lower < target:
        return scale
    if not lower > 0:
        return None
    # on y = -log(scale) the lower bound's log(eps/target) becomes increasing; its negative is
    # decreasing, and "feasible" (<= 0) means the lower bound already exceeds the target
    def f(y):
        v = eps_lo(math.exp(-y))
        return -math.log(v / target) if v > 0 else math.inf

    y0 = -math.log(scale)
    f0 = -math.log(lower / target)                 # > 0 at the tight scale
    try:
        return math.exp(-loglog_root(f, y0, f0, y0 + min(f0, 0.3), rtol))
    except ValueError:                  # the lower bound never reached the target (memory cap)
        return None


#: how the WOR calibrations (DIFF2-BVR, DP-SRM) name their RDP start in the accounting line
WOR_START_LABEL, WOR_START_SUFFIX = "RDP-tight (WBK19 Thm 27) scale", " of the paper's split"


def rdp_tight_text(start: float | None, label: str = "RDP-tight noise", suffix: str = "",
                   note: str | None = None) -> str:
    """The RDP start as a calibration's accounting line names it, then the PLD stage's ``note``
    (:func:`pld_tighten`: the memory cap stopped the search) where there is one."""
    text = "RDP cannot certify the target at this delta" if start is None else f"{label} {start:.6g}{suffix}"
    return text if note is None else f"{text}; {note}"


def rdp_start(solve: Callable[[], float], accountant: str) -> float | None:
    """The RDP-tight scale ``solve()``; None where the RDP accountant cannot certify the target
    at all and ``accountant == "pld"`` (then :func:`pld_tighten` finds its own start)."""
    try:
        return solve()
    except ValueError as exc:
        if accountant != "pld" or str(exc) != NO_FEASIBLE_NOISE:
            raise
        return None


#: largest noise scale :func:`pld_start` tries (2^-4 .. 2^PLD_START_MAX_LOG2)
PLD_START_MAX_LOG2 = 60


def pld_start(build, target: float, delta: float) -> float:
    """A feasible scale found with the PLD alone, for when RDP cannot certify the target: at a
    tiny delta RDP's eps has a floor of about ``log(1/delta) / (largest order - 1)`` (0.37 at
    delta = 1e-170 with orders up to 1024) that the PLD does not have.  Down from
    ``2^PLD_START_MAX_LOG2`` by factors of 4 while a 1 % bracket's certified upper end stays
    below the target (large noise makes the loss narrow and its PLD cheap; small noise is where
    it is expensive, so the scan stops at the first infeasible scale); the smallest feasible
    scale seen is returned, and :func:`pld_scale` searches down from there as from an RDP
    start."""
    from ..accountant.pld import MIN_DELTA, pld_epsilon

    if delta < MIN_DELTA:
        raise InputError(NO_FEASIBLE_NOISE)
    best = None
    for k in range(PLD_START_MAX_LOG2, -5, -2):
        t = 2.0 ** k
        try:
            b = pld_epsilon(build(t).events, delta, rtol=COARSE_RTOL, memory_cap=SEARCH_CAP, atol=COARSE_ATOL * target)
        except ValueError:                      # no grid fits the cap
            break
        if not b.upper < target:
            break
        best = t
    if best is None:
        raise InputError(NO_FEASIBLE_NOISE)
    return best


def cap_note(target: float, certified: float) -> str:
    """The accounting line's words for a PLD calibration that the search's memory cap stopped."""
    return (f"memory cap: at less noise no grid that fits {SEARCH_CAP >> 20} MiB a composition can "
            f"certify the target, so the search stopped at certified eps {certified:.6g}, below the "
            f"target {target:.6g} -- this noise is sound but not the smallest (see docs/calibration.md)")


def floor_note(b) -> str:
    """The accounting line's words where the PLD bracket stopped wide (a floating-point floor at a
    tiny delta, or the memory cap) and RDP certified the answer: the PLD could not tighten it."""
    return (f"the PLD bracket stopped at width {b.upper - b.lower:.3g} at delta={b.delta:g} (a floor finer "
            f"grids do not move), so RDP certifies this noise and the PLD could not lower it")


#: seconds a calibration runs before it shows a progress bar (on a terminal only)
PROGRESS_DELAY = 1.0


def pld_tighten(build, target: float, delta: float, start: float | None, rtol: float = 1e-6):
    """:func:`_pld_tighten` with a progress bar on stderr -- on a terminal, and only once the
    calibration has run for :data:`PROGRESS_DELAY` seconds -- counting the accountants it builds.
    The bar (and tqdm, whose import costs ~15 ms: up to a sixth of a short calibration) comes into being
    only then: a calibration that ends sooner never touches it."""
    t0 = time.monotonic()
    built = 0
    bar = None

    def counted(t):
        nonlocal bar, built
        built += 1
        if bar is None and time.monotonic() - t0 >= PROGRESS_DELAY:
            from tqdm.auto import tqdm

            bar = tqdm(desc="calibrating (certified eps)", unit=" accountants", initial=built - 1, leave=False,
                       disable=None)
        if bar is not None:
            bar.update(1)
        return build(t)
    try:
        return _pld_tighten(counted, target, delta, start, rtol)
    finally:
        if bar is not None:
            bar.close()


def _pld_tighten(build, target: float, delta: float, start: float | None, rtol: float = 1e-6):
    """The PLD stage of every tight calibration: ``(scale, bracket, lower_scale, note)``.

    ``scale`` is the smallest scale whose certified upper bound (``epsilon_report(accountant=
    "best")``: exact GDP, PLD upper or RDP, whichever is smallest) meets ``target``, not above
    ``start`` (unless that report does not confirm the start, which is feasible only at its
    fixed RDP order: then nudged up until it does); ``bracket`` is the accountant's :class:`~dpcalib.accountant.EpsilonBracket` there;
    ``lower_scale`` the scale below which the PLD lower bound already exceeds the target (None
    when the PLD does not apply).  ``start=None`` (RDP cannot certify the target,
    :func:`rdp_start`): a start is found with the PLD alone (:func:`pld_start`).  ``note``:
    None, or :func:`cap_note` where smaller scales ran over the search's memory cap and the
    certified eps stayed more than 0.1 % below the target (the calibration's accounting line
    carries it).
    """
    if start is None:
        start = pld_start(build, target, delta)
    t, capped = pld_scale(build, target, delta, start, rtol)
    b = build(t).epsilon_bracket(delta)  # what certify() reports
    step = rtol
    for _ in range(64):
        if not b.upper > target:
            break
        # only where the search kept the start (the PLD did not help) and the start is feasible
        # only at its fixed RDP order (tight_scale(exact=False)): up until the report agrees
        t *= 1.0 + step
        step *= 2.0
        b = build(t).epsilon_bracket(delta)
    else:
        raise InputError(NO_FEASIBLE_NOISE)
    note = cap_note(target, b.upper) if capped and b.upper < (1.0 - 1e-3) * target else None
    if note is None and not b.converged and b.discretization > 0.0 and b.method == "rdp":
        note = floor_note(b)
    if b.method == "gdp":
        return t, b, t, note
    if b.discretization <= 0.0 or note is not None:
        # (cap-limited: the noise the lower end allows is below the scales the cap lets in)
        return t, b, None, note
    if not b.converged and b.lower < 0.5 * target:
        # a bracket that stopped wide (memory cap, or a round-off floor at a tiny delta): the
        # noise its lower end allows is far off and its search long (40 compositions, 22 s for
        # ClipD2P at delta = 1e-170); no room is claimed (epsilon_lower still says how wide)
        return t, b, None, note
    r = max(rtol, 1e-4)
    h = b.discretization
    if 0.0 < b.lower < target and ROOM_STEPS * math.log(target / b.lower) <= 2e-3:
        # (a converged bracket: the shortcut's room is at most 0.2 %; a wide bracket -- memory
        # cap -- is searched properly below, so the room is never overstated by a long step)
        # one evaluation on a 2x coarser grid first (as valid a lower bound, about half the cost):
        # a step of ROOM_STEPS x the bracket's relative gap covers, for |d log eps / d log
        # scale| >= 1, the gap and the coarser grid's ~4x larger lower-end error.  If the
        # lower bound there already exceeds the target, that scale is the answer (the room is
        # overstated by at most that step, a few 1e-4 at most); if not, the search on the fine grid
        from ..accountant.pld import pld_epsilon_at

        s = t * math.exp(-ROOM_STEPS * math.log(target / b.lower))
        lo = pld_epsilon_at(build(s).events, delta, 2.0 * h, SEARCH_CAP, side="lower")[0]
        if lo is not None and lo >= target:
            return t, b, s, note
    # a bracket that stopped at a floor (not converged) has a lower end that finer grids no
    # longer move: the room is searched on the 2x coarser grid (as valid, half the cost; 4 near-
    # floor compositions took 32 s at 1e7 grid points), its lower end the floor's, not the grid's
    # (on the coarser grid the bracket's own lower end is not this search's: it starts from its own)
    return t, b, lower_scale(build, target, delta, t, h if b.converged else 2.0 * h,
                             b.lower if b.converged else None, r), note


#: the room's first step on the coarser grid, in multiples of the bracket's relative gap
ROOM_STEPS = 6.0


#: accountants a tight calibration can solve on (``calibrate(..., accountant=...)``); the first is the default.
#: ``"best"`` is the name every eps query uses for the same thing (the best certified eps: exact GDP,
#: the PLD upper bound or RDP) and is accepted as a synonym of ``"pld"``
ACCOUNTANTS = ("pld", "rdp")


def check_accountant(accountant: str) -> str:
    """The accountant a calibration solves on, ``"pld"`` (best certified; ``"best"`` is its synonym)
    or ``"rdp"``."""
    if accountant == "best":
        return "pld"
    if accountant not in ACCOUNTANTS:
        raise InputError(f"accountant={accountant!r} is not allowed: expected 'best' (also spelled 'pld': the best "
                         "certified eps -- exact GDP, the privacy-loss-distribution upper bound or RDP) or 'rdp' "
                         "(RDP alone: faster, more noise).")
    return accountant


def certify(acc, delta, accountant: str = "pld"):
    """``(own, best, bracket)``: the one owner of every ``certified_epsilon``.

    ``best`` is ``epsilon_report(delta, accountant="best")`` -- the smallest of exact GDP, the PLD
    upper bound and RDP -- and ``bracket`` its bracket, whatever the calibration solved on: a
    report's ``certified_epsilon`` is always the number ``dpcalib epsilon`` prints for the noise.
    ``own`` is the eps of the accountant the calibration solved on: ``best`` for ``"pld"``;
    for ``"rdp"`` ``epsilon_report(delta)`` (exact GDP for full batch, else RDP at the optimal real
    order, improved conversion) -- the calibration's ``achieved_epsilon``.
    """
    from ..accountant.accountant import EpsilonReport

    b = acc.epsilon_bracket(delta)
    best = EpsilonReport.from_bracket(b)
    own = acc.epsilon_report(delta, accountant="auto") if accountant == "rdp" else best
    return own, best, b


def calibrate_poisson(q: float, steps: int, eps: float, delta: float, *, conversion: str,
                      orders=None, refine: bool, rtol: float, exact: bool = True) -> float:
    """Smallest noise multiplier with ``eps(z) <= eps`` for ``steps`` Poisson(q) Gaussian steps.

    ``refine=False``: eps is the minimum over ``orders`` exactly (the paper's grid).
    ``refine=True``: real orders, through :func:`tight_scale` (``exact``: see there).
    """
    if not refine:
        return smallest_scale(lambda z: PrivacyAccountant(orders=orders).compose(
            PoissonSampledGaussianEvent(q, z), steps).get_epsilon(delta, "rdp", conversion, refine=False),
            eps, start=1.0, rtol=rtol)
    return tight_scale(lambda z: PrivacyAccountant().compose(PoissonSampledGaussianEvent(q, z), steps),
                       eps, delta, conversion, rtol=rtol, exact=exact)
