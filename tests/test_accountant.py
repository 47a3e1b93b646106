"""The composing accountant against dp-accounting and closed forms."""

import math
import subprocess
import sys

import pytest
from dp_accounting import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant

from dpcalib.accountant import (
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyAccountant,
    WORSampledGaussianEvent,
    rdp_to_dp,
)
from tests import oracles


def test_full_batch_gaussian_is_exact_gdp():
    acc = PrivacyAccountant().compose(GaussianEvent(10.0), 100)  # mu = 1
    rep = acc.epsilon_report(1e-5)
    assert rep.method == "gdp"
    assert rep.epsilon == pytest.approx(float(oracles.gdp_epsilon(1.0, 1e-5)), rel=1e-10)   # mpmath root
    assert rep.epsilon == pytest.approx(4.3771781, abs=1e-6)
    assert acc.get_epsilon(1e-5, accountant="rdp") > rep.epsilon


def test_heterogeneous_gaussians_mu():
    acc = PrivacyAccountant().compose(GaussianEvent(2.0), 3).compose(GaussianEvent(5.0), 50)
    assert acc.gdp_mu() == pytest.approx(math.sqrt(3 / 4 + 50 / 25), rel=1e-15)


def test_poisson_matches_dp_accounting_and_is_not_looser():
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 10_000)
    cc = acc.cross_check(1e-5)
    assert cc["ours_rdp"] <= cc["dp_accounting_rdp"] + 1e-9
    assert cc["ours_rdp"] == pytest.approx(cc["dp_accounting_rdp"], rel=1e-3)
    assert cc["dp_accounting_pld"] < cc["ours_rdp"]  # PLD is tighter than any RDP bound
    # the best accountant is our PLD upper end; dp-accounting's PLD (pessimistic, 1e-4) lies in
    # our bracket up to its own discretisation, and Opacus's PRV estimate too (its error ~1e-2)
    assert cc["ours"] == cc["ours_pld_upper"] < cc["ours_rdp"]
    assert cc["ours_pld_lower"] <= cc["dp_accounting_pld"] <= cc["ours"] * (1 + 1e-3)
    if cc["opacus_prv"] is not None:
        assert abs(cc["opacus_prv"] - cc["ours"]) <= 0.02


def test_wor_matches_dp_accounting_rdp():
    ev = WORSampledGaussianEvent.from_sizes(10, 1000, 1.0)
    acc = PrivacyAccountant().compose(ev, 1000)
    dpa = rdp_privacy_accountant.RdpAccountant(orders=list(range(2, 65)),
                                               neighboring_relation=NeighboringRelation.REPLACE_ONE)
    dpa.compose(acc.to_dp_event())
    cc = acc.cross_check(1e-5)
    assert cc["dp_accounting_pld"] is None and cc["notes"]
    assert cc["ours_rdp"] == pytest.approx(dpa.get_epsilon(1e-5), rel=1e-9)
    assert cc["ours"] <= cc["ours_rdp"] and cc["ours_pld_lower"] <= cc["ours_pld_upper"]


def test_mixed_gaussian_and_poisson():
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.02, 1.1), 150).compose(GaussianEvent(20.0), 4)
    cc = acc.cross_check(1e-5)
    assert cc["ours_method"] == "pld"        # the mixed composition is not exact GDP
    assert cc["ours_rdp"] <= cc["dp_accounting_rdp"] * (1 + 1e-9)
    assert cc["ours"] <= cc["ours_rdp"]
    assert cc["ours_pld_lower"] <= cc["dp_accounting_pld"] <= cc["ours"] * (1 + 1e-3)


@pytest.mark.parametrize("event", [WORSampledGaussianEvent.from_sizes(40, 40, 0.7),
                                   PoissonSampledGaussianEvent(1.0, 0.7)])
def test_sampling_every_record_is_the_full_batch_gaussian_exactly(event):
    # b = n or q = 1: every record is in every release, so the composition is mu-GDP, mu = sqrt(k)/z
    acc = PrivacyAccountant().compose(event, 30)
    exact = float(oracles.gdp_epsilon(math.sqrt(30) / 0.7, 1e-5))           # mpmath root
    rep = acc.epsilon_report(1e-5)
    assert rep.method == "gdp" and rep.epsilon == pytest.approx(exact, rel=1e-10)
    assert acc.epsilon_bracket(1e-5, methods=("pld",)).upper >= exact
    assert acc.neighboring_relation == event.neighboring_relation
    other = PoissonSampledGaussianEvent(0.1, 1.0) if isinstance(event, WORSampledGaussianEvent) \
        else WORSampledGaussianEvent(0.1, 1.0)
    with pytest.raises(ValueError, match="neighbouring relation"):
        acc.compose(other)                   # the relation is kept though the event is held as Gaussian


