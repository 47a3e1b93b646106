"""Privacy-loss distributions, part 3b: many steps of one Poisson pair composed in blocks, so that
the cost of a million steps does not grow with the grid a million steps need.

Why.  Discretised on a grid ``h``, each step's loss is moved by up to ``h``; the bracket of ``K``
composed steps is ``O(K h^2)`` wide while the composed loss spans ``~sqrt(K)`` per-step spreads, so
a uniform grid holds ``O(K)`` points at a fixed width (``q = 1e-4``, ``K = 1e6``: 1.6 million points
a step, ~2 s a composition).  Here ``m`` steps are composed on a grid ``M`` times finer,
``h_f = h / M`` (``M ~ sqrt(m)``), and the block is put back on the grid ``h``, where ``K / m``
blocks are composed: the error is ``K h_f^2 + (K / m) h^2 ~ 2 K h^2 / m`` -- ``m / 2`` times less
than ``K`` steps on the grid ``h`` -- while both grids hold few points.

Only the bulk of a step fits the fine grid cheaply (a Poisson step's loss is mostly within a few
``q`` of 0; its rare large losses span ~3).  So the step's measure (its loss under ``P``) is split at
a cut ``c``: ``b`` the losses up to ``c`` (the bulk), ``t`` the rest (the tail).  By bilinearity
``(b + t)^K = sum_j C(K, j) b^(K-j) t^j``, and with ``K = n m + r`` the terms ``j <= J`` are
``(b^m)^n * X``, ``X = sum_(j<=J) C(K, j) b^(r-j) t^j``: the block ``b^m`` (one tilted FFT on the fine
grid, put on the grid ``h``) composed ``n`` times, beside one measure ``X`` on the grid ``h`` (the
other ``r`` steps and every term in which ``j`` of all ``K`` steps fall into the tail;
:func:`~.binomial.binomial_composition`).  ``J`` is the fewest terms whose binomial rest is at most
``1e-7 delta``; the rest goes to infinity (upper) or is dropped (lower).

Soundness rests on the profile ``f(eps) = int (1 - e^(eps - l))_+ dmu(l)`` of each measure:
composition is monotone in each factor's profile (``f_(A*B)(eps) = int f_A(eps - l) dmu_B(l)``),
and profiles add over a sum of measures.  The upper steps are built from measures whose profiles
are at or above the true ones -- connect-the-dots on the fine grid (:func:`~.discretise.upper_step`),
each fine atom split again between its two neighbours on the grid ``h`` keeping its ``P``- and
``Q``-mass (a split only raises the profile), the FFT's round-off bound added bin by bin -- and
the lower steps from measures whose profiles are at or below them: the anchored lower step on
the fine grid (:func:`~.discretise._anchored_lower_step`'s construction), round-off taken
off, then :func:`~.discretise.lower_step` on the grid ``h`` applied to the block's own bins.
What a window wraps around (at most its Chernoff ``alpha``) is a constant in profile: it rides
along as the step's :attr:`~.shared.Step.charge`, which every composition charges.  A block's
atoms are not within ``h`` of the true loss, so no Hoeffding end is read from an upper block.
The chain: pairs <- discretise <- compose <- binomial <- blocks <- bracket <- pld.
"""

from __future__ import annotations

import math

import numpy as np

from ..caches import Memo
from .binomial import binomial_composition
from .compose import compose_powers, delta_tilt, log_mgfs
from .allocation import discretised_steps
from .discretise import Bins, bins_of, edge_anchor, lower_step, upper_step
from .pairs import AddPair, Pair, RemovePair, dominating_pairs
from .shared import ALIAS, OverCap, Step

__all__ = ["BLOCKS", "BLOCK_MIN"]

