"""RDP -> DP conversions (Lemma B.4 and the improved conversion) and exact GDP."""

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon as dpa_compute_epsilon

from dpcalib.accountant import (
    best_epsilon,
    best_epsilon_linear,
    gdp_delta,
    gdp_epsilon,
    gdp_mu,
    rdp_to_dp,
)
from tests import oracles


def test_mironov_conversion_closed_form():
    # DIFF2 Lemma B.4: eps = rho + log(1/delta)/(alpha - 1); 1.5 + log(1e5)/8 evaluated in mpmath (30 digits)
    assert rdp_to_dp(9.0, 1.5, 1e-5, "mironov") == pytest.approx(2.93911568312127855, rel=1e-15)


def test_improved_conversion_matches_dp_accounting_and_is_never_worse():
    # oracle: dp-accounting's own implementation of the same conversion (Balle et al. 2020, Prop. 12)
    a = np.array([1.5, 2.0, 9.0, 100.0])
    rho = np.array([0.1, 0.5, 1.5, 3.0])
    imp = rdp_to_dp(a, rho, 1e-6, "improved")
    expected = [dpa_compute_epsilon([ai], [ri], 1e-6)[0] for ai, ri in zip(a, rho)]
    np.testing.assert_allclose(imp, expected, rtol=1e-13)
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
    # oracle: dp-accounting's conversion minimised over a dense grid of real orders
    grid = np.linspace(1.02, 1000, 200001)
    ref, ref_order = dpa_compute_epsilon(grid, S * grid, d)
    assert eps <= ref + 1e-12                      # the exact optimum is never above a grid point
    assert eps == pytest.approx(ref, rel=1e-8)     # and the grid (step 5e-3) comes within 1e-8 of it
    assert a == pytest.approx(ref_order, abs=1e-2)


def test_best_epsilon_picks_minimum():
    eps, order = best_epsilon([2, 4, 8], [0.1, 0.3, 2.0], 1e-5, "mironov")
    # candidates (mpmath): 11.61292546497, 4.13764182166, 3.64470363785 -> the last
    assert eps == pytest.approx(3.64470363785288977, rel=1e-14) and order == 8.0


@pytest.mark.parametrize("eps,mu", [(1, 1), (3, 0.5), (0.2, 2.0), (100, 10), (30, 1), (1500, 50), (5, 200)])
def test_gdp_delta_matches_mpmath(eps, mu):
    assert gdp_delta(eps, mu) == pytest.approx(float(oracles.gdp_delta(eps, mu)), rel=1e-10)


@pytest.mark.parametrize("mu,delta", [(1, 1e-5), (0.5, 1e-300), (50, 1e-5), (1e-3, 1e-5), (300, 1e-5), (3, 1e-200)])
def test_gdp_epsilon_is_conservative_root(mu, delta):
    e = gdp_epsilon(mu, delta)
    exact = oracles.gdp_delta(e, mu)                 # mpmath, 60 digits
    assert exact <= delta * (1 + 1e-12)              # conservative side of the root
    assert float(exact) == pytest.approx(delta, rel=1e-9)
    assert e == pytest.approx(float(oracles.gdp_epsilon(mu, delta)), rel=1e-9)
    m = gdp_mu(e, delta)
    assert oracles.gdp_delta(e, m) <= delta * (1 + 1e-12)
    assert m == pytest.approx(mu, rel=1e-9)


def test_gdp_known_value_and_zero_epsilon():
    # 1-GDP at delta = 1e-5: eps = 4.377178 (Dong, Roth & Su 2019 Fig./Balle-Wang profile)
    assert gdp_epsilon(1.0, 1e-5) == pytest.approx(4.3771781, abs=1e-6)
    # delta above delta(0) = 2 Phi(mu/2) - 1 -> eps = 0
    assert gdp_epsilon(1e-6, 0.5) == 0.0
