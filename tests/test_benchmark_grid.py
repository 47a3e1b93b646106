"""The calibration benchmark's grid (benchmarks/bench_calibration_space.py) is fixed and covers the
tails the calibration issue names: small q, huge T, small eps, small delta."""

from benchmarks.bench_calibration_space import TAILS, grid


def test_the_grid_is_fixed_and_covers_the_tails():
    g = grid()
    assert g == grid() and len(g) == len(set(g)) == 48
    assert g[:3] == list(TAILS)
    assert min(s[0] for s in g) == 1e-4 and max(s[0] for s in g) == 0.5
    assert max(s[1] for s in g) == 1_000_000 and min(s[1] for s in g) == 10
    assert min(s[2] for s in g) == 0.3 and min(s[3] for s in g) == 1e-8
    assert sum(s[0] <= 2.8e-4 for s in g) >= 10 and sum(s[1] >= 100_000 for s in g) >= 10
