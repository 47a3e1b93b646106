"""Privacy-loss distributions, the first link of the chain (:mod:`.pld`): each event's dominating pair
(its privacy-loss function and masses, exactly), the discretised step the other modules exchange, and
the constants of the method.  Later links discretise the pairs on a grid (:mod:`.discretise`), compose
the steps (:mod:`.compose`), read a bracket from a composition (:mod:`.bracket`), refine the grid
(:mod:`.refine`) and answer the queries (:mod:`.queries`, where the inputs are checked: nothing here
checks an argument but :func:`dominating_pairs`, which refuses an event kind it does not know).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import special

from ..events import BallsInBinsGaussianEvent, GaussianEvent, PoissonSampledGaussianEvent, WORSampledGaussianEvent
from ..kinds import event_types
from ..validation import InputError

__all__ = ["MEMORY_CAP", "TAIL", "RemovePair", "AddPair", "MixturePair", "dominating_pairs", "Step"]

#: default memory cap of one composition (bytes)
MEMORY_CAP = 1 << 30
#: smallest delta the PLD answers (the tilted composition keeps every charge relative to
#: delta; below this, probabilities leave the double-precision range)
MIN_DELTA = 1e-300
#: default relative width of a bracket (``upper - lower <= max(RTOL * upper, atol)``)
RTOL = 3e-5
#: the automatic refinement's smallest step, a factor 2^(1/2) (two rungs of its ladder): a bracket
#: just short of the tolerance is not refined by 2 (a million steps at q = 1e-4: 3 s a composition)
LAST_STEP = 2.0 ** -0.5


def on_ladder(h: float) -> float:
    """The largest grid step ``0.05 * 2^(-k/4)`` (k integer) not above ``h``.

    The automatic grids are taken from this fixed ladder, so that nearby compositions (a
    calibration's noise levels) end on the *same* grid and their brackets vary continuously;
    a calibration can then solve on the very grid its report will use.

    Args:
        h: a grid step, > 0.

    Returns:
        The step on the ladder (a float); ``h`` itself when ``h >= 0.05``.
    """
    if h >= 0.05:
        return h
    k = math.ceil(-4.0 * math.log2(h / 0.05) - 1e-9)
    return 0.05 * 2.0 ** (-k / 4.0)


#: re-compose tilted toward the delta-quantile when the round-off charge above the lower end
#: exceeds this fraction of delta (the charge moves the upper end by about that much, relative)
RETILT = 1e-6
#: the same for the lower end (it needs far less accuracy than the upper end a calibration
#: solves on)
LOWER_RETILT = 1e-3
#: mass charged (as infinite loss) for the per-step tails beyond the grid, in all, and for the
#: wrapped-around mass of a composition, per side -- fractions of delta.  Each moves eps by
#: about that fraction of its own scale (~1e-8 relative); smaller costs grid points
TAIL = 1e-8
ALIAS = 1e-8


@dataclass(frozen=True)
class EpsilonBracket:
    """``eps(delta)`` of a composition: ``lower <= true eps <= upper`` (``upper`` is certified).

    Attributes:
        lower: a lower bound on eps (a float, >= 0).
        upper: the certified upper bound on eps (a float, possibly inf).
        delta: the target delta the bracket is for.
        discretization: the loss grid step of the final composition (0.0 where nothing was composed).
        converged: whether the width is within the requested tolerance.
        notes: a tuple of strings on how the bracket was obtained (a cap reached, a fallback).
        method: the sound method that gave ``upper``: ``"pld"``, ``"gdp"`` or ``"rdp"`` (``"tv"``:
        eps = 0 exactly by the total-variation bound; ``"none"``: no events composed).
    """

    lower: float
    upper: float
    delta: float
    discretization: float
    converged: bool
    notes: tuple = field(default=())
    #: the sound method that gave ``upper`` ("pld", or "gdp"/"rdp" when the accountant's
    #: :meth:`~dpcalib.accountant.PrivacyAccountant.epsilon_bracket` found them smaller)
    method: str = "pld"

    @property
    def width(self) -> float:
        """``upper - lower``, the bracket's width.

        """
        return self.upper - self.lower


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
    :class:`AddPair`.  :func:`dominating_pairs` chooses an event's; the discretiser
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
        return self.z * self.z * inner + 0.5

    def _mix_loss(self, x):
        """``log(1 - q + q e^s(x))``, ``s = (x - 1/2) / z^2``: the loss of the remove pair."""
        x = np.asarray(x, dtype=float)
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
        (a subsampled pair's ``log(1 - q)``: the remove pair's minimum, ``-log(1 - q)`` the add
        pair's maximum) and cut as :func:`cut_range` allows (a subsampled pair's: at ``+-level`` where
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
            hi = min(hi, -math.log1p(-self.q) if self.q < 1 else np.inf)    # the loss is <= -log(1 - q)
        else:
            lo = max(lo, math.log1p(-self.q) if self.q < 1 else -np.inf)    # the loss is >= log(1 - q)
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


#: double-precision unit round-off, the scale of the one-sided margins of :class:`MixturePair`'s inverse
_EPS = float(np.finfo(float).eps)


@dataclass(frozen=True)
class MixturePair(Pair):
    """A mixture of Gaussians' pair: ``P = sum_i w_i N(c_i, z^2)`` vs ``Q = N(0, z^2)`` (remove), or the
    two swapped (add), every ``c_i >= 0`` -- dp-accounting's ``MixtureGaussianPrivacyLoss`` (REMOVE: its
    ``mu_upper`` mirrored to ``x -> -x``, which changes no divergence; ADD as it is).  The loss
    ``M(x) = log sum_i w_i e^((c_i x - c_i^2/2) / z^2)`` (add: ``-M``) is a log-sum-exp of functions
    affine in x with slopes ``c_i / z^2 >= 0``, so it is convex and increasing; with a weight ``p0`` at
    ``c = 0`` it has the hard edge ``log p0`` (add: ``-log p0``), as the Poisson pairs have ``log(1 - q)``
    (the mixture ``((0, 1), (1 - q, q))`` is :class:`RemovePair` / :class:`AddPair` exactly).

    ``M`` has no closed-form inverse for two or more nonzero ``c_i``: :meth:`_x_of_mix` brackets its root
    (Newton from the right and the chord from the left, both monotone for a convex increasing
    function) and returns the end of the bracket, moved by a margin for the rounding, on the side that
    only moves mass to a larger loss (see :meth:`_x_edges`).

    Attributes:
        z: the noise standard deviation, > 0.
        comps: the ``(weight, mean)`` components: weights > 0 summing to 1, distinct means >= 0
            (at least one > 0), sorted by mean (:meth:`of` builds them).
        direction: ``"remove"`` or ``"add"``.
    """

    z: float
    comps: tuple
    direction: str = "remove"

    @classmethod
    def of(cls, sigma: float, sensitivities, probs, direction: str = "remove"):
        """The pair of ``N(0, sigma^2)`` against ``sum_i p_i N(c_i, sigma^2)``: zero weights dropped, equal
        means merged, the weights normalised to sum to 1 (exactly as stated where they do).

        Args:
            sigma: the noise standard deviation, > 0.
            sensitivities: the ``c_i``, each finite and >= 0, one > 0 with positive probability.
            probs: the ``p_i``, each >= 0, summing to 1 (up to rounding).
            direction: ``"remove"`` or ``"add"``.

        Returns:
            The :class:`MixturePair`.

        Raises:
            InputError: if a sensitivity is negative or every one with positive probability is 0.
        """
        merged: dict = {}
        for c, p in zip(sensitivities, probs):
            c, p = float(c), float(p)
            if not (c >= 0.0 and math.isfinite(c)):
                raise InputError(f"sensitivities={tuple(sensitivities)!r} is not allowed: the mixture pair "
                                 f"takes finite sensitivities >= 0.")
            if p > 0.0:
                merged.setdefault(c, []).append(p)
        total = math.fsum(p for ps in merged.values() for p in ps)
        comps = tuple((math.fsum(ps) / total, c) for c, ps in sorted(merged.items()))
        if not any(c > 0.0 for _, c in comps):
            raise InputError(f"sensitivities={tuple(sensitivities)!r} is not allowed: the mixture pair needs "
                             f"a positive sensitivity with positive probability.")
        return cls(float(sigma), comps, direction)

    @property
    def p0(self) -> float:
        """The weight of the component at mean 0 (0.0 where there is none)."""
        return next((w for w, c in self.comps if c == 0.0), 0.0)

    @property
    def q(self) -> float:
        """``1 - p0``: the chance the mixture's mean is not 0 (1.0 where no mean is 0)."""
        return 1.0 - self.p0

    @property
    def p_comps(self):
        """P's ``(weight, mean)`` components: the mixture (remove) or ``((1, 0),)`` (add)."""
        return self.comps if self.direction == "remove" else ((1.0, 0.0),)

    @property
    def q_comps(self):
        """Q's ``(weight, mean)`` components: ``((1, 0),)`` (remove) or the mixture (add)."""
        return ((1.0, 0.0),) if self.direction == "remove" else self.comps

    @property
    def decreasing(self):
        """Whether the loss decreases in x (the add direction)."""
        return self.direction == "add"

    @property
    def edge(self):
        """The hard edge of the loss, ``log p0`` (remove; add: ``-log p0``), or None (no mean is 0)."""
        if not 0.0 < self.q < 1.0:
            return None
        e = math.log1p(-self.q)
        return e if self.direction == "remove" else -e

    def _slopes(self):
        """``(a, B)`` of the nonzero components: ``a_i = c_i / z^2``, ``B_i = log w_i - c_i^2 / (2 z^2)``."""
        z2 = self.z * self.z
        nz = [(w, c) for w, c in self.comps if c > 0.0]
        a = np.array([c / z2 for _, c in nz])
        B = np.array([math.log(w) - c * c / (2.0 * z2) for w, c in nz])
        return a, B

    def _mix(self, x):
        """``M(x)``, the remove pair's loss (``log p0`` at ``x = -inf``)."""
        x = np.asarray(x, dtype=float)
        a, B = self._slopes()
        with np.errstate(invalid="ignore", over="ignore"):
            s = B + a * x[..., None]
        s = np.where(np.isnan(s), -np.inf, s)              # (-inf * 0 never occurs: every a_i > 0)
        g = np.logaddexp.reduce(s, axis=-1)
        if self.p0 > 0.0:
            g = np.logaddexp(math.log(self.p0), g)
        return g

    def loss(self, x):
        """Privacy loss at ``x``: ``M(x)`` (remove, increasing in x) or ``-M(x)`` (add, decreasing).

        Args:
            x: a point or an array of points.

        Returns:
            The loss (an array).
        """
        g = self._mix(x)
        return g if self.direction == "remove" else -g

    def _x_of_mix(self, ell, lower: bool = True):
        """x with ``M(x) = ell`` (-inf where ``ell <= log p0``), each within ``lower`` (at or below the
        true x) or not (at or above it), up to rounding far below the margin.

        With ``u = e^ell - p0`` (through ``expm1``, and above ``ell = 1`` as ``ell + log1p(-p0 e^-ell)``,
        as :meth:`Pair._x_of_mix`; ``u`` first moved by its rounding bound toward the side asked for),
        x solves ``G(x) = log u``, ``G = LSE_i(a_i x + B_i)`` over the nonzero means (:meth:`_slopes`).
        ``max_i(a_i x + B_i) <= G <= max_i(a_i x + B_i) + log n`` brackets the root in ``[x_lo, x_hi]``;
        ``G`` is convex and increasing, so Newton's step from the right end and the chord's root from
        the left stay on their sides; each candidate is kept on the side its computed ``G`` puts it
        (the chord replaced by a bisection step where the bracket did not halve).  The end asked for is then moved out by
        twice the evaluation error of ``G`` over ``G'`` (and 4 ulps of x)."""
        ell = np.asarray(ell, dtype=float)
        p0 = self.p0
        sgn = -1.0 if lower else 1.0
        if p0 > 0.0:
            big = ell > 1.0
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                em = np.expm1(np.where(big, 0.0, ell))
                u = em + (1.0 - p0) + sgn * 4.0 * _EPS * (np.abs(em) + 1.0)
                small = np.log(np.maximum(u, 0.0))
                large = ell + np.log1p(-p0 * np.exp(-np.where(big, ell, 1.0)))
                large = large + sgn * 8.0 * _EPS * (np.abs(large) + 1.0)
            t = np.where(big, large, small)
        else:
            t = ell.copy()
        a, B = self._slopes()
        out = np.full(t.shape, -np.inf)
        fin = np.isfinite(t)
        tt = t[fin]
        if tt.size == 0:
            return out
        xl, xr = self._bracket(tt)
        x = xl if lower else xr
        _, d = self._G(x)
        err = 8.0 * _EPS * (np.abs(tt) + float(np.max(np.abs(B))) + float(np.max(a)) * np.abs(x)
                            + math.log(a.size) + 1.0)
        out[fin] = x + sgn * (2.0 * err / d + 4.0 * _EPS * np.abs(x))
        return out

    def _G(self, x):
        """``(G(x), G'(x))`` of :meth:`_x_of_mix` at the points ``x`` (a 1-d array)."""
        a, B = self._slopes()
        s = B + a * x[:, None]
        m = s.max(axis=1)
        e = np.exp(s - m[:, None])
        S = e.sum(axis=1)
        return m + np.log(S), (e * a).sum(axis=1) / S

    def _bracket(self, tt):
        """``(xl, xr)`` around the roots of ``G(x) = tt`` (finite targets, a 1-d array), as narrow as the
        rounding of ``G`` allows (:meth:`_x_of_mix`).  Sorted targets (a grid's edges) are warm-started:
        the roots of every 16th are bracketed first, and a target's root between two of them lies
        between theirs (``G`` is increasing)."""
        a, B = self._slopes()
        n = a.size
        xr = np.min((tt[:, None] - B) / a, axis=1)                 # max_i(...) = t there: G >= t
        xl = np.min((tt[:, None] - math.log(n) - B) / a, axis=1)   # max_i(...) <= t - log n: G <= t
        if n == 1:
            return xr, xr.copy()                                   # (one component: the closed form)
        N = tt.size
        if N > 256 and bool(np.all(np.diff(tt) >= 0.0)):
            sub = np.unique(np.concatenate((np.arange(0, N, 16), [N - 1])))
            sl, sr = self._bracket(tt[sub])
            j = np.searchsorted(sub, np.arange(N), side="right") - 1
            xl = np.maximum(xl, sl[j])
            xr = np.maximum(np.minimum(xr, sr[np.minimum(j + 1, sub.size - 1)]), xl)
            xl[sub], xr[sub] = sl, sr
        G = self._G
        gr, dr = G(xr)
        gl, _ = G(xl)
        bisect = np.zeros(tt.shape, dtype=bool)
        act = np.ones(tt.shape, dtype=bool)
        bmax, amax = float(np.max(np.abs(B))), float(np.max(a))
        for _ in range(200):
            width = xr - xl
            xm = np.maximum(np.abs(xl), np.abs(xr))
            # (converged: the bracket is 1e-13 wide in G, or down to G's rounding; either end is a
            # bound on its side whether or not it converged -- this is tightness, not soundness)
            act &= width > 1e-13 * (np.abs(tt) + 1.0) / dr + 4.0 * _EPS * (xm + (np.abs(tt) + bmax + amax * xm + 1.0) / dr)
            if not act.any():
                break
            idx = np.nonzero(act)[0]
            xa, xb, ga, gb, db, ta = xl[idx], xr[idx], gl[idx], gr[idx], dr[idx], tt[idx]
            with np.errstate(divide="ignore", invalid="ignore"):
                newton = xb - (gb - ta) / db
                chord = xa + (ta - ga) * (xb - xa) / (gb - ga)
            mid = 0.5 * (xa + xb)
            for c in (newton, np.where(bisect[idx] | ~np.isfinite(chord), mid, chord)):
                c = np.clip(c, xa, xb)
                gc, dc = G(c)
                right = gc >= ta                    # each candidate kept on the side its G puts it
                xb, gb, db = np.where(right, c, xb), np.where(right, gc, gb), np.where(right, dc, db)
                xa, ga = np.where(right, xa, c), np.where(right, ga, gc)
            bisect[idx] = (xb - xa) > 0.5 * width[idx]
            moved = (xb != xr[idx]) | (xa != xl[idx])
            # neither end moved: an end where G is t to its rounding is the root, up to the margin of
            # :meth:`_x_of_mix` (the other end is moved onto it); else the bracket is kept as it is
            tol = 8.0 * _EPS * (np.abs(ta) + bmax + amax * np.maximum(np.abs(xa), np.abs(xb)) + 1.0)
            at_b = ~moved & (np.abs(gb - ta) <= tol)
            at_a = ~moved & ~at_b & (np.abs(ga - ta) <= tol)
            xa, ga = np.where(at_b, xb, xa), np.where(at_b, gb, ga)
            xb, gb = np.where(at_a, xa, xb), np.where(at_a, ga, gb)
            xl[idx], xr[idx], gl[idx], gr[idx], dr[idx] = xa, xb, ga, gb, db
            act[idx] = moved
        return xl, xr

    def _x_edges(self, e):
        """The x of the loss edges ``e``, non-decreasing, each on the side that rounds no loss down: the
        remove loss increases in x, so ``{L <= e}`` is ``x <= x(e)`` and each x is at or below the true
        one; the add loss decreases, so ``{L > e}`` is ``x < x(-e)`` and each x is at or above it (then
        every point of a bin has its loss at most the bin's upper edge: the discretiser's upper step
        stays an upper bound).  A running min (max) keeps the rounded edges monotone, on the same side."""
        e = np.asarray(e, dtype=float)
        if self.direction == "remove":
            x = self._x_of_mix(e, lower=True)
            return np.minimum.accumulate(x[::-1])[::-1]
        x = self._x_of_mix(-e, lower=False)[::-1]
        return np.maximum.accumulate(x)

    def cell_point(self, x):
        """A point at or below ``-log E_P[e^-L | cell]`` of the edge cell ``{x' <= x}`` (:func:`_edge_point`
        for a mixture: the cell's offset from the edge is ``log1p(sum_(c_i > 0) w_i / p0 Phi((x - c_i)/z) /
        Phi(x / z))``, the ratios from ``log_ndtr``).

        Args:
            x: the cell's upper end (a float).

        Returns:
            The loss point (a float; ``-inf`` for an empty remove cell, the edge for an empty add cell).
        """
        edge, z, p0 = self.edge, self.z, self.p0
        sign = 1 if self.direction == "remove" else -1
        l0 = float(special.log_ndtr(x / z))
        if edge is None or not l0 > -math.inf:
            return -math.inf if sign > 0 else edge
        r = math.fsum(w / p0 * math.exp(float(special.log_ndtr((x - c) / z)) - l0)
                      for w, c in self.comps if c > 0.0)
        off = math.log1p(r)
        star = edge + off if sign > 0 else edge - off
        return star - (1e-13 + 1e-12 * abs(star))


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
    """The dominating pairs of one event, in the order the discretiser composes them: one pair, or --
    sampling without replacement under replace-one -- the remove and the add pair, whose discretised
    steps are symmetrised; ``()`` for an event that never uses the record (sampling rate 0) and for a
    balls-in-bins epoch (no one-dimensional pair: :mod:`.allocation` discretises it).
    ``direction``: "remove" or "add", the direction a Poisson event's pair takes.

    Args:
        event: a Gaussian, Poisson-sampled, without-replacement-sampled or balls-in-bins event.
        direction: ``"remove"`` or ``"add"``.

    Returns:
        A tuple of zero, one or two :class:`Pair` objects.

    Raises:
        InputError: if ``event`` is of another type.
    """
    own = getattr(event, "pld_pairs", None)
    if own is not None:                 # a kind of its own (:mod:`..kinds`): its pairs, or None (refused)
        pairs = own(direction)
        if pairs is None:
            raise InputError(f"accountant='pld' is not allowed: {event.refuses('pld')}.")
        return tuple(pairs)
    z = event.noise_multiplier
    if isinstance(event, BallsInBinsGaussianEvent):
        return ()
    if isinstance(event, GaussianEvent):
        return (GaussianPair(z),)
    if isinstance(event, PoissonSampledGaussianEvent):
        q = event.sampling_probability
        return () if q == 0.0 else (PAIRS[direction](z, q),)
    if isinstance(event, WORSampledGaussianEvent):
        g = event.sampling_ratio
        return () if g == 0.0 else (RemovePair(z, g), AddPair(z, g))
    raise InputError(f"event={event!r} is not allowed: the PLD accountant has no dominating pair for "
                     f"{type(event).__name__}; expected one of {', '.join(t.__name__ for t in event_types())}.")


