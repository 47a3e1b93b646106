"""Per-sample clipping on a CUDA device: the clipped sum of a batch's gradients on the path dpcalib
picks (``method="auto"``) and on ``vmap``, against a non-private step (forward, mean loss,
backward) of the same model and batch, for the benchmark models (the papers' MLP, the GroupNorm
CNN, the small transformer), in float32.  Each time is the median of ``--steps`` calls after a
warm-up, with ``torch.cuda.synchronize()`` around every call; contenders alternate over
``--rounds`` rounds and the table reports the median ratio to the non-private step over the
rounds (and its spread).  It also checks that the two paths agree (largest relative difference of
the clipped sums) on the device (relative to the norm of the whole clipped sum: a parameter whose summed gradient is
zero up to rounding, e.g. an attention key bias, has no meaningful relative difference of its own).

    python -m benchmarks.bench_cuda_clipping            # needs a CUDA device; exit 2 without one
    python -m benchmarks.bench_cuda_clipping --device cpu --small --steps 2 --rounds 1   # a dry run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from benchmarks import models
from benchmarks.probe_fp32_precision import set_level
from dpcalib.optim.clipping import clip_path, clipped_grad_sum, precision

BATCH = {"mlp": 256, "cnn": 64, "transformer": 64}


def _sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, steps: int, dev) -> float:
    fn()
    _sync(dev)
    ts = []
    for _ in range(steps):
        _sync(dev)
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def one(kind: str, steps: int, rounds: int, device: str = "cuda", small: bool = False, unguarded: bool = False) -> dict:
    """``unguarded``: also time ``auto`` with the releases' exact-float32 guard off (what it costs where the
    user allowed TF32)."""
    dev = torch.device(device)
    model = models.model(kind, small=small).to(dev)
    x, y = models.batch(kind, BATCH[kind] // (8 if small else 1), small=small)
    x, y = x.to(dev), y.to(dev)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def plain():
        model.zero_grad(set_to_none=True)
        models.ce_loss(model(x), y).mean().backward()

    def clipped(method, guard=True):
        def f():
            keep, precision.EXACT_FLOAT32 = precision.EXACT_FLOAT32, guard
            try:
                return clipped_grad_sum(model, models.ce_loss, x, y, 1.0, params, method=method)
            finally:
                precision.EXACT_FLOAT32 = keep
        return f

    auto, vm = clipped("auto")(), clipped("vmap")()
    a_flat = torch.cat([auto[0][k].reshape(-1) for k in vm[0]])
    v_flat = torch.cat([vm[0][k].reshape(-1) for k in vm[0]])
    diff = float((a_flat - v_flat).norm() / v_flat.norm())          # over the whole clipped sum
    ratios = {"auto": [], "vmap": [], "unguarded": []}
    base = []
    for _ in range(rounds):
        t0 = _timed(plain, steps, dev)
        base.append(t0)
        ratios["auto"].append(_timed(clipped("auto"), steps, dev) / t0)
        ratios["vmap"].append(_timed(clipped("vmap"), steps, dev) / t0)
        if unguarded:
            ratios["unguarded"].append(_timed(clipped("auto", guard=False), steps, dev) / t0)
    return {"model": kind, "batch": x.shape[0], "path": clip_path(model, "auto"),
            "plain_ms": 1e3 * statistics.median(base),
            "unguarded": statistics.median(ratios["unguarded"]) if unguarded else None,
            "auto": statistics.median(ratios["auto"]), "auto_spread": (min(ratios["auto"]), max(ratios["auto"])),
            "vmap": statistics.median(ratios["vmap"]), "vmap_spread": (min(ratios["vmap"]), max(ratios["vmap"])),
            "max_rel_diff": diff}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,cnn,transformer")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="the narrow test models and 1/8 of the batch (a dry run)")
    ap.add_argument("--level", default="highest", choices=("highest", "high", "medium"),
                    help="the user's torch.set_float32_matmul_precision, set before timing (default highest); "
                         "other than highest, 'auto' is also timed with the exact-float32 guard off")
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_cuda_clipping: --device=cuda is not allowed here: no CUDA device (try --device cpu)",
              file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    set_level(a.level)
    off = a.level != "highest"
    print(f"device {name}, torch {torch.__version__}, float32 (user's precision {a.level}), "
          f"median of {a.steps} steps, {a.rounds} alternating rounds")
    print(f"{'model':12s} {'B':>4s} {'path':>7s} {'plain ms':>9s} {'auto/plain':>18s} {'vmap/plain':>18s} "
          f"{'auto vs vmap':>12s}" + ("  auto unguarded/plain" if off else ""))
    for kind in a.models.split(","):
        r = one(kind, a.steps, a.rounds, a.device, a.small, off)
        print(f"{r['model']:12s} {r['batch']:4d} {r['path']:>7s} {r['plain_ms']:9.3f} "
              f"{r['auto']:6.2f}x [{r['auto_spread'][0]:.2f}, {r['auto_spread'][1]:.2f}] "
              f"{r['vmap']:6.2f}x [{r['vmap_spread'][0]:.2f}, {r['vmap_spread'][1]:.2f}] {r['max_rel_diff']:12.2e}"
              + (f"  {r['unguarded']:6.2f}x" if off else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
