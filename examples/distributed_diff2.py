"""DIFF2-GD with one client per process, on torch.distributed.

One machine, 4 clients (gloo, CPU):

    torchrun --standalone --nproc-per-node 4 examples/distributed_diff2.py --rounds 200

Several machines (the same command on each; node 0's address as the rendezvous endpoint):

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST0:29400 \
        --rdzv-id dpcalib-run-1 examples/distributed_diff2.py --rounds 200

Every rank builds the same synthetic California-shaped dataset and keeps only its shard (in a
real deployment each client loads its own data).  Rank 0 is the server: it draws the DP noise
and prints the metrics.  ``--checkpoint PATH`` writes PATH.rank<r> every 50 rounds; rerun with
``--resume`` to continue a stopped run.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O
from dpcalib.optim.algorithms import distributed as D


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--restart-interval", type=int, default=20)
    ap.add_argument("--epsilon", type=float, default=3.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a dead/hung peer stops the run")
    ap.add_argument("--checkpoint")
    ap.add_argument("--resume", action="store_true")
    a = ap.parse_args(argv)

    D.init_process_group(a.backend, timeout_s=a.timeout)            # RANK, WORLD_SIZE from torchrun
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    if a.backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    device = "cuda" if a.backend == "nccl" else "cpu"
    # seed 0: every rank must build the same data and split (no seed would draw fresh data per rank)
    data = O.data.prepare(*O.data.synthetic("california", seed=0), seed=0)
    shard = data.shards(world)[rank]
    mech = M.DIFF2GD(a.rounds, a.restart_interval, world, data.n_min(world))
    rep = mech.calibrate(a.epsilon, a.delta, method="tight")
    torch.manual_seed(0)                                            # the same initial model on every rank
    model = nn.Sequential(nn.Linear(8, 10), nn.Softplus(), nn.Linear(10, 1)).to(device)
    # no seed: the noise comes from fresh entropy, drawn by rank 0 and shared inside the process group only
    opt = D.DistributedDIFF2GD(model, O.squared_loss, shard, mech, rep, C1=1.0, C2=10.0, lr=0.125)
    if a.resume:
        opt.load_checkpoint(a.checkpoint)
    try:
        opt.run(log_every=50, progress=False, checkpoint=a.checkpoint, checkpoint_every=50 if a.checkpoint else None)
    except D.DistributedRunError as exc:
        print(f"dpcalib: error: {exc}", file=sys.stderr)
        D.abandon(1)                    # a peer is gone: the process group cannot be torn down
    if rank == 0:
        for m in opt.metrics:
            print(f"round {m['round']:5d}  loss {m['loss']:.5f}  grad norm {m['grad_norm']:.5f}  "
                  f"eps {m['epsilon']:.4f}")
    D.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
