"""Batched audit runs (optim/audit/batched.py) against the sequential leader/twin pairs of the real
optimizers (the oracle), and the reduced version of the 10^5-run full-batch audit."""

import math

import numpy as np
import pytest
import torch
from torch import nn

import dpcalib.mechanisms as M
from dpcalib.mechanisms.registry import names
import dpcalib.optim as O
from dpcalib.optim import audit as A
from dpcalib.optim.audit import batched as B

CANARIES = (A.alternating(3, 1e6), A.alternating(3, 1e6, sign=-1.0))


def _builder(name, dtype=torch.float64, noise=None, init_from_seed=False, lr=0.1):
    g = torch.Generator().manual_seed(0)
    shards = [(torch.randn(5, 2, generator=g, dtype=dtype), torch.randn(5, generator=g, dtype=dtype))
              for _ in range(2)]
    mech = M.DPGD(4, 2, 5) if name == "dp-gd" else M.DIFF2GD(5, 2, 2, 5)
    rep = mech.calibrate(2.0, 1e-5, method="tight") if noise is None else noise

    def build(seed):
        torch.manual_seed(seed if init_from_seed else 0)
        model = nn.Sequential(nn.Linear(2, 1)).to(dtype)
        if name == "dp-gd":
            return O.DPGD(model, O.squared_loss, shards, mech, rep, C1=1.0, lr=lr, seed=seed)
        return O.DIFF2GD(model, O.squared_loss, shards, mech, rep, C1=1.0, C2=1.0, lr=lr, seed=seed)
    return build, rep


@pytest.mark.parametrize("name", names(batched=True))
def test_batched_and_sequential_statistics_are_the_same_per_run(name):
    build, _ = _builder(name)
    seq = A.llr_samples(build, *CANARIES, runs=24, seed=7, batch=None, progress=False)
    bat = A.llr_samples(build, *CANARIES, runs=24, seed=7, batch=10, progress=False)   # 5 batches, last partial
    for a, b in zip(seq, bat):
        a, b = np.array(a), np.array(b)
        assert a.shape == b.shape == (24,)
        assert np.all(np.abs(a - b) <= 1e-12 * (1.0 + np.abs(a))), np.max(np.abs(a - b))
    # not degenerate: finite, and spread like N(+-mu^2/2, mu^2) with the claimed mu = 0.50
    for a in seq:
        assert np.all(np.isfinite(a)) and 0.25 < np.std(a) < 1.0


@pytest.mark.parametrize("name", names(batched=True))
def test_batched_statistics_in_float32_follow_the_float32_optimizer(name):
    build, _ = _builder(name, dtype=torch.float32)
    seq = A.llr_samples(build, *CANARIES, runs=12, batch=None, progress=False, seed=0)
    bat = A.llr_samples(build, *CANARIES, runs=12, batch=32, progress=False, seed=0)
    for a, b in zip(seq, bat):
        assert np.max(np.abs(np.array(a) - np.array(b))) <= 1e-4


def test_zero_noise_point_masses_are_the_same_in_both_paths():
    build, _ = _builder("diff2-gd", noise={"sigma1": 0.0, "sigma2": 0.0})
    seq = A.llr_samples(build, *CANARIES, runs=3, batch=None, progress=False, seed=0)
    bat = A.llr_samples(build, *CANARIES, runs=3, batch=4, progress=False, seed=0)
    assert seq == bat
    assert seq[0] == [math.inf] * 3 and seq[1] == [-math.inf] * 3


def test_a_batched_audit_refuses_an_optimizer_it_does_not_model(monkeypatch):
    build, _ = _builder("dp-gd")
    # planted bug: the sequential optimizer no longer clips the canary's gradient
    from dpcalib.optim.audit.canaries import GradientCanary
    monkeypatch.setattr(GradientCanary, "_clip", lambda self, g, c, stabilizer=None: g)
    with pytest.raises(RuntimeError, match="disagrees with the optimizer itself on seed 0"):
        A.llr_samples(build, *CANARIES, runs=3, batch=8, progress=False, seed=0)


def test_batched_audit_input_errors():
    build, _ = _builder("dp-gd", init_from_seed=True)
    with pytest.raises(ValueError, match="initial parameters depend on the seed"):
        A.llr_samples(build, *CANARIES, runs=3, batch=8, progress=False, seed=0)
    build, _ = _builder("dp-gd")
    with pytest.raises(ValueError, match="batch=0"):
        A.llr_samples(build, *CANARIES, runs=3, batch=0, progress=False, seed=0)
    g = torch.Generator().manual_seed(0)
    data = (torch.randn(20, 2, generator=g), torch.randn(20, generator=g))
    mech = M.DPSGD(0.5, 3)
    sgd = lambda s: O.DPSGD(nn.Sequential(nn.Linear(2, 1)), O.squared_loss, data, mech,  # noqa: E731
                            mech.calibrate(2.0, 1e-5), C=1.0, lr=0.1, seed=s)
    with pytest.raises(ValueError, match=r"dp-sgd\) is not allowed in a batched audit"):
        A.llr_samples(sgd, A.constant(3, 1.0), A.zero(3), runs=2, batch=4, progress=False, seed=0)
    assert not B.supports_batching(sgd(0))


@pytest.mark.parametrize("name", names(batched=True))
def test_reduced_large_audit_is_consistent_and_near_the_claim(name):
    # benchmarks/audit_full_batch.py runs 10^5 runs per dataset (GDP bound >= 0.95 x claimed, benchmarks/results/audit_results.md)
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from audit_full_batch import builder

    build, rep = builder(name)
    r = A.audit(build, *CANARIES, runs=20_000, claimed_epsilon=rep.epsilon, delta=1e-5, progress=False, seed=0)
    assert r.verdict == "consistent"
    assert r.epsilon_lo_gdp <= 2.0 and r.epsilon_lo_direct <= 2.0
    assert r.epsilon_lo_gdp >= 0.88 * 2.0
