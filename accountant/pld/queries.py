"""The PLD queries, the entrance of the chain (:mod:`.pld`): ``eps(delta)`` as a certified bracket
(:func:`pld_epsilon`, on one grid :func:`pld_epsilon_at`), the grid a refinement is expected to end
on (:func:`report_grid`), and the privacy profile ``delta(eps)`` (:func:`pld_delta`,
:func:`pld_profile`, :func:`pld_upper_profiles`).

Every input is checked here, once, with the one-line :class:`~dpcalib.accountant.validation.InputError`
("name=value is not allowed: expected ..."): the events (:func:`checked_events`), delta
(:func:`checked_delta`), epsilon, the tolerances, the grid step and the memory cap.  The modules
before this one trust what they are given and check nothing again.
"""

from __future__ import annotations

import math

import numpy as np

from .. import validation
from ..caches import clear_cache
from ..events import full_batch_form, total_variation_bound
from ..gaussian import composed_mu
from ..gdp import gdp_epsilon
from ..validation import InputError
from ..kinds import event_types
from .shared import EpsilonBracket, MAX_DISCRETIZATION, MEMORY_CAP, MIN_DELTA, OverCap, RTOL
from .profile import delta_bracket, upper_bounds, upper_profiles
from .grid import epsilon_at, first_grid_of, window_points_of
from .exact import lattice_bracket
from .refine import refined

__all__ = ["checked_events", "checked_pairs_epsilon"]

#: the smallest memory cap a query accepts (bytes): 1 MiB
MIN_MEMORY_CAP = 1 << 20


def checked_events(events):
    """``events`` (events or ``(event, count)`` pairs) as validated ``(event, count)`` pairs of one
    neighbouring relation, zero counts dropped, full-batch forms exact -- or the typed input error.

    Args:
        events: an iterable of events or ``(event, count)`` pairs (counts: integers >= 0).

    Returns:
        A list of ``(event, count)`` pairs.

    Raises:
        InputError: if an item is neither an event nor a pair, an event is of an unsupported type,
            a count is not an integer >= 0, or the events mix neighbouring relations.
    """
    kinds, out = event_types(), []
    for item in events:
        if isinstance(item, kinds):
            ev, k = item, 1
        else:
            try:
                ev, k = item
            except (TypeError, ValueError):
                raise InputError(f"events: {item!r} is not allowed: expected an event or an "
                                 f"(event, count) pair.") from None
        if not isinstance(ev, kinds):
            raise InputError(f"event={ev!r} is not allowed: expected one of "
                             f"{', '.join(t.__name__ for t in kinds)}.")
        k = validation.integer(k, "count", low=0)
        if k:
            out.append((ev, k))
    rels = {e.neighboring_relation for e, _ in out} - {None}
    if len(rels) > 1:
        raise InputError("events mix neighbouring relations (add/remove and replace-one); "
                         "guarantees under different relations do not compose.")
    return [(full_batch_form(e), k) for e, k in out]     # q = 1, b = n: the Gaussian PLD, exactly


def checked_delta(delta) -> float:
    """``delta`` checked for the PLD accountant: in [MIN_DELTA, 1).

    Args:
        delta: the target delta.

    Returns:
        ``delta`` as a float.

    Raises:
        InputError: if ``delta`` is not in [``MIN_DELTA``, 1).
    """
    d = validation.delta(delta)
    if d < MIN_DELTA:
        raise InputError(f"delta={delta!r} is not allowed: expected a number in [{MIN_DELTA:g}, 1) for the "
                         f"privacy-loss-distribution accountant (below, its FFT round-off is not small "
                         f"against delta); use the RDP or GDP accountant.")
    return d


def grid_step(discretization) -> float:
    """A grid step in ``(0, MAX_DISCRETIZATION]``, or the typed input error naming the range.

    Args:
        discretization: the requested grid step.

    Returns:
        The step as a float.

    Raises:
        InputError: if ``discretization`` is not in ``(0, MAX_DISCRETIZATION]``.
    """
    return validation.in_range(discretization, "discretization", 0.0, MAX_DISCRETIZATION, low_open=True)


def _cap(memory_cap) -> int:
    """The memory cap checked: an integer number of bytes >= MIN_MEMORY_CAP."""
    return validation.integer(memory_cap, "memory_cap", low=MIN_MEMORY_CAP)


