"""Subsampling without replacement: Lemma B.7 (WBK19 Thm 9), Lemma B.8, WBK19 Thm 27."""

import math
import warnings

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_sample_wor_gaussian

from dpcalib.accountant import (
    SubsamplingConditionWarning,
    lemma_b8_conditions,
    subsampled_gaussian_rdp_wor,
    subsampled_rdp_wor,
    subsampled_rdp_wor_simple,
)
from tests import oracles

GAMMAS = [1e-4, 0.01, 0.1, 0.5]
ZS = [0.5, 1.0, 2.0, 5.0]
ALPHAS = [2, 3, 8, 32, 256, 1024]


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("z", ZS)
def test_lemma_b7_gaussian_matches_mpmath(gamma, z):
    ours = subsampled_rdp_wor(ALPHAS, gamma, lambda j: j / (2 * z * z))
    # the lemma's right-hand side, capped at the un-subsampled alpha / (2 z^2) (subsampling never hurts)
    ref = np.array([min(float(oracles.wbk_thm9_gaussian(a, gamma, z)), a / (2 * z * z)) for a in ALPHAS])
    np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=0)
    # the Gaussian specialisation with bound="thm9" is the same function
    np.testing.assert_allclose(subsampled_gaussian_rdp_wor(ALPHAS, gamma, z, bound="thm9"), ours,
                               rtol=1e-13)


def test_lemma_b7_general_base_with_finite_eps_inf_matches_mpmath():
    # a base mechanism with bounded eps(inf) (e.g. randomized response style): min{2, (e^eps_inf - 1)^j}
    eps = lambda j: 0.3 * (1 - 1 / j)  # noqa: E731  increasing, eps(inf) = 0.3
    for alpha in (2, 5, 40, 300):
        for gamma in (1e-3, 0.2):
            ours = subsampled_rdp_wor(alpha, gamma, eps, base_rdp_inf=0.3)
            ref = float(oracles.wbk_thm9_general(alpha, gamma, eps, 0.3))
            assert ours == pytest.approx(ref, rel=1e-10)


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("z", ZS)
def test_thm27_matches_dp_accounting(gamma, z):
    alphas = [a for a in ALPHAS if a <= 256]
    ours = subsampled_gaussian_rdp_wor(alphas, gamma, z, bound="thm27")
    ref = np.minimum(_compute_rdp_sample_wor_gaussian(gamma, z, alphas), np.array(alphas) / (2 * z * z))
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=0)


@pytest.mark.parametrize("gamma", GAMMAS + [1e-7, 0.9])
@pytest.mark.parametrize("z", ZS + [0.1, 20.0, 100.0])
def test_thm27_never_above_thm9(gamma, z):
    alphas = ALPHAS + [4096]
    t27 = subsampled_gaussian_rdp_wor(alphas, gamma, z, bound="thm27")
    t9 = subsampled_gaussian_rdp_wor(alphas, gamma, z, bound="thm9")
    assert np.all(t27 <= t9 * (1 + 1e-12))
    assert np.all(np.isfinite(t27))


def test_tf_privacy_wor_vector():
    # TF Privacy rdp_accountant_test.test_compute_rdp_sample_wor_gaussian: q = 0.01, z = 2.5,
    # 50 steps, integer orders -> [8.7634e-3, 9.8474e-2, 1.6776e2, 7.9297e2] (rtol 1e-4), Thm 27.
    orders = [5, 50, 100, 256]
    got = 50 * subsampled_gaussian_rdp_wor(orders, 0.01, 2.5, bound="thm27")
    np.testing.assert_allclose(got, [8.7634e-3, 9.8474e-2, 1.6776e2, 7.9297e2], rtol=1e-4)


def test_thm27_large_noise_uses_exact_moments_and_beats_thm9():
    # at z = 20 the alternating forward-difference sum cannot resolve the even moments; the exact
    # quadrature path must keep Thm 27 strictly tighter than Thm 9 for j >= 3 terms.
    t27 = subsampled_gaussian_rdp_wor(64, 0.5, 20.0, bound="thm27")
    t9 = subsampled_gaussian_rdp_wor(64, 0.5, 20.0, bound="thm9")
    assert t27 < 0.9 * t9


def test_fractional_order_interpolation_is_between_neighbours():
    z, g = 1.0, 0.05
    lo, hi = subsampled_gaussian_rdp_wor([3, 4], g, z)
    mid = subsampled_gaussian_rdp_wor(3.5, g, z)
    # (alpha - 1) eps is linearly interpolated (WBK19 Cor. 10)
    assert mid * 2.5 == pytest.approx(0.5 * (2 * lo) + 0.5 * (3 * hi), rel=1e-13)


# ---- spec worked numbers: 9.3 T5 (DIFF2-BVR local steps) ----------------------------------
B, SIGMA3_SQ, N_MIN = 13, 54 / 169, 1651


def _base(j):
    return 2.0 * j / (B * B * SIGMA3_SQ)


