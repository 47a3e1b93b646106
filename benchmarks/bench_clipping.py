"""Per-sample clipping cost on the 54 -> 256 -> 256 -> 1 MLP, n = 16 000 (one run; read the ratios).

    python -m benchmarks.bench_clipping

Ratios to a non-private full-batch gradient step (forward + backward of the summed loss) for:
clipped gradient sum (ghost, vmap) and clipped gradient-difference sum (ghost, vmap), and beside
them the ghost difference formula of the first release (unsound in float32, see
optim/clipping/paths.py) and the difference sum computed in the model's float32 (the releases
before differences were computed in float64: unsound where the machine's products round a row by
the batch, see optim/clipping/precision.py), to show what soundness costs.
"""

import torch
from torch import nn

from dpcalib.optim.clipping import precision
from dpcalib.optim.clipping.paths import clipped_grad_diff_sum, clipped_grad_sum

from benchmarks.fuzz_clipping import expanded_ghost_diff
from benchmarks.timing import median_time


def sq_loss(out, y):
    return 0.5 * (out.squeeze(-1) - y) ** 2


def _in_float32(f):
    """``f()`` with differences computed in the working float32, as before they were widened."""
    keep = precision.DIFFERENCE_DTYPE
    precision.DIFFERENCE_DTYPE = torch.float32
    try:
        return f()
    finally:
        precision.DIFFERENCE_DTYPE = keep


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(54, 256), nn.Softplus(), nn.Linear(256, 256), nn.Softplus(), nn.Linear(256, 1))
    x, y = torch.randn(16_000, 54), torch.randn(16_000)
    p = {k: v.detach() for k, v in model.named_parameters()}
    prev = {k: v + 1e-3 * torch.randn_like(v) for k, v in p.items()}

    def plain():
        model.zero_grad()
        sq_loss(model(x), y).sum().backward()

    base = median_time(plain, 5)
    rows = [("non-private full-batch gradient", base)]
    rows.append(("clipped grad sum, ghost", median_time(lambda: clipped_grad_sum(model, sq_loss, x, y, 1.0, method="ghost"), 5)))
    rows.append(("clipped grad sum, vmap", median_time(lambda: clipped_grad_sum(model, sq_loss, x, y, 1.0, method="vmap",
                                                                         chunk_size=4000), 2)))
    rows.append(("clipped diff sum, ghost", median_time(lambda: clipped_grad_diff_sum(model, sq_loss, x, y, 1.0, p, prev,
                                                                                 method="ghost"), 5)))
    rows.append(("clipped diff sum, ghost, in float32 (unsound)", median_time(
        lambda: _in_float32(lambda: clipped_grad_diff_sum(model, sq_loss, x, y, 1.0, p, prev, method="ghost")), 5)))
    rows.append(("clipped diff sum, ghost, expanded (unsound)", median_time(
        lambda: expanded_ghost_diff(model, sq_loss, x, y, 1.0, p, prev, method="ghost"), 5)))
    rows.append(("clipped diff sum, vmap", median_time(lambda: clipped_grad_diff_sum(model, sq_loss, x, y, 1.0, p, prev,
                                                                                method="vmap", chunk_size=4000), 2)))
    for name, t in rows:
        print(f"{name:46s} {t * 1e3:9.1f} ms   {t / base:6.2f}x")


if __name__ == "__main__":
    main()
