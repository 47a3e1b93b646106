"""What the engine's record-mixing check costs (issue 72; dpcalib.optim.engine.module), on the small MLP and the
small GroupNorm CNN of benchmarks/models.py, one process, one thread, everything timed side by side in turns:

* ``step``: one DP-SGD step through ``PrivacyEngine.make_private`` -- ``zero_grad``, forward, mean loss,
  ``backward``, ``step`` -- on a batch the schedule does not probe;
* ``probe``: the record probe on the same batch (``PrivateModule.check_records``: a float64 forward and the last
  record's loss back-propagated, the float64 forward again with record 0 changed) -- what a probed batch adds;
* ``loo``: the alternative weighed and not chosen, a leave-one-out check of the release: the clipped sum of the
  batch without one record (its forward, backward and clipped sum) compared with the batch's;
* ``run``: a Poisson run of ``STEPS`` steps (``--steps``: for both models; expected batch ``B``) as the engine
  runs it, the probes where the schedule puts them: how many batches it probed, the seconds spent in those
  after the first (a timer around the module's survey; the first batch's survey ran before this check too) and
  the run's time against its time without them.

* ``projected``: the batches the schedule would probe in Poisson runs of 10^3, 10^4 and 10^5 steps (its own
  arithmetic on drawn batch sizes, no model), and what they would add: probes x probe / (steps x step).

Each figure is the median of ``--rounds`` turns (each turn the median of ``--repeats`` calls: among the steps a
few are 2^j-th batches, which the median leaves out); ratios are to ``step`` of the same turn.  (Timing the run
against a second run probed at its first batch only was tried: on a shared machine two runs differed by more
than the probes cost.)

    python -m benchmarks.bench_mixing_check [--rounds 3] [--repeats 20] [--steps N]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch
from torch.nn import functional as Fn

from benchmarks import models as BM
from benchmarks.timing import median_time

BATCH = {"mlp": 64, "cnn": 32}
STEPS = {"mlp": 1000, "cnn": 200}      # the Poisson run's steps
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


def _run(kind: str, steps: int) -> tuple:
    """A Poisson run of ``steps`` steps: ``(seconds, seconds in the probes after the first, batches probed)``."""
    m, opt, loader, _ = _engine(kind, 16 * BATCH[kind], True, steps)
    spent = []

    def timed(*a, survey=m._survey):
        t = time.perf_counter()
        try:
            survey(*a)
        finally:
            spent.append(time.perf_counter() - t)
    m._survey = timed
    t0, k = time.perf_counter(), 0
    while k < steps:
        for xb, yb in loader:
            _step(m, opt, xb, yb)
            k += 1
            if k == steps:
                break
    return time.perf_counter() - t0, sum(spent[1:]), m.probes


def projected(B: int, steps: int, seed: int = 0) -> int:
    """The batches the schedule probes in a Poisson run of ``steps`` steps, expected batch ``B`` (rate 1/16)."""
    from dpcalib.optim.clipping.records import ProbeSchedule

    sched, probes = ProbeSchedule(), 0
    for n in np.random.default_rng(seed).binomial(16 * B, 1 / 16, steps).tolist():
        if n >= 2 and (due := sched.due((n,), sched.largest is None)) is not None:
            sched.done(due)
            probes += 1
    return probes


def measure(kind: str, rounds: int, repeats: int, steps: int) -> dict:
    """The figures of one model (see the module text)."""
    B = BATCH[kind]
    m, opt, _, (x, y) = _engine(kind, B, False, 10 ** 6)
    xb, yb = x[:B], y[:B]
    _step(m, opt, xb, yb)                       # the first batch: probed, outside the timings
    rows = {"step": [], "probe": [], "loo": [], "run": [], "in probes": []}
    probes = None
    for _ in range(rounds):
        rows["step"].append(median_time(lambda: _step(m, opt, xb, yb), repeats))
        rows["probe"].append(median_time(lambda: m.check_records(xb), repeats))
        rows["loo"].append(median_time(lambda: _loo(m, xb, yb), repeats))
        t, t_probes, probes = _run(kind, steps)
        rows["run"].append(t)
        rows["in probes"].append(t_probes)
    med = {k: statistics.median(v) for k, v in rows.items()}
    return {"kind": kind, "B": B, "ms": {k: 1e3 * v for k, v in med.items()},
            "ratio": {"probe / step": med["probe"] / med["step"], "loo / step": med["loo"] / med["step"],
                      "run / run without": med["run"] / (med["run"] - med["in probes"])},
            "probed": probes, "steps": steps,
            "projected": {t: projected(B, t) for t in (10 ** 3, 10 ** 4, 10 ** 5)}}


def main(argv=None) -> None:
    """Print the table (markdown) of every model.

    Args:
        argv: the command line (None: ``sys.argv``).
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    warnings.simplefilter("ignore")
    print("| model | B | step ms | probe ms | probe / step | leave-one-out ms | loo / step | Poisson run: batches "
          "probed | run s | in the probes after the first s | run / run without them |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    out = []
    for kind in ("mlp", "cnn"):
        r = measure(kind, a.rounds, a.repeats, a.steps or STEPS[kind])
        out.append(r)
        ms, q = r["ms"], r["ratio"]
        print(f"| {kind} | {r['B']} | {ms['step']:.2f} | {ms['probe']:.2f} | {q['probe / step']:.2f} | "
              f"{ms['loo']:.2f} | {q['loo / step']:.2f} | {r['probed']} of {r['steps']} | {ms['run'] / 1e3:.2f} | "
              f"{ms['in probes'] / 1e3:.3f} | {q['run / run without']:.3f} |")
    print()
    print("| model | steps | batches probed (projected) | added to the run |")
    print("|---|---|---|---|")
    for r in out:
        for t, n in r["projected"].items():
            print(f"| {r['kind']} | {t} | {n} | {100 * n * r['ratio']['probe / step'] / t:.2f} % |")


if __name__ == "__main__":
    main()
