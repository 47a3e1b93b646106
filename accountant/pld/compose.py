"""Privacy-loss distributions, part 3: composition of the discretised steps by one FFT on a
Chernoff window (tilted toward small delta, with its round-off bounded), and one step's several
powers from one transform.  Compositions summed term by term (a step split into two parts):
:mod:`.binomial`.  Reading
``eps(delta)`` from a composition and the bracket of one grid: :mod:`.bracket`; the method:
:mod:`accountant.pld`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy import fft as sfft

from .shared import Step

__all__ = ["LAMBDAS"]



# -- composition ------------------------------------------------------------------------------

#: the tilts of the Chernoff windows and of the re-tilted compositions: up to 2^20, so that a
#: narrow privacy loss (large noise: per-step spread ~1/z) read at a tiny delta (many spreads
#: out) still gets its optimal tilt ~ eps / variance
LAMBDAS = 2.0 ** np.arange(-10, 21)


def _log_mgf(step: Step, h: float, lam: np.ndarray) -> np.ndarray:
    """Upper bounds on ``log E[e^(l L)]`` over the step's finite atoms, for ``l`` in ``lam``.

    ``lam`` is a doubling ladder of one sign (``LAMBDAS`` or ``-LAMBDAS``): with ``x = sign *
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

    Args:
        steps: the discretised steps (:class:`~.shared.Step`) to compose.
        h: the grid step, > 0.
        log_alpha: ``log alpha``, the log of the mass allowed below and (wrapped) above the window.
        lam: the tilt, >= 0.
        logm: the steps' composed ``(up, dn)`` log-MGFs (:func:`log_mgfs`), or None to compute them.
        r_min: the lowest bin the caller reads, or None (``lo``).

    Returns:
        A tuple ``(lo, hi)`` of grid indices (ints), ``hi >= lo``.
    """
    up, dn = logm if logm is not None else log_mgfs(steps, h)
    w_lo = float(np.max(-(dn - log_alpha) / LAMBDAS))
    lo_all = sum(s.count * s.i0 for s in steps)
    hi_all = sum(s.count * (s.i0 + s.mass.size - 1) for s in steps)
    # (a Chernoff bound that is not a finite number -- losses past the float range -- bounds
    # nothing: the window is then the steps' whole range, and the caller sees its size)
    lo = max(lo_all, math.floor(w_lo / h) - 1) if math.isfinite(w_lo) else lo_all
    ok = LAMBDAS > lam
    base = lo if r_min is None else max(lo, r_min)
    w_hi = float(np.min((up[ok] - lam * base * h - log_alpha) / (LAMBDAS[ok] - lam)))
    hi = min(hi_all, math.ceil(w_hi / h) + 1) if math.isfinite(w_hi) else hi_all
    if lam > 0.0 and r_min is not None and hi > base:
        # tilted, reading only bins from r_min up: mass at a loss L below the window wraps to a
        # bin p >= L + N h (N h >= (hi + 1 - lo') h, the window's span), where un-tilting
        # multiplies the tilted value m(L) e^(lam L) / Z by Z e^(-lam p): it adds at most
        # P(L < lo' h) e^(-lam (hi + 1 - lo') h) there, at most alpha when (Chernoff, l' > 0)
        # Lambda(-l') + l' x - lam ((hi + 1) h - x) <= log alpha at x = lo' h.  So the window
        # may start that high (not above r_min): the bins below were never read
        x = float(np.max((log_alpha - dn + lam * (hi + 1) * h) / (LAMBDAS + lam)))
        if math.isfinite(x):
            lo = max(lo, min(base, math.floor(x / h) - 1))
    return lo, max(hi, lo)


def log_mgfs(steps, h):
    """log E[e^(l L)] of the composed discrete loss for l in +-LAMBDAS (finite atoms only).

    Args:
        steps: the discretised steps; each step's ``lmgf`` is filled in if None.
        h: the grid step, > 0.

    Returns:
        A tuple ``(up, dn)`` of arrays: the log-MGF at ``+LAMBDAS`` and at ``-LAMBDAS``.
    """
    for s in steps:
        if s.lmgf is None:
            s.lmgf = (_log_mgf(s, h, LAMBDAS), _log_mgf(s, h, -LAMBDAS))
    up = sum(s.count * s.lmgf[0] for s in steps)
    dn = sum(s.count * s.lmgf[1] for s in steps)
    return up, dn


def delta_tilt(up, log_delta):
    """The Chernoff-optimal tilt for the delta-quantile of the composed loss (0 if none helps).

    The best of the doubling ladder, then refined between its neighbours by the quadratic model
    ``Lambda(l) = a l + b l^2`` through the ladder's values at ``l`` and ``2 l``, whose
    Chernoff optimum is ``sqrt(log(1/delta) / b)`` (exact for a Gaussian loss).  A factor 2 off
    puts the tilted bulk many spreads away from the quantile for a narrow loss at a tiny delta
    (z = 100, 10 steps, delta = 1e-120: 9 spreads, below the FFT's round-off); any tilt gives
    a valid bracket, so the model only has to be good, not certain.

    Args:
        up: the composed log-MGF at ``+LAMBDAS`` (:func:`log_mgfs`).
        log_delta: ``log delta``, < 0.

    Returns:
        The tilt ``lam`` (a float).
    """
    cand = LAMBDAS[LAMBDAS <= LAMBDAS[-3]]
    x = (up[:cand.size] - log_delta) / cand
    i = int(np.argmin(x))
    lam = float(cand[i])
    if i + 1 < up.size and math.isfinite(up[i + 1]) and math.isfinite(up[i]):
        b = (float(up[i + 1]) - 2.0 * float(up[i])) / (2.0 * lam * lam)
        if b > 0.0:
            lam = min(max(math.sqrt(-log_delta / b), 0.5 * lam), 2.0 * lam)
    return lam


@dataclass
class Composed:
    """A composition of discretised steps on a window of the loss grid: masses, their round-off bounds,
    and what lies off the window.

    Attributes:
        lo: the grid index of ``mass[0]``.
        mass: the composed finite pmf on the window (may hold round-off).
        err: a per-bin bound on the round-off of ``mass`` (an estimate, see :func:`compose_steps`).
        inf: the composed mass at +infinity.
        alias: a bound on the wrapped-around mass (both sides) plus the steps' charges.
        bad: the total mass of the true losses outside the per-step grids.
        count: the number of steps ``K`` composed.
        shift: the composed grid's anchor: ``mass[j]`` sits at ``shift + (lo + j) h``.
        blocked: whether a step stands for a block of steps (then no Hoeffding end).
    """

    lo: int            # grid index of mass[0]
    mass: np.ndarray   # composed finite pmf on the window (may hold round-off)
    err: np.ndarray    # per-bin bound on the round-off of ``mass`` (estimate, see compose_steps)
    inf: float         # composed mass at +infinity
    alias: float       # bound on the wrapped-around mass (both sides)
    bad: float         # total mass of the true losses outside the per-step grids
    count: int         # number of steps K
    shift: float = 0.0  # the composed grid's anchor (sum of count * step shift): mass[j] sits at
                        # shift + (lo + j) h
    blocked: bool = False  # a step stands for a block of steps: no Hoeffding end (Step.block)

    @property
    def shift_error(self):
        """A bound on the rounding of :attr:`shift` (and of adding it to an eps)."""
        return 8.0 * float(np.finfo(float).eps) * (abs(self.shift) + 1.0) * 1e3 if self.shift else 0.0

    @property
    def upper_mass(self):
        """``mass + err`` clipped to [0, 1]: an upper bound on each bin's mass.

        """
        return np.clip(self.mass + self.err, 0.0, 1.0)

    @property
    def lower_mass(self):
        """``mass - err`` clipped to [0, 1]: a lower bound on each bin's mass.

        """
        return np.clip(self.mass - self.err, 0.0, 1.0)


def charges(steps) -> float:
    """The profile offset the steps' charges add to a composition (:attr:`Step.charge`): ``f_(A*B)
    <= f_(A'*B) + c |B|`` for a measure ``A`` whose profile is within ``c`` of ``A'``'s, so each
    step's ``count * charge`` is multiplied by the largest total mass the others can have (the
    steps' masses, at least 1 each).

    Args:
        steps: the discretised steps (:class:`~.shared.Step`).

    Returns:
        The offset (a float, >= 0).
    """
    c = math.fsum(s.count * s.charge for s in steps)
    if c <= 0.0:
        return 0.0
    logm = math.fsum(s.count * math.log(max(1.0, float(np.sum(s.mass)) + s.inf)) for s in steps)
    return c * math.exp(min(logm, 700.0)) * (1.0 + 1e-12)


def power(t: np.ndarray, log_abs: np.ndarray, c: int) -> np.ndarray:
    """``t ** c`` for Fourier coefficients with ``|t| <= 1``, in polar form.

    ``|t|^c e^(i c arg t)``: its rounding error is at most ``~2 pi c u`` relative (the phase
    ``c arg t`` carries ``c`` times the angle's rounding), inside the ``K u log2 N`` per
    coefficient that :func:`compose_steps` charges; coefficients whose power is below the smallest
    double (``c log|t| < -745``) are exactly zero, and are not computed (most of them, for the
    narrow spectra of many composed steps).  numpy's complex ``**`` is several times slower.

    Args:
        t: the complex Fourier coefficients, ``|t| <= 1``.
        log_abs: ``log|t|`` (``-inf`` where ``t = 0``).
        c: the power, >= 1.

    Returns:
        The complex array ``t ** c`` (``t`` itself for ``c = 1``).
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


def cyclic(w: np.ndarray, i0: int, N: int) -> np.ndarray:
    """``w`` (grid indices ``i0 ..``) wrapped onto a cyclic grid of ``N`` points.

    Args:
        w: the masses.
        i0: the grid index of ``w[0]``.
        N: the cyclic grid's size, >= 1.

    Returns:
        A float array of length ``N`` (wrapped masses added up).
    """
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


def untilt(vals, big: float, lam: float, h: float, lo: int, level: float, r_min):
    """Masses and per-bin error bounds of a tilted composition's window ``vals`` (grid indices
    ``lo ..``; round-off ``level`` per bin, tilted units).

    Un-tilting multiplies bin j by ``e^(big - lam (lo + j) h)``, decreasing in j: its error bound
    ``level * e^(...)`` is at least 1 on a prefix of the window -- those bins (and, with
    ``r_min``, the bins below ``r_min``, never read) are unresolved: error 1, mass 0 (and where
    the exponent reaches 700: no overflow below).

    Args:
        vals: the tilted window's values.
        big: the log of the un-tilting constant.
        lam: the tilt, > 0.
        h: the grid step, > 0.
        lo: the grid index of ``vals[0]``.
        level: the round-off per bin in tilted units, > 0.
        r_min: the lowest bin read, or None.

    Returns:
        A tuple ``(mass, err)`` of float arrays of ``vals``'s length (``err`` in [0, 1]).
    """
    n = vals.size
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
    return mass, err


def tilted(mass: np.ndarray, i0: int, h: float, lam: float):
    """``(w, log_norm)``: a step's masses (grid indices ``i0 ..``) tilted by ``e^(lam L)`` and
    normalised to sum 1, and the log of the normaliser (the un-tilting constant of one step).

    Args:
        mass: the step's masses, non-negative with a positive sum.
        i0: the grid index of ``mass[0]``.
        h: the grid step, > 0.
        lam: the tilt (0: no tilt).

    Returns:
        A tuple ``(w, log_norm)``: the normalised tilted masses and the log of the normaliser.
    """
    if lam == 0.0:                         # no tilt: normalising is one division
        tot = float(mass.sum())
        return mass / tot, math.log(tot)
    x = (i0 + np.arange(mass.size)) * h
    with np.errstate(divide="ignore"):
        lw = np.log(mass) + lam * x
    mx = float(np.max(lw))
    w = np.exp(lw - mx)
    tot = float(w.sum())
    w /= tot
    return w, mx + math.log(tot)


def read_window(F, G, g_factor, N, lo, n, big, lam, h, r_min=None, extra=0.0):
    """``(mass, err)`` on the window ``[lo, lo + n)`` of the inverse transform of ``F`` (a tilted,
    normalised composition's spectrum), un-tilted by ``e^big`` (:func:`untilt`).

    Round-off (see :func:`compose_steps`): ``G`` bounds, per coefficient, how far rounding in the
    transforms of the factors moves ``F`` to first order (``g_factor`` times it); an output bin
    errs by at most ``4 u log2 N`` times the spectrum's mean of that plus ``rms|F|`` (the inverse
    transform's own) plus ``extra``, or by the most negative output value if larger.

    Args:
        F: the composition's half spectrum (complex, as from ``rfft``).
        G: per coefficient, the first-order bound on the factors' rounding.
        g_factor: the factor ``G`` is multiplied by (the number of steps ``K``).
        N: the cyclic grid's size.
        lo: the grid index of the window's first bin.
        n: the window's length.
        big: the log of the un-tilting constant.
        lam: the tilt (0: un-tilting is one constant factor).
        h: the grid step, > 0.
        r_min: the lowest bin read, or None.
        extra: an extra round-off term, in the spectrum's units.

    Returns:
        A tuple ``(mass, err)`` of float arrays of length ``n``.
    """
    ends = [0] if N % 2 else [0, -1]       # (the half spectrum counts twice except its ends)
    mean_G = (2.0 * float(G.sum()) - float(G[ends].sum())) / N
    x = F.view(np.float64)                 # (real and imaginary parts; no BLAS, see _log_mgf)
    sq = 2.0 * float(np.sum(x * x)) - float(np.sum(np.abs(F[ends]) ** 2))
    del x
    rms_F = math.sqrt(max(sq, 0.0) / N)
    out = sfft.irfft(F, N)
    start = lo % N                         # the window on the cyclic grid
    vals = out[start:start + n] if start + n <= N else np.concatenate((out[start:], out[:start + n - N]))
    u = np.finfo(float).eps
    level = max(float(-min(vals.min(), 0.0)),
                4.0 * u * math.log2(N) * (g_factor * mean_G + rms_F + 1e-300 + extra))
    if lam == 0.0:                         # un-tilting is one constant factor (the total mass)
        scale = math.exp(min(big, 700.0))
        mass = vals * scale
        err = np.full(n, min(level * scale, 1.0))
        if err[0] >= 1.0:
            mass[:] = 0.0                  # unresolved bins: anything in [0, 1]
        return mass, err
    return untilt(vals, big, lam, h, lo, level, r_min)


def fft_length(n: int, cap_bytes: int, arrays: int = 6):
    """The cyclic grid of a composition whose window has ``n`` points: the fast transform length
    ``N >= max(n, 2)``, or None where the window's 6 float arrays of ``n`` or the transforms'
    ``arrays`` float arrays of ``N`` exceed ``cap_bytes``.

    Args:
        n: the window's number of points.
        cap_bytes: the memory the transforms may use, in bytes.
        arrays: how many float arrays of ``N`` points the composition holds at once.

    Returns:
        ``N`` (an int), or None over the memory cap.
    """
    if 6 * 8 * n > cap_bytes:        # (before next_fast_len, which overflows past 2^63 points)
        return None
    N = sfft.next_fast_len(max(n, 2), real=True)
    return None if arrays * 8 * N > cap_bytes else N


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

    Args:
        steps: the discretised steps (:class:`~.shared.Step`) to compose.
        h: the grid step, > 0.
        alpha: the mass allowed to wrap around on each side, in (0, 1).
        cap_bytes: the memory the transforms may use, in bytes.
        lam: the tilt, >= 0.
        r_min: the lowest bin the caller reads, or None.

    Returns:
        A tuple ``(composed, size)``: the :class:`Composed` (None over the memory cap) and the
        window's or cyclic grid's number of points.
    """
    inf = -math.expm1(sum(s.count * math.log1p(-min(s.inf, 1.0)) for s in steps)) if steps else 0.0
    shift = math.fsum(s.count * s.shift for s in steps)
    if any(not float(np.sum(s.mass)) > 0.0 for s in steps):   # all of a step's mass is infinite
        K = sum(s.count for s in steps)
        return Composed(0, np.zeros(1), np.zeros(1), inf, charges(steps), sum(s.count * s.bad for s in steps), K,
                         shift, any(s.block > 1 for s in steps)), 1
    if len(steps) == 1 and steps[0].count == 1:      # nothing to compose: no FFT, no round-off
        s = steps[0]
        return Composed(s.i0, s.mass.copy(), np.zeros(s.mass.size), s.inf, s.charge, s.bad, 1, shift,
                         s.block > 1), s.mass.size
    logm = log_mgfs(steps, h)
    lo, hi = loss_window(steps, h, math.log(alpha), lam, logm, r_min)
    n = hi - lo + 1
    N = fft_length(n, cap_bytes)
    if N is None:
        return None, n
    F = None
    logG = None                            # sum (count - 1) log|t|: bounds the powers' derivative
    big = 0.0                              # log of the un-tilting constant, sum of count * log MGF
    for s in steps:
        w, log_norm = tilted(s.mass, s.i0, h, lam)
        big += s.count * log_norm
        t = sfft.rfft(cyclic(w, s.i0, N))
        with np.errstate(divide="ignore"):
            lr = np.log(np.abs(t))
        # (a step composed once adds nothing: 0 * log|t| would be NaN where t is exactly 0)
        g_s = (s.count - 1) * lr if s.count > 1 else np.zeros(lr.size)
        logG = g_s if logG is None else logG + g_s
        t = power(t, lr, s.count)
        F = t if F is None else F * t
    # every tilted pmf sums to 1, so each coefficient t has |t| <= 1 and errs by at most
    # ~u log2 N; the product of the powers then errs by at most K u log2 N G_k with
    # G_k = prod |t_i|^(c_i - 1) (first order), and the inverse transform adds ~u log2 N |F|;
    # an output bin errs by at most the mean over the spectrum of these (times 4 for safety)
    K_all = sum(s.count for s in steps)
    mass, err = read_window(F, np.exp(logG), K_all, N, lo, n, big, lam, h, r_min)
    del F, logG
    inf = -math.expm1(sum(s.count * math.log1p(-min(s.inf, 1.0)) for s in steps)) if steps else 0.0
    bad = sum(s.count * s.bad for s in steps)
    K = sum(s.count for s in steps)
    return Composed(lo, mass, err, inf, 2.0 * alpha + charges(steps), bad, K, shift,
                     any(s.block > 1 for s in steps)), N


def compose_powers(step: Step, counts, h, alpha, cap_bytes, lam=0.0):
    """:func:`compose_steps` of one step kind for several counts at once: one transform of the
    step, its powers, one inverse transform each -- ``[Composed]`` in the order of ``counts``, or
    None over the memory cap.

    Each count keeps its own Chernoff window ``[lo_c, hi_c]`` (:func:`loss_window`, tilted by
    ``lam``, read from its own low end); the cyclic grid has ``N >= hi_c - lo_c + 1`` points for
    every count, so each window sits on it as in :func:`compose_steps` (what lies beyond
    ``lo_c + N - 1`` wraps around, bounded as there; the points in between are not read), and
    each count's round-off bound is :func:`compose_steps`'s with ``K = c``.

    Args:
        step: the discretised step.
        counts: the numbers of compositions, each >= 1.
        h: the grid step, > 0.
        alpha: the mass allowed to wrap around on each side, in (0, 1).
        cap_bytes: the memory the transforms may use, in bytes.
        lam: the tilt, >= 0.

    Returns:
        A list of :class:`Composed`, one per count, or None over the memory cap (and where a
        count is below 1 or the step has no finite mass).
    """
    counts = [int(c) for c in counts]
    if any(c < 1 for c in counts) or not float(np.sum(step.mass)) > 0.0:
        return None
    one = dataclasses.replace(step, count=1)
    logm = log_mgfs([one], h)
    wins = [loss_window([dataclasses.replace(one, count=c)], h, math.log(alpha), lam, (c * logm[0], c * logm[1]))
            for c in counts]
    # (each count's answer keeps its masses and their error bounds, two arrays of its window: counted)
    N = fft_length(max(hi - lo + 1 for lo, hi in wins), cap_bytes, arrays=6 + 2 * len(counts))
    if N is None:
        return None
    w, big1 = tilted(step.mass, step.i0, h, lam)
    t = sfft.rfft(cyclic(w, step.i0, N))
    with np.errstate(divide="ignore"):
        lr = np.log(np.abs(t))
    out = []
    for c, (lo, hi) in zip(counts, wins):
        g = np.exp((c - 1) * lr) if c > 1 else np.ones(lr.size)
        mass, err = read_window(power(t, lr, c), g, c, N, lo, hi - lo + 1, c * big1, lam, h)
        inf = -math.expm1(c * math.log1p(-min(step.inf, 1.0)))
        out.append(Composed(lo, mass, err, inf, 2.0 * alpha + charges([dataclasses.replace(one, count=c)]), c * step.bad, c,
                             c * step.shift, step.block > 1))
    return out
