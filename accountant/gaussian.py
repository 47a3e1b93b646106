"""Rényi DP of the Gaussian mechanism (DIFF2 Lemma B.6 = Mironov 2017, Prop. 7)."""

from __future__ import annotations

import math
import sys

from . import validation

__all__ = []


def gaussian_rdp(alpha, noise_multiplier):
    """RDP of the Gaussian mechanism: ``eps(alpha) = alpha / (2 z**2)``.

    DIFF2 Lemma B.6 (Mironov 2017, Prop. 7): ``h(D) + N(0, s^2 I)`` with L2-sensitivity
    ``Delta`` is ``(alpha, alpha Delta^2 / (2 s^2))``-RDP for every real ``alpha > 1``;
    ``z = s / Delta`` is the noise multiplier.

    Formal guarantee: exact (the Rényi divergence of two Gaussians with equal covariance).

    Args:
      alpha: order(s) > 1, scalar or array (vectorised).
      noise_multiplier: ``z > 0``.

    Returns:
      float for a scalar ``alpha``, else an array of the same shape.

    >>> gaussian_rdp(2.0, 1.0)
    1.0
    >>> gaussian_rdp([2, 4], 2.0).tolist()
    [0.25, 0.5]
    """
    z = validation.positive(noise_multiplier, "noise_multiplier")
    a = validation.orders_array(alpha, "alpha")
    den = 2.0 * z * z
    # outside the normal range 2 z^2 is subnormal or 0 (z below about 1e-154; 0, a division by zero, below
    # 1.5e-162) or rounds the curve down to a subnormal or 0 (z above about 1e154): there the curve comes
    # from the floored 1/z instead, inf or tiny, never below the truth
    out = a / den if sys.float_info.min <= den < math.inf else a * (0.5 * inverse_noise(z) * inverse_noise(z))
    return float(out) if out.ndim == 0 else out


#: the smallest 1/z whose square is a normal double (about 1.5e-154)
_FLOOR = math.sqrt(sys.float_info.min)


def inverse_noise(z: float) -> float:
    """``1 / z`` of a noise multiplier (rounded to nearest), raised to ``2^-511`` (about 1.5e-154) where it
    is smaller (z above about 7e153), so that its square -- ``1 / z^2``, the Gaussian's RDP slope and GDP's
    mu squared -- is never a subnormal or 0 below the true value; inf for z below about 5.6e-309 (never a
    division by zero).

    Args:
        z: the noise multiplier, a float > 0.

    Returns:
        A float in ``[2^-511, inf]``.
    """
    r = 1.0 / z
    return r if r >= _FLOOR else _FLOOR


def composed_mu(releases) -> float:
    """``mu = sqrt(sum_i k_i / z_i^2)`` of full-batch Gaussian releases (exact GDP of their composition,
    Dong, Roth & Su 2019), from :func:`inverse_noise` twice: inf below z = 1e-162, never rounded to 0 above.

    Args:
        releases: ``(z, k)`` pairs, each a noise multiplier > 0 and a count.

    Returns:
        ``mu`` (a float, 0.0 for none, possibly inf).
    """
    return math.sqrt(sum(k * inverse_noise(z) * inverse_noise(z) for z, k in releases))
