"""Property-based tests of the bounds (hypothesis, >= 200 examples each)."""

import math

import numpy as np
from dp_accounting import GaussianDpEvent, SelfComposedDpEvent
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_poisson_subsampled_gaussian as dpa_poisson_rdp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dpcalib.accountant import (
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyAccountant,
    WORSampledGaussianEvent,
    gdp_epsilon,
    lemma_b8_conditions,
    subsampled_gaussian_rdp_wor,
    subsampled_rdp_wor,
    subsampled_rdp_wor_simple,
)
from tests import oracles

SETTINGS = settings(max_examples=80, deadline=None, derandomize=True)

alphas = st.integers(min_value=2, max_value=300)
gammas = st.floats(min_value=1e-6, max_value=0.99)
zs = st.floats(min_value=0.3, max_value=50.0)
deltas = st.floats(min_value=1e-12, max_value=0.1)


@SETTINGS
@given(alpha=st.integers(2, 200), z=st.floats(1.0, 1e3), frac=st.floats(1e-3, 1.0), c=st.floats(0.2, 5.0))
def test_b8_is_above_b7_when_its_conditions_hold(alpha, z, frac, c):
    eps = lambda j: j / (2 * z * z)  # noqa: E731  Gaussian base, increasing in alpha
    ea, e2 = eps(alpha), eps(2)
    assume(ea <= 1 / 3)
    # largest gamma allowed by the conditions: eps(alpha) <= log(1/(2 gamma alpha)), gamma <= eps(2)/(c alpha)
    g_max = min(math.exp(-ea) / (2 * alpha), e2 / (c * alpha), 1.0)
    gamma = frac * g_max
    assert lemma_b8_conditions(alpha, gamma, e2, ea, c).ok
    b8 = subsampled_rdp_wor_simple(alpha, gamma, e2, c, base_rdp_alpha=ea, check="raise")
    b7 = subsampled_rdp_wor(alpha, gamma, eps)
    assert b8 >= b7


@SETTINGS
@given(alpha=alphas, g1=gammas, g2=gammas, z=zs)
def test_b7_increasing_in_gamma(alpha, g1, g2, z):
    lo, hi = sorted((g1, g2))
    eps = lambda j: j / (2 * z * z)  # noqa: E731
    assert subsampled_rdp_wor(alpha, lo, eps) <= subsampled_rdp_wor(alpha, hi, eps) * (1 + 1e-12)


@SETTINGS
@given(alpha=alphas, g=gammas, z1=zs, z2=zs)
def test_b7_decreasing_in_noise(alpha, g, z1, z2):
    lo, hi = sorted((z1, z2))
    a = subsampled_gaussian_rdp_wor(alpha, g, lo, bound="thm9")
    b = subsampled_gaussian_rdp_wor(alpha, g, hi, bound="thm9")
    assert b <= a * (1 + 1e-12)


@SETTINGS
@given(alpha=alphas, g=gammas, z=zs)
def test_thm27_never_above_thm9(alpha, g, z):
    t27 = subsampled_gaussian_rdp_wor(alpha, g, z, bound="thm27")
    t9 = subsampled_gaussian_rdp_wor(alpha, g, z, bound="thm9")
    assert t27 <= t9 * (1 + 1e-12)


@SETTINGS
@given(q=st.floats(1e-5, 1.0), z=st.floats(0.5, 20), k1=st.integers(1, 10_000), k2=st.integers(1, 10_000),
       z2=st.floats(0.5, 50))
def test_composition_is_additive(q, z, k1, k2, z2):
    orders = [2, 3, 8, 32]
    e1, e2 = PoissonSampledGaussianEvent(q, z), GaussianEvent(z2)
    acc = PrivacyAccountant(orders=orders).compose(e1, k1).compose(e2, k2)
    # oracles: dp-accounting's integer-order Poisson RDP (a separate implementation) and the
    # Gaussian closed form alpha / (2 z^2)
    o = np.array(orders, float)
    expected = k1 * dpa_poisson_rdp(q, z, o) + k2 * o / (2 * z2 * z2)
    np.testing.assert_allclose(acc.rdp(), expected, rtol=1e-6)
    split = PrivacyAccountant(orders=orders).compose(e1, k1).compose(e1, 0).compose(e2, k2 - 1).compose(e2)
    np.testing.assert_allclose(split.rdp(), acc.rdp(), rtol=1e-13)


@SETTINGS
@given(zs_=st.lists(st.floats(0.3, 100.0), min_size=1, max_size=4),
       counts=st.lists(st.integers(1, 5000), min_size=4, max_size=4), delta=deltas)
def test_every_conversion_is_above_exact_gdp(zs_, counts, delta):
    acc = PrivacyAccountant()
    for z, k in zip(zs_, counts):
        acc.compose(GaussianEvent(z), k)
    mu = math.sqrt(sum(k / (z * z) for z, k in zip(zs_, counts)))   # Dong, Roth & Su 2019, Cor. 2.
    for conv in ("improved", "mironov"):
        eps = acc.get_epsilon(delta, accountant="rdp", conversion=conv)
        # eps is at least the exact one iff the exact delta(eps) (mpmath, Balle & Wang) is <= delta
        assert oracles.gdp_delta(eps, mu, dps=40) <= delta * (1 + 1e-9)


@SETTINGS
@given(mu=st.floats(0.05, 4.0), count=st.integers(1, 2000), delta=st.floats(1e-10, 1e-2))
def test_gdp_never_above_dp_accounting_pld(mu, count, delta):
    z = math.sqrt(count) / mu
    ours = gdp_epsilon(mu, delta)
    interval = 1e-3
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=interval)
    pld.compose(SelfComposedDpEvent(GaussianDpEvent(z), count))
    # dp-accounting's PLD is pessimistic by construction; its slack is the discretisation interval
    assert ours <= pld.get_epsilon(delta) + interval


@SETTINGS
@given(mu=st.floats(1e-2, 100.0), delta=st.floats(1e-200, 0.5))
def test_gdp_epsilon_solves_the_exact_delta(mu, delta):
    e = gdp_epsilon(mu, delta)
    assume(e > 0)
    assert abs(oracles.gdp_delta(e, mu) / delta - 1) <= 1e-9     # mpmath, 60 digits


@SETTINGS
@given(g=st.floats(1e-6, 0.5), z=st.floats(0.5, 10), k=st.integers(1, 5000), delta=deltas)
def test_wor_accountant_improved_never_above_mironov(g, z, k, delta):
    acc = PrivacyAccountant(orders=[2, 4, 8, 16, 32, 64]).compose(WORSampledGaussianEvent(g, z), k)
    assert acc.get_epsilon(delta, "rdp", "improved") <= acc.get_epsilon(delta, "rdp", "mironov")
