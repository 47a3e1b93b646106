"""Runs of every optimizer at small sizes: the injected noise has the calibrated std
(chi-square test, and a mis-scaled noise is caught), checkpoint/resume is exact, privacy spent
matches the calibration, bad input is refused."""

import math

import pytest
import torch

import dpcalib.mechanisms as M
import dpcalib.optim as O
from dpcalib.optim.algorithms.noise import NoiseSource

from tests.builders import DELTA, NAMES, build, data, mlp, shards  # noqa: F401


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


# ---- acceptance 3: the injected noise has the calibrated std ----------------------------------------
def _claimed_std(name, rep, release):
    """The std each release should have, from the CALIBRATION (not from the optimizer)."""
    n = rep.noise
    if name in ("dp-sgd",):
        return n["noise_multiplier"] * 1.0
    if name in ("clipd2p", "clipd2p-poisson", "constd2p"):
        return n["sigma"] * 1.0
    if name.startswith("dicesgd"):
        return n["sigma1"]
    if name == "dp-srm":
        return n["sigma0"] if release.name == "v^0" else n["sigma"]
    return None   # DIFF2: std = sigma * C_r, C_r data-dependent; checked through the sensitivity below


@pytest.mark.parametrize("name", NAMES)
def test_recorded_noise_passes_the_chi_square_test(name):
    opt, rep = build(name, mlp(), seed=3, rounds=30)
    opt.run(progress=False)
    rel = opt.privatizer.releases
    assert len(rel) > 0
    res = O.noise_std_test(rel)
    assert res.passed, res
    assert res.ratio_interval[0] < 1.0 < res.ratio_interval[1]
    if rep is not None:
        for r in rel:
            c = _claimed_std(name, rep, r)
            if c is not None:
                assert r.std == pytest.approx(c, rel=1e-12)
    if name in ("dp-gd", "diff2-gd", "diff2-bvr"):
        # noise multiplier std/sensitivity is the calibrated z in every release with non-zero noise
        mech = opt.mechanism
        for r in rel:
            if r.std == 0:
                continue
            if "local" in r.name:
                z = rep["sigma3"] * mech.batch_size / 2.0
            else:
                s = rep["sigma1"] if "restart" in r.name else rep["sigma2"]
                z = s * mech.n_min * mech.clients / 2.0
            assert r.std / r.sensitivity == pytest.approx(z, rel=1e-9)


class _Shrunk(NoiseSource):
    """A planted bug: the noise actually added is 0.9 x the claimed std."""

    def standard(self, shape, generator=None):
        return 0.9 * super().standard(shape, generator)


@pytest.mark.parametrize("name", ["diff2-gd", "dp-sgd", "dicesgd", "clipd2p"])
def test_mis_scaled_noise_is_detected(name, monkeypatch):
    monkeypatch.setattr("dpcalib.optim.algorithms.core.NoiseSource", _Shrunk)
    opt, _ = build(name, mlp(), seed=3, rounds=30)
    assert isinstance(opt.privatizer, _Shrunk)
    opt.run(progress=False)
    res = O.noise_std_test(opt.privatizer.releases)
    assert not res.passed
    assert res.ratio_interval[1] < 1.0 and res.ratio == pytest.approx(0.9, abs=0.05)


def test_noise_test_input_errors():
    with pytest.raises(ValueError, match="level"):
        O.noise_std_test([], level=0)
    with pytest.raises(ValueError, match="no release"):
        O.noise_std_test([])


# ---- acceptance 4: resume == uninterrupted ----------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_resumed_run_equals_uninterrupted(name, tmp_path):
    a, _ = build(name, mlp(), seed=7)
    a.run(progress=False, log_every=3)
    b, _ = build(name, mlp(), seed=7)
    b.run(5, progress=False, log_every=3, checkpoint=tmp_path / "ck.pt")
    c, _ = build(name, mlp(seed=99), seed=123)       # different init and seeds: all overwritten by the checkpoint
    c.load_checkpoint(tmp_path / "ck.pt")
    assert c.round == 5
    c.run(progress=False, log_every=3)
    assert torch.equal(flat(a.model), flat(c.model))
    # the interrupted run also logged its last round (5); every round both logged agrees exactly
    by_round = {m["round"]: m for m in c.metrics}
    assert set(by_round) == {m["round"] for m in a.metrics} | {5}
    for ma in a.metrics:
        mc = by_round[ma["round"]]
        assert all((ma[k] == mc[k]) or (math.isnan(ma[k]) and math.isnan(mc[k])) for k in ma)
    assert len(a.privatizer.releases) == len(c.privatizer.releases)
    assert all(torch.equal(r.noise, s.noise) for r, s in zip(a.privatizer.releases, c.privatizer.releases))
    oa, oc = a.output(), c.output()
    assert all(torch.equal(oa[k], oc[k]) for k in oa)


