"""PLD tightening of a calibration: from a feasible (RDP-tight) scale down to the smallest scale whose
certified PLD upper bound on eps stays within the target, the lower end of the noise that any
calibration could reach, the notes a report carries, and the certification of a returned noise
(:func:`certify`: the best certified eps).  The PLD root search it runs is :mod:`.pld_search`; the
RDP start and the secant steps are :mod:`.search`'s."""

from __future__ import annotations

import math
from typing import Callable

from ..accountant.validation import InputError
from ..accountant import PoissonSampledGaussianEvent, PrivacyAccountant
from . import pld_search
from .pld_search import pld_scale
from .search import NO_FEASIBLE_NOISE, loglog_root, smallest_scale, tight_scale

__all__ = []


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

    Args:
        build: maps a noise scale (> 0) to the accountant of the run at that scale.
        target: the target eps, > 0.
        delta: the target delta, in (0, 1).
        scale: the tight scale, > 0 (its PLD lower bound below the target).
        h: the PLD grid (discretization) of the bracket at ``scale``, > 0.
        lower: the PLD lower bound at ``scale`` on ``h``, or None (then evaluated first).
        rtol: relative tolerance of the secant search.

    Returns:
        The scale below which the lower bound exceeds the target (``scale`` itself when
        ``lower`` is not below the target), or None when the lower bound is 0 at ``scale`` or
        never reaches the target (memory cap).
    """
    from ..accountant.pld import pld_epsilon_at

    def eps_lo(s):
        lo = pld_epsilon_at(build(s).events, delta, h, pld_search.SEARCH_CAP, side="lower")[0]
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
    (:func:`pld_tighten`: the memory cap stopped the search) where there is one.

    Args:
        start: the RDP-tight scale, or None (RDP cannot certify the target).
        label: the words naming the start.
        suffix: text after the start's value.
        note: the PLD stage's note, or None.

    Returns:
        The accounting text.
    """
    text = "RDP cannot certify the target at this delta" if start is None else f"{label} {start:.6g}{suffix}"
    return text if note is None else f"{text}; {note}"


