"""Privacy-loss distributions (PLD) with a certified two-sided bracket on ``eps(delta)``.

Every event the papers use is a Gaussian release, possibly on a subsample.  In units of its
noise multiplier ``z`` (noise std / L2 sensitivity) each step has a *dominating pair* ``(P, Q)``
of one-dimensional Gaussian mixtures (all with std ``z``); its privacy loss ``L = log(dP/dQ)``
under ``P`` and the hockey-stick profile ``delta(eps) = E_P[(1 - e^(eps - L))_+]`` describe the
step completely (Dong, Roth & Su 2019; Zhu, Dong & Wang 2022).  Composition adds independent
losses (the profile of a composition is ``E[delta_A(eps - L_B)]``, monotone in each factor).

Dominating pairs (``N(m) = N(m, z^2)``):

* ``GaussianEvent`` (full batch): ``(N(1), N(0))`` -- Balle & Wang 2018.  Symmetric.
* ``PoissonSampledGaussianEvent`` (add/remove, probability ``q``): the *remove* pair
  ``((1-q) N(0) + q N(1), N(0))`` and the *add* pair ``(N(0), (1-q) N(0) + q N(1))``
  (Zhu, Dong & Wang 2022, Sec. 5, Poisson subsampling).  A neighbouring pair of datasets fixes
  the direction for the whole run, so each direction is composed on its own and the worse one
  is reported -- composing only one direction under-reports (Lebeda, Regehr, Kamath & Steinke
  2024, Sec. 4).
* ``WORSampledGaussianEvent`` (fixed size ``b`` of ``n`` without replacement, replace-one,
  ``gamma = b/n``): ``(gamma P + (1-gamma) Q, Q)`` with ``(P, Q) = (N(1), N(0))`` dominates the
  subsampled Gaussian under substitution (Zhu, Dong & Wang 2022, Sec. 5, sampling without
  replacement; the (eps, delta) form is Balle, Barthe & Gaboardi 2018, Thm 10).  The
  convention: dpcalib's noise multiplier of this event is noise std / *replace-one* sensitivity
  (``2C`` for a sum of clipped terms), which is the shift ``1`` of the pair.  The pair is
  attained: with every other record's contribution at ``-C`` and the replaced one going from
  ``+C`` to ``-C`` the release is exactly ``((1-gamma) N(-bC) + gamma N(-bC + 2C), N(-bC))``
  (tests/test_pld.py integrates that mechanism batch by batch).  Under replace-one the
  *direction* can change from step to step (it depends on the other records' clipped values,
  which the model chooses adaptively), so each step is charged ``max`` of the two directions'
  profiles -- a convex profile, hence a valid one -- before composing.

Discretisation (grid ``h``; losses at ``i*h``):

* **upper** -- each step's loss is rounded to the two neighbouring grid points at random with
  the probability that keeps ``E_P[e^-L]`` (the ``Q``-mass): this is exactly connect-the-dots
  (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022); its profile is the chord of the true
  convex profile between grid points, hence pointwise larger: a dominating pair.  Mass above
  the grid is charged as infinite loss, mass below is rounded up to the lowest grid point.
* **lower** -- the rounding error ``e = L' - L`` of a step has, given ``L``, range exactly
  ``h`` and mean in ``[0, g(h)]`` with ``g(h) = h/(1-e^-h) - 1 - log(h/(1-e^-h)) ~ h^2/8``.
  Hoeffding's inequality over the ``K`` steps: ``sum e <= t + K g(h)`` except with probability
  ``p = exp(-2 t^2 / (K h^2))``, so ``delta(eps) >= delta'(eps + t + K g) - p - (tail mass)``
  (the argument of the PRV accountant, Gopi, Lee & Wutschitz 2021, Thm 5.1, with one-sided
  rounding errors).  Both bounds use the same discrete distribution, so the bracket's width is
  about ``2 t``, i.e. ``O(h sqrt(K))``, not ``O(h K)``.
* **composition** -- one FFT: each step's pmf is folded onto a cyclic grid of ``N`` points,
  the transforms are raised to the counts and multiplied.  ``N`` covers a window
  ``[w_lo, w_hi]`` outside which the composed (discrete) loss has mass at most ``alpha`` on
  each side by a Chernoff bound computed from the discrete steps' moment generating
  functions; the wrapped-around mass (at most ``2 alpha``) is charged to the upper bound and
  subtracted from the lower one.  When delta is small the composition is repeated with the
  pmfs tilted by ``e^(lam L)`` toward the delta-quantile, so that the FFT's round-off stays
  relative to delta (down to delta = 1e-300); the round-off is bounded per bin by a
  floating-point error model (see :func:`_compose`) and added to / taken from the masses.

The grid is refined until ``upper - lower <= max(rtol * upper, atol)`` or the memory cap is reached (then
the best certified answer is returned with a note).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import fft as sfft
from scipy import special

from . import _validate
from .events import GaussianEvent, PoissonSampledGaussianEvent, WORSampledGaussianEvent

__all__ = ["EpsilonBracket", "pld_epsilon", "pld_epsilon_at", "pld_delta"]

_EVENTS = (GaussianEvent, PoissonSampledGaussianEvent, WORSampledGaussianEvent)
#: default memory cap of one composition (bytes)
MEMORY_CAP = 1 << 30
#: smallest delta the PLD answers (the tilted composition keeps every charge relative to
#: delta; below this, probabilities leave the double-precision range)
MIN_DELTA = 1e-300
#: default relative width of a bracket (``upper - lower <= max(RTOL * upper, atol)``)
RTOL = 3e-5

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
    """``eps(delta)`` of a composition: ``lower <= true eps <= upper`` (``upper`` is certified)."""

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


@dataclass(frozen=True)
class _Pair:
    """``P = sum w N(m, z^2)`` vs ``Q = sum w N(m, z^2)``; loss monotone in x.

    ``kind``: "gauss" (P=N(1), Q=N(0)), "remove" (P=mix, Q=N(0)), "add" (P=N(0), Q=mix).
    """

    kind: str
    z: float
    q: float = 1.0

    @property
    def p_comps(self):
        if self.kind == "gauss":
            return ((1.0, 1.0),)
        if self.kind == "remove":
            return ((1.0 - self.q, 0.0), (self.q, 1.0))
        return ((1.0, 0.0),)

    @property
    def q_comps(self):
        if self.kind == "add":
            return ((1.0 - self.q, 0.0), (self.q, 1.0))
        return ((1.0, 0.0),)

    def loss(self, x):
        """Privacy loss at x."""
        x = np.asarray(x, dtype=float)
        s = (x - 0.5) / (self.z * self.z)
        if self.kind == "gauss":
            return s
        with np.errstate(divide="ignore"):
            mix = np.logaddexp(math.log1p(-self.q) if self.q < 1 else -np.inf, math.log(self.q) + s)
        return mix if self.kind == "remove" else -mix

    def _x_of_mix(self, ell):
        """x with log(1 - q + q e^s(x)) = ell (-inf where ell <= log(1-q))."""
        ell = np.asarray(ell, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inner = np.log(np.maximum(np.expm1(ell) + self.q, 0.0)) - math.log(self.q)
        return self.z * self.z * inner + 0.5

    def mass(self, comps, lo, hi):
        """Mixture mass of lo < x <= hi."""
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

    def bins(self, eps_edges):
        """P and Q masses of ``L`` in (e_i, e_(i+1)], plus P(L <= e_0) and P(L > e_last)."""
        e = np.asarray(eps_edges, dtype=float)
        if self.kind == "add":   # L > e  <=>  x < x_mix(-e): the edges decrease, bins run right to left
            x = self._x_of_mix(-e)[::-1]
            below, above = (x[-1], np.inf), (-np.inf, x[0])
            memo = {}
            P = self._edge_mass(self.p_comps, x, memo)[::-1]
            Q = self._edge_mass(self.q_comps, x, memo)[::-1]
        else:
            x = self.z * self.z * e + 0.5 if self.kind == "gauss" else self._x_of_mix(e)
            below, above = (-np.inf, x[0]), (x[-1], np.inf)
            memo = {}
            P = self._edge_mass(self.p_comps, x, memo)
            Q = self._edge_mass(self.q_comps, x, memo)
        p_below = float(self.mass(self.p_comps, *below))
        p_above = float(self.mass(self.p_comps, *above))
        return np.asarray(P, dtype=float), np.asarray(Q, dtype=float), p_below, p_above

    def loss_range(self, tau):
        """Losses beyond which each tail of P has mass at most tau."""
        r = float(-special.ndtri(max(tau, 1e-300))) * self.z
        ms = [m for _, m in self.p_comps]
        a, b = self.loss(min(ms) - r), self.loss(max(ms) + r)
        lo, hi = (a, b) if self.kind != "add" else (b, a)
        if self.kind == "remove":
            lo = max(lo, math.log1p(-self.q) if self.q < 1 else -np.inf)
        if self.kind == "add":
            hi = min(hi, -math.log1p(-self.q) if self.q < 1 else np.inf)
        return float(lo), float(hi)


@dataclass
class _Step:
    """A discretised step: finite masses at (i0 + j) * h, an infinite-loss mass, tail masses."""

    i0: int
    mass: np.ndarray
    inf: float
    bad: float     # mass of the true loss outside the grid (rounded up or sent to infinity)
    count: int
    # log E[e^(l L)] over the finite atoms at +-_LAMBDAS, computed once (a bracket needs them
    # for every composition and re-composition of the step)
    lmgf: tuple | None = field(default=None, repr=False, compare=False)


class _OverCap(Exception):
    pass


@dataclass
class _Bins:
    """True masses of one step's loss on the bins ``(j h, (j+1) h]``, ``j = i0 .. i0+n-1``."""

    i0: int
    P: np.ndarray
    Q: np.ndarray
    p_below: float    # P(L <= i0 h)
    p_above: float    # P(L > (i0 + n) h)


#: the last few steps' bins (a bracket's upper and lower steps, and a calibration's report
#: after its search, discretise the same step on the same grid); at most this many bytes
_BINS_BYTES = 128 << 20
_BINS: dict = {}