@dataclass
class Step:
    """A discretised step: finite masses at (i0 + j) * h, an infinite-loss mass, tail masses.

    Attributes:
        i0: the grid index of the first atom.
        mass: the finite atoms' masses (a float array).
        inf: the mass at infinite loss.
        bad: the mass of the true loss outside the grid (rounded up or sent to infinity).
        count: how many times the step is composed, >= 1.
        lmgf: ``log E[e^(l L)]`` over the finite atoms at the tilts, or None (not yet computed).
        shift: the grid's anchor (atoms at ``shift + (i0 + j) * h``).
        charge: the profile slack of the step (a block's remainders), >= 0.
        block: the number of the pair's steps this step stands for, >= 1.
    """

    i0: int
    mass: np.ndarray
    inf: float
    bad: float     # mass of the true loss outside the grid (rounded up or sent to infinity)
    count: int
    # log E[e^(l L)] over the finite atoms at +-_LAMBDAS, computed once (a bracket needs them
    # for every composition and re-composition of the step)
    lmgf: tuple | None = field(default=None, repr=False, compare=False)
    #: the grid's anchor: the atoms sit at ``shift + (i0 + j) * h`` (0 but for the anchored lower
    #: steps of :mod:`.discretise`); a composition adds ``count * shift``
    shift: float = 0.0
    #: a bound on how far the step's measure may lie from a valid one, in profile: its profile
    #: (lower steps: the true one) may exceed the other by at most this constant -- a block's
    #: wrapped-around and round-off remainders (:mod:`.blocks`); a composition adds
    #: ``count * charge`` (times the other steps' largest total mass) to what it charges
    charge: float = 0.0
    #: the number of the pair's steps this step stands for (a block of :mod:`.blocks`: its
    #: atoms are not each within one grid step of the true loss, so no Hoeffding end is read)
    block: int = 1


