"""What the engine's record-mixing check costs (issue 72; dpcalib.optim.engine.module), on the small MLP and the
small GroupNorm CNN of benchmarks/models.py, one process, one thread, everything timed side by side in turns:

* ``step``: one DP-SGD step through ``PrivacyEngine.make_private`` -- ``zero_grad``, forward, mean loss,
  ``backward``, ``step`` -- on a batch the schedule does not probe;
* ``probe``: the record probe on the same batch (``PrivateModule.check_records``: a float64 forward and the last
  record's loss back-propagated, the float64 forward again with record 0 changed) -- what a probed batch adds;
* ``loo``: the alternative weighed and not chosen, a leave-one-out check of the release: the clipped sum of the
  batch without one record (its forward, backward and clipped sum) compared with the batch's;
* ``run``: a Poisson run of ``--steps`` steps (expected batch ``B``) as the engine runs it (the probes where the
  schedule puts them) against the same run with only the first batch probed, in turns; and how many batches
  the schedule probed.

Each figure is the median of ``--rounds`` turns (each turn the median of ``--repeats`` calls); ratios are to
``step`` of the same turn.

    python -m benchmarks.bench_mixing_check [--rounds 5] [--repeats 20] [--steps 400]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from torch.nn import functional as Fn

from benchmarks import models as BM
from benchmarks.timing import median_time

BATCH = {"mlp": 64, "cnn": 32}
C = 1.0


def _engine(kind: str, n: int, poisson: bool, steps: int):
    import dpcalib.optim as O

    model = BM.model(kind, small=True)
    x, y = BM.batch(kind, n, small=True)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH[kind])
    m, opt, loader = O.PrivacyEngine().make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                                                    data_loader=loader, noise_multiplier=1.0, max_grad_norm=C, seed=0,
                                                    poisson_sampling=poisson, steps=steps, allow_overspend=True)
    return m, opt, loader, (x, y)


def _step(m, opt, x, y):
    opt.zero_grad()
    Fn.cross_entropy(m(x), y).backward()
    opt.step()


def _loo(m, x, y):
    m.zero_grad()
    Fn.cross_entropy(m(x[1:]), y[1:]).backward()
    s = m.captures[-1].clipped_sum(C)
    m.zero_grad()
    return s


def _run(kind: str, steps: int, schedule: bool) -> tuple:
    """Seconds of a Poisson run of ``steps`` steps, and the batches probed (``schedule`` False: the first only)."""
    m, opt, loader, _ = _engine(kind, 16 * BATCH[kind], True, steps)
    if not schedule:
        m._due = lambda x, rows, due=m._due: due(x, rows) if m.probes == 0 else None
    t0, k = time.perf_counter(), 0
    while k < steps:
        for xb, yb in loader:
            _step(m, opt, xb, yb)
            k += 1
            if k == steps:
                break
    return time.perf_counter() - t0, m.probes


def measure(kind: str, rounds: int, repeats: int, steps: int) -> dict:
    """The figures of one model (see the module text)."""
    B = BATCH[kind]
    m, opt, _, (x, y) = _engine(kind, B, False, 10 ** 6)
    xb, yb = x[:B], y[:B]
    _step(m, opt, xb, yb)                       # the first batch: probed, outside the timings
    rows = {"step": [], "probe": [], "loo": [], "run": [], "run, first batch only": []}
    probes = None
    for _ in range(rounds):
        m._count = 3 * 2 ** 20                  # the next batches are not 2^j-th ones: plain steps
        rows["step"].append(median_time(lambda: _step(m, opt, xb, yb), repeats))
        rows["probe"].append(median_time(lambda: m.check_records(xb), repeats))
        rows["loo"].append(median_time(lambda: _loo(m, xb, yb), repeats))
        t, probes = _run(kind, steps, True)
        rows["run"].append(t)
        rows["run, first batch only"].append(_run(kind, steps, False)[0])
    med = {k: statistics.median(v) for k, v in rows.items()}
    return {"kind": kind, "B": B, "ms": {k: 1e3 * v for k, v in med.items()},
            "ratio": {"probe / step": med["probe"] / med["step"], "loo / step": med["loo"] / med["step"],
                      "run / run, first batch only": med["run"] / med["run, first batch only"]},
            "probed": probes, "steps": steps}


def main(argv=None) -> None:
    """Print the table (markdown) of every model.

    Args:
        argv: the command line (None: ``sys.argv``).
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    warnings.simplefilter("ignore")
    print("| model | B | step ms | probe ms | probe / step | leave-one-out ms | loo / step | Poisson run: probed "
          "batches of steps | run / run probed at its first batch only |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in ("mlp", "cnn"):
        r = measure(kind, a.rounds, a.repeats, a.steps)
        ms, q = r["ms"], r["ratio"]
        print(f"| {kind} | {r['B']} | {ms['step']:.2f} | {ms['probe']:.2f} | {q['probe / step']:.2f} | "
              f"{ms['loo']:.2f} | {q['loo / step']:.2f} | {r['probed']} of {r['steps']} | "
              f"{q['run / run, first batch only']:.3f} |")


if __name__ == "__main__":
    main()
