"""Poisson-subsampled Gaussian RDP (Mironov, Talwar & Zhang 2019), exact at every order."""

import numpy as np
import pytest

from dpcalib.accountant import poisson_gaussian_rdp
from tests import oracles


def test_published_exact_vector():
    # q = 0.01, z = 2.5, 50 steps.  Exact values from mpmath quadrature (issue text); dp-accounting's
    # own test expects 6.70579741e-4 and 1.08548710e-3 at the fractional orders because its
    # fractional-order series is an upper bound -- ours must be the exact values.
    orders = [1.5, 2.5, 5, 50, 100]
    expected = [6.50070897e-4, 1.08541806e-3, 2.18075656e-3, 2.38460375e-2, 1.67416308e2]
    got = 50 * poisson_gaussian_rdp(orders, 0.01, 2.5)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert got[0] < 6.70579741e-4 * (1 - 1e-2)  # strictly tighter than dp-accounting's bound


@pytest.mark.parametrize("alpha,q,z", [
    (1.5, 0.01, 2.5), (1.01, 0.01, 1.0), (2.5, 1e-7, 1.0), (7.3, 1e-7, 0.3), (37.5, 0.1, 0.5),
    (100.5, 0.5, 1.0), (3.7, 0.9, 0.1), (1000.5, 1e-3, 3.0), (12, 1e-7, 0.1), (4096, 1e-7, 0.1),
    (4096, 0.5, 5.0), (2, 1e-7, 10.0), (3, 0.3, 0.7), (64, 0.02, 1.1),
])
def test_matches_mpmath_quadrature(alpha, q, z):
    ref = float(oracles.poisson_sgm_rdp(alpha, q, z))
    assert poisson_gaussian_rdp(alpha, q, z) == pytest.approx(ref, rel=1e-8)


def test_integer_and_fractional_paths_are_continuous():
    # the quadrature path (non-integer) and the binomial path (integer) agree at alpha -> 5
    v = poisson_gaussian_rdp([5 - 1e-9, 5, 5 + 1e-9], 0.02, 1.3)
    assert abs(v[0] - v[1]) < 1e-9 * v[1] and abs(v[2] - v[1]) < 1e-9 * v[1]
    assert v[0] < v[1] < v[2]


def test_full_batch_and_empty_sampling_closed_forms():
    np.testing.assert_allclose(poisson_gaussian_rdp([1.5, 2, 700.25], 1.0, 0.7),
                               np.array([1.5, 2, 700.25]) / (2 * 0.49), rtol=1e-15)
    assert poisson_gaussian_rdp(3.3, 0.0, 0.7) == 0.0


def test_small_q_asymptotics():
    # A_alpha - 1 ~ C(alpha, 2) q^2 (e^{1/z^2} - 1)  =>  rdp ~ alpha q^2 (e^{1/z^2} - 1) / 2
    for alpha in (2, 3.5, 17):
        for z in (0.8, 2.0):
            q = 1e-7
            expect = alpha * q * q * np.expm1(1 / z ** 2) / 2
            assert poisson_gaussian_rdp(alpha, q, z) == pytest.approx(expect, rel=1e-5)


def test_huge_noise_is_finite_and_follows_the_asymptote():
    # rdp ~ alpha q^2 / (2 z^2) for large z (the expansion above); where that underflows, the
    # fractional-order quadrature once failed with an IndexError (every term -inf) instead of 0
    for alpha in (1.5, 2, 9.137768541281371, 100.5):
        for z in (1e50, 1e100):
            assert poisson_gaussian_rdp(alpha, 1e-3, z) == pytest.approx(alpha * 1e-6 / (2 * z * z), rel=1e-6)
        for z in (3.8203920151565894e160, 1e300):
            v = poisson_gaussian_rdp(alpha, 1e-3, z)
            assert 0.0 <= v <= 1e-300


def test_tiny_noise_at_real_orders_is_fast_and_an_upper_bound_between_integer_orders():
    # z = 1e-5: the quadrature would need ~1e8 points (a CLI fuzz case took a minute); the chord
    # of the convex log A between the neighbouring integer orders bounds it from above
    v = poisson_gaussian_rdp([2.0, 2.5, 3.0], 0.1, 1e-5)
    assert np.all(np.isfinite(v)) and v[0] <= v[1] <= v[2]
    # the chord is above the exact value where both can be computed (mpmath oracle)
    from dpcalib.accountant.poisson import _log_a_minus_1_chord

    for alpha, q, z in [(2.5, 0.1, 0.5), (7.3, 0.01, 0.3), (1.5, 0.02, 1.0)]:
        exact = float(oracles.poisson_sgm_rdp(alpha, q, z))
        chord = float(np.log1p(np.exp(_log_a_minus_1_chord(alpha, q, z)))) / (alpha - 1)
        assert chord >= exact * (1 - 1e-12)
