"""The checks pass in secure mode: the record-level probe of every algorithm that claims a sensitivity,
run through the secure generator and sampler, and check_step on the engine, whose noise test then
exercises the secure sampler itself (the leave-one-out through the engine's whole step in secure mode
is tests/test_engine_soundness.py's)."""

import pytest
import torch
from torch import nn

import dpcalib.optim as O
from dpcalib.optim.audit import EngineStep, check_step
from dpcalib.optim.audit import probe as P
from dpcalib.optim.randomness import is_secure
from tests.test_probe import CASES


@pytest.mark.parametrize("alg,mech,eps,kw", CASES, ids=[c[0] for c in CASES])
def test_the_record_probe_passes_in_secure_mode(alg, mech, eps, kw):
    rep = mech.calibrate(eps, 1e-5)
    build, data, held = P.probe_harness(alg, mech, rep, hidden=16, secure_mode=True, seed=0, **kw)
    assert is_secure(build(data, 0, None).privatizer.generator)
    r = P.record_probe(build, data, held, progress=False, seed=0)
    assert r.passed and r.exceeded == 0 and r.std_mismatches == 0
    assert 0.95 < r.worst_ratio <= 1 + r.tol


def test_check_step_on_a_secure_engine_tests_the_secure_sampler():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    engine = O.PrivacyEngine(secure_mode=True)
    m, opt, loader = engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                         data_loader=loader, noise_multiplier=1.3, max_grad_norm=0.7)
    step = EngineStep(m, opt, nn.CrossEntropyLoss())
    rep = check_step(step, (x[:16], y[:16]), draws=40, seed=1)
    assert rep.passed, rep.text()
    # the released noise is on the secure sampler's grid (the check drew through it)
    g = torch.Generator().manual_seed(1)
    base = step.release((x[:16], y[:16]), noise=False, generator=g)
    noisy = step.release((x[:16], y[:16]), noise=True, generator=g)
    assert not torch.equal(base, noisy)
    assert rep.noise_ks.pooled.draws == 40 * base.numel()
