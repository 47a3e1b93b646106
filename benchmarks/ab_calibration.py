"""dpcalib's DP-SGD calibration in two checkouts, side by side: the answers compared bit for bit and
the times, over the space benchmark's settings.

    python -m benchmarks.ab_calibration /tmp/before /tmp/after            # the 48 settings
    python -m benchmarks.ab_calibration /tmp/before /tmp/after --settings 6

Each checkout is a clone of the repository (``git clone -q . /tmp/before && git -C /tmp/before
checkout REV``).  Every setting runs cold in a fresh single-threaded process per checkout
(``bench_calibration_space --child dpcalib``, that checkout on ``PYTHONPATH``), the two checkouts
alternating, so that the machine's drift falls on both.  Printed per setting: both times, and
"same" or the relative change of the noise multiplier; then the totals.  Read the ratios: one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from benchmarks.bench_calibration_space import grid


def child(checkout: str, setting) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=checkout)
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_calibration_space", "--child", "dpcalib",
                          *map(repr, setting)], capture_output=True, text=True, cwd=checkout, env=env)
    if out.returncode != 0:
        return {"z": None, "t": float("nan"), "note": (out.stderr.strip().splitlines() or ["failed"])[-1][:120]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(a: str, b: str, settings: int = 48, out=sys.stdout) -> list:
    """``[(setting, result in a, result in b)]``, printed as they come."""
    rows = []
    for s in grid(settings):
        ra, rb = child(a, s), child(b, s)
        if ra["z"] is not None and ra["z"] == rb["z"]:
            what = "same"
        elif ra["z"] is None or rb["z"] is None:        # (two failures are not "the same answer")
            what = f"{ra.get('note', ra['z'])!r} / {rb.get('note', rb['z'])!r}"
        else:
            what = f"z {ra['z']!r} -> {rb['z']!r} ({rb['z'] / ra['z'] - 1:+.2e})"
        print(f"{s!s:36s} {ra['t']:8.3f} {rb['t']:8.3f} s  {what}", file=out, flush=True)
        rows.append((s, ra, rb))
    same = sum(ra["z"] is not None and ra["z"] == rb["z"] for _, ra, rb in rows)
    print(f"{same} of {len(rows)} answers bit for bit; total {sum(r['t'] for _, r, _ in rows):.2f} s beside "
          f"{sum(r['t'] for *_, r in rows):.2f} s", file=out)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", help="a checkout of the repository (the first column)")
    ap.add_argument("after", help="another checkout (the second column)")
    ap.add_argument("--settings", type=int, default=48, help="the first N settings of the grid (default 48)")
    args = ap.parse_args(argv)
    for path in (args.before, args.after):
        if not os.path.isfile(os.path.join(path, "benchmarks", "bench_calibration_space.py")):
            ap.exit(2, f"ab_calibration: error: checkout={path!r} is not allowed: expected a clone of the "
                       "repository (with benchmarks/bench_calibration_space.py)\n")
    if not 1 <= args.settings <= 48:
        ap.exit(2, f"ab_calibration: error: --settings={args.settings} is not allowed: expected 1..48\n")
    compare(args.before, args.after, args.settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
