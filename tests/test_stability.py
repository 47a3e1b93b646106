"""Extreme parameters: alpha up to 4096, noise multiplier down to 0.1, q from 1e-7 to 1."""

import numpy as np
import pytest

from dpcalib.accountant import (
    PoissonSampledGaussianEvent,
    PrivacyAccountant,
    poisson_gaussian_rdp,
    subsampled_gaussian_rdp_wor,
    subsampled_rdp_wor,
)
from tests import oracles

ALPHAS = [2, 3, 17, 256, 1024, 4096]
QS = [1e-7, 1e-4, 0.1, 0.5, 0.999, 1.0]
ZS = [0.1, 0.5, 1.0, 10.0, 100.0]


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("z", ZS)
def test_all_bounds_finite_and_ordered(q, z):
    p_int = poisson_gaussian_rdp(ALPHAS, q, z)
    p_frac = poisson_gaussian_rdp([1.001, 2.5, 4095.5], q, z)
    t27 = subsampled_gaussian_rdp_wor(ALPHAS, q, z, bound="thm27")
    t9 = subsampled_gaussian_rdp_wor(ALPHAS, q, z, bound="thm9")
    for v in (p_int, p_frac, t27, t9):
        assert np.all(np.isfinite(v)) and np.all(v >= 0)
    full = np.array(ALPHAS) / (2 * z * z)
    # Poisson subsampling never exceeds the un-subsampled Gaussian (equality at q = 1)
    assert np.all(p_int <= full * (1 + 1e-12))
    # RDP is non-decreasing in the order
    assert np.all(np.diff(p_int) >= -1e-12 * p_int[1:])


@pytest.mark.parametrize("alpha,q,z", [(4096, 1e-7, 0.1), (4096, 0.5, 0.1), (4096, 1e-7, 100.0),
                                       (2, 1e-7, 100.0), (1024, 0.999, 0.5)])
def test_extreme_poisson_values_are_correct(alpha, q, z):
    assert poisson_gaussian_rdp(alpha, q, z) == pytest.approx(float(oracles.poisson_sgm_rdp(alpha, q, z)), rel=1e-8)


@pytest.mark.parametrize("alpha,gamma,z", [(4096, 1e-7, 0.1), (4096, 0.5, 0.1), (1024, 1e-7, 100.0),
                                           (2, 1e-7, 100.0), (4096, 0.5, 5.0)])
def test_extreme_lemma_b7_values_are_correct(alpha, gamma, z):
    got = subsampled_rdp_wor(alpha, gamma, lambda j: j / (2 * z * z))
    assert got == pytest.approx(float(oracles.wbk_thm9_gaussian(alpha, gamma, z, dps=80)), rel=1e-10)


def test_accountant_at_extremes_is_finite():
    acc = PrivacyAccountant(orders=list(range(2, 65)) + [4096]).compose(PoissonSampledGaussianEvent(1e-7, 0.1), 10 ** 6)
    # the RDP path at order 4096 (the PLD at tiny delta: tests/test_pld.py; here its grid would
    # only reach the memory cap in ~30 s and then defer to this very RDP value)
    rep = acc.epsilon_report(1e-300, "rdp")
    assert np.isfinite(rep.epsilon) and rep.epsilon > 0
