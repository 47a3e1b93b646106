"""Privacy-loss distributions, the first link of the chain (:mod:`.pld`) after what the links share
(:mod:`.shared`: the constants, the discretised step, the bracket): each event's dominating pair (its
privacy-loss function and masses, exactly).  Later links discretise the pairs on a grid (:mod:`.discretise`), compose
the steps (:mod:`.compose`), read a bracket from a composition (:mod:`.bracket`), refine the grid
(:mod:`.refine`) and answer the queries (:mod:`.queries`, where the inputs are checked: nothing here
checks an argument but :func:`dominating_pairs`, which refuses an event kind it does not know).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from ..kinds import event_types
from ..validation import InputError

__all__ = ["RemovePair", "AddPair", "dominating_pairs"]


# -- one-dimensional Gaussian-mixture pairs ---------------------------------------------------

def _norm_mass(a, b):
    """P(a < X <= b) for X ~ N(0, 1), accurate in both tails (a <= b elementwise)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    upper = special.ndtr(-a) - special.ndtr(-b)
    lower = special.ndtr(b) - special.ndtr(a)
    return np.maximum(np.where(a >= 0.0, upper, lower), 0.0)


def _edge_masses(t):
    """``P(t_k < X <= t_(k+1))`` for X ~ N(0, 1) and non-decreasing edges ``t``: the same tail-accurate
    formulas as :func:`_norm_mass` (upper-tail differences right of 0, lower-tail ones left of it),
    from ONE evaluation of ``Phi(-|t|)`` per edge instead of four per bin."""
    t = np.asarray(t, dtype=float)
    g = special.ndtr(-np.abs(t))                  # Phi(-|t|): the smaller tail at every edge
    a, b, ga, gb = t[:-1], t[1:], g[:-1], g[1:]
    out = np.where(a >= 0.0, ga - gb, np.where(b <= 0.0, gb - ga, 1.0 - ga - gb))
    return np.maximum(out, 0.0)


#: a subsampled pair's grid ends at losses of +-LOSS_CUT (where the mass beyond is small against
#: delta, :func:`cut_range`): the P-mass beyond goes to +infinity in the
#: upper steps (or up to the lowest grid point below) and to an atom at the cut in the lower steps
#: (:mod:`.discretise`).  Both stay bounds at any cut (moving a loss up only raises the
#: profile of every composition, moving it down only lowers it: delta(eps) = E_P[(1 - e^(eps -
#: sum L))_+] is monotone in each step's loss); the cut costs the upper end at most ``sum_i p_i
#: e^(eps - LOSS_CUT)`` in delta (p_i: the mass cut from step i; the other steps' Q-mass is at
#: most 1), nothing a double can hold below eps ~ 300 at any delta >= 1e-300.  With noise
#: multipliers of 1e-3 a sampled record's loss sits near 1/(2 z^2) = 5e5: gridding it held
#: millions of points a step and ran into the memory cap (DP-SRM with a batch of one: 100 s).
LOSS_CUT = 1000.0


