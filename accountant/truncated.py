"""The truncated Poisson-sampled Gaussian: dp-accounting's ``TruncatedSubsampledGaussianDpEvent``.

A step samples each of the ``n`` records with probability ``q`` (Poisson), keeps a uniformly random
subset of at most ``B`` of them where more were drawn (the batch is *truncated* to a fixed memory
budget), and releases the sum of their clipped gradients plus Gaussian noise of multiplier ``sigma``.
Truncation can drop another record when the differing one is sampled, so the step is not the
Poisson-sampled Gaussian.  Its dominating pair (add-or-remove) is the one dp-accounting 0.6 composes
(``from_truncated_subsampled_gaussian_mechanism``, after arXiv:2508.15089, Sec. 4.3): with ``t =
P(Binom(n - 1, q) >= B)``, the chance that the batch is truncated when it holds the differing record,

* with weight ``1 - t``, the Poisson-sampled Gaussian's pair (sensitivity 1, rate ``q``);
* with weight ``t``, the replace-one Poisson-sampled Gaussian's pair at ``sigma / 2`` (the sum moves by
  up to 2: the record in, another out) at rate ``q' = P(Binom(n, q) > B) B / (t n)``, the chance the
  record is kept given truncation,

side by side: the disjoint union of the two pairs, whose ``delta(eps)`` is ``(1 - t) delta_1(eps) + t
delta_2(eps)`` and whose privacy-loss distribution is the mixture of the two (dp-accounting's
``compute_mixture``).  dpcalib discretises that pair with its own certified rounding (each part's loss
inverted on the side that rounds no loss down); the decomposition is the paper's, taken as stated, and
the two weights are scipy's binomial tails (relative error ~1e-15), as dp-accounting's are.  The step
has no known RDP bound (dp-accounting's RDP accountant refuses it too): the PLD is its only route.

Adding this kind took this module, one reader line in :mod:`.interop` and its tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import special

from . import validation
from .events import ADD_REMOVE
from .kinds import EventKind, register_kind
from .pld.lossdist import eps_delta_pair
from .pld.pairs import AddPair, Pair, RemovePair

__all__ = ["TruncatedPoissonGaussianEvent"]

#: double-precision unit round-off, the scale of :class:`ReplacePair`'s one-sided margins
_EPS = float(np.finfo(float).eps)
#: noise multipliers outside this range take the (0, TV) pair (``z^2`` of the pairs' inverses would leave
#: the double range near 1e154 and 1e-162; the step is nearly that pair there anyway)
NOISE_RANGE = (1e-100, 1e100)


@dataclass(frozen=True)
class ReplacePair(Pair):
    """``P = (1 - q) N(0, z^2) + q N(1, z^2)`` vs ``Q = (1 - q) N(0, z^2) + q N(-1, z^2)``: a record
    sampled with probability q replaced by another (dp-accounting's REPLACE pair of the subsampled
    Gaussian, mirrored ``x -> -x``, which changes no divergence).  The loss

        ``L(x) = log(1 - q + q e^((x - 1/2) / z^2)) - log(1 - q + q e^((-x - 1/2) / z^2))``

    is increasing and odd (``L(-x) = -L(x)``), unbounded both ways: no hard edge (:meth:`~.pld.pairs.Pair.loss_range`
    cuts no side).

    Attributes:
        z: the noise multiplier, noise std / L2 sensitivity of one record's part, > 0.
        q: the sampling probability, in (0, 1].
    """

    z: float
    q: float = 1.0

    @property
    def p_comps(self):
        """P's ``(weight, mean)`` components: ``((1 - q, 0), (q, 1))``."""
        return ((1.0 - self.q, 0.0), (self.q, 1.0))

    @property
    def q_comps(self):
        """Q's ``(weight, mean)`` components: ``((1 - q, 0), (q, -1))``."""
        return ((1.0 - self.q, 0.0), (self.q, -1.0))

    def loss(self, x):
        """Privacy loss at ``x`` (increasing in ``x``).

        Args:
            x: a point or an array of points.

        Returns:
            The loss (an array).
        """
        x = np.asarray(x, dtype=float)
        z2, lb = self.z * self.z, math.log1p(-self.q) if self.q < 1.0 else -math.inf
        lq = math.log(self.q)
        return np.logaddexp(lb, lq + (x - 0.5) / z2) - np.logaddexp(lb, lq + (-x - 0.5) / z2)

    def _x_of(self, ell):
        """``(x, margin)`` for losses ``ell >= 0`` (finite): with ``y = e^(x / z^2)``, ``k = q e^(-1/(2 z^2))``,
        ``b = 1 - q``, ``L = ell`` is ``k y^2 - b (e^ell - 1) y - k e^ell = 0``, whose positive root is
        ``log y = log b + log D - log 2 - log k + log(1 + sqrt(1 + r))``, ``D = e^ell - 1``, ``r = 4 k^2 e^ell /
        (b D)^2``, every term in logs (``log D = ell + log(-expm1(-ell))``); ``q = 1`` is ``x = z^2 ell / 2``.
        ``margin`` bounds the rounding of ``x``: 64 ulps of the terms' magnitudes, times ``z^2``."""
        z2 = self.z * self.z
        if self.q >= 1.0:
            x = 0.5 * z2 * ell
            return x, 8.0 * _EPS * np.abs(x) + 5e-324
        lb, lk = math.log1p(-self.q), math.log(self.q) - 0.5 / z2
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lm = np.log(-np.expm1(-ell))                  # log(1 - e^-ell): -inf at ell = 0
            lr = math.log(4.0) + 2.0 * lk - 2.0 * lb - ell - 2.0 * lm
            big = lr > 0.0
            f = np.where(big, 0.5 * lr + np.log(np.exp(-0.5 * np.where(big, lr, 0.0))
                                                 + np.sqrt(1.0 + np.exp(-np.where(big, lr, 0.0)))),
                         np.log1p(np.sqrt(1.0 + np.exp(np.where(big, 0.0, lr)))))
            logy = lb + (ell + lm) - math.log(2.0) - lk + f
            x = np.where(ell > 0.0, z2 * logy, 0.0)
            size = abs(lb) + np.abs(ell) + np.abs(lm) + math.log(2.0) + abs(lk) + np.abs(lr) + np.abs(f) + 1.0
        margin = np.where(ell > 0.0, 64.0 * _EPS * z2 * size + 8.0 * _EPS * np.abs(x), 0.0)
        return x, margin

    def _x_edges(self, e):
        """The x of the loss edges ``e``, non-decreasing, each at or below the true one (``{L <= e}`` is
        ``x <= x(e)``: no loss is rounded down), by the odd symmetry ``x(-l) = -x(l)``."""
        e = np.asarray(e, dtype=float)
        a = np.abs(e)
        fin = np.isfinite(a)
        xa, m = self._x_of(np.where(fin, a, 0.0))
        with np.errstate(invalid="ignore"):
            x = np.where(fin, np.sign(e) * xa - m, e)      # (+-inf stays +-inf)
        return np.minimum.accumulate(x[::-1])[::-1]

    def total_variation(self) -> float:
        """``q erf(1 / (sqrt(2) z))``: the two Gaussians' total variation times ``q`` (joint convexity).

        Returns:
            A float in [0, 1].
        """
        return min(1.0, self.q * float(special.erf(1.0 / (math.sqrt(2.0) * self.z))))


