"""Opacus's example scripts with Opacus installed, only ``PrivacyEngine`` swapped: dpcalib's epoch time beside
Opacus's, measured side by side in one run (issue 73).

    python -m benchmarks.opacus_examples_speed --examples PATH [--repeats R] [--out FILE]

``PATH`` is the ``examples`` folder of a checkout of Opacus's repository (as for :mod:`benchmarks.opacus_examples`,
whose synthetic datasets and torchvision stub this reuses).  Each script runs twice per repeat, in fresh processes,
the two engines in alternating order: once unchanged (Opacus's engine) and once with its one line ``from opacus import
PrivacyEngine`` made ``from dpcalib.optim import PrivacyEngine`` -- everything else is Opacus's, its
``opacus.layers.DPLSTM`` / ``DPGRU`` / ``DPRNN`` included.  The runner (:data:`RUNNER`) wraps the data loader
``make_private`` returns so that each epoch's training loop is timed from its first batch to its last (test
passes and start-up excluded), runs torch on one thread, and lists every warning the run raised: a
``ClippingFallbackWarning`` means dpcalib took the vmap fallback.  The record gives each run's median epoch time
per engine over the repeats, and the ratio dpcalib / Opacus (below 1: dpcalib faster).  Epoch 1 holds dpcalib's
record probes of the first batches (about ``2 log2(steps)`` in a run, each a few float64 forwards), epoch 2 the
steady state.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.opacus_examples import ROOT, write_names, write_stub

#: the process each script runs in: one thread, the loader make_private returns timed, the warnings listed
RUNNER = r'''
import json, runpy, sys, time, warnings

import torch

torch.set_num_threads(1)
out, engine, stub, script, *argv = sys.argv[1:]
if engine == "opacus":
    from opacus import PrivacyEngine
else:
    from dpcalib.optim import PrivacyEngine
epochs, steps, seen = [], [], []


def timed(loader):
    base = type(loader)

    def __iter__(self):
        t0 = last = time.perf_counter()
        for batch in base.__iter__(self):
            yield batch
            now = time.perf_counter()
            steps.append(now - last)
            last = now
        epochs.append(time.perf_counter() - t0)
    loader.__class__ = type("Timed" + base.__name__, (base,), {"__iter__": __iter__})
    return loader


make = PrivacyEngine.make_private


def make_private(self, *args, **kwargs):
    module, optimizer, loader = make(self, *args, **kwargs)
    return module, optimizer, timed(loader)


PrivacyEngine.make_private = make_private
show = warnings.showwarning
warnings.showwarning = lambda message, category, *a, **k: seen.append(f"{category.__name__}: {str(message)[:160]}")
warnings.simplefilter("always")
sys.path.insert(0, stub)
sys.argv = [script, *argv]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    with open(out, "w") as f:
        json.dump({"epochs": epochs, "steps": steps, "warnings": sorted(set(seen))}, f)
'''

#: the runs timed: a name, the script, its options (two epochs, CPU), the synthetic data's size
RUNS = [
    {"name": "cifar10 --clip_per_layer", "script": "cifar10.py", "n": 2048, "test_n": 128,
     "args": ["--epochs", "2", "--batch-size", "128", "-b", "128", "-j", "0", "--print-freq", "1000",
              "--clip_per_layer"]},
    # one epoch of CIFAR-10's own size (50 000 training images, 390 Poisson batches of 128 expected): the probes'
    # share of a real epoch (their count grows as log2 of the steps)
    {"name": "cifar10 --clip_per_layer, 50000 images", "script": "cifar10.py", "n": 50000, "test_n": 128,
     "args": ["--epochs", "1", "--batch-size", "128", "-b", "128", "-j", "0", "--print-freq", "100000",
              "--clip_per_layer"]},
] + [
    {"name": f"char-lstm --mode {mode}", "script": "char-lstm-classification.py", "names": (4, 640),
     "args": ["--device", "cpu", "--epochs", "2", "-b", "64", "--mode", mode]}
    for mode in ("lstm", "gru", "rnn")
]

SWAP = ("from opacus import PrivacyEngine", "from dpcalib.optim import PrivacyEngine")


def run_once(run: dict, engine: str, examples: Path, folder: Path, stub: Path) -> dict:
    """One run of one script under one engine: ``{"epochs": [seconds, ...], "warnings": [...], "rc": ...}``."""
    text = (examples / run["script"]).read_text()
    if engine == "dpcalib":
        if text.count(SWAP[0]) != 1:
            raise SystemExit(f"{run['script']}: expected one line {SWAP[0]!r}")
        text = text.replace(*SWAP)
    script = folder / f"{engine}_{run['script']}"
    script.write_text(text)
    args = list(run["args"])
    if "names" in run:
        names = folder / "names"
        if not names.exists():
            write_names(names, *run["names"])
        args += ["--data-root", str(names)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_TRAIN_N": str(run.get("n", 0)),
           "BENCH_TEST_N": str(run.get("test_n", 0)), "OMP_NUM_THREADS": "1"}
    out = folder / f"{engine}.json"
    proc = subprocess.run([sys.executable, str(folder / "runner.py"), str(out), engine, str(stub), str(script), *args],
                          cwd=folder, capture_output=True, text=True, env=env, timeout=3600)
    got = json.loads(out.read_text()) if out.exists() else {"epochs": [], "steps": [], "warnings": []}
    got["rc"] = proc.returncode
    got["tail"] = (proc.stdout + proc.stderr).strip().splitlines()[-3:] if proc.returncode else []
    return got


def measure(run: dict, examples: Path, work: Path, stub: Path, repeats: int) -> dict:
    """Both engines ``repeats`` times each, alternating which goes first; the epochs' medians and ratios."""
    folder = work / run["name"].replace(" ", "_").replace("-", "")
    folder.mkdir()
    (folder / "runner.py").write_text(RUNNER)
    times, steps = {"opacus": [], "dpcalib": []}, {"opacus": [], "dpcalib": []}
    warns, failed = {"opacus": set(), "dpcalib": set()}, []
    for r in range(repeats):
        for engine in (("opacus", "dpcalib") if r % 2 == 0 else ("dpcalib", "opacus")):
            got = run_once(run, engine, examples, folder, stub)
            if got["rc"]:
                failed.append((engine, got["tail"]))
            times[engine].append(got["epochs"])
            steps[engine] += got["steps"]
            warns[engine] |= set(got["warnings"])
            print(f"{run['name']:26s} {engine:8s} epochs {['%.2f' % t for t in got['epochs']]} rc={got['rc']}",
                  flush=True)
    n = min(len(e) for t in times.values() for e in t) if all(times.values()) else 0
    med = {e: [statistics.median(t[k] for t in times[e]) for k in range(n)] for e in times}
    return {"name": run["name"], "args": " ".join(run["args"]), "median": med, "raw": times,
            "ratio": [med["dpcalib"][k] / med["opacus"][k] for k in range(n)],
            "step": {e: statistics.median(v) if v else float("nan") for e, v in steps.items()},
            "fallback": sorted(w for w in warns["dpcalib"] if w.startswith("ClippingFallbackWarning")),
            "failed": failed}


