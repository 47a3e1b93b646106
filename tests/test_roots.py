"""The accountant's own root finder and minimisers (accountant/roots.py) against scipy.optimize:
the bounded minimiser takes scipy's exact step sequence, so it must return the same point."""

import math

import numpy as np
import pytest
from scipy import optimize

from dpcalib.accountant.roots import bounded_min, brentq, golden_min

FUNCTIONS = [
    lambda x: (x - 1.3) ** 2,
    lambda x: abs(x - 0.7),                       # a kink: golden steps only near it
    lambda x: math.cos(3.0 * x) + 0.1 * x,        # several local minima
    lambda x: x,                                  # minimum at the lower bound
    lambda x: -x,                                 # at the upper bound
    lambda x: math.exp(x) - 2.0 * x,
    lambda x: 0.0,                                # flat
    lambda x: 1e-300 * (x - 0.2) ** 2,            # tiny values
    lambda x: 1e300 * (x - 0.2) ** 2 if abs(x - 0.2) < 1e-4 else 1e292 * abs(x - 0.2),
]


@pytest.mark.parametrize("k", range(len(FUNCTIONS)))
@pytest.mark.parametrize("lo, width", [(-3.0, 10.0), (0.1, 0.5), (1.0, 1e-3), (0.2, 1e-9), (-1e3, 2e3), (5.0, 0.0)])
@pytest.mark.parametrize("xatol", [1e-12, 1e-6, 1e-2])
def test_bounded_min_is_scipys_bounded_brent(k, lo, width, xatol):
    f = FUNCTIONS[k]
    hi = lo + width
    ref = optimize.minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": xatol})
    x, fx, ok = bounded_min(f, lo, hi, xatol)
    assert (x, fx, ok) == (ref.x, ref.fun, ref.success)
    assert lo <= x <= hi


def test_bounded_min_reports_running_out_and_nan():
    x, fx, ok = bounded_min(lambda x: (x - 0.3) ** 2, 0.0, 1.0, 1e-15, maxiter=3)
    assert not ok and 0.0 <= x <= 1.0
    x, fx, ok = bounded_min(lambda x: math.nan, 0.0, 1.0)
    assert not ok


@pytest.mark.parametrize("bounds", [(1.0, 0.0), (0.0, math.inf), (math.nan, 1.0)])
def test_bounded_min_refuses_bad_bounds(bounds):
    with pytest.raises(ValueError, match="bounds"):
        bounded_min(lambda x: x, *bounds)


def test_brentq_and_golden_min_agree_with_scipy():
    for c in np.linspace(-2.0, 3.0, 11):
        f = lambda x, c=c: math.tanh(x - c) + 0.01 * (x - c)
        assert abs(brentq(f, -10.0, 10.0) - optimize.brentq(f, -10.0, 10.0, xtol=1e-14)) < 1e-12
        x, _ = golden_min(lambda x, c=c: (x - c) ** 2, -5.0, 5.0)
        assert abs(x - c) < 1e-6
