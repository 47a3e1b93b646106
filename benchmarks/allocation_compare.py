"""Balls-in-bins against the other samplers and against the ``random-allocation`` package (one run; the
numbers of benchmarks/results/accounting_checks.md and allocation_compare.md.

    RANDOM_ALLOCATION_PYTHON=/work/venv-ra/bin/python python benchmarks/allocation_compare.py \
        [--out benchmarks/results/allocation_compare.md] [--plot docs/img/allocation_samplers.png]

1. The package's comparison table (the issue's settings, delta = 1e-5): dpcalib's balls-in-bins bracket
   and Poisson's certified eps beside every bound of the package (ra_oracle.py), and the ratio of our
   certified upper end to its best certified bound.
2. Three run shapes -- CIFAR-10 (n 50 000, batch 256, 50 epochs, delta 1e-5), ImageNet-like (n 1.28e6,
   batch 4096, 90 epochs, delta 1e-6) and a small-q long run (n 1e6, batch 256, 100 epochs, delta
   1e-6): each sampler's eps at Poisson's calibrated noise for eps = 8 (equal noise), and each
   sampler's calibrated noise for eps = 8 (equal eps).  Samplers: Poisson (q = b/n, E ceil(n/b)
   steps, add/remove), balls-in-bins (add/remove), shuffled batches (the bracket, zero-out),
   fixed-size batches without replacement (replace-one: the sum moves by 2C, so its event's noise
   multiplier is half of std / C), and the package's best certified and lower bounds for balls-in-bins.
3. The plot: eps against the noise multiplier per sampler at the three shapes.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import ra_oracle
from dpcalib.accountant import (BallsInBinsGaussianEvent, PrivacyAccountant, WORSampledGaussianEvent, pld_epsilon,
                                shuffle_epsilon_bracket)
from dpcalib.mechanisms import DPSGD
from dpcalib.mechanisms.search import smallest_scale

#: the package's comparison table: (sigma, t, epochs), delta 1e-5
WHY = ((1.0, 100, 1), (0.658, 196, 1), (1.0, 196, 50))
#: run shapes: (name, n, batch, epochs, delta)
SHAPES = (("CIFAR-10", 50_000, 256, 50, 1e-5), ("ImageNet-like", 1_280_000, 4096, 90, 1e-6),
          ("small q, long run", 1_000_000, 256, 100, 1e-6))
TARGET = 8.0


def why_table(ra: bool) -> list:
    lines = ["## 1. The package's comparison table (delta = 1e-5)", "",
             "| sigma, t, epochs | Poisson (dpcalib) | balls-in-bins bracket (dpcalib) | random-allocation lower | "
             "its bounds: direct / decomposition / DCO RDP / recursive | its best certified | ours / its best |",
             "|---|---|---|---|---|---|---|"]
    for z, t, E in WHY:
        b = pld_epsilon([(BallsInBinsGaussianEvent(t, z), E)], 1e-5)
        pois = DPSGD(1.0 / t, t * E).epsilon(1e-5, z).epsilon
        if ra:
            ms = ["direct", "rdp_dco", "recursive"] + (["decomposition", "lower"] if E == 1 else [])
            ans = ra_oracle.query([{"sigma": z, "t": t, "epochs": E, "delta": 1e-5, "methods": ms}])[0]
            best, which = ra_oracle.best_certified(ans)
            f = lambda m: f"{ans[m]['epsilon']:.4f}" if m in ans and ans[m]["epsilon"] is not None else "n/a"  # noqa
            lines.append(f"| {z:g}, {t}, {E} | {pois:.4f} | [{b.lower:.5f}, {b.upper:.5f}] | {f('lower')} | "
                         f"{f('direct')} / {f('decomposition')} / {f('rdp_dco')} / {f('recursive')} | "
                         f"{best:.4f} ({which}) | **{b.upper / best:.3f}** |")
        else:
            lines.append(f"| {z:g}, {t}, {E} | {pois:.4f} | [{b.lower:.5f}, {b.upper:.5f}] | - | - | - | - |")
    return lines + [""]


def _wor(n, b, E, z, d):
    """Fixed-size batches without replacement, replace-one: ``T`` steps of the WOR event at ``z / 2``."""
    return PrivacyAccountant().compose(WORSampledGaussianEvent(b / n, z / 2.0), E * -(-n // b)).epsilon_bracket(d).upper


def _ra_eps(jobs):
    return [ra_oracle.best_certified(a)[0] for a in ra_oracle.query(jobs)]


def shape_table(ra: bool) -> list:
    lines = ["## 2. Samplers at three run shapes (eps = 8)", "",
             "Equal noise: each sampler's eps at Poisson's calibrated noise multiplier for eps = 8.  Equal eps: "
             "each sampler's calibrated noise multiplier (certified) for eps = 8.  Shuffle: [lower, certified "
             "upper]; fixed-size WOR is replace-one (a record replaced, the batch sum moves by 2C).", "",
             "| shape | Poisson | balls-in-bins | shuffle | fixed-size WOR | random-allocation certified (lower) |",
             "|---|---|---|---|---|---|"]
    noise_rows = []
    for name, n, b, E, d in SHAPES:
        pois = DPSGD(b / n, E * -(-n // b))
        bib = DPSGD(sampling="balls-in-bins", n=n, batch_size=b, epochs=E)
        shuf = DPSGD(sampling="shuffle", n=n, batch_size=b, epochs=E)
        t0 = time.process_time()
        z = pois.calibrate(TARGET, d).noise["noise_multiplier"]
        eb = bib.epsilon_bracket(d, z)
        es = shuffle_epsilon_bracket(z, n, b, E, d)
        ew = _wor(n, b, E, z, d)
        t = bib.steps_per_epoch
        ra_txt = "-"
        if ra:
            ra_txt = f"{_ra_eps([{'sigma': z, 't': t, 'epochs': E, 'delta': d, 'methods': ['direct', 'rdp_dco']}])[0]:.3f} (n/a past one epoch)"
        lines.append(f"| {name}: n {n}, b {b}, {E} epochs (t = {t}), delta {d:g}; noise {z:.4f} | {TARGET:g} | "
                     f"[{eb.lower:.4f}, {eb.upper:.4f}] | [{es.lower:.3f}, {es.upper:.3f}] | {ew:.3f} | {ra_txt} |")
        zb = bib.calibrate(TARGET, d).noise["noise_multiplier"]
        zs = shuf.calibrate(TARGET, d).noise["noise_multiplier"]
        zw = smallest_scale(lambda s: _wor(n, b, E, s, d), TARGET, start=z, rtol=1e-6)
        zr = "-"
        if ra:
            a = ra_oracle.query([{"sigma": zb, "t": t, "epochs": E, "delta": d, "methods": ["direct", "rdp_dco"],
                                  "calibrate": TARGET}])[0]
            zr = f"{a['calibrated']['sigma']:.4f} ({a['calibrated']['sigma'] / z:.3f})"
        noise_rows.append(f"| {name} | {z:.4f} | {zb:.4f} ({zb / z:.3f}) | {zs:.4f} ({zs / z:.3f}) | "
                          f"{zw:.4f} ({zw / z:.3f}) | {zr} |")
        print(name, "done in", round(time.process_time() - t0, 1), "CPU s", flush=True)
    lines += ["", "Calibrated noise multiplier for eps = 8 (ratio to Poisson's):", "",
              "| shape | Poisson | balls-in-bins | shuffle (certified end) | fixed-size WOR | random-allocation certified |",
              "|---|---|---|---|---|---|"] + noise_rows
    return lines + [""]


def plot(path: str, ra: bool) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    zs = np.geomspace(0.5, 4.0, 13)
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5), sharex=True, gridspec_kw={"height_ratios": [2.2, 1]})
    for k, (name, n, b, E, d) in enumerate(SHAPES):
        ax, rax = axes[0, k], axes[1, k]
        pois = DPSGD(b / n, E * -(-n // b))
        bib = DPSGD(sampling="balls-in-bins", n=n, batch_size=b, epochs=E)
        t = bib.steps_per_epoch
        ep = np.array([pois.epsilon(d, z).epsilon for z in zs])
        eb = np.array([bib.epsilon(d, z).epsilon for z in zs])
        sh = [shuffle_epsilon_bracket(z, n, b, E, d) for z in zs]
        ew = [_wor(n, b, E, z, d) for z in zs]
        ax.plot(zs, [s.upper for s in sh], "-", color="#c44", label="shuffle, certified upper end (zero-out)")
        ax.plot(zs, [s.lower for s in sh], ":", color="#c44", label="shuffle, lower end")
        ax.plot(zs, ew, "-.", color="#884", label="fixed-size WOR (replace-one)")
        ax.plot(zs, ep, "-", color="#2a2", lw=6, alpha=0.35, label="Poisson (dpcalib, certified)")
        if ra:
            er = np.array(_ra_eps([{"sigma": float(z), "t": t, "epochs": E, "delta": d,
                                    "methods": ["direct", "rdp_dco"]} for z in zs]))
            ax.plot(zs, er, "--", color="#48c", label="balls-in-bins, random-allocation's best certified")
            rax.plot(zs, er / ep, "--", color="#48c")
        ax.plot(zs, eb, "o-", color="#15d", ms=3, label="balls-in-bins (dpcalib, certified)")
        rax.axhline(1.0, color="#2a2", lw=6, alpha=0.35)
        rax.plot(zs, eb / ep, "o-", color="#15d", ms=3)
        ax.set_yscale("log")
        ax.set_title(f"{name}: n {n}, b {b}, {E} epochs, delta {d:g}", fontsize=9)
        rax.set_xscale("log")
        rax.set_xticks([0.5, 0.7, 1, 1.5, 2, 3, 4], ["0.5", "0.7", "1", "1.5", "2", "3", "4"])
        rax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        rax.set_xlabel("noise multiplier (noise std / C)")
        for a in (ax, rax):
            a.grid(True, which="both", alpha=0.3)
    axes[0, 0].set_ylabel("eps")
    axes[1, 0].set_ylabel("eps / Poisson's eps")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return [f"## 3. The plot", "", f"`{path}`: eps against the noise multiplier, {len(zs)} noise levels from "
            f"{zs[0]:g} to {zs[-1]:g} per shape; below, each balls-in-bins curve over Poisson's.", ""]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args(argv)
    ra = ra_oracle.available()
    cmd = " ".join(["python benchmarks/allocation_compare.py"] + (argv if argv is not None else sys.argv[1:]))
    lines = ["# Balls-in-bins against other samplers and the random-allocation package", "",
             f"`RANDOM_ALLOCATION_PYTHON=... {cmd}`, {datetime.date.today().isoformat()}"
             + ("" if ra else " (random-allocation not available: its columns empty)") + ".", ""]
    lines += why_table(ra)
    lines += shape_table(ra)
    if args.plot:
        lines += plot(args.plot, ra)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