class Pair:
    """A dominating pair ``(P, Q)`` of one-dimensional Gaussian mixtures ``sum w N(m, z^2)`` whose
    privacy loss ``L = log P/Q`` is monotone in x: :class:`GaussianPair`, :class:`RemovePair`,
    :class:`AddPair`.  An event's kind states its pairs (:func:`dominating_pairs`); the discretiser
    (:mod:`.discretise`) reads every pair through :meth:`bins` and :meth:`loss_range` alone."""

    z: float
    q: float

    p_comps: tuple = ()
    q_comps: tuple = ()

    def loss(self, x):
        """Privacy loss at x.

        Args:
            x: a point or an array of points of the real line.
        """
        raise NotImplementedError

    def _x_of_mix(self, ell):
        """x with log(1 - q + q e^s(x)) = ell (-inf where ell <= log(1-q)).

        ``s = log(e^ell - 1 + q) - log q``; above ``ell = 1`` as ``ell + log1p(-(1 - q) e^-ell)``,
        so that a loss past ``log(DBL_MAX) ~ 709.8`` (small noise) keeps its own x: through
        ``expm1`` it overflowed to x = +inf, and every larger loss was rounded DOWN into the
        bin at 709.8 -- an eps below the truth.  At ``q = 1`` the mixture is the Gaussian, s = ell."""
        ell = np.asarray(ell, dtype=float)
        if self.q >= 1.0:
            return self.z * self.z * ell + 0.5
        big = ell > 1.0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            small = np.log(np.maximum(np.expm1(np.where(big, 0.0, ell)) + self.q, 0.0))
            large = ell + np.log1p(-(1.0 - self.q) * np.exp(-np.where(big, ell, 1.0)))
        inner = np.where(big, large, small) - math.log(self.q)
        with np.errstate(invalid="ignore", over="ignore"):     # (z^2 past the double range: NaN, refused by bins_of)
            return self.z * self.z * inner + 0.5

    def _mix_loss(self, x):
        """``log(1 - q + q e^s(x))``, ``s = (x - 1/2) / z^2``: the loss of the remove pair."""
        x = np.asarray(x, dtype=float)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            s = (x - 0.5) / (self.z * self.z)
        with np.errstate(divide="ignore"):
            return np.logaddexp(math.log1p(-self.q) if self.q < 1 else -np.inf, math.log(self.q) + s)

    def mass(self, comps, lo, hi):
        """Mixture mass of lo < x <= hi.

        Args:
            comps: the mixture's ``(weight, mean)`` components (``p_comps`` or ``q_comps``).
            lo: the lower end (exclusive), a float or array.
            hi: the upper end (inclusive), a float or array (``lo <= hi``).

        Returns:
            The mass (a float, or an array for array ends).
        """
        out = 0.0
        for w, m in comps:
            if w > 0:
                out = out + w * _norm_mass((lo - m) / self.z, (hi - m) / self.z)
        return out

    def _edge_mass(self, comps, x, memo=None):
        """Mixture masses of the bins between consecutive non-decreasing edges ``x`` (``memo``:
        per-component masses already computed on the same edges, shared by P and Q)."""
        out = 0.0
        for w, m in comps:
            if w > 0:
                if memo is None or m not in memo:
                    e = _edge_masses((x - m) / self.z)
                    if memo is not None:
                        memo[m] = e
                else:
                    e = memo[m]
                out = out + w * e
        return out

    #: the loss decreases in x (the add pair): the x of the edges run backwards, and so do the bins
    decreasing = False
    #: the hard edge of the loss (Poisson pairs: ``log(1 - q)`` for remove, ``-log(1 - q)`` for add)
    edge = None

    def _x_edges(self, e):
        """The x of the loss edges ``e``, non-decreasing (for a decreasing loss: of ``-e``, reversed)."""
        raise NotImplementedError

    def x_of(self, loss: float) -> float:
        """The x where the privacy loss equals ``loss`` (the loss is monotone in x).

        Args:
            loss: a privacy-loss value.

        Returns:
            The point ``x`` (a float).
        """
        return float(self._x_edges(np.array([loss], dtype=float))[0])

    def bins(self, eps_edges):
        """P and Q masses of ``L`` in (e_i, e_(i+1)], plus P(L <= e_0) and P(L > e_last).

        Args:
            eps_edges: non-decreasing loss edges ``e_0 <= ... <= e_last``.

        Returns:
            A tuple ``(P, Q, p_below, p_above)``: the arrays of P- and Q-masses of the bins
            (one fewer than the edges) and the two P tail masses (floats).
        """
        e = np.asarray(eps_edges, dtype=float)
        x = self._x_edges(e)
        memo = {}
        P = self._edge_mass(self.p_comps, x, memo)
        Q = self._edge_mass(self.q_comps, x, memo)
        if self.decreasing:            # L > e  <=>  x < x_mix(-e): the bins run right to left
            below, above = (x[-1], np.inf), (-np.inf, x[0])
            P, Q = P[::-1], Q[::-1]
        else:
            below, above = (-np.inf, x[0]), (x[-1], np.inf)
        p_below = float(self.mass(self.p_comps, *below))
        p_above = float(self.mass(self.p_comps, *above))
        return np.asarray(P, dtype=float), np.asarray(Q, dtype=float), p_below, p_above

    def _tails(self, tau):
        """The losses at the two ends of P's bulk (each tail beyond has mass at most tau).

        Each of P's ``n`` components ``w N(m, z^2)`` gets ``tau / n`` of a tail: it is cut at
        ``m +- z Phi^-1(1 - tau / (n w))``, so a component of small weight -- the sampled record's,
        weight q -- is cut much closer to its mean than one of weight ~1 (at q = 1e-4, z = 0.69,
        tau = 1e-19 the remove pair's upper loss end drops from 4.8 to 3.4: 30 % fewer grid points
        a step and a 23 % narrower composed window).  The mass beyond is what the step charges
        (computed exactly from the bins), so the cut decides the tightness, never the soundness."""
        comps = [(w, m) for w, m in self.p_comps if w > 0.0]       # (q = 1: the one at m = 1)
        n = len(comps)
        r = [(m, max(0.0, float(-special.ndtri(min(0.5, max(tau / (n * w), 1e-300))))) * self.z)
             for w, m in comps]
        return self.loss(min(m - d for m, d in r)), self.loss(max(m + d for m, d in r))

    def loss_range(self, tau, cut_mass=None, level=None):
        """Losses beyond which each tail of P has mass at most tau, within the loss's hard edge
        (:attr:`edge`: a subsampled pair's ``log(1 - q)``, the remove pair's minimum, ``-log(1 - q)`` the
        add pair's maximum; None, no edge) and cut as :func:`cut_range` allows (a subsampled pair's: at ``+-level`` where
        the mass beyond is at most ``cut_mass``; a full-batch pair is never cut).

        Args:
            tau: the largest P-mass of each tail beyond the range, > 0.
            cut_mass: the largest P-mass a cut at ``+-level`` may drop (None: never cut).
            level: the cut level (None: ``LOSS_CUT``).

        Returns:
            A tuple ``(lo, hi)`` of floats.
        """
        lo, hi = self._tails(tau)
        if self.decreasing:
            lo, hi = hi, lo                                                 # the loss decreases in x
        if self.edge is not None:                   # the loss is >= the edge (remove), <= it (add)
            lo, hi = (lo, min(hi, self.edge)) if self.decreasing else (max(lo, self.edge), hi)
        return cut_range(self, cut_mass, float(lo), float(hi), level)


