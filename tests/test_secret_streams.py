"""The noise and the batches are secret: a run with no seed draws them from fresh operating-system
entropy (never a constant, a process id or the clock), a seeded run reproduces bit for bit, and
nothing a run prints or logs holds a seed or a generator state."""

import json
import os
import time

import pytest
import torch

import dpcalib.optim as O
from dpcalib.optim import randomness as R
from tests.builders import build, mlp

#: one configuration of each reference optimizer family
FAMILIES = ["dp-sgd", "dp-gd", "diff2-gd", "diff2-bvr", "dp-srm", "dicesgd", "clipd2p", "clipd2p-poisson"]


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _run(name, seed, secure=False, rounds=4):
    """A few rounds of ``name`` with the given seed (None: the default); ``(iterate, releases)``."""
    opt, _ = build(name, mlp(), seed=seed, rounds=rounds, secure_mode=secure)
    for _ in range(rounds):
        opt.step()
    return _flat(opt.model), opt.privatizer.releases


@pytest.mark.parametrize("name", FAMILIES)
def test_two_runs_without_a_seed_differ_in_their_batches_and_their_noise(name):
    (xa, ra), (xb, rb) = _run(name, None), _run(name, None)
    assert not torch.equal(xa, xb)
    noisy = [(a, b) for a, b in zip(ra, rb) if a.std > 0]
    assert noisy and all(not torch.equal(a.noise, b.noise) for a, b in noisy)


@pytest.mark.parametrize("name", FAMILIES)
def test_two_runs_with_one_seed_are_bit_identical(name):
    (xa, ra), (xb, rb) = _run(name, 11), _run(name, 11)
    assert torch.equal(xa, xb)
    assert all(torch.equal(a.noise, b.noise) for a, b in zip(ra, rb))


@pytest.mark.parametrize("name", ["dp-sgd", "dp-gd", "diff2-bvr", "dp-srm", "dicesgd", "clipd2p"])
def test_secure_runs_differ_without_a_seed_and_reproduce_with_one(name):
    (xa, _), (xb, _) = _run(name, None, secure=True), _run(name, None, secure=True)
    assert not torch.equal(xa, xb)
    (xc, rc), (xd, rd) = _run(name, 5, secure=True), _run(name, 5, secure=True)
    assert torch.equal(xc, xd) and all(torch.equal(a.noise, b.noise) for a, b in zip(rc, rd))
    (xe, _) = _run(name, 5)                            # the same seed without secure_mode: other streams
    assert not torch.equal(xc, xe)


def test_sampled_records_differ_between_unseeded_runs():
    """The batches themselves (not only the noise): a Poisson sample of 1000 records at q = 0.1."""
    opt_a, _ = build("dp-sgd", mlp(), seed=None)
    opt_b, _ = build("dp-sgd", mlp(), seed=None)
    sa = opt_a.sampler.poisson(1000, 0.1, opt_a.data_generator)
    sb = opt_b.sampler.poisson(1000, 0.1, opt_b.data_generator)
    assert not torch.equal(sa, sb)


def test_the_default_does_not_depend_on_the_clock_or_the_process_id(monkeypatch):
    """Frozen clock and process id: two unseeded runs still differ (their root is OS entropy)."""
    monkeypatch.setattr(time, "time", lambda: 1.0)
    monkeypatch.setattr(time, "time_ns", lambda: 1)
    monkeypatch.setattr(time, "perf_counter", lambda: 1.0)
    monkeypatch.setattr(os, "getpid", lambda: 1)
    torch.manual_seed(0)
    (xa, _) = _run("dp-sgd", None)
    torch.manual_seed(0)
    (xb, _) = _run("dp-sgd", None)
    assert not torch.equal(xa, xb)


