"""Balls-in-bins, part 1: one step's likelihood ratio, discretised from both sides in convex order.

One epoch of balls-in-bins puts the record in one uniformly random step of ``t``.  Its dominating pair
(:mod:`.allocation`) is ``P = (1/t) sum_i N(e_i, z^2 I_t)`` against ``Q = N(0, z^2 I_t)``, whose
likelihood ratio is the mean of ``t`` i.i.d. copies of ``Y = e^{(X - 1/2) / z^2}``, ``X ~ N(0, z^2)``
under ``Q`` (a log-normal of mean 1), one of them tilted by ``y`` under ``P``.  So the whole pair is
fixed by the law ``lambda`` of ``Y`` under ``Q``: its first moments are the ``P``-masses.

A pair built from a law ``lambda'`` instead of ``lambda`` dominates the true one (in the sense of
Blackwell: the true pair is a post-processing of it) when ``lambda <=_cx lambda'`` -- a mean-preserving
spread -- and is dominated by it when ``lambda' <=_cx lambda`` (a contraction): a kernel that maps
``lambda'`` to ``lambda`` keeping the first moment maps the ``y``-tilted law too, so applied to each of the
``t`` coordinates it maps the one epoch pair to the other.  Here:

* the **bulk** ``[0, c1]`` on the linear grid ``k * step``: the upper law spreads each cell's mass onto its
  two ends keeping its mean (connect-the-dots); the lower law lowers the call function
  ``C(u) = E(Y - u)_+`` at the grid points by the chord's gap and takes the greatest convex minorant
  (a convex function below ``C`` with the same value at 0 and the same mass is the call function of a
  contraction);
* the **tail** above ``c1`` on a geometric grid (few records reach it, each by a relative amount): the
  upper law spreads each cell onto its ends, the last cell ``(c_max, inf)`` onto ``c_max`` and an atom
  of ``P``-mass alone at infinity; the lower law merges each cell into its mean.

The masses are closed forms of the Gaussian pair (:class:`~.pairs.GaussianPair`): ``Q(cell)`` and
``E_Q[Y; cell] = P(cell)``.
"""

from __future__ import annotations

import math
import numpy as np
from scipy import special

from .convex import convexify
from .pairs import GaussianPair

__all__ = ["bulk_law", "tail_laws"]

_U = float(np.finfo(float).eps)


def cells(z: float, edges: np.ndarray):
    """``(Q, A)``: the ``Q``-mass and the first moment ``E_Q[Y; cell]`` of the cells ``(e_i, e_(i+1)]`` of
    ``Y`` (edges non-decreasing, ``>= 0``), each tail-accurate (the Gaussian pair's bins).

    Args:
        z: the noise multiplier, > 0.
        edges: the cell edges in ``Y`` (non-decreasing, >= 0; 0 is the edge at ``-inf`` loss).

    Returns:
        A tuple ``(Q, A)`` of float arrays, one entry per cell.
    """
    with np.errstate(divide="ignore"):
        le = np.log(np.asarray(edges, dtype=float))
    P, Q, _, _ = GaussianPair(z).bins(le)
    return np.asarray(Q, dtype=float), np.asarray(P, dtype=float)


def above(z: float, y: float):
    """``(Q(Y > y), E_Q[Y; Y > y])``.

    Args:
        z: the noise multiplier, > 0.
        y: the threshold, > 0.

    Returns:
        A tuple ``(Q(Y > y), E_Q[Y; Y > y])`` of floats.
    """
    x = z * z * math.log(y) + 0.5
    return float(special.ndtr(-x / z)), float(special.ndtr(-(x - 1.0) / z))


