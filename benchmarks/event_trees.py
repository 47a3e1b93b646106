"""Issue 74, acceptance 1: random event trees (depth up to 4) against dp-accounting 0.6, side by side.

Three families of trees, each over the kinds both libraries take under one neighbouring relation:

* ``pld`` (add/remove): Gaussian, Laplace, discrete Laplace, Poisson-sampled Gaussian and Laplace,
  composed and self-composed.  Oracle: dp-accounting's PLD accountant (value discretization 1e-4,
  pessimistic).  Pass: dpcalib's certified upper eps <= oracle * (1 + 1e-4) and its lower end <= oracle.
* ``rr`` (replace-one): one randomized response (noise p, B buckets) composed and self-composed.
  dp-accounting's PLD ignores the count of a self-composed randomized response, so the oracle is the
  closed form (the trinomial of the pair, :func:`tests.event_oracles.rr_delta`).  Pass: the bracket
  holds the closed form (``delta(upper) <= target <= delta(lower)``, 1e-9 and 1e-6 of round-off).
* ``rdp`` (add/remove): zCDP and repeat-and-select (which dp-accounting's PLD refuses) over Gaussian,
  Laplace and Poisson-sampled Gaussian trees.  Oracle: dp-accounting's RDP accountant.  Pass: dpcalib's
  eps <= oracle * (1 + 1e-9).
* ``wor`` (replace-one): Gaussians sampled without replacement (a fixed-size batch of m of n records),
  with full-batch Gaussians, composed and self-composed -- dp-accounting takes them with its RDP
  accountant only.  Oracle and pass: as ``rdp``.  Not in the default shares (the 2000-tree runs predate
  it): ``run(n, seed, shares=(0, 0, 0, 1))``.

* ``tsg`` (add/remove): truncated Poisson-sampled Gaussians (dp-accounting's
  ``TruncatedSubsampledGaussianDpEvent``: a Poisson batch cut to at most B records), with full-batch and
  Poisson-sampled Gaussians, composed and self-composed.  Oracle and pass: as ``pld``.  Not in the
  default shares: ``run(n, seed, shares=(0, 0, 0, 0, 1))``.

Not here, though both libraries take it: the mixture of Gaussians (dp-accounting's PLD of one takes
40-200 s; tests/test_mixture_pld.py holds its figures for six trees).

Times: dpcalib's ``epsilon_bracket`` (best route) and dp-accounting's accountant on the same tree, in the
same process, one after the other; medians reported per family.

    python -m benchmarks.event_trees --trees 2000 --seed 0 --out benchmarks/results/event_trees.md
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import numpy as np

DELTA_RANGE = (-8.0, -3.0)
MAX_COUNT = 100
#: dpcalib's bracket width: upper - lower <= RTOL * upper puts upper within 1e-4 of the truth, and the
#: truth is at most dp-accounting's pessimistic upper bound -- the acceptance's 1 + 1e-4
RTOL = 1e-4            # total releases of a tree (dp-accounting's PLD self-composes each event)


def _leaf(rng, dpa, family, rr):
    if family == "rr":
        return dpa.RandomizedResponseDpEvent(*rr)
    if family == "wor":
        if rng.random() < 0.25:
            return dpa.GaussianDpEvent(float(rng.uniform(1.0, 6.0)))
        n = int(10 ** rng.uniform(1, 5))
        return dpa.SampledWithoutReplacementDpEvent(n, int(rng.integers(1, max(2, n // 10) + 1)),
                                                    dpa.GaussianDpEvent(float(rng.uniform(0.8, 5.0))))
    if family == "tsg":
        u = rng.random()
        if u < 0.15:
            return dpa.GaussianDpEvent(float(rng.uniform(1.0, 6.0)))
        q, z = float(10 ** rng.uniform(-2.5, -1)), float(rng.uniform(1.5, 5.0))
        if u < 0.3:
            return dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z))
        n = int(10 ** rng.uniform(2, 5))
        return dpa.TruncatedSubsampledGaussianDpEvent(n, q, max(1, int(q * n * rng.uniform(0.7, 1.4))), z)
    kinds = ["gauss", "laplace", "dlap", "pgauss", "plap"] + (["zcdp"] if family == "rdp" else [])
    if family == "rdp":
        kinds = ["gauss", "laplace", "pgauss", "zcdp"]
    k = kinds[rng.integers(len(kinds))]
    if k == "gauss":
        return dpa.GaussianDpEvent(float(rng.uniform(1.0, 6.0)))
    if k == "laplace":
        return dpa.LaplaceDpEvent(float(rng.uniform(1.0, 6.0)))
    if k == "dlap":
        return dpa.DiscreteLaplaceDpEvent(float(rng.uniform(0.2, 1.5)), int(rng.integers(1, 4)))
    if k == "pgauss":
        # (z >= 1.5: dp-accounting's PLD of a Poisson-sampled Gaussian at 1e-4 takes 2-5 s below it)
        return dpa.PoissonSampledDpEvent(float(10 ** rng.uniform(-2.5, -1)), dpa.GaussianDpEvent(float(rng.uniform(1.5, 5.0))))
    if k == "plap":
        return dpa.PoissonSampledDpEvent(float(10 ** rng.uniform(-2.5, -1)), dpa.LaplaceDpEvent(float(rng.uniform(1.0, 4.0))))
    return dpa.ZCDpEvent(float(10 ** rng.uniform(-4, -1.5)))


def random_tree(rng, dpa, family: str, depth: int = 4, rr=None):
    """A dp-accounting tree of depth at most ``depth`` (leaves at depth 1)."""
    r = rng.random()
    if depth <= 1 or r < 0.3:
        return _leaf(rng, dpa, family, rr)
    if r < 0.6:
        return dpa.SelfComposedDpEvent(random_tree(rng, dpa, family, depth - 1, rr), int(rng.integers(1, 9)))
    if family == "rdp" and r < 0.75:
        return dpa.RepeatAndSelectDpEvent(random_tree(rng, dpa, family, depth - 1, rr),
                                          float(rng.uniform(1.0, 20.0)), float(rng.choice([0.0, 1.0, 2.5, np.inf])))
    return dpa.ComposedDpEvent([random_tree(rng, dpa, family, depth - 1, rr) for _ in range(int(rng.integers(1, 4)))])


def _count(t) -> int:
    name = type(t).__name__
    if name == "SelfComposedDpEvent":
        return t.count * _count(t.event)
    if name == "ComposedDpEvent":
        return sum(_count(e) for e in t.events)
    if name == "RepeatAndSelectDpEvent":
        return _count(t.event)
    return 1


def _has(t, name) -> bool:
    if type(t).__name__ == name:
        return True
    kids = getattr(t, "events", None) or ([t.event] if hasattr(t, "event") else [])
    return any(_has(k, name) for k in kids)


def draw(rng, dpa, family: str, rr=None):
    """A tree of ``family`` with at most MAX_COUNT releases (the rdp family: holding a zCDP or
    repeat-and-select node, which dp-accounting's PLD refuses)."""
    while True:
        t = random_tree(rng, dpa, family, int(rng.integers(1, 5)), rr)
        if _count(t) > MAX_COUNT:
            continue
        if family == "rdp" and not (_has(t, "ZCDpEvent") or _has(t, "RepeatAndSelectDpEvent")):
            continue
        if family == "wor" and not _has(t, "SampledWithoutReplacementDpEvent"):
            continue
        if family == "tsg" and not _has(t, "TruncatedSubsampledGaussianDpEvent"):
            continue
        return t


def compare(tree, family: str, delta: float, rr=None) -> dict:
    """dpcalib's bracket beside the family's oracle, with both times (see the module)."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    from dpcalib.accountant import PrivacyAccountant

    t0 = time.perf_counter()
    acc = PrivacyAccountant.from_dp_event(tree)
    br = acc.epsilon_bracket(delta, rtol=RTOL, atol=0.0)
    ours_t = time.perf_counter() - t0
    nr = dp_accounting.NeighboringRelation
    rel = nr.REPLACE_ONE if family in ("rr", "wor") else nr.ADD_OR_REMOVE_ONE
    t0 = time.perf_counter()
    if family in ("rdp", "wor"):
        a = rdp_privacy_accountant.RdpAccountant(neighboring_relation=rel)
    else:
        a = pld_privacy_accountant.PLDAccountant(neighboring_relation=rel, value_discretization_interval=1e-4)
    a.compose(tree)
    theirs = float(a.get_epsilon(delta))
    their_t = time.perf_counter() - t0
    out = {"family": family, "delta": delta, "lower": br.lower, "upper": br.upper, "method": br.method,
           "theirs": theirs, "ours_s": ours_t, "theirs_s": their_t, "count": _count(tree)}
    if family in ("pld", "tsg"):
        out["ok"] = br.upper <= theirs * (1 + 1e-4) and br.lower <= theirs
    elif family in ("rdp", "wor"):
        out["ok"] = br.upper <= theirs * (1 + 1e-9)
    else:
        from tests.event_oracles import rr_delta

        k = _count(tree)
        up_ok = rr_delta(k, rr[0], rr[1], br.upper) <= delta * (1 + 1e-9)
        lo_ok = br.lower <= 0 or rr_delta(k, rr[0], rr[1], br.lower) >= delta * (1 - 1e-6)
        out["ok"], out["dpa_low"] = up_ok and lo_ok, theirs < br.lower
    return out


FAMILIES = ("pld", "rr", "rdp", "wor", "tsg")


def run(n: int, seed: int, shares=(0.6, 0.15, 0.25, 0.0), every=None) -> list:
    """``n`` trees, split between :data:`FAMILIES` by ``shares`` (in their order); the rows of :func:`compare`."""
    from dp_accounting import dp_event as dpa

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        u = rng.random()
        family = next((f for f, c in zip(FAMILIES, np.cumsum(shares)) if u < c), FAMILIES[len(shares) - 1])
        rr = None
        if family == "rr":
            rr = (float(rng.uniform(0.3, 0.95)), int(rng.choice([2, 2, 3, 5])))
        tree = draw(rng, dpa, family, rr)
        d = float(10 ** rng.uniform(*DELTA_RANGE))
        rows.append(compare(tree, family, d, rr))
        if (i + 1) % 100 == 0:
            print(f"{i + 1} trees", file=sys.stderr, flush=True)
            if every is not None:
                every(rows)
    return rows


def summary(rows, command: str) -> str:
    """The markdown results table."""
    lines = ["# Event trees against dp-accounting 0.6 (issue 74, acceptance 1)", "",
             f"Command: `{command}`", "",
             "| family | trees | pass | median ours (s) | median dp-accounting (s) | median ratio ours/theirs "
             "| worst upper / oracle | notes |", "|---|---|---|---|---|---|---|---|"]

    def times(r):                 # the three median columns of rows r
        return (f"{statistics.median(x['ours_s'] for x in r):.4f} | {statistics.median(x['theirs_s'] for x in r):.4f} | "
                f"{statistics.median(x['ours_s'] / x['theirs_s'] for x in r):.3f}")

    for fam in FAMILIES:
        r = [x for x in rows if x["family"] == fam]
        if not r:
            continue
        ratio = [x["upper"] / x["theirs"] for x in r if x["theirs"] > 0 and math.isfinite(x["theirs"])]
        note = ""
        if fam == "rr":
            note = f"dp-accounting's PLD below the closed form's lower end on {sum(x['dpa_low'] for x in r)} trees"
        oracle = {"rr": "closed form", "pld": "PLD 1e-4", "tsg": "PLD 1e-4"}.get(fam, "RDP")
        lines.append(f"| {fam} ({oracle}) | {len(r)} | {sum(x['ok'] for x in r)} | {times(r)} | "
                     f"{max(ratio) if ratio else float('nan'):.6f} | {note} |")
    if rows:
        lines.append(f"| all trees | {len(rows)} | {sum(x['ok'] for x in rows)} | {times(rows)} |  |  |")
    bad = [x for x in rows if not x["ok"]]
    lines += ["", f"Failures: {len(bad)}"] + [f"- {x}" for x in bad[:20]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """Command line: ``--trees N --seed S --out FILE``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trees", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    command = f"python -m benchmarks.event_trees --trees {a.trees} --seed {a.seed}" + (f" --out {a.out}" if a.out else "")

    def write(rows):             # (the results so far, every 100 trees: a long run leaves a record)
        if a.out:
            with open(a.out, "w") as f:
                f.write(summary(rows, command) + ("" if len(rows) >= a.trees else f"\n(partial: {len(rows)} of {a.trees} trees)\n"))

    rows = run(a.trees, a.seed, every=write)
    text = summary(rows, command)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
