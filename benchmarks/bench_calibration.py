"""Calibration benchmark (one run; read the ratios).

    python benchmarks/bench_calibration.py [--repeats 5]

1. DIFF2-GD tight calibration (eps = 3, delta = 1e-5, R = 2000, T = 20, P = 10, n_min = 1651).
2. DP-SGD tight calibration, Poisson q = 0.01, 10 000 steps, eps = 3, delta = 1e-5, relative
   tolerance 1e-6, vs dp_accounting.mechanism_calibration.calibrate_dp_mechanism with
   RdpAccountant at the same tolerance (tol = 1e-6 x the answer).  Repetitions alternate.
Every repetition starts from empty caches (``dpcalib.accountant.clear_cache``): the times are of a
cold answer, not of a remembered one.
"""

from __future__ import annotations

import argparse
import statistics
import time

import dp_accounting
from dp_accounting import mechanism_calibration
from dp_accounting.rdp import rdp_privacy_accountant

from dpcalib.accountant import clear_cache
from dpcalib.mechanisms import DIFF2GD, DPSGD


def theirs(tol):
    return mechanism_calibration.calibrate_dp_mechanism(
        rdp_privacy_accountant.RdpAccountant,
        lambda z: dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(z)), 10_000),
        3.0, 1e-5, tol=tol)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    m = DIFF2GD(2000, 20, 10, 1651)
    t = []
    for _ in range(max(args.repeats, 20)):
        clear_cache()
        t0 = time.perf_counter()
        m.calibrate(3.0, 1e-5, "tight")
        t.append(time.perf_counter() - t0)
    print(f"DIFF2-GD tight calibration: median {statistics.median(t) * 1e3:.2f} ms over {len(t)} runs")

    to, tt = [], []
    for _ in range(args.repeats):
        clear_cache()
        t0 = time.perf_counter()
        z_ours = DPSGD(0.01, 10_000).calibrate(3.0, 1e-5, "tight", rtol=1e-6)["noise_multiplier"]
        to.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        z_theirs = theirs(1e-6 * z_ours)
        tt.append(time.perf_counter() - t0)
    mo, mt = statistics.median(to), statistics.median(tt)
    print("DP-SGD tight calibration (q=0.01, 10000 steps, eps=3, delta=1e-5, rtol 1e-6):")
    print(f"  dpcalib      z = {z_ours:.8f}  median {mo * 1e3:.1f} ms")
    print(f"  dp-accounting z = {z_theirs:.8f}  median {mt * 1e3:.1f} ms")
    print(f"  speed ratio dp-accounting / dpcalib = {mt / mo:.1f}x; sigma ours <= theirs: {z_ours <= z_theirs}")


if __name__ == "__main__":
    main()
