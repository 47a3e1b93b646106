"""DP-SGD noise calibration across the parameter space: dpcalib's tight (PLD-certified) calibration
beside dp-accounting's documented PLD calibration and Opacus's PRV calibration, each cold, one
setting at a time, back to back.

    python -m benchmarks.bench_calibration_space                 # the 48 settings, ~20-40 min here
    python -m benchmarks.bench_calibration_space --settings 6 --timeout 60     # a quick look
    python -m benchmarks.bench_calibration_space --child dpcalib 1e-4 1e6 5.6 1e-6 --work   # one call, with its work
    python -m benchmarks.bench_calibration_space --who opacus-prv --prv-tolerance 1e-3 \
        --setting 1e-3 181 0.3 1e-8 --setting 1e-4 1000 0.3 1e-6      # PRV asked for 0.1 % in eps, beside dpcalib
    python -m benchmarks.bench_calibration_space --who dp-accounting --dp-accounting-interval 1e-5 \
        --setting 2.8e-4 1e5 0.3 1e-8                                   # dp-accounting on a 10x finer grid

A fixed grid of 48 Poisson-sampled DP-SGD settings (q 1e-4..0.5, T 10..1e6, eps 0.3..16, delta
1e-8..1e-2: 45 drawn with a fixed seed from the product of the lists below, plus the three tail
settings of the calibration issue).  Every contender runs each setting in a fresh single-threaded
process (OMP_NUM_THREADS=1: cold caches, no thread contention), which imports its library first
and then times the calibration call alone, under a per-call time limit (a call past it counts as
the limit and is marked).  The calls:

* dpcalib: ``DPSGD(q, T).calibrate(eps, delta)`` (tight, certified by the PLD bracket's upper end);
* dp-accounting: ``mechanism_calibration.calibrate_dp_mechanism(PLDAccountant, event, eps, delta)``
  with the event ``SelfComposed(PoissonSampled(q, Gaussian(z)), T)`` (its documented example);
* Opacus: ``opacus.accountants.utils.get_noise_multiplier(target_epsilon=eps, target_delta=delta,
  sample_rate=q, steps=T, accountant="prv")``.

``--prv-tolerance REL`` asks Opacus for ``REL * eps`` instead of its defaults (``epsilon_tolerance = 0.01``
and ``eps_error = 0.01``, absolute in eps: 3 % of eps = 0.3), both the search's tolerance and the
accountant's own error -- still far looser than dpcalib's certified bracket (3e-5 relative) and its
noise (solved to 1e-6 relative), but a like-for-like look at where the documented call is fast
because it answers roughly.  ``--dp-accounting-interval H`` does the same for dp-accounting: its
``PLDAccountant(value_discretization_interval=H)`` instead of the default 1e-4 (the search's own
tolerance is already 1e-6); its upper end is pessimistic on that grid, so a finer grid moves its noise
down towards dpcalib's and costs it time.  ``--who`` picks the anchors run beside dpcalib, ``--setting`` runs given
settings instead of the grid.

Reported per setting: each noise multiplier and time; over the settings the median, p10 and worst
of the time ratios anchor / dpcalib (> 1: dpcalib faster), and how often dpcalib's noise is at or
below each anchor's (dp-accounting's + 1e-5 relative; Opacus's).  Read the ratios: the machine is
shared and noisy; every figure comes from this one run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time

Q = (1e-4, 2.8e-4, 1e-3, 4e-3, 0.02, 0.1, 0.5)
T = (10, 181, 378, 1000, 10_000, 100_000, 1_000_000)
EPS = (0.3, 0.86, 1.0, 2.0, 5.6, 16.0)
DELTA = (1e-8, 1e-6, 1e-5, 0.0098)
#: the three slowest settings the calibration issue names (q, T, eps, delta)
TAILS = ((1e-4, 1_000_000, 1.0, 1e-5), (2.8e-4, 181, 5.6, 0.0098), (1e-4, 378, 0.86, 1e-8))


def grid(n: int = 48) -> list:
    """``n`` settings: the issue's three tails first, then a fixed-seed draw from the product."""
    import random

    rest = sorted(set(itertools.product(Q, T, EPS, DELTA)) - set(TAILS))
    random.Random(2026).shuffle(rest)
    return list(TAILS) + rest[:max(0, n - len(TAILS))]


