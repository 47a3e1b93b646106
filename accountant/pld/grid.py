"""The certified bracket of ``eps(delta)`` on one grid: :func:`epsilon_at` (the compositions of
each direction's upper and lower steps, remembered for the last few keys), the loss cut that follows
eps (:func:`cut_level`), the refinement's first grid and the size of a grid's composition window.
The math is :mod:`.pld`'s; the refinement that chooses the grids is :mod:`.refine`'s.  Every function
here trusts its arguments: the queries of :mod:`.queries` check them once."""

from __future__ import annotations

import math

from ..caches import Memo, cached
from ..progress import tell
from .compose import loss_window
from .bracket import lower_one, lower_usable, upper_info, upper_one
from .pairs import beyond, directions, dominating_pairs
from .shared import ALIAS, MEMORY_CAP, OverCap, TAIL, aligned_grid, on_ladder
from . import pairs
from .allocation import discretised_steps
from .lossdist import aligned_step
from .blocks import bracket_steps as _steps


__all__ = []


def epsilon_at(ev, d: float, h: float, cap: int = MEMORY_CAP, side: str = "both"):
    """``(lower, upper)`` bracket of ``eps(d)`` at one grid (None, None over the cap).

    ``side="upper"`` skips the lower-step compositions (the lower end is then only Hoeffding's,
    from the upper composition); ``side="lower"`` skips the upper compositions where the lower
    steps allow it (the upper end is then +inf).  A calibration's search needs only one end.
    The two ends are computed separately and remembered for the last few compositions, so a
    report at a point the search evaluated composes only its lower end.

    The arguments are trusted: :func:`~.queries.pld_epsilon_at` checks them (and the refinement of
    :mod:`.refine` passes on what :func:`~.queries.pld_epsilon` checked).

    Args:
        ev: a tuple of checked ``(event, count)`` pairs.
        d: the target delta (checked).
        h: the grid step (checked, in ``(0, MAX_DISCRETIZATION]``).
        cap: bytes one composition may use (checked).
        side: ``"both"``, ``"upper"`` or ``"lower"`` (checked).

    Returns:
        A tuple ``(lower, upper)`` of floats (``upper = inf`` for ``side="lower"``), or
        ``(None, None)`` where a composition would exceed ``cap``.
    """
    h = aligned_step(ev, h)        # the heaviest atom of a non-Gaussian kind on a grid point (else h)
    key = (ev, d, h, cap, cut_level(ev, d, cap))
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
    """Where a bracket of ``eps(d)`` cuts its subsampled pairs' losses (:func:`~.pairs.cut_range`):
    ``min(LOSS_CUT, eps_up + CUT_MARGIN)`` with ``eps_up`` the certified upper end of the bracket on
    the grid CUT_PROBE_GRID (cut at LOSS_CUT), where some pair's losses reach past ADAPT_FROM with P-mass
    beyond ADAPT_FROM at most ``d / k`` (else None: LOSS_CUT, and nothing is composed here).

    Any level keeps both ends bounds (moving a loss up raises every composition's profile, down
    lowers it); the upper end gives away at most ``sum_i p_i e^(eps - level) <= d e^(eps - eps_up -
    CUT_MARGIN)`` in delta at the eps it reads (``sum_i p_i <= d``: the mass condition), i.e. nothing
    below ``eps_up + 20``, and the lower end loses at most as much.  DP-SRM with a first batch of one
    record at noise 0.027 (losses ~690, eps 0.11): the level falls from 1000 to ~64 and every window
    with it (docs/accounting.md).

    Args:
        ev: a tuple of checked ``(event, count)`` pairs.
        d: the target delta (checked).
        cap: bytes one composition may use.

    Returns:
        The loss level (a float below ``LOSS_CUT``), or None for ``LOSS_CUT``.
    """
    tau = _step_tail(ev, d)
    if not any(pair.q < 1.0 and pair.loss_range(tau)[1] > ADAPT_FROM and beyond(pair, ADAPT_FROM)[1] <= d / k
               for e, k in ev for direction in directions(ev) for pair in dominating_pairs(e, direction)):
        return None
    ups = _upper_ends((ev, d, max(first_grid_of(ev, d), CUT_PROBE_GRID), cap, None))
    if ups is _OVER:
        return None
    up = max(u for _, u in ups)
    level = up + CUT_MARGIN
    return level if math.isfinite(level) and level < pairs.LOSS_CUT else None


def _step_tail(ev, d: float) -> float:
    """Mass each step's tails beyond its grid may hold: ``TAIL * delta`` shared by the K steps."""
    return TAIL * d / max(sum(k for _, k in ev), 1)


_OVER = object()                                   # a composition over the memory cap
_SIDES = Memo(64)                                  # (side, events, delta, h, cap, level) -> ends


#: a direction whose untilted window at the grid has at least this many points is first composed
#: on an 8x coarser grid (about 1/8 of the cost): if that one needed a tilted re-composition,
#: so will the fine one, and the fine untilted composition is skipped
HINT_POINTS = 1 << 14


