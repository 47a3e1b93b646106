"""The one-run audit (Steinke, Nasr & Jagielski 2023): its p-value against independent computations,
and DP-SGD with a small MLP and 1 000 canaries at eps 2 and 8 (consistent) and with 0.3 x the noise
(violation)."""

import mpmath
import pytest
import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O
import dpcalib.optim.algorithms.core as core
from dpcalib.optim import audit as A


def _naive_p_value(m, r, v, eps, delta):
    """Their bound written out term by term with mpmath (exact binomial sums)."""
    p = mpmath.mpf(1) / (1 + mpmath.e ** (-mpmath.mpf(eps)))
    pmf = lambda j: mpmath.binomial(r, j) * p ** j * (1 - p) ** (r - j)  # noqa: E731
    beta = mpmath.fsum(pmf(j) for j in range(v, r + 1))
    alpha = max([mpmath.fsum(pmf(j) for j in range(v - i, v)) / i for i in range(1, v + 1)] or [0])
    return float(min(1, beta + 2 * m * delta * alpha))


@pytest.mark.parametrize("m, r, v, eps, delta", [(1000, 100, 80, 1.0, 0.0), (1000, 200, 150, 0.7, 1e-5),
                                                 (50, 20, 20, 3.0, 1e-3), (1000, 400, 250, 0.2, 1e-5)])
def test_p_value_matches_the_bound_computed_term_by_term(m, r, v, eps, delta):
    assert A.one_run_p_value(m, r, v, eps, delta) == pytest.approx(_naive_p_value(m, r, v, eps, delta), rel=1e-9)


def test_epsilon_lower_bound_is_the_boundary_of_the_p_value():
    m, r, v, delta = 1000, 200, 170, 1e-5
    eps = A.one_run_epsilon(m, r, v, delta)
    assert _naive_p_value(m, r, v, eps, delta) < 0.05 <= _naive_p_value(m, r, v, eps + 1e-5, delta)
    assert A.one_run_epsilon(m, r, r // 2, delta) == 0.0          # chance-level guesses refute nothing
    with pytest.raises(ValueError, match="0 <= v <= r <= m"):
        A.one_run_p_value(10, 20, 5, 1.0, 0.0)


def _dpsgd(eps):
    """DP-SGD (q = 0.01, 1 000 steps), an MLP 32 -> 32 -> 1 (1 089 parameters), 100 records."""
    mech = M.DPSGD(0.01, 1000)
    rep = mech.calibrate(eps, 1e-5)
    return A.one_run_harness("dp-sgd", mech, rep, 1000)


@pytest.mark.parametrize("eps", [2.0, 8.0])
def test_one_run_audit_of_dp_sgd_is_consistent(eps):
    r = A.one_run_audit(_dpsgd(eps), canaries=1000, claimed_epsilon=eps, delta=1e-5, progress=False, seed=0)
    assert r.canaries == 1000 and 400 < r.included < 600
    assert r.verdict == "consistent" and 0.0 <= r.epsilon_lo <= eps
    assert len(r.guesses) == 3 and all(0 <= g[2] <= g[1] for g in r.guesses)


def test_one_run_audit_catches_0_3_x_the_noise(monkeypatch):
    class Scaled(core.NoiseSource):
        def standard(self, shape, generator=None):
            return 0.3 * super().standard(shape, generator)

    monkeypatch.setattr(core, "NoiseSource", Scaled)
    build = _dpsgd(2.0)
    assert isinstance(build(0).privatizer, Scaled)
    r = A.one_run_audit(build, canaries=1000, claimed_epsilon=2.0, delta=1e-5, progress=False, seed=0)
    assert r.verdict == "violation" and r.epsilon_lo > 2.0


def test_one_run_audit_input_errors():
    build = _dpsgd(2.0)
    with pytest.raises(ValueError, match="canaries=5000"):
        A.one_run_audit(build, canaries=5000, claimed_epsilon=2.0, delta=1e-5, seed=0)
    for bad in (2.7, 100.0, True):         # 2.7 was once truncated to 2 without a word
        with pytest.raises(ValueError,
                           match=rf"canaries={bad!r} is not allowed: expected an integer") as e:
            A.one_run_audit(build, canaries=bad, claimed_epsilon=2.0, delta=1e-5, seed=0)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="ks="):
        A.one_run_audit(build, canaries=100, claimed_epsilon=2.0, delta=1e-5, ks=[80], seed=0)
    g = torch.Generator().manual_seed(0)
    shards = [(torch.randn(5, 2, generator=g), torch.randn(5, generator=g))]
    gd = lambda s: O.DPGD(nn.Sequential(nn.Linear(2, 1)), O.squared_loss, shards, M.DPGD(2, 1, 5),  # noqa: E731
                          {"sigma1": 1.0}, C1=1.0, lr=0.1, seed=s)
    with pytest.raises(ValueError, match=r"dp-gd\) is not allowed for a one-run audit"):
        A.one_run_audit(gd, canaries=2, claimed_epsilon=2.0, delta=1e-5, seed=0)
    assert A.one_run_p_value(10, 4, 2, 0.5, 0.0) == pytest.approx(_naive_p_value(10, 4, 2, 0.5, 0.0), rel=1e-12)


def test_cli_one_run_audit(capsys):
    from dpcalib.cli import main

    rc = main(["audit", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", "--sampling-rate", "0.05", "--steps", "50",
               "--one-run", "--canaries", "200", "--seed", "0", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "one-run audit" in out and "verdict     consistent" in out
    assert main(["audit", "dp-gd", "--epsilon", "2", "--delta", "1e-5", "--rounds", "2", "--clients", "2",
                 "--n-min", "3", "--one-run"]) == 2
    assert "--one-run is not allowed for dp-gd" in capsys.readouterr().err
    base = ["audit", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", "--sampling-rate", "0.05", "--steps", "5",
            "--one-run"]
    assert main(base + ["--plot", "x.png"]) == 2 and "--plot is not allowed with --one-run" in capsys.readouterr().err
    assert main(base + ["--canaries", "20000"]) == 2
    err = capsys.readouterr().err
    assert "canaries=20000" in err and "1 GiB" in err and err.count("\n") == 1
