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


def test_the_benchmark_refuses_bad_options_in_one_line(capsys):
    """``--prv-tolerance``, ``--who`` and ``--setting`` are checked before any calibration runs: exit 2
    and one line naming the option, the value and the allowed range."""
    import pytest

    from benchmarks.bench_calibration_space import main

    for argv, name in ((["--prv-tolerance", "0"], "--prv-tolerance=0.0"), (["--prv-tolerance", "0.5"], "--prv-tolerance=0.5"),
                       (["--who", "prv"], "--who='prv'"), (["--setting", "2", "10", "1", "1e-5"], "--setting"),
                       (["--setting", "0.1", "ten", "1", "1e-5"], "--setting"),
                       (["--setting", "0.1", "inf", "1", "1e-5"], "--setting"), (["--setting", "nan", "10", "1", "1e-5"], "--setting"),
                       (["--prv-tolerance", "nan"], "--prv-tolerance=nan"), (["--prv-tolerance", "1e300"], "--prv-tolerance=1e+300"),
                       (["--dp-accounting-interval", "0"], "--dp-accounting-interval=0.0"),
                       (["--dp-accounting-interval", "nan"], "--dp-accounting-interval=nan"),
                       (["--dp-accounting-interval", "1"], "--dp-accounting-interval=1.0"),
                       (["--settings", "ten"], "--settings='ten'"), (["--settings", "0"], "--settings='0'"),
                       (["--settings", "49"], "--settings='49'")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2, argv
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert name in err and "is not allowed: expected" in err, err


def test_a_prv_child_call_takes_the_tolerance(monkeypatch):
    """``--prv-tolerance REL`` reaches Opacus as ``epsilon_tolerance = eps_error = REL * eps``."""
    import opacus.accountants.utils as ou

    from benchmarks import bench_calibration_space as B

    seen = {}

    def fake(**kw):
        seen.update(kw)
        return 1.25
    monkeypatch.setattr(ou, "get_noise_multiplier", fake)
    z, t = B._call("opacus-prv", 0.01, 100, 2.0, 1e-5, 1e-3)
    assert z == 1.25 and t >= 0.0
    assert seen["epsilon_tolerance"] == seen["eps_error"] == 2e-3 and seen["accountant"] == "prv"
    seen.clear()
    B._call("opacus-prv", 0.01, 100, 2.0, 1e-5)
    assert "epsilon_tolerance" not in seen and "eps_error" not in seen     # the documented call: Opacus's defaults


def test_a_dp_accounting_child_call_takes_the_grid(monkeypatch):
    """``--dp-accounting-interval H`` reaches dp-accounting as ``PLDAccountant(value_discretization_interval=H)``;
    without it the documented call builds the accountant with dp-accounting's defaults."""
    from dp_accounting import mechanism_calibration as mc
    from dp_accounting.pld import pld_privacy_accountant as pa

    from benchmarks import bench_calibration_space as B

    seen = []

    class Fake:
        def __init__(self, **kw):
            seen.append(kw)

    def fake(make_accountant, make_event, eps, delta):
        make_accountant()
        assert make_event(0.9).count == 100
        return 0.875
    monkeypatch.setattr(pa, "PLDAccountant", Fake)
    monkeypatch.setattr(mc, "calibrate_dp_mechanism", fake)
    z, t = B._call("dp-accounting", 0.01, 100, 2.0, 1e-5, dpa_interval=1e-5)
    assert z == 0.875 and t >= 0.0 and seen == [{"value_discretization_interval": 1e-5}]
    seen.clear()
    B._call("dp-accounting", 0.01, 100, 2.0, 1e-5)
    assert seen == [{}]


def test_the_ab_comparison_runs_a_setting_in_both_checkouts_and_refuses_bad_input(capsys, monkeypatch):
    """benchmarks/ab_calibration.py: the same checkout twice gives the same answer bit for bit (each
    side a fresh process); a path that is not a checkout, or a setting count out of 1..48, exits 2 in
    one line before anything runs."""
    import io
    import os

    import pytest

    from benchmarks import ab_calibration as AB

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.setattr(AB, "grid", lambda n: [(0.02, 10, 2.0, 0.0098)][:n])
    buf = io.StringIO()
    rows = AB.compare(here, here, 1, out=buf)
    (s, a, b), = rows
    assert a["z"] == b["z"] and abs(a["z"] - 0.434809) < 1e-5
    assert "1 of 1 answers bit for bit" in buf.getvalue()
    for argv, name in (([here, "/no/such/checkout"], "checkout='/no/such/checkout'"),
                       ([here, here, "--settings", "0"], "--settings=0"), ([here, here, "--settings", "49"], "--settings=49")):
        with pytest.raises(SystemExit) as e:
            AB.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and name in err[0] and "is not allowed: expected" in err[0], err


def test_the_ab_comparison_counts_two_failures_as_failures_not_the_same_answer(monkeypatch):
    """A setting that fails in both checkouts (a crash, memory) prints both notes and is not counted
    among the answers bit for bit (it read "same" when both answers were None)."""
    import io

    from benchmarks import ab_calibration as AB

    monkeypatch.setattr(AB, "grid", lambda n: [(0.02, 10, 2.0, 0.0098)][:n])
    monkeypatch.setattr(AB, "child", lambda c, s: {"z": None, "t": float("nan"), "note": f"MemoryError in {c}"})
    buf = io.StringIO()
    AB.compare("a", "b", 1, out=buf)
    text = buf.getvalue()
    assert "same" not in text and "MemoryError in a" in text and "MemoryError in b" in text
    assert "0 of 1 answers bit for bit" in text
