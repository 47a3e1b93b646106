"""Balls-in-bins, part 2: the discretised steps of one epoch -- upper and lower, each direction -- for the
PLD accountant.

**The pair.**  One epoch of ``t`` steps; the record is in one step, chosen uniformly (the others' steps are
independent of it); each step releases its batch's clipped sum plus ``N(0, z^2 C^2 I)``.  Under add/remove
the pair ``P = (1/t) sum_i N(e_i, z^2 I_t)``, ``Q = N(0, z^2 I_t)`` dominates the epoch ("remove": the
record present under ``P``; "add": the pair reversed) for adaptively chosen steps -- Chua, Ghazi,
Harrison, Leeman, Kamath, Kumar, Manurangsi, Sinha & Zhang, "Balls-and-Bins Sampling for DP-SGD"
(AISTATS 2025), Sec. 3, the dominating pair ``(P_B, Q_B)`` of ``ABLQ_B``; the argument is written out in
docs/accounting.md.  Its likelihood ratio is ``S / t`` with ``S = sum_i Y_i``, ``Y_i = e^{(x_i - 1/2) /
z^2}`` i.i.d. log-normal of mean 1 under ``Q``; under ``P`` the law of ``S`` is ``Q``'s tilted by ``S / t``.

**The law of S.**  :mod:`.allocation_terms` gives laws of one ``Y`` above and below the true one in
convex order (the upper: a spread, every convex expectation larger; the lowers: call or put function
lower, for the two directions).  Split at ``c1`` into a bulk ``b`` (linear grid ``step``) and a tail
``tau`` (a geometric grid, relative width ``ratio``), the law of ``S`` is ``sum_j C(t, j) b^(*(t-j)) *
tau^(*j)`` (``j`` of the ``t`` terms in the tail).  ``b^(*m)`` is one FFT composition
(:func:`~.compose.compose_powers`, its round-off bounded per bin and its wrapped mass by
Chernoff), untilted and -- for the part the eps of many epochs reads, large ``S`` (remove) or small
``S`` (add, on the reflected law ``c1 - Y``) -- tilted; ``tau^(*j)`` is a set of atoms (outer sums,
re-gridded geometrically: spread up, merged down); the terms with ``j > J`` go to infinity (upper) or
are dropped (lower).  The upper ``P``-mass of the tail's spread beyond ``c_max`` is an atom at
infinity.

**The step.**  The atoms of ``S`` are binned on the loss grid ``h`` (remove ``log(S / t)``, add its
negative), each bin's ``P``- and ``Q``-mass exact for the discrete law, and put on the grid by
connect-the-dots (:func:`~.discretise.upper_step`, a spread again) or its lowering
(:func:`~.discretise.lower_step`).  The steps are not within one grid step of the true loss, so they
are blocks (no Hoeffding end).  Every truncation is charged within ``tau``, the step tail the bracket
allows.  At ``t = 1`` the event is the full-batch Gaussian (exact GDP) and never comes here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from .allocation_terms import above, bulk_law, convolved, pooled, tail_laws
from ..caches import Memo
from ..gdp import gdp_epsilon
from .compose import compose_powers, log_mgfs
from .discretise import Bins, lower_step, upper_step
from .discretise import discretised_steps as plain_steps
from .shared import OverCap, Step

__all__ = ["epoch_step"]

_U = float(np.finfo(float).eps)
#: the bulk's grid is ``KAPPA * h * sqrt(t)``: its spread adds ~``step^2 / (4 t)`` to the variance of one
#: epoch's loss, the loss grid's own ~``h^2 / 4`` -- both shrink with ``h``, so the bracket converges
KAPPA = 1.0
#: the tail's geometric grid: relative width ``e^(TAIL_GRID * h)`` (its terms are rare; their losses
#: move by at most that, second order)
TAIL_GRID = 2.0
#: ``t Q(Y > c1)`` at most this: the tail holds few of the ``t`` terms
TAIL_RATE = 1e-3
#: bulk grids: at least this many points before a tail is split off, at most this many
BULK_MIN, BULK_MAX = 1 << 12, 1 << 20
#: ... and ``c1`` at most this many times ``t`` (little noise: a log-normal so heavy that the bulk's sums
#: would span thousands of ``t``; the tail's terms then take more of the ``t``)
C1_OVER_T = 1.0
#: terms with more tail terms than this go to infinity (upper) / are dropped (lower)
J_MAX = 16
#: the rest beyond ``J`` tail terms (charged in full) at most this many times the step's tail budget ``tau``
#: (``1e-7 delta`` for all epochs together, as the blocks' binomial rest of :mod:`.blocks`)
REST = 10.0
#: at most this many tail atoms, and pooled blocks of the bulk's law beside one octave of them
TAIL_MAX = 4000
POOL_MAX = 2000
#: the atoms of a sum of tail terms are re-gridded to at most about this many
TAIL_ATOMS = 400


@dataclass(frozen=True)
class Plan:
    """How one epoch is discretised: the bulk grid ``step`` and its ``n`` cells up to ``c1 = n step``, the
    tail's geometric ``ratio`` up to ``c_max`` (none: ``c_max == c1``), ``J`` tail terms kept.

    Attributes:
        step: the bulk grid's step (in the ``y`` variable), > 0.
        n: the number of bulk cells, up to ``c1 = n step``.
        ratio: the tail's geometric ratio (1.0 where there is no tail).
        c_max: where the tail ends (``c_max == c1`` where there is no tail).
        J: the number of tail terms kept.
    """

    step: float
    n: int
    ratio: float
    c_max: float
    J: int

    @property
    def c1(self) -> float:
        """Where the bulk grid ends: ``n * step``.

        """
        return self.n * self.step


def _y_at(z: float, x: float) -> float:
    """The ``y`` of ``x`` (``y = e^{(x - 1/2) / z^2}``), capped below overflow."""
    if z * z < 1e-300:                          # (the square underflows: no grid holds such a loss)
        raise OverCap
    a = (x - 0.5) / (z * z)
    if a > 700.0:
        raise OverCap
    return math.exp(a)


def plan(z: float, t: int, h: float, tau: float) -> Plan:
    """The discretisation of one epoch at loss grid ``h`` with tail budget ``tau``.

    Args:
        z: the noise multiplier, > 0.
        t: the steps an epoch, >= 1.
        h: the loss grid, > 0.
        tau: the tail budget (a probability mass), > 0.

    Returns:
        The :class:`Plan` (bulk grid, its cells, the tail's ratio and end, the tail terms kept).

    Raises:
        OverCap: where a term's tail lies beyond any grid (vanishing noise).
    """
    step = KAPPA * h * math.sqrt(t)
    # the upper tail's P-mass at infinity (beyond c_max) at most tau / 10
    x_max = 1.0 + z * float(-special.ndtri(min(0.5, tau / 10.0)))
    c_max = max(_y_at(z, x_max), 4.0 * step)
    if c_max / step <= BULK_MIN:
        n = max(4, math.ceil(c_max / step))
        return Plan(step, n, 1.0, n * step, 0)
    x1 = z * float(-special.ndtri(min(0.5, TAIL_RATE / t)))
    c1 = min(c_max, max(min(_y_at(z, x1), C1_OVER_T * t), BULK_MIN * step))
    n = math.ceil(c1 / step)
    if n > BULK_MAX:
        step, n = c1 / BULK_MAX, BULK_MAX
    if n * step >= c_max:
        return Plan(step, n, 1.0, n * step, 0)
    # at most TAIL_MAX atoms (a fine grid -- the attack risk's 5e-5 -- and a long tail made 10^5 of them)
    ratio = max(math.exp(TAIL_GRID * h), ((c_max + t) / (n * step + t)) ** (1.0 / TAIL_MAX))
    return Plan(step, n, ratio, c_max, J_MAX)


@dataclass
class _Law:
    """One side's discretised step law: the bulk's Q-masses on ``k step`` (``bulk``) and, per number
    ``j >= 1`` of tail terms, the atoms ``(y, q)`` of their sum (``sums[j - 1]``); ``p_inf`` the P-mass at
    infinity, ``rest_p``/``rest_q`` the P/Q-mass of the terms with more than ``J`` tail terms."""

    bulk: np.ndarray
    sums: list
    p_inf: float
    rest_p: float
    rest_q: float


_LAWS = Memo(24)


def _law(z: float, t: int, p: Plan, tau: float, which: str):
    """One side's law of an epoch's ``S`` (:class:`_Law`; ``which``: "upper", or the lower laws "calls"
    (remove) and "puts" (add), :func:`~.allocation_terms.bulk_law`), remembered; None where a lower
    construction fails."""
    key = (z, t, p, tau, which)
    if key in _LAWS:
        return _LAWS[key]
    bulk = bulk_law(z, p.step, p.n, which)
    if bulk is None:
        return _LAWS.remember(key, None)
    if which == "upper":
        bulk = bulk * (1.0 + 1e-12)
    if p.J == 0:
        law = _Law(bulk, [], 0.0, 0.0, 0.0)
        if which == "upper":      # the spread ends at c1 = c_max: the rest above onto c1 and infinity
            qa, aa = above(z, p.c1)
            law.bulk[-1] += qa * (1.0 + 1e-12)
            law.p_inf = max(0.0, aa - p.c1 * qa) * (1.0 + 1e-12) + 1e-300
        return _LAWS.remember(key, law)
    J, rest_q, rest_p, p_inf, ups, los = _tails(z, t, p, tau)
    if which == "upper":
        law = _Law(bulk, ups, p_inf, rest_p, rest_q)
    else:
        law = _Law(bulk, los, 0.0, 0.0, 0.0)
    return _LAWS.remember(key, law)


_TAILS = Memo(8)


def _tails(z: float, t: int, p: Plan, tau: float):
    """``(J, rest_q, rest_p, p_inf, upper sums, lower sums)``: the tail's laws and the sums of ``j = 1 .. J``
    tail terms, ``J`` the fewest (at most ``p.J``) whose rest is within ``tau / 1000``."""
    key = (z, t, p, tau)
    if key in _TAILS:
        return _TAILS[key]
    (uy, uq, p_inf), (ly, lq) = tail_laws(z, p.c1, p.ratio, p.c_max, float(t))
    theta = min(float(np.sum(uq)), 1.0)
    a_tail = float(np.sum(uq * uy))
    a_bulk = 1.0 + 1e-9                           # (the bulk's first moment is at most E Y = 1)

    def rest(J):
        """The Q-mass of the terms with more than ``J`` tail terms, and (a bound on) their finite P-mass
        (the P-law is the Q-law tilted by ``S / t``: the tilted term in the tail beside ``J`` others or in
        the bulk beside ``J + 1``)."""
        return _above(J, t, theta), a_tail * _above(J - 1, t - 1, theta) + a_bulk * _above(J, t - 1, theta)

    J = 1
    while J < min(p.J, t) and max(rest(J)) > REST * tau:
        J += 1
    rest_q, rest_p = rest(J)
    # the sums of j >= 2 tail terms on a coarser geometric grid (their mass is ~(t Q(Y > c1))^(j-1) less)
    r2 = max(p.ratio, ((p.c_max + t) / (p.c1 + t)) ** (1.0 / TAIL_ATOMS))
    out = (J, rest_q * (1.0 + 1e-12), rest_p * (1.0 + 1e-12), p_inf, _tail_sums((uy, uq), p.c1, r2, True, J, t),
           _tail_sums((ly, lq), p.c1, r2, False, J, t))
    return _TAILS.remember(key, out)


def _above(k: int, n: int, p: float) -> float:
    """``P(Binomial(n, p) > k)``."""
    return 0.0 if k >= n else (1.0 if k < 0 else float(special.bdtrc(k, n, p)))


def _tail_sums(tail, c1: float, r2: float, upper: bool, J: int, t: int) -> list:
    """The atoms of the sums of ``j = 1 .. J`` tail terms (``j >= 2`` re-gridded geometrically in ``y + t``
    from ``j c1`` with ratio ``r2``: spread up, merged down)."""
    y, q = tail
    out = [(y, q)]
    coarse = pooled(y, q, c1, r2, upper, float(t)) if J >= 2 else None
    cur = coarse
    for j in range(2, J + 1):
        cur = convolved(cur, coarse, j * c1, r2, upper, float(t))
        out.append(cur)
    return out


# -- the law of S: FFT compositions of the bulk ------------------------------------------------------

def _composed(bulk: np.ndarray, counts, step: float, alpha: float, cap: int, lam: float, reflect: bool):
    """``[(lo, upper, lower, alias)]`` per count ``c``: the ``c``-fold composition of the bulk on the grid
    ``s * step`` (``s = lo ..``), its round-off added (``upper``) and taken off (``lower``, clipped at 0),
    and the bound ``alias`` on its wrapped-around mass (:func:`~.compose.compose_powers`).  With
    ``reflect`` the law of ``c1 - Y`` is composed (tilted toward small ``S``) and read back."""
    n = bulk.size - 1
    mass = bulk[::-1].copy() if reflect else bulk
    # composed in units of the bulk's top ``c1 = n step`` (a term is at most 1): the Chernoff windows'
    # ladder of tilts (2^-10 .. 2^20 a unit) then holds the small tilts a sum of terms up to c1 needs --
    # in units of S it starts at 2^-10, and a heavy bulk's window spanned its whole support, t c1
    unit = max(n * step, step)
    # the moment bounds of the Chernoff windows pool the atoms in blocks of 1 % of the span over the
    # count (the windows move out by at most that): counted for the largest count, not for one
    law = Step(0, mass, 0.0, 0.0, max(counts))
    log_mgfs([law], step / unit)
    comps = compose_powers(law, counts, step / unit, alpha, cap, lam * unit)
    if comps is None:
        raise OverCap
    out = []
    for i, c in enumerate(counts):
        comp, comps[i] = comps[i], None      # (each released once read: the bounds replace it)
        up = np.clip(comp.mass + comp.err, 0.0, None)
        lo = np.clip(comp.mass - comp.err, 0.0, None)
        i0 = comp.lo
        if reflect:                          # s = c n - s~
            up, lo = up[::-1].copy(), lo[::-1].copy()
            i0 = c * n - (comp.lo + comp.mass.size - 1)
        out.append((i0, up, lo, comp.alias))
    return out


def _merged(a, b):
    """An untilted composition ``a`` and a tilted one ``b`` of the same law on one grid, on ``a``'s window:
    per point the smaller upper bound and the larger lower bound (a tilted composition leaves the points
    far below its tilt unresolved, upper bound 1: those keep ``a``'s).  What lies outside ``a``'s window at
    all is at most its Chernoff mass, which the caller charges.  ``alias`` of both."""
    i0, ua, la, alias_a = a
    up, low = ua.copy(), la.copy()
    j0, ub, lb, alias_b = b
    lo, hi = max(i0, j0), min(i0 + ua.size, j0 + ub.size)
    if hi > lo:
        sa, sb = slice(lo - i0, hi - i0), slice(lo - j0, hi - j0)
        up[sa] = np.minimum(up[sa], ub[sb])
        low[sa] = np.maximum(low[sa], lb[sb])
    return i0, up, low, alias_a + alias_b


def _capped(comp, bulk: np.ndarray, t: int):
    """An upper composition of ``t`` bulk terms with each point ``s`` capped by ``G(s)^t``, ``G`` the bulk's
    distribution function: the sum is at most ``s step`` only if every term is -- a bound free of the
    FFT's round-off where the sum is small (the add direction's large losses)."""
    i0, up, low, alias = comp
    G = np.cumsum(bulk)
    k = i0 + np.arange(up.size)
    m = k < G.size
    if not np.any(m):
        return comp
    with np.errstate(divide="ignore"):
        cap = np.exp(t * np.log(G[np.maximum(k[m], 0)])) * (1.0 + 1e-9)
    up = up.copy()
    up[m] = np.minimum(up[m], cap)
    return i0, up, low, alias


def _tilt(z: float, t: int, K: int, delta: float, bulk: np.ndarray, step: float) -> float:
    """A tilt (in units of 1/S) that puts the composition's relative accuracy where ``K`` epochs' eps at
    ``delta`` reads one epoch: ``lambda / t``, ``lambda`` the Chernoff tilt of the Gaussian
    approximation (``mu^2 = K Var log(S / t)``) -- at most the tilt under which the top half of the bulk
    holds ``0.1 / t`` of the tilted law (a heavier one piles the tilted sum onto the bulk's top, where
    its window spans ``t c1``)."""
    v = math.log1p(math.expm1(min(1.0 / (z * z), 700.0)) / t)
    mu = math.sqrt(K * v)
    eps = gdp_epsilon(mu, delta) if mu < 1e3 else 1e3
    lam = min(max(eps / max(mu * mu, 1e-300) + 0.5, 0.5), 30.0)
    n = bulk.size - 1
    y = np.arange(n + 1) * step
    top = y > 0.5 * n * step

    def share(th):
        w = np.log(np.maximum(bulk, 1e-300)) + th * y
        w = np.exp(w - w.max()) * (bulk > 0.0)
        return float(np.sum(w[top]) / np.sum(w))

    th = lam / t
    for _ in range(60):
        if share(th) <= 0.1 / t:
            break
        th *= 0.7
    return th


# -- binning S onto the loss grid ---------------------------------------------------------------------

#: pairs of a tail sum's atom ``y`` and the bulk's law ``s``: the latter is pooled on a geometric grid in
#: ``y_0 + s`` (``y_0`` the lowest atom of ``y``'s octave) of relative width ``POOL * h`` -- ``S = y + s``
#: moves by at most that relatively within a block (its loss by at most ``POOL * h``, second order)
POOL = 2.0


def _pieces(y, w, i0, q, step, t, h, upper: bool, memo=None):
    """``(S, Q-mass)`` of the sums ``y_a + s step`` of atoms ``(y_a, w_a)`` and the law ``q`` (``s = i0
    ..``).  For the atoms of each octave ``[2^k y_0, 2^(k+1) y_0)`` the law is first pooled on a geometric
    grid in ``2^k y_0 + s`` (:func:`~.allocation_terms.pooled`, each octave's from the lowest octave's:
    ``upper`` a spread, else a contraction -- of each sum too), so that the pairs number about the atoms
    times ``log(span) / (POOL h)``, not times the law's points."""
    s = (i0 + np.arange(q.size)) * step
    keep = q > 0.0
    s, q = s[keep], q[keep]
    if not s.size or not y.size:
        return np.zeros(0), np.zeros(0)
    if y.size == 1 and y[0] <= 0.0:               # the bulk's own law (no tail term)
        return s, q * w[0]
    out_s, out_q = [], []
    y0 = float(np.min(y))
    lev = np.floor(np.log2(y / y0)).astype(np.int64)
    ratio = max(math.exp(POOL * h), ((y0 + float(s[-1])) / (y0 + float(s[0]))) ** (1.0 / POOL_MAX))
    levels = memo.setdefault((id(q), y0), {}) if memo is not None else {}
    if 0 not in levels:
        v0, q0 = pooled(y0 + s, q, y0 + float(s[0]), ratio, upper)
        levels[0] = (v0 - y0, q0)
    s0, q0 = levels[0]
    for k in np.unique(lev):
        sel = lev == k
        base = y0 * 2.0 ** int(k)
        if int(k) not in levels:
            # pooled from the nearest coarser-than-nothing level below (a spread of a spread, a merge of
            # merged atoms: still one), fewer atoms each octave up
            below = max(j for j in levels if j < int(k))
            sb, qb = levels[below]
            v, pq = pooled(base + sb, qb, base + float(sb[0]), ratio, upper)
            levels[int(k)] = (v - base, pq)
        ps, pq = levels[int(k)]
        out_s.append(np.add.outer(y[sel], ps).ravel())
        out_q.append(np.multiply.outer(w[sel], pq).ravel())
    return np.concatenate(out_s), np.concatenate(out_q)


def _binned(pieces, sums, t: int, step: float, h: float, direction: str, upper: bool, extra=None):
    """The epoch's ``Bins`` in ``direction`` from the pieces of ``S``: ``[(i0, q, f)]`` (``j`` tail terms
    beside the law ``f q`` of the bulk's terms), ``sums[j - 1]`` the tail atoms; and the ``P``-mass at
    ``S = 0`` (the add direction's infinite loss).  An atom goes to the loss bin ``(i h, (i+1) h]`` of its
    loss, or -- within ``1e-9 h`` of an edge -- to the side that keeps a bound a bound.  ``extra``: bins
    ``(i, P, Q)`` already made (:func:`_bottom`)."""
    binom = special.gammaln(t + 1) - special.gammaln(np.arange(len(pieces)) + 1) - \
        special.gammaln(t - np.arange(len(pieces)) + 1)
    Ss, Qs = [], []
    memo = {}
    for j, (i0, q, f) in enumerate(pieces):
        if j == 0:
            y, w = np.zeros(1), np.ones(1)
        else:
            y, w = sums[j - 1]
            w = w * (math.exp(float(binom[j])) * f)
        S, Q = _pieces(y, w, i0, q, step, t, h, upper, memo)
        Ss.append(S)
        Qs.append(Q)
    S = np.concatenate(Ss)
    Qm = np.concatenate(Qs)
    zero = S <= 0.0
    at_zero = float(np.sum(Qm[zero]))
    S, Qm = S[~zero], Qm[~zero]
    if not S.size:
        return None, at_zero
    ell = np.log(S / t) if direction == "remove" else -np.log(S / t)
    nu = 1e-9 if upper else -1e-9
    ii = np.ceil(ell / h + nu).astype(np.int64) - 1
    Mm = Qm * (S / t)                             # the mixture's mass
    Pw, Qw = (Mm, Qm) if direction == "remove" else (Qm, Mm)
    if extra is not None:
        ii, Pw, Qw = np.concatenate((ii, extra[0])), np.concatenate((Pw, extra[1])), np.concatenate((Qw, extra[2]))
    lo, hi = int(ii.min()), int(ii.max())
    P = np.bincount(ii - lo, weights=Pw, minlength=hi - lo + 1)
    Q = np.bincount(ii - lo, weights=Qw, minlength=hi - lo + 1)
    # (sums of non-negative terms: each within its count of roundings, relatively)
    r = (ii.size + 16) * _U
    f = 1.0 + r if upper else 1.0 - r
    return Bins(lo, P * f, Q * f, 0.0, 0.0), at_zero


def _bottom(z: float, t: int, step: float, h: float, tau: float):
    """The add direction's upper law where every term is in the bulk's first cell ``[0, step]``: its
    spread puts all ``t`` terms on ``{0, step}`` (an atom at ``S = 0``: infinite add loss, and a floor of
    ``Q(Y <= step)^t`` under every delta -- ``0.01`` at ``t = 2``, ``z = 0.5``).  There ``S >= max_i Y_i``
    and the add loss ``-log(S / t)`` decreases in ``S``, so the maximum's exact law (``Q(max <= y) = F(y)^t``)
    bounds that part from above; each loss bin's mass is put at the bin's top (all of it sent up by
    connect-the-dots).  Returns ``(spread, (i, P, Q), inf)``: the spread's part (masses at ``S = k step``,
    ``k = 0 .. t``, to take off the composition), the maximum's bins and its mass beyond the last bin;
    None where ``Q(Y <= step)^t`` is negligible."""
    from .allocation_terms import cells

    Q0, A0 = cells(z, np.array([0.0, step]))
    q0 = float(Q0[0])
    if not q0 > 0.0 or t * math.log(q0) < math.log(1e-3 * tau):
        return None
    f0 = min(1.0, max(0.0, float(A0[0]) / (q0 * step)))
    a, b = q0 * (1.0 - f0) * (1.0 + 1e-12), q0 * f0 * (1.0 + 1e-12)
    k = np.arange(t + 1)
    with np.errstate(divide="ignore"):
        lw = special.gammaln(t + 1) - special.gammaln(k + 1) - special.gammaln(t - k + 1) + \
            (t - k) * np.log(a) + k * np.log(b)
    spread = np.exp(lw) * (1.0 - 1e-9)

    def logF(y):                          # log Q(Y <= y), y = e^((x - 1/2) / z^2) <=> x = z^2 log y + 1/2
        return special.log_ndtr((z * z * np.log(y) + 0.5) / z)

    # the add loss of max = m is log(t / m): bins from log(t / step) up to where F^t is negligible
    top = math.log(t) - math.log(step)
    lo_y = step
    while t * float(logF(np.array([lo_y]))[0]) > math.log(1e-3 * tau) and lo_y > 1e-300:
        lo_y *= 1e-2
    i0, i1 = math.floor(top / h), math.ceil((math.log(t) - math.log(lo_y)) / h)
    i = np.arange(i0, i1)
    ya = np.minimum(t * np.exp(-(i + 1.0) * h), step)        # the bin (i h, (i+1) h]: m in [ya, yb)
    yb = np.minimum(t * np.exp(-i * h), step)
    la, lb = t * logF(ya), t * logF(yb)
    P = np.where(yb > ya, np.exp(lb) * -np.expm1(np.minimum(la - lb, 0.0)), 0.0) * (1.0 + 1e-12)
    inf = math.exp(t * float(logF(np.array([t * math.exp(-i1 * h)]))[0])) * (1.0 + 1e-12)
    return spread, (i, P, P * np.exp(-(i + 1.0) * h)), inf


# -- the step -----------------------------------------------------------------------------------------

_STEPS = Memo(64)
#: the smallest truncation budget of one epoch (see :func:`epoch_step`)
MIN_TAU = 1e-280
#: the tilted composition is added where the untilted one's round-off (P-mass, all epochs) exceeds this
#: fraction of delta
TILT_FROM = 1e-2
#: the untilted compositions of a law (both directions read the upper law's)
_BASES = Memo(8)


def epoch_step(z: float, t: int, K: int, h: float, tau: float, direction: str, lower: bool, cap: int,
               delta: float) -> Step | None:
    """The discretised step of ``K`` epochs of balls-in-bins (``t`` steps an epoch, noise multiplier ``z``)
    on the loss grid ``h``: the upper step (connect-the-dots of an upper law) or, with ``lower``, the lower
    step (None where its construction fails); ``direction`` "remove" or "add"; every truncation within
    ``tau`` of mass; ``delta`` steers the composition's tilt only.  The pair is Chua et al.'s (AISTATS 2025,
    Sec. 3); the laws bound it in convex order (:mod:`.allocation_terms`).

    Args: ``z`` noise multiplier, ``t`` steps an epoch, ``K`` epochs composed, ``h`` loss grid, ``tau``
    truncation budget, ``direction`` "remove"/"add", ``lower``, ``cap`` memory cap (bytes), ``delta``.
    Returns: the :class:`~.shared.Step` (a block: no Hoeffding end), or None (a lower step that failed).
    Raises: OverCap over the memory cap or where no grid holds the loss."""
    # (a budget below 1e-280 -- delta near 1e-300 -- is taken as 1e-280: every truncation is charged in full,
    # so a larger budget only loosens the bound; below it the windows' Chernoff masses underflow)
    tau = max(tau, MIN_TAU)
    key = (z, t, K, h, tau, direction, lower, cap, delta)
    if key in _STEPS:
        return _STEPS[key]
    p = plan(z, t, h, tau)
    law = _law(z, t, p, tau, "upper" if not lower else ("calls" if direction == "remove" else "puts"))
    if law is None:
        return _STEPS.remember(key, None)
    J = len(law.sums)
    counts = [t - j for j in range(J + 1) if t - j >= 1]
    alpha = 1e-2 * tau / (1.0 + p.c1 * (J + 1))
    bkey = (z, t, p, tau, lower, direction if lower else None, alpha, cap)
    base = _BASES[bkey] if bkey in _BASES else _BASES.remember(
        bkey, _composed(law.bulk, counts, p.step, alpha, cap, 0.0, False))
    first = base[0]
    # the composition tilted toward the S the eps of K epochs reads, where the untilted one's round-off
    # there (in P-mass, K epochs) could matter at all beside delta
    i0, u, l, _ = first
    weight = np.maximum(1.0, (i0 + np.arange(u.size)) * p.step / t) if direction == "remove" else 1.0
    if K * float(np.sum((u - l) * weight)) > TILT_FROM * delta:
        tilted = _composed(law.bulk, [t], p.step, alpha, cap, _tilt(z, t, K, delta, law.bulk, p.step),
                           direction == "add")[0]
        first = _merged(first, tilted)
    if not lower:
        first = _capped(first, law.bulk, t)
    # the pieces: (i0, bulk law, its alias, largest tail sum, weight C(t, j) * tail mass * f, factor f)
    pieces = [(first[0], first[2] if lower else first[1], first[3], 0.0, 1.0, 1.0)]
    binom = special.gammaln(t + 1) - special.gammaln(np.arange(J + 1) + 1) - special.gammaln(t - np.arange(J + 1) + 1)
    for j in range(1, J + 1):
        y, q = law.sums[j - 1]
        tail = math.exp(float(binom[j])) * float(np.sum(q))
        ymax = float(np.max(y)) if y.size else 0.0
        if t - j < 1:                           # every term in the tail: the bulk's part is S = 0
            pieces.append((0, np.ones(1), 0.0, ymax, tail, 1.0))
        else:
            i0, u, l, a = base[j]
            pieces.append((i0, l if lower else u, a, ymax, tail, 1.0))
    extra, inf_bottom = None, 0.0
    if direction == "add" and not lower:
        got = _bottom(z, t, p.step, h, tau)
        if got is not None:
            spread, extra, inf_bottom = got
            i0, q, a, ymax, W, f = pieces[0]
            q = q.copy()
            lo_k, hi_k = max(0, i0), min(t + 1, i0 + q.size)
            if hi_k > lo_k:
                q[lo_k - i0:hi_k - i0] = np.maximum(q[lo_k - i0:hi_k - i0] - spread[lo_k:hi_k], 0.0)
            if i0 <= 0 < i0 + q.size:
                q[-i0] = 0.0                    # (with a term above the first cell, S >= step)
            pieces[0] = (i0, q, a, ymax, W, f)
    bins, at_zero = _binned([(i0, q, f) for i0, q, _, _, _, f in pieces], law.sums, t, p.step, h, direction,
                            not lower, extra)
    if bins is None or 10 * 8 * bins.P.size > cap:
        if bins is None:
            return _STEPS.remember(key, None)
        raise OverCap
    # the mass outside the windows (each side at most alpha per composition) and the wrapped-around mass
    # in them (at most alias), in P-mass: ``S / t`` times the Q-mass, ``S = y + s`` with ``s`` at most the
    # bulk's largest sum (or the window's top) and the tail atoms' first moment exact
    moments = [0.0] + [math.exp(float(binom[j])) * f * float(np.sum(law.sums[j - 1][0] * law.sums[j - 1][1]))
                       for j, (_, _, _, _, _, f) in enumerate(pieces) if j]
    if not lower:
        if direction == "remove":
            missing = sum(2.0 * alpha * (W * (1.0 + p.c1) + M / t) for (_, _, _, _, W, _), M in zip(pieces, moments))
            inf = law.p_inf + law.rest_p + missing
        else:
            inf = law.rest_q + at_zero + inf_bottom + sum(W * 2.0 * alpha for _, _, _, _, W, _ in pieces)
        st = upper_step(bins, h, K)
        step = Step(st.i0, st.mass, min(1.0 - 1e-16, inf), 1.0, K, block=2)
    else:
        b = _trimmed(bins)
        st = lower_step(b, h, K) if b is not None else None
        if st is None:
            return _STEPS.remember(key, None)
        charge = sum(a * ((W * max(1.0, (i0 + q.size) * p.step / t) + M / t) if direction == "remove" else W)
                     for (i0, q, a, _, W, _), M in zip(pieces, moments))
        step = Step(st.i0, st.mass, 0.0, 1.0, K, charge=charge, block=2)
    return _STEPS.remember(key, step)


def _trimmed(b: Bins):
    """``b`` without its empty bins at either end (a lower step fails on leading empty bins)."""
    nz = np.nonzero(b.P > 0.0)[0]
    if not nz.size:
        return None
    s0, s1 = int(nz[0]), int(nz[-1]) + 1
    return Bins(b.i0 + s0, b.P[s0:s1], b.Q[s0:s1], 0.0, 0.0)


def discretised_steps(events, h, tau, direction, cap, lower=False, delta=None, level=None):
    """:func:`~.discretise.discretised_steps` with every balls-in-bins event's step from
    :func:`epoch_step` (its lower step None where the construction fails) -- the steps every bracket,
    profile and window of the PLD accountant composes.

    Args: as :func:`~.discretise.discretised_steps` (``events``: ``(event, count)`` pairs).
    Returns: the upper steps, or ``(upper, lower)`` with ``lower``.
    Raises: OverCap over the memory cap."""
    from ..events import BallsInBinsGaussianEvent

    mine = [(e, k) for e, k in events if isinstance(e, BallsInBinsGaussianEvent)]
    rest = tuple((e, k) for e, k in events if not isinstance(e, BallsInBinsGaussianEvent))
    got = plain_steps(rest, h, tau, direction, cap, lower, delta, level) if rest else (([], []) if lower else [])
    ups, los = got if lower else (got, None)
    d = 1e-5 if delta is None else delta
    for e, k in mine:
        ups.append(epoch_step(e.noise_multiplier, e.steps, k, h, tau, direction, False, cap, d))
        if lower:
            los.append(epoch_step(e.noise_multiplier, e.steps, k, h, tau, direction, True, cap, d))
    return (ups, los) if lower else ups