def _call(who: str, q: float, t: int, eps: float, delta: float, prv_tolerance: float | None = None,
          dpa_interval: float | None = None) -> tuple:
    if who == "dpcalib":
        from dpcalib.mechanisms import DPSGD

        mech = DPSGD(q, t)
        t0 = time.perf_counter()
        z = mech.calibrate(eps, delta)["noise_multiplier"]
        return z, time.perf_counter() - t0
    if who == "dp-accounting":
        import dp_accounting
        from dp_accounting import mechanism_calibration
        from dp_accounting.pld import pld_privacy_accountant

        def event(z):
            return dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), t)

        def accountant():
            if dpa_interval is None:                  # the documented call: dp-accounting's default grid
                return pld_privacy_accountant.PLDAccountant()
            return pld_privacy_accountant.PLDAccountant(value_discretization_interval=dpa_interval)
        t0 = time.perf_counter()
        z = mechanism_calibration.calibrate_dp_mechanism(accountant, event, eps, delta)
        return z, time.perf_counter() - t0
    from opacus.accountants.utils import get_noise_multiplier

    kw = {} if prv_tolerance is None else {"epsilon_tolerance": prv_tolerance * eps, "eps_error": prv_tolerance * eps}
    t0 = time.perf_counter()
    z = get_noise_multiplier(target_epsilon=eps, target_delta=delta, sample_rate=q, steps=t, accountant="prv", **kw)
    return z, time.perf_counter() - t0


WHO = ("dpcalib", "dp-accounting", "opacus-prv")


