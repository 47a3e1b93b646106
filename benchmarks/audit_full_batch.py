"""White-box privacy audit of DP-GD and DIFF2-GD at their tight calibration (eps = 2, delta = 1e-5).

Small model (one Linear layer, 2 -> 1), P = 2 clients of 5 records, R = 4 rounds (DIFF2-GD:
T = 2, so two restart and two difference rounds).  The canary replaces record 0 of client 0; its
gradient at the j-th iterate is (-1)^j 1e6 u (D) or the opposite (D'), so every round -- restart
or difference -- moves by exactly the claimed sensitivity 2C/(n_min P).  Reports the direct and
the GDP lower bound on eps (95 % confidence) and the verdict.

    python benchmarks/audit_full_batch.py [--runs 100000] [--batch 4096 | --sequential]

The runs are batched (``optim.batched``: 4096 runs per batch stacked along a tensor dimension);
``--sequential`` runs one leader/twin pair after another (the oracle; about 60 pairs/s here).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O
from dpcalib.optim import audit as A

EPS, DELTA = 2.0, 1e-5


def builder(name: str):
    g = torch.Generator().manual_seed(0)
    shards = [(torch.randn(5, 2, generator=g), torch.randn(5, generator=g)) for _ in range(2)]
    mech = M.DPGD(4, 2, 5) if name == "dp-gd" else M.DIFF2GD(4, 2, 2, 5)
    rep = mech.calibrate(EPS, DELTA, method="tight")

    def build(seed):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(2, 1))
        if name == "dp-gd":
            return O.DPGD(model, O.squared_loss, shards, mech, rep, C1=1.0, lr=0.1, seed=seed)
        return O.DIFF2GD(model, O.squared_loss, shards, mech, rep, C1=1.0, C2=1.0, lr=0.1, seed=seed)

    return build, rep


def compare(runs, batch):
    """Sequential vs batched on the same seeds: wall-clock seconds and the largest difference."""
    canaries = (A.alternating(3, 1e6), A.alternating(3, 1e6, sign=-1.0))
    A.llr_samples(builder("dp-gd")[0], *canaries, runs=2, batch=2, progress=False, seed=0)      # warm-up (imports)
    for name in ("dp-gd", "diff2-gd"):
        build, _ = builder(name)
        t0 = time.perf_counter()
        seq = A.llr_samples(build, *canaries, runs=runs, batch=None, progress=False, seed=0)
        t1 = time.perf_counter()
        bat = A.llr_samples(build, *canaries, runs=runs, batch=batch, progress=False, seed=0)
        t2 = time.perf_counter()
        diff = max(abs(x - y) for s, b in zip(seq, bat) for x, y in zip(s, b))
        print(f"{name:9s} {runs} runs/dataset: sequential {t1 - t0:.1f} s, batched {t2 - t1:.2f} s "
              f"({(t1 - t0) / (t2 - t1):.0f}x); largest |S_seq - S_batched| = {diff:.1e}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=4096, help="runs per batch")
    ap.add_argument("--sequential", action="store_true", help="one pair after another (the oracle)")
    ap.add_argument("--compare", type=int, default=0, metavar="RUNS",
                    help="also time RUNS runs per dataset sequentially and batched, side by side (same statistics)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    if a.compare:
        compare(a.compare, a.batch)
    for name in ("dp-gd", "diff2-gd"):
        build, rep = builder(name)
        t0 = time.perf_counter()
        r = A.audit(build, A.alternating(3, 1e6), A.alternating(3, 1e6, sign=-1.0), runs=a.runs,
                    claimed_epsilon=rep.epsilon, delta=DELTA, progress=False,
                    batch=None if a.sequential else a.batch, seed=0)
        dt = time.perf_counter() - t0
        print(f"{name:9s} claimed eps {r.claimed_epsilon:g} (mu {r.mu_claimed:.4f}) | runs/dataset {r.runs} | "
              f"eps_lo direct {r.epsilon_lo_direct:.4f} | eps_lo GDP {r.epsilon_lo_gdp:.4f} (mu_lo {r.mu_lo:.4f}, "
              f"{r.epsilon_lo_gdp / r.claimed_epsilon:.3f} x claimed) | {r.verdict} | {dt:.1f} s", flush=True)


if __name__ == "__main__":
    main()
