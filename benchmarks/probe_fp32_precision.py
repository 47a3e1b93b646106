"""How far one record moves a float32 release when the user lets float32 products round their inputs
(TF32 on CUDA under ``torch.set_float32_matmul_precision("high")``, bf16 on AMX CPUs under
``"medium"``), with the releases' guard (``dpcalib.optim.clipping.precision.exact_float32``) off and on.

For the benchmark models (the papers' MLP, the GroupNorm CNN, the small transformer; small widths)
and each clipping path (the MLP: ghost and vmap; the others: the per-layer path and vmap), C in
{1e-3, 1}: leave-one-out (add/remove, and replace-one by a held-out record) of ``clipped_grad_sum`` on
``--n`` records, every third record checked.  Printed per model: the worst move / claimed
sensitivity, guard off then on.  Above 1 + 1e-5 (beyond a sum's own float rounding) a record moved
the release by more than its sensitivity.

    python -m benchmarks.probe_fp32_precision [--device cpu|cuda] [--level high|medium] [--n 24]
"""

from __future__ import annotations

import argparse
import sys

import torch

from benchmarks import fuzz_clipping as F
from benchmarks import models as BM
from dpcalib.optim.clipping import precision

KINDS = ("mlp", "cnn", "transformer")


def set_level(level: str) -> None:
    """The user's float32 settings: products and convolutions at ``level`` on every backend."""
    torch.set_float32_matmul_precision(level)
    conv = {"highest": "ieee", "high": "tf32", "medium": "bf16"}[level]
    torch.backends.mkldnn.conv.fp32_precision = conv
    torch.backends.cudnn.conv.fp32_precision = "tf32" if conv != "ieee" else "ieee"


def worst(kind: str, device: str, n: int) -> float:
    model = BM.model(kind, torch.float32, small=True).to(device)
    x, y = BM.batch(kind, n + 1, torch.float32, small=True)
    x, y = x.to(device), y.to(device)
    out = 0.0
    for C in (1e-3, 1.0):
        for method in (("ghost", "vmap") if kind == "mlp" else ("auto", "vmap")):
            rows, _ = F.leave_one_out(model, x[:n], y[:n], (x[n], y[n]), C=C, kind="gradient", step=0.0,
                                      method=method, chosen=range(0, n, 3), loss_fn=BM.ce_loss,
                                      neighbours=lambda xi, yi, h: {"another record": h})
            out = max(out, max(r["move"] / r["claim"] for r in rows))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--level", default="medium", choices=("highest", "high", "medium"),
                    help="the user's torch.set_float32_matmul_precision (default medium)")
    ap.add_argument("--n", type=int, default=24, help="records (default 24)")
    a = ap.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda: no CUDA device here", file=sys.stderr)
        return 2
    if a.n < 3:
        print(f"--n {a.n}: must be at least 3", file=sys.stderr)
        return 2
    set_level(a.level)
    print(f"device {a.device}, level {a.level}, torch {torch.__version__}")
    print(f"{'model':12s} {'guard off':>12s} {'guard on':>12s}   (worst move / sensitivity)")
    keep = precision.EXACT_FLOAT32
    try:
        for kind in KINDS:
            r = []
            for guard in (False, True):
                precision.EXACT_FLOAT32 = guard
                r.append(worst(kind, a.device, a.n))
            print(f"{kind:12s} {r[0]:12.7f} {r[1]:12.7f}", flush=True)
    finally:
        precision.EXACT_FLOAT32 = keep
    return 0


if __name__ == "__main__":
    sys.exit(main())
