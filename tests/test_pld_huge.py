"""Brackets where eps is huge or the memory cap binds (accountant/pld/refine.py: HUGE_EPS, the probe grid, the
window prediction).

Beyond eps = HUGE_EPS (1000) a bracket is refined to HUGE_RTOL (1e-3) relative, with a note: the report
of a DP-SGD run at noise 0.01 (eps ~ 6.5e4) composed windows of 1e7 points for minutes at 3e-5.  A
first grid whose window would be huge is composed only after a coarse probe grid has shown eps is not
beyond HUGE_EPS.  And a grid whose window is predicted over the memory cap is not composed (it failed
after the seconds its steps cost): the finest grid predicted to fit is, or none.
"""

import math

import mpmath
import pytest

import dpcalib.accountant.pld as P
import dpcalib.accountant.pld.refine as R
from dpcalib.accountant import GaussianEvent, PoissonSampledGaussianEvent


def _gaussian_eps(mu, delta):
    """eps(delta) of mu-GDP (one Gaussian step, sensitivity 1, noise 1/mu), by mpmath at 60 digits."""
    mpmath.mp.dps = 60
    mu = mpmath.mpf(mu)

    def dl(e):                                  # delta(eps), decreasing in eps
        return mpmath.ncdf(-e / mu + mu / 2) - mpmath.exp(e) * mpmath.ncdf(-e / mu - mu / 2)
    lo, hi = mpmath.mpf(0), mu * mu / 2 + 40 * mu
    assert dl(lo) > delta > dl(hi)
    for _ in range(200):                        # bisection: no solver's tolerance to trip on
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if dl(mid) > delta else (lo, mid)
    return float(hi)


def test_a_huge_eps_is_bracketed_to_1e3_relative_and_contains_the_closed_form():
    P.clear_cache()
    b = P.pld_epsilon([(GaussianEvent(0.02), 1)], 1e-5)
    exact = _gaussian_eps(50.0, 1e-5)
    assert exact > R.HUGE_EPS
    assert b.converged and b.lower <= exact <= b.upper
    assert b.upper - b.lower <= R.HUGE_RTOL * b.upper
    if b.upper - b.lower > P.RTOL * b.upper:
        assert any("beyond 1000" in n for n in b.notes)


def test_a_tiny_noise_run_probes_a_coarse_grid_first_and_answers_in_one_composition(monkeypatch):
    """The report's case (q = 0.02, z = 0.01, 150 steps): no composition on the first grid (0.0074, a
    window of ~3e7 points); the bracket holds the fine grid's (0.0297: [64617.316, 64618.630], 24 s,
    2026-11-28) and a fixed coarse grid's."""
    P.clear_cache()
    ev = [(PoissonSampledGaussianEvent(0.02, 0.01), 150)]
    grids = []
    orig = R.epsilon_at

    def spy(e, d, h, cap):
        grids.append(h)
        return orig(e, d, h, cap)
    monkeypatch.setattr(R, "epsilon_at", spy)
    b = P.pld_epsilon(ev, 1e-5)
    assert P.first_grid(ev, 1e-5) < 0.01 and min(grids) > 0.1
    assert b.converged and b.upper - b.lower <= R.HUGE_RTOL * b.upper
    assert any("beyond 1000" in n for n in b.notes)
    assert b.lower <= 64618.630 and b.upper >= 64617.316
    fixed = P.pld_epsilon(ev, 1e-5, discretization=0.476)
    assert max(b.lower, fixed.lower) <= min(b.upper, fixed.upper)


def test_eps_below_the_huge_scale_keeps_rtol():
    P.clear_cache()
    b = P.pld_epsilon([(PoissonSampledGaussianEvent(0.5, 0.3), 20)], 1e-6)
    assert b.upper < R.HUGE_EPS and b.converged
    assert b.upper - b.lower <= max(P.RTOL * b.upper, 1e-5)
    assert not any("beyond" in n for n in b.notes)


@pytest.mark.parametrize("q, z, k, cap, failed_at_most", [(0.01, 1.0, 1000, 1 << 20, 0), (0.2, 0.6, 300, 1 << 20, 1),
                                                          (1e-3, 0.8, 10_000, 1 << 21, 1)])
def test_a_grid_predicted_over_the_cap_is_not_composed(monkeypatch, q, z, k, cap, failed_at_most):
    """At most one composition fails on the cap (before: up to three, each costing its steps), the
    bracket is the finest fitting grid's own, with the cap's note, and it holds the bracket of the
    default cap."""
    P.clear_cache()
    ev = [(PoissonSampledGaussianEvent(q, z), k)]
    calls = []
    orig = R.epsilon_at

    def spy(e, d, h, c):
        r = orig(e, d, h, c)
        calls.append((h, r[0] is None))
        return r
    monkeypatch.setattr(R, "epsilon_at", spy)
    b = P.pld_epsilon(ev, 1e-6, memory_cap=cap)
    assert sum(f for _, f in calls) <= failed_at_most
    assert not b.converged and any("memory cap" in n for n in b.notes)
    monkeypatch.setattr(R, "epsilon_at", orig)
    full = P.pld_epsilon(ev, 1e-6)
    assert b.lower <= full.upper and full.lower <= b.upper
    assert b.lower <= full.lower * (1 + 1e-9) and b.upper >= full.upper * (1 - 1e-9)
    assert math.isfinite(b.upper)
