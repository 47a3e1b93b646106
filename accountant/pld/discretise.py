"""Privacy-loss distributions, part 2: each event's dominating pair discretised on a grid of width h
-- the upper (connect-the-dots) rounding and the lower rounding with its convex pooling (:mod:`.convex`), the
symmetrised add/remove step (the decayed suffix sums they read: :mod:`.decay`).  Pairs: :mod:`.pairs`;
composition: :mod:`.compose`; brackets: :mod:`.bracket`; the method and its references: :mod:`.pld`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..caches import SizedMemo
from .convex import convexify
from .decay import decay_block, decayed_rounding, decayed_suffix
from .lossdist import q_mass
from .pairs import Pair, dominating_pairs
from .shared import OverCap, Step

__all__ = []

@dataclass
class Bins:
    """True masses of one step's loss on the bins ``(j h, (j+1) h]``, ``j = i0 .. i0+n-1``.

    Attributes:
        i0: the grid index of the first bin.
        P: the P-masses of the bins (a float array).
        Q: the Q-masses of the bins (a float array of the same length).
        p_below: ``P(L <= i0 h)``.
        p_above: ``P(L > (i0 + n) h)``.
    """

    i0: int
    P: np.ndarray
    Q: np.ndarray
    p_below: float    # P(L <= i0 h)
    p_above: float    # P(L > (i0 + n) h)


#: the last few steps' bins (a bracket's upper and lower steps, and a calibration's report
#: after its search, discretise the same step on the same grid): 128 MB at most
_BINS = SizedMemo(128 << 20, lambda b: b.P.nbytes + b.Q.nbytes)


def bins_of(pair: Pair, h: float, tau: float, cap_bytes: int, cut_mass=None, level=None) -> Bins:
    """The pair's true bins on the grid ``h`` over its loss range (tails of mass ``tau``; cut at
    ``+-level`` where the mass beyond is at most ``cut_mass``), remembered.

    Args:
        pair: the dominating pair (:class:`~.pairs.Pair`).
        h: the grid step, > 0.
        tau: the largest P-mass of each tail beyond the loss range, > 0.
        cap_bytes: the memory the step may use, in bytes.
        cut_mass: the largest P-mass a cut at ``+-level`` may drop (None: never cut).
        level: the cut level (None: ``LOSS_CUT``).

    Returns:
        The :class:`Bins` (shared with the cache: not to be modified).

    Raises:
        OverCap: if the loss range is not finite, its grid indices exceed ``2^60``, or its bins
            would take more than ``cap_bytes``.
    """
    lo, hi = pair.loss_range(tau, cut_mass, level)
    # (a loss range that is not finite, or whose grid indices leave int64 -- noise so small that
    # the losses are past 1e18 grid steps -- is over the cap too: the PLD cannot hold it, RDP answers)
    if not (math.isfinite(lo) and math.isfinite(hi)) or max(abs(lo), abs(hi)) / h > 2.0 ** 60 \
            or 10 * 8 * (hi - lo) / h > cap_bytes:
        raise OverCap
    key = (pair, h, tau, lo, hi)
    b = _BINS.recall(key)
    if b is not None:
        return b
    i0 = math.floor(lo / h) - 1
    i1 = math.ceil(hi / h) + 1
    edges = np.arange(i0, i1 + 1, dtype=float) * h
    P, Q, p_below, p_above = pair.bins(edges)
    # (a pair whose masses are not numbers -- its inverse overflowed, noise past ~1e154 -- is not
    # discretised: over the cap, another route answers; NaN masses read as no mass gave eps = 0)
    if not (np.isfinite(P).all() and np.isfinite(Q).all() and math.isfinite(p_below) and math.isfinite(p_above)):
        raise OverCap
    return _BINS.remember(key, Bins(i0, P, Q, p_below, p_above))      # (never modified by its users)


def upper_step(b: Bins, h: float, count: int) -> Step:
    """Connect-the-dots: each bin's mass is split between its two grid points so that the
    ``Q``-mass is kept (pessimistic; the tails go to the lowest grid point and to +infinity).

    Args:
        b: the step's true bins.
        h: the grid step, > 0.
        count: how many times the step is composed, >= 1.

    Returns:
        The upper :class:`~.shared.Step` (``n + 1`` atoms from ``b.i0``).
    """
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
    return Step(i0, m, b.p_above, b.p_below + b.p_above, count)


def _rounded_step(pair: Pair, h: float, tau: float, count: int, cap_bytes: int) -> Step:
    return upper_step(bins_of(pair, h, tau, cap_bytes), h, count)


def lower_step(b: Bins, h: float, count: int) -> Step | None:
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

    Args:
        b: the step's true bins.
        h: the grid step, > 0.
        count: how many times the step is composed, >= 1.

    Returns:
        The lower :class:`~.shared.Step`, or None (no bins, or the repair cannot be paid for).
    """
    P = b.P
    Q = b.Q
    n = P.size
    if n == 0:
        return None
    try:
        eh1 = math.expm1(h)
    except OverflowError:                         # a grid step past e^709: none on it (the caller's other bound)
        return None
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
    Bq[:-1] = decayed_suffix(Pe * inv_lam, h)
    terms = -math.expm1(-h) * (rho + Bq[1:])
    f = np.zeros(n + 1)
    # (the suffix sums in extended precision where the platform has it: their rounding, n terms,
    # is paid for below by scaling the whole measure down -- mass lost at every step, K times over;
    # in doubles, n = 2.4e6 points and K = 1e6 steps lost 5e-4 of the composed mass)
    f[:-1] = np.cumsum(terms[::-1].astype(np.longdouble))[::-1]
    gp = np.zeros(n + 2)
    gp[1:-1] = gap                                # gp[i] = gap_(i-1)
    plain = np.maximum(gp[:-1], gp[1:])           # d_i = max(gap_(i-1), gap_i), i = 0..n
    # the bottom rule first; where its polyline cannot be made a measure, the plain rule.  (A
    # bin holding nearly all the mass at its lower end -- an atom on a grid point, see
    # :func:`~.shared.aligned_grid` -- has frac ~ 0 and gap ~ 0: the bottom rule, which keeps its lower
    # vertex in place, must then lower the upper one by ~h times that mass, a concave kink the
    # thin tail above cannot repay; the plain rule lowers both by the gap, ~0.)
    best = None
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
            try:
                m, fail = _lower_masses(Pe, rho, d, f, int(J), h)
            except OverflowError:                 # a chord across more than e^709 in t: not repaired here
                break
            if m is None and fail < J - 64:
                break               # a kink far below the top: closing lower down does not help
            if m is not None:
                # below its lowest atom the measure's profile is a line below f's (d_0 >= 0):
                # scaled down by the round-off of f (the decayed sums B, the n-term suffix sum
                # in extended precision, a few roundings per term), so that it stays below f in
                # floats
                m *= 1.0 - _F_ROUNDING(n, h)
                # the bottom rule's measure unless it closes below the plain rule's: an atom on
                # the bottom grid point (frac ~ 0, an anchored grid's edge atom) makes the bottom
                # rule lower the vertex above by ~h times its mass, and the measure then closes
                # at J = 1 -- every loss above the atom dropped
                if best is None or int(J) > 2 * best[0]:
                    best = (int(J), m)
                break
        if best is not None and 2 * best[0] >= n:
            break
    if best is None:
        return None
    m = best[1]
    if b.p_above > 0.0:
        # the P-mass above the grid (a cut tail: :data:`~.pairs.LOSS_CUT`) as an atom at the grid's
        # top: losses moved down, so its profile is below the tail's -- the sum stays below f
        m = np.concatenate((m, np.zeros(max(0, n + 1 - m.size))))
        m[n] += b.p_above
    return Step(b.i0, m, 0.0, 0.0, count)


