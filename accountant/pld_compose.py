"""Privacy-loss distributions, part 2: composition of the discretised steps by one FFT on a
Chernoff window (tilted toward small delta, with its round-off bounded), and the reading of
``eps(delta)`` / ``delta(eps)`` from a composition.  The method: :mod:`accountant.pld`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import fft as sfft

from .pld_discretise import decay_block, decayed_suffix
from .pld_pairs import ALIAS, LOWER_RETILT, RETILT, Step

__all__ = ["compose_steps", "loss_window", "lower_one", "lower_usable", "rounding_gap", "sum_error",
           "upper_info", "upper_one", "suffix_rounding", "suffix_sums"]



# -- composition ------------------------------------------------------------------------------

#: the tilts of the Chernoff windows and of the re-tilted compositions: up to 2^20, so that a
#: narrow privacy loss (large noise: per-step spread ~1/z) read at a tiny delta (many spreads
#: out) still gets its optimal tilt ~ eps / variance
_LAMBDAS = 2.0 ** np.arange(-10, 21)


def _log_mgf(step: Step, h: float, lam: np.ndarray) -> np.ndarray:
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


def loss_window(steps, h, log_alpha, lam=0.0, logm=None, r_min=None):
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
    # (a Chernoff bound that is not a finite number -- losses past the float range -- bounds
    # nothing: the window is then the steps' whole range, and the caller sees its size)
    lo = max(lo_all, math.floor(w_lo / h) - 1) if math.isfinite(w_lo) else lo_all
    ok = _LAMBDAS > lam
    base = lo if r_min is None else max(lo, r_min)
    w_hi = float(np.min((up[ok] - lam * base * h - log_alpha) / (_LAMBDAS[ok] - lam)))
    hi = min(hi_all, math.ceil(w_hi / h) + 1) if math.isfinite(w_hi) else hi_all
    if lam > 0.0 and r_min is not None and hi > base:
        # tilted, reading only bins from r_min up: mass at a loss L below the window wraps to a
        # bin p >= L + N h (N h >= (hi + 1 - lo') h, the window's span), where un-tilting
        # multiplies the tilted value m(L) e^(lam L) / Z by Z e^(-lam p): it adds at most
        # P(L < lo' h) e^(-lam (hi + 1 - lo') h) there, at most alpha when (Chernoff, l' > 0)
        # Lambda(-l') + l' x - lam ((hi + 1) h - x) <= log alpha at x = lo' h.  So the window
        # may start that high (not above r_min): the bins below were never read
        x = float(np.max((log_alpha - dn + lam * (hi + 1) * h) / (_LAMBDAS + lam)))
        if math.isfinite(x):
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
    err: np.ndarray    # per-bin bound on the round-off of ``mass`` (estimate, see compose_steps)
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
    coefficient that :func:`compose_steps` charges; coefficients whose power is below the smallest
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


def compose_steps(steps, h, alpha, cap_bytes, lam=0.0, r_min=None):
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
    read, and the window is sized so that this is at most ``alpha`` (:func:`loss_window`).
    """
    inf = -math.expm1(sum(s.count * math.log1p(-min(s.inf, 1.0)) for s in steps)) if steps else 0.0
    if any(not float(np.sum(s.mass)) > 0.0 for s in steps):   # all of a step's mass is infinite
        K = sum(s.count for s in steps)
        return _Composed(0, np.zeros(1), np.zeros(1), inf, 0.0, sum(s.count * s.bad for s in steps), K), 1
    if len(steps) == 1 and steps[0].count == 1:      # nothing to compose: no FFT, no round-off
        s = steps[0]
        return _Composed(s.i0, s.mass.copy(), np.zeros(s.mass.size), s.inf, 0.0, s.bad, 1), s.mass.size
    logm = _log_mgfs(steps, h)
    lo, hi = loss_window(steps, h, math.log(alpha), lam, logm, r_min)
    n = hi - lo + 1
    if 6 * 8 * n > cap_bytes:        # (before next_fast_len, which overflows past 2^63 points)
        return None, n
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


def suffix_sums(mass: np.ndarray, lo: int, h: float):
    """A_j = sum_{s>=j} m_s and B_j = sum_{s>=j} m_s e^{(j-s)h} for non-negative masses.

    A is a cumulative sum, B :func:`decayed_suffix`; both add non-negative terms, so each
    carries a relative rounding error of at most :func:`suffix_rounding` (``~n u``) --
    relative to the suffix sum itself, hence to the tail delta is read from (:func:`_eps_at`
    charges it).
    """
    A = np.cumsum(mass[::-1])[::-1]
    B = decayed_suffix(mass, h)
    return A, B


