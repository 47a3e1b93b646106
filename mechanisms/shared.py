"""What several papers' calibrations share: the checks of a target, the papers' integer Renyi
order, the orders of the numerical DP-SGD accountant (one owner for each; no paper file imports a
sibling paper file)."""

from __future__ import annotations

import math

from ..accountant.validation import InputError
from ..accountant import validation as v

from .report import METHODS
from .releases import check_accountant
from .tighten import calibrate_poisson

__all__ = []

#: integer orders of DPSGD-E2 (the numerical stand-in for Abadi's unspecified constants)
ABADI_ORDERS = tuple(range(2, 257)) + (300, 400, 512, 768, 1024)


#: the largest target eps a calibration takes: above it eps promises nothing (e^eps overflows every
#: float) and the noise it asks for is below the accountants' tested range
MAX_TARGET_EPSILON = 1e4


def check_target(epsilon, delta, method):
    """Check a calibration target and method; return the target as floats.

    Args:
        epsilon: target eps, > 0 and at most ``MAX_TARGET_EPSILON`` (1e4).
        delta: target delta, in (0, 1).
        method: ``"paper"`` or ``"tight"`` (one of ``METHODS``).

    Returns:
        ``(epsilon, delta)`` as floats.

    Raises:
        InputError: if epsilon is not a number in (0, 1e4], delta is not in (0, 1), or method is
            not one of ``METHODS``.
    """
    e = v.positive(epsilon, "epsilon")
    if e > MAX_TARGET_EPSILON:
        raise InputError(f"epsilon={epsilon!r} is not allowed: expected a target in (0, {MAX_TARGET_EPSILON:g}] (an eps "
                         "this large promises no privacy -- e^eps overflows every float -- and the noise it asks for "
                         "is below what the accountants are tested at).")
    d = v.delta(delta)
    if method not in METHODS:
        raise InputError(f"method={method!r} is not allowed: expected one of {METHODS}.")
    return e, d


def check_calibration(epsilon, delta, method, accountant):
    """Check the arguments every mechanism's ``calibrate`` takes; return the route and the target.

    Args:
        epsilon: target eps, in (0, 1e4].
        delta: target delta, in (0, 1).
        method: ``"paper"`` or ``"tight"``.
        accountant: what tight mode meets: ``"best"``, ``"pld"``, ``"rdp"`` or ``"gdp"``.

    Returns:
        ``(route, epsilon, delta)``: the route the calibration takes (:func:`~.releases.check_accountant`)
        and the target as floats (:func:`check_target`).

    Raises:
        InputError: as :func:`~.releases.check_accountant` and :func:`check_target`.
    """
    route = check_accountant(accountant)
    return (route, *check_target(epsilon, delta, method))


def paper_order(x: float, epsilon: float) -> int:
    """``1 + ceil(x)``, the integer Renyi order the papers fix from the budget (x grows like
    log(1/delta)/eps); a clear error where it is not a usable number (eps of order 1e-300).

    Args:
        x: the paper's order term (grows like log(1/delta)/eps); must be at most 1e12.
        epsilon: the target eps (named in the error message only).

    Returns:
        The integer Renyi order ``1 + ceil(x)``.

    Raises:
        InputError: if ``x`` is above 1e12 or NaN.
    """
    if not x <= 1e12:
        raise InputError(f"epsilon={epsilon!r} is not allowed: the paper's Renyi order 1 + ceil({x:.6g}) is not a "
                         "usable number; expected a larger epsilon.")
    return 1 + math.ceil(x)


def abadi_multiplier(sampling_rate: float, steps: int, epsilon: float, delta: float, rtol: float = 1e-9) -> float:
    """DP-SGD's paper-mode noise multiplier (DPSGD-E2: Abadi et al.'s Thm 1 has unspecified constants,
    so the paper's calibration is the numerical Poisson accountant): the smallest multiplier whose
    eps at the integer orders :data:`ABADI_ORDERS` with Mironov's conversion (Lemma B.4) meets the
    target.  Owned here because DiceSGD's code calibration starts from it too.

    Args:
        sampling_rate: Poisson sampling rate q, in (0, 1].
        steps: number of steps T, an integer >= 1.
        epsilon: target eps, > 0.
        delta: target delta, in (0, 1).
        rtol: relative tolerance of the root search on the multiplier.

    Returns:
        The noise multiplier (std / L2 sensitivity).

    Raises:
        InputError: if sampling_rate is not in (0, 1] or steps is not an integer >= 1 (raised by
            the validation helpers), or the target is not allowed.
    """
    v.in_range(sampling_rate, "sampling_rate", 0.0, 1.0, low_open=True)
    v.integer(steps, "steps", low=1)
    return calibrate_poisson(sampling_rate, steps, epsilon, delta, conversion="mironov", orders=ABADI_ORDERS,
                             refine=False, rtol=rtol)
