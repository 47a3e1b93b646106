"""The mixture of Gaussians' dominating pair (dp-accounting's ``MixtureGaussianPrivacyLoss``), a
:class:`~.pairs.Pair` the discretiser reads as it reads the Poisson pairs: the remove pair
``(sum_i w_i N(c_i, z^2), N(0, z^2))`` and the add pair (the two swapped), its loss inverted on the side
that never rounds a loss down.  Its one user is :class:`~..mechanism_events.MixtureOfGaussiansEvent`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from ..validation import InputError
from .pairs import Pair

__all__ = ["MixturePair"]

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
        """A point at or below ``-log E_P[e^-L | cell]`` of the edge cell ``{x' <= x}`` (the Poisson pairs' edge point,
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