#: the fewest steps of one pair composed in blocks (a module setting: the soundness fuzz lowers it
#: to put blocks under its oracles)
DEFAULT_BLOCK_MIN = 1 << 14
BLOCK_MIN = DEFAULT_BLOCK_MIN
#: the most binomial terms of ``X`` (the cut is raised until the rest fits)
_MAX_TERMS = 16
#: the candidate cuts ``c`` of a step's bulk, smallest first (rounded up to the grid)
_CUTS = (0.01, 0.02, 0.05, 0.1)
#: the share of ``ALIAS * delta`` the blocks' and ``X``'s wrapped-around mass may take, and of
#: ``delta`` the binomial rest beyond ``J`` (charged in full: it moves eps by ~1e-8 relative)
_BLOCK_ALIAS = 0.5
_REST = 1e-7


#: compose the many steps of one Poisson pair in blocks (off: every bracket uses the plain steps)
BLOCKS = True


def bracket_steps(ev, h, tau, direction, cap, delta, lower=False, level=None):
    """The discretised steps of a bracket: :func:`~.discretise.discretised_steps`, but the
    events with :data:`BLOCK_MIN` or more steps of one Poisson pair composed in blocks
    (:func:`blocked_steps`) where those apply.  With ``lower``: the lower steps only.

    Args:
        ev: checked ``(event, count)`` pairs (``events`` there).
        h, tau, direction, cap: as :func:`~.discretise.discretised_steps`.
        delta: the target delta of the bracket.
        lower: build the lower steps instead of the upper ones.
        level: the cut level of the plain steps (None: ``LOSS_CUT``).

    Returns:
        A list of :class:`~.shared.Step` (lower steps may be None where their construction failed).

    Raises:
        OverCap: if a plain step's bins would exceed ``cap``.
    """
    out, plain = [], []
    for e, k in ev:
        pairs = dominating_pairs(e, direction) if BLOCKS else ()
        bl = blocked_steps(pairs[0], h, tau, k, delta, cap, lower) if len(pairs) == 1 else None
        if bl is None:
            plain.append((e, k))
        else:
            out.extend(bl)
    if plain:
        got = discretised_steps(tuple(plain), h, tau, direction, cap, lower, delta, level)
        out = out + (got[1] if lower else got)
    return out


def block_plan(K: int):
    """``(n_blocks, m, M, rest)``: ``K = n_blocks m + rest`` steps in blocks of ``m ~ sqrt(K)``
    (a power of 4 apart from the rounding that keeps ``rest < n_blocks``), ``M = sqrt`` of that
    power of 4 the fine grid's refinement; None below :data:`BLOCK_MIN`.

    Args:
        K: the number of steps.

    Returns:
        A tuple ``(n_blocks, m, M, rest)`` of ints, or None when ``K < BLOCK_MIN``.
    """
    if K < BLOCK_MIN:
        return None
    j = max(2, round(math.log(K) / math.log(4.0) / 2.0))
    m0 = 4 ** j
    nb = max(1, round(K / m0))
    m = K // nb
    return nb, m, 2 ** j, K - nb * m


_BLOCKS = Memo(16)


def blocked_steps(pair: Pair, h: float, tau: float, K: int, delta: float, cap: int, lower: bool):
    """The steps (grid ``h``) of ``K`` steps of ``pair`` composed in blocks: the block (``count =
    n_blocks``) and ``X`` (count 1; see the module); upper steps, or with ``lower`` lower steps.
    None where blocks do not apply (too few steps, not a Poisson pair, no cut with few terms, a
    lower construction that fails) -- the caller then uses the plain steps.

    Args:
        pair: the dominating pair.
        h: the grid step, > 0.
        tau: the largest P-mass of each step's tails beyond its grid, > 0.
        K: the number of steps.
        delta: the target delta of the bracket.
        cap: the memory a composition may use, in bytes.
        lower: build lower steps instead of upper ones.

    Returns:
        A list of :class:`~.shared.Step` (the block and ``X``), or None (remembered).
    """
    plan = block_plan(K)
    if plan is None or not isinstance(pair, (RemovePair, AddPair)) or not 0.0 < pair.q < 1.0:
        return None
    key = (pair, h, tau, K, delta, cap, lower)
    if key in _BLOCKS:
        return _BLOCKS[key]
    try:
        out = _blocked(pair, h, tau, K, delta, cap, lower, plan)
    except OverCap:
        out = None
    return _BLOCKS.remember(key, out)