def _bins_of(pair: _Pair, h: float, tau: float, cap_bytes: int) -> _Bins:
    lo, hi = pair.loss_range(tau)
    if 10 * 8 * (hi - lo) / h > cap_bytes:
        raise _OverCap
    key = (pair, h, tau)
    if key in _BINS:
        _BINS[key] = _BINS.pop(key)                # most recently used last
        return _BINS[key]
    i0 = math.floor(lo / h) - 1
    i1 = math.ceil(hi / h) + 1
    edges = np.arange(i0, i1 + 1, dtype=float) * h
    P, Q, p_below, p_above = pair.bins(edges)
    b = _Bins(i0, P, Q, p_below, p_above)        # never modified by its users
    size = P.nbytes + Q.nbytes
    if size <= _BINS_BYTES // 2:
        while _BINS and size + sum(v.P.nbytes + v.Q.nbytes for v in _BINS.values()) > _BINS_BYTES:
            _BINS.pop(next(iter(_BINS)))
        _BINS[key] = b
    return b


def _upper_step(b: _Bins, h: float, count: int) -> _Step:
    """Connect-the-dots: each bin's mass is split between its two grid points so that the
    ``Q``-mass is kept (pessimistic; the tails go to the lowest grid point and to +infinity)."""
    i0, P, Q = b.i0, b.P, b.Q
    # r = (P - e^(jh) Q) / (1 - e^-h), in log space (e^(jh) overflows for large losses); a bin
    # whose Q-mass underflowed is sent up whole (its likelihood ratio is taken as e^((j+1)h))
    with np.errstate(divide="ignore", invalid="ignore"):
        loglam = np.log(P) - np.log(Q) - (i0 + np.arange(P.size)) * h
    loglam = np.where(P > 0.0, np.where(Q > 0.0, np.nan_to_num(loglam, nan=h, posinf=h), h), 0.0)
    loglam = np.clip(loglam, 0.0, h)
    r = P * (np.expm1(loglam) / math.expm1(h)) * np.exp(h - loglam)
    r = np.clip(r, 0.0, P)
    m = np.zeros(P.size + 1)
    m[:-1] += P - r
    m[1:] += r
    m[0] += b.p_below
    return _Step(i0, m, b.p_above, b.p_below + b.p_above, count)


def _rounded_step(pair: _Pair, h: float, tau: float, count: int, cap_bytes: int) -> _Step:
    return _upper_step(_bins_of(pair, h, tau, cap_bytes), h, count)


def _lower_step(b: _Bins, h: float, count: int) -> _Step | None:
    """A grid measure whose hockey-stick profile lies below the step's true profile.

    Write the profile as a function of ``t = e^eps``: ``f(t) = E_P[(1 - t e^-L)_+]``, convex
    and decreasing, with right derivative ``-Q(L > log t)``.  Connect-the-dots interpolates
    ``f`` at the grid points ``t_j = e^(jh)`` (a chord: above ``f``).  Here every grid value is
    lowered by ``d_j = max(gap_(j-1), gap_j)`` (at the bottom: :func:`_bottom`), where ``gap_j`` bounds how far the chord of
    ``f`` on ``[t_j, t_(j+1)]`` rises above ``f``: ``f`` lies above both tangents at the ends
    (slopes ``a = -Q(L > jh)``, ``b = -Q(L > (j+1)h)``), so with the chord slope ``s``,
    ``chord - f <= (s - a)(b - s) / (b - a) * (t_(j+1) - t_j)``.  The piecewise-linear
    interpolation of the lowered values is then below ``f`` on every segment; it is the
    profile of the grid measure whose atom at ``jh`` carries ``t_j`` times the slope increase
    at ``t_j`` (the tails beyond the grid are dropped, and the top is closed at the highest grid
    point ``J`` where the profile still exceeds the last gap).  Negative atoms (where lowering
    broke convexity, only in steep tails) are set to 0 and paid for by removing as much mass
    from the atoms just above them: an atom at a higher loss adds more to the profile
    everywhere, so the profile only goes down.

    Why a pointwise-lower profile is enough: the profile of a composition is
    ``int int (1 - e^(eps - l - l'))_+ dmu_A(l) dmu_B(l')`` (mu: the losses' distributions
    under P), symmetric and monotone in each factor's profile, so composing measures whose
    profiles are below the true ones gives a profile below the true composition -- a lower
    bound on delta(eps), hence on eps(delta).  The error is ``O(h^2)`` per step (the chord's
    gap), like connect-the-dots' own, so the bracket's width is ``O(K h^2)``.  Returns None
    if the repair cannot be paid for (never seen; the caller keeps its other lower bound).
    """
    P = b.P
    Q = b.Q
    n = P.size
    if n == 0:
        return None
    eh1 = math.expm1(h)
    with np.errstate(divide="ignore", invalid="ignore"):
        loglam = np.log(P) - np.log(Q) - (b.i0 + np.arange(n)) * h
    ok = (P > 0.0) & (Q > 0.0) & np.isfinite(loglam)
    Pe = np.where(ok, P, 0.0)                     # bins with an underflowed Q are dropped
    loglam = np.where(ok, np.clip(loglam, 0.0, h), 0.0)
    frac = np.expm1(loglam) / eh1                # r_j / Q_j in [0, 1]
    inv_lam = np.exp(-loglam)
    rho = Pe * frac * math.exp(h) * inv_lam      # P-mass connect-the-dots sends up
    gap = Pe * eh1 * frac * (1.0 - frac) * inv_lam
    # f at the grid points (tails dropped), from non-negative terms only:
    # f_j = (1 - e^-h)(rho_j + B_(j+1)) + f_(j+1),  B_j = t_j Q(L > jh) = P_j/lam_j + e^-h B_(j+1)
    Bq = np.zeros(n + 1)
    Bq[:-1] = _decayed_suffix(Pe * inv_lam, h)
    terms = -math.expm1(-h) * (rho + Bq[1:])
    f = np.zeros(n + 1)
    f[:-1] = np.cumsum(terms[::-1])[::-1]
    gp = np.zeros(n + 2)
    gp[1:-1] = gap                                # gp[i] = gap_(i-1)
    plain = np.maximum(gp[:-1], gp[1:])           # d_i = max(gap_(i-1), gap_i), i = 0..n
    # the bottom rule first; where its polyline cannot be made a measure, the plain rule.  (A
    # bin holding nearly all the mass at its lower end -- an atom on a grid point, see
    # :func:`_aligned_grid` -- has frac ~ 0 and gap ~ 0: the bottom rule, which keeps its lower
    # vertex in place, must then lower the upper one by ~h times that mass, a concave kink the
    # thin tail above cannot repay; the plain rule lowers both by the gap, ~0.)
    for bottom in (True, False):
        d = plain.copy()
        if bottom:
            _bottom(d, gap, frac, Pe * eh1 * inv_lam)
        # close at the highest J with f_J >= gap_(J-1) (the last segment ends at 0 below f)
        # and f_(J-1) >= d_(J-1) (the lowered value there is not negative); a convex decreasing
        # profile that reaches 0 stays 0, so J is at most the first grid point where f < d
        cond = (f[1:] >= gp[1:-1]) & (f[:-1] >= d[:-1])
        below = np.nonzero(f < d)[0]
        if below.size:
            cond[int(below[0]):] = False
        okJ = np.nonzero(cond)[0] + 1
        # the highest admissible J first; if the repair of negative atoms cannot be paid for
        # (a steep tail just below J), close lower down
        for J in okJ[::-1][:4]:
            m, fail = _lower_masses(Pe, rho, d, f, int(J), h)
            if m is None and fail < J - 64:
                break               # a kink far below the top: closing lower down does not help
            if m is not None:
                # below its lowest atom the measure's profile is a line below f's (d_0 >= 0):
                # scaled down by the round-off of f's sums (n terms), so that it stays below f
                # in floats
                m *= 1.0 - (n + 16) * 2.0 ** -52
                return _Step(b.i0, m, 0.0, 0.0, count)
    return None


#: at most this many vertices at the bottom of a lower step are lowered by the weighted rule
_BOTTOM_STEPS = 64


def _bottom(d, gap, frac, span) -> None:
    """Lower the bottom vertices of :func:`_lower_step` as little as the segments allow (in place).

    The segment ``[t_j, t_(j+1)]`` of the lowered polyline lies below ``f`` as soon as it lies
    below the larger of ``f``'s tangents at its ends, i.e. at their intersection, which sits
    at the fraction ``frac_j`` of the segment: ``(1 - frac_j) d_j + frac_j d_(j+1) >= gap_j``.
    ``d = max(gap_(j-1), gap_j)`` meets it with room, but a vertex lowered at the bottom of the
    measure costs far more than one inside it: below its lowest atom a measure's profile is the
    line ``mass - t Q``, so a lowered bottom vertex tilts that line (more ``Q``-mass) and the
    deficit spreads over every ``t`` below it -- in a composition, a shift of the whole loss
    distribution, where a deficit at an inner vertex costs ``O(h)`` times less.  A hard edge
    of the loss (Poisson, remove direction: ``L >= log(1 - q)``, with much mass in its first
    bin) made that the larger part of the lower end's error.  So ``d_0 = 0`` and the vertices
    above take the least the segments need, ``d_(j+1) = (gap_j - (1 - frac_j) d_j) / frac_j``
    (``gap_j / frac_j = span_j (1 - frac_j)`` is finite as ``frac_j -> 0``), until that is at
    least ``gap_(j+1)``; from there ``max(gap_(j-1), gap_j)`` holds every segment above again
    (``d_(j+1) >= gap_(j+1)`` covers segment ``j+1`` with ``d_(j+2) >= gap_(j+1)``).
    """
    n = gap.size
    dv = 0.0
    d[0] = 0.0
    for j in range(min(n, _BOTTOM_STEPS)):
        f = float(frac[j])
        req = 0.0
        if gap[j] > 0.0:                        # then 0 < frac_j < 1; a relative margin for round-off
            req = max(0.0, float(span[j]) * (1.0 - f) - (1.0 - f) / f * dv) * (1.0 + 1e-9)
        above = float(gap[j + 1]) if j + 1 < n else 0.0
        if req >= above or j + 1 == min(n, _BOTTOM_STEPS):
            d[j + 1] = max(req, above)
            return
        d[j + 1] = dv = req


