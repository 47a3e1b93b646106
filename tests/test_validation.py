"""Bad inputs raise ValueError naming the argument, the value and the allowed range."""

import math

import pytest

from dpcalib.accountant import (
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyAccountant,
    WORSampledGaussianEvent,
    best_epsilon,
    gaussian_rdp,
    gdp_delta,
    gdp_epsilon,
    gdp_mu,
    poisson_gaussian_rdp,
    rdp_to_dp,
    subsampled_gaussian_rdp_wor,
    subsampled_rdp_wor,
    subsampled_rdp_wor_simple,
)

BASE = lambda j: j / 2  # noqa: E731


@pytest.mark.parametrize("call,pattern", [
    # noise <= 0
    (lambda: gaussian_rdp(2, 0.0), r"noise_multiplier=0\.0 .*\(0, inf\)"),
    (lambda: gaussian_rdp(2, -1.0), r"noise_multiplier=-1\.0 .*\(0, inf\)"),
    (lambda: poisson_gaussian_rdp(2, 0.1, -2), r"noise_multiplier=-2 .*\(0, inf\)"),
    (lambda: subsampled_gaussian_rdp_wor(2, 0.1, 0), r"noise_multiplier=0 .*\(0, inf\)"),
    (lambda: GaussianEvent(-3.0), r"noise_multiplier=-3\.0"),
    # q or gamma outside [0, 1]
    (lambda: poisson_gaussian_rdp(2, 1.5, 1), r"q=1\.5 .*\[0, 1\]"),
    (lambda: poisson_gaussian_rdp(2, -0.1, 1), r"q=-0\.1 .*\[0, 1\]"),
    (lambda: subsampled_rdp_wor(2, 1.01, BASE), r"gamma=1\.01 .*\[0, 1\]"),
    (lambda: subsampled_gaussian_rdp_wor(2, -1e-3, 1.0), r"gamma=-0\.001 .*\[0, 1\]"),
    (lambda: subsampled_rdp_wor_simple(2, 2.0, 0.1), r"gamma=2\.0 .*\[0, 1\]"),
    (lambda: PoissonSampledGaussianEvent(1.2, 1.0), r"sampling_probability=1\.2 .*\[0, 1\]"),
    (lambda: WORSampledGaussianEvent(-0.5, 1.0), r"sampling_ratio=-0\.5 .*\[0, 1\]"),
    # delta outside (0, 1)
    (lambda: rdp_to_dp(2, 0.1, 0.0), r"delta=0\.0 .*\(0, 1\)"),
    (lambda: best_epsilon([2], [0.1], 1.0), r"delta=1\.0 .*\(0, 1\)"),
    (lambda: gdp_epsilon(1.0, 1.5), r"delta=1\.5 .*\(0, 1\)"),
    (lambda: gdp_mu(1.0, -1e-5), r"delta=-1e-05 .*\(0, 1\)"),
    (lambda: PrivacyAccountant().compose(GaussianEvent(1)).get_epsilon(0), r"delta=0 .*\(0, 1\)"),
    # alpha <= 1
    (lambda: gaussian_rdp(1.0, 1.0), r"alpha=1 .*\(1, inf\]"),
    (lambda: poisson_gaussian_rdp(0.5, 0.1, 1.0), r"alpha=0\.5 .*\(1, inf\]"),
    (lambda: rdp_to_dp(1, 0.1, 1e-5), r"alpha=1 .*\(1, inf\]"),
    (lambda: subsampled_gaussian_rdp_wor(1, 0.1, 1.0), r"alpha=1 .*\(1, inf\]"),
    # non-integer alpha where Lemma B.7 / B.8 need an integer
    (lambda: subsampled_rdp_wor(2.5, 0.1, BASE), r"alpha=2\.5 .*integer order in \[2, inf\]"),
    (lambda: subsampled_rdp_wor([2, 3.5], 0.1, BASE), r"alpha=3\.5 .*integer order"),
    (lambda: subsampled_rdp_wor_simple(2.5, 0.1, 0.1), r"alpha=2\.5 .*integer in \[2, inf\]"),
    # NaN anywhere
    (lambda: gaussian_rdp(math.nan, 1.0), r"alpha=.*nan"),
    (lambda: gaussian_rdp(2, math.nan), r"noise_multiplier=nan .*real number"),
    (lambda: poisson_gaussian_rdp(2, math.nan, 1.0), r"q=nan"),
    (lambda: subsampled_rdp_wor(2, 0.1, lambda j: math.nan), r"base_rdp returned nan"),
    (lambda: rdp_to_dp(2, math.nan, 1e-5), r"rdp=nan"),
    (lambda: gdp_delta(math.nan, 1.0), r"eps=nan"),
    # other
    (lambda: subsampled_rdp_wor(2, 0.1, 3.0), r"base_rdp=3\.0 .*callable"),
    (lambda: subsampled_gaussian_rdp_wor(2, 0.1, 1.0, bound="thm28"), r"bound='thm28'"),
    (lambda: rdp_to_dp(2, 0.1, 1e-5, conversion="magic"), r"conversion='magic'"),
    (lambda: gaussian_rdp(2, "1.0"), r"noise_multiplier='1\.0' .*real number"),
    (lambda: PrivacyAccountant().compose(GaussianEvent(1), count=-1), r"count=-1 .*integer in \[0, inf\]"),
    (lambda: PrivacyAccountant().compose(GaussianEvent(1), count=2.5), r"count=2\.5"),
    (lambda: PrivacyAccountant().compose("gauss"), r"event='gauss'"),
    (lambda: WORSampledGaussianEvent.from_sizes(10, 5, 1.0), r"sample_size=10 .*\[0, 5\]"),
])
def test_bad_input_raises_value_error_with_name_value_range(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_failed_compose_leaves_state_unchanged():
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 100)
    before = acc.rdp().copy()
    with pytest.raises(ValueError, match="neighbouring relation"):
        acc.compose(WORSampledGaussianEvent(0.01, 1.0), 5)
    with pytest.raises(ValueError, match="count"):
        acc.compose(GaussianEvent(1.0), -2)
    assert len(acc.events) == 1
    assert (acc.rdp() == before).all()


def test_gdp_method_on_subsampled_events_names_the_argument():
    from dpcalib.accountant import PoissonSampledGaussianEvent, PrivacyAccountant

    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 10)
    with pytest.raises(ValueError, match=r"accountant='gdp' is not allowed .*full-batch"):
        acc.epsilon_report(1e-5, accountant="gdp")
