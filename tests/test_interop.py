"""dp-accounting and Opacus interop: from_dp_event round-trips, the Opacus adapter runs."""

from __future__ import annotations

import math
import warnings

import pytest

from dpcalib.accountant import (
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyAccountant,
    WORSampledGaussianEvent,
    from_dp_event,
)


def _same(a, b):
    """Events equal up to the float of a ratio rebuilt from sizes."""
    if type(a) is not type(b) or a.noise_multiplier != b.noise_multiplier:
        return False
    for name in ("sampling_probability", "sampling_ratio"):
        if hasattr(a, name) and not math.isclose(getattr(a, name), getattr(b, name), rel_tol=1e-12):
            return False
    return True


def _mechanism_accountants():
    from dpcalib.mechanisms import DIFF2BVR, DIFF2GD, DPGD, DPSGD, DPSRM, ClipD2P, DiceSGD

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield "dp-gd", DPGD(20, 2, 50).accountant(0.5)
        yield "diff2-gd", DIFF2GD(20, 5, 2, 50).accountant(0.3, 0.9)
        yield "diff2-bvr", DIFF2BVR(20, 5, 2, 50, 3, 5).accountant(0.3, 0.9, 1.1)
        yield "dp-sgd", DPSGD(0.02, 30).accountant(1.1)
        yield "dp-srm", DPSRM(1000, 10, 64, 16).accountant(0.05, 0.002)
        yield "dicesgd", DiceSGD(1000, 100, 10, 1.0, 0.01).accountant(2.0)
        yield "clipd2p add/remove", ClipD2P(50, 20).accountant(1.2)
        yield "clipd2p replace-one", ClipD2P(50, 20, "replace-one").accountant(1.2)


@pytest.mark.parametrize("name, acc", list(_mechanism_accountants()))
def test_from_dp_event_round_trips_every_exported_accountant(name, acc):
    pytest.importorskip("dp_accounting")
    back = PrivacyAccountant.from_dp_event(acc.to_dp_event())
    assert len(back.events) == len(acc.events)
    for (e1, k1), (e2, k2) in zip(acc.events, back.events):
        assert k1 == k2 and _same(e1, e2), (name, e1, e2)
    # and it accounts the same: RDP of the rebuilt composition equals the original's
    assert back.get_epsilon(1e-5, "rdp") == pytest.approx(acc.get_epsilon(1e-5, "rdp"), rel=1e-9)


def test_from_dp_event_flattens_nested_compositions_and_refuses_other_mechanisms():
    dpa = pytest.importorskip("dp_accounting")
    tree = dpa.SelfComposedDpEvent(dpa.ComposedDpEvent([
        dpa.GaussianDpEvent(1.5), dpa.NoOpDpEvent(),
        dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(2.0)), 4)]), 3)
    got = from_dp_event(tree)
    # a self-composed block repeats each of its parts (composition commutes, the eps is the same)
    assert got == [(GaussianEvent(1.5), 3), (PoissonSampledGaussianEvent(0.1, 2.0), 12)]
    wor = from_dp_event(dpa.SampledWithoutReplacementDpEvent(100, 7, dpa.GaussianDpEvent(0.9)))
    assert wor == [(WORSampledGaussianEvent.from_sizes(7, 100, 0.9), 1)]
    # issue 74: every tree dp-accounting's own accountants take is read (tests/test_event_trees.py); the
    # sampling neither takes (with replacement) is still refused, in one line naming it
    with pytest.raises(ValueError, match="SampledWithReplacementDpEvent"):
        from_dp_event(dpa.SampledWithReplacementDpEvent(100, 7, dpa.LaplaceDpEvent(1.0)))
    with pytest.raises(ValueError, match="sampling wraps one mechanism"):
        from_dp_event(dpa.PoissonSampledDpEvent(0.1, dpa.ComposedDpEvent([dpa.LaplaceDpEvent(1.0)] * 2)))


def test_opacus_adapter_calibrates_and_tracks_epsilon_in_a_short_dp_sgd_run():
    opacus = pytest.importorskip("opacus")
    torch = pytest.importorskip("torch")
    from dpcalib.optim import opacus as adapter

    torch.manual_seed(0)
    n, batch, epochs, target = 64, 16, 2, 4.0
    q = batch / n
    steps = epochs * n // batch
    z = adapter.noise_multiplier(target, 1e-5, q, steps)
    # independent check of the calibration: Opacus's own PRV accountant for the same run
    from opacus.accountants import PRVAccountant

    prv = PRVAccountant()
    prv.history = [(z, q, steps)]
    assert prv.get_epsilon(1e-5) <= target * 1.02     # PRV's own error bar is ~1 %
    x, y = torch.randn(n, 3), torch.randint(0, 2, (n,))
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch)
    engine = opacus.PrivacyEngine(accountant="dpcalib")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader,
                                                 noise_multiplier=z, max_grad_norm=1.0)
        for _ in range(epochs):
            for xb, yb in loader:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(xb), yb).backward()
                opt.step()
    acct = engine.accountant
    assert isinstance(acct, adapter.DpcalibAccountant)
    assert sum(k for _, _, k in acct.history) > 0
    eps = engine.get_epsilon(1e-5)
    # the same history accounted directly by dpcalib (its RDP answer bounds the certified one)
    k = sum(c for _, _, c in acct.history)
    rdp = PrivacyAccountant().compose(PoissonSampledGaussianEvent(q, z), k).get_epsilon(1e-5, "rdp")
    assert 0 < eps <= rdp
    b = acct.epsilon_bracket(1e-5)
    assert b.lower <= eps <= b.upper
