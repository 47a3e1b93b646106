"""The PLD accountant over the corners of its range (acceptance sweep; minutes, not a test).

    python benchmarks/pld_corners.py

Every combination of q in {1e-7, 1e-3, 1}, noise multiplier in {0.1, 1, 1e4}, steps in {1, 1e7},
delta in {1e-300, 0.1}: ``PrivacyAccountant.epsilon_bracket`` must give a finite bracket (or a
ValueError naming the argument) -- never NaN, a hang or more than the memory cap.  Then tight
DP-SGD calibrations at the eps-target corners.  Prints one line per case with its wall time.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings

from dpcalib.accountant import PoissonSampledGaussianEvent, PrivacyAccountant, pld
from dpcalib.mechanisms import DPSGD


def main() -> None:
    warnings.simplefilter("ignore")
    print("| q | z | steps | delta | bracket | method | converged | grid | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for q, z, k, d in itertools.product((1e-7, 1e-3, 1.0), (0.1, 1.0, 1e4), (1, 10**7), (1e-300, 0.1)):
        pld.clear_cache()
        t0 = time.perf_counter()
        try:
            b = PrivacyAccountant().compose(PoissonSampledGaussianEvent(q, z), k).epsilon_bracket(d)
            assert math.isfinite(b.upper) and 0.0 <= b.lower <= b.upper, b
            res = f"[{b.lower:.5g}, {b.upper:.5g}] | {b.method} | {b.converged} | {b.discretization:.2g}"
        except ValueError as exc:
            res = f"ValueError: {exc} | | |"
        dt = time.perf_counter() - t0
        worst = max(worst, dt)
        print(f"| {q:g} | {z:g} | {k:g} | {d:g} | {res} | {dt:.2f} |", flush=True)
    print(f"\nslowest corner: {worst:.1f} s\n")
    print("| q, steps, eps, delta | noise | certified eps | bracket | seconds |")
    print("|---|---|---|---|---|")
    for q, steps, eps, d in [(0.01, 1000, 0.01, 1e-5), (0.01, 100, 100.0, 1e-5), (1.0, 10, 100.0, 0.1),
                             (1e-7, 10**7, 1.0, 1e-5), (0.5, 10**7, 100.0, 1e-300)]:
        pld.clear_cache()
        t0 = time.perf_counter()
        try:
            r = DPSGD(q, steps).calibrate(eps, d, accountant="pld")
            res = (f"{r.noise['noise_multiplier']:.6g} | {r.certified_epsilon:.6g} | "
                   f"[{r.epsilon_lower:.6g}, {r.epsilon_upper:.6g}]")
        except ValueError as exc:
            res = f"ValueError: {exc} | |"
        print(f"| {q:g}, {steps:g}, {eps:g}, {d:g} | {res} | {time.perf_counter() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()
