"""Audits of claims that rely on fixed-size sampling without replacement under replace-one
(optim/audit/drivers.py: WORCoupling, wor_llr, audit_wor): DP-SRM with b < n, DIFF2-BVR-L-SGD's local
steps, ClipD2P with J > 1 -- consistent at their tight calibrations, and a planted bug in each
(noise x 0.5, or a claim whose sampling rate is half the one run) gives "violation"."""

import math
import sys
from pathlib import Path

import pytest
import torch

import dpcalib.optim.algorithms.core as core
from dpcalib.optim import audit as A
from dpcalib.optim.audit import lockstep

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from audit_wor import EPS, _HalfNoise, _clipd2p, _diff2bvr, _dpsrm, audit  # noqa: E402


def test_coupling_draws_uniform_batches_and_shares_k_between_followers():
    # the coupled "in"/"out" batches: "in" holds record 0 and b - 1 others, "out" b others, and both
    # followers of a release see the same (S', k)
    import collections
    idx_counts = collections.Counter()
    for seed in range(400):
        gen = torch.Generator().manual_seed(seed)
        idx = torch.randperm(6, generator=gen)[:3]
        cin, cout = A.WORCoupling(seed, "in"), A.WORCoupling(seed, "out")
        i, o = cin(idx, 6, 0), cout(idx, 6, 0)
        assert 0 in i.tolist() and 0 not in o.tolist() and len(set(i.tolist())) == len(set(o.tolist())) == 3
        # S' - k = (in batch) - {0} is inside S' = out batch
        assert set(i.tolist()) - {0} <= set(o.tolist())
        assert cin.gammas == cout.gammas == {0: 0.5}
        idx_counts.update(o.tolist())
    # the "out" batch is a uniform 3-subset of the five others: each appears in ~3/5 of them
    for k in range(1, 6):
        assert abs(idx_counts[k] / 400 - 0.6) < 0.1
    with pytest.raises(ValueError, match="mode='both'"):
        A.WORCoupling(0, "both")


def test_mixture_llr_closed_forms():
    o = torch.tensor([0.4, -0.1], dtype=torch.float64)
    q0, qa, qb = (torch.tensor(v, dtype=torch.float64) for v in ([0.0, 0.0], [1.0, 0.0], [-1.0, 0.0]))
    s, g = 0.7, 0.3
    dens = lambda q: math.exp(-float(((o - q) ** 2).sum()) / (2 * s * s))  # noqa: E731
    expected = math.log((1 - g) * dens(q0) + g * dens(qa)) - math.log((1 - g) * dens(q0) + g * dens(qb))
    assert lockstep._mixture_llr(o, q0, qa, qb, s, g) == pytest.approx(expected, rel=1e-12)
    # gamma = 1: the Gaussian LLR
    assert lockstep._mixture_llr(o, q0, qa, qb, s, 1.0) == pytest.approx(math.log(dens(qa) / dens(qb)), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("setup", [_dpsrm, _clipd2p, _diff2bvr], ids=["dp-srm", "clipd2p", "diff2-bvr"])
def test_wor_audits_at_the_tight_calibration_are_consistent(setup):
    r = audit(setup(), 150)
    assert r.verdict == "consistent", r.as_dict()
    assert r.epsilon_lo_direct <= EPS and not r.curve.violation
    assert r.curve.curve.kind == "profile"


@pytest.mark.slow
def test_dpsrm_whose_claim_has_half_the_sampling_rate_is_caught():
    # (a sweep, benchmarks/audit_wor.py's setups: consistent at 300 runs, caught at 500 and 700)
    r = audit(_dpsrm(claim_n=8), 500)
    assert r.verdict == "violation" and r.curve.violation
    assert r.epsilon_lo_direct <= EPS             # the eps bound at 1e-5 alone does not see it


@pytest.mark.slow
@pytest.mark.parametrize("setup, runs", [(_clipd2p, 300), (_diff2bvr, 300)], ids=["clipd2p", "diff2-bvr"])
def test_wor_audits_catch_half_the_noise(setup, runs, monkeypatch):
    # (a sweep caught both at every count tried: clipd2p at 200, 300, 400, diff2-bvr at 150, 250,
    # 300 runs per dataset; the counts leave a 1.5x and 2x margin -- clipd2p at 300, not 400, for CI's time)
    monkeypatch.setattr(core, "NoiseSource", _HalfNoise)
    s = setup()
    assert isinstance(s[0](0).privatizer, _HalfNoise)
    r = audit(s, runs)
    assert r.verdict == "violation", r.as_dict()


@pytest.mark.parametrize("argv", [
    ["dp-srm", "--n", "4", "--steps", "2", "--b0", "2", "--b", "2", "--momentum", "1", "--step-bound", "1"],
    ["clipd2p", "--samples-per-node", "2", "--iterations", "2", "--relation", "replace-one"],
])
def test_cli_without_replacement_audit(argv, capsys, tmp_path):
    from dpcalib.cli import main

    rc = main(["audit", *argv, "--epsilon", "8", "--delta", "1e-5", "--runs", "60", "--seed", "0", "--no-progress", "--json"])
    import json
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["verdict"] == "consistent" and out["runs_per_dataset"] == 60
    assert out["curve"]["violation"] is False and len(out["curve"]["points"]) == 5
    assert main(["audit", *argv, "--epsilon", "8", "--delta", "1e-5", "--no-progress"]) == 2
    assert "--runs is required" in capsys.readouterr().err


def test_every_audit_falls_back_on_the_stated_claim_where_the_optimizer_has_no_accountant(monkeypatch):
    """audit_wor once called spent_tradeoff itself and failed where audit and audit_poisson fell back on
    the stated (eps, delta) curve (AdaD2P: no accountant of its own); they now share the default."""
    from dpcalib.mechanisms import NoPrivacyGuaranteeError
    from dpcalib.optim.audit import drivers

    def none(build, seed=0):
        raise NoPrivacyGuaranteeError("no accountant")
    monkeypatch.setattr(drivers, "spent_tradeoff", none)
    build, _, a, b, holder = _clipd2p()
    r = A.audit_wor(build, a, b, runs=4, claimed_epsilon=EPS, delta=1e-5, holder=holder, progress=False, seed=0)
    stated = A.TradeOffCurve.epsilon_delta(EPS, 1e-5)
    assert [r.curve.curve(x) for x in (1e-4, 0.1, 0.5)] == [stated(x) for x in (1e-4, 0.1, 0.5)]