def run_one(who: str, setting, timeout: float, prv_tolerance: float | None = None,
            dpa_interval: float | None = None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "benchmarks.bench_calibration_space", "--child", who, *map(repr, setting)]
    if prv_tolerance is not None and who == "opacus-prv":
        cmd += ["--prv-tolerance", repr(prv_tolerance)]
    if dpa_interval is not None and who == "dp-accounting":
        cmd += ["--dp-accounting-interval", repr(dpa_interval)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"z": None, "t": timeout, "note": "time limit"}
    if out.returncode != 0:
        return {"z": None, "t": math.nan, "note": (out.stderr.strip().splitlines() or ["failed"])[-1][:120]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _count_work() -> list:
    """``[fft work, bracket evaluations]``, counted from here on: scipy.fft's transforms (as the
    PLD modules call them, ``sfft.rfft(...)``) add ``N log2 N``, ``pld_epsilon_at`` adds 1."""
    import scipy.fft as sfft

    from dpcalib.accountant import pld

    acc = [0.0, 0]

    def counted(f):
        def g(x, n=None, *args, **kw):
            size = int(n if n is not None else len(x))
            acc[0] += size * max(1.0, math.log2(max(size, 2)))
            return f(x, n, *args, **kw)
        return g
    for name in ("rfft", "irfft", "fft", "ifft"):
        setattr(sfft, name, counted(getattr(sfft, name)))
    from dpcalib.accountant.pld import refine

    def counting(at):
        def evaluation(*args, **kw):
            acc[1] += 1
            return at(*args, **kw)
        return evaluation
    # the search's one-grid queries and the refinement's own evaluations
    pld.pld_epsilon_at = counting(pld.pld_epsilon_at)
    refine.epsilon_at = counting(refine.epsilon_at)
    return acc


def _pct(xs, p):
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(math.floor(p * (len(xs) - 1)))))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default="48", metavar="N", help="the first N settings of the grid (default 48)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per call (default 120)")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--who", default=",".join(WHO[1:]),
                    help=f"the anchors beside dpcalib, comma-separated from {', '.join(WHO[1:])} (default: both)")
    ap.add_argument("--prv-tolerance", type=float, default=None, metavar="REL",
                    help="ask Opacus PRV for REL * eps (its search's tolerance and its accountant's error; "
                         "default: Opacus's own, 0.01 absolute), REL in (0, 0.1]")
    ap.add_argument("--dp-accounting-interval", type=float, default=None, metavar="H",
                    help="dp-accounting's PLDAccountant(value_discretization_interval=H) (default: its own, 1e-4), "
                         "H in [1e-7, 0.1]")
    ap.add_argument("--setting", nargs=4, action="append", metavar=("Q", "T", "EPS", "DELTA"),
                    help="run this setting instead of the grid (repeatable)")
    ap.add_argument("--work", action="store_true",
                    help="with --child dpcalib: also the FFT work (sum of N log2 N over the transforms, in "
                         "millions) and the bracket evaluations -- counts this noisy machine does not move")
    a = ap.parse_args(argv)
    if a.prv_tolerance is not None and not 0.0 < a.prv_tolerance <= 0.1:
        ap.error(f"--prv-tolerance={a.prv_tolerance!r} is not allowed: expected a number in (0, 0.1]")
    dpa = a.dp_accounting_interval
    if dpa is not None and not 1e-7 <= dpa <= 0.1:
        ap.error(f"--dp-accounting-interval={dpa!r} is not allowed: expected a number in [1e-7, 0.1]")
    try:
        n_settings = int(a.settings)
    except ValueError:
        n_settings = 0
    if not 1 <= n_settings <= 48:
        ap.error(f"--settings={a.settings!r} is not allowed: expected an integer in [1, 48]")
    who_list = [w.strip() for w in a.who.split(",") if w.strip()]
    if not who_list or any(w not in WHO[1:] for w in who_list):
        ap.error(f"--who={a.who!r} is not allowed: expected a comma-separated list from {', '.join(WHO[1:])}")
    settings = grid(n_settings)
    if a.setting:
        try:
            settings = [(float(q), int(float(t)), float(e), float(d)) for q, t, e, d in a.setting]
        except (ValueError, OverflowError):           # (int(inf) overflows)
            ap.error(f"--setting {a.setting!r} is not allowed: expected numbers Q T EPS DELTA")
        if any(not (0.0 < q <= 1.0 and t >= 1 and e > 0.0 and 0.0 < d < 1.0) for q, t, e, d in settings):
            ap.error(f"--setting {a.setting!r} is not allowed: expected Q in (0, 1], T >= 1, EPS > 0, DELTA in (0, 1)")
    if a.child:
        who, q, t, eps, delta = a.child
        work = _count_work() if a.work else None
        z, dt = _call(who, float(q), int(float(t)), float(eps), float(delta), a.prv_tolerance, dpa)
        out = {"z": z, "t": dt}
        if work is not None:
            out.update(work=round(work[0] / 1e6, 3), evaluations=work[1])
        print(json.dumps(out))
        return 0
    rows = []
    who = ["dpcalib"] + [w for w in WHO[1:] if w in who_list]
    asked = "" if a.prv_tolerance is None else f" ({a.prv_tolerance:g} eps)"      # PRV's tolerance, if set
    finer = "" if dpa is None else f" (grid {dpa:g})"        # dp-accounting's grid, if set
    names = {"dpcalib": "dpcalib", "dp-accounting": "dp-acc." + finer, "opacus-prv": "PRV" + asked}
    print("| q | T | eps | delta | " + " | ".join(f"z {names[w]} | t {names[w]}" for w in who) + " |")
    print("|---|---|---|---|" + "---|---|" * len(who))
    for s in settings:
        r = {w: run_one(w, s, a.timeout, a.prv_tolerance, dpa) for w in who}
        rows.append((s, r))

        def cell(x):
            z = "-" if x["z"] is None else f"{x['z']:.6g}"
            t = f"{x['t']:.2f}" + (f" ({x['note']})" if x.get("note") else "")
            return f"{z} | {t}"
        print(f"| {s[0]:g} | {s[1]} | {s[2]:g} | {s[3]:g} | " + " | ".join(cell(r[w]) for w in who) + " |", flush=True)
    print()
    for anchor in who[1:]:
        ratios = [r[anchor]["t"] / r["dpcalib"]["t"] for _, r in rows
                  if r["dpcalib"]["z"] is not None and r[anchor]["t"] == r[anchor]["t"]]
        noise = [r["dpcalib"]["z"] <= r[anchor]["z"] * (1 + (1e-5 if anchor == "dp-accounting" else 0.0))
                 for _, r in rows if r["dpcalib"]["z"] is not None and r[anchor]["z"] is not None]
        if ratios:
            label = anchor + (asked if anchor == "opacus-prv" else finer)
            print(f"{label:14s} time ratio {label}/dpcalib over {len(ratios)} settings: median "
                  f"{statistics.median(ratios):.2f}x, p10 {_pct(ratios, 0.1):.2f}x, worst {min(ratios):.2f}x; "
                  f"dpcalib's noise at or below it on {sum(noise)}/{len(noise)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
