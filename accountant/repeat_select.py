"""RDP of repeat-and-select (Papernot & Steinke 2022, "Hyperparameter tuning with Rényi differential
privacy", ICLR): run a mechanism a random number ``K`` of times, release only the best run.

``K`` is truncated negative binomial with shape ``eta >= 0`` (``eta = 0``: logarithmic, ``eta = 1``:
geometric) or Poisson (``eta = inf``), with mean ``E[K]``.  The bounds are Thm 2 (truncated negative
binomial) and Thm 6 (Poisson) of the paper, as dp-accounting 0.6 evaluates them, on a grid of orders
that contains dp-accounting's: every minimum over the grid is then at most dp-accounting's, so the
RDP is at most its at each of its orders.
"""

from __future__ import annotations

import math

import numpy as np

from .validation import InputError

__all__ = []

#: the orders the bounds minimise over: dp-accounting's default grid and dpcalib's
GRID = np.unique(np.concatenate((1.0 + np.arange(1, 100) / 10.0, np.arange(2, 65), 2.0 ** np.arange(6, 13),
                                 [72, 80, 96, 112, 160, 192, 224, 320, 384, 448, 640, 768])).astype(float))


def _tnb_mean(gamma: float, shape: float) -> float:
    if shape == 1.0:
        return 1.0 / gamma
    lg = math.log(gamma)
    if shape == 0.0:
        return (1.0 - 1.0 / gamma) / lg if gamma < 1.0 else 1.0
    return shape * (1.0 / gamma - 1.0) / (-math.expm1(shape * lg)) if gamma < 1.0 else 1.0


def tnb_gamma(shape: float, mean: float) -> float:
    """The parameter ``gamma`` of the truncated negative binomial of shape ``eta`` and mean ``E[K]``,
    rounded DOWN (a smaller gamma only raises the bound's ``-log(gamma)`` term): Papernot & Steinke Def. 1.

    Args:
        shape: ``eta``, in [0, inf).
        mean: ``E[K]``, >= 1.

    Returns:
        ``gamma`` in (0, 1].
    """
    if shape == 1.0:
        return math.nextafter(1.0 / mean, 0.0)
    lo, hi = 0.0, min(1.0, 2.0 * (shape + 1.0) / mean)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if _tnb_mean(mid, shape) < mean:
            hi = mid
        else:
            lo = mid
    return lo


def rdp_delta(orders, rdp, epsilon):
    """The smallest delta at ``epsilon`` the RDP curve gives (Canonne, Kamath & Steinke 2020 Prop. 12,
    and ``sqrt(1 - e^(-KL))`` with ``KL <= rdp``): dp-accounting's ``compute_delta``, at one epsilon
    or at each of an array of them (one pass: Thm 6 asks it at every order of the grid).

    Args:
        orders: orders >= 1.
        rdp: the RDP at them.
        epsilon: >= 0, a float or an array.

    Returns:
        delta in [0, 1]: a float for a float ``epsilon``, else an array shaped like it.
    """
    a = np.asarray(orders, dtype=float)
    r = np.asarray(rdp, dtype=float)
    e = np.asarray(epsilon, dtype=float)[..., None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        kl = np.where(r > 0, 0.5 * np.log1p(-np.exp(-r)), -np.inf)
        b = np.where(a > 1.01, (a - 1) * (r - e + np.log1p(-1 / a)) - np.log(a), np.inf)
    ld = np.nan_to_num(np.minimum(kl, b), nan=0.0)
    out = np.minimum(1.0, np.exp(np.min(ld, axis=-1)))
    return float(out) if np.ndim(epsilon) == 0 else out


def grid_of(integer_only: bool = False) -> np.ndarray:
    """The orders the bounds minimise over (integers only where the inner curve needs them).

    Args:
        integer_only: keep the integer orders only.

    Returns:
        A sorted float array.
    """
    return GRID[GRID == np.round(GRID)] if integer_only else GRID


def repeat_and_select_rdp(orders, inner, mean: float, shape: float, integer_only: bool = False,
                          grid_values=None) -> np.ndarray:
    """RDP of the best of ``K`` runs, ``K`` as the module says, at ``orders``.

    Thm 2 (``shape < inf``): ``eps(a) + log(E[K]) / (a - 1) + (1 + eta) min_b ((1 - 1/b) eps(b) - log(gamma) / b)``;
    Thm 6 (``shape = inf``): ``eps(a) + E[K] delta(log(1 + 1/(a - 1))) + log(E[K]) / (a - 1)``; then the
    smallest value at any order at least ``a`` (RDP is non-decreasing in the order).

    Args:
        orders: orders > 1 (an array).
        inner: callable ``orders -> RDP`` of one run.
        mean: ``E[K]``, >= 1.
        shape: ``eta`` in [0, inf].
        integer_only: the inner curve holds at integer orders only.
        grid_values: ``(grid_of(integer_only), inner(grid))`` computed once (a caller's cache), or None.

    Returns:
        A float array shaped like ``orders``.

    Raises:
        InputError: if ``mean`` or ``shape`` is out of range.
    """
    if not (mean >= 1.0 and math.isfinite(mean)):
        raise InputError(f"mean={mean!r} is not allowed: expected a number in [1, inf).")
    if not shape >= 0.0:
        raise InputError(f"shape={shape!r} is not allowed: expected a number in [0, inf].")
    a = np.atleast_1d(np.asarray(orders, dtype=float))
    if grid_values is None:
        grid_values = (grid_of(integer_only), np.asarray(inner(grid_of(integer_only)), dtype=float))
    g0, r0 = grid_values
    extra = np.setdiff1d(a, g0)
    grid = np.concatenate((g0, extra))
    r = np.concatenate((r0, np.asarray(inner(extra), dtype=float) if extra.size else np.zeros(0)))
    order = np.argsort(grid, kind="stable")
    grid, r = grid[order], r[order]
    lm = math.log(mean)
    if math.isinf(shape):
        out = r + mean * rdp_delta(grid, r, np.log1p(1 / (grid - 1))) + lm / (grid - 1)
    else:
        gamma = tnb_gamma(shape, mean)
        c = (1 + shape) * float(np.min((1 - 1 / grid) * r - math.log(gamma) / grid))
        out = r + lm / (grid - 1) + c
    out = np.minimum.accumulate(out[::-1])[::-1]                 # monotone in the order
    return np.maximum(out[np.searchsorted(grid, a)], 0.0).reshape(np.shape(orders))
