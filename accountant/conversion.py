"""RDP -> (eps, delta)-DP conversions and the choice of the order.

* ``"mironov"``: DIFF2 Lemma B.4 (Mironov 2017, Prop. 3):
  ``eps = rho + log(1/delta) / (alpha - 1)``.  Use it to reproduce the papers' numbers.
* ``"improved"``: Canonne, Kamath & Steinke 2020 (Prop. 12) = Balle et al. 2020 (Thm 21):
  ``eps = rho + log(1 - 1/alpha) - log(delta alpha) / (alpha - 1)``; never larger than
  ``"mironov"`` for alpha > 1.

When the RDP curve is linear, ``rho(alpha) = alpha S`` (any composition of full-batch Gaussian
mechanisms), :func:`best_epsilon_linear` optimises over the real order exactly: in closed form
for ``"mironov"`` (``alpha* = 1 + sqrt(log(1/delta)/S)``, ``eps = S + 2 sqrt(S log(1/delta))``),
and to machine precision by golden-section search for ``"improved"``.
"""

from __future__ import annotations

import math

import numpy as np
from .validation import InputError
from . import validation
from .roots import golden_min

__all__ = []

CONVERSIONS = ("improved", "mironov")


def _check_conversion(conversion: str) -> None:
    if conversion not in CONVERSIONS:
        raise InputError(f"conversion={conversion!r} is not allowed: expected one of {CONVERSIONS}.")


def _convert(alpha: np.ndarray, rdp: np.ndarray, log_delta: float, conversion: str) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        if conversion == "mironov":
            eps = rdp - log_delta / (alpha - 1.0)
        else:
            eps = rdp + np.log1p(-1.0 / alpha) - (log_delta + np.log(alpha)) / (alpha - 1.0)
    eps = np.where(np.isinf(rdp), np.inf, eps)
    return np.maximum(eps, 0.0)


def _check_rdp(rdp, shape) -> np.ndarray:
    try:
        r = np.asarray(rdp, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"rdp={rdp!r} is not allowed: expected non-negative numbers.") from None
    if r.shape != shape:
        if r.size == 1:
            r = np.full(shape, float(r.ravel()[0]))
        else:
            raise InputError(f"rdp has shape {r.shape} but alpha has shape {shape}: expected equal shapes.")
    if np.isnan(r).any() or (r < 0).any():
        bad = r[np.isnan(r) | (r < 0)][0]
        raise InputError(f"rdp={float(bad)!r} is not allowed: expected a number in [0, inf].")
    return r


def rdp_to_dp(alpha, rdp, delta, conversion="improved"):
    """Convert ``(alpha, rdp)``-RDP into ``(eps, delta)``-DP at each order (vectorised).

    Formal guarantee: a mechanism that is ``(alpha, rdp)``-RDP is ``(eps, delta)``-DP with the
    returned ``eps`` (clipped below at 0).  ``rdp = inf`` gives ``eps = inf``.

    Args:
        alpha: one Rényi order or an array of orders, each in (1, inf).
        rdp: the RDP value(s) at ``alpha``, in [0, inf]; a scalar is broadcast, otherwise the
            same shape as ``alpha``.
        delta: the target delta, in (0, 1).
        conversion: ``"improved"`` (Canonne et al. 2020, Prop. 12) or ``"mironov"`` (Mironov
            2017, Prop. 3).

    Returns:
        ``eps`` (>= 0): a float for a scalar ``alpha``, else an array shaped like ``alpha``.

    Raises:
        InputError: if ``conversion`` is unknown, ``delta`` or an order is out of range, or
            ``rdp`` is negative, NaN, non-numeric or of a different shape.
    """
    _check_conversion(conversion)
    d = validation.delta(delta)
    a = validation.orders_array(alpha, "alpha")
    r = _check_rdp(rdp, a.shape)
    out = _convert(a, r, math.log(d), conversion)
    return float(out) if out.ndim == 0 else out


def best_epsilon(orders, rdp, delta, conversion="improved"):
    """Smallest ``eps`` over the given orders: returns ``(eps, order)``.

    Formal guarantee: valid for every order, hence for the minimum.

    Args:
        orders: the Rényi orders, each in (1, inf).
        rdp: the RDP values at ``orders`` (same shape, or a scalar), in [0, inf].
        delta: the target delta, in (0, 1).
        conversion: ``"improved"`` or ``"mironov"``.

    Returns:
        A tuple ``(eps, order)`` of floats: the smallest epsilon and the order attaining it.

    Raises:
        InputError: if ``conversion`` is unknown, ``delta`` or an order is out of range, or
            ``rdp`` is negative, NaN, non-numeric or of a different shape.
    """
    _check_conversion(conversion)
    d = validation.delta(delta)
    a = np.atleast_1d(validation.orders_array(orders, "orders"))
    r = _check_rdp(np.atleast_1d(np.asarray(rdp, dtype=float)) if np.ndim(rdp) else rdp, a.shape)
    eps = _convert(a, r, math.log(d), conversion)
    i = int(np.argmin(eps))
    return float(eps[i]), float(a[i])


def best_epsilon_linear(slope, delta, conversion="improved"):
    """Exact optimum over real ``alpha > 1`` for a linear RDP curve ``rho(alpha) = alpha * slope``.

    Returns ``(eps, alpha*)``.  ``"mironov"``: closed form ``S + 2 sqrt(S log(1/delta))`` at
    ``alpha* = 1 + sqrt(log(1/delta)/S)``.  ``"improved"``: the convex 1-D problem (in log(alpha - 1))
    solved by golden-section search to ~1e-13, followed by a check against the closed-form
    Mironov value (the improved one is never larger).

    Args:
        slope: ``S``, the RDP curve's slope, in [0, inf] (for a Gaussian: ``sum 1/(2 z^2)``).
        delta: the target delta, in (0, 1).
        conversion: ``"improved"`` or ``"mironov"``.

    Returns:
        A tuple ``(eps, alpha*)`` of floats; ``(0.0, inf)`` for ``slope = 0``.

    Raises:
        InputError: if ``conversion`` is unknown or ``slope`` / ``delta`` is out of range.
    """
    _check_conversion(conversion)
    d = validation.delta(delta)
    s = validation.in_range(slope, "slope", 0.0, math.inf)
    if s == 0.0:
        return 0.0, math.inf
    L = -math.log(d)
    a_m = 1.0 + math.sqrt(L / s)
    eps_m = s + 2.0 * math.sqrt(s * L)
    if conversion == "mironov" or not a_m - 1.0 > 1e-9:
        # (a slope so large that the optimal order is within 1e-9 of 1 -- noise below ~1e-5 of the
        # sensitivity: Mironov's closed form, a valid value the improved one can only lower by
        # a relative ~1e-9; inf for an infinite slope)
        return eps_m, a_m

    def f(x):  # x = log(alpha - 1)
        a = 1.0 + math.exp(x)
        return a * s + math.log1p(-1.0 / a) - (math.log(d) + math.log(a)) / (a - 1.0)

    x0 = math.log(a_m - 1.0)   # the improved optimum lies below Mironov's (its penalty is smaller)
    x, eps = golden_min(f, x0 - 30.0, x0 + 1.0, xtol=1e-13)
    if not (eps <= eps_m):  # cannot happen for alpha > 1; keep the proven value if it did
        return eps_m, a_m
    return max(eps, 0.0), 1.0 + math.exp(x)
