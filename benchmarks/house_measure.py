"""The house's size and two traces through it (issue 74, acceptance 6): run before and after a change.

    python benchmarks/house_measure.py            # prints a markdown table row set
    python benchmarks/house_measure.py --json

Counting rules (written down so the before/after numbers are read the same way):

* lines: every line of every ``.py`` file of the installed package (``dpcalib/``, ``accountant/``,
  ``mechanisms/``, ``optim/``); code lines: those that are not blank, not a comment and not inside a
  docstring.
* public names: the sum over the package's modules of ``len(__all__)`` -- a name counts once in every
  module that exports it, a package's re-export included (the surface a reader of each module's
  ``__all__`` sees); the distinct names (the union) and the packages' surface (the sum over the
  packages' ``__init__.py`` alone) are printed beside it.
* a trace: every Python call made while the command runs (``sys.settrace``) whose arguments carry the
  traced value -- an argument equal to it, or a container, dataclass or object holding it one level
  down.  The calls' files (package files only) in call order, a file repeated in a row kept once, give
  ``files`` (distinct files entered), ``returns`` (entries to a file the trace had already left; a
  calibration's search loop repeats its route at every probe) and ``files re-entered`` (the distinct
  files entered more than once).
  ``noise_multiplier``: the value 1.2345678 through ``dpcalib calibrate dp-sgd`` (none: it is the
  output), ``PrivacyEngine.make_private`` + one step + ``get_epsilon``; the sampling scheme: the rate
  0.07 (``batch 7 / 100 records``, ``--sampling-rate 0.07``), the scheme's name (``"poisson"``) or a
  typed sampling value, through ``dpcalib calibrate dp-sgd`` and the same engine run.  Each trace runs in a
  fresh process: after another trace, the accountant's cached answers skip the calls that compute them.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import json
import os
import pathlib
import subprocess
import sys
import contextlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ("dpcalib", "accountant", "mechanisms", "optim")
NOISE = 1.2345678
RATE = 0.07


def _files():
    for top in PACKAGE:
        yield from sorted((ROOT / top).rglob("*.py"))


def _code_lines(text: str) -> int:
    tree = ast.parse(text)
    doc = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            doc.update(range(body[0].lineno, body[0].end_lineno + 1))
    n = 0
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s and not s.startswith("#") and i not in doc:
            n += 1
    return n


def size() -> dict:
    """Lines, code lines and public names of the package (the rules above)."""
    lines = code = public = surface = 0
    union = set()
    for p in _files():
        text = p.read_text()
        lines += len(text.splitlines())
        code += _code_lines(text)
        for node in ast.parse(text).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                names = ast.literal_eval(node.value)
                public += len(names)
                surface += len(names) if p.name == "__init__.py" else 0
                union.update(names)
    return {"lines": lines, "code_lines": code, "public_names": public, "distinct_public_names": len(union),
            "package_surface": surface}


#: the typed sampling values a sampling trace follows by their type's name: the names the issue's plan
#: guessed before they existed, and the two that exist (``mechanisms/shape.py``'s ``Sampling`` and ``Run``)
SAMPLING_TYPES = ("Poisson", "Shuffle", "BallsInBins", "FixedSize", "FullBatch", "RunShape", "Sampling", "Run")


def _holds(value, marks, depth=1, types=()) -> bool:
    try:
        if any(type(value) is type(m) and value == m for m in marks):
            return True
    except Exception:  # noqa: BLE001 -- a value whose == is not a bool (a tensor)
        pass
    if type(value).__name__ in types:
        return True
    if depth == 0:
        return False
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    elif hasattr(value, "__dict__") and not isinstance(value, type) and not callable(value):
        items = list(vars(value).values())
    else:
        return False
    return any(_holds(v, marks, depth - 1, types) for v in items[:64])


def trace(run, marks, types=()) -> dict:
    """Run ``run()`` under ``sys.settrace``; the package files whose calls carry one of ``marks`` or a value of one
    of the ``types`` (by name)."""
    seq = []
    roots = tuple(str(ROOT / top) + os.sep for top in PACKAGE)

    def tracer(frame, event, arg):
        if event != "call":
            return None
        f = frame.f_code.co_filename
        if not f.startswith(roots):
            return None
        code = frame.f_code
        args = [frame.f_locals.get(name) for name in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]]
        if any(_holds(a, marks, types=types) for a in args):
            rel = os.path.relpath(f, ROOT)
            if not seq or seq[-1] != rel:
                seq.append(rel)
        return None

    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    seen, returns, again = set(), 0, set()
    for f in seq:
        if f in seen:
            returns += 1
            again.add(f)
        seen.add(f)
    return {"files": len(seen), "returns": returns, "files_reentered": len(again), "route": seq}


def _cli(argv):
    from dpcalib.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        main(argv)


def _engine():
    import torch

    from dpcalib.optim import PrivacyEngine

    torch.manual_seed(0)
    x, y = torch.randn(100, 3), torch.randn(100, 1)
    model = torch.nn.Linear(3, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=7)
    engine = PrivacyEngine()
    model, opt, loader = engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                             data_loader=loader, noise_multiplier=NOISE, max_grad_norm=1.0, seed=1)
    xb, yb = next(iter(loader))
    torch.nn.functional.mse_loss(model(xb), yb).backward()
    opt.step()
    engine.get_epsilon(1e-5)


#: each trace: what runs, the values it follows and the types it follows by name
TRACES = {
    "noise_multiplier_engine": (_engine, (NOISE,), ()),
    "sampling_cli": (lambda: _cli(["calibrate", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", "--sampling-rate",
                                   str(RATE), "--steps", "150"]), (RATE, "poisson"), SAMPLING_TYPES),
    "sampling_engine": (_engine, (RATE, "poisson"), SAMPLING_TYPES),
}


def measure() -> dict:
    """The size, and each trace in a fresh process: a trace run after another would find the accountant's
    answers cached and skip the calls that compute them (the engine's sampling trace read 13 files after the
    noise multiplier's trace had run, 15 alone)."""
    out = size()
    for name in TRACES:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        run = subprocess.run([sys.executable, __file__, "--trace", name], capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": path})
        if run.returncode:
            raise RuntimeError(f"the {name} trace failed:\n{run.stderr}")
        out[name] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--routes", action="store_true", help="print each trace's files in order")
    p.add_argument("--trace", choices=sorted(TRACES), help=argparse.SUPPRESS)   # one trace, here (measure's child)
    a = p.parse_args(argv)
    if a.trace:
        run, marks, types = TRACES[a.trace]
        print(json.dumps(trace(run, marks, types)))
        return 0
    m = measure()
    if a.json:
        print(json.dumps(m, indent=1))
        return 0
    print(f"| lines | {m['lines']} |\n| code lines | {m['code_lines']} |\n| public names (sum of __all__) | "
          f"{m['public_names']} |\n| distinct public names | {m['distinct_public_names']} |\n"
          f"| package surface (sum of the packages' __all__) | {m['package_surface']} |")
    for k in ("noise_multiplier_engine", "sampling_cli", "sampling_engine"):
        print(f"| {k}: files entered / files re-entered / returns | {m[k]['files']} / {m[k]['files_reentered']} / "
              f"{m[k]['returns']} |")
        if a.routes:
            print("  " + " -> ".join(m[k]["route"]))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