def suffix_rounding(n: int, h: float) -> float:
    """Relative rounding error bound of :func:`decayed_suffix` and of a suffix cumsum of ``n``
    non-negative terms: ``n`` additions; the block weights (``exp`` of an argument of at most
    32, rounded: ``<= 34 u`` each, and three of them per term); per doubling pass of the
    carries a weight (``exp`` of an argument below 746: ``<= 747 u``) and two roundings."""
    nb = -(-n // decay_block(n, h)) if n else 0
    passes = max(0, nb - 1).bit_length()
    return (n + 2 + 140 + 750 * passes) * float(np.finfo(float).eps)


def _eps_at(mass: np.ndarray, lo: int, h: float, c: float, delta: float, side: int) -> float:
    """Smallest eps with  sum_s mass_s (1 - e^(eps - (lo+s) h))_+ + c <= delta  (may be +-inf).

    ``mass >= 0``.  The suffix sums of non-negative terms carry a relative rounding error of at
    most ``r = suffix_rounding(n, h)`` (``~n u``); the profile at a grid point, ``A - B``, is
    moved by ``4 r A`` toward the conservative side (``side=+1``: up, for the upper bound;
    ``-1``: down, for the lower bound).
    """
    n = mass.size
    A, B = suffix_sums(mass, lo, h)
    slack = 4.0 * suffix_rounding(n, h) * side
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


def sum_error(mass: np.ndarray) -> float:
    """Bound on the rounding of a sum of n non-negative terms in double precision."""
    return 2.0 * (mass.size + 2) * float(np.finfo(float).eps) * float(np.sum(mass)) + 1e-300


def rounding_gap(h: float) -> float:
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
        a, b = loss_window(steps, h, math.log(alpha), cand, logm, r_min)
        if b - a + 1 <= 4 * n0 + 16:
            lam = cand
            break
    else:
        lam = 0.0
    if lam <= 0.0:
        return None
    return compose_steps(steps, h, alpha, cap_bytes, lam, r_min)[0]


def upper_one(steps, h, delta, cap_bytes, floor=-math.inf, hint=None):
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
    return upper_info(steps, h, delta, cap_bytes, floor, hint)[:2]


def upper_info(steps, h, delta, cap_bytes, floor=-math.inf, hint=None):
    """:func:`upper_one` and whether a tilted composition was needed (``retilted``)."""
    if not steps:
        return 0.0, 0.0, False
    alpha = ALIAS * delta
    if hint is not None and hint[2] and hint[0] is not None:
        lo_c, up_c, _ = hint
        lo_, hi_ = loss_window(steps, h, math.log(alpha))
        comp2 = _tilted(steps, h, delta, alpha, cap_bytes, math.floor(lo_c / h) - 1, hi_ - lo_ + 1)
        if comp2 is not None:
            lo2, up2 = _read_bracket(comp2, h, delta)
            lower, upper = max(lo_c, lo2), min(up_c, up2)
            return lower, max(upper, lower), True
    comp, _ = compose_steps(steps, h, alpha, cap_bytes)
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


def lower_one(lower_steps, h, delta, cap_bytes):
    """The lower end of one direction from the composition of its lower steps
    (:func:`_lower_step`; usable ones), re-composed tilted when the round-off charge exceeds
    ``LOWER_RETILT * delta``; None over the memory cap."""
    alpha = ALIAS * delta
    lcomp, _ = compose_steps(lower_steps, h, alpha, cap_bytes)
    if lcomp is None:
        return None
    lower = _read_lower(lcomp, h, delta)
    lcomp2 = _retilt(lower_steps, lcomp, h, delta, alpha, cap_bytes, math.floor(lower / h) - 1,
                     LOWER_RETILT)
    if lcomp2 is not None:
        lower = max(lower, _read_lower(lcomp2, h, delta))
    return lower


def lower_usable(lower_steps) -> bool:
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
    shift = t + K * rounding_gap(h)
    if K * h <= shift:        # each rounding error is below h: the sum is below K h surely
        shift, p = K * h, 0.0
    low = comp.lower_mass
    c_lo = comp.alias + comp.bad + p
    x = _eps_at(low, comp.lo, h, -c_lo, delta, -1)
    lower = x - shift
    return max(lower, 0.0), max(upper, 0.0)