@dataclass(frozen=True)
class GaussianPair(Pair):
    """``P = N(1, z^2)`` vs ``Q = N(0, z^2)``: a full-batch Gaussian release of sensitivity 1.

    Attributes:
        z: the noise multiplier, noise std / L2 sensitivity, > 0.
        q: the sampling probability; always 1.0 for this pair.
    """

    z: float
    q: float = 1.0

    p_comps = ((1.0, 1.0),)
    q_comps = ((1.0, 0.0),)

    def loss(self, x):
        """Privacy loss at ``x``: ``(x - 1/2) / z^2``, increasing in ``x``.

        Args:
            x: a point or an array of points.

        Returns:
            ``(x - 1/2) / z^2`` (an array).
        """
        x = np.asarray(x, dtype=float)
        return (x - 0.5) / (self.z * self.z)

    def _x_edges(self, e):
        return self.z * self.z * e + 0.5


@dataclass(frozen=True)
class RemovePair(Pair):
    """``P = (1 - q) N(0, z^2) + q N(1, z^2)`` vs ``Q = N(0, z^2)``: a record sampled with probability q,
    removed (the remove direction of Poisson sampling; one half of sampling without replacement).

    Attributes:
        z: the noise multiplier, noise std / L2 sensitivity, > 0.
        q: the sampling probability (or ratio), in (0, 1].
    """

    z: float
    q: float = 1.0

    @property
    def p_comps(self):
        """P's ``(weight, mean)`` components: ``((1 - q, 0), (q, 1))``.

        """
        return ((1.0 - self.q, 0.0), (self.q, 1.0))

    q_comps = ((1.0, 0.0),)

    def loss(self, x):
        """Privacy loss at ``x``: ``log(1 - q + q e^((x - 1/2) / z^2))``, increasing in ``x``.

        Args:
            x: a point or an array of points.

        Returns:
            The loss (an array).
        """
        return self._mix_loss(x)

    def _x_edges(self, e):
        return self._x_of_mix(e)

    @property
    def edge(self):
        """The hard edge of the loss, ``log(1 - q)`` (its minimum), or None (``q = 1``)."""
        return math.log1p(-self.q) if 0.0 < self.q < 1.0 else None

    def cell_point(self, x):
        """A point at or below ``-log E_P[e^-L | cell]`` of the edge cell ``{x' <= x}`` (losses from the
        edge up to ``L(x)``; :func:`_edge_point`).

        Args:
            x: the cell's upper end (a float).

        Returns:
            The loss point (a float; ``-inf`` for an empty cell).
        """
        return _edge_point(self, self.edge, x, +1)


