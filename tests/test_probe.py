"""The record-level sensitivity probe (optim/audit/probe.py, `dpcalib probe`): neighbouring datasets that
differ in one real record, run through the same per-example code as any run.

Oracles: the claimed sensitivities are the mechanisms' (Lemma C.1 etc.); the probe must reach them
(a canary pair sits at the claim: ratio ~1, so the check is not vacuous), never exceed them on the
committed code, and flag planted faults: a clip factor x 1.5 on one path, the first release's
expanded ghost-difference formula at small steps in float32, and ConstD2P's unclipped gradients
(AdaD2P-E2).
"""

import json
import subprocess
import sys

import pytest
import torch

import dpcalib.mechanisms as M
from dpcalib.cli import main
from dpcalib.optim.audit import probe as P
from dpcalib.optim.clipping import paths as clipping, per_example
from dpcalib.optim.data.sampling import ForcedRecord, Sampler

# (algorithm, mechanism, epsilon, harness keywords): small runs of every algorithm that claims a sensitivity
CASES = [
    ("dp-gd", M.DPGD(4, 2, 40), 3.0, {}),
    ("diff2-gd", M.DIFF2GD(6, 3, 2, 40), 3.0, {"clips": {"c2": 0.01}}),
    ("diff2-bvr", M.DIFF2BVR(4, 2, 2, 60, 3, 10), 3.0, {}),
    ("dp-sgd", M.DPSGD(0.05, 6), 2.0, {"n": 80}),
    ("dp-srm", M.DPSRM(80, 6, 16, 8), 0.5, {}),
    ("dicesgd", M.DiceSGD(80, 8, 6, 1.0, 1.0, 1.0), 2.0, {}),
    ("clipd2p", M.ClipD2P(8, 4), 1.0, {}),
]


def _probe(alg, mech, eps, kw, **more):
    rep = mech.calibrate(eps, 1e-5)
    build, data, held = P.probe_harness(alg, mech, rep, hidden=16, seed=0, **{**kw, **more})
    return P.record_probe(build, data, held, progress=False, seed=0)


@pytest.mark.parametrize("alg,mech,eps,kw", CASES, ids=[c[0] for c in CASES])
def test_every_algorithm_that_claims_a_sensitivity_stays_within_it_on_real_records(alg, mech, eps, kw):
    r = _probe(alg, mech, eps, kw)
    assert r.passed and r.exceeded == 0 and r.std_mismatches == 0
    assert r.worst_ratio <= 1 + r.tol
    # the canary pair reaches the claim: the probe exercises the clip, not a slack
    assert r.worst_ratio > 0.95
    kinds = {row["release"] for row in r.rows}
    expected = {spec.name for spec in mech.releases}
    assert len(kinds) == len(expected), (kinds, expected)   # every release kind was probed


def test_a_clip_factor_planted_on_the_ghost_path_is_flagged(monkeypatch):
    plain = clipping._ghost_sum
    monkeypatch.setattr(clipping, "_ghost_sum", lambda sig, f: plain(sig, 1.5 * f))
    r = _probe("dp-sgd", M.DPSGD(0.05, 6), 2.0, {"n": 80})
    assert r.exceeded > 0 and 1.4 < r.worst_ratio < 1.6


def test_the_expanded_ghost_difference_formula_is_flagged_at_small_steps_in_float32(monkeypatch):
    from benchmarks.fuzz_clipping import expanded_ghost_diff

    mech = M.DPSRM(200, 8, 16, 8)
    ok = _probe("dp-srm", mech, 0.5, {}, lr=1e-4)
    assert ok.passed
    monkeypatch.setattr(per_example, "clipped_grad_diff_sum", lambda *a, **k: expanded_ghost_diff(*a, **{**k, "method": "ghost"}))
    bad = _probe("dp-srm", mech, 0.5, {}, lr=1e-4)
    assert bad.exceeded > 0 and bad.worst_ratio > 1 + bad.tol
    assert {row["release"] for row in bad.rows if row["worst_ratio"] > 1 + bad.tol} == {"v^t"}


def test_constd2p_unclipped_gradients_exceed_the_claim():
    with pytest.warns(Warning, match="AdaD2P-E2"):
        r = _probe("constd2p", M.ConstD2P(8, 3), 1.0, {})
    assert r.exceeded > 0 and r.worst_ratio > 10


def test_adad2p_and_add_remove_without_sampling_are_refused():
    with pytest.raises(ValueError, match="claims no sensitivity"):
        P.probe_harness("adad2p", M.AdaD2P(1, 2), {"sigma": 1.0}, seed=0)
    # a full-batch release cannot lose a record through the sampler: add/remove is refused, not passed
    mech = M.DPGD(2, 2, 40)
    build, data, held = P.probe_harness("dp-gd", mech, mech.calibrate(3.0, 1e-5), hidden=8, seed=0)
    x, y = data[0]
    pair = P.Pair("a record / removed", "add/remove", (x[0], y[0]), None)
    with pytest.raises(ValueError, match="draw no sample"):
        P.record_probe(build, data, held, pair_list=[pair], progress=False, seed=0)



