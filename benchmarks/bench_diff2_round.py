"""Cost of one DIFF2-GD round vs a non-private full-batch gradient step (issue acceptance 6).

54 -> 256 -> 256 -> 1 softplus MLP, n = 16 000 records in P = 10 clients, squared loss.  Times
``DIFF2GD.step()`` (clipping, client averaging, noise from the calibration, update) for restart
rounds and difference rounds, with the ghost fast path and with the general vmap path, and a
non-private step (forward + backward of the mean loss + ``torch.optim.SGD.step``).  One run;
read the ratios, which share the machine state.

    python -m benchmarks.bench_diff2_round      (from the repository root)
    python -m benchmarks.bench_diff2_round --methods ghost     (the fast path only: ~30 s)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O

from benchmarks.timing import median_time


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(54, 256), nn.Softplus(), nn.Linear(256, 256), nn.Softplus(), nn.Linear(256, 1))


def timed_rounds(opt, rounds):
    """Median wall time of restart and of difference rounds over ``rounds`` steps."""
    kinds = {"restart": [], "difference": []}
    for _ in range(rounds):
        r = opt.round + 1
        kind = "restart" if (r - 1) % opt.T == 0 else "difference"
        t0 = time.perf_counter()
        opt.step()
        kinds[kind].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in kinds.items() if v}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="ghost,vmap", help="clipping paths to time (default ghost,vmap)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    a = ap.parse_args(argv)
    methods = a.methods.split(",")
    if a.threads:
        torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16_000, 54, generator=g), torch.randn(16_000, generator=g)
    shards = O.data.equal_shards(x, y, 10)
    mech = M.DIFF2GD(rounds=2000, restart_interval=20, clients=10, n_min=1600)
    rep = mech.calibrate(3.0, 1e-5, "tight")

    model = mlp()
    sgd = torch.optim.SGD(model.parameters(), lr=1e-3)

    def plain():
        sgd.zero_grad()
        O.squared_loss(model(x), y).mean().backward()
        sgd.step()

    base = median_time(plain, 7)
    print(f"{'non-private full-batch gradient step':44s} {base * 1e3:9.1f} ms   1.00x")
    for method, n_rounds in (("ghost", 21), ("vmap", 3)):
        if method not in methods:
            continue
        opt = O.DIFF2GD(mlp(), O.squared_loss, shards, mech, rep, C1=1.0, C2=1.0, lr=1e-3,
                        clip_method=method, chunk_size=4000)
        t = timed_rounds(opt, n_rounds)
        for kind, v in t.items():
            print(f"{'DIFF2-GD ' + kind + ' round, ' + method:44s} {v * 1e3:9.1f} ms   {v / base:5.2f}x")
        if "difference" in t:
            avg = (t["restart"] + (opt.T - 1) * t["difference"]) / opt.T
            print(f"{'DIFF2-GD round (T = 20 average), ' + method:44s} {avg * 1e3:9.1f} ms   {avg / base:5.2f}x")


if __name__ == "__main__":
    main()