def report(rows: list, command: str, repeats: int) -> str:
    """The markdown section of the measurements."""
    import opacus
    import torch

    lines = [
        "## Side by side with Opacus installed, only `PrivacyEngine` swapped", "",
        f"Command: `{command}`. Date: {datetime.date.today().isoformat()}. Machine: {platform.machine()}, "
        f"{os.cpu_count()} CPUs shared with other jobs, one torch thread per run; torch {torch.__version__}, "
        f"Opacus {opacus.__version__} installed.", "",
        "Each script runs unchanged (Opacus's engine) and with its one line `from opacus import PrivacyEngine` made "
        "`from dpcalib.optim import PrivacyEngine` (dpcalib's engine; Opacus's `DPLSTM` / `DPGRU` / `DPRNN` and "
        f"everything else unchanged), {repeats} times each, alternating which goes first; the training loop of each "
        "epoch is timed (first batch to last). Synthetic data of the scripts' shapes (CIFAR-10: 2048 images, 16 "
        "Poisson batches of 128 expected; names: 4 languages x 640, 2048 for training, 32 batches of 64). Epoch 1 "
        "holds dpcalib's record probes (float64 forwards on the first batches and each larger one), epoch 2 is the "
        "steady state. Ratio: dpcalib / Opacus median epoch time (below 1: dpcalib faster); the median step (over "
        "every step of every run, a step from one batch to the next) leaves the few probed batches out.", "",
        "| script and options | Opacus epoch 1 / 2 (s) | dpcalib epoch 1 / 2 (s) | ratio epoch 1 | ratio epoch 2 "
        "| median step Opacus / dpcalib (ms) | ratio median step | vmap fallback warnings (dpcalib) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        o, d = r["median"]["opacus"], r["median"]["dpcalib"]
        fmt = " / ".join
        lines.append(f"| `{r['name']}` | {fmt('%.2f' % t for t in o)} | {fmt('%.2f' % t for t in d)} | "
                     + " | ".join(["%.2f" % x for x in r["ratio"]] + ["--"] * (2 - len(r["ratio"])))   # (one epoch)
                     + f" | {1000 * r['step']['opacus']:.0f} / {1000 * r['step']['dpcalib']:.0f} | "
                     f"{r['step']['dpcalib'] / r['step']['opacus']:.2f} | {len(r['fallback']) or 'none'} |")
    for r in rows:
        for engine, tail in r["failed"]:
            lines += ["", f"`{r['name']}` failed under {engine}:", "", "```text", *tail, "```"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """Time the examples under both engines and append the record; returns 0 when every run ran."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=Path, required=True, help="the examples folder of Opacus's repository")
    ap.add_argument("--repeats", type=int, default=3, help="runs per engine and script")
    ap.add_argument("--out", type=Path, default=None, help="append the markdown section to this file")
    ap.add_argument("-k", default=None, help="run only the runs whose name contains this")
    args = ap.parse_args(argv)
    runs = [r for r in RUNS if args.k is None or args.k in r["name"]]
    with tempfile.TemporaryDirectory() as tmp:
        stub = write_stub(Path(tmp) / "stub")
        rows = [measure(run, args.examples.resolve(), Path(tmp), stub, args.repeats) for run in runs]
    for r in rows:
        print(f"{r['name']:26s} ratio {['%.2f' % x for x in r['ratio']]} fallback={r['fallback'] or 'none'}")
    command = f"python -m benchmarks.opacus_examples_speed --examples {args.examples} --repeats {args.repeats}"
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + report(rows, command, args.repeats))
    return 0 if not any(r["failed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