@dataclass(frozen=True)
class AddPair(Pair):
    """``P = N(0, z^2)`` vs ``Q = (1 - q) N(0, z^2) + q N(1, z^2)``: the add direction.

    Attributes:
        z: the noise multiplier, noise std / L2 sensitivity, > 0.
        q: the sampling probability (or ratio), in (0, 1].
    """

    z: float
    q: float = 1.0

    p_comps = ((1.0, 0.0),)

    @property
    def q_comps(self):
        """Q's ``(weight, mean)`` components: ``((1 - q, 0), (q, 1))``.

        """
        return ((1.0 - self.q, 0.0), (self.q, 1.0))

    def loss(self, x):
        """Privacy loss at ``x``: ``-log(1 - q + q e^((x - 1/2) / z^2))``, decreasing in ``x``.

        Args:
            x: a point or an array of points.

        Returns:
            The loss (an array).
        """
        return -self._mix_loss(x)

    decreasing = True

    def _x_edges(self, e):
        return self._x_of_mix(-e)[::-1]

    @property
    def edge(self):
        """The hard edge of the loss, ``-log(1 - q)`` (its maximum), or None (``q = 1``)."""
        return -math.log1p(-self.q) if 0.0 < self.q < 1.0 else None

    def cell_point(self, x):
        """A point at or below ``-log E_P[e^-L | cell]`` of the edge cell ``{x' <= x}`` (losses from
        ``L(x)`` up to the edge; :func:`_edge_point`).

        Args:
            x: the cell's upper end (a float).

        Returns:
            The loss point (a float; the edge itself for an empty cell).
        """
        return _edge_point(self, self.edge, x, -1)


def cut_range(pair, cut_mass, lo: float, hi: float, level: float | None = None) -> tuple:
    """A subsampled pair's loss range, cut at ``+-LOSS_CUT`` (:data:`LOSS_CUT`) on each side whose P-mass
    beyond the cut is at most ``cut_mass`` (the discretiser passes ``delta / count``: the step kind's
    cut mass, all its steps together, at most delta).  Where more lies beyond, eps itself is near or
    past the cut and cutting would only loosen the upper end (to +inf: that mass alone exceeds
    delta): the range is kept.  ``cut_mass`` None (the callers that compose in blocks) and a
    full-batch Gaussian (q = 1: all of its mass at one loss) are never cut.

    Args:
        pair: the pair (its ``q`` and :func:`beyond`'s masses are read).
        cut_mass: the largest P-mass a cut may drop, or None (never cut).
        lo: the range's lower loss.
        hi: the range's upper loss.
        level: the cut level, or None (``LOSS_CUT``).

    Returns:
        The range ``(lo, hi)``, cut where allowed (a tuple of floats).
    """
    level = LOSS_CUT if level is None else level
    if cut_mass is None or pair.q >= 1.0 or not (hi > level or lo < -level):
        return lo, hi
    below, above = beyond(pair, level)
    if hi > level and above <= cut_mass:
        hi = level
    if lo < -level and below <= cut_mass:
        lo = -level
    return lo, hi


@functools.lru_cache(maxsize=256)
def beyond(pair, level: float) -> tuple:
    """``(P(L <= -level), P(L > level))`` of a pair (a function of the frozen pair and the level: every
    grid of a search asks again).

    Args:
        pair: a frozen :class:`Pair`.
        level: the loss level, >= 0.

    Returns:
        A tuple ``(below, above)`` of floats.
    """
    _, _, below, above = pair.bins(np.array([-level, level]))
    return below, above


