"""DP-SGD calibration with the many-step PLD composed in blocks beside the plain composition.

    python -m benchmarks.bench_blocks                  # the space benchmark's settings with T >= 1e5
    python -m benchmarks.bench_blocks --settings 4     # the first four of them

Each setting of :func:`benchmarks.bench_calibration_space.grid` with at least ``--min-steps`` steps
is calibrated cold (``DPSGD(q, T).calibrate(eps, delta)``) in a fresh single-threaded process with
blocks on (``dpcalib.accountant.pld.blocks.BLOCKS``, the default) and then with them off, back to
back; printed: each noise multiplier, time and the certified bracket of the answer, and the time
ratio plain / blocks (> 1: blocks faster).  Ratios, not times: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks.bench_calibration_space import grid

_CHILD = r"""
import json, sys, time
from dpcalib.accountant.pld import blocks as pld_blocks
pld_blocks.BLOCKS = sys.argv[5] == "1"
from dpcalib.mechanisms import DPSGD
q, T, eps, d = float(sys.argv[1]), int(float(sys.argv[2])), float(sys.argv[3]), float(sys.argv[4])
t0 = time.perf_counter()
m = DPSGD(q, T)
z = m.calibrate(eps, d)["noise_multiplier"]
dt = time.perf_counter() - t0
b = m.accountant(z).epsilon_bracket(d)
print(json.dumps({"z": z, "t": dt, "lower": b.lower, "upper": b.upper}))
"""


def run(setting, blocks: bool, timeout: float) -> dict:
    q, t, eps, delta = setting
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        r = subprocess.run([sys.executable, "-c", _CHILD, str(q), str(t), str(eps), str(delta), "1" if blocks else "0"],
                           capture_output=True, text=True, timeout=timeout, env=env)
        return json.loads(r.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {"z": float("nan"), "t": timeout, "lower": float("nan"), "upper": float("nan")}
    except (json.JSONDecodeError, IndexError):
        return {"z": float("nan"), "t": float("nan"), "error": (r.stderr or "").strip().splitlines()[-1:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-steps", type=int, default=100_000)
    ap.add_argument("--settings", type=int, default=0, help="only the first N (0: all)")
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args(argv)
    settings = [s for s in grid() if s[1] >= a.min_steps]
    if a.settings:
        settings = settings[:a.settings]
    print("| q | T | eps | delta | z blocks | t blocks | bracket blocks | z plain | t plain | bracket plain | plain/blocks |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for s in settings:
        b, p = run(s, True, a.timeout), run(s, False, a.timeout)
        ratio = p["t"] / b["t"] if b["t"] > 0 else float("nan")
        ratios.append(ratio)
        print(f"| {s[0]:g} | {s[1]} | {s[2]:g} | {s[3]:g} | {b['z']:.7g} | {b['t']:.2f} | "
              f"[{b.get('lower', float('nan')):.7f}, {b.get('upper', float('nan')):.7f}] | {p['z']:.7g} | {p['t']:.2f} | "
              f"[{p.get('lower', float('nan')):.7f}, {p.get('upper', float('nan')):.7f}] | {ratio:.2f} |", flush=True)
    ok = [r for r in ratios if r == r]
    if ok:
        print(f"\ntime ratio plain / blocks over {len(ok)} settings: median {statistics.median(ok):.2f}, "
              f"min {min(ok):.2f}, max {max(ok):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
