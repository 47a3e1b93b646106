"""The privacy report: attack-risk terms from the certified side, against closed forms (mpmath),
dp-accounting's optimistic and pessimistic PLDs, and properties; `dpcalib report` as a user runs it."""

import io
import json
import math
import subprocess
import sys

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalib.accountant import (GaussianEvent, PoissonSampledGaussianEvent, PrivacyAccountant,
                                WORSampledGaussianEvent, certified_advantage, certified_tpr)

FPRS = [1e-4, 0.001, 0.01, 0.1, 0.3, 0.7, 0.99]


def _mp_tpr(mu, a):
    """Phi(Phi^-1(a) + mu) in 50 digits."""
    mpmath.mp.dps = 50
    x = mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(a) - 1)
    return float(mpmath.ncdf(x + mu))


@pytest.mark.parametrize("z,k", [(2.0, 4), (10.0, 100), (0.7, 3), (5.0, 1)])
def test_full_batch_tpr_and_advantage_are_the_gdp_closed_forms(z, k):
    acc = PrivacyAccountant().compose(GaussianEvent(z), k)
    mu = math.sqrt(k) / z
    tpr = certified_tpr(acc, FPRS)
    for a, t in zip(FPRS, tpr):
        exact = _mp_tpr(mu, a)
        assert t >= exact * (1 - 1e-12) and t - exact <= 1e-3
    mpmath.mp.dps = 50
    adv = float(2 * mpmath.ncdf(mpmath.mpf(mu) / 2) - 1)
    assert certified_advantage(acc) == pytest.approx(adv, rel=1e-12)
    rep = acc.report(1e-5)
    assert rep.mu == pytest.approx(mu, rel=1e-12)
    assert dict(rep.tpr_at_fpr)[0.01] == pytest.approx(_mp_tpr(mu, 0.01), rel=1e-12)


def _dense(pmf):
    d = pmf.to_dense_pmf() if hasattr(pmf, "to_dense_pmf") else pmf
    loss = (d._lower_loss + np.arange(d._probs.size)) * d._discretization
    return loss, np.asarray(d._probs, dtype=float), float(d._infinity_mass)


def _pmf_tpr(pmf, fprs):
    """The exact largest TPR of the discrete pair of a dp-accounting pmf: min over its atoms of
    e^l a + delta(l) (delta of a discrete loss is linear in e^eps between atoms)."""
    loss, p, p_inf = _dense(pmf)
    S = np.cumsum(p[::-1])[::-1]
    W = np.cumsum((p * np.exp(-loss))[::-1])[::-1]
    delta = S - np.exp(loss) * W + p_inf
    return np.array([min(float(np.min(np.exp(loss) * a + delta)), float(p.sum() + p_inf)) for a in fprs])


def _dpa_tpr(q, z, k, fprs, pessimistic):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    pld = pld_lib.from_gaussian_mechanism(z, sampling_prob=q, pessimistic_estimate=pessimistic,
                                          value_discretization_interval=1e-4,
                                          use_connect_dots=pessimistic).self_compose(k)
    out = _pmf_tpr(pld._pmf_remove, fprs)
    if not pld._symmetric:
        out = np.maximum(out, _pmf_tpr(pld._pmf_add, fprs))
    return out


@pytest.mark.parametrize("q,z,k", [(0.01, 1.0, 1000), (0.1, 2.0, 100), (0.02, 0.8, 300)])
def test_poisson_tpr_lies_between_dp_accountings_optimistic_and_pessimistic_plds(q, z, k):
    pytest.importorskip("dp_accounting")
    fprs = [0.001, 0.01, 0.1, 0.5]
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(q, z), k)
    ours = certified_tpr(acc, fprs)
    lo = _dpa_tpr(q, z, k, fprs, False)
    hi = _dpa_tpr(q, z, k, fprs, True)
    assert np.all(lo <= ours) and np.all(ours <= hi), (lo, ours, hi)
    # and the advantage is the larger direction's delta(0) (dp-accounting's pessimistic one as a bound)
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    pess = pld_lib.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=1e-4).self_compose(k)
    assert certified_advantage(acc) <= pess.get_delta_for_epsilon(0.0) * (1 + 1e-9)


