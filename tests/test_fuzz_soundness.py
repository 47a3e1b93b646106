"""The soundness fuzz (benchmarks/fuzz_soundness.py): its independent oracles agree with other
independent references, it catches a planted bug, and an 80-configuration slice of it finds no
under-report."""

import pytest

from benchmarks import fuzz_soundness as F
from tests import oracles


@pytest.mark.parametrize("z,count,eps", [(1.0, 1, 1.0), (2.0, 100, 3.0), (20.0, 1000, 0.5)])
def test_hand_written_lower_bound_is_below_and_near_the_exact_gdp_delta(z, count, eps):
    lower = F.wor_delta_lower([(1.0, z, count)], eps, 1e-5)      # gamma = 1: a full-batch Gaussian
    exact = float(oracles.gdp_delta(eps, count ** 0.5 / z))       # mpmath, Balle & Wang
    assert lower <= exact
    assert lower >= 0.95 * exact


@pytest.mark.parametrize("q,z,steps", [(0.3, 2.0, 100), (0.01, 1.0, 500), (1.0, 2.0, 50)])
def test_hand_written_poisson_bound_is_bracketed_by_dp_accounting_pld(q, z, steps):
    ours = F.poisson_delta_lower(q, z, steps, 2.0, 1e-5)
    upper = F.poisson_delta_dp_accounting(q, z, steps, 2.0, pessimistic=True)
    lower = F.poisson_delta_dp_accounting(q, z, steps, 2.0, pessimistic=False)
    assert ours <= upper
    assert ours >= 0.75 * lower


@pytest.mark.parametrize("z,epochs,eps", [(1.0, 1, 1.0), (2.0, 10, 2.0)])
def test_balls_in_bins_lower_bound_at_one_step_is_near_the_exact_gdp_delta(z, epochs, eps):
    lower = F.allocation_delta_lower(1, z, epochs, eps, 1e-5)     # one step an epoch: the largest is the release
    exact = float(oracles.gdp_delta(eps, epochs ** 0.5 / z))
    assert 0.95 * exact <= lower <= exact


@pytest.mark.parametrize("t,z,epochs,eps", [(10, 1.0, 1, 1.0), (100, 1.0, 1, 0.6), (30, 0.8, 5, 3.0)])
def test_balls_in_bins_lower_bound_is_below_the_pld_bracket_and_near_it(t, z, epochs, eps):
    from dpcalib.accountant import BallsInBinsGaussianEvent
    from dpcalib.accountant.pld import pld_delta

    lower = F.allocation_delta_lower(t, z, epochs, eps, 1e-5)
    lo, up = pld_delta([(BallsInBinsGaussianEvent(t, z), epochs)], eps, 1e-3)
    assert lower <= lo <= up
    assert lower >= 0.2 * lo                  # the largest coordinate alone keeps most of one epoch's delta


def test_a_planted_bug_is_caught():
    # noise secretly x 0.98: the exact GDP oracle catches every full-batch configuration
    res = F.fuzz(30, seed=1, noise_scale=0.98)
    exact = [r for r in res if r["kind"] in F.EXACT and r["outcome"] != "refused"]
    assert len(exact) == 9 and all(r["outcome"] == "under-report" for r in exact)
    # noise x 0.5: the numerical lower bound catches subsampled configurations too
    res = F.fuzz(30, seed=1, noise_scale=0.5)
    caught = {r["kind"] for r in res if r["outcome"] == "under-report" and r["kind"] not in F.EXACT}
    assert {"dp-sgd", "diff2-bvr"} <= caught
    # noise x 0.5 on balls-in-bins batches: the largest coordinate's bound catches it
    k = F.KINDS.index("dp-sgd-balls-in-bins")
    res = [F.check_one(i, 3, noise_scale=0.5) for i in range(k, 6 * len(F.KINDS), len(F.KINDS))]
    bib = [r for r in res if r["outcome"] not in ("refused", "invalid")]
    assert bib and sum(r["outcome"] == "under-report" for r in bib) >= len(bib) // 2


@pytest.mark.slow
def test_a_slice_of_random_configurations_never_under_reports():
    res = F.fuzz(80, seed=0, workers=2)           # the two cores of a CI machine (the long runs: docs/testing.md)
    counts = {k: sum(r["outcome"] == k for r in res) for k in ("ok", "under-report", "error", "oracle-failed")}
    bad = [r for r in res if r["outcome"] in ("under-report", "error", "oracle-failed")]
    assert counts["under-report"] == 0 and counts["error"] == 0 and counts["oracle-failed"] == 0, bad
    assert counts["ok"] >= 76            # a slice that really calibrates (few refused or invalid)
