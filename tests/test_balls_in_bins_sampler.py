"""Balls-in-bins batches on the torch side: the stream's bin draw, the loader's sampler, the engine, the
reference DP-SGD and ``dpcalib train --sampling balls-in-bins``.

Each epoch every record goes to one of ``t = ceil(n / b)`` steps, uniformly and independently, from the
run's secret data stream; the batches come in step order, ``Binomial(n, 1/t)`` records each (empty ones
included), and the run is accounted by ``DPSGD(sampling="balls-in-bins", ...)`` -- the same owner the
command line's ``epsilon`` uses.  The statistical tests are seeded (deterministic) at a p-value threshold
of 1e-4, and each is shown to reject a wrong law of the same size.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O
from dpcalib.accountant import steps_per_epoch
from dpcalib.accountant.validation import InputError
from dpcalib.optim.audit.contract import StepClaim
from dpcalib.optim.audit.steps import sampler_test
from dpcalib.optim.data.sampling import ForcedRecord, Sampler, bin_batches
from dpcalib.optim.engine import BallsInBinsBatchSampler, BatchMemoryManager
from dpcalib.optim.randomness import RunStreams, bins

P_MIN = 1e-4


def _gen(seed=0, secure=False):
    return RunStreams(seed, secure_mode=secure).run("cpu")[0]


def _epochs(n, t, epochs, seed=0, secure=False):
    """``epochs`` passes of a sampler: a list of epochs, each a list of ``t`` index lists."""
    s = BallsInBinsBatchSampler(n, t, _gen(seed, secure))
    return [list(s) for _ in range(epochs)]


def _pooled_chisquare(observed, expected) -> float:
    """Chi-square p-value after pooling adjacent cells until each expects >= 5."""
    obs, exp, ao, ae = [], [], 0.0, 0.0
    for o, e in zip(observed, expected):
        ao, ae = ao + o, ae + e
        if ae >= 5.0:
            obs.append(ao)
            exp.append(ae)
            ao, ae = 0.0, 0.0
    obs[-1] += ao
    exp[-1] += ae
    exp = np.asarray(exp) * sum(obs) / sum(exp)
    return float(stats.chisquare(obs, exp).pvalue)


def _sizes_p(sizes, n, q) -> float:
    k = np.arange(n + 1)
    observed = np.bincount(np.asarray(sizes), minlength=n + 1)
    return _pooled_chisquare(observed, stats.binom.pmf(k, n, q) * len(sizes))


# -- the draw and the sampler -----------------------------------------------------------------------------
@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize("n, b", [(103, 10), (60, 6), (7, 7), (5, 1)])
def test_every_record_is_in_exactly_one_batch_of_every_epoch(n, b, secure):
    t = steps_per_epoch(n, b)
    for epoch in _epochs(n, t, 4, seed=1, secure=secure):
        assert len(epoch) == t
        flat = sorted(i for batch in epoch for i in batch)
        assert flat == list(range(n))
        assert all(batch == sorted(batch) for batch in epoch)


def test_bin_draw_is_exactly_uniform_where_randint_would_be_biased():
    """t not a power of two: the counts of one large draw pass a uniform chi-square (torch and secure)."""
    for secure in (False, True):
        counts = torch.bincount(bins(_gen(5, secure), 300_000, 7), minlength=7).numpy()
        assert counts.sum() == 300_000
        assert stats.chisquare(counts).pvalue > P_MIN
    assert bins(_gen(0), 0, 3).numel() == 0
    assert bins(_gen(0), 4, 1).tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("n, b", [(50, 5), (53, 5)])
def test_batch_sizes_follow_binomial_n_one_over_t(n, b):
    t = steps_per_epoch(n, b)
    sizes = [len(batch) for epoch in _epochs(n, t, 400, seed=2) for batch in epoch]
    assert len(sizes) == 400 * t and sum(sizes) == 400 * n
    assert _sizes_p(sizes, n, 1.0 / t) > P_MIN
    assert _sizes_p(sizes, n, 1.0 / (t + 1)) < P_MIN          # the test tells a wrong rate
    assert np.var(sizes) > 0                                  # not fixed-size batches


def test_a_record_s_step_is_independent_across_epochs():
    n, t, epochs = 40, 4, 200
    s = BallsInBinsBatchSampler(n, t, _gen(3))
    steps = []
    for _ in range(epochs):
        where = np.empty(n, dtype=int)
        for j, batch in enumerate(s):
            where[batch] = j
        steps.append(where)
    steps = np.asarray(steps)
    table = np.zeros((t, t))
    np.add.at(table, (steps[:-1].ravel(), steps[1:].ravel()), 1)
    assert table.sum() == (epochs - 1) * n
    assert stats.chi2_contingency(table).pvalue > P_MIN
    # a sampler that kept each record's step from one epoch to the next would be caught
    stuck = np.zeros((t, t))
    np.add.at(stuck, (steps[:-1].ravel(), steps[:-1].ravel()), 1)
    assert stats.chi2_contingency(stuck).pvalue < P_MIN


def test_records_are_placed_independently_within_an_epoch():
    """Two fixed records share a step with probability 1/t (not 0, as shuffled batches of t would)."""
    t, epochs = 5, 4000
    a = bins(_gen(4), 2 * epochs, t).view(epochs, 2)
    together = int((a[:, 0] == a[:, 1]).sum())
    assert stats.binomtest(together, epochs, 1.0 / t).pvalue > P_MIN
    assert stats.binomtest(together, epochs, 1.2 / t).pvalue < P_MIN


def test_seeded_runs_reproduce_and_unseeded_runs_differ():
    n, t = 200, 9
    assert _epochs(n, t, 3, seed=7) == _epochs(n, t, 3, seed=7)
    assert _epochs(n, t, 3, seed=7, secure=True) == _epochs(n, t, 3, seed=7, secure=True)
    assert _epochs(n, t, 1, seed=7) != _epochs(n, t, 1, seed=8)
    fresh = [_epochs(n, t, 1, seed=None) for _ in range(3)] + [_epochs(n, t, 1, seed=None, secure=True)]
    assert all(fresh[i] != fresh[j] for i in range(4) for j in range(i))


def test_a_resumed_pass_draws_the_same_batches_and_skips_the_consumed_ones():
    s = BallsInBinsBatchSampler(40, 6, _gen(9))
    it = iter(s)
    first = [next(it) for _ in range(2)]
    pos = s.position(2)
    rest = list(it)
    again = BallsInBinsBatchSampler(40, 6, _gen(123))
    again.load_position(pos)
    assert list(again) == rest and len(first + rest) == 6


def test_bin_batches_and_the_probe_s_forced_record():
    a = torch.tensor([2, 0, 2, 1, 0, 2])
    assert [b.tolist() for b in bin_batches(a, 4)] == [[1, 4], [3], [0, 2, 5], []]
    batches = bin_batches(a, 4)
    assert Sampler().binned(batches, 2).tolist() == [0, 2, 5]
    assert ForcedRecord(0, 3, True).binned(batches, 3).tolist() == [3]
    assert ForcedRecord(0, 3, True).binned(batches, 0).tolist() == [1, 3, 4]
    assert ForcedRecord(0, 2, False).binned(batches, 2).tolist() == [0, 5]


def test_the_step_audit_s_size_test_accepts_balls_in_bins_batches():
    x = torch.randn(50, 3)
    loader = O.DPDataLoader(torch.utils.data.TensorDataset(x), batch_sampler=BallsInBinsBatchSampler(50, 10, _gen(1)))
    rep = sampler_test(loader, StepClaim(1.0, 1.0, sampling="balls-in-bins", sample_rate=0.1), batches=500)
    assert rep.passed and rep.claimed == "balls-in-bins" and len(rep.sizes) == 500 and rep.p_value > P_MIN


# -- the engine ---------------------------------------------------------------------------------------------
N, B, EPOCHS, Z = 60, 7, 2, 1.1
T = steps_per_epoch(N, B)


def _data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, 4, generator=g, dtype=torch.float64)
    return x, torch.sin(x.sum(1))


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(torch.float64)


def _engine_run(*, seed=3, secure=False, n=N, b=B, physical=None, epochs=EPOCHS, **kw):
    """``(engine, model, batch sizes seen, rows of every batch)`` of ``epochs`` passes of the private loader."""
    x, y = _data()
    x, y = x[:n], y[:n]
    net = _model()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=b)
    eng = O.PrivacyEngine(secure_mode=secure)
    opts = {"noise_multiplier": Z, "loss_reduction": "sum", **kw}
    m, opt, ld = eng.make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), data_loader=loader,
                                  max_grad_norm=1.0, epochs=epochs, sampling="balls-in-bins", seed=seed, **opts)
    sizes, rows = [], []
    for _ in range(epochs):
        chunks = BatchMemoryManager(data_loader=ld, max_physical_batch_size=physical, optimizer=opt) \
            if physical else ld
        for xb, yb in chunks:
            sizes.append(len(xb))
            rows.append(xb.clone())
            opt.zero_grad()
            nn.functional.mse_loss(m(xb), yb, reduction="sum").backward() if len(xb) else \
                (m(xb).sum() * 0.0).backward()
            opt.step()
    return eng, net, sizes, rows


def test_engine_get_epsilon_is_the_mechanism_s():
    eng, net, sizes, _ = _engine_run()
    mech = M.DPSGD(sampling="balls-in-bins", n=N, batch_size=B, epochs=EPOCHS)
    assert len(sizes) == EPOCHS * T == mech.total_steps and sum(sizes) == EPOCHS * N
    assert eng.get_epsilon(1e-5) == mech.epsilon(1e-5, Z).epsilon
    assert eng.epsilon_bracket(1e-5).upper == mech.epsilon_bracket(1e-5, Z).upper
    assert len(eng.ledger.accountant().events) == 1            # one balls-in-bins event, composed per epoch


def test_engine_equals_the_reference_dp_sgd_with_the_same_seed():
    x, y = _data()
    net, ref_net = _model(), _model()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=B)
    eng = O.PrivacyEngine()
    m, opt, ld = eng.make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), data_loader=loader,
                                  noise_multiplier=Z, max_grad_norm=1.0, epochs=EPOCHS, sampling="balls-in-bins",
                                  seed=3)
    assert isinstance(ld.batch_sampler, BallsInBinsBatchSampler) and len(ld) == T
    assert opt.expected_batch_size == N / T
    for _ in range(EPOCHS):
        for xb, yb in ld:
            opt.zero_grad()
            nn.functional.mse_loss(m(xb), yb).backward()
            opt.step()
    mech = M.DPSGD(sampling="balls-in-bins", n=N, batch_size=B, epochs=EPOCHS)
    ref = O.DPSGD(ref_net, O.squared_loss, (x, y), mech, {"noise_multiplier": Z}, C=1.0, lr=0.1, seed=3)
    ref.run(progress=False)
    for a, b in zip(net.parameters(), ref_net.parameters()):
        assert torch.allclose(a, b, rtol=0, atol=1e-12)


def test_make_private_with_epsilon_calibrates_the_balls_in_bins_mechanism():
    x, y = _data()
    net = _model()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=B)
    eng = O.PrivacyEngine()
    m, opt, ld = eng.make_private_with_epsilon(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                                               data_loader=loader, target_epsilon=4.0, target_delta=1e-5,
                                               epochs=EPOCHS, max_grad_norm=1.0, sampling="balls-in-bins", seed=0)
    mech = M.DPSGD(sampling="balls-in-bins", n=N, batch_size=B, epochs=EPOCHS)
    z = mech.calibrate(4.0, 1e-5).noise["noise_multiplier"]
    assert opt.kernel.levels["noise_multiplier"] == z
    assert eng.budget["mechanism"] == mech
    for _ in range(EPOCHS):
        for xb, yb in ld:
            opt.zero_grad()
            m(xb).sum().backward()
            opt.step()
    assert eng.get_epsilon(1e-5) == mech.epsilon(1e-5, z).epsilon <= 4.0


def test_a_seeded_engine_run_reproduces_bit_for_bit_and_unseeded_runs_differ():
    _, a, sa, ra = _engine_run(seed=11)
    _, b, sb, rb = _engine_run(seed=11)
    assert sa == sb and all(torch.equal(u, v) for u, v in zip(ra, rb))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    _, c, sc, rc = _engine_run(seed=None)
    _, d, sd, rd = _engine_run(seed=None)
    assert sc != sd or not all(torch.equal(u, v) for u, v in zip(rc, rd))
    assert not all(torch.equal(p, q) for p, q in zip(c.parameters(), d.parameters()))


def test_secure_mode_runs_balls_in_bins_epochs():
    eng, net, sizes, rows = _engine_run(secure=True, seed=None)
    mech = M.DPSGD(sampling="balls-in-bins", n=N, batch_size=B, epochs=EPOCHS)
    assert len(sizes) == EPOCHS * T and sum(sizes[:T]) == N == sum(sizes[T:])
    firsts = torch.cat(rows[:T])
    assert torch.equal(torch.sort(firsts[:, 0]).values, torch.sort(_data()[0][:, 0]).values)
    assert all(torch.isfinite(p).all() for p in net.parameters())
    assert eng.get_epsilon(1e-5) == mech.epsilon(1e-5, Z).epsilon


def test_empty_batches_are_zero_row_tensors_and_steps_like_any_other():
    """n = 6, b = 1: six steps an epoch, each batch Binomial(6, 1/6) -- a third of them empty."""
    eng, net, sizes, rows = _engine_run(n=6, b=1, epochs=3, seed=0)
    assert len(sizes) == 18 and sizes.count(0) > 0 and sum(sizes) == 18
    assert all(r.shape[1:] == (4,) for r in rows)
    assert all(torch.isfinite(p).all() for p in net.parameters())
    assert eng.ledger.steps == 18
    assert eng.get_epsilon(1e-5) == M.DPSGD(sampling="balls-in-bins", n=6, batch_size=1, epochs=3).epsilon(
        1e-5, Z).epsilon


def test_batch_memory_manager_caps_physical_batches_and_keeps_the_logical_steps():
    eng, net, sizes, _ = _engine_run(physical=3, seed=5)
    _, plain, logical, _ = _engine_run(seed=5)
    assert max(sizes) <= 3 and sum(sizes) == EPOCHS * N and max(logical) > 3
    assert eng.ledger.steps == EPOCHS * T
    for a, b in zip(net.parameters(), plain.parameters()):
        assert torch.allclose(a, b, rtol=0, atol=1e-12)


def test_restarting_the_loader_mid_epoch_charges_a_new_epoch():
    x, y = _data()
    net = _model()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=B)
    eng = O.PrivacyEngine()
    m, opt, ld = eng.make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), data_loader=loader,
                                  noise_multiplier=Z, max_grad_norm=1.0, epochs=3, sampling="balls-in-bins", seed=0)
    for _ in range(3):                  # three passes of two steps: three epochs begun, three new assignments
        for j, (xb, yb) in enumerate(ld):
            opt.zero_grad()
            m(xb).sum().backward()
            opt.step()
            if j == 1:
                break
    assert eng.get_epsilon(1e-5) == M.DPSGD(sampling="balls-in-bins", n=N, batch_size=B, epochs=3).epsilon(
        1e-5, Z).epsilon


@pytest.mark.parametrize("kw, needle", [
    ({"algorithm": "dicesgd", "noise": {"sigma1": 0.1}, "C2": 0.1}, "sampling='balls-in-bins' is not allowed"),
    ({"steps": 5}, "steps=5 is not allowed with sampling='balls-in-bins'"),
    ({"poisson_sampling": False}, "poisson_sampling=False is not allowed with sampling='balls-in-bins'"),
    ({"batch_size": 61}, "batch_size=61 is not allowed"),
    ({"sampling": "random-allocation"}, "sampling='random-allocation' is not allowed"),
])
def test_bad_engine_inputs_are_refused_in_one_line(kw, needle):
    x, y = _data()
    net = _model()
    b = kw.pop("batch_size", B)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=b)
    opts = {"noise_multiplier": Z, "sampling": "balls-in-bins", "max_grad_norm": 1.0, "seed": 0, **kw}
    if "noise" in kw:
        opts.pop("noise_multiplier")
    if "steps" not in kw:
        opts["epochs"] = 1
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace("[", r"\[")) as exc:
        O.PrivacyEngine().make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                                       data_loader=loader, **opts)
    assert "\n" not in str(exc.value)


def test_bad_sampler_and_draw_inputs_are_refused():
    with pytest.raises(InputError, match=r"t=7 is not allowed: expected an integer in \[1, n=5\]"):
        BallsInBinsBatchSampler(5, 7, _gen(0))
    with pytest.raises(InputError, match="t=0 are not allowed"):
        bins(_gen(0), 5, 0)


# -- dpcalib train ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_train_with_balls_in_bins_spends_what_dpcalib_epsilon_prints(capsys):
    from dpcalib.cli import main

    n = O.data.prepare(*O.data.synthetic("california", seed=0), seed=0).train[0].shape[0]
    rc = main(["train", "dp-sgd", "--epsilon", "3", "--delta", "1e-5", "--sampling", "balls-in-bins", "--epochs", "1",
               "--batch-size", "4000", "--world-size", "1", "--seed", "0", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(res["metrics"]) == steps_per_epoch(n, 4000) == 5
    z = res["noise"]["noise_multiplier"]
    rc = main(["epsilon", "dp-sgd", "--delta", "1e-5", "--sampling", "balls-in-bins", "--n", str(n), "--batch-size",
               "4000", "--epochs", "1", "--noise-multiplier", repr(z), "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["epsilon_spent"] == printed["epsilon"] <= 3.0
    assert math.isfinite(res["metrics"][-1]["loss"])


@pytest.mark.parametrize("extra, needle", [
    (["dp-sgd", "--sampling", "balls-in-bins", "--batch-size", "64"], "--sampling balls-in-bins takes --epochs E"),
    (["dp-sgd", "--sampling", "balls-in-bins", "--batch-size", "64", "--epochs", "1", "--rounds", "3"],
     "--sampling balls-in-bins takes --epochs E and not --rounds"),
    (["dp-srm", "--sampling", "balls-in-bins", "--batch-size", "64", "--rounds", "3"],
     "--sampling balls-in-bins is not allowed for dp-srm"),
    (["dicesgd", "--sampling", "balls-in-bins", "--batch-size", "64", "--rounds", "3"],
     "--sampling balls-in-bins is not allowed for dicesgd"),
    (["dp-sgd", "--sampling", "balls-in-bins", "--batch-size", "64", "--epochs", "0"], "--epochs=0 is not allowed"),
    (["dp-sgd", "--sampling", "random-allocation", "--batch-size", "64", "--epochs", "1"], "invalid choice"),
])
def test_train_refuses_bad_balls_in_bins_options_with_exit_2(capsys, extra, needle):
    from dpcalib.cli import main

    rc = main(["train", *extra[:1], "--epsilon", "3", "--delta", "1e-5", "--world-size", "1", *extra[1:]])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and needle in err and len(err.splitlines()) == 1


# -- the reference DP-SGD -------------------------------------------------------------------------------------
def test_reference_dp_sgd_resumed_mid_epoch_is_the_same_run_bit_for_bit(tmp_path):
    x, y = _data()
    mech = M.DPSGD(sampling="balls-in-bins", n=N, batch_size=B, epochs=EPOCHS)

    def make():
        return O.DPSGD(_model(), O.squared_loss, (x, y), mech, {"noise_multiplier": Z}, C=1.0, lr=0.1, seed=3)

    whole = make()
    whole.run(progress=False)
    part = make()
    part.run(4, progress=False)                  # mid-epoch: the assignment travels in the checkpoint
    part.save_checkpoint(tmp_path / "ck.pt")
    resumed = make()
    resumed.load_checkpoint(tmp_path / "ck.pt")
    resumed.run(progress=False)
    assert all(torch.equal(a, b) for a, b in zip(whole.model.parameters(), resumed.model.parameters()))
    assert whole.epsilon_spent(1e-5) == resumed.epsilon_spent(1e-5) == mech.epsilon(1e-5, Z).epsilon
    assert whole.B == N / T == mech.expected_batch_size
