"""RDP -> DP conversions (Lemma B.4 and the improved conversion) and exact GDP."""

import math

import numpy as np
import pytest
from scipy import optimize

from accountant import (
    best_epsilon,
    best_epsilon_linear,
    gdp_delta,
    gdp_epsilon,
    gdp_mu,
    rdp_to_dp,
)
from tests import oracles


def test_mironov_conversion_closed_form():
    # DIFF2 Lemma B.4: eps = rho + log(1/delta)/(alpha - 1)
    assert rdp_to_dp(9.0, 1.5, 1e-5, "mironov") == pytest.approx(1.5 + math.log(1e5) / 8, rel=1e-15)


def test_improved_conversion_closed_form_and_never_worse():
    a = np.array([1.5, 2.0, 9.0, 100.0])
    rho = np.array([0.1, 0.5, 1.5, 3.0])
    imp = rdp_to_dp(a, rho, 1e-6, "improved")
    expected = rho + np.log1p(-1 / a) - (np.log(1e-6) + np.log(a)) / (a - 1)
    np.testing.assert_allclose(imp, expected, rtol=1e-14)
    assert np.all(imp <= rdp_to_dp(a, rho, 1e-6, "mironov"))


def test_spec_dp_gd_conversion_numbers():
    # spec 1(f), eps = 3: sigma1^2 = 8.80475e-05 -> RDP(9) = 1.5; P4 at alpha = 9 gives 2.93912;
    # best real alpha (9.31129) gives 2.93710.  RDP slope S = 2/(n^2 P^2 sigma1^2) * R
    n, P, R = 1651, 10, 2000
    s1sq = 4 * 9 * R / (n * n * P * P * 3)
    S = 2 * R / (n * n * P * P * s1sq)
    assert rdp_to_dp(9, 9 * S, 1e-5, "mironov") == pytest.approx(2.93912, abs=5e-6)
    eps, alpha = best_epsilon_linear(S, 1e-5, "mironov")
    assert eps == pytest.approx(2.93710, abs=5e-6)
    assert alpha == pytest.approx(9.31129, abs=5e-6)


def test_best_epsilon_linear_improved_is_the_real_optimum():
    S, d = 1e-3, 1e-5
    eps, a = best_epsilon_linear(S, d, "improved")
    f = lambda x: x * S + np.log1p(-1 / x) - (np.log(d) + np.log(x)) / (x - 1)  # noqa: E731
    ref = optimize.minimize_scalar(f, bounds=(1.0001, 1e4), method="bounded", options={"xatol": 1e-10})
    assert eps == pytest.approx(ref.fun, rel=1e-10)
    grid = np.linspace(1.01, 1000, 200001)
    assert eps <= f(grid).min() + 1e-12


def test_best_epsilon_picks_minimum():
    eps, order = best_epsilon([2, 4, 8], [0.1, 0.3, 2.0], 1e-5, "mironov")
    cands = [0.1 + math.log(1e5) / 1, 0.3 + math.log(1e5) / 3, 2.0 + math.log(1e5) / 7]
    assert eps == pytest.approx(min(cands)) and order == 8.0


@pytest.mark.parametrize("eps,mu", [(1, 1), (3, 0.5), (0.2, 2.0), (100, 10), (30, 1), (1500, 50), (5, 200)])
def test_gdp_delta_matches_mpmath(eps, mu):
    assert gdp_delta(eps, mu) == pytest.approx(float(oracles.gdp_delta(eps, mu)), rel=1e-10)


@pytest.mark.parametrize("mu,delta", [(1, 1e-5), (0.5, 1e-300), (50, 1e-5), (1e-3, 1e-5), (300, 1e-5), (3, 1e-200)])
def test_gdp_epsilon_is_conservative_root(mu, delta):
    e = gdp_epsilon(mu, delta)
    assert gdp_delta(e, mu) <= delta
    assert gdp_delta(e, mu) == pytest.approx(delta, rel=1e-9)
    m = gdp_mu(e, delta)
    assert gdp_delta(e, m) <= delta
    assert m == pytest.approx(mu, rel=1e-9)


def test_gdp_known_value_and_zero_epsilon():
    # 1-GDP at delta = 1e-5: eps = 4.377178 (Dong, Roth & Su 2019 Fig./Balle-Wang profile)
    assert gdp_epsilon(1.0, 1e-5) == pytest.approx(4.3771781, abs=1e-6)
    # delta above delta(0) = 2 Phi(mu/2) - 1 -> eps = 0
    assert gdp_epsilon(1e-6, 0.5) == 0.0
