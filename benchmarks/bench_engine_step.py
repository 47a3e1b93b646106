"""One DP-SGD training step in a user's own loop -- ``zero_grad``, forward, mean loss, ``backward``,
``step`` -- through dpcalib's engine (``dpcalib.optim.PrivacyEngine``) against Opacus's two modes
(hooks, ghost clipping) and against dpcalib's reference optimizer's step, on the papers' MLP, the
benchmark's GroupNorm CNN, a plain Conv(bias)-GroupNorm CNN without residuals and the small
transformer (benchmarks/models.py).  Every contender runs in its own process (peak memory is that
process's max RSS), on the same model, batch and seed, with SGD as the wrapped optimizer; time is the
median of ``--steps`` steps after two warm-up steps.  The contenders take turns, ``--rounds`` times;
each figure is the median over the rounds, with the spread (min-max over the rounds) beside it.
One run: read the ratios, measured side by side.

    python -m benchmarks.bench_engine_step [--models mlp,cnn,plaincnn,transformer] [--rounds 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys

from benchmarks.timing import median_time

BATCH = {"mlp": 256, "cnn": 64, "plaincnn": 64, "transformer": 64}
STEPS = {"mlp": 100, "cnn": 5, "plaincnn": 5, "transformer": 11}
CONTENDERS = ("engine", "reference", "opacus-hooks", "opacus-ghost")


def _one(kind: str, who: str, steps: int, threads: int) -> dict:
    import warnings

    import torch
    from torch import nn

    from benchmarks import models as BM

    warnings.simplefilter("ignore")
    torch.set_num_threads(threads)
    model = BM.model(kind)
    x, y = BM.batch(kind, BATCH[kind])
    B, lr, C, z = BATCH[kind], 0.05, 1.0, 1.0
    crit = nn.CrossEntropyLoss()                           # mean, as users write it
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=B)
    if who == "engine":
        from dpcalib.optim import PrivacyEngine

        m, opt, _ = PrivacyEngine().make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
                                                 data_loader=loader, noise_multiplier=z, max_grad_norm=C,
                                                 steps=steps + 2)

        def step():
            opt.zero_grad()
            crit(m(x), y).backward()
            opt.step()
    elif who == "reference":
        from dpcalib import mechanisms as M
        from dpcalib.optim import DPSGD

        opt = DPSGD(model, BM.ce_loss, (x, y), M.DPSGD(sampling_rate=1.0, steps=steps + 2), {"noise_multiplier": z},
                    C=C, lr=lr)
        step = opt.step
    elif who == "opacus-hooks":
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        gsm = GradSampleModule(model, loss_reduction="mean")
        opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=lr), noise_multiplier=z, max_grad_norm=C,
                          expected_batch_size=B, loss_reduction="mean")

        def step():
            opt.zero_grad()
            crit(gsm(x), y).backward()
            opt.step()
    else:
        from opacus.grad_sample import GradSampleModuleFastGradientClipping
        from opacus.optimizers import DPOptimizerFastGradientClipping
        from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

        gsm = GradSampleModuleFastGradientClipping(model, max_grad_norm=C, use_ghost_clipping=True,
                                                   loss_reduction="mean")
        opt = DPOptimizerFastGradientClipping(torch.optim.SGD(gsm.parameters(), lr=lr), noise_multiplier=z,
                                              max_grad_norm=C, expected_batch_size=B, loss_reduction="mean")
        dploss = DPLossFastGradientClipping(gsm, opt, crit, loss_reduction="mean")

        def step():
            opt.zero_grad()
            dploss(gsm(x), y).backward()
            opt.step()
    return {"model": kind, "who": who, "median_s": median_time(step, steps, warmup=2),
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,cnn,plaincnn,transformer")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "WHO"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_one(a.child[0], a.child[1], a.steps, a.threads)))
        return 0
    print(f"one DP-SGD step in a user loop, each contender in its own process ({a.threads} threads), {a.rounds} "
          "rounds of turns: medians over the rounds [min-max]")
    print(f"{'model':12s} {'contender':13s} {'step ms':>9s} {'[min-max]':>17s} {'max RSS MiB':>12s}")
    for kind in a.models.split(","):
        runs = {}
        for _ in range(a.rounds):
            for who in CONTENDERS:
                r = subprocess.run([sys.executable, "-m", "benchmarks.bench_engine_step", "--child", kind, who,
                                    "--steps", str(a.steps or STEPS[kind]), "--threads", str(a.threads)],
                                   capture_output=True, text=True)
                if r.returncode:
                    print(f"{kind:12s} {who:13s} failed: {r.stderr.strip().splitlines()[-1]}")
                    continue
                runs.setdefault(who, []).append(json.loads(r.stdout.strip().splitlines()[-1]))
        med = {w: (statistics.median(r["median_s"] for r in rs), min(r["median_s"] for r in rs),
                   max(r["median_s"] for r in rs), statistics.median(r["max_rss_mib"] for r in rs))
               for w, rs in runs.items()}
        for w, (t, lo, hi, rss) in med.items():
            print(f"{kind:12s} {w:13s} {t * 1e3:9.1f} [{lo * 1e3:7.1f}-{hi * 1e3:7.1f}] {rss:12.0f}")
        best = min(("opacus-hooks", "opacus-ghost"), key=lambda w: med[w][0])
        e = med["engine"]
        print(f"{kind:12s} engine / {best}: time {e[0] / med[best][0]:.2f}x, memory {e[3] / med[best][3]:.2f}x; "
              f"engine / reference: time {e[0] / med['reference'][0]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
