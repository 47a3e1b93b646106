"""Dominating pairs given by their privacy-loss distributions: the pairs of the non-Gaussian kinds.

The discretiser (:mod:`.discretise`) reads a pair through :meth:`~.pairs.Pair.bins` (the P- and
Q-masses of the loss on each bin, and P's tails) and :meth:`~.pairs.Pair.loss_range` alone.  A
:class:`LossPair` computes both from the exact masses of ``{L <= l}``, ``{L < l}``, ``{L >= l}`` and
``{L > l}`` under P and Q (:meth:`LossPair.mass`), so every pair here is exact -- no quadrature:

* :class:`FinitePair`: finitely many losses (randomized response, (eps, delta)-DP, discrete Laplace,
  the discrete Gaussian truncated where its mass leaves the double range); losses may be +-inf
  (the (eps, delta) pair's ``delta`` at +inf);
* :class:`LaplacePair`: ``Lap(1, b)`` vs ``Lap(0, b)`` -- atoms at ``+-1/b`` (mass 1/2 and
  ``e^(-1/b)/2`` under P) and a density between (Koskela et al. 2021; dp-accounting's
  ``LaplacePrivacyLoss``);
* :class:`SampledPair`: any of them under Poisson sampling with probability ``q``: remove
  ``((1 - q) Q + q P, Q)``, add ``(Q, (1 - q) Q + q P)`` (Zhu, Dong & Wang 2022, Thm 11; for sampling
  without replacement under replace-one the two are symmetrised, as for the Gaussian).  The
  loss is ``+-log(1 - q + q e^L)`` of the base loss ``L``, monotone, so its masses are the base's
  at the inverse image.

Connect-the-dots (the upper step) and the lower step are exact for any distribution given its bin
masses, so every bracket over these pairs is certified.
"""

from __future__ import annotations

import functools
import math
from dataclasses import FrozenInstanceError, dataclass

import numpy as np

from ..caches import SizedMemo, cached
from .pairs import Pair

__all__ = ["rr_pair"]

#: above this many atoms a finite pair is checked with numpy (below, Python is faster: ~1 us against 15 us)
FEW_ATOMS = 64
#: the edges :meth:`LossPair.bins` reads at once
_EDGES = 1 << 20
#: up to this many atoms the grid's anchor groups them by Python's rounding (:func:`_anchor`)
_PYTHON_KEYS = 1 << 16


