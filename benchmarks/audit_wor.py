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
import dpcalib.mechanisms as M
import dpcalib.optim.algorithms.core as core
from dpcalib.accountant import claimed_tradeoff
from dpcalib.optim import audit as A

EPS, DELTA = 8.0, 1e-5


def _dpsrm(n=4, b=2, steps=2, claim_n=None):
    """DP-SRM (momentum 1: a WOR-subsampled clipped-gradient mean per step) and its claim: the tight
    calibration for n records, or -- planted bug -- for ``claim_n`` records (a smaller rate b/n)."""
    mech = M.DPSRM(n, steps, b, b, lipschitz=1.0, step_bound=1.0, momentum=1.0)
    claim = mech if claim_n is None else M.DPSRM(claim_n, steps, b, b, lipschitz=1.0, step_bound=1.0, momentum=1.0)
    noise = dict(claim.calibrate(EPS, DELTA, method="tight").noise)
    build, a, b_, holder = A.wor_harness("dp-srm", mech, noise)
    return build, claimed_tradeoff(claim.accountant(**noise)), a, b_, holder


def _clipd2p(J=2, iterations=2):
    mech = M.ClipD2P(J, iterations, "replace-one")
    build, a, b, holder = A.wor_harness("clipd2p", mech, mech.calibrate(EPS, DELTA, method="tight"))
    return build, None, a, b, holder


def _diff2bvr():
    mech = M.DIFF2BVR(2, 2, 2, 4, 3, 2)          # R = 2, T = 2, P = 2, n_min = 4, K = 3, b = 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = mech.calibrate(EPS, DELTA, method="tight")
    build, a, b, holder = A.wor_harness("diff2-bvr", mech, rep)
    return build, None, a, b, holder


class _HalfNoise(core.NoiseSource):
    """Planted bug: the noise actually added is 0.5 x the claimed std."""

    def standard(self, shape, generator=None):
        return 0.5 * super().standard(shape, generator)


def audit(setup, runs):
    build, curve, a, b, holder = setup
    return A.audit_wor(build, a, b, runs=runs, claimed_epsilon=EPS, delta=DELTA, holder=holder, curve=curve,
                       progress=False, seed=0)



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