@st.composite
def _compositions(draw):
    kind = draw(st.sampled_from(["gauss", "poisson", "wor", "mix"]))
    z = draw(st.floats(0.6, 4.0))
    k = draw(st.integers(1, 60))
    acc = PrivacyAccountant()
    if kind in ("gauss", "mix"):
        acc.compose(GaussianEvent(z), k)
    if kind in ("poisson", "mix"):
        acc.compose(PoissonSampledGaussianEvent(draw(st.floats(0.01, 0.5)), z), k)
    if kind == "wor":
        acc.compose(WORSampledGaussianEvent(draw(st.floats(0.01, 0.5)), z), k)
    return acc


@settings(max_examples=15, deadline=None, derandomize=True)
@given(_compositions())
def test_tpr_is_at_least_the_fpr_non_decreasing_and_at_most_one(acc):
    a = np.concatenate(([0.0], np.logspace(-6, 0, 40)))
    t = certified_tpr(acc, a)
    assert np.all(t >= a) and np.all(t <= 1.0)
    assert np.all(np.diff(t) >= -1e-12)
    assert 0.0 <= certified_advantage(acc) <= 1.0


def test_report_keys_and_brackets_hold_at_every_delta():
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 1000)
    d = acc.report(1e-5, deltas=[1e-3, 1e-7]).to_dict()
    for key in ("epsilon", "epsilon_lower", "epsilon_upper", "epsilons", "tpr_at_fpr", "advantage", "assumptions"):
        assert key in d
    assert d["epsilon"] == acc.get_epsilon(1e-5)                      # the one owner of eps
    assert [row["delta"] for row in d["epsilons"]] == [1e-3, 1e-5, 1e-7]
    for row in d["epsilons"]:
        assert row["lower"] <= row["upper"]
    assert set(d["tpr_at_fpr"]) == {"0.001", "0.01", "0.1"}
    assert "add/remove" in d["assumptions"]["neighbouring_relation"]
    assert "1000" in d["assumptions"]["steps"]


def test_report_progress_is_told_each_part_in_order_and_the_report_is_the_same():
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 1000)
    calls = []
    rep = acc.report(1e-5, deltas=[1e-3, 1e-7], progress=lambda *a: calls.append(a))
    assert calls == [(0, 4, "eps at delta=0.001"), (1, 4, "eps at delta=1e-05"), (2, 4, "eps at delta=1e-07"),
                     (3, 4, "attack risk"), (4, 4, "")]
    assert rep.to_dict() == acc.report(1e-5, deltas=[1e-3, 1e-7]).to_dict()


def test_a_mechanisms_report_tells_progress_too_and_a_non_callable_is_refused():
    from dpcalib.mechanisms import DPSGD

    mech = DPSGD(0.01, 100)
    calls = []
    rep = mech.report(1e-5, 1.0, progress=lambda *a: calls.append(a))
    assert [c[0] for c in calls] == list(range(len(rep.epsilons) + 2)) and calls[-1] == (len(rep.epsilons) + 1,) * 2 + ("",)
    with pytest.raises(ValueError, match="progress=3 is not allowed"):
        mech.report(1e-5, 1.0, progress=3)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_cli_report_shows_a_bar_on_a_terminal_and_none_when_piped(monkeypatch, capsys):
    from dpcalib.cli import main
    from dpcalib.commands import common

    argv = ["report", "dp-sgd", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "100",
            "--noise-multiplier", "1.0"]
    monkeypatch.setattr(common, "PROGRESS_DELAY", 0.0)
    assert main(argv) == 0                                      # piped (pytest's capture): no bar
    piped = capsys.readouterr()
    assert "parts" not in piped.err and "epsilon" in piped.out
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main(argv) == 0
    shown = capsys.readouterr()
    assert "report dp-sgd" in term.getvalue() and "eps at delta=" in term.getvalue()
    assert shown.out == piped.out                               # the same report on stdout


def run(*args):
    return subprocess.run([sys.executable, "-m", "dpcalib", *args], capture_output=True, text=True)


def test_cli_report_json_equals_the_api():
    r = run("report", "--poisson", "0.01:1.0:1000", "--delta", "1e-5", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    rep = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 1000).report(1e-5)
    assert out["epsilon"] == rep.epsilon and out["tpr_at_fpr"]["0.01"] == dict(rep.tpr_at_fpr)[0.01]
    assert out["advantage"] == rep.advantage