class LossPair(Pair):
    """A pair given by the masses of its loss: subclasses implement :meth:`mass`."""

    q = 1.0          # never cut (the cut of :func:`~.pairs.cut_range` is for subsampled Gaussian pairs)
    z = 1.0
    edge = None
    decreasing = False

    def mass(self, side: str, l, how: str):
        """The ``side``-mass of ``{L how l}`` at each ``l``.

        Args:
            side: ``"P"`` or ``"Q"``.
            l: loss values (an array; +-inf allowed).
            how: ``"le"``, ``"lt"``, ``"ge"`` or ``"gt"``.

        Returns:
            A float array shaped like ``l``.
        """
        raise NotImplementedError

    def bins(self, eps_edges):
        """P and Q masses of ``L`` in ``(e_i, e_(i+1)]``, plus ``P(L <= e_0)`` and ``P(L > e_last)``.

        Args:
            eps_edges: non-decreasing finite loss edges.

        Returns:
            A tuple ``(P, Q, p_below, p_above)`` (:meth:`~.pairs.Pair.bins`).
        """
        e = np.asarray(eps_edges, dtype=float)
        P, Q = np.empty(max(e.size - 1, 0)), np.empty(max(e.size - 1, 0))
        # (a block of edges at a time: a sampled pair's masses take a dozen arrays of the edges, 2 GB at the
        # 13 million edges a 1 GB cap allows; every mass is a function of its own edge, so the same bits)
        for i in range(0, max(e.size - 1, 1), _EDGES):
            part = e[i:i + _EDGES + 1]
            for side, out in (("P", P), ("Q", Q)):
                le, gt = self.mass(side, part, "le"), self.mass(side, part, "gt")
                # upper-tail differences right of 0, lower-tail ones left of it: both stay accurate
                m = np.where(part[:-1] >= 0.0, gt[:-1] - gt[1:], le[1:] - le[:-1])
                out[i:i + part.size - 1] = np.maximum(m, 0.0)
        return P, Q, float(self.mass("P", e[:1], "le")[0]), float(self.mass("P", e[-1:], "gt")[0])

    def support(self):
        """The smallest and largest finite loss carrying mass (``(lo, hi)``), or None (none finite).

        Returns:
            A tuple ``(lo, hi)`` of floats, or None.
        """
        raise NotImplementedError

    def loss_range(self, tau, cut_mass=None, level=None):
        """The finite losses outside of which P has at most ``tau`` of mass on each side.

        Args:
            tau: the largest P-mass of each tail beyond the range, > 0.
            cut_mass: ignored (these pairs are never cut).
            level: ignored.

        Returns:
            A tuple ``(lo, hi)`` of floats.
        """
        s = self.support()
        if s is None:
            return 0.0, 0.0
        return float(s[0]), float(s[1])

    def atoms(self) -> list:
        """``[(loss, P-mass), ...]`` of the pair's finite atoms (none by default).

        Returns:
            A list of ``(loss, mass)`` pairs.
        """
        return []

    def atom_arrays(self) -> tuple:
        """:meth:`atoms` as two float arrays, the losses and their P-masses, in the same order.

        Returns:
            A tuple ``(losses, masses)`` of 1-d float arrays.
        """
        a = self.atoms()
        return np.array([l for l, _ in a], dtype=float), np.array([p for _, p in a], dtype=float)

    def total_variation(self) -> float:
        """``P(L > 0) - Q(L > 0)``: the total variation of the pair.

        Returns:
            A float in [0, 1].
        """
        z0 = np.zeros(1)
        return float(min(1.0, max(0.0, self.mass("P", z0, "gt")[0] - self.mass("Q", z0, "gt")[0])))


def _masses_from_atoms(losses, m, l, how):
    idx = np.searchsorted(losses, l, side="right" if how in ("le", "gt") else "left")
    if how in ("le", "lt"):
        cum = np.concatenate(([0.0], np.cumsum(m)))
        return cum[idx]
    rev = np.concatenate((np.cumsum(m[::-1])[::-1], [0.0]))
    return rev[idx]


def q_mass(p: float, l: float) -> float:
    """``p e^-l``, the Q-mass of an atom of P-mass ``p`` at loss ``l`` (at most 1): in log form where
    ``e^-l`` overflows (a loss below -700, a Laplace scale under 1.4e-3), never an OverflowError.

    Args:
        p: the atom's P-mass, >= 0.
        l: its loss (a float; -inf gives 0 where p is 0).

    Returns:
        The Q-mass (a float).
    """
    if p <= 0.0:
        return 0.0
    return float(p * math.exp(-l)) if l > -700.0 else math.exp(math.log(p) - l)


def _checked(pair, L, p, q):
    """``(L, p, q)``, or ArithmeticError where a loss is NaN or a mass is not in [0, inf]: such an atom would
    read as no mass -- a total variation of 0 and eps = 0 -- so stop on it (an internal error, never an
    optimistic answer).  In Python for a few atoms (~1 us for randomized response, where numpy's
    conversions took 15 us; a NaN fails every comparison), else with numpy."""
    if len(L) > FEW_ATOMS:
        ok = not (np.isnan(L).any() or (~(p >= 0.0)).any() or (~(q >= 0.0)).any())
    else:
        ok = all(l == l for l in L) and all(m >= 0.0 for m in p) and all(m >= 0.0 for m in q)
    if not ok:
        raise ArithmeticError(f"a finite pair with a NaN loss or a mass not in [0, inf]: {pair!r}"[:300])
    return L, p, q


