"""Accounting benchmark: dpcalib vs dp-accounting on the same queries, one run, ratios reported.

    python benchmarks/bench_accounting.py [--repeats 7]

Queries (delta = 1e-5):
  1. Poisson-subsampled Gaussian, q = 0.01, z = 1.0, 10 000 steps (add/remove).
  2. Gaussian subsampled without replacement, q = 0.01, z = 1.0, 1000 steps (replace-one).
Each repetition builds a fresh accountant on both sides and empties every cache of ours
(``dpcalib.accountant.clear_cache``), so the times are of a cold answer, RDP curve included;
repetitions alternate between the two libraries and the median is reported.  Timings on a
shared 2-core machine are noisy: read the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant

from dpcalib.accountant import PoissonSampledGaussianEvent, PrivacyAccountant, WORSampledGaussianEvent, clear_cache

DELTA = 1e-5


def ours_poisson():
    clear_cache()
    return PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 10_000).get_epsilon(DELTA)


def theirs_poisson():
    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 10_000))
    return acc.get_epsilon(DELTA)


def ours_wor():
    clear_cache()
    return PrivacyAccountant().compose(WORSampledGaussianEvent.from_sizes(10, 1000, 1.0), 1000).get_epsilon(DELTA)


def theirs_wor():
    acc = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(1000, 10, dp_accounting.GaussianDpEvent(1.0)), 1000))
    return acc.get_epsilon(DELTA)


def timed(fn):
    t0 = time.perf_counter()
    v = fn()
    return v, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rows = []
    for name, ours, theirs in [("Poisson q=0.01 z=1 10000 steps", ours_poisson, theirs_poisson),
                               ("WOR q=0.01 z=1 1000 steps (replace-one)", ours_wor, theirs_wor)]:
        t_o, t_t = [], []
        for _ in range(args.repeats):
            eo, dt = timed(ours)
            t_o.append(dt)
            et, dt = timed(theirs)
            t_t.append(dt)
        mo, mt = statistics.median(t_o), statistics.median(t_t)
        rows.append((name, eo, et, mo, mt, mt / mo))
    print(f"{'query (delta=1e-5)':42s} {'eps dpcalib':>12s} {'eps dp-acc':>12s} "
          f"{'t dpcalib':>10s} {'t dp-acc':>10s} {'dp-acc/dpcalib':>14s}")
    for name, eo, et, mo, mt, r in rows:
        print(f"{name:42s} {eo:12.6f} {et:12.6f} {mo * 1e3:8.1f}ms {mt * 1e3:8.1f}ms {r:13.1f}x")


if __name__ == "__main__":
    main()
