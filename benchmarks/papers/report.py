"""The tables of benchmarks/results/experiments_*.md (linked from docs/how-to/reproduce-papers.md), from the result files the three experiment scripts write
(benchmarks/papers/results/*.json): one markdown table per setting, mean +- std over the seeds, the
paired one-sided p-values and the chosen hyper-parameters.

    python benchmarks/papers/report.py
"""

from __future__ import annotations

import json
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from benchmarks.papers import common  # noqa: E402


def _load(name):
    path = os.path.join(common.RESULTS, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _p(t):
    return f"{t['p']:.3g} ({t['wins']}/{len(t.get('n', [])) or '5'})"


def second_half(curve) -> float:
    """The mean train gradient norm over the logged rounds of the run's second half."""
    last = curve[-1]["round"]
    vals = [m["grad_norm"] for m in curve if m["round"] > last / 2]
    return sum(vals) / len(vals)


def diff2(name="diff2_vs_dpgd"):
    r = _load(name)
    if r is None:
        return
    print(f"### DIFF2-GD vs DP-GD (eps {r['eps']:g}, delta {r['delta']:g}, P = {r['P']}, R = {r['rounds']}, "
          f"{r['seeds']} seeds; {r['wall_s']:.0f} s)\n")
    for name, d in r["data"].items():
        ch = d["chosen"]
        print(f"**{name}** (n = {d['n_train']}, n_min = {d['n_min']}); tuned: DP-GD {ch['dp-gd']['setting']} "
              f"({ch['dp-gd']['unstable']}/{r['budget']} unstable), DIFF2-GD {ch['diff2-gd']['setting']} "
              f"({ch['diff2-gd']['unstable']}/{r['budget']} unstable); eps certified for the paper's noise: "
              f"DP-GD {d['paper_noise_certified_eps']['dp-gd']:.4g}, DIFF2-GD {d['paper_noise_certified_eps']['diff2-gd']:.4g}\n")
        print("| noise | algorithm | min grad norm | mean grad norm, 2nd half | final grad norm | final train loss "
              "| final test loss |")
        print("|---|---|---|---|---|---|---|")
        for noise in ("sound", "paper", "none"):
            half = {}
            for algo in ("dp-gd", "diff2-gd"):
                rows = d["runs"][f"{algo}/{noise}"]
                half[algo] = [second_half(c) for c in d["curves"][f"{algo}/{noise}"]]
                cells = [common.fmt([x["min_grad_norm"] for x in rows], 3), common.fmt(half[algo], 3)]
                cells += [common.fmt([x[m] for x in rows], 3) for m in ("grad_norm", "loss", "test_loss")]
                print(f"| {noise} | {algo} | " + " | ".join(cells) + " |")
            t = dict(d["tests"])
            t[f"{noise}/half"] = common.paired(half["diff2-gd"], half["dp-gd"])
            print(f"| {noise} | p (DIFF2 lower; wins) | " + " | ".join(
                f"{t[f'{noise}/{m}']['p']:.3g} ({t[f'{noise}/{m}']['wins']}/{r['seeds']})"
                for m in ("min_grad_norm", "half", "grad_norm", "loss", "test_loss")) + " |")
        print()


def dice():
    r = _load("dicesgd_vs_dpsgd")
    if r is None:
        return
    print(f"### DiceSGD vs DPSGD-GC (digits, B = {r['B']}, {r['epochs']} epochs = {r['steps']} steps, "
          f"{r['seeds']} seeds; {r['wall_s']:.0f} s)\n")
    print("| eps | C | run | noise std on the average | lr | final train loss | test accuracy | eps spent |")
    print("|---|---|---|---|---|---|---|---|")
    for tag, s in r["settings"].items():
        for key, rows in s["runs"].items():
            noise = s["noise_on_average"].get(key, 0.0)
            eps = rows[0]["epsilon"]
            print(f"| {s['eps']:g} | {s['C']:g} | {key} | {noise:.4g} | {s['chosen'][key]['setting']['lr']:g} | "
                  f"{common.fmt([x['loss'] for x in rows], 3)} | {common.fmt([x['test_accuracy'] for x in rows], 3)} | "
                  f"{eps:.4g} |")
        t = s["tests"]
        print(f"| {s['eps']:g} | {s['C']:g} | p (DiceSGD better; wins) | | | "
              f"sound {t['sound/loss']['p']:.3g} ({t['sound/loss']['wins']}/{r['seeds']}), paper "
              f"{t['paper/loss']['p']:.3g} ({t['paper/loss']['wins']}/{r['seeds']}) | sound "
              f"{t['sound/test_accuracy']['p']:.3g} ({t['sound/test_accuracy']['wins']}/{r['seeds']}), paper "
              f"{t['paper/test_accuracy']['p']:.3g} ({t['paper/test_accuracy']['wins']}/{r['seeds']}), code "
              f"{t['code/test_accuracy']['p']:.3g} ({t['code/test_accuracy']['wins']}/{r['seeds']}), none "
              f"{t['none/test_accuracy']['p']:.3g} ({t['none/test_accuracy']['wins']}/{r['seeds']}) | |")
    print()


def srm():
    r = _load("dpsrm_vs_dpgd")
    if r is None:
        return
    print(f"### DP-SRM vs DP-GD (lambda {r['lambda']:g}, C1 {r['C1']:g}, C2 {r['C2']:g}, gamma {r['gamma']:g}, "
          f"b0 {r['b0']}, b {r['b']}, {r['seeds']} seeds; {r['wall_s']:.0f} s)\n")
    print("| data | eps | run | tuned | data passes | final objective | grad norm | test error | eps spent |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tag, s in r["settings"].items():
        for key, rows in s["runs"].items():
            algo = key.split("/")[0]
            st = s["chosen"][algo]["setting"]
            print(f"| {s['data']} | {s['eps']:g} | {key} | lr {st['lr']:g}, {'T' if algo == 'dp-srm' else 'R'} "
                  f"{st['length']} | {rows[0]['passes']:.3g} | {common.fmt([x['loss'] for x in rows], 3)} | "
                  f"{common.fmt([x['grad_norm'] for x in rows], 3)} | {common.fmt([x['test_error'] for x in rows], 3)} | "
                  f"{rows[0]['epsilon']:.4g} |")
        t = s["tests"]
        print(f"| {s['data']} | {s['eps']:g} | p (DP-SRM lower; wins) | | | " + " | ".join(
            f"sound {t[f'sound/{m}']['p']:.3g} ({t[f'sound/{m}']['wins']}/{r['seeds']}), paper "
            f"{t[f'paper/{m}']['p']:.3g} ({t[f'paper/{m}']['wins']}/{r['seeds']})" for m in ("loss", "grad_norm", "test_error"))
            + " | |")
    print()


if __name__ == "__main__":
    diff2()
    diff2("diff2_vs_dpgd_R2000")
    dice()
    srm()
