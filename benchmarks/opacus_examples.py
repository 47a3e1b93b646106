"""Opacus's example scripts run on dpcalib, with ``import opacus`` failing (issue 73).

    python -m benchmarks.opacus_examples --examples PATH [--out FILE] [--speed]

``PATH`` is the ``examples`` folder of a checkout of Opacus's repository (for instance
``git --git-dir=OPACUS.git archive HEAD examples | tar -x -C /tmp/opacus-src``); the scripts are read from
there and never copied into this repository.  Each script is copied into a temporary folder with every
``opacus`` import rewritten by the migration table (:func:`dpcalib.optim.opacus_paths.rewrite_imports`) and
run in a fresh process whose ``sys.meta_path`` refuses ``opacus`` (:data:`RUNNER`): ``examples/mnist.py``,
``cifar10.py`` with and without ``--clip_per_layer``, and ``char-lstm-classification.py`` in its three modes.

The datasets are swapped for synthetic ones of the same shapes, small enough for a few steps on a CPU:
MNIST and CIFAR-10 through a ``torchvision`` stub (the one of :mod:`benchmarks.opacus_api_tests`, plus
``MNIST`` / ``CIFAR10`` classes drawing ``[1, 28, 28]`` / ``[3, 32, 32]`` images and ten labels, and the two
augmentations CIFAR-10's script builds), and the names dataset of the character LSTM as a folder of
synthetic name files (one per language, which is what the script reads).  The scripts themselves are
unchanged apart from their imports; only their command-line options are chosen (one epoch, CPU, a print
every step for CIFAR-10 so that its last line is the run's eps).

For each run the eps is read three ways and compared: the engine's ``get_epsilon(delta)`` at the end of the
run (recorded by the runner), the value the script prints (two decimals), and ``dpcalib epsilon dp-sgd
--n N --batch-size b --epochs E --noise-multiplier z --delta d`` from the run's public numbers.  ``--speed``
adds one measurement that needs Opacus in this process: the step time of the character LSTM's model with
dpcalib's ``DPLSTM`` and with Opacus's, the figure behind dpcalib's choice of layers (dpcalib.optim.layers).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import re
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.opacus_api_tests import TORCHVISION_STUB
from dpcalib.optim.opacus_paths import rewrite_imports

ROOT = Path(__file__).resolve().parents[1]

#: the process each script runs in: Opacus refused on import, each PrivacyEngine remembered, its eps written
RUNNER = r'''
import importlib.abc, json, runpy, sys


class NoOpacus(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opacus" or name.startswith("opacus."):
            raise ModuleNotFoundError(f"No module named {name!r} (refused: this run is without Opacus)", name=name)
        return None


sys.meta_path.insert(0, NoOpacus())
try:
    import opacus  # noqa: F401
    blocked = False
except ModuleNotFoundError:
    blocked = True

import dpcalib.optim as O

engines, init = [], O.PrivacyEngine.__init__


def remember(self, *args, **kwargs):
    init(self, *args, **kwargs)
    engines.append(self)


O.PrivacyEngine.__init__ = remember
out, delta, stub, script, *argv = sys.argv[1:]
sys.path.insert(0, stub)
sys.argv = [script, *argv]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    with open(out, "w") as f:
        json.dump({"opacus_blocked": blocked,
                   "engines": [{"epsilon": e.get_epsilon(float(delta)), "steps": len(e.accountant)}
                               for e in engines]}, f)
'''

#: what the torchvision stub adds for the examples: their datasets (synthetic, sizes from the environment)
#: and the augmentations CIFAR-10's script builds (used only with --disable-dp)
STUB_DATASETS = '''

import os


class _Synthetic(FakeData):
    """A torchvision dataset of the same shapes: BENCH_TRAIN_N / BENCH_TEST_N images, ten labels."""

    SHAPE = None

    def __init__(self, root=None, train=True, transform=None, target_transform=None, download=False):
        n = int(os.environ["BENCH_TRAIN_N" if train else "BENCH_TEST_N"])
        super().__init__(size=n, image_size=self.SHAPE, num_classes=10, transform=transform,
                         random_offset=0 if train else 10 ** 6)


class MNIST(_Synthetic):
    SHAPE = (1, 28, 28)


class CIFAR10(_Synthetic):
    SHAPE = (3, 32, 32)
'''
STUB_TRANSFORMS = '''

class RandomCrop:
    def __init__(self, size, padding=None):
        self.size, self.padding = size, padding

    def __call__(self, x):
        return x


class RandomHorizontalFlip:
    def __call__(self, x):
        return x
'''


def write_stub(folder: Path) -> Path:
    """The torchvision stub with the examples' datasets, under ``folder``; returns the folder to put on the path."""
    tv = folder / "torchvision"
    tv.mkdir(parents=True)
    for name, text in TORCHVISION_STUB.items():
        extra = {"datasets.py": STUB_DATASETS, "transforms.py": STUB_TRANSFORMS}.get(name, "")
        (tv / name).write_text(text + extra)
    return folder