def _F_ROUNDING(n: int, h: float) -> float:
    """Relative rounding bound of the profile values ``f`` of :func:`lower_step`: the decayed
    suffix sums (:func:`decayed_rounding`), the ``n``-term suffix sum in ``np.longdouble``
    (``n`` of its epsilons: 80-bit on x86, a double elsewhere), and 16 double roundings per term,
    all twice over."""
    u = float(np.finfo(float).eps)
    return 2.0 * (decayed_rounding(n, h) + n * float(np.finfo(np.longdouble).eps) + 16 * u)


#: at most this many vertices at the bottom of a lower step are lowered by the weighted rule
_BOTTOM_STEPS = 64


def _bottom(d, gap, frac, span) -> None:
    """Lower the bottom vertices of :func:`lower_step` as little as the segments allow (in place).

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


def _lower_masses(Pe, rho, d, f, J, h):
    """``(atoms, None)`` of :func:`lower_step` closed at grid index ``J``, or ``(None, j)`` if
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
        fail = convexify(m, h)
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
    B = decayed_suffix(m, h)
    # delta(e_j) = sum_{s>j} m_s (1 - e^{(j-s)h}) = A_{j+1} - e^{-h} B_{j+1}
    out = np.zeros_like(m)
    out[:-1] = A[1:] - math.exp(-h) * B[1:]
    return out