@dataclass(frozen=True)
class FinitePair(LossPair):
    """Finitely many losses with their P- and Q-masses (sorted by loss; +-inf allowed).

    Attributes:
        losses: the losses, non-decreasing (a tuple of floats).
        p: P's masses (a tuple of floats, summing to 1).
        qm: Q's masses (a tuple of floats, summing to 1).
    """

    losses: tuple
    p: tuple
    qm: tuple

    def __post_init__(self):
        _checked(self, *(self.arrays if len(self.losses) > FEW_ATOMS else (self.losses, self.p, self.qm)))

    def __hash__(self):
        # (the fields' hash, made once: the caches of a pair's bins and tails are keyed by the pair)
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        return hash((self.losses, self.p, self.qm))

    @functools.cached_property
    def arrays(self) -> tuple:
        """The losses, P-masses and Q-masses as float arrays (made once; read only).

        Returns:
            A tuple of three 1-d float arrays.
        """
        return _read_only(self.losses, self.p, self.qm)

    @property
    def atom_count(self) -> int:
        """The number of atoms, finite losses or not.

        Returns:
            An int >= 1.
        """
        return len(self.losses)

    def mass(self, side, l, how):
        """The ``side``-mass of ``{L how l}``, summed over the atoms (:meth:`LossPair.mass`).

        Args:
            side: ``"P"`` or ``"Q"``.
            l: loss values (an array; +-inf allowed).
            how: ``"le"``, ``"lt"``, ``"ge"`` or ``"gt"``.

        Returns:
            The masses, an array shaped like ``l``.
        """
        L, p, q = self.arrays
        return _masses_from_atoms(L, p if side == "P" else q, np.asarray(l, dtype=float), how)

    def support(self):
        """The finite losses' ends with mass, or None.

        Returns:
            A tuple ``(lo, hi)`` of floats, or None.
        """
        L, p, q = self.arrays
        keep = np.isfinite(L) & ((p > 0) | (q > 0))
        return (float(L[keep].min()), float(L[keep].max())) if keep.any() else None

    def atoms(self) -> list:
        """The finite atoms with P-mass.

        Returns:
            A list of ``(loss, mass)`` pairs.
        """
        L, p = self.atom_arrays()
        return list(zip(L.tolist(), p.tolist()))

    def atom_arrays(self) -> tuple:
        """:meth:`atoms` as two float arrays (:meth:`LossPair.atom_arrays`), without a Python loop.

        Returns:
            A tuple ``(losses, masses)`` of 1-d float arrays.
        """
        L, p, _ = self.arrays
        keep = np.isfinite(L) & (p > 0)
        return L[keep], p[keep]

    def total_variation(self) -> float:
        """``P(L > 0) - Q(L > 0)`` (:meth:`LossPair.total_variation`), each summed from the largest
        loss down as :meth:`mass` sums it: over a few atoms in Python, over many by numpy's running sum
        (the same additions in the same order).

        Returns:
            A float in [0, 1].
        """
        if self.atom_count > FEW_ATOMS:
            L, p, q = self.arrays
            top = L.size - int(np.searchsorted(L, 0.0, side="right"))      # the atoms of loss > 0
            p_gt, q_gt = ((float(np.add.accumulate(m[::-1][:top])[-1]) if top else 0.0) for m in (p, q))
        else:
            p_gt = q_gt = 0.0
            for l, p, q in zip(reversed(self.losses), reversed(self.p), reversed(self.qm)):
                if not l > 0.0:
                    break
                p_gt, q_gt = p_gt + p, q_gt + q
        return float(min(1.0, max(0.0, p_gt - q_gt)))

    def renyi(self, alpha) -> np.ndarray:
        """``max(D_alpha(P || Q), D_alpha(Q || P))`` exactly (inf where a side has mass the other lacks).

        Args:
            alpha: orders > 1 (an array).

        Returns:
            A float array.
        """
        _, p, q = self.arrays
        return renyi_of(p, q, alpha)


#: the most elements of one order-by-atom block of :func:`renyi_of` (32 MB of doubles)
_BLOCK = 1 << 22