def test_an_empty_pair_list_is_refused_and_an_empty_report_has_no_worst_row():
    mech = M.DPGD(2, 2, 40)
    build, data, held = P.probe_harness("dp-gd", mech, mech.calibrate(3.0, 1e-5), hidden=8, seed=0)
    for bad in ([], ["not a pair"]):
        with pytest.raises(ValueError, match="pair_list=.* is not allowed: expected a non-empty list of Pair") as e:
            P.record_probe(build, data, held, pair_list=bad, progress=False, seed=0)
        assert "\n" not in str(e.value)
    assert P.RecordProbeReport("dp-gd", (), 0.0, 0.0, 0, 0, 0, (0, 0)).worst() is None

def test_forced_record_sampler():
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    base = Sampler()
    for present in (True, False):
        s = ForcedRecord(0, 5, present)
        idx = s.poisson(50, 0.2, g())
        assert (5 in idx.tolist()) is present
        assert set(idx.tolist()) - {5} == set(base.poisson(50, 0.2, g()).tolist()) - {5}
    w = ForcedRecord(0, 5, True).without_replacement(50, 7, g())
    assert len(set(w.tolist())) == 7 and 5 in w.tolist()
    assert ForcedRecord(1, 5, True).without_replacement(50, 7, g()).tolist() == base.without_replacement(50, 7, g()).tolist()
    assert ForcedRecord(0, 5, True).one(50, g()).tolist() == [5]
    with pytest.raises(ValueError, match="present=False"):
        ForcedRecord(0, 5, False).one(50, g())


def test_cli_probe_json_and_bad_input(capsys):
    argv = ["probe", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", "--sampling-rate", "0.05", "--steps", "4",
            "--n", "60", "--hidden", "8", "--json", "--no-progress"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"worst_ratio", "tol", "exceeded", "rows"} <= set(d)
    assert d["exceeded"] == 0 and 0.95 < d["worst_ratio"] <= 1 + d["tol"]
    assert {r["relation"] for r in d["rows"]} == {"add/remove"}
    for bad, what in ((["--hidden", "0"], "hidden=0"), (["--lr", "-1"], "lr=-1"), (["--data", "nope"], "data='nope'"),
                      (["--clip", "-2"], "--clip=-2")):
        assert main(argv[:-2] + bad) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and what in err, err
    assert main(["probe", "adad2p", "--epsilon", "1", "--delta", "1e-5", "--samples-per-node", "1",
                 "--iterations", "2"]) == 2
    assert "AdaD2P-E1" in capsys.readouterr().err


def test_cli_probe_text_in_a_subprocess():
    out = subprocess.run([sys.executable, "-m", "dpcalib.cli", "probe", "dp-srm", "--epsilon", "0.5", "--delta", "1e-5",
                          "--n", "100", "--steps", "3", "--b0", "16", "--b", "8", "--hidden", "8", "--no-progress"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "verdict     within the claimed sensitivity" in out.stdout
    assert "canary record -> canary, label negated" in out.stdout


@pytest.mark.parametrize("relation,pair_relation", [("zero-out", "zero-out"), ("replace-one", "replace-one")])
def test_record_probe_of_shuffled_dp_sgd_stays_within_its_claim(capsys, relation, pair_relation):
    """Shuffled batches: real records through the real per-example path; zero-out pairs keep the other records
    of the batch (the record joins or leaves it), replace-one pairs swap its value."""
    argv = ["probe", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", "--sampling", "shuffle", "--n", "120",
            "--batch-size", "40", "--epochs", "2", "--relation", relation, "--hidden", "8", "--json", "--no-progress"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["exceeded"] == 0 and d["std_mismatches"] == 0 and 0.95 < d["worst_ratio"] <= 1 + d["tol"]
    assert {r["relation"] for r in d["rows"]} == {pair_relation}


def test_shuffled_forced_record_joins_or_leaves_the_batch_and_keeps_the_others():
    perm = torch.arange(10).flip(0)
    assert ForcedRecord(0, 2, True).shuffled(perm, 0, 4).tolist() == [9, 8, 7, 6, 2]      # joins, nobody displaced
    assert ForcedRecord(0, 8, False).shuffled(perm, 0, 4).tolist() == [9, 7, 6]           # leaves
    assert ForcedRecord(0, 8, True).shuffled(perm, 0, 4).tolist() == [9, 7, 6, 8]


def test_a_move_past_the_double_range_prints_as_overflow_and_null_in_json(capsys):
    """Found by the CLI fuzz: ConstD2P (unclipped) at --seed 1 overflows its canary's release; the text printed
    "inf" and --json stopped on an internal error (JSON has no infinity).  Now: "overflow" in the text, null
    with a note in the JSON, exit 0, the verdict unchanged."""
    from dpcalib.commands.probe import _overflow_as_null

    out, flag = _overflow_as_null({"worst_ratio": float("inf"), "tol": 1.0,
                                   "rows": [{"worst_ratio": float("nan")}, {"worst_ratio": 2.0}]})
    assert flag and out == {"worst_ratio": None, "tol": 1.0, "rows": [{"worst_ratio": None}, {"worst_ratio": 2.0}]}
    assert _overflow_as_null({"worst_ratio": 3.0, "rows": []}) == ({"worst_ratio": 3.0, "rows": []}, False)

    argv = ["probe", "constd2p", "--epsilon", "1", "--delta", "1e-5", "--samples-per-node", "7", "--iterations",
            "20", "--no-progress", "--seed", "1"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "EXCEEDS the claimed sensitivity" in text
    assert not {"inf", "nan", "-inf"} & set(text.replace("(", " ").replace(")", " ").split())
    assert main(argv + ["--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["exceeded"] > 0
    assert (rep["worst_ratio"] is None) == ("notes" in rep)