def test_checkpoint_of_another_run_is_refused(tmp_path):
    a, _ = build("dp-sgd", mlp())
    a.run(3, progress=False)
    a.save_checkpoint(tmp_path / "a.pt")
    b, _ = build("dicesgd", mlp())
    with pytest.raises(ValueError, match="checkpoint"):
        b.load_checkpoint(tmp_path / "a.pt")


# ---- privacy spent --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["dp-gd", "diff2-gd", "diff2-bvr", "dp-sgd", "dp-srm", "clipd2p",
                                  "clipd2p-poisson"])
def test_privacy_spent_at_the_end_is_the_calibrated_epsilon(name):
    opt, rep = build(name, mlp())
    eps = [m["epsilon"] for m in opt.run(progress=False, log_every=2)]
    assert all(a <= b + 1e-12 for a, b in zip(eps, eps[1:]))          # never decreases
    assert eps[-1] == pytest.approx(rep.certified_epsilon, rel=1e-6)   # the mechanism's own accountant
    assert eps[-1] <= rep.epsilon * (1 + 1e-9)


def test_dicesgd_reports_the_assumption_free_epsilon_of_a_paper_calibration():
    mech = M.DiceSGD(100, 10, 12, C1=1.0, C2=0.1)
    with pytest.warns(M.PaperConditionWarning):
        rep = mech.calibrate(4.0, DELTA, method="paper")
    opt = O.DiceSGD(mlp(), O.squared_loss, data(100), mech, rep, lr=0.05)
    opt.run(progress=False)
    assert opt.epsilon_spent() == pytest.approx(mech.epsilon(DELTA, rep["sigma1"]).epsilon, rel=1e-9)
    assert opt.epsilon_spent() > 4.0     # the paper's noise does not buy its target without its assumptions


def test_adad2p_has_no_epsilon():
    opt, _ = build("adad2p", mlp())
    opt.run(progress=False)
    assert opt.metrics[-1]["epsilon"] == math.inf
    with pytest.raises(M.NoPrivacyGuaranteeError):
        opt.accountant()
    assert all(r.sensitivity is None for r in opt.privatizer.releases)


def test_constd2p_counts_gradients_above_its_assumed_bound():
    mech = M.ConstD2P(10, 12, "replace-one")
    with pytest.warns(M.PaperConditionWarning):
        rep = mech.calibrate(8.0, DELTA)

    def run(G, noise=rep):
        opt = O.ConstD2P(mlp(), O.squared_loss, shards(5, 10), mech, noise, G=G, lr=0.05, seed=0, record=False)
        opt.run(progress=False)
        return opt

    with pytest.warns(M.PaperConditionWarning, match="AdaD2P-E2"):
        tiny = run(1e-6)          # every per-example gradient of this MLP has norm > 1e-6
    assert tiny.bound_violations == 5 * 12      # 5 nodes x 12 iterations, one record each
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", M.PaperConditionWarning)
        huge = run(100.0, {"sigma": 0.0})   # noiseless, this MLP's gradients stay far below 100
    assert huge.bound_violations == 0


def test_seeds_split_data_and_noise_streams():
    # A run is reproducible from its seed, and the noise stream is independent of the data stream:
    # disturbing the data generator changes which records are sampled but not one noise draw.
    a, _ = build("dp-sgd", mlp(), seed=11)
    b, _ = build("dp-sgd", mlp(), seed=11)
    a.run(progress=False)
    b.run(progress=False)
    assert torch.equal(flat(a.model), flat(b.model))
    d, _ = build("dp-sgd", mlp(), seed=11)
    torch.rand(1000, generator=d.data_generator)        # a different sampling history
    d.run(progress=False)
    assert not torch.equal(flat(a.model), flat(d.model))
    assert len(d.privatizer.releases) == len(a.privatizer.releases)
    assert all(torch.equal(r.noise, s.noise) for r, s in zip(a.privatizer.releases, d.privatizer.releases))
    c, _ = build("dp-sgd", mlp(), seed=12)
    c.run(progress=False)
    assert not torch.equal(flat(a.model), flat(c.model))
    assert not torch.equal(a.privatizer.releases[0].noise, c.privatizer.releases[0].noise)


