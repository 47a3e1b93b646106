"""A GDP audit of one full-batch Gaussian step through the step contract (dpcalib.optim.audit.contract):
``runs`` releases per neighbouring batch of a plain-PyTorch step that sums the records' values clipped
to C and adds N(0, (z C)^2) noise from the generator it is handed; the statistic is the release's
log-likelihood ratio; the 95 %-confidence GDP lower bound on eps against the claimed eps of the step.

    python -m benchmarks.audit_step_gdp [--runs 100000] [--noise-multiplier 1.0] [--delta 1e-5]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from dpcalib.optim.audit.contract import FunctionStep, StepClaim
from dpcalib.optim.audit.steps import audit_step


def gaussian_step(C: float, z: float):
    def step(batch, noise, generator):
        (x,) = batch
        norms = x.norm(dim=1, keepdim=True)
        total = (x * torch.clamp(C / norms, max=1.0)).sum(0)
        return total + z * C * torch.randn(total.shape, generator=generator, dtype=total.dtype) if noise else total
    return step


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--noise-multiplier", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    C, z = 1.0, a.noise_multiplier
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3.0
    step = FunctionStep(gaussian_step(C, z), StepClaim(C, z * C, "add/remove", "full batch"))
    t = time.perf_counter()
    r = audit_step(step, (x,), delta=a.delta, runs=a.runs, seed=2)
    took = time.perf_counter() - t
    claim = step.claim.epsilon(a.delta)
    print(f"{a.runs} runs per batch, noise multiplier {z:g}, delta {a.delta:g}: claimed eps {claim:.6g}; "
          f"GDP lower bound {r.epsilon_lo_gdp:.6g} ({r.epsilon_lo_gdp / claim:.3f} of the claim), direct "
          f"{r.epsilon_lo_direct:.6g}; verdict {r.verdict}; {took:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
