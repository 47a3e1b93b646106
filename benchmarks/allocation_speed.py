"""Speed of a cold balls-in-bins calibration at the CIFAR-10 shape, side by side with Poisson's and with
the ``random-allocation`` package's certified bound (one run; read the ratios, the machine is shared).

    RANDOM_ALLOCATION_PYTHON=/work/venv-ra/bin/python python benchmarks/allocation_speed.py \
        [--rounds 5] [--out benchmarks/results/allocation_speed.md]

Shape: n = 50 000, batch 256 (q = b/n, t = 196 steps an epoch), 50 epochs, eps = 8, delta = 1e-5.
Each round, in turn: dpcalib's Poisson calibration (``DPSGD(q, T).calibrate``), the balls-in-bins one
(``DPSGD(sampling="balls-in-bins", ...).calibrate``), each after ``clear_cache()`` (a cold answer,
nothing remembered), and, in a fresh process of the package's interpreter (ra_oracle.py), its
certified bounds at the balls-in-bins noise (direct, Dong-Chen-Ou RDP, combined -- the first call
in that process, compilation included) and its calibration (bisection of the smallest of direct and
RDP to 1e-4).  Times are CPU seconds of the process that computed them (``time.process_time``:
another job on the shared cores does not count).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import ra_oracle
from dpcalib.accountant import clear_cache
from dpcalib.mechanisms import DPSGD

N, B, E, EPS, DELTA = 50_000, 256, 50, 8.0, 1e-5


def _cold(fn):
    clear_cache()
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    poisson = DPSGD(B / N, E * -(-N // B))
    bib = DPSGD(sampling="balls-in-bins", n=N, batch_size=B, epochs=E)
    ra = ra_oracle.available()
    rows = []
    for r in range(max(3, args.rounds)):
        rp, tp = _cold(lambda: poisson.calibrate(EPS, DELTA))
        rb, tb = _cold(lambda: bib.calibrate(EPS, DELTA))
        zb = rb.noise["noise_multiplier"]
        row = {"poisson_s": tp, "bib_s": tb, "z_poisson": rp.noise["noise_multiplier"], "z_bib": zb,
               "cert_bib": rb.certified_epsilon}
        if ra:
            # a new sigma each round (no answer of an earlier round to reuse), the same setting
            ans = ra_oracle.query([{"sigma": zb, "t": bib.steps_per_epoch, "epochs": E, "delta": DELTA,
                                    "methods": ["direct", "rdp_dco", "combined", "recursive"]},
                                   {"sigma": zb * (1 + 1e-3 * (r + 1)), "t": bib.steps_per_epoch, "epochs": E,
                                    "delta": DELTA, "methods": ["direct", "rdp_dco"], "calibrate": EPS}])
            row["ra"] = {m: ans[0][m] for m in ("direct", "rdp_dco", "combined", "recursive")}
            row["ra_cal"] = ans[1]["calibrated"]
        rows.append(row)
        print(f"round {r}: poisson {tp:.3f} s, balls-in-bins {tb:.3f} s, ratio {tb / tp:.2f}"
              + (f"; random-allocation combined {row['ra']['combined']['cpu_s']:.2f} s, direct "
                 f"{row['ra']['direct']['cpu_s']:.3f} s, calibration {row['ra_cal']['cpu_s']:.2f} s" if ra else ""),
              flush=True)
    text = _markdown(rows, bib, ra, " ".join(["python benchmarks/allocation_speed.py"] + (argv or sys.argv[1:])))
    print(text)
    if args.out:
        Path(args.out).write_text(text)


def _spread(xs):
    return f"{statistics.median(xs):.3g} ({min(xs):.3g}-{max(xs):.3g})"


def _markdown(rows, bib, ra, cmd) -> str:
    ratio = [r["bib_s"] / r["poisson_s"] for r in rows]
    lines = [
        "# Balls-in-bins calibration speed (CIFAR-10 shape)", "",
        f"`RANDOM_ALLOCATION_PYTHON=... {cmd}`, {datetime.date.today().isoformat()}, {platform.machine()}, "
        "2 shared cores; CPU seconds (`time.process_time`) of the process that computed each answer; "
        f"{len(rows)} interleaved rounds, median (min-max).", "",
        f"Shape: n = {N}, batch {B} (t = {bib.steps_per_epoch} steps an epoch), {E} epochs, eps = {EPS:g}, "
        f"delta = {DELTA:g}.  Noise: Poisson {rows[0]['z_poisson']:.6f}, balls-in-bins {rows[0]['z_bib']:.6f} "
        f"(certified eps {rows[0]['cert_bib']:.7f}).", "",
        "| what | CPU s, median (min-max) |", "|---|---|",
        f"| dpcalib Poisson calibration, cold | {_spread([r['poisson_s'] for r in rows])} |",
        f"| dpcalib balls-in-bins calibration, cold | {_spread([r['bib_s'] for r in rows])} |",
        f"| **ratio balls-in-bins / Poisson** (per round) | **{_spread(ratio)}** |",
    ]
    if ra:
        for m, name in (("combined", "combined, the smallest of its bounds (one eps)"),
                        ("direct", "direct (one eps, first call in a fresh process)"),
                        ("rdp_dco", "Dong-Chen-Ou RDP (one eps)"), ("recursive", "recursive (one eps)")):
            eps = rows[0]["ra"][m]["epsilon"]
            lines.append(f"| random-allocation {name}: eps {eps:.4f} at the balls-in-bins noise | "
                         f"{_spread([r['ra'][m]['cpu_s'] for r in rows])} |")
        cal = [r["ra_cal"] for r in rows]
        lines.append(f"| random-allocation calibration (bisection of min(direct, RDP) to 1e-4, "
                     f"{cal[0]['evaluations']} evaluations): noise {cal[0]['sigma']:.4f} | "
                     f"{_spread([c['cpu_s'] for c in cal])} |")
        lines.append(f"| ratio dpcalib balls-in-bins calibration / random-allocation combined bound | "
                     f"{_spread([r['bib_s'] / r['ra']['combined']['cpu_s'] for r in rows])} |")
        lines.append(f"| ratio dpcalib balls-in-bins calibration / random-allocation calibration | "
                     f"{_spread([r['bib_s'] / r['ra_cal']['cpu_s'] for r in rows])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
