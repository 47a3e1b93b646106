"""What computing gradient differences in float64 costs (dpcalib.optim.clipping.precision), on the
model kinds users bring: the clipped difference sum of a float32 model as released (float64) beside
the same computed in float32 (the releases before: unsound where products round by the batch).

    python -m benchmarks.bench_difference_precision [--models mlp,cnn,transformer] [--rounds 5] [--n 64] [--device cuda]

Per model (benchmarks/models.py: the papers' MLP, the GroupNorm CNN, the small transformer; the
"auto" clipping path each takes) and batch of ``--n`` records at two points 1e-3 apart, the two
computations take turns ``--rounds`` times in one process (one call each per round, after a warm-up
of both); printed: the median and the min-max of each, and the ratio of the medians.  One run on a
noisy machine: read the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from benchmarks import models as BM
from dpcalib.optim.clipping import precision
from dpcalib.optim.clipping.paths import clip_path, clipped_grad_diff_sum

KINDS = ("mlp", "cnn", "transformer")


def _sync(device) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def _timed(f, dtype, device="cpu") -> float:
    keep = precision.DIFFERENCE_DTYPE
    precision.DIFFERENCE_DTYPE = dtype
    try:
        _sync(device)
        t0 = time.perf_counter()
        f()
        _sync(device)
        return time.perf_counter() - t0
    finally:
        precision.DIFFERENCE_DTYPE = keep


def measure(kind: str, rounds: int, n: int, device: str = "cpu") -> dict:
    model = BM.model(kind).to(device)
    x, y = BM.batch(kind, n)
    x, y = x.to(device), y.to(device)
    params = {k: v.detach() for k, v in model.named_parameters()}
    g = torch.Generator().manual_seed(1)
    prev = {k: v + 1e-3 * torch.randn(v.shape, generator=g).to(device) for k, v in params.items()}

    def f():
        clipped_grad_diff_sum(model, BM.ce_loss, x, y, 1.0, params, prev)

    times = {torch.float64: [], torch.float32: []}
    for dt in times:                                   # warm-up, untimed
        _timed(f, dt, device)
    for _ in range(rounds):
        for dt in times:
            times[dt].append(_timed(f, dt, device))
    return {"path": clip_path(model), "wide": times[torch.float64], "narrow": times[torch.float32]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(KINDS))
    ap.add_argument("--rounds", default="5")
    ap.add_argument("--n", default="64")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.exit(2, "bench_difference_precision: error: --device=cuda is not allowed here: no CUDA device\n")
    kinds = [k.strip() for k in a.models.split(",") if k.strip()]
    if not kinds or any(k not in KINDS for k in kinds):
        ap.exit(2, f"bench_difference_precision: error: --models={a.models!r} is not allowed: expected a "
                   f"comma-separated list from {', '.join(KINDS)}\n")
    for name, value, lo, hi in (("--rounds", a.rounds, 1, 1000), ("--n", a.n, 1, 100_000)):
        if not value.isdigit() or not lo <= int(value) <= hi:
            ap.exit(2, f"bench_difference_precision: error: {name}={value!r} is not allowed: expected an integer "
                       f"in {lo}..{hi}\n")
    if a.device == "cuda":
        print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'model':12s} {'path':7s} {'float64 (released)':>26s} {'float32 (before)':>26s}  ratio")
    for kind in kinds:
        r = measure(kind, int(a.rounds), int(a.n), a.device)
        w, s = r["wide"], r["narrow"]

        def cell(ts):
            return f"{statistics.median(ts) * 1e3:8.1f} ms ({min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f})"
        print(f"{kind:12s} {r['path']:7s} {cell(w):>26s} {cell(s):>26s}  {statistics.median(w) / statistics.median(s):5.2f}x",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