def rdp_start(solve: Callable[[], float], accountant: str) -> float | None:
    """The RDP-tight scale ``solve()``; None where the RDP accountant cannot certify the target
    at all and ``accountant == "pld"`` (then :func:`pld_tighten` finds its own start).

    Args:
        solve: computes the RDP-tight scale; raises ``ValueError`` with ``NO_FEASIBLE_NOISE``
            where RDP cannot certify the target.
        accountant: the calibration's route, ``"pld"`` or ``"rdp"``.

    Returns:
        The RDP-tight scale, or None (RDP infeasible and ``accountant == "pld"``).

    Raises:
        ValueError: what ``solve`` raised, re-raised unless it is ``NO_FEASIBLE_NOISE`` and
            ``accountant == "pld"``.
    """
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
    scale seen is returned, and :func:`~.pld_search.pld_scale` searches down from there as from an RDP
    start.

    Args:
        build: maps a noise scale (> 0) to the accountant of the run at that scale.
        target: the target eps, > 0.
        delta: the target delta, in (0, 1).

    Returns:
        A scale, a power of 2 in [2^-4, 2^60], whose coarse PLD upper bound is below ``target``.

    Raises:
        InputError: if ``delta`` is below the PLD's ``MIN_DELTA`` or no scale tried is feasible
            (the message is ``NO_FEASIBLE_NOISE``).
    """
    from ..accountant.pld import MIN_DELTA, pld_epsilon

    if delta < MIN_DELTA:
        raise InputError(NO_FEASIBLE_NOISE)
    best = None
    for k in range(PLD_START_MAX_LOG2, -5, -2):
        t = 2.0 ** k
        try:
            b = pld_epsilon(build(t).events, delta, rtol=pld_search.COARSE_RTOL, memory_cap=pld_search.SEARCH_CAP,
                            atol=pld_search.COARSE_ATOL * target)
        except ValueError:                      # no grid fits the cap
            break
        if not b.upper < target:
            break
        best = t
    if best is None:
        raise InputError(NO_FEASIBLE_NOISE)
    return best


def cap_note(target: float, certified: float) -> str:
    """The accounting line's words for a PLD calibration that the search's memory cap stopped.

    Args:
        target: the target eps.
        certified: the certified eps where the search stopped.

    Returns:
        The note text.
    """
    return (f"memory cap: at less noise no grid that fits {pld_search.SEARCH_CAP >> 20} MiB a composition can "
            f"certify the target, so the search stopped at certified eps {certified:.6g}, below the "
            f"target {target:.6g} -- this noise is sound but not the smallest (see docs/calibration.md)")


def floor_note(b) -> str:
    """The accounting line's words where the PLD bracket stopped wide (a floating-point floor at a
    tiny delta, or the memory cap) and RDP certified the answer: the PLD could not tighten it.

    Args:
        b: the ``EpsilonBracket`` that stopped wide.

    Returns:
        The note text.
    """
    return (f"the PLD bracket stopped at width {b.upper - b.lower:.3g} at delta={b.delta:g} (a floor finer "
            f"grids do not move), so RDP certifies this noise and the PLD could not lower it")


def pld_tighten(build, target: float, delta: float, start: float | None, rtol: float = 1e-6):
    """:func:`_pld_tighten`, telling whoever watches (:func:`~dpcalib.accountant.watching`) each
    accountant it builds; each bracket tells the grids it composes.  The math draws nothing: the
    command line shows the parts as a bar.

    Args:
        build: maps a noise scale (> 0) to the accountant of the run at that scale.
        target: the target eps, > 0.
        delta: the target delta, in (0, 1).
        start: a feasible (RDP-tight) scale, or None (RDP cannot certify the target: a start is
            found with the PLD alone, :func:`pld_start`).
        rtol: relative tolerance of the search on the scale.

    Returns:
        ``(scale, bracket, lower_scale, note)``: the smallest scale whose certified eps meets
        ``target``; the :class:`~dpcalib.accountant.EpsilonBracket` there; the scale below which
        the PLD lower bound exceeds the target (None where not determined); None or the note
        (:func:`cap_note`, :func:`floor_note`) the accounting line carries.

    Raises:
        InputError: if no feasible scale is found (``NO_FEASIBLE_NOISE``), raised by the PLD
            stage.
    """
    from ..accountant.progress import tell

    built = 0

    def counted(t):
        nonlocal built
        built += 1
        tell(f"calibrating: accountant {built}")
        return build(t)

    return _pld_tighten(counted, target, delta, start, rtol)


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
        lo = pld_epsilon_at(build(s).events, delta, 2.0 * h, pld_search.SEARCH_CAP, side="lower")[0]
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


def certify(acc, delta, accountant: str = "pld"):
    """``(own, best, bracket)``: the one owner of every ``certified_epsilon``.

    ``best`` is ``epsilon_report(delta, accountant="best")`` -- the smallest of exact GDP, the PLD
    upper bound and RDP -- and ``bracket`` its bracket, whatever the calibration solved on: a
    report's ``certified_epsilon`` is always the number ``dpcalib epsilon`` prints for the noise.
    ``own`` is the eps of the accountant the calibration solved on: ``best`` for ``"pld"``;
    for ``"rdp"`` ``epsilon_report(delta)`` (exact GDP for full batch, else RDP at the optimal real
    order, improved conversion) -- the calibration's ``achieved_epsilon``.

    Args:
        acc: the accountant of the run at the returned noise.
        delta: the target delta, in (0, 1).
        accountant: the route the calibration solved on, ``"pld"`` or ``"rdp"``.

    Returns:
        ``(own, best, bracket)``: two ``EpsilonReport`` and the ``EpsilonBracket``.
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

    Args:
        q: Poisson sampling rate, in (0, 1].
        steps: number of steps, >= 1.
        eps: target eps, > 0.
        delta: target delta, in (0, 1).
        conversion: the RDP-to-(eps, delta) conversion (e.g. ``"mironov"``, ``"improved"``).
        orders: the RDP orders (``refine=False``); None: the accountant's default.
        refine: whether to optimise over real orders (see above).
        rtol: relative tolerance of the search on the multiplier.
        exact: passed to :func:`tight_scale` (``refine=True`` only).

    Returns:
        The noise multiplier (std / L2 sensitivity).
    """
    if not refine:
        return smallest_scale(lambda z: PrivacyAccountant(orders=orders).compose(
            PoissonSampledGaussianEvent(q, z), steps).get_epsilon(delta, "rdp", conversion, refine=False),
            eps, start=1.0, rtol=rtol)
    return tight_scale(lambda z: PrivacyAccountant().compose(PoissonSampledGaussianEvent(q, z), steps),
                       eps, delta, conversion, rtol=rtol, exact=exact)