def test_cli_report_text_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "r.png"
    r = run("report", "dp-sgd", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "100",
            "--noise-multiplier", "1.0", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert "at FPR 0.001" in r.stdout and "assumptions:" in r.stdout and "add/remove" in r.stdout
    assert png.stat().st_size > 1000


@pytest.mark.parametrize("args,fragment", [
    (["report", "--delta", "1e-5"], "at least one of"),
    (["report", "--gaussian", "1:4", "--delta", "1e-5", "--fprs", "0,0.1"], "--fprs"),
    (["report", "--gaussian", "1:4", "--delta", "1e-5", "--deltas", "2"], "--deltas"),
    (["report", "--gaussian", "1:4", "--delta", "1e-5", "--plot", "x.txt"], "--plot"),
    (["report", "dp-sgd", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "10"], "--noise-multiplier"),
    (["report", "dp-sgd", "--delta", "1e-5", "--sampling", "shuffle", "--n", "100", "--batch-size", "10",
      "--epochs", "1", "--relation", "add/remove", "--noise-multiplier", "1"], "relation='add/remove'"),
])
def test_cli_report_bad_input_is_one_line_exit_2(args, fragment):
    r = run(*args)
    assert r.returncode == 2 and fragment in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_report_of_an_algorithms_calibration_names_its_relation_and_sampling():
    from dpcalib.mechanisms import DPSRM

    mech = DPSRM(n=2000, steps=30, b0=64, b=16)
    cal = mech.calibrate(1.0, 1e-5)
    rep = mech.report(1e-5, cal)
    assert rep.epsilon == pytest.approx(cal.certified_epsilon, rel=1e-9)   # the calibration's own eps
    assert "replace-one" in rep.assumptions["neighbouring_relation"]
    assert "without replacement" in rep.assumptions["sampling"]
    assert rep.mu is None and 0.001 < dict(rep.tpr_at_fpr)[0.001] < 1.0


def _tpr_every_eps(profiles, fprs):
    """The attack-risk bound as first written: the minimum over EVERY eps of both profiles (the oracle of
    the truncated minimum)."""
    a = np.asarray(fprs, dtype=float)
    out = np.zeros(a.size)
    for i, (e, d) in enumerate(profiles):
        er, dr = profiles[1 - i] if len(profiles) == 2 else (e, d)
        for k, ak in enumerate(a):
            t1 = float(d[-1]) if ak <= 0.0 else float(np.min(np.exp(np.minimum(e + math.log(ak), 700.0)) + d))
            t2 = float(np.min(1.0 - np.exp(-er) * (1.0 - ak - dr)))
            out[k] = max(out[k], min(t1, t2))
    return np.clip(np.maximum(out, a), 0.0, 1.0)


@pytest.mark.parametrize("q, z, k, h", [(0.02, 0.01, 150, 4.0), (0.01, 1.0, 100, 1e-3), (0.2, 0.3, 10, 1e-2),
                                        (1e-3, 0.6, 10_000, 1e-3), (0.5, 5.0, 3, 1e-3), (0.9, 0.05, 2, 0.05)])
def test_the_attack_risk_reads_only_the_eps_that_can_decide_it_and_equals_the_minimum_over_all(q, z, k, h):
    """tpr_from_profiles stops at eps = -log(FPR) (direct term) and PROFILE_EPS_MAX (reverse term); on
    profiles from eps ~ 1e-3 to ~6e4 it equals the minimum over every eps of both profiles."""
    from dpcalib.accountant import tradeoff
    from dpcalib.accountant.pld import pld_upper_profiles

    profiles = pld_upper_profiles([(PoissonSampledGaussianEvent(q, z), k)], h)
    fprs = [0.0, 1e-300, 1e-12, 1e-3, 0.01, 0.1, 0.5, 0.999, 1.0]
    got = tradeoff.tpr_from_profiles(profiles, fprs)
    np.testing.assert_allclose(got, _tpr_every_eps(profiles, fprs), rtol=0.0, atol=1e-15)
    assert np.all(got >= np.asarray(fprs)) and np.all(got <= 1.0)
