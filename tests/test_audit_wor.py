"""Audits of claims that rely on fixed-size sampling without replacement under replace-one
(optim/audit.py: WORCoupling, wor_llr, audit_wor): DP-SRM with b < n, DIFF2-BVR-L-SGD's local
steps, ClipD2P with J > 1 -- consistent at their tight calibrations, and a planted bug in each
(noise x 0.5, or a claim whose sampling rate is half the one run) gives "violation"."""

import math
import warnings

import pytest
import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O
import dpcalib.optim._core as core
from dpcalib.accountant import claimed_tradeoff
from dpcalib.optim import audit as A

EPS, DELTA = 8.0, 1e-5
E_BIAS = torch.tensor([0.0, 0.0, 1.0])
# D: the canary's gradient is +1e6 along the bias; D': -1e6, which is what every other record of
# the holder has (x = 0, y = 1e6), so the "canary out" query equals D''s "canary in" query: the
# worst case of the replace-one pair
UP, DOWN = A.constant(3, 1e6, E_BIAS), A.constant(3, -1e6, E_BIAS)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 1))


def _dpsrm(n=4, b=2, steps=2, claim_n=None):
    """DP-SRM (momentum 1: a WOR-subsampled clipped-gradient mean per step) and its claim: the tight
    calibration for n records, or -- planted bug -- for ``claim_n`` records (a smaller rate b/n)."""
    mech = M.DPSRM(n, steps, b, b, lipschitz=1.0, step_bound=1.0, momentum=1.0)
    claim = mech if claim_n is None else M.DPSRM(claim_n, steps, b, b, lipschitz=1.0, step_bound=1.0, momentum=1.0)
    rep = claim.calibrate(EPS, DELTA, method="tight")
    noise = dict(rep.noise)
    data = (torch.zeros(n, 2), torch.full((n,), 1e6))
    build = lambda s: O.DPSRM(_model(), O.squared_loss, data, mech, noise, lr=0.1, seed=s)  # noqa: E731
    return build, claimed_tradeoff(claim.accountant(**noise)), UP, DOWN, 0


def _clipd2p(J=2, iterations=2):
    mech = M.ClipD2P(J, iterations, "replace-one")
    rep = mech.calibrate(EPS, DELTA, method="tight")
    g = torch.Generator().manual_seed(0)
    nodes = [(torch.zeros(J, 2), torch.full((J,), 1e6))] + \
        [(torch.randn(J, 2, generator=g), torch.randn(J, generator=g)) for _ in range(3)]
    build = lambda s: O.ClipD2P(_model(), O.squared_loss, nodes, mech, rep, C=1.0, lr=0.1, seed=s)  # noqa: E731
    return build, None, UP, DOWN, 0


def _diff2bvr():
    mech = M.DIFF2BVR(2, 2, 2, 4, 3, 2)          # R = 2, T = 2, P = 2, n_min = 4, K = 3, b = 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = mech.calibrate(EPS, DELTA, method="tight")
    g = torch.Generator().manual_seed(0)
    shards = [(torch.randn(4, 2, generator=g), torch.randn(4, generator=g)) for _ in range(2)]
    build = lambda s: O.DIFF2BVR(_model(), O.squared_loss, shards, mech, rep, C1=1.0, C2=1.0, lr=0.1,  # noqa: E731
                                 seed=s)
    return build, None, A.alternating(3, 1e6), A.alternating(3, 1e6, sign=-1.0), 0


class _HalfNoise(core.NoiseSource):
    """Planted bug: the noise actually added is 0.5 x the claimed std."""

    def _standard(self, shape, generator=None):
        return 0.5 * super()._standard(shape, generator)


def _audit(setup, runs):
    build, curve, a, b, holder = setup
    return A.audit_wor(build, a, b, runs=runs, claimed_epsilon=EPS, delta=DELTA, holder=holder, curve=curve,
                       progress=False)


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
    assert A._mixture_llr(o, q0, qa, qb, s, g) == pytest.approx(expected, rel=1e-12)
    # gamma = 1: the Gaussian LLR
    assert A._mixture_llr(o, q0, qa, qb, s, 1.0) == pytest.approx(math.log(dens(qa) / dens(qb)), rel=1e-12)


@pytest.mark.parametrize("setup", [_dpsrm, _clipd2p, _diff2bvr], ids=["dp-srm", "clipd2p", "diff2-bvr"])
def test_wor_audits_at_the_tight_calibration_are_consistent(setup):
    r = _audit(setup(), 150)
    assert r.verdict == "consistent", r.as_dict()
    assert r.epsilon_lo_direct <= EPS and not r.curve.violation
    assert r.curve.curve.kind == "profile"


def test_dpsrm_whose_claim_has_half_the_sampling_rate_is_caught():
    r = _audit(_dpsrm(claim_n=8), 1000)
    assert r.verdict == "violation" and r.curve.violation
    assert r.epsilon_lo_direct <= EPS             # the eps bound at 1e-5 alone does not see it


@pytest.mark.parametrize("setup, runs", [(_clipd2p, 600), (_diff2bvr, 400)], ids=["clipd2p", "diff2-bvr"])
def test_wor_audits_catch_half_the_noise(setup, runs, monkeypatch):
    # (caught from 300 runs per dataset on in a sweep; the counts leave a margin)
    monkeypatch.setattr(core, "NoiseSource", _HalfNoise)
    s = setup()
    assert isinstance(s[0](0).noise, _HalfNoise)
    r = _audit(s, runs)
    assert r.verdict == "violation", r.as_dict()
