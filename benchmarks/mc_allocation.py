"""Monte Carlo oracle of balls-in-bins' privacy loss, written from the dominating pair alone (no code
of ``dpcalib.accountant``): the soundness tests of the accountant's bracket (tests/test_allocation.py)
and the stored estimates of the settings too large to sample in a unit test.

One epoch of ``t`` steps, noise multiplier ``z``: the pair is ``P = (1/t) sum_i N(e_i / z, I_t)`` against
``Q = N(0, I_t)`` (Chua et al., "Balls-and-Bins Sampling for DP-SGD", AISTATS 2025, Sec. 3).  With
``g ~ N(0, I_t)`` and ``a = 1/z`` the likelihood ratio is ``X = (1/t) sum_i exp(a g_i - a^2/2)`` under
``Q``; under ``P`` (by symmetry the record in step 1) ``g_1`` is shifted by ``a``, which multiplies that
term by ``e^(a^2)``.  The remove direction's loss is ``log X`` under ``P``, the add direction's is
``-log X`` under ``Q``; ``K`` epochs add ``K`` independent losses.  Both directions are read from the same
draws (each estimator is valid on its own).

``delta(eps) = E[(1 - e^(eps - L))_+]`` is the mean of variables in ``[0, 1]``: its one-sided 99.9 %
limits are the empirical Bernstein bound (Maurer & Pontil 2009, Thm 4; distribution-free, finite
``n``), and the eps limits follow by bisection -- the lower limit is the largest eps whose lower
``delta`` limit is still above ``delta``, the upper the smallest whose upper limit is at most ``delta``.

    python benchmarks/mc_allocation.py [--samples 1000000] [--seed 0] [--out tests/data/allocation_mc.json]

computes the stored settings (:data:`STORED`) and writes their limits (minutes).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np

#: the settings sampled here once and stored for the tests (t * epochs too large for a unit test):
#: (t, z, epochs, delta)
STORED = ((200, 0.8, 5, 1e-3), (500, 1.0, 1, 1e-3), (1000, 0.5, 1, 1e-3), (1000, 2.0, 2, 1e-3),
          (300, 0.66, 3, 1e-3), (150, 1.5, 20, 1e-3), (50, 1.0, 100, 1e-3), (1000, 1.0, 1, 1e-2))
#: one-sided level of every limit
ALPHA = 1e-3
#: normal draws per chunk (memory)
_CHUNK = 1 << 23


def losses(t: int, z: float, epochs: int, n: int, seed: int):
    """``(remove, add)``: ``n`` samples each of the ``epochs``-fold composed privacy loss."""
    rng = np.random.default_rng(seed)
    a = 1.0 / z
    rem = np.zeros(n)
    add = np.zeros(n)
    rows = max(1, _CHUNK // t)
    boost = math.exp(a * a)
    for _ in range(epochs):
        for s in range(0, n, rows):
            m = min(rows, n - s)
            g = rng.standard_normal((m, t))
            # terms exp(a g - a^2/2), summed stably by their maximum
            g *= a
            g -= 0.5 * a * a
            top = g.max(axis=1)
            g -= top[:, None]
            np.exp(g, out=g)
            total = g.sum(axis=1)                   # X t e^-top under Q
            first = g[:, 0].copy()
            log_q = np.log(total) + top - math.log(t)
            log_p = np.log(total + first * (boost - 1.0)) + top - math.log(t)
            rem[s:s + m] += log_p
            add[s:s + m] -= log_q
    return rem, add


def _bernstein(n: int, s1: float, s2: float) -> tuple:
    """``(lower, upper)`` one-sided ``1 - ALPHA`` limits of the mean of ``n`` variables in ``[0, 1]`` with sum
    ``s1`` and sum of squares ``s2`` (empirical Bernstein)."""
    mean = s1 / n
    var = max(0.0, (s2 - n * mean * mean) / (n - 1))
    lg = math.log(2.0 / ALPHA)
    m = math.sqrt(2.0 * var * lg / n) + 7.0 * lg / (3.0 * (n - 1))
    return mean - m, mean + m


def delta_limits(Ls: np.ndarray, eps: float) -> tuple:
    """Limits of ``delta(eps) = E[(1 - e^(eps - L))_+]`` from sorted samples ``Ls`` (the terms are 0 at
    ``L <= eps``)."""
    x = -np.expm1(eps - Ls[np.searchsorted(Ls, eps, side="right"):])
    return _bernstein(Ls.size, float(np.sum(x)), float(np.sum(x * x)))


def epsilon_limits(L: np.ndarray, delta: float) -> tuple:
    """``(lower, upper)`` one-sided limits of ``eps(delta)``: the largest eps whose lower ``delta`` limit is
    above ``delta`` (``-inf`` if none) and the smallest whose upper limit is at most ``delta``."""
    Ls = np.sort(L)

    def solve(k):
        lo, hi = float(min(Ls[0], 0.0)) - 1.0, float(Ls[-1]) + 1.0
        if delta_limits(Ls, lo)[k] <= delta:
            return -math.inf, lo
        for _ in range(70):
            mid = 0.5 * (lo + hi)
            if delta_limits(Ls, mid)[k] > delta:
                lo = mid
            else:
                hi = mid
        return lo, hi

    # (eps is at least 0 by definition: delta(0) <= delta means eps(delta) = 0)
    return max(solve(0)[0], 0.0), max(solve(1)[1], 0.0)


def limits(t: int, z: float, epochs: int, delta: float, n: int = 1_000_000, seed: int = 0) -> dict:
    """The one-sided limits of both directions' eps at one setting."""
    rem, add = losses(t, z, epochs, n, seed)
    return {"t": t, "z": z, "epochs": epochs, "delta": delta, "samples": n, "seed": seed,
            "remove": epsilon_limits(rem, delta), "add": epsilon_limits(add, delta)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="tests/data/allocation_mc.json")
    p.add_argument("--only", type=int, nargs="*", default=None,
                   help="recompute only these settings (indices of STORED), keep the others of --out")
    a = p.parse_args(argv)
    out = []
    old = {}
    if a.only is not None:
        with open(a.out) as fh:
            old = {(r["t"], r["z"], r["epochs"]): r for r in json.load(fh)["settings"]}
    for k, (t, z, e, d) in enumerate(STORED):
        if a.only is not None and k not in a.only and (t, z, e) in old:
            out.append(old[(t, z, e)])
            continue
        t0 = time.time()
        r = limits(t, z, e, d, a.samples, a.seed + k)
        out.append(r)
        print(f"t={t} z={z} epochs={e} delta={d}: remove {r['remove']}, add {r['add']} ({time.time() - t0:.0f} s)",
              flush=True)
    with open(a.out, "w") as fh:
        json.dump({"command": "python benchmarks/mc_allocation.py " + " ".join(argv or sys.argv[1:]),
                   "alpha": ALPHA, "settings": out}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