@dataclass(frozen=True)
class DisjointPair(Pair):
    """The disjoint union of pairs ``(w_i, (P_i, Q_i))``: the mechanism draws part ``i`` with probability
    ``w_i`` (whatever the data) and runs it; its loss has P-law ``sum_i w_i P_i(L_i)``, so each bin's
    masses are the parts' bins, weighted, and ``delta(eps) = sum_i w_i delta_i(eps)``.

    Attributes:
        parts: the ``(weight, pair)`` tuples, weights > 0 summing to 1.
    """

    parts: tuple

    @property
    def q(self) -> float:
        """The largest of the parts' sampling probabilities (below 1: a subsampled pair, which may be cut)."""
        return max(p.q for _, p in self.parts)

    def bins(self, eps_edges):
        """P and Q masses of ``L`` in each bin ``(e_i, e_(i+1)]`` and P's two tails: the parts', weighted.

        Args:
            eps_edges: non-decreasing loss edges.

        Returns:
            A tuple ``(P, Q, p_below, p_above)`` (:meth:`~.pld.pairs.Pair.bins`).
        """
        P = Q = 0.0
        below = above = 0.0
        for w, pr in self.parts:
            p, q, b, a = pr.bins(eps_edges)
            P, Q, below, above = P + w * p, Q + w * q, below + w * b, above + w * a
        return P, Q, float(below), float(above)

    def loss_range(self, tau, cut_mass=None, level=None):
        """The union of the parts' ranges (each part's tails beyond hold at most ``tau`` of its mass,
        so the mixture's at most ``tau``; each part cut as its own range allows).

        Args:
            tau: the largest P-mass of each tail beyond the range, > 0.
            cut_mass: the largest P-mass a cut at ``+-level`` may drop (None: never cut).
            level: the cut level (None: ``LOSS_CUT``).

        Returns:
            A tuple ``(lo, hi)`` of floats.
        """
        ranges = [pr.loss_range(tau, cut_mass, level) for _, pr in self.parts]
        return min(r[0] for r in ranges), max(r[1] for r in ranges)


