"""Audits of DP-SGD, DP-SRM and DiceSGD (issue acceptance 4): claimed eps, eps lower bound, runs,
verdict.  Small models (one Linear layer, 2 -> 1), tiny datasets, claimed (eps, delta) = (2, 1e-5).

* DP-SGD (Poisson q = 0.5, T = 4, N = 20): add/remove canary (a record with a huge constant
  gradient vs no record); Poisson-mixture LLR, direct bound with a held-out threshold.
* DP-SRM (n = 10, T = 4, b0 = b = n: full batches, so the claim has no amplification, the
  conditional LLR is exact and the mechanism is a Gaussian composition, i.e. GDP): replace-one,
  alternating canary (+/-), paper and tight calibrations.
* DiceSGD (N = 20, B = 10, T = 4, C1 = 1, C2 = 0.1): the assumption-free (tight) claim holds for
  every sampling outcome, so the conditional LLR is valid; the paper's (Thm 3.7) claim relies on
  amplification, audited with the Poisson-mixture statistic (direct bound, held-out threshold).

    python benchmarks/audit_table.py [--runs 2000]
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O
from dpcalib.optim import audit as A

EPS, DELTA = 2.0, 1e-5


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 1))


def table(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 2, generator=g), torch.randn(n, generator=g)


def rows(runs):
    warnings.simplefilter("ignore")
    data = table(20)
    mech = M.DPSGD(0.5, 4)
    rep = mech.calibrate(EPS, DELTA)
    b = lambda s: O.DPSGD(model(), O.squared_loss, data, mech, rep, C=1.0, lr=0.1, seed=s)  # noqa: E731
    yield "dp-sgd", "tight", lambda: A.audit_poisson(b, A.constant(3, 1e6), rate=0.5, runs=runs,
                                                      claimed_epsilon=EPS, delta=DELTA, progress=False, seed=0)
    small = table(10, 1)
    mech = M.DPSRM(10, 4, 10, 10, 1.0, 0.5, 0.3)
    for method in ("paper", "tight"):
        rep = mech.calibrate(EPS, DELTA, method=method)
        b = (lambda rep: lambda s: O.DPSRM(model(), O.squared_loss, small, mech, rep, lr=0.1, seed=s))(rep)
        yield "dp-srm", method, (lambda b: lambda: A.audit(
            b, A.alternating(3, 1e6), A.alternating(3, 1e6, sign=-1.0), runs=runs, claimed_epsilon=EPS,
            delta=DELTA, gdp_exact=True, progress=False, seed=0))(b)
    mech = M.DiceSGD(20, 10, 4, C1=1.0, C2=0.1)
    rep = mech.calibrate(EPS, DELTA, method="tight")
    b = lambda s: O.DiceSGD(model(), O.squared_loss, data, mech, rep, lr=0.1, seed=s)  # noqa: E731
    yield "dicesgd", "tight (assumption-free)", lambda: A.audit(
        b, A.constant(3, 1e6), A.zero(3), runs=runs, claimed_epsilon=EPS, delta=DELTA, gdp_exact=False,
        progress=False, seed=0)
    rep_p = mech.calibrate(EPS, DELTA, method="paper")
    bp = lambda s: O.DiceSGD(model(), O.squared_loss, data, mech, rep_p, lr=0.1, seed=s)  # noqa: E731
    yield "dicesgd", "paper (Thm 3.7)", lambda: A.audit_poisson(bp, A.constant(3, 1e6), rate=0.5, runs=runs,
                                                                  claimed_epsilon=EPS, delta=DELTA, progress=False,
                                                                  seed=0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    print("| algorithm | calibration | claimed eps | eps_lo direct (95 %) | eps_lo GDP (95 %) | runs/dataset | verdict "
          "| time |")
    print("|---|---|---|---|---|---|---|---|")
    for name, method, go in rows(a.runs):
        t0 = time.perf_counter()
        r = go()
        gdp = f"{r.epsilon_lo_gdp:.3f}" if r.gdp_exact else "-"
        print(f"| {name} | {method} | {r.claimed_epsilon:g} | {r.epsilon_lo_direct:.3f} | {gdp} | {r.runs} | "
              f"{r.verdict} | {time.perf_counter() - t0:.0f} s |", flush=True)


if __name__ == "__main__":
    main()