def _blocked(pair, h, tau, K, delta, cap, lower, plan):
    nb, m, M, rest = plan
    hf = h / M
    coarse = bins_of(pair, h, tau, cap)
    cut = _cut(coarse, h, K, delta)
    if cut is None:
        return None
    jc, J = cut
    lam = delta_tilt(log_mgfs([upper_step(coarse, h, K)], h)[0], math.log(delta))
    if rest < max(J, 1):                    # the rest composes the tail's terms: it needs J steps
        nb, rest = nb - 1, rest + m
        if nb < 1:
            return None
    budget = _BLOCK_ALIAS * ALIAS * delta
    if lower:
        return _lower_steps(pair, h, hf, M, jc, J, nb, m, rest, K, tau, lam, budget, cap)
    return _upper_steps(pair, h, hf, M, jc, J, nb, m, rest, K, tau, lam, budget, cap)


def _cut(coarse: Bins, h: float, K: int, delta: float):
    """``(jc, J)``: the smallest cut ``c = jc h`` of :data:`_CUTS` for which at most ``J <=
    _MAX_TERMS`` of the ``K`` steps fall beyond it but with probability ``_REST * delta``; None if
    none."""
    from scipy import special

    i = coarse.i0 + np.arange(coarse.P.size)          # bin (i h, (i + 1) h]
    total = float(np.sum(coarse.P)) + coarse.p_below + coarse.p_above
    for c in _CUTS:
        jc = max(1, math.ceil(c / h))
        inside = (i >= -jc) & (i < jc)
        p = (total - float(np.sum(coarse.P[inside]))) / total
        p = min(1.0, max(p, 0.0))
        for k in range(0, _MAX_TERMS + 1):
            if (float(special.bdtrc(k, K, p)) if p > 0.0 else 0.0) <= _REST * delta:
                return jc, k
    return None