def _convexify(m, h, max_pools: int = 4096) -> int | None:
    """Replace the lowered polyline by its greatest convex minorant where it is not convex
    (in place).

    ``m_k`` is ``t_k`` times the slope increase at grid point ``k``; a negative one is a
    concave kink.  Pool-adjacent-violators on the segment slopes (weights ``t_(k+1) - t_k``):
    a block of segments from vertex ``a`` to ``b`` is replaced by the chord, whose slope is the
    weighted mean of theirs -- the minorant lies below the polyline, hence below ``f``.  All
    slopes are taken relative to the block's first one (``t_a (s_i - s_a) = sum_(a<k<=i)
    m_k e^((a-k) h)``) so that tiny tail masses keep their precision.  The end vertices keep
    their kinks; a negative kink at vertex 0 is left to the caller.  Returns None when done, or
    the vertex where it gave up (``m`` unusable) when more than ``max_pools`` concave kinks, a
    block of more than ``_MAX_BLOCK`` segments or too much pooling work would be needed: the
    lower end then comes from the other bound, never from a long Python loop.
    """
    J = m.size - 1
    work = steps = 0
    negs = np.nonzero(m[1:] < 0.0)[0] + 1
    if negs.size > max_pools:
        return int(negs[0])
    done = 0                                      # vertices below this are settled
    for j in negs:                                # pooling only leaves negative kinks at 0 or J
        j = int(j)
        if j < done or m[j] >= 0.0:
            continue
        a, b = j - 1, j + 1                       # pool the two segments around vertex j
        while True:
            work += b - a
            steps += 1
            b = min(b, J)
            if steps > 5 * max_pools or work > 5000 * max_pools or b - a > _MAX_BLOCK:
                return j
            k = np.arange(a + 1, b + 1)
            rel = np.cumsum(m[a + 1:b + 1] * np.exp((a - k) * h))   # t_a (s_i - s_a), i = a+1..b
            shat = np.concatenate(([0.0], rel[:-1]))                 # segments a..b-1
            w = np.exp((np.arange(a, b) - a) * h)                    # segment widths / (t_a (e^h - 1))
            pooled = float(np.sum(shat * w) / np.sum(w))
            new_a = m[a] + pooled
            new_b = math.exp((b - a) * h) * (rel[-1] - pooled)
            if new_a < 0.0 and a > 0:
                a -= 1
                continue
            if new_b < 0.0 and b < J:
                b += 1
                continue
            m[a] = new_a
            m[a + 1:b] = 0.0
            m[b] = new_b
            break
        done = b
    return None


#: the longest block :func:`_convexify` pools (the longest seen in the benchmark settings is
#: ~1300 segments); a concave kink that needs more -- an atom's chord gap at the bottom of a
#: step, with only a thin tail above to absorb it -- gives a poor lower step anyway, and a
#: block grown one segment at a time costs O(length^2): it used to take 0.5 s to give up
_MAX_BLOCK = 2048


def _lower_masses(Pe, rho, d, f, J, h):
    """``(atoms, None)`` of :func:`_lower_step` closed at grid index ``J``, or ``(None, j)`` if
    the repair of the negative atoms from vertex ``j`` on cannot be paid for."""
    eh1 = math.expm1(h)
    d = d[:J + 1].copy()
    d[J] = f[J]                                   # the profile is 0 from t_J on
    m = np.zeros(J + 1)
    m[:J] = Pe[:J] - rho[:J]
    m[1:J] += rho[:J - 1]
    corr = np.diff(d)                             # d_(i+1) - d_i, i = 0..J-1
    m[:J] -= corr / eh1
    m[1:J] += math.exp(h) * corr[:J - 1] / eh1
    m[J] = math.exp(h) * (f[J - 1] - d[J - 1]) / eh1
    if np.any(m[1:] < 0.0):
        fail = _convexify(m, h)
        if fail is not None:
            return None, fail
    neg = np.nonzero(m < 0.0)[0]
    if neg.size:
        debt = 0.0
        i = int(neg[0])
        while i <= J:
            x = m[i]
            if x < 0.0:
                debt -= x
                m[i] = 0.0
            elif debt > 0.0:
                pay = min(debt, x)
                m[i] = x - pay
                debt -= pay
            if debt == 0.0:
                nxt = neg[neg > i]
                if nxt.size == 0:
                    break
                i = int(nxt[0])
                continue
            i += 1
        if debt > 0.0:
            return None, int(neg[0])
    return m, None


def _profile(m: np.ndarray, h: float) -> np.ndarray:
    """delta at every grid point of the finite masses m (without infinite mass)."""
    A = np.cumsum(m[::-1])[::-1]
    B = _decayed_suffix(m, h)
    # delta(e_j) = sum_{s>j} m_s (1 - e^{(j-s)h}) = A_{j+1} - e^{-h} B_{j+1}
    out = np.zeros_like(m)
    out[:-1] = A[1:] - math.exp(-h) * B[1:]
    return out


def _symmetrised(a: _Step, b: _Step, h: float) -> _Step:
    """The connect-the-dots step of the pair whose profile is ``max(profile_a, profile_b)``.

    ``a`` is the remove pair ``(M, Q)``, ``b`` the add pair ``(Q, M)`` with ``M = gamma P +
    (1 - gamma) Q`` and ``(P, Q) = (N(1), N(0))``.

    *For eps >= 0 the remove profile is the larger.*  With ``t = e^eps >= 1`` and
    ``c = 1 - t (1 - gamma)`` (if ``c <= 0`` the add profile is 0): by the reflection
    ``x -> 1 - x``, which swaps P and Q, ``H_t(Q || M) = sup_S c P(S) - t gamma Q(S)``, attained
    on ``S = {p/q > t gamma / c}``, a set with ``P(S) >= Q(S)`` since the threshold is >= 1 when
    ``t >= 1``.  On that S, ``H_t(M || Q) >= gamma P(S) - (t - 1 + gamma) Q(S)``, which exceeds
    ``c P(S) - t gamma Q(S)`` by ``(t - 1)(1 - gamma)(P(S) - Q(S)) >= 0``.
    The profiles are tied by ``delta_a(eps) = 1 - e^eps + e^eps delta_b(-eps)``, so for
    ``eps <= 0`` the add profile is the larger, and both equal the total variation at 0.

    The maximum is therefore a's losses above 0, b's losses below 0 and an atom at 0 carrying
    the remaining mass -- built from the two rounded steps' own masses (connect-the-dots keeps
    each profile exact at grid points), with no numerical differentiation (differencing
    profiles loses ~1e-16/h of mass per bin).  The ordering is checked on the grid as a guard
    against a programming error (``RuntimeError`` beyond float noise).
    """
    i0 = min(a.i0, b.i0, -1)
    i1 = max(a.i0 + a.mass.size, b.i0 + b.mass.size, 2)
    ma = np.zeros(i1 - i0)
    mb = np.zeros(i1 - i0)
    ma[a.i0 - i0:a.i0 - i0 + a.mass.size] = a.mass
    mb[b.i0 - i0:b.i0 - i0 + b.mass.size] = b.mass
    j0 = -i0                                   # index of the loss 0
    Da = _profile(ma, h) + a.inf
    Db = _profile(mb, h) + b.inf
    # float noise, and the tails each discretisation charges differently (as +infinity)
    noise = 1e-9 + 64 * ma.size * np.finfo(float).eps + 2.0 * (a.bad + b.bad + a.inf + b.inf)
    if float(np.max(Db[j0:] - Da[j0:])) > noise:
        raise RuntimeError("the add profile exceeds the remove profile at some eps >= 0 "
                           "(a programming error: please report it)")
    m = np.zeros(i1 - i0)
    m[j0 + 1:] = ma[j0 + 1:]
    m[:j0] = mb[:j0]
    m[j0] = max(0.0, 1.0 - a.inf - float(np.sum(m[j0 + 1:])) - float(np.sum(m[:j0])))
    return _Step(i0, m, a.inf, a.bad + b.bad, a.count)


def _symmetrised_bins(r: _Bins, a: _Bins) -> _Bins:
    """True bins of the pair whose profile is ``max`` of the remove pair ``r`` and the add pair
    ``a`` (see :func:`_symmetrised`): ``r``'s losses above 0, ``a``'s below 0, and an atom at 0
    (loss 0: equal P- and Q-mass) in the bin ``(-h, 0]``."""
    assert r.i0 <= 0 and a.i0 + a.P.size >= 0
    i0 = min(r.i0, a.i0, -1)
    i1 = max(r.i0 + r.P.size, a.i0 + a.P.size, 1)
    P = np.zeros(i1 - i0)
    Q = np.zeros(i1 - i0)
    j0 = -i0                                       # index of the bin (0, h]
    P[j0:r.i0 + r.P.size - i0] = r.P[-r.i0:]
    Q[j0:r.i0 + r.P.size - i0] = r.Q[-r.i0:]
    na = min(a.P.size, -a.i0)                      # a's bins below 0
    P[a.i0 - i0:a.i0 - i0 + na] = a.P[:na]
    Q[a.i0 - i0:a.i0 - i0 + na] = a.Q[:na]
    atom = max(0.0, 1.0 - float(np.sum(P)) - r.p_above - a.p_below)
    P[j0 - 1] += atom
    Q[j0 - 1] += atom
    return _Bins(i0, P, Q, a.p_below, r.p_above)


