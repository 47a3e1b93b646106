"""Scores in, eps lower bound out (dpcalib.optim.audit.scores): the existing audits' bounds come back
from their own scores, and a GDP audit of a full-batch Gaussian step reaches its claim."""

import math

import numpy as np
import pytest

import dpcalib.mechanisms as M
import dpcalib.optim as O
from dpcalib.accountant import gdp_epsilon, gdp_mu
from dpcalib.accountant.validation import InputError
from dpcalib.optim.audit.scores import epsilon_from_guesses, epsilon_from_scores


def test_the_many_run_audit_is_given_back_by_its_own_scores():
    """`dpcalib audit dp-gd` (white box, claimed-GDP thresholds): the same direct and GDP bounds."""
    mech = M.DPGD(2, 2, 4)
    rep = mech.calibrate(2.0, 1e-5)
    build, canary_d, canary_p, holder, exact = O.audit.harness("dp-gd", mech, rep)
    report = O.audit.audit(build, canary_d, canary_p, runs=60, claimed_epsilon=2.0, delta=1e-5, holder=holder,
                           gdp_exact=exact, progress=False, seed=0)
    again = epsilon_from_scores(*report.scores, delta=1e-5, claimed_epsilon=2.0, statistic="llr")
    assert again.epsilon_lo_direct == report.epsilon_lo_direct
    assert again.epsilon_lo_gdp == report.epsilon_lo_gdp and again.mu_lo == report.mu_lo
    assert again.max_epsilon_lo == report.max_epsilon_lo


def test_the_held_out_audits_are_given_back_by_their_own_scores():
    """The Poisson audit (held-out threshold): the same direct bound from its scores."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(0)
    data = (torch.randn(20, 2, generator=g), torch.randn(20, generator=g))
    mech = M.DPSGD(0.5, 3)
    rep = mech.calibrate(4.0, 1e-5)

    def build(seed):
        torch.manual_seed(0)
        return O.DPSGD(nn.Sequential(nn.Linear(2, 1)), O.squared_loss, data, mech, rep, C=1.0, lr=0.1, seed=seed)

    report = O.audit.audit_poisson(build, O.audit.constant(3, 1e6), rate=0.5, runs=40, claimed_epsilon=4.0,
                                   delta=1e-5, progress=False, seed=0)
    again = epsilon_from_scores(*report.scores, delta=1e-5, claimed_epsilon=4.0, statistic="any")
    assert again.epsilon_lo_direct == report.epsilon_lo_direct
    assert again.max_epsilon_lo == report.max_epsilon_lo


def test_a_gdp_audit_of_a_full_batch_gaussian_step_reaches_its_claim():
    """1e5 runs per world of one Gaussian release (mu = 1, claimed eps at 1e-5): the GDP lower bound
    reaches >= 0.95 of the claim (the statistic is the release's log-likelihood ratio)."""
    mu, delta, runs = 1.0, 1e-5, 100_000
    rng = np.random.default_rng(0)
    claim = float(gdp_epsilon(mu, delta))
    llr = lambda o: mu * o - mu * mu / 2.0          # noqa: E731  (N(mu, 1) against N(0, 1))
    s_in, s_out = llr(rng.normal(mu, 1.0, runs)), llr(rng.normal(0.0, 1.0, runs))
    a = epsilon_from_scores(s_in, s_out, delta=delta, claimed_epsilon=claim, statistic="llr")
    assert a.verdict == "consistent" and a.epsilon_lo <= claim
    assert a.epsilon_lo_gdp >= 0.95 * claim, (a.epsilon_lo_gdp, claim)
    # half the claimed noise: the same audit refutes the claim
    bad = epsilon_from_scores(llr(rng.normal(2 * mu, 1.0, runs)), s_out, delta=delta, claimed_epsilon=claim,
                              statistic="llr")                 # the scores of a mechanism with twice the signal
    assert bad.verdict == "violation" and bad.epsilon_lo > claim


def test_one_run_guesses_and_bad_scores():
    assert epsilon_from_guesses(1000, 100, 100, delta=1e-5) > 1.0
    assert epsilon_from_guesses(1000, 100, 50, delta=1e-5) == 0.0
    for bad in (lambda: epsilon_from_scores([], [1.0], delta=1e-5),
                lambda: epsilon_from_scores([1.0, math.nan], [1.0, 2.0], delta=1e-5),
                lambda: epsilon_from_scores([1.0, 2.0], [1.0, 2.0], delta=2.0),
                lambda: epsilon_from_scores([1.0, 2.0], [1.0, 2.0], delta=1e-5, statistic="llr"),
                lambda: epsilon_from_scores([1.0, 2.0], [1.0, 2.0], delta=1e-5, statistic="best"),
                lambda: epsilon_from_guesses(10, 20, 5, delta=1e-5)):
        with pytest.raises(InputError) as e:
            bad()
        assert "\n" not in str(e.value)
    assert gdp_mu(gdp_epsilon(1.0, 1e-5), 1e-5) == pytest.approx(1.0)