def test_spec_t5_lemma_b7_value():
    # spec 9.3 T5: wang_subsampled_rdp(alpha=9, gamma=13/1651, sigma3^2=54/169, b=13) -> 9.87606e-05
    got = subsampled_rdp_wor(9, B / N_MIN, _base)
    assert got == pytest.approx(9.87606e-05, rel=5e-6)


def test_spec_t5_lemma_b8_value_and_conditions():
    # spec 9.3 T5: Lemma B.8 bound (c = 1) -> 2.08267e-04; the setting satisfies the conditions
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = subsampled_rdp_wor_simple(9, B / N_MIN, _base(2), c=1.0, base_rdp_alpha=_base(9))
    assert got == pytest.approx(2.08267e-04, rel=5e-6)
    assert lemma_b8_conditions(9, B / N_MIN, _base(2), _base(9)).ok


def test_lemma_b8_failed_conditions_warn_raise_or_ignore():
    # eps(alpha) = alpha / (2 z^2) with z = 1: eps(9) = 4.5 > 1/3 -> condition fails
    kw = dict(alpha=9, gamma=0.01, base_rdp2=1.0, base_rdp_alpha=4.5)
    with pytest.warns(SubsamplingConditionWarning, match=r"eps\(alpha\)=4\.5 > 1/3"):
        v = subsampled_rdp_wor_simple(**kw)
    assert v == pytest.approx((2 / 3) * (4 + math.e) * 1e-4 * 81 * 1.0 / 8, rel=1e-14)
    with pytest.raises(ValueError, match="Lemma B.8 conditions fail"):
        subsampled_rdp_wor_simple(**kw, check="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        subsampled_rdp_wor_simple(**kw, check="ignore")
    conds = lemma_b8_conditions(9, 0.01, 1.0, 4.5)
    assert conds.ok is False and conds.eps_alpha_le_one_third is False


def test_lemma_b8_without_eps_alpha_reports_unchecked():
    conds = lemma_b8_conditions(9, 1e-4, 0.01)
    assert conds.eps_alpha_le_one_third is None and not conds.ok
    with pytest.warns(SubsamplingConditionWarning, match="not checked"):
        subsampled_rdp_wor_simple(9, 1e-4, 0.01)


def test_gamma_edge_cases():
    assert subsampled_rdp_wor(5, 0.0, lambda j: j / 2) == 0.0
    assert subsampled_gaussian_rdp_wor(5, 0.0, 1.0) == 0.0
    assert subsampled_gaussian_rdp_wor(5, 1.0, 2.0) == pytest.approx(5 / 8, rel=1e-15)
    assert subsampled_rdp_wor(5, 0.5, lambda j: math.inf) == math.inf


@pytest.mark.parametrize("alpha,gamma,z", [(2, 0.9, 0.3), (3, 0.99, 0.2), (2.5, 0.95, 0.25), (8, 0.5, 0.1)])
@pytest.mark.parametrize("bound", ["thm27", "thm9"])
def test_subsampling_never_hurts(alpha, gamma, z, bound):
    # Without the cap, Thm 9 at (2, 0.9, 0.3) gives 11.59 > 11.11 = alpha / (2 z^2), the RDP of the
    # Gaussian on the whole dataset (closed form).  The function itself returns the minimum.
    full = alpha / (2 * z * z)
    assert subsampled_gaussian_rdp_wor(alpha, gamma, z, bound=bound) <= full * (1 + 1e-15)
    if float(alpha).is_integer():
        assert subsampled_rdp_wor(int(alpha), gamma, lambda j: j / (2 * z * z)) <= full * (1 + 1e-15)


def test_uncapped_thm9_really_exceeds_the_base_curve_there():
    # the regime the cap matters in (checked with the independent mpmath implementation)
    assert float(oracles.wbk_thm9_gaussian(2, 0.9, 0.3)) == pytest.approx(11.5935, abs=1e-4)
    assert subsampled_gaussian_rdp_wor(2, 0.9, 0.3, bound="thm9") == pytest.approx(2 / (2 * 0.09), rel=1e-14)


@pytest.mark.parametrize("z, l", [(1.0, 64), (3.0, 128), (10.0, 256), (100.0, 16), (1000.0, 4), (2.0, 200)])
def test_even_moment_quadrature_is_an_upper_bound_near_the_exact_alternating_sum(z, l):
    # Delta^l h(0) = sum_i (-1)^(l-i) C(l, i) e^((i-1) i / (2 z^2)), summed exactly in mpmath at a
    # precision that outlasts the cancellation
    import mpmath

    from dpcalib.accountant import subsampling as S

    s2 = 1.0 / (2.0 * z * z)
    with mpmath.workdps(60 + 2 * l):
        exact = mpmath.fsum((-1) ** (l - i) * mpmath.binomial(l, i) * mpmath.exp((i - 1) * i * mpmath.mpf(s2))
                            for i in range(l + 1))
        ref = float(mpmath.log(exact))
    got = S._log_even_moment_quadrature(s2, l)
    assert ref <= got <= ref + 2e-9