def _symmetrised(a: Step, b: Step, h: float) -> Step:
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
    # (the profiles from loss 0 up, where the guard reads them: each a function of the masses above; a
    # pair whose losses lie millions of grid steps apart held a dozen arrays of the whole grid here)
    Da = _profile(ma[j0:], h) + a.inf
    Db = _profile(mb[j0:], h) + b.inf
    # float noise, and the tails each discretisation charges differently (as +infinity)
    noise = 1e-9 + 64 * ma.size * np.finfo(float).eps + 2.0 * (a.bad + b.bad + a.inf + b.inf)
    if float(np.max(Db - Da)) > noise:
        raise RuntimeError("the add profile exceeds the remove profile at some eps >= 0 "
                           "(a programming error: please report it)")
    del Da, Db
    m = np.zeros(i1 - i0)
    m[j0 + 1:] = ma[j0 + 1:]
    m[:j0] = mb[:j0]
    m[j0] = max(0.0, 1.0 - a.inf - float(np.sum(m[j0 + 1:])) - float(np.sum(m[:j0])))
    return Step(i0, m, a.inf, a.bad + b.bad, a.count)


def _symmetrised_bins(r: Bins, a: Bins) -> Bins:
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
    na = max(0, min(a.P.size, -a.i0))              # a's bins below 0 (none when all its P-mass
                                                   # sits above 0: tiny noise, q near 1)
    P[a.i0 - i0:a.i0 - i0 + na] = a.P[:na]
    Q[a.i0 - i0:a.i0 - i0 + na] = a.Q[:na]
    atom = max(0.0, 1.0 - float(np.sum(P)) - r.p_above - a.p_below)
    P[j0 - 1] += atom
    Q[j0 - 1] += atom
    # (r's mass above its grid is an atom at the top in a lower step: only where that top is r's own)
    return Bins(i0, P, Q, a.p_below, r.p_above if i1 == r.i0 + r.P.size else 0.0)


def edge_anchor(pair: Pair, h: float):
    """``(g, P_edge)``: the anchor of a Poisson pair's grid ``g + j h`` (see
    :func:`_anchored_lower_step`) and the P-mass of its edge cell, merged into one atom at ``g``;
    None where the pair has no edge or no anchor is found.

    Args:
        pair: the dominating pair (a remove or add pair with ``0 < q < 1``).
        h: the grid step, > 0.

    Returns:
        A tuple ``(g, P_edge)`` of floats, or None.
    """
    edge = pair.edge
    if edge is None:
        return None
    sign = -1.0 if pair.decreasing else 1.0
    x_of = pair.x_of
    # the anchor g: at most the Q/P-mean point of the cell that ends one grid step from it,
    # (edge, g + h] for remove, [g - h, edge) for add -- then the edge bin holds exactly that
    # cell, merged into one atom at its grid end (no chord gap).  The mean point of the cell
    # ending at b moves little with b: iterate g <- point(g +- h) to its fixed point, step a
    # little below it, and check
    g = edge
    for _ in range(60):
        ng = pair.cell_point(x_of(g + sign * h))
        if not math.isfinite(ng):
            return None
        done = abs(ng - g) <= 1e-12 * h
        g = ng
        if done:
            break
    step_down = 1e-12 * h + 1e-15 * abs(g)
    for _ in range(8):
        cand = g - step_down
        if pair.cell_point(x_of(cand + sign * h)) >= cand:
            g = cand
            break
        step_down *= 16.0
    else:
        return None
    xb = x_of(g + sign * h)
    return g, float(pair.mass(pair.p_comps, -np.inf, xb))      # the cell: x below xb


