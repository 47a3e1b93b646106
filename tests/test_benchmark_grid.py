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


def test_a_child_call_counts_its_work():
    """``--child dpcalib ... --work`` (a fresh process: the counter wraps scipy.fft there) reports
    the noise, the FFT work and the bracket evaluations of one calibration -- the counts the
    calibration notes compare, where this machine's wall times move by tens of percent."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_calibration_space", "--child", "dpcalib",
                          "0.02", "10", "2", "0.0098", "--work"], capture_output=True, text=True, env=env,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert abs(r["z"] - 0.434809) < 1e-5           # the space benchmark's table
    assert r["work"] > 0.0 and r["evaluations"] >= 3 and r["t"] > 0.0