def renyi_of(p, q, alpha) -> np.ndarray:
    """``max(D_alpha(P || Q), D_alpha(Q || P))`` of two finite distributions on the same atoms, exactly (inf
    where a side has mass the other lacks): a log-sum-exp over the atoms per order, computed a block of orders at
    a time (79 orders of a million atoms took 2 GB at once).

    Args:
        p: P's masses (a 1-d float array).
        q: Q's masses, on the same atoms.
        alpha: orders > 1 (an array of any shape).

    Returns:
        A float array shaped like ``alpha``.
    """
    a = np.asarray(alpha, dtype=float)
    flat = a.reshape(-1, 1)
    rows = max(1, _BLOCK // max(1, p.size))
    out = []
    for x, y in ((p, q), (q, p)):
        k = x > 0
        if np.any(k & (y <= 0)):
            out.append(np.full(a.shape, np.inf))
            continue
        lx, ly = np.log(x[k]), np.log(y[k])
        lse = np.empty(flat.shape[0])
        for i in range(0, flat.shape[0], rows):
            b = flat[i:i + rows]
            t = b * lx + (1.0 - b) * ly
            mx = t.max(axis=-1, keepdims=True)
            lse[i:i + rows] = (mx + np.log(np.exp(t - mx).sum(axis=-1, keepdims=True)))[..., 0]
        out.append((np.maximum(lse, 0.0) / (flat[:, 0] - 1.0)).reshape(a.shape))
    return np.maximum(*out)


def _read_only(*values) -> tuple:
    out = tuple(np.array(v, dtype=float) for v in values)
    for a in out:
        a.setflags(write=False)          # (a frozen pair's, shared: read only)
    return out


#: the atoms of the made pairs asked for last, by ``(make, args)`` (:class:`MadePair`): 256 MB at most (13
#: discrete Gaussians at sigma 1e4: a composition of more distinct ones remakes their atoms at every grid)
_MADE = SizedMemo(256 << 20, lambda arrays: sum(a.nbytes for a in arrays))


class MadePair(FinitePair):
    """A finite pair named by how it is made: ``make(*args)`` returns its losses, P- and Q-masses (three
    arrays).  A discrete Gaussian's pair has 80 sigma atoms (19 MB of arrays at sigma 1e4), a discrete
    Laplace's s + 1; the caches keyed by pairs (bins, tails, compositions) and by events each hold one per
    query asked, and held as tuples they held ~120 MB a query at sigma 1e4.  This pair holds ``make`` and
    ``args`` alone, equal and hashed by them, frozen; its atoms are made where asked and kept in a cache of
    their own bounded in bytes (the last pairs asked: remade when asked again, ~30 ms at sigma 1e4).

    Args:
        make: a module-level function (pickled by its name).
        args: its arguments, a tuple of numbers.
    """

    def __init__(self, make, args: tuple):
        object.__setattr__(self, "make", make)
        object.__setattr__(self, "args", tuple(args))

    def __setattr__(self, name, value):
        raise FrozenInstanceError(f"cannot assign to field {name!r}")     # (a cache key)

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other):
        return type(other) is MadePair and self.make is other.make and self.args == other.args

    def __hash__(self):
        return hash((self.make.__qualname__, self.args))

    def __repr__(self):
        return f"MadePair({self.make.__qualname__}{self.args!r})"

    def __reduce__(self):
        return MadePair, (self.make, self.args)

    @property
    def arrays(self) -> tuple:
        """The losses, P-masses and Q-masses as read-only float arrays, made by ``make(*args)`` (and checked)
        where not in the cache.

        Returns:
            A tuple of three 1-d float arrays.
        """
        key = (self.make, self.args)
        out = _MADE.recall(key)
        if out is None:
            out = _MADE.remember(key, _checked(self, *_read_only(*self.make(*self.args))))
        return out

    @property
    def losses(self) -> tuple:
        """The losses as a tuple of floats (made from :attr:`arrays` at each call)."""
        return tuple(self.arrays[0].tolist())

    @property
    def p(self) -> tuple:
        """P's masses as a tuple of floats (made from :attr:`arrays` at each call)."""
        return tuple(self.arrays[1].tolist())

    @property
    def qm(self) -> tuple:
        """Q's masses as a tuple of floats (made from :attr:`arrays` at each call)."""
        return tuple(self.arrays[2].tolist())

    @property
    def atom_count(self) -> int:
        """The number of atoms.

        Returns:
            An int >= 1.
        """
        return len(self.arrays[0])