def test_the_root_comes_from_the_operating_systems_entropy(monkeypatch):
    """RunStreams without a seed asks secrets for 32 bytes; the same bytes give the same streams."""
    calls = []

    def fixed(n):
        calls.append(n)
        return bytes(range(n))

    monkeypatch.setattr(R.streams.secrets, "token_bytes", fixed)
    a = R.RunStreams(None).run("cpu")
    b = R.RunStreams(None).run("cpu")
    assert calls == [32, 32]
    assert all(torch.equal(x.get_state(), y.get_state()) for x, y in zip(a, b))
    # and a seeded run never asks
    R.RunStreams(3).run("cpu")
    assert calls == [32, 32]


def test_a_seeded_run_draws_the_streams_dpcalib_always_drew_for_that_seed():
    """seed=s: SeedSequence(s).spawn(3) -> (data, noise, output) torch.Generators (the saved
    trajectories of tests/data rest on it; this pins the derivation itself)."""
    import numpy as np

    data, noise, out = R.RunStreams(7).run("cpu")
    seeds = [int(s.generate_state(1, dtype=np.uint64)[0] % 2 ** 63) for s in np.random.SeedSequence(7).spawn(3)]
    for g, s in zip((data, noise, out), seeds):
        assert torch.equal(g.get_state(), torch.Generator().manual_seed(s).get_state())


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_a_bad_seed_is_one_line(bad):
    with pytest.raises(ValueError, match=r"^seed=.* is not allowed: expected None"):
        build("dp-sgd", mlp(), seed=bad)


# -- the engine ------------------------------------------------------------------------------------
def _engine_run(seed=None, secure_mode=False, steps=4):
    from tests import engine_setup as S

    x, y = S.data()
    net = S.model()
    engine = O.PrivacyEngine(secure_mode=secure_mode)
    _, m, opt, crit, loader = S.private("dp-sgd", net, x, y, engine=engine, seed=seed)
    seen = []
    it = iter(loader)
    for _ in range(steps):
        xb, yb = next(it)
        seen.append(yb.reshape(-1).clone())
        opt.zero_grad()
        crit(m(xb), yb).backward()
        opt.step()
    return S.flat(net), seen


@pytest.mark.parametrize("secure", [False, True])
def test_the_engine_without_a_seed_draws_other_batches_and_other_noise_each_run(secure):
    (xa, ba), (xb, bb) = _engine_run(secure_mode=secure), _engine_run(secure_mode=secure)
    assert not torch.equal(xa, xb)
    assert any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(ba, bb))


@pytest.mark.parametrize("secure", [False, True])
def test_the_engine_with_a_seed_is_bit_identical(secure):
    (xa, ba), (xb, bb) = _engine_run(seed=4, secure_mode=secure), _engine_run(seed=4, secure_mode=secure)
    assert torch.equal(xa, xb) and all(torch.equal(a, b) for a, b in zip(ba, bb))


def test_the_engine_takes_the_users_noise_generator():
    """Opacus's noise_generator=: the noise comes from it (the user owns that secret)."""
    from tests import engine_setup as S

    outs = []
    for _ in range(2):
        x, y = S.data()
        net = S.model()
        g = torch.Generator().manual_seed(123)
        _, m, opt, crit, loader = S.private("dp-sgd", net, x, y, seed=9, noise_generator=g)
        S.loop(m, opt, crit, loader, epochs=1)
        outs.append(S.flat(net))
    assert torch.equal(outs[0], outs[1])
    with pytest.raises(ValueError, match="noise_generator is not allowed with secure_mode=True"):
        x, y = S.data()
        S.private("dp-sgd", S.model(), x, y, engine=O.PrivacyEngine(secure_mode=True),
                  noise_generator=torch.Generator())


# -- what a run records ----------------------------------------------------------------------------
def test_nothing_a_run_logs_holds_a_seed_or_a_generator_state():
    opt, _ = build("dp-sgd", mlp(), seed=12345)
    opt.run(progress=False, log_every=2)
    for row in opt.metrics:
        assert set(row) <= {"round", "loss", "grad_norm", "epsilon"}, row
    text = json.dumps(opt.metrics) + opt.accountant().report(1e-5).text()
    assert "12345" not in text and "seed" not in text