@register_kind
@dataclass(frozen=True)
class TruncatedPoissonGaussianEvent(EventKind):
    """One step of the Gaussian mechanism on a Poisson sample truncated to at most ``B`` records
    (dp-accounting's ``TruncatedSubsampledGaussianDpEvent``; add-or-remove, both directions composed).

    Attributes:
        dataset_size: ``n``, the number of records of the dataset that holds the differing record, an
            integer >= 1 (dp-accounting's convention): under add/remove the larger of the two neighbours, so
            a run over N records is covered for both of its neighbours by ``n = N + 1``.
        sampling_probability: ``q``, each record's chance to be drawn, in [0, 1].
        truncated_batch_size: ``B``, the most records a batch keeps, an integer >= 1.
        noise_multiplier: ``sigma``, noise std / L2 sensitivity, in (0, inf).
    """

    dataset_size: int
    sampling_probability: float
    truncated_batch_size: int
    noise_multiplier: float

    CHECKED = (("dataset_size", lambda v, name: validation.integer(v, name, 1)),
               ("sampling_probability", validation.probability),
               ("truncated_batch_size", lambda v, name: validation.integer(v, name, 1)),
               ("noise_multiplier", validation.positive))
    JSON_NAME = "truncated_subsampled_gaussian"
    DPA = ("TruncatedSubsampledGaussianDpEvent",
           ("dataset_size", "sampling_probability", "truncated_batch_size", "noise_multiplier"))
    WORDS = ("{count} step(s) of a Poisson sample at rate {e.sampling_probability:g} of {e.dataset_size} records "
             "truncated to {e.truncated_batch_size}, noise multiplier {e.noise_multiplier:g}")
    neighboring_relation = ADD_REMOVE
    both_directions = True

    @property
    def use_probability(self) -> float:
        """``q``: truncation only drops records, so the differing one takes part with chance at most q."""
        return self.sampling_probability

    @cached_property
    def weights(self) -> tuple:
        """``(t, q')``: the chance of truncation given the record is drawn, ``P(Binom(n - 1, q) >= B)``, and the
        record's chance to be kept given truncation, ``P(Binom(n, q) > B) B / (t n)`` (``q' = 0`` where ``t = 0``)."""
        from scipy import stats          # (here: scipy.stats costs every command line's start ~0.3 s)

        n, q, b = self.dataset_size, self.sampling_probability, self.truncated_batch_size
        t = float(stats.binom.sf(b - 1, n - 1, q)) if q > 0.0 else 0.0
        if t <= 0.0:
            return 0.0, 0.0
        return t, min(1.0, float(stats.binom.sf(b, n, q)) * b / t / n)

    def pld_pairs(self, direction):
        """``(DisjointPair(((1 - t, Poisson pair), (t, ReplacePair(sigma / 2, q')))),)``: the pair of the module's
        docstring in ``direction`` (the Poisson part's; the replace part is symmetric); the Poisson pair alone
        where ``t = 0``, the replace pair alone where ``t = 1``; ``()`` where ``q = 0``; outside
        :data:`NOISE_RANGE`, the (0, TV)-DP pair of Kairouz, Oh & Viswanath (Thm 2.1), TV the step's
        :meth:`total_variation`.

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            A tuple of pairs.
        """
        q, z = self.sampling_probability, self.noise_multiplier
        if q == 0.0:
            return ()
        if not NOISE_RANGE[0] <= z <= NOISE_RANGE[1]:
            # every mechanism whose outputs are within total variation TV is (0, TV)-DP, dominated by KOV's pair
            return (eps_delta_pair(0.0, self.total_variation()),)
        first = (RemovePair if direction == "remove" else AddPair)(z, q)
        t, q2 = self.weights
        if t == 0.0 or q2 == 0.0:
            return (first,)
        if t == 1.0:
            return (ReplacePair(0.5 * z, q2),)
        return (DisjointPair(((1.0 - t, first), (t, ReplacePair(0.5 * z, q2)))),)

    def total_variation(self) -> float:
        """``(1 - t) q erf(1 / (2 sqrt(2) sigma)) + t TV(replace part)``: the disjoint union's, each part's
        a bound (joint convexity).

        Returns:
            A float in [0, 1].
        """
        q, z = self.sampling_probability, self.noise_multiplier
        t, q2 = self.weights
        first = q * float(special.erf(1.0 / (2.0 * math.sqrt(2.0) * z)))
        second = ReplacePair(0.5 * z, q2).total_variation() if q2 > 0.0 else 0.0
        return min(1.0, (1.0 - t) * first + t * second)