def rr_pair(eps: float, other: float = 0.0) -> FinitePair:
    """The pair ``(p_hi at eps, p_lo at -eps, other at 0)`` with ``p_hi = e^eps p_lo``: randomized
    response and the pure-DP pair (Kairouz, Oh & Viswanath 2015, Thm 2.1).

    Args:
        eps: the loss of the two atoms, >= 0.
        other: the mass at loss 0, in [0, 1).

    Returns:
        The :class:`FinitePair`.
    """
    p_lo = (1.0 - other) / (1.0 + math.exp(eps))
    p_hi = (1.0 - other) - p_lo
    return FinitePair((-eps, 0.0, eps), (p_lo, other, p_hi), (p_hi, other, p_lo))


def eps_delta_pair(eps: float, delta: float) -> FinitePair:
    """The dominating pair of every ``(eps, delta)``-DP mechanism (Kairouz, Oh & Viswanath 2015, Thm 2.1):
    ``delta`` at ``+inf`` (under P; at ``-inf`` under Q) and ``(1 - delta)`` times the eps pair.

    Args:
        eps: >= 0.
        delta: in [0, 1].

    Returns:
        The :class:`FinitePair`.
    """
    # (e^eps overflows past eps = 709: there the mass at -eps is (1 - delta) e^-eps / (1 + e^-eps), ~0)
    lo = (1.0 - delta) / (1.0 + math.exp(eps)) if eps <= 700.0 else (1.0 - delta) * math.exp(-eps) / (1.0 + math.exp(-eps))
    hi = (1.0 - delta) - lo
    return FinitePair((-math.inf, -eps, eps, math.inf), (0.0, lo, hi, delta), (delta, hi, lo, 0.0))


@dataclass(frozen=True)
class LaplacePair(LossPair):
    """``P = Lap(1, b)`` vs ``Q = Lap(0, b)``: the Laplace mechanism of sensitivity 1, scale ``b``.
    ``L(x) = (|x| - |x - 1|) / b``: ``-1/b`` for ``x <= 0``, ``(2x - 1)/b`` between, ``1/b`` for ``x >= 1``.

    Attributes:
        b: the scale over the sensitivity, > 0.
    """

    b: float

    def total_variation(self) -> float:
        """``1 - e^(-1/(2b))`` in closed form: the difference of the two masses above loss 0 cancels to 0
        (or -0) for a scale above about 1e16, which read as eps = 0 at any delta.

        Returns:
            A float in [0, 1].
        """
        return -math.expm1(-0.5 / self.b)

    def mass(self, side, l, how):
        """Closed forms of the ``side``-mass of ``{L how l}`` (:meth:`LossPair.mass`).

        Args:
            side: ``"P"`` or ``"Q"``.
            l: loss values (an array; +-inf allowed).
            how: ``"le"``, ``"lt"``, ``"ge"`` or ``"gt"``.

        Returns:
            The masses, an array shaped like ``l``.
        """
        l = np.asarray(l, dtype=float)
        lam = 1.0 / self.b
        x = np.clip((l / lam + 1.0) / 2.0, 0.0, 1.0)
        # lower tail {L <= l} strictly inside (-lam, lam); atoms at the ends
        low = 0.5 * np.exp((x - 1.0) / self.b) if side == "P" else -0.5 * np.expm1(-x / self.b) + 0.5
        high = 1.0 - low if side == "P" else 0.5 * np.exp(-x / self.b)       # {L > l} inside
        if how in ("le", "gt"):
            below = np.where(l < -lam, 0.0, np.where(l >= lam, 1.0, low))
            above = np.where(l < -lam, 1.0, np.where(l >= lam, 0.0, high))
        else:                                   # strict below / closed above: the atoms flip sides
            below = np.where(l <= -lam, 0.0, np.where(l > lam, 1.0, low))
            above = np.where(l <= -lam, 1.0, np.where(l > lam, 0.0, high))
        return below if how in ("le", "lt") else above

    def atoms(self) -> list:
        """``(-1/b, e^(-1/b) / 2)`` and ``(1/b, 1/2)``.

        Returns:
            A list of ``(loss, mass)`` pairs.
        """
        return [(-1.0 / self.b, 0.5 * math.exp(-1.0 / self.b)), (1.0 / self.b, 0.5)]

    def support(self):
        """``(-1/b, 1/b)``.

        Returns:
            A tuple ``(lo, hi)`` of floats, or None.
        """
        return -1.0 / self.b, 1.0 / self.b


