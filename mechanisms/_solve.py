"""Find the smallest noise scale whose accounted eps stays within the target."""

from __future__ import annotations

import math
from typing import Callable

from scipy import optimize

__all__ = ["smallest_scale"]


def smallest_scale(eps_of: Callable[[float], float], target: float, start: float = 1.0,
                   rtol: float = 1e-9, log_step: float = 2.0) -> float:
    """Smallest ``t > 0`` (to relative tolerance ``rtol``) with ``eps_of(t) <= target``.

    ``eps_of`` must be non-increasing in ``t``.  The root is bracketed geometrically, refined by
    Brent's method on ``log t``, and the returned point is always on the feasible side: it is
    re-checked, and nudged up until ``eps_of(t) <= target`` holds (never overshoots).
    """
    f = lambda lt: eps_of(math.exp(lt)) - target  # noqa: E731
    lo = hi = math.log(start)
    if f(hi) > 0:
        while f(hi) > 0:
            lo, hi = hi, hi + log_step
            if hi > 700:
                raise ValueError("no noise level reaches the target epsilon (eps does not decrease with noise).")
    else:
        while f(lo) <= 0:
            hi, lo = lo, lo - log_step
            if lo < -700:
                return math.exp(hi)
    root = optimize.brentq(f, lo, hi, xtol=rtol / 4, rtol=1e-15, maxiter=200)
    t = math.exp(root)
    step = rtol / 8
    while eps_of(t) > target:
        t = math.exp(root) * (1.0 + step)
        step *= 2.0
    return t
