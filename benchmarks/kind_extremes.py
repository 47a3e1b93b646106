"""Every event kind at the ends of its range, alone and sampled, on every route: time and memory per query.

    python -m benchmarks.kind_extremes            # a markdown table, then a summary
    python -m benchmarks.kind_extremes --flagged  # only the rows flagged (an error, seconds or memory)

Each mechanism (the discrete Gaussian and Laplace at the top of their ranges, randomized response on
10^12 buckets, Laplace at scales 1e-8 and 1e8, a mixture of Gaussians) is taken alone, Poisson-sampled
(q = 0.01) and sampled without replacement (10 of 1 000), composed once and 1 000 times, and asked
``get_epsilon(1e-5)`` by the ``best``, ``rdp`` and ``pld`` routes, in that order, in one process (so a
later route may find an answer cached).  Per query: the answer (a number, ``refused`` for a one-line
``InputError``, or the exception a user would see), the seconds, and the peak of the memory numpy and
Python allocated during it (``tracemalloc``; the PLD's default cap is 1 GB).  A row is flagged where the
query raised anything but ``InputError``, took over 20 s, or peaked above 1.25 GB.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import time
import tracemalloc
import warnings

CAP_MB = 1024
FLAG_SECONDS, FLAG_MB = 20.0, 1.25 * CAP_MB


def _mechanisms():
    from dpcalib.accountant import (DiscreteGaussianEvent, DiscreteLaplaceEvent, LaplaceEvent,
                                    MixtureOfGaussiansEvent, RandomizedResponseEvent)

    return [("discrete Gaussian sigma 1e4", lambda: DiscreteGaussianEvent(1e4, 1)),
            ("discrete Gaussian sigma 1e4, s 1e4", lambda: DiscreteGaussianEvent(1e4, 10 ** 4)),
            ("discrete Gaussian sigma 1, s 1e4", lambda: DiscreteGaussianEvent(1.0, 10 ** 4)),
            ("discrete Laplace a 1e-4, s 1e6", lambda: DiscreteLaplaceEvent(1e-4, 10 ** 6)),
            ("discrete Laplace a 10, s 1e6", lambda: DiscreteLaplaceEvent(10.0, 10 ** 6)),
            ("randomized response p 0.5, 1e12 buckets", lambda: RandomizedResponseEvent(0.5, 10 ** 12)),
            ("Laplace scale 1e-8", lambda: LaplaceEvent(1e-8)),
            ("Laplace scale 1e8", lambda: LaplaceEvent(1e8)),
            ("mixture of Gaussians", lambda: MixtureOfGaussiansEvent(1.0, [0.0, 1.0, 2.0], [0.5, 0.3, 0.2]))]


def _wrappers():
    from dpcalib.accountant import PoissonSampledEvent, WORSampledEvent

    return [("alone", lambda e: e), ("Poisson q 0.01", lambda e: PoissonSampledEvent(0.01, e)),
            ("WOR 10 of 1000", lambda e: WORSampledEvent(10, 1000, e))]


class _Late(Exception):
    pass


def _late(*_):
    raise _Late()


def run(timeout: int = 300, progress=None):
    """Every row: ``(mechanism, wrapper, count, route, answer, seconds, peak MB, flagged)``."""
    from dpcalib.accountant import PrivacyAccountant
    from dpcalib.accountant.validation import InputError

    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _late)
    rows = []
    tracemalloc.start()
    for mname, make in _mechanisms():
        for wname, wrap in _wrappers():
            try:
                event = wrap(make())
            except InputError:
                rows.append((mname, wname, "-", "-", "refused (the event)", 0.0, 0.0, False))
                continue
            for k in (1, 1000):
                for route in ("best", "rdp", "pld"):
                    tracemalloc.reset_peak()
                    base = tracemalloc.get_traced_memory()[0]
                    t = time.perf_counter()
                    signal.alarm(timeout)
                    try:
                        e = PrivacyAccountant().compose(event, k).get_epsilon(1e-5, accountant=route)
                        answer, bad = f"{e:.6g}", math.isnan(e)
                    except InputError:
                        answer, bad = "refused", False
                    except _Late:
                        answer, bad = f"over {timeout} s", True
                    except Exception as exc:  # noqa: BLE001 -- what a user would see is the finding
                        answer, bad = f"{type(exc).__name__}: {str(exc)[:60]}", True
                    finally:
                        signal.alarm(0)
                    dt = time.perf_counter() - t
                    mb = (tracemalloc.get_traced_memory()[1] - base) / 2 ** 20
                    rows.append((mname, wname, k, route, answer, dt, mb, bad or dt > FLAG_SECONDS or mb > FLAG_MB))
                    if progress:
                        progress(rows[-1])
    tracemalloc.stop()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flagged", action="store_true", help="print only the flagged rows")
    p.add_argument("--timeout", type=int, default=300, help="seconds a query may take (default 300)")
    a = p.parse_args(argv)
    if a.timeout < 1:
        p.error(f"--timeout={a.timeout} is not allowed: expected an integer >= 1.")
    print("| mechanism | sampling | releases | route | eps at delta 1e-5 | seconds | peak MB | flagged |")
    print("|---|---|---|---|---|---|---|---|")

    def show(r):
        if r[7] or not a.flagged:
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]:.1f} | {r[6]:.0f} | {'yes' if r[7] else ''} |",
                  flush=True)
    rows = run(a.timeout, show)
    errors = sum(1 for r in rows if r[7] and not r[4][:1].isdigit() and r[4] not in ("inf", "refused"))
    print(f"\n{len(rows)} queries; {sum(r[7] for r in rows)} flagged ({errors} errors); slowest {max(r[5] for r in rows):.1f} s; "
          f"largest peak {max(r[6] for r in rows):.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
