"""One DP-SGD step (per-sample clipping + noise + update) against Opacus's hooks and ghost clipping and
against a non-private step, on the papers' MLP, a GroupNorm CNN and a small transformer
(benchmarks/models.py).  Every contender runs in its own process (so that peak memory is that
process's max RSS), on the same model, batch and seed; time is the median of ``--steps`` steps after
two warm-up steps.  On the MLP a fifth contender, "floor", is the DP-SGD step written out by hand
with nothing but its arithmetic (no library, no sampling, no bookkeeping): what no implementation
of the step on this machine can beat by much.  The contenders take turns, ``--rounds`` times (a
slow spell of a shared machine then hits them all); each figure is the median over the rounds.  One
run; read the ratios, measured side by side.

    python -m benchmarks.bench_dpsgd_step [--models mlp,cnn,transformer] [--steps 7] [--threads 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys

from benchmarks.timing import median_time

BATCH = {"mlp": 256, "cnn": 64, "transformer": 64}
#: steps timed per model at the default --steps (the MLP's steps take a millisecond: more of them)
STEPS = {"mlp": 200, "cnn": 7, "transformer": 15}
CONTENDERS = ("non-private", "dpcalib", "opacus-hooks", "opacus-ghost")
#: a hand-written DP-SGD step with nothing but its arithmetic (:func:`_floor_step`): MLP only
FLOOR = "floor"


def _floor_step(model, x, y, scale: float, C: float, z: float):
    """The MLP's DP-SGD step written out by hand with nothing but its arithmetic, as a floor for any
    library: forward; back-propagation to the layer outputs only; ghost norms ``||g||^2 (||a||^2 + 1)``
    (float32, no rounding bound); factors ``C / max(norm, C)``; the weighted products ``(f g)^T a``
    written into one flat buffer; one standard normal per parameter; ``p -= scale (sum + z C noise)``.
    No sampling, no copy of the iterate, no record, no checks."""
    import torch
    from torch.nn import functional as Fn

    from benchmarks import models as BM

    layers = [m for m in model if isinstance(m, torch.nn.Linear)]
    params = [t for m in layers for t in (m.weight, m.bias)]
    flat = torch.empty(sum(p.numel() for p in params))
    views, i = [], 0
    for p in params:
        views.append(flat[i:i + p.numel()].view_as(p))
        i += p.numel()
    noise = torch.empty_like(flat)
    gen = torch.Generator().manual_seed(0)

    def step():
        h, ins, outs = x, [], []
        for m in model:
            if isinstance(m, torch.nn.Linear):
                out = Fn.linear(h, m.weight.detach(), m.bias.detach())
                if not out.requires_grad:
                    out.requires_grad_(True)
                ins.append(h.detach())
                outs.append(out)
                h = out
            else:
                h = m(h)
        gs = torch.autograd.grad(BM.ce_loss(h, y).sum(), outs)
        norms = sum((g * g).sum(1) * ((a * a).sum(1) + 1.0) for a, g in zip(ins, gs)).sqrt_()
        f = C / torch.clamp(norms, min=C)
        for j, (a, g) in enumerate(zip(ins, gs)):
            fg = g * f[:, None]
            torch.mm(fg.T, a, out=views[2 * j])
            torch.sum(fg, 0, out=views[2 * j + 1])
        noise.normal_(generator=gen)
        flat.add_(noise, alpha=z * C)
        with torch.no_grad():
            torch._foreach_add_(params, views, alpha=-scale)
    return step


def _one(kind: str, who: str, steps: int, threads: int) -> dict:
    """Runs in the child process: build, warm up, time ``steps`` steps."""
    import torch
    from torch import nn

    from benchmarks import models as BM

    torch.set_num_threads(threads)
    model = BM.model(kind)
    x, y = BM.batch(kind, BATCH[kind])
    B, lr, C, z = BATCH[kind], 0.05, 1.0, 1.0
    if who == "non-private":
        # the mean loss: the same update scale as the private contenders' (lr / B) (sum clipped + noise);
        # with the summed loss at this lr the iterates left the floats within a few dozen steps
        opt = torch.optim.SGD(model.parameters(), lr=lr)

        def step():
            opt.zero_grad()
            BM.ce_loss(model(x), y).mean().backward()
            opt.step()
    elif who == "floor":
        step = _floor_step(model, x, y, lr / B, C, z)
    elif who == "dpcalib":
        # the library's optimizer step as a user runs it (sampling, clipping, the release through the
        # noise source, the update, the output reservoir): Poisson sampling at q = 1 over the batch's
        # records draws every record every step, so the batch is the same as the other contenders'
        from dpcalib import mechanisms as M
        from dpcalib.optim import DPSGD
        from dpcalib.optim.clipping.paths import clip_path

        path = clip_path(model)
        opt = DPSGD(model, BM.ce_loss, (x, y), M.DPSGD(sampling_rate=1.0, steps=steps + 2), {"noise_multiplier": z},
                    C=C, lr=lr)
        step = opt.step
    elif who == "opacus-hooks":
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        gsm = GradSampleModule(model, loss_reduction="sum")
        opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=lr / B), noise_multiplier=z, max_grad_norm=C,
                          expected_batch_size=B, loss_reduction="sum")

        def step():
            opt.zero_grad()
            BM.ce_loss(gsm(x), y).sum().backward()
            opt.step()
    else:
        from opacus.grad_sample import GradSampleModuleFastGradientClipping
        from opacus.optimizers import DPOptimizerFastGradientClipping
        from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

        gsm = GradSampleModuleFastGradientClipping(model, max_grad_norm=C, use_ghost_clipping=True,
                                                   loss_reduction="sum")
        opt = DPOptimizerFastGradientClipping(torch.optim.SGD(gsm.parameters(), lr=lr / B), noise_multiplier=z,
                                              max_grad_norm=C, expected_batch_size=B, loss_reduction="sum")
        crit = DPLossFastGradientClipping(gsm, opt, nn.CrossEntropyLoss(reduction="sum"), loss_reduction="sum")

        def step():
            opt.zero_grad()
            crit(gsm(x), y).backward()
            opt.step()
    out = {"model": kind, "who": who, "median_s": median_time(step, steps, warmup=2),
           "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    if who == "dpcalib":
        out["path"] = path
        # where the step's time goes, in the same process after the timed steps: the clipped sum alone
        # (the per-example part) and the noise draw alone (one standard normal per parameter)
        from dpcalib.optim.clipping.paths import clipped_grad_sum

        params = {k: v.detach() for k, v in model.named_parameters()}
        d = sum(v.numel() for v in params.values())
        g = torch.Generator().manual_seed(0)
        out["clip_s"] = median_time(lambda: clipped_grad_sum(model, BM.ce_loss, x, y, C, params), steps, warmup=1)
        out["noise_s"] = median_time(lambda: torch.randn(d, generator=g), steps, warmup=1)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,cnn,transformer")
    ap.add_argument("--steps", type=int, default=None, help="steps timed (default: 200 MLP, 7 CNN, 15 transformer)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of turns (one process per contender per round); medians over rounds are shown")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "WHO"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_one(a.child[0], a.child[1], a.steps, a.threads)))
        return 0
    print(f"DP-SGD step, median of {a.steps or 'the default number of'} steps, each contender in its own process "
          f"({a.threads} threads), {a.rounds} rounds of turns: medians over the rounds")
    print(f"{'model':12s} {'contender':13s} {'step ms':>9s} {'x non-private':>14s} {'max RSS MiB':>12s} "
          f"{'x best Opacus':>14s}")
    for kind in a.models.split(","):
        runs = {}
        for _ in range(a.rounds):          # the contenders take turns, so that a slow spell hits them all
            for who in CONTENDERS + ((FLOOR,) if kind == "mlp" else ()):
                r = subprocess.run([sys.executable, "-m", "benchmarks.bench_dpsgd_step", "--child", kind, who,
                                    "--steps", str(a.steps or STEPS[kind]), "--threads", str(a.threads)],
                                   capture_output=True, text=True)
                if r.returncode:
                    print(f"{kind:12s} {who:13s} failed: {r.stderr.strip().splitlines()[-1]}")
                    continue
                runs.setdefault(who, []).append(json.loads(r.stdout.strip().splitlines()[-1]))
        rows = {who: {**rs[0], **{k: statistics.median(r[k] for r in rs)
                                  for k in ("median_s", "max_rss_mib", "clip_s", "noise_s") if k in rs[0]}}
                for who, rs in runs.items()}
        base = rows["non-private"]["median_s"]
        best = min((rows[w] for w in ("opacus-hooks", "opacus-ghost") if w in rows), key=lambda r: r["median_s"])
        for who, r in rows.items():
            rel = r["median_s"] / best["median_s"]
            extra = f" ({r['path']} path)" if "path" in r else (" (hand-written floor)" if who == FLOOR else "")
            print(f"{kind:12s} {who:13s} {r['median_s'] * 1e3:9.1f} {r['median_s'] / base:13.2f}x "
                  f"{r['max_rss_mib']:12.0f} {rel:13.2f}x{extra}")
        dp = rows["dpcalib"]
        print(f"{kind:12s} dpcalib / best Opacus ({best['who']}): time {dp['median_s'] / best['median_s']:.2f}x, "
              f"peak memory {dp['max_rss_mib'] / best['max_rss_mib']:.2f}x")
        print(f"{kind:12s} dpcalib step = clipped sum {dp['clip_s'] * 1e3:.1f} ms ({dp['clip_s'] / base:.2f}x "
              f"non-private) + noise draw {dp['noise_s'] * 1e3:.2f} ms ({dp['noise_s'] / base:.2f}x) + the rest "
              f"{(dp['median_s'] - dp['clip_s'] - dp['noise_s']) * 1e3:.2f} ms "
              f"({(dp['median_s'] - dp['clip_s'] - dp['noise_s']) / base:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