def _steps(events, h, tau, direction, cap, lower=False):
    """The discretised steps: upper (connect-the-dots) and, with ``lower``, lower steps (None
    in the list where the lower construction failed)."""
    ups, los = [], []
    for ev, k in events:
        z = ev.noise_multiplier
        if isinstance(ev, GaussianEvent):
            b = _bins_of(_Pair("gauss", z), h, tau, cap)
            ups.append(_upper_step(b, h, k))
        elif isinstance(ev, PoissonSampledGaussianEvent):
            q = ev.sampling_probability
            if q == 0.0:
                continue
            b = _bins_of(_Pair(direction, z, q), h, tau, cap)
            ups.append(_upper_step(b, h, k))
        else:
            g = ev.sampling_ratio
            if g == 0.0:
                continue
            rb = _bins_of(_Pair("remove", z, g), h, tau, cap)
            ab = _bins_of(_Pair("add", z, g), h, tau, cap)
            ups.append(_symmetrised(_upper_step(rb, h, k), _upper_step(ab, h, k), h))
            b = _symmetrised_bins(rb, ab) if lower else None
        if lower:
            los.append(_lower_step(b, h, k))
    return (ups, los) if lower else ups


# -- composition ------------------------------------------------------------------------------

#: the tilts of the Chernoff windows and of the re-tilted compositions: up to 2^20, so that a
#: narrow privacy loss (large noise: per-step spread ~1/z) read at a tiny delta (many spreads
#: out) still gets its optimal tilt ~ eps / variance
_LAMBDAS = 2.0 ** np.arange(-10, 21)


