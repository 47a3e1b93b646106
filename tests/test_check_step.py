"""Checks of anyone's private step (dpcalib.optim.audit.steps): a gallery of broken DP-SGD steps,
each a few lines of plain PyTorch, is flagged by the check that should see it, and the honest steps
-- plain DP-SGD in PyTorch, Opacus's DPOptimizer, dpcalib's engine -- pass; float32 and float64."""

import math
import warnings

import pytest
import torch
from torch import nn

import dpcalib.optim as O
from dpcalib.accountant.validation import InputError
from dpcalib.optim.audit.contract import EngineStep, FunctionStep, OpacusStep, StepClaim
from dpcalib.optim.audit.steps import audit_step, check_step, noise_test_step, probe_step, sampler_test

C, Z, N = 0.1, 3.0, 12


def _model(dtype):
    torch.manual_seed(0)
    return nn.Linear(3, 2).to(dtype)


def _batch(dtype, n=N):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    return x.to(dtype), (0.3 * x[:, :2] + 0.05 * torch.randn(n, 2, generator=g, dtype=torch.float64)).to(dtype)


def dp_sgd_step(model, *, noise_scale=1.0, clip="per-record", skip_bias=False, squared=False, fixed_noise=False):
    """DP-SGD's release (the noisy sum of clipped per-record gradients) written by hand, and its bugs."""
    params = list(model.parameters())
    frozen = torch.randn(sum(p.numel() for p in params), generator=torch.Generator().manual_seed(9),
                         dtype=params[0].dtype)

    def step(batch, noise, generator):
        x, y = batch
        rows = []
        for i in range(x.shape[0]):
            loss = ((model(x[i:i + 1]) - y[i:i + 1]) ** 2).sum()
            rows.append(torch.autograd.grad(loss, params))
        if not rows:
            total = torch.zeros_like(frozen)
        elif clip == "batch":                     # BUG: the batch's sum clipped, not each record's gradient
            s = torch.cat([sum(r[k] for r in rows).reshape(-1) for k in range(len(params))])
            total = s * min(1.0, C / max(float(s.norm()), 1e-300))
        else:
            total = 0.0
            for w, b in rows:
                norm = float(w.norm()) if skip_bias else float(torch.cat([w.reshape(-1), b]).norm())
                f = min(1.0, C / (norm * norm if squared else norm)) if norm > 0 else 0.0   # BUG if squared
                total = total + torch.cat([(f * w).reshape(-1), b if skip_bias else f * b])  # BUG if skip_bias
        if noise:
            n = frozen if fixed_noise else torch.randn(frozen.shape, generator=generator, dtype=frozen.dtype)
            total = total + noise_scale * Z * C * n        # BUG if noise_scale != 1 or fixed_noise
        return total.detach()
    return step


CLAIM = StepClaim(C, Z * C, "add/remove", "poisson", 4 / N)
BROKEN = {
    "noise std x 0.5": (dict(noise_scale=0.5), "noise"),
    "batch clipped, not per record": (dict(clip="batch"), "probe"),
    "bias left unclipped": (dict(skip_bias=True), "probe"),
    "clip applied to the squared norm": (dict(squared=True), "probe"),
    "noise drawn once and reused": (dict(fixed_noise=True), "noise"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(BROKEN))
def test_each_broken_step_is_flagged_by_its_check(name, dtype):
    kw, check = BROKEN[name]
    step = FunctionStep(dp_sgd_step(_model(dtype), **kw), CLAIM)
    batch = _batch(dtype)
    rep = check_step(step, batch, delta=1e-5, records=(0, 5), draws=20, seed=1)
    assert not rep.passed
    assert any(f.startswith(check) for f in rep.flagged), rep.flagged
    if check == "probe":
        assert rep.probe.worst_ratio > 1.0 + 1e-3
    if name == "noise std x 0.5":
        assert rep.noise_std.ratio_interval[1] < 0.6
        if dtype == torch.float64:      # the audit sees it too: more separation than the claimed noise allows
            a = audit_step(step, batch, delta=1e-5, runs=800, seed=2)
            assert a.verdict == "violation" and a.epsilon_lo > CLAIM.epsilon(1e-5)
    if name == "noise drawn once and reused":
        assert rep.noise_independence.z > 10


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_the_honest_plain_pytorch_step_passes_every_check(dtype):
    step = FunctionStep(dp_sgd_step(_model(dtype)), CLAIM)
    rep = check_step(step, _batch(dtype), delta=1e-5, records=(0, 5), draws=20, runs=300, seed=1)
    assert rep.passed, rep.text()
    assert 0.5 < rep.probe.worst_ratio <= 1.0 + 1e-5          # the claim is reached: the probe is not vacuous
    assert rep.audit.verdict == "consistent" and rep.audit.max_epsilon_lo > CLAIM.epsilon(1e-5)


def test_fixed_size_batches_with_a_poisson_claim_are_flagged_with_the_shuffle_bracket():
    x, y = _batch(torch.float64, 60)
    ds = torch.utils.data.TensorDataset(x, y)
    shuffled = torch.utils.data.DataLoader(ds, batch_size=6, shuffle=True, drop_last=True)
    claim = StepClaim(C, Z * C, "add/remove", "poisson", 0.1)
    rep = sampler_test(shuffled, claim, batches=300)
    assert not rep.passed and "shuffle bracket" in rep.note
    # the engine's Poisson loader passes the same test
    net = _model(torch.float64)
    _, _, loader = O.PrivacyEngine().make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                                                  data_loader=torch.utils.data.DataLoader(ds, batch_size=6),
                                                  noise_multiplier=Z, max_grad_norm=C)
    assert sampler_test(loader, claim, batches=2000).passed