def test_output_is_one_of_the_candidate_iterates():
    opt, _ = build("diff2-gd", mlp(), rounds=12)
    seen = []
    for _ in range(12):
        seen.append(torch.cat([v.reshape(-1) for v in opt.params().values()]))
        opt.step()
    out = torch.cat([v.reshape(-1) for v in opt.output().values()])
    assert any(torch.equal(out, s) for s in seen)


# ---- bad input -----------------------------------------------------------------------------------
def test_bad_input_is_refused_with_the_argument_named():
    mech = M.DIFF2GD(10, 2, 3, 40)
    rep = mech.calibrate(2.0, DELTA)
    model = mlp()
    with pytest.raises(ValueError, match="clients=3"):
        O.DIFF2GD(model, O.squared_loss, shards(2, 40), mech, rep, C1=1.0, C2=1.0, lr=0.1)
    with pytest.raises(ValueError, match="n_min=40"):
        O.DIFF2GD(model, O.squared_loss, shards(3, 30), mech, rep, C1=1.0, C2=1.0, lr=0.1)
    with pytest.raises(ValueError, match="C2=inf"):
        O.DIFF2GD(model, O.squared_loss, shards(3, 40), mech, rep, C1=1.0, lr=0.1)
    with pytest.raises(ValueError, match="lr="):
        O.DIFF2GD(model, O.squared_loss, shards(3, 40), mech, rep, C1=1.0, C2=1.0, lr=-1)
    with pytest.raises(ValueError, match="C1="):
        O.DIFF2GD(model, O.squared_loss, shards(3, 40), mech, rep, C1=float("nan"), C2=1.0, lr=0.1)
    with pytest.raises(ValueError, match="mechanism="):
        O.DIFF2GD(model, O.squared_loss, shards(3, 40), M.DPSGD(0.1, 10), rep, C1=1.0, C2=1.0, lr=0.1)
    with pytest.raises(ValueError, match="calibration of 'dp-sgd'"):
        O.DIFF2GD(model, O.squared_loss, shards(3, 40), mech, M.DPSGD(0.1, 10).calibrate(2.0, DELTA),
                  C1=1.0, C2=1.0, lr=0.1)
    with pytest.raises(ValueError, match="noise\\['sigma1'\\]"):
        O.DIFF2GD(model, O.squared_loss, shards(3, 40), mech, {"sigma1": -1.0, "sigma2": 0.0}, C1=1.0, lr=0.1)
    with pytest.raises(ValueError, match="'sigma2'"):
        O.DIFF2GD(model, O.squared_loss, shards(3, 40), mech, {"sigma1": 1.0}, C1=1.0, C2=1.0, lr=0.1)
    with pytest.raises(ValueError, match="N=100"):
        O.DiceSGD(model, O.squared_loss, data(90), M.DiceSGD(100, 10, 5), {"sigma1": 1.0}, lr=0.1)
    with pytest.raises(ValueError, match="optimizer="):
        O.DiceSGD(model, O.squared_loss, data(100), M.DiceSGD(100, 10, 5), {"sigma1": 1.0}, lr=0.1,
                  optimizer="rmsprop")
    with pytest.raises(ValueError, match="C1=2.0"):
        O.DPSRM(model, O.squared_loss, data(100), M.DPSRM(100, 5, 10, 10), {"sigma0": 1.0, "sigma": 1.0},
                lr=0.1, C1=2.0)
    with pytest.raises(ValueError, match="J=5"):
        O.ClipD2P(model, O.squared_loss, shards(4, 5), M.ClipD2P(10, 5), {"sigma": 1.0}, C=1.0, lr=0.1)
    with pytest.raises(ValueError, match="graph="):
        O.ClipD2P(model, O.squared_loss, shards(4, 10), M.ClipD2P(10, 5), {"sigma": 1.0}, C=1.0, lr=0.1,
                  graph="ring")
    opt, _ = build("dp-sgd", mlp(), rounds=3)
    with pytest.raises(ValueError, match="rounds=5"):
        opt.run(5, progress=False)
    opt.run(progress=False)
    with pytest.raises(RuntimeError, match="complete"):
        opt.step()
