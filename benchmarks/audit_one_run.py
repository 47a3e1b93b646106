"""One-run audit (Steinke, Nasr & Jagielski 2023) of DP-SGD beside the many-run audit.

    python benchmarks/audit_one_run.py [--seeds 5] [--runs 2000]

* one-run: DP-SGD (q = 0.01, 1 000 steps), an MLP 32 -> 32 -> 1 (1 089 parameters), 100 records,
  m = 1 000 gradient canaries (each included with probability 1/2), tight calibration at
  eps in {2, 8}, delta = 1e-5; eps_lo of each seed; then the noise secretly x 0.3.
* many-run: the Poisson-mixture audit (``audit_poisson``) of DP-SGD on its small shape (q = 0.5,
  4 steps, one Linear layer, 20 records), ``--runs`` runs per dataset, at the same two eps.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O
import dpcalib.optim.algorithms.core as core
from dpcalib.optim import audit as A

DELTA = 1e-5


def one_run(eps, seed):
    mech = M.DPSGD(0.01, 1000)
    build = A.one_run_harness("dp-sgd", mech, mech.calibrate(eps, DELTA), 1000)
    return A.one_run_audit(build, canaries=1000, claimed_epsilon=eps, delta=DELTA, seed=seed, progress=False)


def many_runs(eps, runs):
    g = torch.Generator().manual_seed(0)
    data = (torch.randn(20, 2, generator=g), torch.randn(20, generator=g))
    mech = M.DPSGD(0.5, 4)
    rep = mech.calibrate(eps, DELTA)

    def build(s):
        torch.manual_seed(0)
        return O.DPSGD(nn.Sequential(nn.Linear(2, 1)), O.squared_loss, data, mech, rep, C=1.0, lr=0.1, seed=s)
    return A.audit_poisson(build, A.constant(3, 1e6), rate=0.5, runs=runs, claimed_epsilon=eps, delta=DELTA,
                           progress=False, seed=0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=2000)
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    for eps in (2.0, 8.0):
        t0 = time.perf_counter()
        rs = [one_run(eps, s) for s in range(a.seeds)]
        lo = ", ".join(f"{r.epsilon_lo:.3f}" for r in rs)
        print(f"one-run   eps {eps:g}: eps_lo per seed [{lo}] (max {max(r.epsilon_lo for r in rs):.3f}); "
              f"verdicts {sorted(set(r.verdict for r in rs))}; {(time.perf_counter() - t0) / a.seeds:.1f} s per audit")
    core_cls = core.NoiseSource

    class Scaled(core_cls):
        def standard(self, shape, generator=None):
            return 0.3 * super().standard(shape, generator)
    core.NoiseSource = Scaled
    rs = [one_run(2.0, s) for s in range(a.seeds)]
    print(f"one-run   eps 2, noise x0.3: eps_lo per seed [{', '.join(f'{r.epsilon_lo:.3f}' for r in rs)}]; "
          f"verdicts {[r.verdict for r in rs]}")
    core.NoiseSource = core_cls
    for eps in (2.0, 8.0):
        t0 = time.perf_counter()
        r = many_runs(eps, a.runs)
        print(f"many-run  eps {eps:g} (audit_poisson, {a.runs} runs/dataset): eps_lo direct {r.epsilon_lo_direct:.3f}, "
              f"curve regions below {sum(r.curve.below)}/{len(r.curve.below)}; {r.verdict}; "
              f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