@dataclass(frozen=True)
class SampledPair(LossPair):
    """A :class:`LossPair` under Poisson sampling with probability ``q`` (see the module).

    Attributes:
        base: the mechanism's pair (a :class:`LossPair`).
        q: the sampling probability, in (0, 1).
        direction: ``"remove"`` (loss ``log(1 - q + q e^L)``) or ``"add"`` (its negative; P and Q
            swapped as the module says).
    """

    base: LossPair
    q: float
    direction: str = "remove"

    def _inverse(self, l):
        """The base loss whose sampled (remove) loss is ``l``: ``log((e^l - (1 - q)) / q)``
        (-inf at ``l = log(1 - q)``, nan below)."""
        l = np.asarray(l, dtype=float)
        q = self.q
        big = l > 1.0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            small = np.log(np.expm1(np.where(big, 0.0, l)) + q)
            large = l + np.log1p(-(1.0 - q) * np.exp(-np.where(big, l, 1.0)))
        return np.where(big, large, small) - math.log(q)

    def mass(self, side, l, how):
        """The ``side``-masses of ``{L' how l}`` from the base's at the inverse image (:meth:`LossPair.mass`).

        Args:
            side: ``"P"`` or ``"Q"``.
            l: loss values (an array; +-inf allowed).
            how: ``"le"``, ``"lt"``, ``"ge"`` or ``"gt"``.

        Returns:
            The masses, an array shaped like ``l``.
        """
        l = np.asarray(l, dtype=float)
        q, b = self.q, self.base
        if self.direction == "remove":
            g, how_b, below = self._inverse(l), how, l < math.log1p(-q)
            mix = side == "P"                # P' = (1 - q) Q + q P, Q' = Q
        else:                                # L' = -f(L): {L' <= l} = {L >= g(-l)}
            g = self._inverse(-l)
            how_b = {"le": "ge", "lt": "gt", "ge": "le", "gt": "lt"}[how]
            below = -l < math.log1p(-q)      # {L' <= l} is everything there
            mix = side == "Q"                # P' = Q, Q' = (1 - q) Q + q P
        g = np.where(below, -np.inf, g)
        val = (1.0 - q) * b.mass("Q", g, how_b) + q * b.mass("P", g, how_b) if mix else b.mass("Q", g, how_b)
        whole = 1.0 if how in ("ge", "gt") else 0.0
        if self.direction == "add":
            whole = 1.0 - whole
        return np.where(below, whole, val)

    def atoms(self) -> list:
        """The base's atoms, moved by the sampled loss (their masses mixed as the direction says):
        :meth:`atom_arrays` as a list.

        Returns:
            A list of ``(loss, mass)`` pairs.
        """
        L, m = self.atom_arrays()
        return list(zip(L.tolist(), m.tolist()))

    def atom_arrays(self) -> tuple:
        """The base's atoms moved by the sampled loss ``f(l) = log(1 - q + q e^l)``, with the P-masses
        ``q p + (1 - q) p e^-l`` (remove) or, at ``-f(l)``, ``p e^-l`` (add); ``p e^-l`` in log form below
        ``l = -700`` (:func:`q_mass`).

        Returns:
            A tuple ``(losses, masses)`` of 1-d float arrays.
        """
        q = self.q
        L, p = self.base.atom_arrays()
        with np.errstate(over="ignore", divide="ignore"):
            pq = np.where(L > -700.0, p * np.exp(-np.maximum(L, -700.0)), np.exp(np.log(p) - L))
            f = np.logaddexp(math.log1p(-q), math.log(q) + L)
        if self.direction == "remove":
            return f, q * p + (1 - q) * pq
        return -f, pq

    def support(self):
        """The finite losses' ends: ``[log(1 - q), f(hi)]`` for remove (``f(v) = log(1 - q + q e^v)``;
        the base's ``-inf`` losses land on ``log(1 - q)``), negated for add.

        Returns:
            A tuple ``(lo, hi)`` of floats, or None.
        """
        s = self.base.support()
        lo = math.log1p(-self.q)
        hi = lo if s is None else float(np.logaddexp(lo, math.log(self.q) + s[1]))
        return (lo, hi) if self.direction == "remove" else (-hi, -lo)


