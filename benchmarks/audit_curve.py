"""The f-DP verdict: DP-GD's claimed trade-off curve (exact GDP) against measured (FPR, FNR) regions,
for the honest optimizer and for one whose noise is secretly 0.8 x the claim.

    python benchmarks/audit_curve.py [--plots docs/img]

Setting of benchmarks/audit_full_batch.py (tight calibration, (eps, delta) = (2, 1e-5)).  For the
planted bug, the number of runs per dataset (doubling from 500) at which the curve first reports a
violation, and the eps lower bounds at delta = 1e-5 at the same and at larger run counts.
"""

from __future__ import annotations

import argparse
import os
import time

import dpcalib.optim.algorithms.core as core
from dpcalib.optim import audit as A

from audit_full_batch import DELTA, builder

CANARIES = (A.alternating(3, 1e6), A.alternating(3, 1e6, sign=-1.0))


class Shrunk(core.NoiseSource):
    """Planted bug: the noise actually added is 0.8 x the claimed std."""

    def standard(self, shape, generator=None):
        return 0.8 * super().standard(shape, generator)


def report(build, rep, runs, s=None):
    s_d, s_p = s if s is not None else A.llr_samples(build, *CANARIES, runs=runs, progress=False, seed=0)
    mu = A.gdp_mu(rep.epsilon, DELTA)
    b = A.epsilon_lower_bounds(s_d[:runs], s_p[:runs], DELTA, mu)
    c = A.curve_check(s_d[:runs], s_p[:runs], A.TradeOffCurve.gdp(mu), A.gdp_thresholds(mu))
    return b, c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plots", default=None, help="folder for the two figures")
    a = ap.parse_args(argv)
    build, rep = builder("dp-gd")
    t0 = time.perf_counter()
    honest = A.audit(build, *CANARIES, runs=20_000, claimed_epsilon=rep.epsilon, delta=DELTA, progress=False, seed=0)
    print(f"honest     20000 runs: eps_lo direct {honest.epsilon_lo_direct:.3f}, GDP {honest.epsilon_lo_gdp:.3f}; "
          f"curve regions below: {sum(honest.curve.below)}/5; verdict {honest.verdict} "
          f"({time.perf_counter() - t0:.1f} s)")
    if a.plots:
        A.plot_audit(honest, os.path.join(a.plots, "audit_dpgd_honest.png"))
    core.NoiseSource = Shrunk                      # every run built from here on adds 0.8 x the noise
    s = A.llr_samples(build, *CANARIES, runs=256_000, progress=False, seed=0)
    first_curve = first_gdp = None
    n = 500
    while n <= 256_000:
        b, c = report(build, rep, n, s)
        print(f"noise x0.8 {n:6d} runs: curve {'VIOLATION' if c.violation else 'consistent':10s} | "
              f"eps_lo direct {b['direct']:.3f} | eps_lo GDP {b['gdp']:.3f}  (claimed 2)")
        if c.violation and first_curve is None:
            first_curve = n
        if b["gdp"] > 2.0 and first_gdp is None:
            first_gdp = n
        n *= 2
    print(f"first caught: curve at {first_curve} runs/dataset; GDP eps bound at {first_gdp}; direct eps bound "
          f"(delta = 1e-5): not within 256000")
    if a.plots:
        bad = A.audit(build, *CANARIES, runs=first_curve, claimed_epsilon=rep.epsilon, delta=DELTA, progress=False,
                      seed=0)
        A.plot_audit(bad, os.path.join(a.plots, "audit_dpgd_noise08.png"))


if __name__ == "__main__":
    main()