def _coarse_upper(ev, h, tau, direction, cap, d, level, floor):
    """:func:`~.bracket.upper_info` of one direction on the grid 8x coarser than ``h`` (its upper
    end as certified as any grid's, at ~1/8 of the cost), with ``floor`` as there; None over the cap."""
    try:
        return upper_info(_steps(ev, 8.0 * h, tau, direction, cap, d, level=level), 8.0 * h, d, cap, floor)
    except OverCap:
        return None


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
    tell(f"upper end on grid {h:.3g}")
    tau = _step_tail(ev, d)
    out = []
    # blocks (:mod:`.blocks`) give no Hoeffding end -- no earlier direction's lower end to
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
                return _SIDES.remember(("upper",) + key, _OVER)
            blocks = any(s.block > 1 for s in steps)
            a, b = loss_window(steps, h, math.log(ALIAS * d)) if steps and not blocks else (0, 0)
            big = b - a + 1 >= HINT_POINTS
        if out and blocks:
            # blocks give no lower end here, but only the largest upper end is read: a later
            # direction whose upper end on an 8x coarser grid (certified as any grid's, and cheap)
            # is at or below an earlier one's upper end keeps that coarser end
            ceiling = max(up for _, up in out)
            coarse = _coarse_upper(ev, h, tau, direction, cap, d, level, ceiling)
            if coarse is not None and coarse[1] is not None and coarse[1] <= ceiling:
                out.append((coarse[0], coarse[1]))
                continue
            coarse = None
        if (out or big) and not blocks:
            # any grid's upper end is certified: if an 8x coarser grid (8x cheaper) already puts
            # this direction below the earlier one's lower end, the fine one is not needed
            coarse = _coarse_upper(ev, h, tau, direction, cap, d, level, floor)
            if coarse is not None and coarse[1] is not None and coarse[1] <= floor:
                out.append((coarse[0], coarse[1]))
                continue
        if steps is None:
            try:
                steps = _steps(ev, h, tau, direction, cap, d, level=level)
            except OverCap:
                return _SIDES.remember(("upper",) + key, _OVER)
        lo, up = upper_one(steps, h, d, cap, floor, coarse)
        if lo is None:
            return _SIDES.remember(("upper",) + key, _OVER)
        out.append((lo, up))
    return _SIDES.remember(("upper",) + key, out)


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
    tell(f"lower end on grid {h:.3g}")
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
            c = _coarse_upper(ev, h, tau, direction, cap, d, level, max(out))
            if c is not None and c[1] is not None and c[1] <= max(out):
                continue
        try:
            lsteps = _steps(ev, h, tau, direction, cap, d, lower=True, level=level)
        except OverCap:
            return _SIDES.remember(ck, _OVER)
        hl = h
        if not lower_usable(lsteps):
            # a bin holding nearly all the mass mid-way between two grid points (below a thin
            # tail: small q and noise) breaks the lower steps; on a grid that puts that atom on
            # a grid point they usually exist (:func:`~.shared.aligned_grid`) -- else Hoeffding's end
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
                return _SIDES.remember(ck, _OVER)
            out.append(u[directions(ev).index(direction)][0])
            continue
        lo = lower_one(lsteps, hl, d, cap, None if ups is None else max(up for _, up in ups))
        if lo is None:
            return _SIDES.remember(ck, _OVER)
        out.append(lo)
    return _SIDES.remember(ck, out or [0.0])


def first_grid_of(ev, d: float) -> float:
    """The grid the automatic refinement starts on: ``0.5 / sqrt(K log(1e6 / d))`` (K steps; the
    bracket's width is ~``K h^2``), taken on the ladder, at most 0.05.  The arguments are trusted
    (:func:`~.queries.first_grid` checks them).

    Args:
        ev: checked ``(event, count)`` pairs.
        d: the target delta (checked).

    Returns:
        The first grid step (a float on the ladder, <= 0.05).
    """
    K = sum(k for _, k in ev)
    return on_ladder(min(0.05, 0.5 / math.sqrt(max(K, 1) * math.log(1e6 / d))))


@cached(maxsize=256)
def window_points_of(ev, d, h) -> int:
    """Grid points of the first direction's untilted composition window at grid ``h``
    (:func:`~.queries.window_points`, which checks the arguments; here they are trusted -- a
    refinement asks it of every grid it composed).

    Args:
        ev: a tuple of checked ``(event, count)`` pairs.
        d: the target delta (checked).
        h: the grid step (on the ladder).

    Returns:
        The number of grid points (an int): 0 for nothing to compose, ``MEMORY_CAP // 8`` where the
        steps exceed the memory cap.
    """
    try:
        steps = discretised_steps(ev, h, _step_tail(ev, d), directions(ev)[0], MEMORY_CAP, delta=d,
                                  level=cut_level(ev, d, MEMORY_CAP)) if ev else []
    except OverCap:
        return MEMORY_CAP // 8
    if not steps:
        return 0
    a, b = loss_window(steps, h, math.log(ALIAS * d))
    return int(b - a + 1)