def _anchored_lower_step(pair: Pair, h: float, tau: float, count: int, cap_bytes: int,
                         cut_mass: float | None = None, level: float | None = None) -> Step | None:
    """The lower step of a Poisson pair on the grid anchored at its edge atom (None where the pair
    has no edge, or the construction fails).

    With little noise nearly all of a subsampled step's mass sits within a tiny offset of the
    loss's hard edge (``log(1 - q)`` for remove, ``-log(1 - q)`` for add): an atom of most of
    the mass with a thin tail.  On the grid ``j h`` that atom lies mid-bin, and every lower
    measure on that grid must, in effect, round it down -- ~its offset from the grid point, per
    step, ``K`` times over (the lower end of a ``q = 2.8e-4``, 181-step bracket stayed ~1e-3
    below the upper one down to ``h = 1.6e-4``).  Here the *edge cell* -- the losses from the
    edge to within ``h`` of it -- is merged into one atom at its ``Q/P``-mean point ``g``
    (:meth:`~.pairs.RemovePair.cell_point`; Jensen: ``(1 - t e^-L)_+`` is convex in ``e^-L``,
    so the merged profile is lower), and the grid is anchored there: atoms at ``g + j h``.  The
    cell's far end is ``g + h`` (add: ``g - h``), ``g`` just below the fixed point of that relation, so
    the bin next to the edge holds that atom at its grid end and nothing else (its profile has no
    chord gap: no vertex at the bottom is lowered, which would shift every loss below it).  The rest is :func:`lower_step` on the anchored bins (losses relative to ``g``: ``Q``
    scaled by ``e^g``).  The step carries ``shift = g``; a composition of ``K`` such steps is
    read at ``eps - K g``."""
    if pair.edge is None:
        return None
    lo, hi = pair.loss_range(tau, cut_mass, level)
    if not (math.isfinite(lo) and math.isfinite(hi)) or 10 * 8 * (hi - lo) / h > cap_bytes:
        raise OverCap
    sign = -1.0 if pair.decreasing else 1.0
    anchor = edge_anchor(pair, h)
    if anchor is None:
        return None
    g, P_edge = anchor
    Qs_edge = P_edge                                           # its atom sits at g: ratio 1
    with np.errstate(over="ignore"):
        eg = math.exp(g)
    if sign > 0:                                  # remove: bins (g + k h, g + (k+1) h], k >= 1
        k1 = max(2, math.ceil((hi - g) / h) + 1)
        P, Q, _, above = pair.bins(g + h * np.arange(1, k1 + 1, dtype=float))
        P = np.concatenate(([P_edge], P))
        Qs = np.concatenate(([Qs_edge], Q * eg))
        i0 = 0
    else:                                         # add: bins (g + k h, g + (k+1) h], k <= -2
        i0 = min(-2, math.floor((lo - g) / h) - 1)
        P, Q, _, _ = pair.bins(g + h * np.arange(i0, 0, dtype=float))
        P = np.concatenate((P, [P_edge]))
        Qs = np.concatenate((Q * eg, [Qs_edge]))
        above = 0.0                               # (the add pair's loss ends at its edge)
    step = lower_step(Bins(i0, P, Qs, 0.0, above), h, count)
    if step is not None:
        step.shift = g
    return step


