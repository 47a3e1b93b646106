"""RDP amplification by subsampling WITHOUT replacement (replace-one adjacency).

* :func:`subsampled_rdp_wor` -- DIFF2 Lemma B.7 = Wang, Balle & Kasiviswanathan (2019), Thm 9,
  for an arbitrary base mechanism given by its RDP curve.
* :func:`subsampled_rdp_wor_simple` -- DIFF2 Lemma B.8, the closed-form simple bound, with its
  conditions (:func:`lemma_b8_conditions`).
* :func:`subsampled_gaussian_rdp_wor` -- the Gaussian specialisation, with WBK19 Thm 9 or the
  tighter Gaussian-specific WBK19 Thm 27.

Everything is computed in log space: orders up to 4096 and base RDP values from 1e-12 to 1e8
neither overflow nor lose the digits of ``log(1 + tiny)``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from .validation import InputError
from . import validation
from .caches import cached
from .logmath import log1p_exp, log_binomial_sums, log_expm1, logsumexp

__all__ = []

#: Highest forward-difference order used by Thm 27; terms of higher index fall back to the
#: Thm 9 term (a valid, looser bound).  256 is also dp-accounting's choice.
THM27_MAX_FORWARD_DIFFERENCE = 256


class SubsamplingConditionWarning(UserWarning):
    """A closed-form subsampling bound was evaluated outside the conditions of its lemma."""


# ---------------------------------------------------------------------------------------------
# Lemma B.7 = WBK19 Theorem 9
# ---------------------------------------------------------------------------------------------
def _base_values(base_rdp, js: np.ndarray) -> np.ndarray:
    """Evaluate a user RDP curve at integer orders ``js`` (vectorised call, else one by one)."""
    try:
        vals = np.asarray(base_rdp(js.astype(float)), dtype=float)
        if vals.shape != js.shape:
            raise TypeError
    except (TypeError, ValueError):
        vals = np.array([float(base_rdp(float(j))) for j in js], dtype=float)
    if np.isnan(vals).any() or (vals < 0).any():
        bad = vals[np.isnan(vals) | (vals < 0)][0]
        raise InputError(f"base_rdp returned {float(bad)!r}: expected RDP values in [0, inf].")
    return vals


def _log1p_binomial_sums(orders: np.ndarray, log_gamma: float, t: np.ndarray) -> np.ndarray:
    """``log(1 + sum_{j=2}^{a} C(a, j) gamma^j e^{t[j]})`` for every integer order ``a`` at once
    (the Thm 9 / Thm 27 terms of index j do not depend on the order, so all orders share ``t``)."""
    return np.asarray(log1p_exp(log_binomial_sums(orders, log_gamma, t)), dtype=float)


def _thm9_terms(eps: np.ndarray, eps_inf: float) -> np.ndarray:
    """Order-independent part of WBK19 Thm 9's j-th term, ``t[j]`` for j = 0..len(eps)+1
    (``eps[j-2] = eps(j)``; t[0], t[1] unused)."""
    n = eps.size + 2
    js = np.arange(n, dtype=float)
    log_cap = math.log(2.0)
    if eps_inf != math.inf:
        lcap_j = np.minimum(log_cap, js * log_expm1(eps_inf)) if eps_inf > 0 else np.full(n, -np.inf)
    else:
        lcap_j = np.full(n, log_cap)
    t = np.full(n, -np.inf)
    e2 = eps[0]
    with np.errstate(divide="ignore"):
        t[2] = min(math.log(4.0) + log_expm1(e2) if e2 > 0 else -math.inf, e2 + lcap_j[2])
    t[3:] = (js[3:] - 1.0) * eps[1:] + lcap_j[3:]
    return t


def subsampled_rdp_wor(alpha, gamma, base_rdp, base_rdp_inf=math.inf):
    """RDP of ``M o subsample_gamma`` (without replacement): DIFF2 Lemma B.7 = WBK19 Thm 9.

    For every integer ``alpha >= 2``, if ``M`` is ``(alpha, eps(alpha))``-RDP then, with
    ``gamma = b / n``::

        eps'(alpha) <= 1/(alpha-1) log(1 + gamma^2 C(alpha,2) min{4(e^{eps(2)}-1),
                                              e^{eps(2)} min{2, (e^{eps(inf)}-1)^2}}
                        + sum_{j=3}^{alpha} gamma^j C(alpha,j) e^{(j-1) eps(j)} min{2, (e^{eps(inf)}-1)^j})

    Adjacency: replace-one.  Formal guarantee: the returned value is the right-hand side above,
    evaluated in log space (relative error ~1e-13 at alpha = 4096), so it is a valid RDP bound
    whenever ``base_rdp`` is.

    Subsampling never hurts: the value returned is ``min(RHS, eps(alpha))`` -- the mixture over
    coupled batches that differ in at most one record is, by joint convexity of
    ``exp((alpha-1) D_alpha)``, no more distinguishable than the base mechanism itself.

    Edge cases: ``gamma = 0`` gives 0; ``eps(j) = inf`` gives inf.

    Args:
        alpha: integer order(s) >= 2 (scalar or array).
        gamma: sampling ratio ``b / n`` in [0, 1].
        base_rdp: callable ``j -> eps(j)``, the RDP curve of the base mechanism (vectorised or
            scalar; values in [0, inf]).
        base_rdp_inf: ``eps(inf)`` of the base mechanism, in [0, inf] (``inf`` for a Gaussian).

    Returns:
        The RDP bound(s): a float for a scalar ``alpha``, else an array shaped like ``alpha``.

    Raises:
        InputError: if an order is not an integer >= 2, ``gamma`` or ``base_rdp_inf`` is out of
            range, ``base_rdp`` is not callable, or its values are not in [0, inf].
    """
    a = validation.orders_array(alpha, "alpha", integer_only=True)
    g = validation.probability(gamma, "gamma")
    if not callable(base_rdp):
        raise InputError(f"base_rdp={base_rdp!r} is not allowed: expected a callable j -> eps(j).")
    e_inf = validation.in_range(base_rdp_inf, "base_rdp_inf", 0.0, math.inf)
    flat = a.astype(np.int64).ravel()
    out = np.zeros(flat.shape, dtype=float)
    if g > 0.0:
        eps = _base_values(base_rdp, np.arange(2, int(flat.max()) + 1))
        out = _log1p_binomial_sums(flat, math.log(g), _thm9_terms(eps, e_inf)) / (flat - 1.0)
        out = np.minimum(out, eps[flat - 2])          # subsampling never hurts
    out = out.reshape(a.shape)
    return float(out) if out.ndim == 0 else out


# ---------------------------------------------------------------------------------------------
# Lemma B.8 (simple closed form)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LemmaB8Conditions:
    """Which conditions of DIFF2 Lemma B.8 hold (None = could not be checked).

    Attributes:
        eps_alpha_le_one_third: whether ``eps(alpha) <= 1/3`` (None: not checked).
        eps_alpha_le_log_term: whether ``eps(alpha) <= log(1/(2 gamma alpha))`` (None: not checked).
        gamma_le_eps2_over_c_alpha: whether ``gamma <= eps(2) / (c alpha)``.
        reasons: a tuple of strings, one per condition that failed or was not checked.
    """

    eps_alpha_le_one_third: bool | None
    eps_alpha_le_log_term: bool | None
    gamma_le_eps2_over_c_alpha: bool
    reasons: tuple = field(default=())

    @property
    def ok(self) -> bool:
        """True only if every condition was checked and holds."""
        return bool(self.eps_alpha_le_one_third) and bool(self.eps_alpha_le_log_term) \
            and self.gamma_le_eps2_over_c_alpha


def lemma_b8_conditions(alpha, gamma, base_rdp2, base_rdp_alpha=None, c=1.0) -> LemmaB8Conditions:
    """Check the conditions of DIFF2 Lemma B.8.

    The lemma needs ``eps(alpha)`` increasing in alpha, ``eps(alpha) <= min{1/3, log(1/(2 gamma alpha))}``
    and ``gamma <= eps(2) / (c alpha)``.  Without ``base_rdp_alpha`` the first two cannot be
    checked and are reported as ``None``.

    Args:
        alpha: the integer order, >= 2.
        gamma: the sampling ratio ``b / n``, in [0, 1].
        base_rdp2: ``eps(2)`` of the base mechanism, in [0, inf].
        base_rdp_alpha: ``eps(alpha)`` of the base mechanism, in [0, inf], or None.
        c: the lemma's constant, in (0, inf).

    Returns:
        The :class:`LemmaB8Conditions`.

    Raises:
        InputError: if an argument is out of range.
    """
    a = validation.integer(alpha, "alpha", low=2)
    g = validation.probability(gamma, "gamma")
    e2 = validation.in_range(base_rdp2, "base_rdp2", 0.0, math.inf)
    cc = validation.positive(c, "c")
    reasons = []
    third = logc = None
    if base_rdp_alpha is not None:
        ea = validation.in_range(base_rdp_alpha, "base_rdp_alpha", 0.0, math.inf)
        third = ea <= 1.0 / 3.0
        if not third:
            reasons.append(f"eps(alpha)={ea:.6g} > 1/3")
        log_term = math.inf if g == 0 else math.log(1.0 / (2.0 * g * a))
        logc = ea <= log_term
        if not logc:
            reasons.append(f"eps(alpha)={ea:.6g} > log(1/(2 gamma alpha))={log_term:.6g}")
    else:
        reasons.append("eps(alpha) not given: the conditions on eps(alpha) were not checked")
    gam = g <= e2 / (cc * a)
    if not gam:
        reasons.append(f"gamma={g:.6g} > eps(2)/(c alpha)={e2 / (cc * a):.6g}")
    return LemmaB8Conditions(third, logc, gam, tuple(reasons))


def subsampled_rdp_wor_simple(alpha, gamma, base_rdp2, c=1.0, *, base_rdp_alpha=None,
                              check="warn"):
    """DIFF2 Lemma B.8: ``eps'(alpha) <= (2/3)(4 + e/c) gamma^2 alpha^2 eps(2) / (alpha - 1)``.

    Valid only when ``eps`` is increasing in alpha and the conditions of
    :func:`lemma_b8_conditions` hold.  The formula is always returned as printed; what happens
    when a condition fails (or cannot be checked because ``base_rdp_alpha`` is missing) is set
    by ``check``:

    * ``"warn"`` (default): a :class:`SubsamplingConditionWarning` naming each failed condition;
      the number returned is then NOT a certified bound.
    * ``"raise"``: :class:`~.validation.InputError` (a ``ValueError``) naming each failed condition.
    * ``"ignore"``: no check (used to reproduce a paper's arithmetic).

    Args:
        alpha: integer order >= 2 (the lemma inherits Lemma B.7's setting).
        gamma: sampling ratio in [0, 1].
        base_rdp2: ``eps(2)`` of the base mechanism, in [0, inf].
        c: the lemma's constant ``c > 0`` (DIFF2 footnote 14 uses c = 1).
        base_rdp_alpha: ``eps(alpha)`` of the base mechanism, to check the conditions.
        check: ``"warn"``, ``"raise"`` or ``"ignore"``.

    Returns:
        The Lemma B.8 value (a float), a certified bound only where the conditions hold.

    Raises:
        InputError: if ``check`` is unknown, an argument is out of range (checked even with
            ``"ignore"``), or, with ``check="raise"``, a condition fails or cannot be checked.
    """
    if check not in ("warn", "raise", "ignore"):
        raise InputError(f"check={check!r} is not allowed: expected one of 'warn', 'raise', 'ignore'.")
    conds = lemma_b8_conditions(alpha, gamma, base_rdp2, base_rdp_alpha, c)
    a = float(alpha)
    value = (2.0 / 3.0) * (4.0 + math.e / float(c)) * float(gamma) ** 2 * a * a * float(base_rdp2) / (a - 1.0)
    if check != "ignore" and not conds.ok:
        msg = "DIFF2 Lemma B.8 conditions fail: " + "; ".join(conds.reasons) \
            + ". The simple bound is not certified here; use subsampled_rdp_wor (Lemma B.7)."
        if check == "raise":
            raise InputError(msg)
        warnings.warn(msg, SubsamplingConditionWarning, stacklevel=2)
    return value


# ---------------------------------------------------------------------------------------------
# Gaussian specialisation: WBK19 Thm 9 and Thm 27
# ---------------------------------------------------------------------------------------------
@cached(maxsize=256)
def _log_forward_diffs(half_inv_var: float, max_order: int) -> np.ndarray:
    """``out[l] = log Delta^l h(0)`` (an upper bound on it) for even ``l <= max_order``.

    ``h(i) = exp((i - 1) eps(i)) = exp((i - 1) i / (2 z^2))`` and
    ``Delta^l h(0) = sum_i (-1)^(l-i) C(l, i) h(i)``.  For even ``l`` this is the moment
    ``E_q[(p/q - 1)^l] >= 0`` of the Gaussian likelihood ratio.  The alternating sum is formed in
    extended precision and its rounding error is added (so the value never undershoots the truth);
    rows whose cancellation is too large to resolve fall back to that upper bound, which is still
    sound (Thm 27 then takes the Thm 9 term through its min).  Odd entries are NaN (unused).
    """
    ld = np.longdouble
    u = float(np.finfo(ld).eps)
    L = max_order
    out = np.full(L + 1, np.nan)
    out[0] = 0.0
    i = np.arange(L + 1, dtype=ld)
    log_h = (i - 1) * i * ld(half_inv_var)
    log_int = np.concatenate([[ld(0)], np.log(np.arange(1, L + 1, dtype=ld))])
    cum = np.cumsum(log_int)  # log i!
    ls = np.arange(2, L + 1, 2)
    idx = np.arange(L + 1)
    valid = idx[None, :] <= ls[:, None]
    lcl = np.where(valid, ls[:, None] - idx[None, :], 0)
    lt = cum[ls][:, None] - cum[idx][None, :] - cum[lcl] + log_h[None, :]
    lt = np.where(valid, lt, ld(-np.inf))
    m = lt.max(axis=1)
    w = np.exp(lt - m[:, None])
    sign = np.where((ls[:, None] - idx[None, :]) % 2 == 0, ld(1), ld(-1))
    ssum = np.sum(sign * w, axis=1)
    abs_sum = np.sum(w, axis=1)
    absmax = np.max(np.where(valid, np.abs(lt), ld(0)), axis=1)
    # rounding of the terms (log error ~ u |lt|) and of the summation (~ l u), added as a bound
    err = abs_sum * ld(u) * (ld(4) * (ls + 2) + absmax * 4)
    up = ssum + err
    # Integrate instead only where the alternating sum really cancels (|sum| << sum of |terms|,
    # i.e. large z) and the bound is not sharp; elsewhere (small z: huge exponents, no
    # cancellation) the sum plus its error bound is already a sharp, sound upper bound.
    cancels = abs_sum > ld(1e3) * np.abs(ssum)
    use_sum = (up > 0) & ((err <= ld(1e-11) * up) | ~cancels)
    with np.errstate(divide="ignore", invalid="ignore"):
        vals = np.log(np.where(use_sum, up, ld(1))) + m
    for k, l in enumerate(ls):
        out[l] = float(vals[k]) if use_sum[k] else _log_even_moment_quadrature(half_inv_var, int(l))
    return out


def _log_even_moment_quadrature(half_inv_var: float, l: int) -> float:
    """``log E[(e^L - 1)^l]`` for even ``l``, ``L ~ N(-s^2/2, s^2)``, ``s^2 = 2 half_inv_var``.

    This is ``Delta^l h(0)`` (the privacy-loss variable of the Gaussian mechanism under the null
    has that law).  The integrand ``(e^(m + s x) - 1)^l phi(x)`` is non-negative and entire, so the
    trapezoidal rule converges like ``exp(-2 pi^2 / h^2)`` in the step ``h`` (standard units; the
    error for a strip of half-width ``d`` is ``~exp(-2 pi d / h + d^2 / 2)``): at ``h = 0.05``
    far below double precision (steps 0.01, 0.05 and 0.1 agree to 5e-13 in the log, z from 1
    to 1000, l up to 256).  The grid covers both modes with 40 standard units to spare; a
    relative margin of 1e-9 is added so the value stays an upper bound.
    """
    s = math.sqrt(2.0 * half_inv_var)
    m = -0.5 * s * s
    r = math.sqrt(l)
    lo, hi = -(r + 40.0), r + 2.0 * l * s + 40.0
    h = 0.05
    x = np.arange(lo, hi + h, h)
    with np.errstate(divide="ignore"):
        g = l * np.log(np.abs(np.expm1(m + s * x))) - 0.5 * x * x
    val = math.log(h) - 0.5 * math.log(2.0 * math.pi) + float(logsumexp(g))
    return val + 1e-9


def _thm27_terms(z: float, amax: int) -> np.ndarray:
    """Order-independent part of WBK19 Thm 27's j-th term, ``t[j]`` for j = 0..amax
    (dp-accounting's reading; forward differences up to order 256, Thm 9's term above)."""
    s2 = 0.5 / z / z                # inf for z below ~1e-154, never a division by zero
    js = np.arange(amax + 1, dtype=float)
    t = np.full(amax + 1, -np.inf)
    e2 = 2.0 * s2
    t[2] = min(math.log(4.0) + log_expm1(e2), e2 + math.log(2.0))
    if amax >= 3:
        t[3:] = math.log(2.0) + (js[3:] - 1.0) * js[3:] * s2   # 2 e^{(j-1) eps(j)}
        lim = min(amax, THM27_MAX_FORWARD_DIFFERENCE)
        if lim >= 3:
            L = lim + (lim % 2)
            fd = _log_forward_diffs(s2, L)
            jj = np.arange(3, lim + 1)
            t27 = math.log(4.0) + 0.5 * (fd[2 * (jj // 2)] + fd[2 * ((jj + 1) // 2)])
            t[3:lim + 1] = np.minimum(t[3:lim + 1], t27)
    return t


def subsampled_gaussian_rdp_wor(alpha, gamma, noise_multiplier, bound="thm27"):
    """RDP of the Gaussian mechanism on a subsample drawn without replacement (replace-one).

    * ``bound="thm9"``: DIFF2 Lemma B.7 / WBK19 Thm 9 with base ``eps(j) = j / (2 z^2)``
      (identical to :func:`subsampled_rdp_wor` with that base).
    * ``bound="thm27"`` (default): WBK19 Thm 27, the Gaussian-specific bound.  For ``j >= 3`` each
      term takes ``min{4 sqrt(Delta^{2 floor(j/2)} h(0) Delta^{2 ceil(j/2)} h(0)), 2 e^{(j-1) eps(j)}}``
      with ``h(i) = e^{(i-1) eps(i)}`` (the forward differences are even moments of the
      likelihood ratio); the ``j = 2`` term is Thm 9's.  Hence Thm 27 <= Thm 9 term by term.
      Forward differences are used up to order 256, as in dp-accounting; above it the Thm 9 term.

    Non-integer orders use WBK19 Corollary 10: ``(alpha - 1) eps'(alpha)`` is convex in alpha, so
    the linear interpolation of the integer neighbours' values is an upper bound.  ``gamma = 1``
    returns the exact un-subsampled ``alpha / (2 z^2)``, and no order ever returns more than that
    (subsampling never hurts: see :func:`subsampled_rdp_wor`).

    Args:
        alpha: order(s) > 1 (scalar or array).
        gamma: sampling ratio ``b / n`` in [0, 1].
        noise_multiplier: ``z > 0``: noise std over the L2-sensitivity (replace-one) of the query.
        bound: ``"thm27"`` or ``"thm9"``.

    Returns:
        The RDP bound(s): a float for a scalar ``alpha``, else an array shaped like ``alpha``.

    Raises:
        InputError: if ``bound`` is unknown or an order, ``gamma`` or ``noise_multiplier`` is
            out of range.
    """
    if bound not in ("thm27", "thm9"):
        raise InputError(f"bound={bound!r} is not allowed: expected 'thm27' or 'thm9'.")
    a = validation.orders_array(alpha, "alpha")
    g = validation.probability(gamma, "gamma")
    z = validation.positive(noise_multiplier, "noise_multiplier")
    flat = a.ravel()
    if g == 0.0:
        out = np.zeros(flat.shape)
    elif g == 1.0 or not math.isfinite(0.5 / z / z):
        out = flat * (0.5 / z / z)     # (z below ~1e-154: inf at every order, as is the truth)
    else:
        lg = math.log(g)
        ints = np.unique(np.concatenate([np.floor(flat), np.ceil(flat)]).astype(np.int64))
        ints = ints[ints >= 2]
        if bound == "thm9":
            eps = np.arange(2, int(ints.max()) + 1, dtype=float) / (2.0 * z * z)
            t = _thm9_terms(eps, math.inf)
        else:
            t = _thm27_terms(z, int(ints.max()))
        logm = dict(zip(ints.tolist(), _log1p_binomial_sums(ints, lg, t).tolist()))
        logm[1] = 0.0
        out = np.empty(flat.shape)
        for idx, x in enumerate(flat):
            lo, hi = math.floor(x), math.ceil(x)
            t = x - lo
            out[idx] = ((1.0 - t) * logm[lo] + t * logm[hi]) / (x - 1.0)
        out = np.minimum(out, flat * (0.5 / z / z))   # subsampling never hurts
    out = out.reshape(a.shape)
    return float(out) if out.ndim == 0 else out