def write_names(folder: Path, languages: int, per_language: int, seed: int = 0) -> Path:
    """A names dataset of the character LSTM's layout: one file per language, one name a line."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    for k in range(languages):
        names = ["".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(3, 12)))
                 for _ in range(per_language)]
        (folder / f"Language{k}.txt").write_text("\n".join(names) + "\n")
    return folder


#: the runs: script, options, and the public numbers of the run (train records N, batch b, epochs, z, delta)
RUNS = [
    {"name": "mnist", "script": "mnist.py", "n": 512, "test_n": 128, "b": 64, "epochs": 1, "z": 1.0, "delta": 1e-5,
     "args": ["--device", "cpu", "-n", "1", "-b", "64", "--test-batch-size", "128"]},
    {"name": "cifar10", "script": "cifar10.py", "n": 512, "test_n": 128, "b": 128, "epochs": 1, "z": 1.5,
     "delta": 1e-5, "args": ["--epochs", "1", "--batch-size", "128", "-b", "128", "-j", "0", "--print-freq", "1"]},
    {"name": "cifar10 --clip_per_layer", "script": "cifar10.py", "n": 512, "test_n": 128, "b": 128, "epochs": 1,
     "z": 1.5, "delta": 1e-5,
     "args": ["--epochs", "1", "--batch-size", "128", "-b", "128", "-j", "0", "--print-freq", "1",
              "--clip_per_layer"]},
] + [
    {"name": f"char-lstm --mode {mode}", "script": "char-lstm-classification.py", "names": (4, 160), "n": 512,
     "b": 64, "epochs": 1, "z": 1.0, "delta": 8e-5,
     "args": ["--device", "cpu", "--epochs", "1", "-b", "64", "--mode", mode]}
    for mode in ("lstm", "gru", "rnn")
]

EPS = re.compile(r"\(ε = ([0-9.]+), δ = ")


def cli_epsilon(run: dict) -> float:
    """``dpcalib epsilon dp-sgd``'s eps of the run's public numbers (a separate process)."""
    cmd = [sys.executable, "-m", "dpcalib.cli", "epsilon", "dp-sgd", "--n", str(run["n"]), "--batch-size",
           str(run["b"]), "--epochs", str(run["epochs"]), "--noise-multiplier", str(run["z"]), "--delta",
           str(run["delta"]), "--json"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout)["epsilon"]


def run_one(run: dict, examples: Path, work: Path, stub: Path) -> dict:
    """Run one example (rewritten, without Opacus) and compare its eps with the command line's."""
    folder = work / re.sub(r"\W+", "_", run["name"])
    folder.mkdir()
    script = folder / run["script"]
    script.write_text(rewrite_imports((examples / run["script"]).read_text()))
    (folder / "runner.py").write_text(RUNNER)
    args = list(run["args"])
    if "names" in run:
        args += ["--data-root", str(write_names(folder / "names", *run["names"]))]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_TRAIN_N": str(run["n"]),
           "BENCH_TEST_N": str(run.get("test_n", 0))}
    cmd = [sys.executable, str(folder / "runner.py"), str(folder / "eps.json"), str(run["delta"]), str(stub),
           str(script), *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - t0
    rec = {"name": run["name"], "args": " ".join(args[:-2] if "names" in run else args), "rc": proc.returncode,
           "wall_s": wall, "cli": cli_epsilon(run), "steps_planned": run["epochs"] * -(-run["n"] // run["b"]),
           "n": run["n"], "q": run["b"] / run["n"], "z": run["z"], "delta": run["delta"]}
    printed = EPS.findall(proc.stdout)
    rec["printed"] = float(printed[-1]) if printed else None
    try:
        got = json.loads((folder / "eps.json").read_text())
    except (OSError, ValueError):
        got = {"opacus_blocked": None, "engines": []}
    rec["opacus_blocked"] = got["opacus_blocked"]
    rec["engine"] = got["engines"][-1]["epsilon"] if got["engines"] else None
    rec["steps"] = got["engines"][-1]["steps"] if got["engines"] else None
    rec["tail"] = (proc.stdout + proc.stderr).strip().splitlines()[-3:] if proc.returncode else []
    rec["ok"] = (proc.returncode == 0 and rec["opacus_blocked"] is True and rec["engine"] is not None
                 and abs(rec["engine"] - rec["cli"]) <= 1e-9 * rec["cli"] and rec["steps"] == rec["steps_planned"]
                 and rec["printed"] == round(rec["cli"], 2))
    return rec


def speed(repeats: int = 12) -> list:
    """Median step time (ms) of the character LSTM's model (batch 64, 16 characters, embedding 64, hidden
    128, one thread): dpcalib's DPLSTM and Opacus's DPLSTM under dpcalib's engine, and Opacus's under Opacus's.
    Needs Opacus in this process."""
    import warnings

    import opacus
    import opacus.layers as OL
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from dpcalib.optim import PrivacyEngine
    from dpcalib.optim.layers import DPLSTM

    torch.set_num_threads(1)
    B, T, E, H = 64, 16, 64, 128

    class Model(nn.Module):
        def __init__(self, cls):
            super().__init__()
            self.emb, self.rnn, self.out = nn.Embedding(259, E), cls(E, H, batch_first=True), nn.Linear(H, 18)

        def forward(self, x):
            h, _ = self.rnn(self.emb(x))
            return self.out(h[:, -1])

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randint(0, 259, (B * repeats, T), generator=g), torch.randint(0, 18, (B * repeats,), generator=g))
    rows = []
    for label, engine_cls, cls in (("dpcalib engine, dpcalib.optim.layers.DPLSTM (nn.LSTM)", PrivacyEngine, DPLSTM),
                                   ("dpcalib engine, opacus.layers.DPLSTM (unrolled cells)", PrivacyEngine, OL.DPLSTM),
                                   ("Opacus engine, opacus.layers.DPLSTM", opacus.PrivacyEngine, OL.DPLSTM)):
        torch.manual_seed(0)
        model = Model(cls)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m, opt, dl = engine_cls().make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                                   data_loader=DataLoader(data, batch_size=B), noise_multiplier=1.0,
                                                   max_grad_norm=1.0)
            times = []
            for x, y in dl:
                t0 = time.perf_counter()
                opt.zero_grad()
                nn.functional.cross_entropy(m(x), y).backward()
                opt.step()
                times.append(time.perf_counter() - t0)
        times = sorted(times[1:])
        rows.append((label.replace("Opacus engine", f"Opacus {opacus.__version__} engine"),
                     1000 * times[len(times) // 2], len(times)))
    return rows


def report(records: list, speed_rows, command: str, examples: Path) -> str:
    """The markdown record of the runs."""
    import torch

    ver = examples.parent / "opacus" / "version.py"
    found = re.search(r'__version__\s*=\s*"([^"]+)"', ver.read_text()) if ver.is_file() else None
    version = found.group(1) if found else "unknown"
    ok = sum(r["ok"] for r in records)
    lines = [
        "# Opacus's example scripts on dpcalib, without Opacus",
        "",
        f"Command: `{command}`, with `{examples}` the `examples` folder of a snapshot of Opacus's repository "
        f"(its `opacus/version.py`: {version}). Date: {datetime.date.today().isoformat()}. Machine: "
        f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}, "
        f"torch {torch.__version__}; torchvision stubbed.",
        "",
        "Each script is copied to a temporary folder with its `opacus` imports rewritten by the migration table "
        "(`dpcalib.optim.opacus_paths.rewrite_imports`, docs/how-to/opacus.md) and run in a process where "
        "`import opacus` raises `ModuleNotFoundError`. MNIST and CIFAR-10 are synthetic images of their shapes "
        "(N training records below; the torchvision stub), the names dataset a folder of synthetic name files "
        "(4 languages x 160 names, 80 % for training). One epoch of Poisson batches each.",
        "",
        "eps three ways: the engine's `get_epsilon(delta)` after the run; the script's own printed value (two "
        "decimals; its last line); and `dpcalib epsilon dp-sgd --n N --batch-size b --epochs 1 "
        "--noise-multiplier z --delta d` from the run's public numbers (q = b/N, T = ceil(N/b) steps).",
        "",
        f"**{ok} of {len(records)} runs pass** (ran, `import opacus` failed inside, T steps charged, engine eps = "
        "CLI eps to 1e-9 relative, printed eps = CLI eps to two decimals).",
        "",
        "| script and options | ran | opacus blocked | N | q | z | delta | steps (CLI's T) | engine eps | printed | "
        "CLI eps | agree | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        eng = "—" if r["engine"] is None else f"{r['engine']:.10g}"
        lines.append(f"| `{r['name']}` `{r['args']}` | {'yes' if r['rc'] == 0 else 'no (rc ' + str(r['rc']) + ')'} "
                     f"| {'yes' if r['opacus_blocked'] else 'no'} | {r['n']} "
                     f"| {r['q']:g} | {r['z']:g} | {r['delta']:g} | {r['steps']} ({r['steps_planned']}) | {eng} | "
                     f"{r['printed']} | {r['cli']:.10g} | {'yes' if r['ok'] else 'NO'} | {r['wall_s']:.0f} |")
    for r in records:
        if r["tail"]:
            lines += ["", f"`{r['name']}` failed; its last lines:", "", "```text", *r["tail"], "```"]
    if speed_rows:
        lines += ["", "## Why dpcalib's DPLSTM is nn.LSTM", "",
                  "Median step of the character LSTM's model (batch 64 expected, 16 characters, embedding 64, hidden "
                  "128, 18 classes; one thread, the same shared machine; Opacus installed in this process for this "
                  "measurement only): `python -m benchmarks.opacus_examples ... --speed`.", "",
                  "| engine and layer | median step (ms) | steps timed |", "|---|---|---|"]
        lines += [f"| {label} | {ms:.0f} | {k} |" for label, ms, k in speed_rows]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """Run the examples and write the record; returns 0 when every run passes."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=Path, required=True, help="the examples folder of Opacus's repository")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown record here")
    ap.add_argument("--speed", action="store_true", help="also time DPLSTM steps (needs Opacus in this process)")
    ap.add_argument("-k", default=None, help="run only the runs whose name contains this")
    args = ap.parse_args(argv)
    runs = [r for r in RUNS if args.k is None or args.k in r["name"]]
    with tempfile.TemporaryDirectory() as tmp:
        stub = write_stub(Path(tmp) / "stub")
        records = []
        for run in runs:
            rec = run_one(run, args.examples.resolve(), Path(tmp), stub)
            print(f"{rec['name']:28s} rc={rec['rc']} engine={rec['engine']} printed={rec['printed']} "
                  f"cli={rec['cli']:.10g} steps={rec['steps']}/{rec['steps_planned']} ok={rec['ok']} "
                  f"({rec['wall_s']:.0f} s)", flush=True)
            for line in rec["tail"]:
                print("    " + line)
            records.append(rec)
    speed_rows = speed() if args.speed else None
    for label, ms, k in speed_rows or []:
        print(f"{label:60s} {ms:.0f} ms ({k} steps)")
    command = "python -m benchmarks.opacus_examples --examples " + str(args.examples) + (" --speed" if args.speed else "")
    if args.out:
        args.out.write_text(report(records, speed_rows, command, args.examples.resolve()))
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