def _ctd(lo: int, mass: np.ndarray, M: int, hf: float, h: float):
    """Each atom at ``i hf`` split between its two neighbours on the grid ``h = M hf`` keeping its
    ``P``- and ``Q``-mass (``Q = P e^-l``): ``(J0, masses)`` at ``(J0 + j) h``."""
    J0 = lo // M
    off = lo - J0 * M
    n = mass.size
    nc = -(-(off + n) // M)
    a = np.zeros(nc * M)
    a[off:off + n] = mass
    a = a.reshape(nc, M)
    f = np.expm1(-np.arange(M) * hf) / math.expm1(-h)     # the share sent up, from r hf above J h
    up = (a * f).sum(axis=1)
    out = np.zeros(nc + 1)
    out[:-1] = a.sum(axis=1) - up
    out[1:] += up
    return J0, np.maximum(out, 0.0)


def _pool(lo: int, mass: np.ndarray, M: int, hf: float):
    """The bins ``(J h, (J + 1) h]`` (``h = M hf``) of atoms at ``i hf``, ``i = lo ..``: ``Bins``
    with each bin's ``P``-mass and ``Q``-mass ``sum P e^-l``."""
    # atom i is in bin J = ceil(i / M) - 1 = (i - 1) // M
    J0 = (lo - 1) // M
    off = lo - 1 - J0 * M                  # position of atom lo in its bin's row (0 .. M-1)
    n = mass.size
    nc = -(-(off + n) // M)
    a = np.zeros(nc * M)
    a[off:off + n] = mass
    a = a.reshape(nc, M)
    # atom (J M + 1 + r) hf, r = 0 .. M-1: e^-l = e^-(J h) e^-((r + 1) hf)
    w = np.exp(-(np.arange(M) + 1.0) * hf)
    J = J0 + np.arange(nc)
    P = a.sum(axis=1)
    with np.errstate(over="ignore"):
        Q = (a * w).sum(axis=1) * np.exp(-J * (M * hf))
    return _trimmed(Bins(J0, P, Q, 0.0, 0.0))


def _trimmed(b: Bins):
    """``b`` without its empty bins at either end (a lower step fails on leading empty bins); None
    if all are empty."""
    nz = np.nonzero(b.P > 0.0)[0]
    if not nz.size:
        return None
    s0, s1 = int(nz[0]), int(nz[-1]) + 1
    return Bins(b.i0 + s0, b.P[s0:s1], b.Q[s0:s1], 0.0, 0.0)


def _resolved(comp, total: float, upper: bool):
    """A composition's masses as a measure above (``upper``) or below the true one: round-off bound
    added (taken off).  Upper: where the bound is large against the mass (the low bins of a
    tilted composition, whose round-off un-tilting magnifies), the bins are not kept: they hold
    at most ``total`` less what the kept ones surely hold, put at the first kept bin (moving mass
    up only raises the profile) -- the kept bins' bounds sum to at most ``1e-8 total`` (a block's
    measure then exceeds its total by that much: ``(1 + 1e-8)^(K / m)`` in a composition's charge).  Lower:
    the round-off taken off, clipped at 0.  None if nothing can be kept."""
    if not upper:
        low = comp.lower_mass
        pos = low > 0.0
        if not np.any(pos):
            return None
        # only the run of positive masses around the largest: beyond the first bin the round-off
        # bound zeroed, the rest is noise (dropping mass only lowers the profile), and a lower
        # step on bins that alternate with zeros must repair kink after kink
        j = int(np.argmax(low))
        zeros = np.nonzero(~pos)[0]
        a = zeros[zeros < j]
        b = zeros[zeros > j]
        out = np.zeros_like(low)
        s0 = int(a[-1]) + 1 if a.size else 0
        s1 = int(b[0]) if b.size else low.size
        out[s0:s1] = low[s0:s1]
        return out
    err = comp.err
    tail = np.cumsum(err[::-1])[::-1]                  # sum of the bounds from bin j up
    ok = np.nonzero((tail <= 1e-8 * total) & (err < 1.0))[0]
    if not ok.size:
        return None
    j0 = int(ok[0])
    up = np.maximum(comp.mass + err, 0.0)
    up[:j0] = 0.0
    if j0 > 0:
        sure = float(np.sum(comp.lower_mass[j0:]))
        up[j0] += max(0.0, total * (1.0 + 1e-12) + comp.alias - sure)
    return up


def _block(b: Step, m: int, hf: float, alpha: float, cap: int, lam: float):
    """One block: the fine step ``b`` composed ``m`` times on its grid ``hf`` (wrapped-around mass
    ``alpha`` on each side), the :class:`~.compose.Composed`; :class:`~.shared.OverCap` over the cap."""
    comp = compose_powers(Step(b.i0, b.mass, 0.0, 0.0, 1), [m], hf, alpha, cap, lam)
    if comp is None:
        raise OverCap
    return comp[0]


def _upper_steps(pair, h, hf, M, jc, J, nb, m, rest, K, tau, lam, budget, cap):
    """The upper steps: the block ``b^m`` (``count = nb``) and ``X = sum_(j<=J) C(K, j) b^(rest-j)
    t^j`` (the rest of the steps, and every term in which ``j`` of all ``K`` steps fall into the
    tail ``t``); the terms beyond ``J`` go to infinity."""
    from scipy import special

    lo, hi = pair.loss_range(tau)
    Jc = jc * M
    f_lo = max(math.floor(lo / hf) - 1, -Jc)
    f_hi = min(math.ceil(hi / hf) + 1, Jc)
    if 10 * 8 * (f_hi - f_lo) > cap:
        raise OverCap
    # the tail part t holds the losses beyond the cut on each side the fine range reaches it
    lower_t = f_lo == -Jc and math.floor(lo / h) - 1 < -jc
    upper_t = f_hi == Jc and math.ceil(hi / h) + 1 > jc
    P, Q, pb, pa = pair.bins(np.arange(f_lo, f_hi + 1, dtype=float) * hf)
    b = upper_step(Bins(f_lo, P, Q, 0.0 if lower_t else pb, 0.0 if upper_t else pa), hf, 1)
    c_lo = -jc if lower_t else math.floor(lo / h) - 1
    c_hi = jc if upper_t else math.ceil(hi / h) + 1
    P, Q, pb, pa = pair.bins(np.arange(c_lo, c_hi + 1, dtype=float) * h)
    bc = upper_step(Bins(c_lo, P, Q, 0.0 if lower_t else pb, 0.0 if upper_t else pa), h, 1)
    t = None
    t_inf = 0.0
    if lower_t or upper_t:
        c_lo = math.floor(lo / h) - 1 if lower_t else -jc
        c_hi = math.ceil(hi / h) + 1 if upper_t else jc
        P, Q, pb, pa = pair.bins(np.arange(c_lo, c_hi + 1, dtype=float) * h)
        P, Q = P.copy(), Q.copy()
        P[-jc - c_lo:jc - c_lo] = 0.0                   # the bins in (-c, c] are b's
        Q[-jc - c_lo:jc - c_lo] = 0.0
        t = upper_step(Bins(c_lo, P, Q, pb if lower_t else 0.0, pa if upper_t else 0.0), h, 1)
        t_inf = t.inf
        t = Step(t.i0, t.mass, 0.0, 0.0, 1)
    b_mass = float(np.sum(b.mass))
    t_mass = float(np.sum(t.mass)) if t is not None else 0.0
    if not b_mass > 0.0:
        return None
    if t_mass <= 0.0:
        J, t = 0, Step(0, np.zeros(1), 0.0, 0.0, 1)
    # the block, on the fine grid, put on the grid h
    comp = _block(b, m, hf, budget / (4.0 * nb), cap, lam)
    up = _resolved(comp, b_mass ** m, True)
    if up is None:
        return None
    J0, blk = _ctd(comp.lo, up, M, hf, h)
    blk *= 1.0 + 1e-13                                 # the splits' rounding (each ~M u of its atom)
    block = Step(J0, blk, 0.0, 0.0, nb, charge=comp.alias, block=m)
    # X on the grid h
    bcs = Step(bc.i0, bc.mass, 0.0, 0.0, 1)
    xc = binomial_composition(bcs, t, rest, K, J, h, budget / 4.0, cap, lam)
    if xc is None:
        raise OverCap
    bc_mass = float(np.sum(bc.mass))
    js = np.arange(J + 1)
    total = float(np.sum(np.exp(special.gammaln(K + 1) - special.gammaln(js + 1) - special.gammaln(K - js + 1)
                                + (rest - js) * math.log(bc_mass)
                                + (js * math.log(t_mass) if t_mass > 0.0 else np.where(js == 0, 0.0, -np.inf)))))
    upx = _resolved(xc, total, True)
    if upx is None:
        return None
    s_all = max(b_mass, bc_mass) + t_mass
    beyond = float(special.bdtrc(J, K, t_mass / s_all)) * max(1.0, s_all) ** K if t_mass > 0.0 else 0.0
    inf = min(1.0, K * (max(b.inf, bc.inf) + t_inf) * max(1.0, s_all) ** K + beyond)
    x = Step(xc.lo, upx, inf, 0.0, 1, charge=xc.alias, block=rest)
    return [block, x]


def _lower_parts(pair, h, hf, M, jc, tau, cap):
    """``(b, g, b_h, t, g_h)``: the bins of the lower steps' parts -- ``b`` on the fine grid anchored
    at ``g``, the same part ``b_h`` and the tail ``t`` (or None) on the grid ``h`` anchored at
    ``g_h`` (losses relative to the anchor, ``Q`` scaled by ``e^anchor``).

    With an edge anchor (:func:`~.discretise.edge_anchor`; small noise, the mass piled up at
    the loss's hard edge): ``b`` the losses from the edge to the cut, the edge cell one atom at
    ``g`` as in the anchored lower step, ``t`` the rest; the cut is the first point of the grid
    ``g + J h`` at or beyond the upper block's ``c = jc h`` (so ``t`` holds no more mass than the
    upper block's tail part).  Without one (an empty edge cell: large noise, nothing piles up),
    ``g = 0`` and the parts are the upper block's: ``(-c, c]`` and the rest."""
    lo, hi = pair.loss_range(tau)
    anchor = edge_anchor(pair, hf)
    if anchor is None:
        Jc = jc * M
        f_lo = max(math.floor(lo / hf) - 1, -Jc)
        f_hi = min(math.ceil(hi / hf) + 1, Jc)
        if 10 * 8 * (f_hi - f_lo) > cap:
            raise OverCap
        P, Q, _, _ = pair.bins(np.arange(f_lo, f_hi + 1, dtype=float) * hf)
        fb = Bins(f_lo, P, Q, 0.0, 0.0)
        tb = []
        if f_hi == Jc and math.ceil(hi / h) + 1 > jc:
            J1 = math.ceil(hi / h) + 1
            P, Q, _, _ = pair.bins(h * np.arange(jc, J1 + 1, dtype=float))
            tb.append(Bins(jc, P, Q, 0.0, 0.0))
        if f_lo == -Jc and math.floor(lo / h) - 1 < -jc:
            J0 = math.floor(lo / h) - 1
            P, Q, _, _ = pair.bins(h * np.arange(J0, -jc + 1, dtype=float))
            tb.insert(0, Bins(J0, P, Q, 0.0, 0.0))
        if len(tb) == 2:                          # both sides: one array, the middle empty
            a, b = tb
            n = b.i0 + b.P.size - a.i0
            P = np.zeros(n)
            Q = np.zeros(n)
            P[:a.P.size], Q[:a.P.size] = a.P, a.Q
            P[b.i0 - a.i0:], Q[b.i0 - a.i0:] = b.P, b.Q
            tb = [Bins(a.i0, P, Q, 0.0, 0.0)]
        c_lo = -jc if f_lo == -Jc and math.floor(lo / h) - 1 < -jc else math.floor(lo / h) - 1
        c_hi = jc if f_hi == Jc and math.ceil(hi / h) + 1 > jc else math.ceil(hi / h) + 1
        P, Q, _, _ = pair.bins(np.arange(c_lo, c_hi + 1, dtype=float) * h)
        return fb, 0.0, Bins(c_lo, P, Q, 0.0, 0.0), (tb[0] if tb else None), 0.0
    g, P_edge = anchor
    coarse_anchor = edge_anchor(pair, h)
    if coarse_anchor is None:
        return None
    gh, P_edge_h = coarse_anchor
    with np.errstate(over="ignore"):
        eg, egh = math.exp(g), math.exp(gh)
    if not (math.isfinite(eg) and math.isfinite(egh)):
        return None
    if not pair.decreasing:                   # remove: the edge at the bottom, the tail above
        Jr = max(1, math.ceil((jc * h - gh) / h))
        cut = gh + Jr * h                     # b holds (edge, cut], t the rest
        top = min(Jr, max(1, math.ceil((hi - gh) / h) + 1))
        has_t = math.ceil((hi - gh) / h) + 1 > Jr
        if not has_t:
            cut = gh + top * h
        k1 = max(2, math.ceil((cut - g) / hf))
        if 10 * 8 * k1 > cap:
            raise OverCap
        e = g + hf * np.arange(1, k1 + 1, dtype=float)
        e[-1] = max(cut, e[-2])               # the last fine bin ends at the cut (partial)
        P, Q, _, _ = pair.bins(e)
        fb = Bins(0, np.concatenate(([P_edge], P)), np.concatenate(([P_edge], Q * eg)), 0.0, 0.0)
        P, Q, _, _ = pair.bins(gh + h * np.arange(1, top + 1, dtype=float))
        cb = Bins(0, np.concatenate(([P_edge_h], P)), np.concatenate(([P_edge_h], Q * egh)), 0.0, 0.0)
        tb = None
        if has_t:
            J1 = math.ceil((hi - gh) / h) + 1
            P, Q, _, _ = pair.bins(gh + h * np.arange(Jr, J1 + 1, dtype=float))
            tb = Bins(Jr, P, Q * egh, 0.0, 0.0)
    else:                                     # add: the edge at the top, the tail below
        Jr = max(1, math.ceil((gh + jc * h) / h))
        cut = gh - Jr * h                     # b holds [cut, edge), t the rest
        bottom = max(-Jr, min(-1, math.floor((lo - gh) / h) - 1))
        has_t = math.floor((lo - gh) / h) - 1 < -Jr
        if not has_t:
            cut = gh + bottom * h
        i0 = min(-2, math.floor((cut - g) / hf))
        if 10 * 8 * -i0 > cap:
            raise OverCap
        e = g + hf * np.arange(i0, 0, dtype=float)
        e[0] = min(cut, e[1])                 # the first fine bin starts at the cut (partial)
        P, Q, _, _ = pair.bins(e)
        fb = Bins(i0, np.concatenate((P, [P_edge])), np.concatenate((Q * eg, [P_edge])), 0.0, 0.0)
        P, Q, _, _ = pair.bins(gh + h * np.arange(bottom, 0, dtype=float))
        cb = Bins(bottom, np.concatenate((P, [P_edge_h])), np.concatenate((Q * egh, [P_edge_h])), 0.0, 0.0)
        tb = None
        if has_t:
            J0 = math.floor((lo - gh) / h) - 1
            P, Q, _, _ = pair.bins(gh + h * np.arange(J0, -Jr + 1, dtype=float))
            tb = Bins(J0, P, Q * egh, 0.0, 0.0)
    return fb, g, cb, tb, gh


def _lower_steps(pair, h, hf, M, jc, J, nb, m, rest, K, tau, lam, budget, cap):
    """The lower steps: the block (the fine anchored lower step composed ``m`` times, its own bins
    put through :func:`~.discretise.lower_step` on the grid ``h``; ``count = nb``) and ``X``
    as in :func:`_upper_steps` from lower steps of the parts on the grid ``h`` (the terms beyond
    ``J`` dropped); both anchored at ``g``."""
    parts = _lower_parts(pair, h, hf, M, jc, tau, cap)
    if parts is None:
        return None
    fb, g, cb, tb, gh = parts
    fb, cb = _trimmed(fb), _trimmed(cb)
    if fb is None or cb is None:
        return None
    b = lower_step(fb, hf, 1)
    bc = lower_step(cb, h, 1)
    if b is None or bc is None or not float(np.sum(b.mass)) > 0.0:
        return None
    t = None
    tb = _trimmed(tb) if tb is not None else None
    if tb is not None:
        t = lower_step(tb, h, 1)
        if t is None:
            return None
    if t is None or not float(np.sum(t.mass)) > 0.0:
        J, t = 0, Step(0, np.zeros(1), 0.0, 0.0, 1)
    comp = _block(b, m, hf, budget / (4.0 * nb), cap, lam)
    low = _resolved(comp, 0.0, False)
    if low is None:
        return None
    pooled = _pool(comp.lo, low, M, hf)
    if pooled is None or not np.all(np.isfinite(pooled.Q)):
        return None
    c = lower_step(pooled, h, 1)
    if c is None:
        return None
    block = Step(c.i0, c.mass * (1.0 - 1e-12), 0.0, 0.0, nb, shift=m * g, charge=comp.alias, block=m)
    xc = binomial_composition(Step(bc.i0, bc.mass, 0.0, 0.0, 1), Step(t.i0, t.mass, 0.0, 0.0, 1), rest, K, J, h,
                              budget / 4.0, cap, lam)
    if xc is None:
        raise OverCap
    lowx = _resolved(xc, 0.0, False)
    if lowx is None:
        return None
    x = Step(xc.lo, lowx, 0.0, 0.0, 1, shift=rest * gh, charge=xc.alias, block=rest)
    return [block, x]