def _tolerances(rtol, atol) -> tuple:
    """``(rtol, atol)`` checked: rtol in (0, 1], atol in [0, inf)."""
    if type(rtol) is float and type(atol) is float and 0.0 < rtol <= 1.0 and 0.0 <= atol < math.inf:
        return rtol, atol                 # (floats in range: what the checks return, without them)
    return (validation.in_range(rtol, "rtol", 0.0, 1.0, low_open=True),
            validation.in_range(atol, "atol", 0.0, math.inf, high_open=True))


def _over_cap(h: float, cap: int) -> InputError:
    """The error of a fixed grid whose composition does not fit the cap."""
    return InputError(f"discretization={h!r} is not allowed: the composition needs more than "
                      f"memory_cap={cap} bytes; choose a coarser grid.")


def pld_epsilon(events, delta: float, rtol: float = RTOL, memory_cap: int = MEMORY_CAP,
                discretization: float | None = None, atol: float = 1e-5) -> EpsilonBracket:
    """Certified bracket ``[lower, upper]`` of ``eps(delta)`` for a composition.

    Args:
        events: an iterable of events or ``(event, count)`` pairs (Gaussian, Poisson-sampled
            Gaussian, without-replacement-sampled Gaussian, balls-in-bins; one neighbouring relation).
        delta: the target delta, in [``MIN_DELTA``, 1).
        rtol: the relative tolerance, in (0, 1]: the grid is refined until
            ``upper - lower <= max(rtol * upper, atol)``.
        memory_cap: bytes one composition may use, an integer >= 2^20; when the next refinement
            would exceed it the best bracket so far is returned with ``converged=False`` and a note.
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
    r, a_tol = _tolerances(rtol, atol)
    cap = _cap(memory_cap)
    h = None if discretization is None else grid_step(discretization)
    ev = checked_events(events)
    if not ev:
        return EpsilonBracket(0.0, 0.0, d, 0.0, True, ("no events composed",))
    return _bracket(tuple(ev), d, r, cap, h, a_tol)


def checked_pairs_epsilon(pairs: tuple, delta: float, rtol: float = RTOL, atol: float | None = None,
                          exact_only: bool = False) -> EpsilonBracket | None:
    """:func:`pld_epsilon` of pairs already checked -- the output of :func:`checked_events`, or an
    accountant's events, which its ``compose`` checked the same way -- on the automatic grid under the
    default memory cap: only ``delta`` and the tolerances are checked here.

    Args:
        pairs: a non-empty tuple of checked ``(event, count)`` pairs.
        delta: the target delta, in [``MIN_DELTA``, 1).
        rtol: the relative tolerance, in (0, 1].
        atol: the absolute tolerance on the width, in [0, inf), or None (1e-5, :func:`pld_epsilon`'s).
        exact_only: only the exact bracket of finite pairs on one lattice (:mod:`.exact`), the
            grid's refinement left out.

    Returns:
        The :class:`EpsilonBracket` of :func:`pld_epsilon`; with ``exact_only``, the exact one or
        None (an event of another pair, or a lattice too long).

    Raises:
        InputError: if ``delta`` or a tolerance is out of range.
    """
    # (a float in range -- the accountant's, checked by validation.delta -- is what checked_delta returns)
    d = delta if type(delta) is float and MIN_DELTA <= delta < 1.0 else checked_delta(delta)
    r, a_tol = _tolerances(rtol, 1e-5 if atol is None else atol)
    return lattice_bracket(pairs, d) if exact_only else _bracket(pairs, d, r, MEMORY_CAP, None, a_tol)


def _bracket(ev: tuple, d: float, r: float, cap: int, h, a_tol: float) -> EpsilonBracket:
    """The bracket of checked pairs: exact for finite pairs on one lattice (on the automatic grid),
    else the refinement.

    A grid's upper end of 0 claims ``delta(0) <= d``, and ``delta(0)`` is the composition's total variation.
    Where the total variation bound (exact for one event) says otherwise at a delta below 1e-10, the grid
    has lost the mass near loss 0 below double precision (noise above about 1e16 at a delta below 1e-18:
    the answer was 0 where eps > 0): for Gaussian kinds the upper end is then exact GDP of the full-batch
    releases that dominate them, for other kinds the PLD refuses (the best route falls back to RDP)."""
    exact = lattice_bracket(ev, d) if h is None else None
    if exact is not None:
        return exact
    b = refined(ev, d, r, cap, h, a_tol)
    # (the masses near loss 0 are good to ~1e-16 absolute: far below a delta of 1e-10, never near it)
    if b.upper == 0.0 and d < 1e-10 and total_variation_bound(ev) > d:
        if all(getattr(e, "gaussian", False) for e, _ in ev):
            # each Gaussian kind is dominated by its full-batch release (sampling never costs more): their
            # composition's exact GDP eps is a certified upper end
            mu = composed_mu((e.noise_multiplier, k) for e, k in ev)
            return EpsilonBracket(0.0, gdp_epsilon(mu, d), d, b.discretization, False, b.notes + (
                "the grid lost the mass near loss 0 below double precision: the upper end is exact GDP of "
                "the full-batch releases that dominate these",))
        raise InputError(f"accountant='pld' is not allowed at delta={d!r} here: the pairs' mass near loss 0 is "
                         f"below double precision (total variation {total_variation_bound(ev):.3g} > delta), so "
                         "the grid cannot certify eps; give a larger delta or accountant='rdp'.")
    return b


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
        rtol: the relative tolerance of the refinement, in (0, 1] (as for :func:`pld_epsilon`).
        memory_cap: bytes one composition may use, an integer >= 2^20.
        atol: the absolute tolerance on the width, in [0, inf).
        with_uppers: also return the ``(grid, upper)`` pairs composed on the way.

    Returns:
        The predicted grid step (a float; 0.0 for no events), or ``(grid, ((h, upper), ...))``
        with ``with_uppers``.

    Raises:
        InputError: if an argument is out of range or an event is unsupported.
    """
    d = checked_delta(delta)
    r, a_tol = _tolerances(rtol, atol)
    cap = _cap(memory_cap)
    ev = checked_events(events)
    if not ev:
        return (0.0, ()) if with_uppers else 0.0
    out = refined(tuple(ev), d, r, cap, None, a_tol, True)
    return out if with_uppers else out[0]


def pld_epsilon_at(events, delta: float, discretization: float, memory_cap: int = MEMORY_CAP,
                   side: str = "both"):
    """``(lower, upper)`` bracket of ``eps(delta)`` at one grid size (None, None over the cap).

    ``side="upper"`` skips the lower-step compositions (the lower end is then only Hoeffding's,
    from the upper composition); ``side="lower"`` skips the upper compositions where the lower
    steps allow it (the upper end is then +inf).  A calibration's search needs only one end.
    The two ends are remembered for the last few compositions (:func:`~.grid.epsilon_at`).

    Args:
        events: an iterable of events or ``(event, count)`` pairs.
        delta: the target delta, in [``MIN_DELTA``, 1).
        discretization: the grid step, in (0, ``MAX_DISCRETIZATION``] (:func:`grid_step`).
        memory_cap: bytes one composition may use, an integer >= 2^20.
        side: ``"both"``, ``"upper"`` or ``"lower"``.

    Returns:
        A tuple ``(lower, upper)`` of floats (``upper = inf`` for ``side="lower"``), or
        ``(None, None)`` where a composition would exceed ``memory_cap``.

    Raises:
        InputError: if ``side`` is unknown, ``delta``, ``discretization`` or ``memory_cap`` is out of
            range, or an event is unsupported.
    """
    if side not in ("both", "upper", "lower"):
        raise InputError(f"side={side!r} is not allowed: expected 'both', 'upper' or 'lower'.")
    d = checked_delta(delta)
    h = grid_step(discretization)
    cap = _cap(memory_cap)
    return epsilon_at(tuple(checked_events(events)), d, h, cap, side)


def first_grid(events, delta: float) -> float:
    """The grid the automatic refinement of :func:`pld_epsilon` starts on: ``0.5 / sqrt(K log(1e6 /
    delta))`` (K steps; the bracket's width is ~``K h^2``), taken on the ladder, at most 0.05.

    Args:
        events: an iterable of events or ``(event, count)`` pairs.
        delta: the target delta, in [``MIN_DELTA``, 1).

    Returns:
        The first grid step (a float on the ladder, <= 0.05).

    Raises:
        InputError: if ``delta`` is out of range or an event is unsupported.
    """
    d = checked_delta(delta)
    return first_grid_of(checked_events(events), d)


def window_points(events, delta: float, discretization: float) -> int:
    """Grid points of the first direction's untilted composition window at grid
    ``discretization`` (the size of the FFT one bracket at that grid costs; tilted re-compositions
    are no larger).  The window is the Chernoff window of :func:`~.compose.loss_window`, so
    its span in loss units barely depends on the grid: a caller may evaluate it on a coarse grid
    ``h_c`` (cheap) and scale by ``h_c / h`` for a fine one.  0 where there is nothing to compose.

    Args:
        events: an iterable of events or ``(event, count)`` pairs.
        delta: the target delta, in [``MIN_DELTA``, 1).
        discretization: the grid step, in (0, ``MAX_DISCRETIZATION``].

    Returns:
        The number of grid points (an int, >= 0).

    Raises:
        InputError: if ``delta`` or ``discretization`` is out of range or an event is unsupported.
    """
    return window_points_of(tuple(checked_events(events)), checked_delta(delta), grid_step(discretization))


def pld_delta(events, epsilon: float, discretization: float = 1e-4, memory_cap: int = MEMORY_CAP):
    """``(lower, upper)`` bracket of ``delta(epsilon)`` of a composition at grid ``discretization``.

    Args:
        events: an iterable of events or ``(event, count)`` pairs.
        epsilon: the epsilon at which delta is bracketed, in [0, inf).
        discretization: the grid step, in (0, ``MAX_DISCRETIZATION``].
        memory_cap: bytes one composition may use, an integer >= 2^20.

    Returns:
        A tuple ``(lower, upper)`` of floats in [0, 1]; ``(0.0, 0.0)`` for no events.

    Raises:
        InputError: if an argument is out of range, an event is unsupported, or a composition
            needs more than ``memory_cap`` bytes.
    """
    e = validation.in_range(epsilon, "epsilon", 0.0, math.inf, high_open=True)
    h = grid_step(discretization)
    cap = _cap(memory_cap)
    ev = checked_events(events)
    if not ev:
        return 0.0, 0.0
    try:
        return delta_bracket(ev, e, h, cap)
    except OverCap:
        raise _over_cap(h, cap) from None


def pld_profile(events, epsilons, discretization: float = 1e-3, memory_cap: int = MEMORY_CAP) -> np.ndarray:
    """Certified upper bounds on ``delta(eps)`` at every ``eps`` in ``epsilons`` from ONE composition
    per direction (the worse direction at each eps): the privacy profile the trade-off curve of
    :mod:`~dpcalib.accountant.tradeoff` is built from.  Same pessimistic construction as
    :func:`pld_delta`'s upper end.

    Args:
        events: an iterable of events or ``(event, count)`` pairs.
        epsilons: finite epsilons >= 0 (a number or a 1-d array-like).
        discretization: the grid step, in (0, ``MAX_DISCRETIZATION``].
        memory_cap: bytes one composition may use, an integer >= 2^20.

    Returns:
        A float array of upper bounds on delta, one per epsilon (zeros for no events).

    Raises:
        InputError: if ``epsilons`` is not a 1-d array of finite numbers >= 0, an argument is out
            of range, an event is unsupported, or a composition needs more than ``memory_cap`` bytes.
    """
    eps = np.atleast_1d(np.asarray(epsilons, dtype=float))
    if eps.ndim != 1 or not np.all(np.isfinite(eps)) or np.any(eps < 0.0):
        raise InputError(f"epsilons={epsilons!r} is not allowed: expected finite numbers >= 0.")
    h = grid_step(discretization)
    cap = _cap(memory_cap)
    ev = checked_events(events)
    if not ev:
        return np.zeros(eps.shape)
    try:
        return upper_bounds(ev, eps, h, cap)
    except OverCap:
        raise _over_cap(h, cap) from None


def pld_upper_profiles(events, discretization: float = 1e-4, memory_cap: int = MEMORY_CAP) -> list:
    """The certified upper profile of each direction at every ``eps >= 0`` the composition can
    tell apart: ``[(eps, delta_upper), ...]`` (one pair of arrays per direction, in the order
    remove, add), ``eps`` = 0 and every grid point of the composed loss above 0
    (:func:`~.profile.upper_profiles`: what the attack risk of :mod:`~dpcalib.accountant.tradeoff`
    reads).

    Args:
        events: an iterable of events or ``(event, count)`` pairs.
        discretization: the grid step, in (0, ``MAX_DISCRETIZATION``].
        memory_cap: bytes one composition may use, an integer >= 2^20.

    Returns:
        A list of ``(eps, delta_upper)`` pairs of float arrays, one per direction
        (``[(zeros(1), zeros(1))]`` for no events).

    Raises:
        InputError: if an argument is out of range, an event is unsupported, or a composition
            needs more than ``memory_cap`` bytes.
    """
    h = grid_step(discretization)
    cap = _cap(memory_cap)
    ev = checked_events(events)
    if not ev:
        return [(np.zeros(1), np.zeros(1))]
    try:
        return upper_profiles(ev, h, cap)
    except OverCap:
        raise _over_cap(h, cap) from None