def aligned_step(events, h: float, direction: str = "remove") -> float:
    """A grid step in ``(h/2, h]`` on which the heaviest atom (mass times |loss|) of the events' pairs is a grid point (``h``
    itself where no pair has atoms, or the atom is within ``h/8`` of 0).

    An atom mid-bin costs both ends of a bracket O(h) (connect-the-dots splits it between two grid
    points, and the lower step's chord gap is linear in its mass); on a grid point it costs nothing,
    and the lattice of randomized response, the pure-DP pairs, discrete Laplace (``+-eps``, ``a(2x - s)``)
    and Laplace's two atoms (``+-1/b``) is then wholly on the grid: only the continuous parts' O(h^2)
    remain.  Any grid gives a certified bracket; this one a narrow one.

    Args:
        events: ``(event, count)`` pairs.
        h: the grid step, > 0.
        direction: the direction whose pairs are read.

    Returns:
        The step (a float).
    """
    a = _anchor(tuple(events), direction)
    if a is None or a < h / 8.0 or not math.isfinite(a / h):
        return h
    n0 = math.ceil(a / h - 1e-9)
    for n in range(n0, n0 + 16):     # (a step a / n with n * step == a exactly: +-a on grid points in floats)
        step = a / n
        for cand in (step, math.nextafter(step, 0.0), math.nextafter(step, math.inf)):
            if cand * n == a:
                return cand
    return a / n0


@cached(maxsize=256)
def _anchor(events: tuple, direction: str):
    """The loss :func:`aligned_step` puts on a grid point, or None (no atom): the heaviest atom's |loss|, or the
    lattice's unit where every atom is on one.  It does not depend on the step, and a query asks for a dozen
    steps: made once per composition (with numpy: a discrete Gaussian's pair has 80 sigma atoms)."""
    ls, ws = [], []
    for ev, k in events:
        own = getattr(ev, "pld_pairs", None)
        for pr in (own(direction) or ()) if own is not None else ():
            if isinstance(pr, LossPair):
                L, p = pr.atom_arrays()
                a = np.abs(L)
                keep = (0.0 < a) & (a < math.inf)              # (an atom at +-inf sits on no grid)
                ls.append(a[keep])
                ws.append(k * p[keep] * a[keep])               # (far atoms decide eps most)
    absl = np.concatenate(ls) if ls else np.zeros(0)
    if not absl.size:
        return None
    # the atoms grouped by |loss| to 12 decimals, each group's weight summed in the atoms' order, named
    # by its last atom's |loss|; the heaviest group, the first met among equals.  The keys are Python's
    # correctly rounded decimals, as the grid always took them; numpy's (x 1e12, rint, / 1e12) differ near a
    # half-way point and could pick another anchor (a certified bracket still, a last digit apart): numpy's only
    # past _PYTHON_KEYS atoms (a discrete Gaussian of sigma above ~800, whose numpy scalars were always rounded
    # so); from 1e4 up a double has no 12th decimal, the key is the |loss| itself (and 1e12 |loss| cannot overflow)
    if absl.size <= _PYTHON_KEYS:
        keys = np.array([round(v, 12) for v in absl.tolist()])
    else:
        keys = np.where(absl < 1e4, np.round(np.minimum(absl, 1e4), 12), absl)
    keys, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    weight = np.bincount(inverse, weights=np.concatenate(ws), minlength=keys.size)
    last = np.zeros(keys.size, dtype=np.int64)
    np.maximum.at(last, inverse, np.arange(inverse.size))
    named = absl[last]
    heaviest = np.flatnonzero(weight == weight.max())
    a = float(named[heaviest[np.argmin(first[heaviest])]])
    # a lattice (discrete Laplace: a(2x - s); randomized response: 0, +-eps): its smallest atom, where
    # the heaviest is a multiple of it, puts every atom of the lattice on the grid
    u = float(named.min())
    ratio = a / u
    if math.isfinite(ratio) and abs(ratio - round(ratio)) <= 1e-9 * ratio:
        r = named / u
        if bool(np.all(np.abs(r - np.round(r)) <= 1e-9 * r)):
            a = u
    return a