class OverCap(Exception):
    """A composition or discretisation would exceed the memory cap (caught inside the accountant).

    """
    pass


def aligned_grid(events, h: float) -> float | None:
    """A grid step in ``(h/2, h]`` that puts the subsampled loss's atom on a grid point, or None.

    With small noise almost all of a Poisson step's mass sits just above ``log(1 - q)`` (remove
    direction; just below ``-log(1 - q)`` for add, and both for sampling without replacement):
    an atom.  Mid-way between two grid points its chord gap is ``~h/4`` of the whole mass, more
    than the thin tail above can repay, and :func:`~.discretise.lower_step` fails.  With ``h' = |log(1 - q)|
    / ceil(|log(1 - q)| / h)`` the atom sits at a grid point (the grid is symmetric about 0, so
    for both signs), its gap is ~0, and the lower step exists.  Any grid's lower end is valid;
    this one is used only where the grid ``h``'s lower steps fail.  The atom of the subsampled
    event with the most steps is aligned; None where no event is subsampled (0 < q < 1) or the
    atom is within ``h`` of 0 (then it sits near a grid point already).

    Args:
        events: checked ``(event, count)`` pairs.
        h: the grid step, > 0.

    Returns:
        The aligned grid step (a float), or None.
    """
    best = None
    for ev, k in events:
        q = ev.use_probability
        if 0.0 < q < 1.0 and (best is None or k > best[1]):
            best = (q, k)
    if best is None:
        return None
    a = -math.log1p(-best[0])
    if not a >= h:
        return None
    return a / math.ceil(a / h)


#: largest grid step accepted: the automatic refinement never goes above it; past ~88 the 8x
#: coarser hint grid overflowed e^h (1e3 and 1e300 raised OverflowError), and no loss needs such a grid
MAX_DISCRETIZATION = 64.0


def directions(events):
    """The directions a composition of ``events`` is bracketed in: remove and add where a Poisson step or a
    balls-in-bins epoch is among them (each composed on its own, the worse reported), else remove.

    Args:
        events: ``(event, count)`` pairs.

    Returns:
        ``("remove", "add")`` or ``("remove",)``.
    """
    if any(isinstance(e, (PoissonSampledGaussianEvent, BallsInBinsGaussianEvent)) or getattr(e, "both_directions", False)
           for e, _ in events):
        return ("remove", "add")
    return ("remove",)
