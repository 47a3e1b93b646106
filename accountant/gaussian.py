"""Rényi DP of the Gaussian mechanism (DIFF2 Lemma B.6 = Mironov 2017, Prop. 7)."""

from __future__ import annotations

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
    out = a / (2.0 * z * z)
    return float(out) if out.ndim == 0 else out