@pytest.mark.parametrize("secure", [False, True])
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, secure):
    """The checkpoint holds the generators' states (a secret): resume reproduces the draws bit for bit."""
    def make():
        return build("dp-sgd", mlp(), seed=8, rounds=6, secure_mode=secure)[0]

    whole = make()
    whole.run(progress=False)
    part = make()
    part.run(3, progress=False)
    part.save_checkpoint(tmp_path / "ck.pt")
    resumed = make()
    resumed.load_checkpoint(tmp_path / "ck.pt")
    resumed.run(progress=False)
    assert torch.equal(_flat(whole.model), _flat(resumed.model))


def test_a_checkpoint_of_another_mode_is_refused(tmp_path):
    plain, _ = build("dp-sgd", mlp(), seed=8, rounds=6)
    plain.run(2, progress=False)
    plain.save_checkpoint(tmp_path / "ck.pt")
    secure, _ = build("dp-sgd", mlp(), seed=8, rounds=6, secure_mode=True)
    with pytest.raises(ValueError, match="secure_mode"):
        secure.load_checkpoint(tmp_path / "ck.pt")


# -- dpcalib train: two processes, outputs compared -----------------------------------------------------
def _train(capsys, *extra):
    from dpcalib.cli import main

    rc = main(["train", "dp-sgd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "3", "--batch-size", "64",
               "--world-size", "1", "--log-every", "3", "--json", *extra])
    out = capsys.readouterr().out
    assert rc == 0
    return out, json.loads(out)


def test_dpcalib_train_without_a_seed_differs_between_two_runs_and_prints_no_seed(capsys):
    """Two runs of the command (each its own worker process), then one in secure mode; a seeded run
    reproducing the simulation is tests/test_distributed.py's."""
    out_a, a = _train(capsys)
    out_b, b = _train(capsys)
    out_s, s = _train(capsys, "--secure-mode")
    losses = {a["metrics"][-1]["loss"], b["metrics"][-1]["loss"], s["metrics"][-1]["loss"]}
    assert len(losses) == 3
    assert a["epsilon_spent"] == b["epsilon_spent"] == s["epsilon_spent"] <= 3.0
    assert not any("seed" in out for out in (out_a, out_b, out_s))


# -- the Poisson sampler's rate is never above q -----------------------------------------------------------
@pytest.mark.parametrize("q", [1e-7, 3e-5, 2.0 ** -10, 0.1, 1 / 3, 0.999])
def test_a_poisson_sample_is_never_taken_at_a_rate_above_q(q):
    """A float32 uniform u < q keeps a record with probability ceil(q 2^24) / 2^24 > q (19 % above at
    q = 1e-7): the threshold is put on the uniform's grid, below q.  Checked through the threshold
    the draw really compares with (the uniform grid is 2^-24 or 2^-53)."""
    import math

    g = torch.Generator().manual_seed(0)
    keep = R.poisson_mask(g, 200_000, q)
    rate = float(keep.double().mean())
    # the exact keep probability of the rule, from the grid it uses
    k = 24 if q >= 2.0 ** -10 else 53
    p = math.floor(math.ldexp(q, k)) / 2.0 ** k
    assert p <= q
    sd = math.sqrt(max(p * (1 - p), 1e-12) / 200_000)
    assert abs(rate - p) <= 6 * sd + 1e-9
    s = R.SecureGenerator.from_seed(1)
    assert float(R.poisson_mask(s, 200_000, q).double().mean()) <= q + 6 * sd + 1e-9


def test_a_known_seed_is_said_to_give_the_run_away():
    """The docstrings of seed= say what a known seed gives away."""
    for obj in (O.PrivateOptimizer, O.PrivacyEngine.make_private):
        doc = " ".join((obj.__doc__ or "").split())
        assert "seed" in doc and ("regenerate" in doc or "known" in doc), obj
