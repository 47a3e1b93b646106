"""Audits of claims that rely on fixed-size sampling without replacement (replace-one): DP-SRM
(b < n), DIFF2-BVR-L-SGD (local steps), ClipD2P (J > 1) at their tight calibrations for
(eps, delta) = (8, 1e-5), and each with a planted bug.

    python benchmarks/audit_wor.py [--runs 1000]

Statistic: the exact mixture LLR of the replace-one coupling (``optim.audit.audit_wor``); direct eps
bound and claimed trade-off curve (the PLD profile of the run's composition) with thresholds from a
held-out half.  tests/test_audit_wor.py runs reduced versions of the same setups.
"""

from __future__ import annotations

import argparse
import time
import warnings

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


def audit(setup, runs):
    build, curve, a, b, holder = setup
    return A.audit_wor(build, a, b, runs=runs, claimed_epsilon=EPS, delta=DELTA, holder=holder, curve=curve,
                       progress=False)



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    cases = [("dp-srm", "honest", _dpsrm, None), ("dp-srm", "claim at half the sampling rate",
                                                   lambda: _dpsrm(claim_n=8), None),
             ("clipd2p", "honest", _clipd2p, None), ("clipd2p", "noise x0.5", _clipd2p, _HalfNoise),
             ("diff2-bvr", "honest", _diff2bvr, None), ("diff2-bvr", "noise x0.5", _diff2bvr, _HalfNoise)]
    print("| algorithm | run | eps_lo direct (95 %) | curve regions below | verdict | time |")
    print("|---|---|---|---|---|---|")
    base = core.NoiseSource
    for name, what, setup, noise in cases:
        core.NoiseSource = noise or base
        t0 = time.perf_counter()
        r = audit(setup(), a.runs)
        print(f"| {name} | {what} | {r.epsilon_lo_direct:.3f} | {sum(r.curve.below)}/{len(r.curve.below)} | "
              f"{r.verdict} | {time.perf_counter() - t0:.0f} s |", flush=True)
    core.NoiseSource = base


if __name__ == "__main__":
    main()