def test_diff2_bvr_with_a_full_local_batch_and_tiny_noise_is_not_under_reported():
    # b = n_min = 40, sigma3 = 1e-5: the local steps are Gaussian releases of noise multiplier
    # sigma3 / (2/b) = 2e-4 (Lemma E.1's sensitivity 2C/b); the restarts and differences have
    # z = sigma n_min P / 2 = 400 and 500.  The PLD once certified eps <= 1427 here (truth: 2.5e7).
    from dpcalib import mechanisms as M

    m = M.DIFF2BVR(rounds=40, restart_interval=2, clients=20, n_min=40, local_steps=2, batch_size=40)
    mu = math.sqrt(20 / 400.0 ** 2 + 20 / 500.0 ** 2 + 2 / 2e-4 ** 2)
    exact = float(oracles.gdp_epsilon(mu, 1e-5))
    assert m.accountant(1.0, 1.25, 1e-5).get_epsilon(1e-5) == pytest.approx(exact, rel=1e-9)


def test_empty_accountant_spends_nothing():
    assert PrivacyAccountant().get_epsilon(1e-5) == 0.0


def test_importing_accountant_does_not_import_torch():
    # A finder that refuses torch makes this fail whether or not torch is installed (checking
    # sys.modules alone would pass trivially on a machine without torch).
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('accountant imported torch')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import dpcalib.accountant as accountant, dpcalib.mechanisms as mechanisms, dpcalib.cli\n"
        "accountant.PrivacyAccountant().compose(accountant.GaussianEvent(1.0), 3).get_epsilon(1e-5)\n"
        "mechanisms.DPSGD(0.01, 100).calibrate(3, 1e-5)\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_optimal_order_matches_the_report_and_a_coarse_order_costs_only_second_order():
    from dpcalib.accountant import accountant as acc_mod

    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.1), 3000)
    acc_mod._RDP_REPORTS.clear()
    rep = acc.epsilon_report(1e-6, "rdp")
    eps, order = acc.optimal_order(1e-6)
    assert (eps, order) == (rep.epsilon, rep.order)
    eps3, order3 = acc.optimal_order(1e-6, rtol=1e-3)
    assert abs(order3 / order - 1) <= 3e-3
    # eps is stationary in the order: a 1e-3 order costs ~1e-6 of eps at most, and any order is
    # valid, so the coarse answer is never below the exact RDP of the mixture at that order
    assert rep.epsilon <= eps3 * (1 + 1e-9) and eps3 <= rep.epsilon * (1 + 1e-5)
    assert eps3 == pytest.approx(float(rdp_to_dp(order3, acc.rdp([order3])[0], 1e-6)), rel=1e-12)
    with pytest.raises(ValueError, match="rtol"):
        acc.optimal_order(1e-6, rtol=0.0)


def test_optimal_order_near_a_previous_optimum_and_far_from_it():
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.1), 3000)
    eps, order = acc.optimal_order(1e-6)
    for near in (order * 1.01, order / 1.02):           # within 3 %: searched there
        e2, o2 = acc.optimal_order(1e-6, rtol=1e-3, near=near)
        assert abs(o2 / order - 1) <= 3e-3 and e2 <= eps * (1 + 1e-5)
    e3, o3 = acc.optimal_order(1e-6, rtol=1e-3, near=order * 1.5)   # far: the optimum is on the
    assert abs(o3 / order - 1) <= 3e-3 and e3 <= eps * (1 + 1e-5)    # window's edge, cell search


def test_clear_cache_forgets_every_remembered_answer():
    from dpcalib.accountant import accountant as acc_mod
    from dpcalib.accountant import clear_cache, subsampling
    from dpcalib.accountant.pld import grid as pld_grid, refine as pld

    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 100)
    first = acc.epsilon_bracket(1e-5)
    PrivacyAccountant().compose(WORSampledGaussianEvent.from_sizes(10, 1000, 1.0), 10).get_epsilon(1e-5)
    assert acc_mod._RDP_REPORTS and pld.refined.cache_info().currsize
    assert subsampling._log_forward_diffs.cache_info().currsize
    clear_cache()
    assert not acc_mod._RDP_REPORTS and not pld_grid._SIDES
    assert pld.refined.cache_info().currsize == 0
    assert subsampling._log_forward_diffs.cache_info().currsize == 0
    # a cold answer is the same answer
    assert acc.epsilon_bracket(1e-5) == first
