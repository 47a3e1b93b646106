"""Privacy-loss distributions, part 3b: compositions of a step split into two parts, summed term by
term in the Fourier domain -- the split composition of one step kind whose edge atom would drown
its tail in round-off, and the binomial composition of a step's bulk and tail that the blocks of
:mod:`.blocks` use.  Both follow :func:`~.compose.compose_steps`'s round-off model term
by term.  The chain: pairs <- discretise <- compose <- binomial <- blocks <- bracket <- pld.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import fft as sfft

from .compose import LAMBDAS, Composed, charges, cyclic, fft_length, log_mgfs, loss_window, power, read_window, tilted
from .shared import Step

__all__ = []


def binomial_composition(a: Step, b: Step, n: int, K: int, J: int, h, alpha, cap_bytes, lam=0.0):
    """``sum_(j=0..J) C(K, j) a^(n-j) b^j`` (``a``, ``b`` sub-probability measures on the grid, ``J <=
    n``): the steps outside ``K - n`` of ``K`` whose ``n`` others are composed elsewhere, each step
    split into parts ``a + b`` -- all ``j`` of the ``K`` steps that fall into ``b`` counted here
    (:mod:`.blocks`).  One transform of each part, the terms summed in the Fourier domain;
    None over the memory cap.

    Tilted by ``e^(lam L)`` and normalised as one step (``a + b`` sums to 1 tilted), so every
    coefficient of a part has modulus at most its tilted mass.  Round-off, :func:`split_composition`'s
    model term by term: with ``A = |t_a|``, ``B = |t_b|`` and ``w_j`` the weights, a coefficient errs
    by at most ``u log2 N sum_j w_j ((n - j) A^(n-j-1) B^j + j A^(n-j) B^(j-1))`` to first order.
    The Chernoff window takes the measure's own moment bound ``sum_j w_j M_a^(n-j) M_b^j``.

    Args:
        a: the first part of the step (a :class:`~.shared.Step`, sub-probability).
        b: the second part of the step (a :class:`~.shared.Step`, sub-probability).
        n: the number of steps composed here, >= 1.
        K: the total number of steps (the binomial coefficients are ``C(K, j)``), >= ``n``.
        J: the largest number of ``b`` factors kept, in ``[0, n]``.
        h: the grid step, > 0.
        alpha: the mass allowed to wrap around on each side, in (0, 1).
        cap_bytes: the memory the transforms may use, in bytes.
        lam: the tilt, >= 0.

    Returns:
        The :class:`~.compose.Composed` of the ``n`` steps (count ``n``, no mass at infinity),
        or None where ``J`` or ``n`` is out of range, ``a`` is empty, or over the memory cap.
    """
    from scipy import special

    if not (0 <= J <= n) or n < 1:
        return None
    one_a = dataclasses.replace(a, count=1)
    one_b = dataclasses.replace(b, count=1)
    la = log_mgfs([one_a], h)
    lb = log_mgfs([one_b], h)
    js = np.arange(J + 1)
    lc = special.gammaln(K + 1) - special.gammaln(js + 1) - special.gammaln(K - js + 1)
    # the measure's log moments: logsumexp_j (log C(K, j) + (n - j) La + j Lb), both ladders
    def moments(ma, mb):          # (j = 0: no factor of b, also where b is empty: M_b = -inf)
        tb_ = np.where(js[:, None] > 0, js[:, None] * np.where(js[:, None] > 0, mb[None, :], 0.0), 0.0)
        return special.logsumexp(lc[:, None] + (n - js)[:, None] * ma[None, :] + tb_, axis=0)

    with np.errstate(invalid="ignore"):
        up, dn = moments(la[0], lb[0]), moments(la[1], lb[1])
    # the support: every term's, n - j of a's range and j of b's
    lo_all = min((n - j) * a.i0 + j * b.i0 for j in range(J + 1))
    hi_all = max((n - j) * (a.i0 + a.mass.size - 1) + j * (b.i0 + b.mass.size - 1) for j in range(J + 1))
    bound = Step(lo_all, np.zeros(hi_all - lo_all + 1), 0.0, 0.0, 1)
    lo, hi = loss_window([bound], h, math.log(alpha), lam, (up, dn))
    nw = hi - lo + 1
    # the arrays held at once, in float arrays of N points (a spectrum, N / 2 complex points: one; its real
    # companions: half): the parts' spectra, the sum, the running power and the loop's products (six), their real
    # companions (five), and the J + 1 powers of b with theirs (1.5 each) -- a flat 8 undercounted them
    N = fft_length(nw, cap_bytes, arrays=11 + (3 * (J + 1) + 1) // 2)
    if N is None:
        return None
    # tilt both parts by one normaliser (the step a + b)
    parts = []
    mx = -math.inf
    for s in (a, b):
        x = (s.i0 + np.arange(s.mass.size)) * h
        with np.errstate(divide="ignore"):
            lw = np.log(np.maximum(s.mass, 0.0)) + lam * x
        parts.append(lw)
        mx = max(mx, float(np.max(lw)))
    wa, wb = (np.exp(lw - mx) for lw in parts)
    tot = float(wa.sum()) + float(wb.sum())
    wa /= tot
    wb /= tot
    sa, sb = float(wa.sum()), float(wb.sum())
    big = n * (mx + math.log(tot))
    if not sa > 0.0:
        return None
    ta = sfft.rfft(cyclic(wa / sa, a.i0, N))
    A = np.minimum(np.abs(ta), 1.0)
    with np.errstate(divide="ignore"):
        lA = np.log(A)
    if J >= 1 and sb > 0.0:
        tb = sfft.rfft(cyclic(wb / sb, b.i0, N))
        Bm = np.minimum(np.abs(tb), 1.0)
    else:
        J = 0
    logw = lc + (n - js) * math.log(sa) + (js * math.log(sb) if sb > 0.0 else np.where(js == 0, 0.0, -np.inf))
    F = np.zeros_like(ta)
    G = np.zeros(A.size)
    Ta = power(ta, lA, n - J)                    # t_a^(n-j), j = J first
    Ak = np.exp((n - J) * lA)
    with np.errstate(divide="ignore", invalid="ignore"):
        Aprev = np.where(A > 0.0, Ak / A, 0.0) if n - J >= 1 else np.zeros(A.size)
    Tb = np.ones_like(ta)
    Bk = np.ones(A.size)
    Tbs, Bks = [Tb], [Bk]
    for j in range(1, J + 1):
        Tbs.append(Tbs[-1] * tb)
        Bks.append(Bks[-1] * Bm)
    for j in range(J, -1, -1):
        wj = math.exp(float(logw[j]))
        F += wj * (Ta * Tbs[j])
        G += wj * ((n - j) * Aprev * Bks[j] + (j * Ak * Bks[j - 1] if j else 0.0))
        if j:
            Ta = Ta * ta
            Aprev = Ak
            Ak = Ak * A
    del Tbs, Bks, Ta
    mass, err = read_window(F, G, 1.0, N, lo, nw, big, lam, h, None, 8 * (J + 1) * float(np.finfo(float).eps))
    del F
    return Composed(lo, mass, err, 0.0, 2.0 * alpha, 0.0, n, 0.0)


#: the most binomial terms a split composition sums (:func:`split_composition`), and the
#: largest expected number of steps in the rare part (``K p``) where it splits at all
_SPLIT_TERMS = 64
_SPLIT_RARE = 8.0


def _pooled(step: Step, h: float):
    """``(log masses, losses, B)``: the step's atoms pooled in at most 65 536 blocks of ``B``, each
    block's mass at its largest loss (an upper bound on every moment of the block)."""
    n = step.mass.size
    B = max(1, -(-n // 65536))
    nb = -(-n // B)
    m = np.zeros(nb * B)
    m[:n] = np.maximum(step.mass, 0.0)
    m = m.reshape(nb, B).sum(axis=1)
    with np.errstate(divide="ignore"):
        return np.log(m), (step.i0 + np.arange(nb) * B + (B - 1)) * h, B


def _split_point(step: Step, h: float, log_alpha: float, r_min: int) -> int:
    """The largest ``s`` (a multiple of the pooling block) such that the ``K``-fold composition of
    the step's atoms below index ``s`` has mass at most ``alpha`` from grid index ``r_min`` on; 0 if
    none.

    Chernoff, as :func:`loss_window`: ``P(S > x) <= exp(K log E[e^(l L)] - l x)`` over the ladder
    ``LAMBDAS``, for every prefix of the step at once -- the prefix sums of ``m e^(l x)`` in log
    space (``logaddexp.accumulate``: no underflow, whatever the scale).  Atoms are pooled
    (:func:`_pooled`), and a margin of ``1e-8`` covers the rounding of the logs."""
    K = step.count
    n = step.mass.size
    lm, xb, B = _pooled(step, h)
    nb = lm.size
    lam = LAMBDAS[:, None]

    def bad(S):                                       # per prefix: its bound reaches r_min
        with np.errstate(invalid="ignore"):
            w_hi = np.min((K * (S + 1e-8) - log_alpha) / lam, axis=0)
        return np.ceil(w_hi / h) + 1 >= r_min         # (a prefix of no mass: -inf, fine)

    # the prefix sums grow with the prefix, so the bounds do: the first failing prefix is found
    # from the left, a stretch of atoms at a time (the split is usually near the edge atom) --
    # each chunk's log-sum (one exp per atom), the chunks' running log-sums, and the running
    # log-sum atom by atom inside the first chunk whose end fails only (logaddexp.accumulate
    # over every atom and every lambda cost ~10-20 ms a composition)
    C = 256
    carry = np.full((LAMBDAS.size, 1), -np.inf)
    start, width = 0, 4 * C                           # (stretches doubling: the split is often
    while start < nb:                                 # within the first few hundred atoms)
        stop = min(nb, start + width)
        nc = -(-(stop - start) // C)
        v = np.full((LAMBDAS.size, nc * C), -np.inf)
        v[:, :stop - start] = lm[None, start:stop] + lam * xb[None, start:stop]
        v3 = v.reshape(LAMBDAS.size, nc, C)
        top = v3.max(axis=2)
        top = np.where(np.isfinite(top), top, 0.0)
        with np.errstate(divide="ignore"):
            sums = top + np.log(np.exp(v3 - top[:, :, None]).sum(axis=2))
        ends = np.logaddexp.accumulate(np.concatenate([carry, sums], axis=1), axis=1)
        failing = np.nonzero(bad(ends[:, 1:]))[0]
        if failing.size:
            c = int(failing[0])
            S = np.logaddexp.accumulate(np.concatenate([ends[:, c:c + 1], v3[:, c, :]], axis=1), axis=1)
            return min(n, (start + c * C + int(np.nonzero(bad(S[:, 1:]))[0][0])) * B)
        carry = ends[:, -1:]
        start, width = stop, min(2 * width, 64 * C)
    return min(n, nb * B)                             # every block qualifies


def split_composition(step: Step, h: float, alpha: float, cap_bytes: int, lam: float, r_min: int):
    """The tilted composition of one step kind read above ``r_min``, without the part that cannot
    reach there; None where it does not apply.

    A Poisson step with little noise is an atom of nearly all the mass near its edge plus a thin
    part with large losses.  Its ``K``-fold composition's tail above ``eps`` -- all that ``delta``
    reads -- comes from the thin part, but an FFT's round-off is relative to the whole: the atom
    keeps every Fourier coefficient near 1, so each output bin errs by ~``K u log N`` of the total
    mass, tilted or not (``q = 1e-4``, 378 steps, ``delta = 1e-8``: a charge of 1e-3 delta, a floor
    of ~5e-4 on the bracket's width).  So split the step at ``s``: ``a`` the atoms below, ``b``
    the rest, ``(a + b)^K = sum_k C(K, k) a^(K-k) b^k``.  The ``k = 0`` term is not composed: ``s``
    is the largest split whose ``a^K`` has mass at most ``alpha`` from ``r_min`` on (Chernoff), and
    that ``alpha`` is charged.  The terms ``k = 1 .. k_max`` are summed in the Fourier domain, each
    with the binomial weight of the normalised parts, and the bound on their round-off follows
    :func:`compose_steps`'s model term by term: with ``A = |t_a| / |a|``, ``B = |t_b| / |b|`` and
    ``p_k`` the binomial weights, a coefficient errs by at most ``u log2 N sum_k p_k ((K - k)
    A^(K-k-1) B^k + k A^(K-k) B^(k-1))`` to first order -- small where ``b``'s spectrum has
    decayed, unlike ``K`` times the full spectrum.  The terms beyond ``k_max`` (binomial tail at
    most ``alpha``) are charged too.

    Args:
        step: the step kind (a :class:`~.shared.Step` with its ``count`` ``K``).
        h: the grid step, > 0.
        alpha: the mass allowed to wrap around on each side, in (0, 1).
        cap_bytes: the memory the transforms may use, in bytes.
        lam: the tilt, > 0.
        r_min: the lowest bin the caller reads.

    Returns:
        The :class:`~.compose.Composed` of the ``K`` steps, or None where the split does not
        apply (or over the memory cap).
    """
    from scipy import special

    K = step.count
    if K < 2 or lam <= 0.0 or r_min is None:
        return None
    log_alpha = math.log(alpha)
    mass = step.mass
    n = mass.size
    # every atom that reaches r_min beside K - 1 of the lowest is in b.  The split pays only
    # where b is rare, K p <= _SPLIT_RARE: the unsplit spectrum is then ~(1 - p)^K ~ 1 all along
    # (the round-off floor); where b is common it has decayed by e^-(K p) and the plain
    # composition is as good (a million steps of q = 1e-4: K p ~ 100)
    reach = r_min - (K - 1) * step.i0 - step.i0
    p_min = float(np.sum(mass[max(0, min(n, reach)):])) / max(float(np.sum(mass)), 1e-300)
    if K * p_min > _SPLIT_RARE:
        return None
    s = _split_point(step, h, log_alpha, r_min)
    if not 0 < s < n:
        return None
    ma, mb = float(np.sum(mass[:s])), float(np.sum(mass[s:]))
    if not (ma > 0.0 and mb > 0.0):
        return None
    p = mb / (ma + mb)
    if K * p > _SPLIT_RARE:
        return None
    kmax = None
    for k in range(1, _SPLIT_TERMS + 1):
        if float(special.bdtrc(k, K, p)) * (ma + mb) ** K <= alpha:
            kmax = k
            break
    if kmax is None:
        return None
    logm = log_mgfs([step], h)
    lo, hi = loss_window([step], h, log_alpha, lam, logm, r_min)
    nw = hi - lo + 1
    # the arrays held at once, in float arrays of N points: the two parts' spectra, the sum, the running power
    # and a product (complex, N / 2 points: one each) and their nine real companions (half each), with the
    # powers of b kept for the terms (1.5 each): 8 flat counted ~1.5 kmax + 8.5 (4.7 GB under a 1 GB cap)
    N = fft_length(nw, cap_bytes, arrays=9 + (3 * kmax + 1) // 2)
    if N is None:
        return None
    w, log_norm = tilted(mass, step.i0, h, lam)
    big = K * log_norm
    wa, wb = w[:s], w[s:]
    sa, sb = float(wa.sum()), float(wb.sum())
    if not (sa > 0.0 and sb > 0.0):
        return None
    ta = sfft.rfft(cyclic(wa / sa, step.i0, N))
    tb = sfft.rfft(cyclic(wb / sb, step.i0 + s, N))
    A = np.minimum(np.abs(ta), 1.0)
    B = np.minimum(np.abs(tb), 1.0)
    with np.errstate(divide="ignore"):
        la = np.log(A)
    # the binomial weights of the tilted parts (sa + sb = 1 up to rounding)
    ks = np.arange(0, kmax + 1)
    logw = (special.gammaln(K + 1) - special.gammaln(ks + 1) - special.gammaln(K - ks + 1)
            + ks * math.log(sb) + (K - ks) * math.log(sa))
    F = np.zeros_like(ta)
    G = np.zeros(A.size)
    Ta = power(ta, la, K - kmax)                  # t_a^(K-k), k = kmax first
    Ak = np.exp((K - kmax) * la)                   # A^(K-k)
    Tb = [None] * (kmax + 1)
    Tb[1] = tb
    Bk = [None] * (kmax + 1)
    Bk[0], Bk[1] = np.ones(B.size), B
    for k in range(2, kmax + 1):
        Tb[k] = Tb[k - 1] * tb
        Bk[k] = Bk[k - 1] * B
    with np.errstate(divide="ignore", invalid="ignore"):
        Aprev = np.where(A > 0.0, Ak / A, 0.0) if K - kmax >= 1 else np.zeros(A.size)
    # F += wk (Ta Tb_k) and G += wk ((K - k) Aprev Bk_k + k Ak Bk_(k-1)), term by term in place:
    # the same operations in the same order as the plain expressions (the same bits), without a
    # fresh array per operation (on a million-point window each costs its page faults)
    if Ta is ta:
        Ta = ta.copy()
    tc, t1, t2, nxt = np.empty_like(ta), np.empty(A.size), np.empty(A.size), np.empty(A.size)
    for k in range(kmax, 0, -1):
        wk = math.exp(float(logw[k]))
        np.multiply(Ta, Tb[k], out=tc)
        tc *= wk
        F += tc
        np.multiply(Aprev, float(K - k), out=t1)
        t1 *= Bk[k]
        np.multiply(Ak, float(k), out=t2)
        t2 *= Bk[k - 1]
        t1 += t2
        t1 *= wk
        G += t1
        if k > 1:
            Ta *= ta
            np.multiply(Ak, A, out=nxt)
            Aprev, Ak, nxt = Ak, nxt, Aprev
    del Ta, Tb, Bk, tc, t1, t2, nxt
    out_mass, err = read_window(F, G, 1.0, N, lo, nw, big, lam, h, r_min, 8 * kmax * float(np.finfo(float).eps))
    del F
    inf = -math.expm1(K * math.log1p(-min(step.inf, 1.0)))
    tail = float(special.bdtrc(kmax, K, p)) * (ma + mb) ** K
    return Composed(lo, out_mass, err, inf, 3.0 * alpha + tail + charges([step]), K * step.bad, K,
                     K * step.shift, step.block > 1)