def _atoms_lower_step(pair, b: Bins, h: float, count: int) -> Step | None:
    """The lower step of a pair with atoms (:mod:`.lossdist`): the atoms that sit on grid points kept
    exactly, :func:`lower_step` of the rest (None where it has no rest and no atom is on the grid).

    The profile is linear in the measure, so a lower measure of the rest plus the exact atoms is
    below the whole; :func:`lower_step` alone closes its top one grid point below an atom at the
    top of the loss (the profile is 0 there): eps one step low, an O(h) lower end."""
    on = []                           # (grid index, mass) of the atoms at or just above j h
    P, Q = b.P.copy(), b.Q.copy()
    L, ps = pair.atom_arrays()
    js = np.floor(L / h + 1e-9)
    near = (js * h <= L) & (L <= js * h + 1e-9 * h) & (b.i0 < js) & (js <= b.i0 + b.P.size)
    for l, p, j in zip(L[near].tolist(), ps[near].tolist(), js[near].tolist()):
        j = int(j)
        # the bin that holds it: ((j-1) h, j h], or the next one where the pair's own masses (a sampled
        # pair's inverted loss) put it just above j h -- taken from a bin only where the bin holds it
        i = next((i for i in (j - b.i0 - 1, j - b.i0) if i < P.size and P[i] >= p * (1.0 - 1e-9)), None)
        if i is None:
            continue
        P[i] = max(0.0, P[i] - p)     # (the atom is moved down to j h by at most 1e-9 h: lower)
        Q[i] = max(0.0, Q[i] - q_mass(p, l))
        on.append((j, p))
    if not on:
        return None
    rest = Bins(b.i0, P, Q, b.p_below, b.p_above)
    if float(P.sum()) + b.p_above > 1e-300:
        st = lower_step(rest, h, count)
        if st is None:
            return None
    else:
        st = Step(b.i0, np.zeros(b.P.size + 1), 0.0, 0.0, count)
    m = np.concatenate((st.mass, np.zeros(max(0, b.P.size + 1 - st.mass.size))))
    for j, p in on:
        m[j - st.i0] += p * (1.0 - 1e-12)        # (a margin for the rounding of the masses)
    return Step(st.i0, m, 0.0, 0.0, count)


#: lower steps of single Poisson pairs are built on the grid anchored at the edge atom
ANCHORED = True


def discretised_steps(events, h, tau, direction, cap, lower=False, delta=None, level=None):
    """The discretised steps: upper (connect-the-dots) and, with ``lower``, lower steps (None
    in the list where the lower construction failed).  Each event's dominating pairs come from
    :func:`~.pairs.dominating_pairs`; two pairs (sampling without replacement) are
    symmetrised.  With ``delta`` (a bracket of eps(delta)) an event of ``k`` steps has its losses cut at
    ``+-level`` (default LOSS_CUT; :func:`~.grid.cut_level`) where the mass beyond is at most ``delta / k``.

    Args:
        events: checked ``(event, count)`` pairs.
        h: the grid step, > 0.
        tau: the largest P-mass of each step's tails beyond its grid, > 0.
        direction: ``"remove"`` or ``"add"``.
        cap: the memory one step may use, in bytes.
        lower: also build the lower steps.
        delta: the target delta of the bracket, or None (no cut).
        level: the cut level (None: ``LOSS_CUT``).

    Returns:
        The list of upper steps, or ``(upper_steps, lower_steps)`` with ``lower``.

    Raises:
        OverCap: if a step's bins would exceed ``cap`` (from :func:`bins_of`).
        InputError: if an event has no dominating pair.
    """
    ups, los = [], []
    for ev, k in events:
        pairs = dominating_pairs(ev, direction)
        if not pairs:
            continue
        cut = None if delta is None else delta / k
        bins = [bins_of(pr, h, tau, cap, cut, level) for pr in pairs]
        if len(bins) == 1:
            ups.append(upper_step(bins[0], h, k))
            b = bins[0]
        else:
            ups.append(_symmetrised(*(upper_step(bi, h, k) for bi in bins), h))
            b = _symmetrised_bins(*bins) if lower else None
        if lower:
            a = _anchored_lower_step(pairs[0], h, tau, k, cap, cut, level) if ANCHORED and len(pairs) == 1 else None
            if a is None and len(pairs) == 1 and hasattr(pairs[0], "atoms"):
                a = _atoms_lower_step(pairs[0], b, h, k)
            los.append(a if a is not None else lower_step(b, h, k))
    return (ups, los) if lower else ups
