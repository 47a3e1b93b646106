"""The balls-in-bins bracket against the ``random-allocation`` package (Feldman & Shenfeld's bounds, an
optional oracle: it pins numpy < 2.2, so it runs in its own interpreter, ``$RANDOM_ALLOCATION_PYTHON``;
benchmarks/ra_oracle.py says how to make one).  Skipped without it.

At every setting of the package's comparison table (the issue's): our certified upper end is below the
package's best certified bound (its every upper method), and not below its lower bound."""

import pytest

from benchmarks import ra_oracle
from dpcalib.accountant import BallsInBinsGaussianEvent, pld_epsilon

WHY = ((1.0, 100, 1), (0.658, 196, 1), (1.0, 196, 50))


def test_best_certified_takes_the_smallest_finite_upper_bound():
    ans = {"direct": {"epsilon": 3.0}, "rdp_dco": {"epsilon": 2.0}, "recursive": {"epsilon": None},
           "lower": {"epsilon": 1.0}, "decomposition": {"epsilon": float("inf")}}
    assert ra_oracle.best_certified(ans) == (2.0, "rdp_dco")
    assert ra_oracle.best_certified({"lower": {"epsilon": 1.0}}) == (None, None)


@pytest.mark.skipif(not ra_oracle.available(), reason="random-allocation not installed ($RANDOM_ALLOCATION_PYTHON)")
def test_upper_end_is_below_random_allocations_best_certified_bound():
    jobs = [{"sigma": z, "t": t, "epochs": E, "delta": 1e-5,
             "methods": ["direct", "rdp_dco", "recursive"] + (["decomposition", "lower"] if E == 1 else [])}
            for z, t, E in WHY]
    for (z, t, E), ans in zip(WHY, ra_oracle.query(jobs)):
        b = pld_epsilon([(BallsInBinsGaussianEvent(t, z), E)], 1e-5)
        best, _ = ra_oracle.best_certified(ans)
        assert b.upper < best, (z, t, E, b, ans)
        if E == 1:
            assert ans["lower"]["epsilon"] <= b.upper, (z, t, E, b, ans)     # its lower bound, ours certified