def _engine(dtype):
    net = _model(dtype)
    x, y = _batch(dtype)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    m, opt, loader = O.PrivacyEngine().make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                                                    data_loader=loader, noise_multiplier=Z, max_grad_norm=C,
                                                    loss_reduction="sum")
    return EngineStep(m, opt, lambda out, t: ((out - t) ** 2).sum()), net


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_dpcalibs_engine_passes_and_is_left_as_it_was(dtype):
    step, net = _engine(dtype)
    assert step.claim.sensitivity == C and step.claim.noise_std == pytest.approx(Z * C)
    before = [p.detach().clone() for p in net.parameters()]
    rep = check_step(step, _batch(dtype), delta=1e-5, records=(0, 5), draws=20, runs=300, seed=1)
    assert rep.passed, rep.text()
    assert rep.probe.worst_ratio > 0.5
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert step.optimizer.round == 0 and step.optimizer.ledger.steps == 0     # nothing stepped or charged


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_opacus_dpoptimizer_passes_the_probe_and_the_noise_test(dtype):
    pytest.importorskip("opacus")
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gsm = GradSampleModule(_model(dtype), loss_reduction="sum")
        opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=0.1), noise_multiplier=Z, max_grad_norm=C,
                          expected_batch_size=4, loss_reduction="sum")
    step = OpacusStep(gsm, opt, lambda out, t: ((out - t) ** 2).sum(), sample_rate=4 / N)
    rep = check_step(step, _batch(dtype), delta=1e-5, records=(0, 5), draws=20, seed=1)
    assert rep.passed, rep.text()
    assert 0.5 < rep.probe.worst_ratio <= 1.0 + 1e-5


def test_the_checks_refuse_what_is_not_a_step_in_one_line():
    for bad in (lambda: probe_step(object(), _batch(torch.float64)),
                lambda: FunctionStep(42, CLAIM),
                lambda: StepClaim(-1.0, 1.0),
                lambda: StepClaim(1.0, 1.0, relation="swap"),
                lambda: EngineStep(None, object(), None)):
        with pytest.raises(InputError) as e:
            bad()
        assert "\n" not in str(e.value)
    assert math.isinf(StepClaim(1.0, 0.0).epsilon(1e-5))
    std, ks, ind = noise_test_step(FunctionStep(dp_sgd_step(_model(torch.float64)), CLAIM), _batch(torch.float64),
                                   draws=5, seed=1)
    assert std.passed and ks.passed and ind.passed
    a = audit_step(FunctionStep(dp_sgd_step(_model(torch.float64)), CLAIM), _batch(torch.float64), delta=1e-5, runs=50, seed=2)
    assert a.verdict in ("consistent", "inconclusive")



def test_noise_test_and_sampler_test_refuse_bad_counts_in_one_line():
    """draws=0 once failed with an IndexError, a loader without a dataset (n=None) with a TypeError."""
    step = FunctionStep(dp_sgd_step(_model(torch.float64)), CLAIM)
    sizes = [(torch.zeros(4, 3),)] * 3          # an iterable of batches, no .dataset
    for bad, what in ((lambda: noise_test_step(step, _batch(torch.float64), draws=0), "draws=0"),
                      (lambda: noise_test_step(step, _batch(torch.float64), draws=2.5), "draws=2.5"),
                      (lambda: sampler_test(sizes, CLAIM, batches=3), "n=None"),
                      (lambda: sampler_test(sizes, CLAIM, n=0, batches=3), "n=0")):
        with pytest.raises(InputError, match="is not allowed: expected") as e:
            bad()
        assert what in str(e.value) and "\n" not in str(e.value)
    assert sampler_test(sizes, StepClaim(0.1, 0.3, sampling="wor", batch_size=4), n=12, batches=3).passed

def test_opacus_loaders_against_a_poisson_claim():
    """Opacus's make_private: its Poisson loader passes the sampler test; with poisson_sampling=False (the
    user's shuffled loader, which Opacus still accounts as Poisson) the same claim is flagged."""
    pytest.importorskip("opacus")
    from opacus import PrivacyEngine

    x, y = _batch(torch.float64, 60)
    ds = torch.utils.data.TensorDataset(x, y)
    claim = StepClaim(C, Z * C, "add/remove", "poisson", 0.1)
    verdicts = {}
    for poisson in (True, False):
        net = _model(torch.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, _, loader = PrivacyEngine().make_private(
                module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), noise_multiplier=Z, max_grad_norm=C,
                data_loader=torch.utils.data.DataLoader(ds, batch_size=6, shuffle=True), poisson_sampling=poisson)
            verdicts[poisson] = sampler_test(loader, claim, batches=1000 if poisson else 100)
    assert verdicts[True].passed, verdicts[True].note
    assert not verdicts[False].passed and "shuffle bracket" in verdicts[False].note
