"""Calibration of any event tree: the smallest noise parameter whose certified eps meets a target.

:func:`calibrate_parameter` bisects (geometrically) a scalar the tree is built from -- a Laplace
scale, a noise multiplier, a randomized-response noise -- on the certified eps of the chosen route
(:meth:`~.accountant.PrivacyAccountant.epsilon_report`), so it takes every kind of :mod:`.kinds`,
a new one included.  The answer is always on the certified side: the returned parameter's own eps
is at most the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import validation
from .accountant import PrivacyAccountant
from .validation import InputError

__all__ = []


@dataclass(frozen=True)
class Calibration:
    """The answer of :func:`calibrate_parameter`.

    Attributes:
        parameter: the calibrated parameter (its eps is at most the target).
        epsilon: its certified eps.
        delta: the target delta.
        method: the route that certified it.
    """

    parameter: float
    epsilon: float
    delta: float
    method: str


def calibrate_parameter(build, epsilon, delta, low: float, high: float, accountant: str = "best",
                        rtol: float = 1e-4) -> Calibration:
    """The smallest ``x`` in ``[low, high]`` (to relative ``rtol``) with ``eps(build(x)) <= epsilon``,
    eps non-increasing in ``x`` (more noise, less eps).

    Args:
        build: callable ``x -> event or tree``.
        epsilon: the target eps, > 0.
        delta: the target delta, in (0, 1).
        low: the smallest parameter tried, > 0.
        high: the largest, > ``low``.
        accountant: the route, as :meth:`~.accountant.PrivacyAccountant.epsilon_report`.
        rtol: the relative tolerance on ``x``, in (0, 1).

    Returns:
        The :class:`Calibration`.

    Raises:
        InputError: if an argument is out of range, or even ``high`` misses the target.
    """
    target = validation.positive(epsilon, "epsilon")
    d = validation.delta(delta)
    lo = validation.positive(low, "low")
    hi = validation.in_range(high, "high", lo, math.inf, low_open=True, high_open=True)
    r = validation.in_range(rtol, "rtol", 0.0, 1.0, low_open=True, high_open=True)

    def rep(x):
        return PrivacyAccountant().compose(build(x)).epsilon_report(d, accountant)

    top = rep(hi)
    if not top.epsilon <= target:
        raise InputError(f"high={hi!r} is not allowed: its eps {top.epsilon:.6g} exceeds epsilon={target!r}; "
                         f"expected a larger high.")
    bottom = rep(lo)
    if bottom.epsilon <= target:
        return Calibration(lo, bottom.epsilon, d, bottom.method)
    while hi / lo > 1.0 + r:
        mid = math.sqrt(lo * hi)
        m = rep(mid)
        if m.epsilon <= target:
            hi, top = mid, m
        else:
            lo = mid
    return Calibration(hi, top.epsilon, d, top.method)
