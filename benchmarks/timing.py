"""The one timing helper of the benchmarks: the median of repeated wall-clock timings."""

from __future__ import annotations

import statistics
import time


def median_time(fn, repeats: int, warmup: int = 1) -> float:
    """Median wall time in seconds of ``repeats`` calls of ``fn``, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)