def _log_mgf(step: _Step, h: float, lam: np.ndarray) -> np.ndarray:
    """Upper bounds on ``log E[e^(l L)]`` over the step's finite atoms, for ``l`` in ``lam``.

    ``lam`` is a doubling ladder of one sign (``_LAMBDAS`` or ``-_LAMBDAS``): with ``x = sign *
    L`` and its largest atom ``x_max``, ``v = e^(|l_0| (x - x_max)) <= 1`` takes one exponential
    and each next level is ``v * v`` -- no further exponentials.  After ``k`` squarings ``v``
    errs by at most ``3 * 2^k u`` relative (``<= 4e-7`` for the 31 levels) and the sum by
    ``n u``; a term that underflows loses at most its mass times the smallest normal double.
    Both are covered by the ``1e-8 + 4 * 2^k u`` added to the k-th log and the ``2.3e-308``
    added to the sum, so the result bounds the exact value from above -- all a Chernoff window
    needs.

    Atoms are first pooled in blocks of ``B = floor(0.01 n / count)`` consecutive grid points
    (``n`` the step's grid size), each block's mass put at its largest ``x``: that bounds each
    term from above and moves each end of the composed window out by at most
    ``count * B * h <= 1 %`` of the step's span -- while the sums cost ``B`` times less.
    """
    a = np.abs(lam)
    if a.size > 1 and not np.array_equal(a[1:], 2.0 * a[:-1]):
        raise ValueError("lam must be a doubling ladder")
    sign = 1.0 if lam[0] > 0 else -1.0
    mass = np.maximum(step.mass, 0.0)
    n = mass.size
    B = int(0.01 * n / max(step.count, 1))
    if B > 1:                                   # pool blocks of B grid points (see above)
        nb = -(-n // B)
        mass = np.concatenate((mass, np.zeros(nb * B - n))).reshape(nb, B).sum(axis=1)
        first = np.arange(nb) * B               # a block's grid indices: first .. first + B - 1
        idx = first + (B - 1) if sign > 0 else first
    else:
        idx = np.arange(n)
    pos = np.nonzero(mass > 0.0)[0]
    if not pos.size:
        return np.full(lam.size, -np.inf)
    m = mass[pos]
    x = sign * (step.i0 + idx[pos]) * h
    xm = float(np.max(x))
    v = np.exp(a[0] * (x - xm))
    out = np.empty(lam.size)
    prod = np.empty_like(v)
    for j in range(lam.size):
        if j:
            np.multiply(v, v, out=v)
            if j % 4 == 0:                      # drop the terms that underflowed (they stay 0)
                keep = v > 0.0
                if np.count_nonzero(keep) < v.size // 2:
                    v, m = v[keep], m[keep]
                    prod = np.empty_like(v)
        # (a multiply and numpy's pairwise sum, not np.dot: OpenBLAS's threaded dot costs more
        # in synchronisation than it saves on these sizes, and keeps a second core spinning)
        np.multiply(m, v, out=prod)
        tot = float(prod.sum())
        out[j] = a[j] * xm + math.log(tot + 2.3e-308) + 1e-8 + 4.0 * 2.0 ** j * 2.0 ** -53
    return out


def _window(steps, h, log_alpha, lam=0.0, logm=None, r_min=None):
    """Grid indices [lo, hi] of the composed finite loss for an FFT tilted by ``e^(lam L)``.

    Below ``lo`` the mass is at most ``alpha`` (Chernoff).  Mass above ``hi`` wraps around to
    the window's low end, where un-tilting multiplies it by up to ``e^(lam (L - r h))`` on a bin
    ``r >= r_min`` (the only bins the caller reads; ``r_min = lo`` by default); ``hi``
    is chosen so that even that magnified mass is at most ``alpha``:
    ``E[e^(lam (L - r h)); L > x] <= exp(Lambda(l') - (l' - lam) x - lam r h)`` for ``l' > lam``.
    Tilted with ``r_min`` given, ``lo`` is then raised as far as the mass below it, wrapped
    to the top and damped there by un-tilting, stays at most ``alpha`` (never above ``r_min``).
    """
    up, dn = logm if logm is not None else _log_mgfs(steps, h)
    w_lo = float(np.max(-(dn - log_alpha) / _LAMBDAS))
    lo_all = sum(s.count * s.i0 for s in steps)
    hi_all = sum(s.count * (s.i0 + s.mass.size - 1) for s in steps)
    lo = max(lo_all, math.floor(w_lo / h) - 1)
    ok = _LAMBDAS > lam
    base = lo if r_min is None else max(lo, r_min)
    w_hi = float(np.min((up[ok] - lam * base * h - log_alpha) / (_LAMBDAS[ok] - lam)))
    hi = min(hi_all, math.ceil(w_hi / h) + 1)
    if lam > 0.0 and r_min is not None and hi > base:
        # tilted, reading only bins from r_min up: mass at a loss L below the window wraps to a
        # bin p >= L + N h (N h >= (hi + 1 - lo') h, the window's span), where un-tilting
        # multiplies the tilted value m(L) e^(lam L) / Z by Z e^(-lam p): it adds at most
        # P(L < lo' h) e^(-lam (hi + 1 - lo') h) there, at most alpha when (Chernoff, l' > 0)
        # Lambda(-l') + l' x - lam ((hi + 1) h - x) <= log alpha at x = lo' h.  So the window
        # may start that high (not above r_min): the bins below were never read
        x = float(np.max((log_alpha - dn + lam * (hi + 1) * h) / (_LAMBDAS + lam)))
        lo = max(lo, min(base, math.floor(x / h) - 1))
    return lo, max(hi, lo)


def _log_mgfs(steps, h):
    """log E[e^(l L)] of the composed discrete loss for l in +-_LAMBDAS (finite atoms only)."""
    for s in steps:
        if s.lmgf is None:
            s.lmgf = (_log_mgf(s, h, _LAMBDAS), _log_mgf(s, h, -_LAMBDAS))
    up = sum(s.count * s.lmgf[0] for s in steps)
    dn = sum(s.count * s.lmgf[1] for s in steps)
    return up, dn


def _tilt(up, log_delta):
    """The Chernoff-optimal tilt for the delta-quantile of the composed loss (0 if none helps).

    The best of the doubling ladder, then refined between its neighbours by the quadratic model
    ``Lambda(l) = a l + b l^2`` through the ladder's values at ``l`` and ``2 l``, whose
    Chernoff optimum is ``sqrt(log(1/delta) / b)`` (exact for a Gaussian loss).  A factor 2 off
    puts the tilted bulk many spreads away from the quantile for a narrow loss at a tiny delta
    (z = 100, 10 steps, delta = 1e-120: 9 spreads, below the FFT's round-off); any tilt gives
    a valid bracket, so the model only has to be good, not certain."""
    cand = _LAMBDAS[_LAMBDAS <= _LAMBDAS[-3]]
    x = (up[:cand.size] - log_delta) / cand
    i = int(np.argmin(x))
    lam = float(cand[i])
    if i + 1 < up.size and math.isfinite(up[i + 1]) and math.isfinite(up[i]):
        b = (float(up[i + 1]) - 2.0 * float(up[i])) / (2.0 * lam * lam)
        if b > 0.0:
            lam = min(max(math.sqrt(-log_delta / b), 0.5 * lam), 2.0 * lam)
    return lam


@dataclass
class _Composed:
    lo: int            # grid index of mass[0]
    mass: np.ndarray   # composed finite pmf on the window (may hold round-off)
    err: np.ndarray    # per-bin bound on the round-off of ``mass`` (estimate, see _compose)
    inf: float         # composed mass at +infinity
    alias: float       # bound on the wrapped-around mass (both sides)
    bad: float         # total mass of the true losses outside the per-step grids
    count: int         # number of steps K

    @property
    def upper_mass(self):
        return np.clip(self.mass + self.err, 0.0, 1.0)

    @property
    def lower_mass(self):
        return np.clip(self.mass - self.err, 0.0, 1.0)


def _power(t: np.ndarray, log_abs: np.ndarray, c: int) -> np.ndarray:
    """``t ** c`` for Fourier coefficients with ``|t| <= 1``, in polar form.

    ``|t|^c e^(i c arg t)``: its rounding error is at most ``~2 pi c u`` relative (the phase
    ``c arg t`` carries ``c`` times the angle's rounding), inside the ``K u log2 N`` per
    coefficient that :func:`_compose` charges; coefficients whose power is below the smallest
    double (``c log|t| < -745``) are exactly zero, and are not computed (most of them, for the
    narrow spectra of many composed steps).  numpy's complex ``**`` is several times slower.
    """
    if c == 1:
        return t
    out = np.zeros_like(t)
    keep = np.nonzero(c * log_abs > -745.0)[0]
    if keep.size:
        tk = t[keep]
        ph = np.angle(tk) * c
        mag = np.exp(c * log_abs[keep])
        out[keep] = mag * np.cos(ph) + 1j * (mag * np.sin(ph))
    return out


def _cyclic(w: np.ndarray, i0: int, N: int) -> np.ndarray:
    """``w`` (grid indices ``i0 ..``) wrapped onto a cyclic grid of ``N`` points."""
    a = np.zeros(N)
    start = i0 % N
    if w.size <= N - start:
        a[start:start + w.size] = w
    elif w.size <= N:
        k = N - start
        a[start:] = w[:k]
        a[:w.size - k] = w[k:]
    else:
        a = np.bincount((i0 + np.arange(w.size)) % N, weights=w, minlength=N)
    return a


def _compose(steps, h, alpha, cap_bytes, lam=0.0, r_min=None):
    """Compose the steps with one FFT of the pmfs tilted by ``e^(lam L)``.

    Tilting moves the ``delta``-quantile of the composed loss -- the part ``eps(delta)`` is read
    from -- to the bulk of the tilted distribution, so the FFT's round-off, which is relative to
    the largest value, stays relative there after un-tilting.  Each tilted pmf is normalised to
    sum 1 (its powers cannot overflow).  Round-off: every Fourier coefficient then has modulus
    at most 1 and a transform errs by about ``u log2 N`` per coefficient (Higham 2002,
    Sec. 24.1); to first order the product of powers errs by ``K u log2 N prod |t_i|^(c_i - 1)``
    at each frequency, and an output bin by at most the spectrum's mean of that plus the
    inverse transform's own ``u log2 N rms|F|`` -- taken 4 times, or the most negative output
    value if larger.  That per-bin bound is un-tilted bin by bin and added to
    (upper) or taken from (lower) the masses.  It is a floating-point error *model*, not a
    proof; it is checked against exact answers down to delta = 1e-30 in the tests.

    With ``lam > 0`` the bins below ``r_min`` are not resolved (their error is set to 1): the
    caller reads only bins above a known lower bound on eps.  Mass above the window wraps
    around; it is magnified by un-tilting at most by ``e^(lam (L - r_min h))`` on the bins
    read, and the window is sized so that this is at most ``alpha`` (:func:`_window`).
    """
    inf = -math.expm1(sum(s.count * math.log1p(-min(s.inf, 1.0)) for s in steps)) if steps else 0.0
    if any(not float(np.sum(s.mass)) > 0.0 for s in steps):   # all of a step's mass is infinite
        K = sum(s.count for s in steps)
        return _Composed(0, np.zeros(1), np.zeros(1), inf, 0.0, sum(s.count * s.bad for s in steps), K), 1
    if len(steps) == 1 and steps[0].count == 1:      # nothing to compose: no FFT, no round-off
        s = steps[0]
        return _Composed(s.i0, s.mass.copy(), np.zeros(s.mass.size), s.inf, 0.0, s.bad, 1), s.mass.size
    logm = _log_mgfs(steps, h)
    lo, hi = _window(steps, h, math.log(alpha), lam, logm, r_min)
    n = hi - lo + 1
    N = sfft.next_fast_len(max(n, 2), real=True)
    if 6 * 8 * N > cap_bytes:
        return None, N
    F = None
    logG = None                            # sum (count - 1) log|t|: bounds the powers' derivative
    big = 0.0                              # log of the un-tilting constant, sum of count * log MGF
    for s in steps:
        if lam == 0.0:                     # no tilt: normalising is one division
            tot = float(s.mass.sum())
            w = s.mass / tot
            big += s.count * math.log(tot)
        else:
            x = (s.i0 + np.arange(s.mass.size)) * h
            with np.errstate(divide="ignore"):
                lw = np.log(s.mass) + lam * x
            mx = float(np.max(lw))
            w = np.exp(lw - mx)
            tot = float(w.sum())
            w /= tot
            big += s.count * (mx + math.log(tot))
        t = sfft.rfft(_cyclic(w, s.i0, N))
        with np.errstate(divide="ignore"):
            lr = np.log(np.abs(t))
        logG = (s.count - 1) * lr if logG is None else logG + (s.count - 1) * lr
        t = _power(t, lr, s.count)
        F = t if F is None else F * t
    # means over the full spectrum (the half spectrum counts twice except its ends)
    g = np.exp(logG)
    ends = [0] if N % 2 else [0, -1]
    mean_G = (2.0 * float(g.sum()) - float(g[ends].sum())) / N
    x = F.view(np.float64)                 # (real and imaginary parts; no BLAS, see _log_mgf)
    sq = 2.0 * float(np.sum(x * x)) - float(np.sum(np.abs(F[ends]) ** 2))
    del x
    rms_F = math.sqrt(max(sq, 0.0) / N)
    del logG, g
    out = sfft.irfft(F, N)
    del F
    start = lo % N                         # the window [lo, hi] on the cyclic grid
    vals = out[start:start + n] if start + n <= N else np.concatenate((out[start:], out[:start + n - N]))
    # every tilted pmf sums to 1, so each coefficient t has |t| <= 1 and errs by at most
    # ~u log2 N; the product of the powers then errs by at most K u log2 N G_k with
    # G_k = prod |t_i|^(c_i - 1) (first order), and the inverse transform adds ~u log2 N |F|;
    # an output bin errs by at most the mean over the spectrum of these (times 4 for safety)
    K_all = sum(s.count for s in steps)
    u = np.finfo(float).eps
    level = max(float(-min(vals.min(), 0.0)),
                4.0 * u * math.log2(N) * (K_all * mean_G + rms_F + 1e-300))
    if lam == 0.0:                         # un-tilting is one constant factor (the total mass)
        scale = math.exp(min(big, 700.0))
        mass = vals * scale
        err = np.full(n, min(level * scale, 1.0))
        if err[0] >= 1.0:
            mass[:] = 0.0                  # unresolved bins: anything in [0, 1]
    else:
        # un-tilting multiplies bin j by e^(big - lam (lo + j) h), decreasing in j: its error
        # bound level * e^(...) is at least 1 on a prefix of the window -- those bins (and, with
        # r_min, the bins below r_min, never read) are unresolved: error 1, mass 0
        # (and where the exponent reaches 700: no overflow below)
        j0 = max(math.floor((big + math.log(level)) / (lam * h)), math.floor((big - 700.0) / (lam * h))) - lo + 1
        if r_min is not None:
            j0 = max(j0, r_min - lo)
        j0 = min(max(j0, 0), n)
        mass = np.zeros(n)
        err = np.ones(n)
        if j0 < n:
            scale = np.exp(big - lam * h * (lo + np.arange(j0, n)))
            np.multiply(vals[j0:], scale, out=mass[j0:])
            np.minimum(level * scale, 1.0, out=err[j0:])
    inf = -math.expm1(sum(s.count * math.log1p(-min(s.inf, 1.0)) for s in steps)) if steps else 0.0
    bad = sum(s.count * s.bad for s in steps)
    K = sum(s.count for s in steps)
    return _Composed(lo, mass, err, inf, 2.0 * alpha, bad, K), N


def _suffix_sums(mass: np.ndarray, lo: int, h: float):
    """A_j = sum_{s>=j} m_s and B_j = sum_{s>=j} m_s e^{(j-s)h} for non-negative masses.

    A is a cumulative sum, B :func:`_decayed_suffix`; both add non-negative terms, so each
    carries a relative rounding error of at most :func:`_suffix_rounding` (``~n u``) --
    relative to the suffix sum itself, hence to the tail delta is read from (:func:`_eps_at`
    charges it).
    """
    A = np.cumsum(mass[::-1])[::-1]
    B = _decayed_suffix(mass, h)
    return A, B


_DECAY_SPAN = 32.0     # e^-h decays by at most e^-32 inside a block of _decayed_suffix
_DECAY_BLOCK = 1 << 16


def _decay_block(n: int, h: float) -> int:
    return max(1, min(n, _DECAY_BLOCK, int(_DECAY_SPAN / h)))


@functools.lru_cache(maxsize=8)
def _decay_weights(h: float):
    """``e^(k h)``, ``e^(-k h)``, ``e^(-(k + 1) h)`` for the offsets ``k`` of the longest block."""
    kh = h * np.arange(_decay_block(_DECAY_BLOCK, h))
    down = np.exp(-kh)
    return np.exp(kh), down, down * math.exp(-h)


def _decayed_suffix(x: np.ndarray, h: float) -> np.ndarray:
    """``B_j = sum_(s >= j) x_s e^((j - s) h)`` for non-negative ``x`` and ``h > 0``.

    The recursion ``B_j = x_j + e^-h B_(j+1)``, vectorised on the reversed array ``y`` (where it
    reads ``C_t = y_t + e^-h C_(t-1)``): within a block of ``L`` points (``L h <= 32``,
    ``L <= 2^16``) ``C_t = e^(-k_t h) sum_(t' <= t) y_t' e^(k_t' h)`` (``k``: the offset in the
    block; the weights stay in ``[1, e^32]``, no overflow), then each block adds the previous
    block's last value times ``e^-((k_t + 1) h)`` (those last values first carried from block to
    block by a doubling scan).  Every term is non-negative; the rounding is bounded by
    :func:`_suffix_rounding`.  (This replaced ``scipy.signal.lfilter``, whose import alone took
    0.6 s of every CLI call; it runs as fast.)
    """
    x = np.asarray(x, dtype=float)
    n = x.size
    if n == 0:
        return x.copy()
    L = _decay_block(n, h)
    up, down, carry = _decay_weights(float(h))
    if L == n:                                    # one block (the usual case)
        y = x[::-1] * up[:n]
        np.cumsum(y, out=y)
        y *= down[:n]
        return y[::-1]
    up, down, carry = up[:L], down[:L], carry[:L]
    nb = -(-n // L)
    X = np.zeros(nb * L)
    X[:n] = x[::-1]
    X = X.reshape(nb, L)
    X *= up
    np.cumsum(X, axis=1, out=X)
    X *= down
    # C at each block's last point: the same recursion with decay e^-(L h) between blocks, by
    # doubling (after the pass with shift s, point i holds the blocks i - 2s + 1 .. i); the
    # weight e^-(s L h) is 0 from s L h > 745 on, and so are all later passes
    last = X[:, -1].copy()
    s = 1
    while s < nb:
        w = math.exp(-s * L * h)
        if w == 0.0:
            break
        last[s:] += w * last[:-s]
        s *= 2
    X[1:] += last[:-1, None] * carry
    return X.reshape(-1)[n - 1::-1]


def _suffix_rounding(n: int, h: float) -> float:
    """Relative rounding error bound of :func:`_decayed_suffix` and of a suffix cumsum of ``n``
    non-negative terms: ``n`` additions; the block weights (``exp`` of an argument of at most
    32, rounded: ``<= 34 u`` each, and three of them per term); per doubling pass of the
    carries a weight (``exp`` of an argument below 746: ``<= 747 u``) and two roundings."""
    nb = -(-n // _decay_block(n, h)) if n else 0
    passes = max(0, nb - 1).bit_length()
    return (n + 2 + 140 + 750 * passes) * float(np.finfo(float).eps)


def _eps_at(mass: np.ndarray, lo: int, h: float, c: float, delta: float, side: int) -> float:
    """Smallest eps with  sum_s mass_s (1 - e^(eps - (lo+s) h))_+ + c <= delta  (may be +-inf).

    ``mass >= 0``.  The suffix sums of non-negative terms carry a relative rounding error of at
    most ``r = _suffix_rounding(n, h)`` (``~n u``); the profile at a grid point, ``A - B``, is
    moved by ``4 r A`` toward the conservative side (``side=+1``: up, for the upper bound;
    ``-1``: down, for the lower bound).
    """
    n = mass.size
    A, B = _suffix_sums(mass, lo, h)
    slack = 4.0 * _suffix_rounding(n, h) * side
    cl = float(c)
    dl = float(delta)

    def prof(Aj, Bj):
        return Aj - Bj + slack * Aj + cl

    if c >= delta and side > 0:
        return math.inf
    if prof(A[0], B[0]) <= dl:          # reached at or below the window's first point: below it
        j, floor = 0, -math.inf          # the formula holds (-inf: all the mass is within delta)
    else:
        # the first grid point lo + j (j = 1 .. n; j = n: beyond the window, delta = c) where the
        # profile is at most delta, by bisection: the profile is non-increasing in exact
        # arithmetic.  Where round-off made it wiggle, bisection still ends on a point j with
        # R(j - 1) > delta >= R(j), which is sound on both sides: for the upper end R >= the
        # true profile, so R(j) <= delta puts the true crossing at or below j; for the lower end
        # R <= the true profile, so R(j - 1) > delta puts it above j - 1.
        def R(j):
            return cl if j >= n else prof(float(A[j]), float(B[j]))

        if R(n) > dl:
            return math.inf
        i, j = 0, n                     # R(i) > delta >= R(j)
        while j - i > 1:
            m = (i + j) // 2
            if R(m) <= dl:
                j = m
            else:
                i = m
        if j >= n:
            return (lo + n - 1) * h
        # the crossing is in (x_(j-1), x_j], where delta(eps) = A_j - e^(eps - x_j) B_j + c (the
        # atoms at or below x_(j-1) no longer count).  If that is <= delta already at the left
        # end (num <= 0: e.g. no atom above x_(j-1), or the slack charged at x_(j-1) alone kept
        # R(j - 1) above delta), the answer is x_(j-1) itself: the true profile is continuous
        # there, so the upper end stays certified, and the lower end (R <= true profile) stays
        # below the truth.  Never below x_(j-1): R(j - 1) > delta.
        floor = (lo + j - 1) * h
    num = A[j] * (1 + slack) + cl - dl
    if num <= 0.0:
        return floor
    return max((lo + j) * h + float(np.log(num / (B[j] * (1 - slack)))), floor)


def _sum_error(mass: np.ndarray) -> float:
    """Bound on the rounding of a sum of n non-negative terms in double precision."""
    return 2.0 * (mass.size + 2) * float(np.finfo(float).eps) * float(np.sum(mass)) + 1e-300


def _g(h: float) -> float:
    r = h / -math.expm1(-h)
    return r - 1.0 - math.log(r)


def _retilt(steps, comp, h, delta, alpha, cap_bytes, r_min, threshold=RETILT):
    """A second composition tilted toward the delta-quantile (reading only bins above
    ``r_min``) when the first one's round-off charge there exceeds ``threshold * delta``; None
    if not needed or not possible."""
    j = max(0, r_min - comp.lo)
    if not (float(np.sum(comp.err[j:])) > threshold * delta and comp.count > 1):
        return None
    return _tilted(steps, h, delta, alpha, cap_bytes, r_min, comp.mass.size)


def _tilted(steps, h, delta, alpha, cap_bytes, r_min, n0):
    """The composition tilted toward the delta-quantile, reading only bins above ``r_min``: the
    largest tilt up to the Chernoff-optimal one whose window is at most 4 times ``n0`` (the
    untilted window; a steep tilt makes the wrapped-around tail expensive); None if no tilt
    helps or over the memory cap."""
    if sum(s.count for s in steps) <= 1:
        return None
    logm = _log_mgfs(steps, h)
    lam = _tilt(logm[0], math.log(delta))
    for cand in [lam] + [float(c) for c in _LAMBDAS[::-1] if c < lam]:
        a, b = _window(steps, h, math.log(alpha), cand, logm, r_min)
        if b - a + 1 <= 4 * n0 + 16:
            lam = cand
            break
    else:
        lam = 0.0
    if lam <= 0.0:
        return None
    return _compose(steps, h, alpha, cap_bytes, lam, r_min)[0]


def _upper_one(steps, h, delta, cap_bytes, floor=-math.inf, hint=None):
    """``(lower, upper)`` of one direction at grid h from its connect-the-dots steps; ``(None,
    None)`` over the memory cap.  The lower end is Hoeffding's, read from the same composition.

    A first composition without tilt gives a bracket; if its round-off charge above the lower
    end exceeds ``RETILT * delta`` (small delta, many steps), a composition tilted toward the
    delta-quantile, reading only bins above that lower end, gives another; both are valid and
    the result is their intersection.  ``floor`` is a lower bound on the answer from another
    direction: when the first upper end is already at or below it, this direction cannot be
    the worse one and is not re-composed.

    ``hint``: ``(lower, upper, retilted)`` of the same direction on a coarser grid (both ends
    valid for this one too).  When that composition had to be re-tilted, the untilted one is
    skipped here: the tilted composition reads the bins above the coarse lower end, and the
    result is intersected with the coarse bracket.
    """
    return _upper_info(steps, h, delta, cap_bytes, floor, hint)[:2]


def _upper_info(steps, h, delta, cap_bytes, floor=-math.inf, hint=None):
    """:func:`_upper_one` and whether a tilted composition was needed (``retilted``)."""
    if not steps:
        return 0.0, 0.0, False
    alpha = ALIAS * delta
    if hint is not None and hint[2] and hint[0] is not None:
        lo_c, up_c, _ = hint
        lo_, hi_ = _window(steps, h, math.log(alpha))
        comp2 = _tilted(steps, h, delta, alpha, cap_bytes, math.floor(lo_c / h) - 1, hi_ - lo_ + 1)
        if comp2 is not None:
            lo2, up2 = _read_bracket(comp2, h, delta)
            lower, upper = max(lo_c, lo2), min(up_c, up2)
            return lower, max(upper, lower), True
    comp, _ = _compose(steps, h, alpha, cap_bytes)
    if comp is None:
        return None, None, False
    lower, upper = _read_bracket(comp, h, delta)
    if upper <= floor:
        return lower, upper, False
    comp2 = _retilt(steps, comp, h, delta, alpha, cap_bytes, math.floor(lower / h) - 1)
    if comp2 is not None:
        lo2, up2 = _read_bracket(comp2, h, delta)
        lower, upper = max(lower, lo2), min(upper, up2)
    return lower, max(upper, lower), comp2 is not None


def _lower_one(lower_steps, h, delta, cap_bytes):
    """The lower end of one direction from the composition of its lower steps
    (:func:`_lower_step`; usable ones), re-composed tilted when the round-off charge exceeds
    ``LOWER_RETILT * delta``; None over the memory cap."""
    alpha = ALIAS * delta
    lcomp, _ = _compose(lower_steps, h, alpha, cap_bytes)
    if lcomp is None:
        return None
    lower = _read_lower(lcomp, h, delta)
    lcomp2 = _retilt(lower_steps, lcomp, h, delta, alpha, cap_bytes, math.floor(lower / h) - 1,
                     LOWER_RETILT)
    if lcomp2 is not None:
        lower = max(lower, _read_lower(lcomp2, h, delta))
    return lower


def _usable(lower_steps) -> bool:
    """Lower steps exist for every event and none is empty (an empty one bounds nothing)."""
    return bool(lower_steps) and all(s is not None and float(np.sum(s.mass)) > 0.0 for s in lower_steps)


def _read_lower(comp, h, delta):
    """Lower end from a composition of lower steps: their profile is below the true one, so
    (minus the wrapped-around mass and the round-off) the eps it reads is a lower bound."""
    x = _eps_at(comp.lower_mass, comp.lo, h, -comp.alias, delta, -1)
    return max(x, 0.0)


def _read_bracket(comp, h, delta):
    clipped = comp.upper_mass
    c_up = comp.inf + comp.alias
    upper = _eps_at(clipped, comp.lo, h, c_up, delta, +1)
    p = 1e-6 * delta
    K = comp.count
    t = h * math.sqrt(K * math.log(1.0 / p) / 2.0)
    shift = t + K * _g(h)
    if K * h <= shift:        # each rounding error is below h: the sum is below K h surely
        shift, p = K * h, 0.0
    low = comp.lower_mass
    c_lo = comp.alias + comp.bad + p
    x = _eps_at(low, comp.lo, h, -c_lo, delta, -1)
    lower = x - shift
    return max(lower, 0.0), max(upper, 0.0)


def _directions(events):
    if any(isinstance(e, PoissonSampledGaussianEvent) for e, _ in events):
        return ("remove", "add")
    return ("remove",)


def _delta(delta) -> float:
    d = _validate.delta(delta)
    if d < MIN_DELTA:
        raise ValueError(f"delta={delta!r} is not allowed: expected a number in [{MIN_DELTA:g}, 1) for the "
                         f"privacy-loss-distribution accountant (below, its FFT round-off is not small "
                         f"against delta); use the RDP or GDP accountant.")
    return d


def pld_epsilon_at(events, delta: float, discretization: float, memory_cap: int = MEMORY_CAP,
                   side: str = "both"):
    """``(lower, upper)`` bracket of ``eps(delta)`` at one grid size (None, None over the cap).

    ``side="upper"`` skips the lower-step compositions (the lower end is then only Hoeffding's,
    from the upper composition); ``side="lower"`` skips the upper compositions where the lower
    steps allow it (the upper end is then +inf).  A calibration's search needs only one end.
    The two ends are computed separately and remembered for the last few compositions, so a
    report at a point the search evaluated composes only its lower end.
    """
    if side not in ("both", "upper", "lower"):
        raise ValueError(f"side={side!r} is not allowed: expected 'both', 'upper' or 'lower'.")
    d = _delta(delta)
    h = _validate.positive(discretization, "discretization")
    ev = tuple(_check_events(events))
    key = (ev, d, h, memory_cap)
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


_OVER = object()                                   # a composition over the memory cap
_SIDES: dict = {}                                  # (side, events, delta, h, cap) -> ends


def clear_cache() -> None:
    """Forget every remembered answer -- brackets, composition ends and the accountant's RDP
    reports (benchmarks: no carry-over between settings or repeats)."""
    from . import accountant

    _SIDES.clear()
    _BINS.clear()
    _pld_epsilon_cached.cache_clear()
    accountant._RDP_REPORTS.clear()


def _remember(key, value):
    if len(_SIDES) >= 64:
        _SIDES.pop(next(iter(_SIDES)))
    _SIDES[key] = value
    return value


#: a direction whose untilted window at the grid has at least this many points is first composed
#: on an 8x coarser grid (about 1/8 of the cost): if that one needed a tilted re-composition,
#: so will the fine one, and the fine untilted composition is skipped
HINT_POINTS = 1 << 14


def _upper_ends(key):
    """Per direction ``(Hoeffding lower, upper)`` from the upper steps' compositions.  A later
    direction whose upper end -- on an 8x coarser grid first, then on this one before any
    re-composition -- is at or below an earlier direction's lower end cannot be the worse one:
    it is not refined further (its entry is then that coarser or first upper end).  The 8x
    coarser composition (done for large windows and for later directions) is also the fine
    one's hint (:func:`_upper_one`)."""
    if ("upper",) + key in _SIDES:
        return _SIDES[("upper",) + key]
    ev, d, h, cap = key
    K = sum(k for _, k in ev)
    tau = TAIL * d / max(K, 1)
    out = []
    for direction in _directions(ev):
        floor = max((x for x, _ in out), default=-math.inf)
        coarse = steps = None
        big = False                  # the first direction's fine window is large (hint first)
        if not out:
            try:
                steps = _steps(ev, h, tau, direction, cap)
            except _OverCap:
                return _remember(("upper",) + key, _OVER)
            a, b = _window(steps, h, math.log(ALIAS * d)) if steps else (0, 0)
            big = b - a + 1 >= HINT_POINTS
        if out or big:
            # any grid's upper end is certified: if an 8x coarser grid (8x cheaper) already puts
            # this direction below the earlier one's lower end, the fine one is not needed
            try:
                coarse = _upper_info(_steps(ev, 8.0 * h, tau, direction, cap), 8.0 * h, d, cap, floor)
            except _OverCap:
                coarse = None
            if coarse is not None and coarse[1] is not None and coarse[1] <= floor:
                out.append((coarse[0], coarse[1]))
                continue
        if steps is None:
            try:
                steps = _steps(ev, h, tau, direction, cap)
            except _OverCap:
                return _remember(("upper",) + key, _OVER)
        lo, up = _upper_one(steps, h, d, cap, floor, coarse)
        if lo is None:
            return _remember(("upper",) + key, _OVER)
        out.append((lo, up))
    return _remember(("upper",) + key, out)


def _lower_ends(key, ups):
    """Per direction the lower end from the lower steps' compositions.  With the upper ends
    known (``ups``), a direction whose upper end is at or below another direction's lower end
    is skipped (its lower end cannot be the larger one); without them, a later direction is
    skipped when its upper end on an 8x coarser grid is at or below the lower ends found before
    it.  Where a direction's lower steps are unusable its Hoeffding end (from
    :func:`_upper_ends`) is used.  Only the maximum of the list is ever read."""
    ev, d, h, cap = key
    skip = tuple(ups is not None and len(ups) > 1 and
                 ups[i][1] <= max(lo for k, (lo, _) in enumerate(ups) if k != i)
                 for i in range(len(_directions(ev))))
    ck = ("lower", skip) + key
    if ck in _SIDES:
        return _SIDES[ck]
    K = sum(k for _, k in ev)
    tau = TAIL * d / max(K, 1)
    out = []
    for direction, skipped in zip(_directions(ev), skip):
        if skipped:
            continue
        if ups is None and out:
            # lower end only (no upper ends known): a later direction whose upper end -- on an 8x
            # coarser grid, certified as any grid's -- is at or below the lower end found so far
            # cannot raise the maximum; it is not composed (for Poisson DP-SGD the add direction,
            # ~40 % of the cost)
            try:
                c = _upper_info(_steps(ev, 8.0 * h, tau, direction, cap), 8.0 * h, d, cap, max(out))
            except _OverCap:
                c = None
            if c is not None and c[1] is not None and c[1] <= max(out):
                continue
        try:
            steps, lsteps = _steps(ev, h, tau, direction, cap, lower=True)
        except _OverCap:
            return _remember(ck, _OVER)
        hl = h
        if not _usable(lsteps):
            # a bin holding nearly all the mass mid-way between two grid points (below a thin
            # tail: small q and noise) breaks the lower steps; on a grid that puts that atom on
            # a grid point they usually exist (:func:`_aligned_grid`) -- else Hoeffding's end
            ha = _aligned_grid(ev, h)
            if ha is not None:
                try:
                    _, la = _steps(ev, ha, tau, direction, cap, lower=True)
                except _OverCap:
                    la = None
                if la is not None and _usable(la):
                    lsteps, hl = la, ha
        if not _usable(lsteps):                       # Hoeffding's end from the upper steps
            u = _upper_ends(key)
            if u is _OVER:
                return _remember(ck, _OVER)
            out.append(u[_directions(ev).index(direction)][0])
            continue
        lo = _lower_one(lsteps, hl, d, cap)
        if lo is None:
            return _remember(ck, _OVER)
        out.append(lo)
    return _remember(ck, out or [0.0])


def _aligned_grid(events, h: float) -> float | None:
    """A grid step in ``(h/2, h]`` that puts the subsampled loss's atom on a grid point, or None.

    With small noise almost all of a Poisson step's mass sits just above ``log(1 - q)`` (remove
    direction; just below ``-log(1 - q)`` for add, and both for sampling without replacement):
    an atom.  Mid-way between two grid points its chord gap is ``~h/4`` of the whole mass, more
    than the thin tail above can repay, and :func:`_lower_step` fails.  With ``h' = |log(1 - q)|
    / ceil(|log(1 - q)| / h)`` the atom sits at a grid point (the grid is symmetric about 0, so
    for both signs), its gap is ~0, and the lower step exists.  Any grid's lower end is valid;
    this one is used only where the grid ``h``'s lower steps fail.  The atom of the subsampled
    event with the most steps is aligned; None where no event is subsampled (0 < q < 1) or the
    atom is within ``h`` of 0 (then it sits near a grid point already)."""
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


def _check_events(events):
    out = []
    for item in events:
        if isinstance(item, _EVENTS):
            ev, k = item, 1
        else:
            try:
                ev, k = item
            except (TypeError, ValueError):
                raise ValueError(f"events: {item!r} is not allowed: expected an event or an "
                                 f"(event, count) pair.") from None
        if not isinstance(ev, _EVENTS):
            raise ValueError(f"event={ev!r} is not allowed: expected one of "
                             f"{', '.join(t.__name__ for t in _EVENTS)}.")
        k = _validate.integer(k, "count", low=0)
        if k:
            out.append((ev, k))
    rels = {e.neighboring_relation for e, _ in out} - {None}
    if len(rels) > 1:
        raise ValueError("events mix neighbouring relations (add/remove and replace-one); "
                         "guarantees under different relations do not compose.")
    return out


def pld_epsilon(events, delta: float, rtol: float = RTOL, memory_cap: int = MEMORY_CAP,
                discretization: float | None = None, atol: float = 1e-5) -> EpsilonBracket:
    """Certified bracket ``[lower, upper]`` of ``eps(delta)`` for a composition.

    Args:
      events: an iterable of events or ``(event, count)`` pairs (Gaussian, Poisson-sampled
        Gaussian, without-replacement-sampled Gaussian; one neighbouring relation).
      delta: target delta in (0, 1).
      rtol, atol: the grid is refined until ``upper - lower <= max(rtol * upper, atol)``.
      memory_cap: bytes one composition may use; when the next refinement would exceed it the
        best bracket so far is returned with ``converged=False`` and a note.
      discretization: a fixed grid step instead of the automatic choice.
    """
    d = _delta(delta)
    r = _validate.in_range(rtol, "rtol", 0.0, 1.0, low_open=True)
    a_tol = _validate.in_range(atol, "atol", 0.0, math.inf, high_open=True)
    cap = _validate.integer(memory_cap, "memory_cap", low=1 << 20)
    ev = _check_events(events)
    if not ev:
        return EpsilonBracket(0.0, 0.0, d, 0.0, True, ("no events composed",))
    return _pld_epsilon_cached(tuple(ev), d, r, cap, discretization, a_tol)


def _on_ladder(h: float) -> float:
    """The largest grid step ``0.05 * 2^(-k/4)`` (k integer) not above ``h``.

    The automatic grids are taken from this fixed ladder, so that nearby compositions (a
    calibration's noise levels) end on the *same* grid and their brackets vary continuously;
    a calibration can then solve on the very grid its report will use."""
    if h >= 0.05:
        return h
    k = math.ceil(-4.0 * math.log2(h / 0.05) - 1e-9)
    return 0.05 * 2.0 ** (-k / 4.0)


def report_grid(events, delta: float, rtol: float = RTOL, memory_cap: int = MEMORY_CAP,
                atol: float = 1e-5, with_uppers: bool = False):
    """The grid :func:`pld_epsilon` is expected to end on, without evaluating that grid.

    The automatic refinement picks each next grid by a square-root rule aimed at 0.7 of the
    tolerance; when the rule is not clamped, the next grid is expected to be the last.  This
    runs the refinement up to there (the coarse, cheap grids) and returns that grid -- a
    prediction (a calibration solves on it and checks the report afterwards), not a bracket.
    With ``with_uppers``: ``(grid, ((h, upper), ...))``, the upper ends of the grids the
    prediction composed (coarse to fine; a calibration extrapolates them to the predicted grid).
    """
    d = _delta(delta)
    ev = _check_events(events)
    if not ev:
        return (0.0, ()) if with_uppers else 0.0
    out = _pld_epsilon_cached(tuple(ev), d, rtol, memory_cap, None, atol, True)
    return out if with_uppers else out[0]


@functools.lru_cache(maxsize=256)
def _pld_epsilon_cached(ev, d, r, cap, discretization, a_tol, predict=False):
    """:func:`pld_epsilon` on validated arguments; events are frozen, so answers are cached (a
    calibration asks for the same bracket when it re-checks, reports and certifies).  With
    ``predict``: the grid the refinement is expected to end on and the ``(grid, upper)`` pairs
    composed on the way (:func:`report_grid`)."""
    def done(lo, up):
        return up - lo <= max(r * up, a_tol)

    K = sum(k for _, k in ev)
    if discretization is not None:
        h = _validate.positive(discretization, "discretization")
        lo, up = pld_epsilon_at(ev, d, h, cap)
        if lo is None:
            raise ValueError(f"discretization={h!r} is not allowed: the composition needs more than "
                             f"memory_cap={cap} bytes; choose a coarser grid.")
        return EpsilonBracket(lo, up, d, h, done(lo, up), ())
    h = _on_ladder(min(0.05, 0.5 / math.sqrt(K * math.log(1e6 / d))))
    best = None
    notes = []
    trace = []                     # (grid, its own upper end), for a prediction's caller
    prev_gap, slow = None, 0
    prev_own = None                # the previous grid's own width (before intersecting)
    prev_lo = prev_h = None
    for _ in range(20):
        lo, up = pld_epsilon_at(ev, d, h, cap)
        if lo is None and best is None and h < 16.0:  # the first grid does not fit: coarser
            h *= 4.0
            continue
        if lo is None and best is not None and h < best.discretization / 2.1:
            # a long step ran over the cap: a grid half as fine as the last one may still fit
            h = _on_ladder(0.5 * best.discretization)
            continue
        if lo is None:
            notes.append(f"memory cap of {cap} bytes reached at discretization {h:.3g}; the bracket "
                         f"is from the finest grid that fits")
            break
        trace.append((h, up))
        own, own_lo = up - lo, lo
        if best is not None:      # every grid's bracket is valid: keep their intersection
            lo, up = max(lo, best.lower), min(up, best.upper)
        best = EpsilonBracket(lo, up, d, h, done(lo, up), tuple(notes))
        if best.converged or not math.isfinite(up):
            break
        gap = up - lo
        # a finer grid narrows the bracket ~4x per halving; twice in a row less than 1.5x means
        # a floor that refining does not move (round-off at a tiny delta): stop there
        slow = slow + 1 if prev_gap is not None and gap > prev_gap / 1.5 else 0
        # a finer grid whose own bracket is no narrower than the coarser one's: the round-off
        # charge, which grows with the number of grid points, already dominates (tiny delta, an
        # atom of most of the mass) -- finer grids only widen it: stop now, not one grid later
        if prev_own is not None and own >= prev_own:
            slow = 2
        # a refinement by f in the grid narrows the width by f^2 (both ends O(h^2)) or at least f
        # (a Hoeffding lower end, O(h)); by less than 3/4 of f, with both ends already positive
        # and within 10 %, a floor that does not move with h (round-off against a flat delta(eps):
        # few steps at a small eps) has taken over -- the next grid would only cost more
        if (prev_own is not None and own_lo > 0.0 and prev_lo > 0.0 and prev_own <= 0.1 * up
                and own * 0.75 * (prev_h / h) > prev_own):
            slow = 2
        prev_gap, prev_own, prev_lo, prev_h = gap, own, own_lo, h
        if slow >= 2:
            notes.append(f"the bracket stopped narrowing at discretization {h:.3g} (width {gap:.3g}; "
                         f"a floating-point floor, finer grids do not help)")
            best = EpsilonBracket(lo, up, d, h, False, tuple(notes))
            break
        # the width is O(K h^2) (both ends are O(h^2) per step): refine by the square root
        fac = math.sqrt(0.7 * max(r * up, a_tol) / gap) if gap > 0 else 0.5
        h_next = _on_ladder(h * min(0.5, max(1.0 / 6, fac)))
        # predicted last: the rule is not clamped, or (clamped) the width scaled by (h'/h)^2 is
        # already within the tolerance -- so a prediction need not compose both ends there
        if predict and (fac >= 1.0 / 6 or gap * (h_next / h) ** 2 <= max(r * up, a_tol)):
            return h_next, tuple(trace)
        h = h_next
    if predict:
        return (best.discretization if best is not None else 0.0), tuple(trace)
    if best is None:
        raise ValueError(f"memory_cap={cap} is not allowed for these events: even the coarsest grid "
                         f"(discretization {h:.3g}) does not fit the range of their privacy loss, which "
                         f"very small noise makes wide; raise memory_cap, or use the RDP accountant.")
    return EpsilonBracket(best.lower, best.upper, d, best.discretization, best.converged, tuple(notes))


def _delta_fin(mass: np.ndarray, lo: int, h: float, eps: float) -> float:
    """sum_s mass_s (1 - e^(eps - (lo+s) h))_+ (finite atoms only)."""
    s = np.arange(mass.size)
    j = math.floor(eps / h) - lo + 1            # first window index strictly above eps
    j = max(j, 0)
    if j >= mass.size:
        return 0.0
    m = mass[j:]
    return float(np.sum(m) - np.sum(m * np.exp(eps - (lo + s[j:]) * h)))


def _delta_upper(comp, h: float, eps: float) -> float:
    """Certified upper bound on ``delta(eps)`` from an upper composition: its finite atoms, the
    infinite-loss mass, the wrapped-around mass and the summation error."""
    m = comp.upper_mass
    return min(1.0, _delta_fin(m, comp.lo, h, eps) + comp.inf + comp.alias + _sum_error(m))


def pld_delta(events, epsilon: float, discretization: float = 1e-4, memory_cap: int = MEMORY_CAP):
    """``(lower, upper)`` bracket of ``delta(epsilon)`` of a composition at grid ``discretization``."""
    e = _validate.real(epsilon, "epsilon")
    h = _validate.positive(discretization, "discretization")
    ev = _check_events(events)
    if not ev:
        return 0.0, 0.0
    K = sum(k for _, k in ev)
    tau = 1e-15 / K
    lows, ups = [], []
    for direction in _directions(ev):
        try:
            steps, lsteps = _steps(ev, h, tau, direction, memory_cap, lower=True)
        except _OverCap:
            steps, lsteps = None, None
        comp = _compose(steps, h, 1e-16, memory_cap)[0] if steps else None
        if comp is None:
            raise ValueError(f"discretization={h!r} is not allowed: the composition needs more than "
                             f"memory_cap={memory_cap} bytes; choose a coarser grid.")
        up = _delta_upper(comp, h, e)
        p = max(1e-4 * up, 1e-300)
        t = h * math.sqrt(K * math.log(1.0 / p) / 2.0)
        shift = t + K * _g(h)
        if K * h <= shift:
            shift, p = K * h, 0.0
        low = comp.lower_mass
        lo = (_delta_fin(low, comp.lo, h, e + shift) - comp.alias - comp.bad - p
              - _sum_error(low))
        if _usable(lsteps):
            lcomp = _compose(lsteps, h, 1e-16, memory_cap)[0]
            if lcomp is not None:
                low = lcomp.lower_mass
                lo = max(lo, _delta_fin(low, lcomp.lo, h, e) - lcomp.alias - _sum_error(low))
        lows.append(max(lo, 0.0))
        ups.append(up)
    return max(lows), max(ups)


def pld_profile(events, epsilons, discretization: float = 1e-3, memory_cap: int = MEMORY_CAP) -> np.ndarray:
    """Certified upper bounds on ``delta(eps)`` at every ``eps`` in ``epsilons`` from ONE composition
    per direction (the worse direction at each eps): the privacy profile the trade-off curve of
    :mod:`.tradeoff` is built from.  Same pessimistic construction as :func:`pld_delta`'s upper end."""
    eps = np.atleast_1d(np.asarray(epsilons, dtype=float))
    if eps.ndim != 1 or not np.all(np.isfinite(eps)):
        raise ValueError(f"epsilons={epsilons!r} is not allowed: expected finite numbers.")
    h = _validate.positive(discretization, "discretization")
    ev = _check_events(events)
    if not ev:
        return np.zeros(eps.shape)
    K = sum(k for _, k in ev)
    tau = 1e-15 / K
    out = np.zeros(eps.shape)
    for direction in _directions(ev):
        try:
            steps = _steps(ev, h, tau, direction, memory_cap)
        except _OverCap:
            steps = None
        comp = _compose(steps, h, 1e-16, memory_cap)[0] if steps else None
        if comp is None:
            raise ValueError(f"discretization={h!r} is not allowed: the composition needs more than "
                             f"memory_cap={memory_cap} bytes; choose a coarser grid.")
        out = np.maximum(out, [_delta_upper(comp, h, float(e)) for e in eps])
    return out
