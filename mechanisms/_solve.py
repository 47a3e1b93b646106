"""Find the smallest noise scale whose accounted eps stays within the target."""

from __future__ import annotations

import math
from typing import Callable

from ..accountant._roots import brentq

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
    root = brentq(f, lo, hi, xtol=rtol / 4, rtol=1e-15, maxiter=200)
    t = math.exp(root)
    step = rtol / 8
    while eps_of(t) > target:
        t = math.exp(root) * (1.0 + step)
        step *= 2.0
    return t


#: a short grid for the coarse stage of :func:`tight_scale`
COARSE_ORDERS = tuple(range(2, 65)) + (80, 96, 128, 192, 256, 512, 1024)


def tight_scale(build, target: float, delta: float, conversion: str = "improved", start: float = 1.0,
                rtol: float = 1e-9) -> float:
    """Smallest noise scale ``t`` whose RDP accountant ``build(t)`` spends at most ``target``.

    Stage 1 solves on a short integer grid of orders (coarse, 1e-3).  Stage 2 fixes the optimal
    order of the full accountant at that noise and solves at that single order (any fixed order
    gives a valid eps, so each step is sound; each evaluation costs one order); it repeats while
    the optimal order moves.  The answer is re-checked with the full accountant.
    """
    import numpy as np

    from ..accountant import best_epsilon, rdp_to_dp

    coarse = np.array(COARSE_ORDERS, dtype=float)
    t = smallest_scale(lambda s: best_epsilon(coarse, build(s).rdp(coarse), delta, conversion)[0],
                       target, start=start, rtol=1e-3)
    seen = set()
    for _ in range(5):
        order = build(t).epsilon_report(delta, "rdp", conversion).order
        if order in seen:
            break
        seen.add(order)
        t = smallest_scale(lambda s, a=order: float(rdp_to_dp(a, build(s).rdp([a])[0], delta, conversion)),
                           target, start=t, rtol=rtol, log_step=1e-2)
    while build(t).get_epsilon(delta, "rdp", conversion) > target:  # guard; not expected to trigger
        t *= 1.0 + rtol
    return t
