"""The ``random-allocation`` package (Feldman & Shenfeld's bounds for random allocation, 1.0.5) as an
oracle, run in its own interpreter: it pins ``numpy < 2.2``, so it lives in a separate virtual
environment, e.g.::

    python3 -m venv /work/venv-ra && /work/venv-ra/bin/pip install random-allocation==1.0.5 pandas matplotlib
    export RANDOM_ALLOCATION_PYTHON=/work/venv-ra/bin/python

:func:`query` sends jobs to that interpreter (this file, run as a script there, imports nothing of
dpcalib) and returns its answers; :func:`available` says whether it can.  Each job is one setting
``(sigma, t, epochs, delta)`` with one allocation (k = 1: balls-in-bins); the answers are each
method's eps and its CPU seconds, and optionally the smallest sigma whose best certified eps meets a
target (geometric bisection).

Methods (the package's names): ``direct``, ``rdp_dco``, ``decomposition``, ``combined``, ``recursive``
are upper bounds (the package calls them certified; ``decomposition`` takes one epoch only);
``lower`` is Chua et al.'s lower bound (one epoch only).  Monte Carlo estimates are not used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

#: the upper-bound methods, in the package's names
UPPER = {"direct": "Allocation (Our - Direct)", "rdp_dco": "Allocation (DCO25 - RDP)",
         "decomposition": "Allocation (Our - Decomposition)", "combined": "Allocation (Our - Combined)",
         "recursive": "Allocation (Our - Recursive)"}
LOWER = {"lower": "Allocation (CGHKKLMSZ24 - Lower Bound)"}
ENV = "RANDOM_ALLOCATION_PYTHON"


def python() -> str | None:
    """The interpreter with ``random_allocation`` installed (``$RANDOM_ALLOCATION_PYTHON``), or None."""
    exe = os.environ.get(ENV)
    return exe if exe and os.path.exists(exe) else None


def available() -> bool:
    """True when :func:`python` names an interpreter that imports the package."""
    exe = python()
    if exe is None:
        return False
    r = subprocess.run([exe, "-c", "import random_allocation"], capture_output=True, text=True)
    return r.returncode == 0


def query(jobs: list, timeout: float = 3600.0) -> list:
    """Each job's answers, computed by the package in one fresh process (jobs in order, so the first
    job's times include the package's first-call compilation).

    Args:
        jobs: dicts ``{"sigma", "t", "epochs", "delta", "methods": [...], "calibrate": eps or None}``.
        timeout: seconds for the whole batch.

    Returns:
        One dict per job: ``{method: {"epsilon": float | None, "cpu_s": float, "error": str | None}}``
        and, where asked, ``"calibrated": {"sigma": float, "cpu_s": float, "evaluations": int}``.

    Raises:
        RuntimeError: no interpreter (``$RANDOM_ALLOCATION_PYTHON``), or it failed.
    """
    exe = python()
    if exe is None:
        raise RuntimeError(f"set {ENV} to a python with random-allocation installed")
    r = subprocess.run([exe, os.path.abspath(__file__)], input=json.dumps(jobs), capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip()[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def best_certified(answer: dict) -> tuple:
    """``(eps, method)``: the smallest finite upper bound among the answer's methods."""
    vals = [(a["epsilon"], m) for m, a in answer.items() if m in UPPER and a.get("epsilon") is not None
            and a["epsilon"] < float("inf")]
    return min(vals) if vals else (None, None)


# ---- the package's side (runs under $RANDOM_ALLOCATION_PYTHON) --------------------------------------
def _serve() -> None:
    import contextlib
    import io
    import math
    import time
    import warnings

    warnings.filterwarnings("ignore")
    import numpy as np
    from random_allocation.comparisons.definitions import methods_dict
    from random_allocation.comparisons.structs import PrivacyParams, SchemeConfig

    cfg = SchemeConfig(allocation_direct_alpha_orders=[int(i) for i in np.arange(2, 61)])   # its paper's orders

    def eps(method, sigma, job):
        f = methods_dict[{**UPPER, **LOWER}[method]].epsilon_calculator
        p = PrivacyParams(sigma=sigma, num_steps=int(job["t"]), num_selected=1, num_epochs=int(job["epochs"]),
                          delta=float(job["delta"]))
        with contextlib.redirect_stdout(io.StringIO()):      # (its progress lines)
            v = float(f(p, cfg))
        return v if math.isfinite(v) else None

    out = []
    for job in json.loads(sys.stdin.read()):
        ans = {}
        for m in job["methods"]:
            t0 = time.process_time()
            try:
                ans[m] = {"epsilon": eps(m, float(job["sigma"]), job), "error": None}
            except Exception as exc:                           # (a method refusing a setting: > 1 epoch)
                ans[m] = {"epsilon": None, "error": f"{type(exc).__name__}: {exc}"[:200]}
            ans[m]["cpu_s"] = time.process_time() - t0
        target = job.get("calibrate")
        if target is not None:
            # the smallest sigma whose best certified eps (the job's upper methods) is at most the target
            ups = [m for m in job["methods"] if m in UPPER and ans[m]["epsilon"] is not None]
            best = lambda s: min((eps(m, s, job) or math.inf) for m in ups)    # noqa: E731
            t0, n = time.process_time(), 0
            lo, hi = float(job["sigma"]) / 2.0, float(job["sigma"]) * 2.0
            while best(hi) > target:
                lo, hi, n = hi, hi * 2.0, n + 1
            while best(lo) <= target:
                lo, hi, n = lo / 2.0, lo, n + 1
            while hi / lo - 1.0 > float(job.get("rtol", 1e-4)):
                mid = math.sqrt(lo * hi)
                n += 1
                if best(mid) <= target:
                    hi = mid
                else:
                    lo = mid
            ans["calibrated"] = {"sigma": hi, "cpu_s": time.process_time() - t0, "evaluations": n + 2}
        out.append(ans)
    print(json.dumps(out))


if __name__ == "__main__":
    _serve()