def bulk_law(z: float, step: float, n: int, which: str):
    """Atoms on ``k * step``, ``k = 0 .. n``, of a law above or below that of ``Y`` restricted to
    ``[0, n * step]`` (the Q-masses of ``Y``'s cells: :func:`cells`):

    * ``"upper"``: the spread (connect-the-dots): the same mass and mean, every convex expectation larger;
    * ``"calls"``: a law with lower call function ``E(Y - u)_+`` at every ``u`` and no more mass (what the
      remove direction's sums need: their profile is an increasing convex expectation);
    * ``"puts"``: a law with lower put function ``E(u - Y)_+`` and no more mass (the add direction:
      decreasing convex) -- the ``"calls"`` construction on the reflected law ``c1 - Y``.

    A lower law is never None (where the second-order construction fails, each cell is rounded down,
    resp. up: valid, looser).

    Args: ``z`` noise multiplier, ``step`` the grid, ``n`` cells, ``which`` "upper", "calls" or "puts".
    Returns: the ``n + 1`` Q-masses on ``k * step``.
    Raises: nothing (closed forms)."""
    Q, A = cells(z, step * np.arange(n + 1, dtype=float))
    k = np.arange(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(Q > 0.0, A / (Q * step) - k, 0.0)
    f = np.clip(np.nan_to_num(f), 0.0, 1.0)
    up = np.zeros(n + 1)
    up[:-1] += Q * (1.0 - f)
    up[1:] += Q * f
    if which == "upper":
        return up
    if which == "calls":
        return _lower_bulk(Q, f, up, step)
    puts = _lower_bulk(Q[::-1].copy(), (1.0 - f)[::-1].copy(), up[::-1].copy(), step)
    return None if puts is None else puts[::-1].copy()


#: at most this many vertices at the bottom of the bulk follow the least-lowering rule
_BOTTOM = 64


def _lower_bulk(Q, f, up, step):
    """:func:`_lowered` keeping the mean (``d_0 = 0``), or where that fails -- a grid as coarse as the law's
    mean, where no law on it keeps both the mean and lower calls -- lowering the bottom vertex too.  Built
    on the cells from the first to the last with mass (below and above, the call function is linear and
    0: nothing to lower; a cell of less than ``1e-300`` is dropped, which only lowers the calls)."""
    nz = np.nonzero(Q > 1e-300)[0]
    if not nz.size:
        return np.zeros(up.size)                         # (no mass: nothing to bound)
    a, b = int(nz[0]), int(nz[-1]) + 1                  # cells a .. b-1, vertices a .. b
    Qs = np.where(Q[a:b] > 1e-300, Q[a:b], 0.0)
    fs = f[a:b]
    us = np.zeros(b - a + 1)
    us[:-1] += Qs * (1.0 - fs)
    us[1:] += Qs * fs
    m = _lowered(Qs, fs, us, step, True)
    if m is None:
        m = _lowered(Qs, fs, us, step, False)
    if m is None:
        # a grid as coarse as the law (a hard edge whose cell holds much of the mass): each cell's mass at
        # its lower end -- rounded down, the calls only lower (first order, where the others are second)
        m = np.zeros(b - a + 1)
        m[:-1] = Qs * (1.0 - 1e-12)
    out = np.zeros(up.size)
    out[a:b + 1] = m
    return out


def _lowered(Q, f, up, step, keep_mean):
    """A law on the grid whose call function is below the bulk's and whose mass is not above it: the
    call function ``C`` lowered at every grid point by ``d_k`` and made convex (pool-adjacent-violators).

    ``C`` is convex; on the cell ``[k, k+1]`` (in units of ``step``) it lies above both end tangents,
    whose slopes differ by the cell's mass ``Q_k`` and which meet at the cell's mean ``k + f_k``.  The
    chord exceeds that pair of tangents by at most ``gap_k = Q_k step f_k (1 - f_k)`` (at the mean), so the
    chord lowered by ``d_k`` and ``d_(k+1)`` lies below ``C`` when ``(1 - f_k) d_k + f_k d_(k+1) >= gap_k``.
    ``d_0 = 0`` keeps the mean (``keep_mean``; else ``d_0 = gap_0``), ``d_n = 0`` the top (``C(c1) = 0``).
    From the bottom the vertices take the least the cells need (``d_(k+1) = (gap_k - (1 - f_k) d_k) / f_k``: the polyline then stays above the line
    ``C(0) - mass * u``, so no mass goes below 0 and the total is kept) until that is at least the next
    gap; above, ``d_k = max(gap_(k-1), gap_k)``; the top cell needs ``d_(n-1) >= Q_(n-1) step f_(n-1)``.
    The measure is the polyline's second difference, computed from the spread's atoms (no cancellation);
    where lowering made it concave, the greatest convex minorant replaces it (it is lower still, and keeps
    the end values).  Returns None if a check fails."""
    n = Q.size
    if n < 2:                               # one cell: its mass at its lower end (rounded down)
        return np.array([float(Q[0]) * (1.0 - 1e-12), 0.0])
    gap = Q * step * f * (1.0 - f)
    d = np.zeros(n + 2)                     # d[0..n], d[n+1] = 0 (beyond the top)
    # from the bottom: the least each cell needs, until that is at least the next cell's gap
    jb, dv = 0, 0.0
    if not keep_mean:
        d[0] = dv = float(gap[0])
    while keep_mean and jb < min(n - 1, _BOTTOM):
        fj = float(f[jb])
        req = max(0.0, (float(gap[jb]) - (1.0 - fj) * dv) / fj) if gap[jb] > 0.0 else 0.0
        jb += 1
        d[jb] = dv = req
        if req >= float(gap[jb]):
            break
    else:
        if keep_mean:
            d[jb] = max(d[jb], float(gap[jb]))   # (lowering a vertex more keeps the cells below it met)
    # from the top: C((n-1) step) = Q_(n-1) step f_(n-1) and C(c1) = 0 -- the vertex n-1 goes to 0 (the top
    # cell's mass moves below it: the polyline stays at or above 0) -- then down, the least each cell
    # needs, until that is at least the gap of the cell below
    jt = n - 1
    d[jt] = dv = float(Q[n - 1] * step * f[n - 1])
    while jt > max(jb, n - 1 - _BOTTOM):
        i = jt - 1
        fi = float(f[i])
        req = max(0.0, (float(gap[i]) - fi * dv) / (1.0 - fi)) if gap[i] > 0.0 else 0.0
        jt = i
        d[jt] = dv = max(req, d[jt]) if jt == jb else req
        if jt == jb or req >= float(gap[jt - 1]):
            break
    else:
        d[jt] = max(d[jt], float(gap[jt - 1]))
    k = np.arange(jb + 1, jt)
    d[k] = np.maximum(gap[k - 1], gap[k])
    d[n] = 0.0
    # no vertex below 0 (the call function is non-negative: C itself caps d), then, bottom to top, every
    # cell met -- by lowering its upper vertex up to its cap, else its lower one (lowering a vertex only
    # helps the cell on its other side, and both at their caps always meet a cell: the polyline is then 0
    # there, below the pair of tangents, which is not negative at the cell's mean)
    G = np.cumsum(Q[::-1])[::-1]                           # mass at or above each cell
    C = np.zeros(n + 2)
    C[:n] = step * (np.cumsum((Q * f)[::-1])[::-1] + np.append(np.cumsum(G[:0:-1])[::-1], 0.0))
    np.minimum(d, C, out=d)
    for k in np.nonzero((1.0 - f) * d[:n] + f * d[1:n + 1] < gap)[0]:
        k = int(k)
        fk = float(f[k])
        if (1.0 - fk) * d[k] + fk * d[k + 1] >= gap[k]:
            continue
        if fk > 0.0:
            d[k + 1] = min(C[k + 1], max(d[k + 1], (float(gap[k]) - (1.0 - fk) * d[k]) / fk))
        if (1.0 - fk) * d[k] + fk * d[k + 1] < gap[k] and fk < 1.0:
            d[k] = min(C[k], max(d[k], (float(gap[k]) - fk * d[k + 1]) / (1.0 - fk)))
    seg = (1.0 - f) * d[:n] + f * d[1:n + 1]
    if np.any(seg < gap * (1.0 - 1e-7) - 1e-300):
        return None
    m = up.copy()
    m[1:] -= (d[2:n + 2] - 2.0 * d[1:n + 1] + d[0:n]) / step
    m[0] = 0.0
    m[n] = 0.0                              # the top vertex: v_(n-1) = 0, nothing above
    if np.any(m[1:] < 0.0):
        fail = convexify(m, 0.0, max_pools=1024)
        if fail is not None or np.any(m[1:] < -64.0 * _U * float(np.sum(up))):
            return None
        np.maximum(m, 0.0, out=m)               # (round-off of the pooling; the final scaling covers it)
    total = float(np.sum(Q))
    above0 = float(np.sum(m[1:]))
    if above0 > total:                      # the minorant's slope at 0 is below -mass: scaled down, the
        m[1:] *= total / above0              # calls only get lower (a coarse grid, or rounding)
        above0 = float(np.sum(m[1:]))
    # what the minorant leaves of the mass goes to 0 (its slope at 0 is at least -mass: no more than the
    # mass above 0), less the sums' rounding
    m[0] = max(0.0, total - above0 - 4.0 * n * _U * total)
    return m * (1.0 - 1e-12)


def tail_laws(z: float, c1: float, ratio: float, c_max: float, shift: float = 0.0):
    """``(upper, lower)`` tail atoms above ``c1``: ``(y, q)`` pairs on the grid ``(c1 + shift) ratio^i - shift``
    up to ``c_max`` -- geometric in ``y + shift`` (``shift = t``: a tail term's share of the epoch's loss is
    ``log(y + S_rest)``, ``S_rest ~ t``) -- (upper: each cell spread onto its ends; the rest above
    ``c_max`` onto ``c_max`` with its excess ``P``-mass at infinity, returned as third item) and the cells'
    means (lower).

    Args: ``z`` noise multiplier, ``c1`` the bulk's end, ``ratio`` > 1, ``c_max`` the tail's end, ``shift``.
    Returns: ``((y, q, p_inf), (y, q))``."""
    M = max(1, math.ceil(math.log((c_max + shift) / (c1 + shift)) / math.log(ratio)))
    edges = (c1 + shift) * ratio ** np.arange(M + 1, dtype=float) - shift
    edges[0] = c1
    edges[-1] = max(edges[-1], c_max)
    Q, A = cells(z, edges)
    qa, aa = above(z, float(edges[-1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(Q > 0.0, A / Q, edges[:-1])
    mean = np.clip(mean, edges[:-1], edges[1:])
    w = edges[1:] - edges[:-1]
    frac = np.clip((mean - edges[:-1]) / w, 0.0, 1.0)
    uq = np.zeros(M + 1)
    uq[:-1] += Q * (1.0 - frac)
    uq[1:] += Q * frac
    uq[-1] += qa
    p_inf = max(0.0, aa - float(edges[-1]) * qa)
    up = (edges.copy(), uq * (1.0 + 1e-12), p_inf * (1.0 + 1e-12) + 1e-300)
    keep = Q > 0.0
    ly, lq = mean[keep], Q[keep]
    if qa > 0.0:
        ly = np.append(ly, max(aa / qa, float(edges[-1])))
        lq = np.append(lq, qa)
    return up, (ly, lq * (1.0 - 1e-12))


def pooled(y: np.ndarray, q: np.ndarray, lo: float, ratio: float, upper: bool, shift: float = 0.0):
    """Atoms ``(y, q)`` (``y >= lo``) on the grid ``(lo + shift) ratio^i - shift``: spread onto each cell's
    ends keeping mass and mean (``upper``: a spread), or merged into each cell's mean (a contraction).

    Args:
        y: the atoms' positions (``>= lo``).
        q: the atoms' masses (non-negative; zero masses are dropped).
        lo: the grid's first point (``lo + shift > 0``).
        ratio: the grid's geometric ratio, > 1.
        upper: spread (True) or merge (False).
        shift: the grid's offset.

    Returns:
        A tuple ``(y, q)`` of float arrays: the pooled atoms (masses scaled by ``1 + 1e-13`` for a
        spread, ``1 - 1e-13`` for a merge).
    """
    if shift:
        v, pq = pooled(y + shift, q, lo + shift, ratio, upper)
        return v - shift, pq
    keep = q > 0.0
    if not np.all(keep):
        y, q = y[keep], q[keep]
    if not y.size:
        return y, q
    lr = math.log(ratio)
    i = (np.log(y) - math.log(lo)) * (1.0 / lr)
    np.floor(i, out=i)
    i = np.maximum(i, 0.0).astype(np.int64)
    m = int(i.max()) + 2
    g = lo * np.exp(lr * np.arange(m + 1, dtype=float))
    if upper:
        a = g[i]
        fr = np.clip((y - a) / (g[i + 1] - a), 0.0, 1.0)
        qf = q * fr
        out = np.bincount(i, weights=q - qf, minlength=m)
        out[1:] += np.bincount(i, weights=qf, minlength=m)[:-1]
        nz = out > 0.0
        return g[:m][nz], out[nz] * (1.0 + 1e-13)
    mq = np.bincount(i, weights=q, minlength=m)
    my = np.bincount(i, weights=q * y, minlength=m)
    nz = mq > 0.0
    return my[nz] / mq[nz], mq[nz] * (1.0 - 1e-13)


def convolved(a, b, lo: float, ratio: float, upper: bool, shift: float = 0.0):
    """The law of the sum of two independent atom sets ``a = (y, q)``, ``b``, put on the grid of
    :func:`pooled` from ``lo``.

    Args:
        a: the first atom set ``(y, q)``.
        b: the second atom set ``(y, q)``.
        lo: the grid's first point.
        ratio: the grid's geometric ratio, > 1.
        upper: spread (True) or merge (False), as :func:`pooled`.
        shift: the grid's offset.

    Returns:
        A tuple ``(y, q)`` of float arrays, as :func:`pooled`.
    """
    y = np.add.outer(a[0], b[0]).ravel()
    q = np.multiply.outer(a[1], b[1]).ravel()
    return pooled(y, q, lo, ratio, upper, shift)