def _edge_point(pr, edge, x, sign):
    """``L* = -log E_P[e^-L | cell]`` of a Poisson pair's edge cell (the x below ``x``), lowered by a
    margin that covers its rounding.

    The remove pair's loss is ``log(1 - q) + log(1 + q/(1 - q) e^s)``, so on the cell
    ``E_P[e^-L | cell] = Q(cell) / P(cell) = 1 / ((1 - q) (1 + q/(1 - q) P1/P0))`` with ``P0``, ``P1`` the
    masses of ``N(0, z^2)`` and ``N(1, z^2)`` below ``x``; the add pair's loss is its negative, with
    ``P`` and ``Q`` swapped.  ``log1p`` keeps the tiny offset from the edge exact, where ``log(P/Q)``
    of two masses near 1 would round it away.  Merging the cell's mass into one atom at ``L*``
    keeps its ``P``- and ``Q``-masses and lowers its profile (Jensen: ``(1 - t y)_+`` is convex in
    ``y = e^-L``); an atom below ``L*`` lowers it further, so the margin keeps the bound sound."""
    from scipy import special

    z, q = pr.z, pr.q
    p0 = float(special.ndtr(x / z))
    p1 = float(special.ndtr((x - 1.0) / z))
    if not p0 > 0.0:
        return -math.inf if sign > 0 else edge     # an empty cell (never asked for)
    off = math.log1p(q / (1.0 - q) * (p1 / p0))      # >= 0: the cell's offset from the edge
    star = edge + off if sign > 0 else edge - off
    return star - (1e-13 + 1e-12 * abs(star))


#: a pair by its direction's name ("gauss", "remove", "add")
PAIRS = {"gauss": GaussianPair, "remove": RemovePair, "add": AddPair}


def pair(kind: str, z: float, q: float = 1.0) -> Pair:
    """The pair of one direction by name (``PAIRS``).

    Args:
        kind: ``"gauss"``, ``"remove"`` or ``"add"``.
        z: the noise multiplier, > 0.
        q: the sampling probability, in (0, 1].

    Returns:
        The :class:`Pair`.

    Raises:
        KeyError: if ``kind`` is not a key of ``PAIRS``.
    """
    return PAIRS[kind](z, q)


def dominating_pairs(event, direction: str) -> tuple:
    """The dominating pairs of one event, as its kind states them (``event.pld_pairs(direction)``: pairs,
    or ``(name, z, q)`` naming one of :data:`PAIRS`), in the order the discretiser composes them: one
    pair, or -- sampling without replacement under replace-one -- the remove and the add pair, whose
    discretised steps are symmetrised; ``()`` for an event that never uses the record (sampling rate 0)
    and for a balls-in-bins epoch (no one-dimensional pair: :mod:`.allocation` discretises it).
    ``direction``: "remove" or "add", the direction a Poisson event's pair takes (:func:`directions`).

    Args:
        event: an event of a registered kind (:func:`~dpcalib.accountant.kinds.event_types`).
        direction: ``"remove"`` or ``"add"``.

    Returns:
        A tuple of zero, one or two :class:`Pair` objects (a tree kind's may be other pairs).

    Raises:
        InputError: if ``event`` states no pairs, or its kind refuses the PLD (the kind's own line).
    """
    own = getattr(event, "pld_pairs", None)
    if own is None:
        raise InputError(f"event={event!r} is not allowed: the PLD accountant has no dominating pair for "
                         f"{type(event).__name__}; expected one of {', '.join(t.__name__ for t in event_types())}.")
    pairs = own(direction)              # the kind's own (every kind states them), or None (refused)
    if pairs is None:
        raise InputError(f"accountant='pld' is not allowed: {event.refuses('pld')}.")
    # a kind below the chain (the Gaussian kinds of ..events) names its pairs: (name of PAIRS, z, q)
    return tuple(PAIRS[p[0]](*p[1:]) if isinstance(p, tuple) else p for p in pairs)


def directions(events):
    """The directions a composition of ``events`` is bracketed in: remove and add where a Poisson step or a
    balls-in-bins epoch is among them (each composed on its own, the worse reported), else remove.

    Args:
        events: ``(event, count)`` pairs.

    Returns:
        ``("remove", "add")`` or ``("remove",)``.
    """
    if any(getattr(e, "both_directions", False) for e, _ in events):
        return ("remove", "add")
    return ("remove",)
