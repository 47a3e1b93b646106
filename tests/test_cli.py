"""The `dpcalib` CLI as a subprocess: every algorithm x {calibrate, epsilon} x {table, --json}."""

import json
import subprocess
import sys

import pytest

from dpcalib.commands.algorithms import SPECS
from dpcalib.cli import main
from dpcalib.mechanisms import ALGORITHMS

SHAPES = {
    "dp-gd": (["--rounds", "200", "--clients", "10", "--n-min", "1651"], dict(rounds=200, clients=10, n_min=1651), {}),
    "diff2-gd": (["--rounds", "200", "--restart-interval", "20", "--clients", "10", "--n-min", "1651"],
                 dict(rounds=200, restart_interval=20, clients=10, n_min=1651), {"u": 1.5}),
    "diff2-bvr": (["--rounds", "100", "--restart-interval", "10", "--clients", "10", "--n-min", "1651",
                   "--local-steps", "5", "--batch-size", "13"],
                  dict(rounds=100, restart_interval=10, clients=10, n_min=1651, local_steps=5, batch_size=13),
                  {"u1": 3.0, "u2": 3.0}),
    "dp-sgd": (["--sampling-rate", "0.02", "--steps", "150"], dict(sampling_rate=0.02, steps=150), {}),
    "dp-srm": (["--n", "49990", "--steps", "50", "--b0", "256", "--b", "64"], dict(n=49990, steps=50, b0=256, b=64),
               {"beta": 0.5}),
    "dicesgd": (["--n", "50000", "--batch-size", "1000", "--steps", "150", "--c1", "1", "--c2", "0.001"],
                dict(N=50000, batch_size=1000, steps=150, C1=1.0, C2=0.001), {}),
    "clipd2p": (["--samples-per-node", "2500", "--iterations", "350"], dict(samples_per_node=2500, iterations=350), {}),
    "constd2p": (["--samples-per-node", "2500", "--iterations", "350"], dict(samples_per_node=2500, iterations=350), {}),
}


def split_flags(algo):
    """The calibration's budget split as options (calibrate, compare: epsilon and report take none)."""
    return [f for k, v in SHAPES[algo][2].items() for f in ("--" + k, str(v))]


def run(*args):
    return subprocess.run([sys.executable, "-m", "dpcalib", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("algo", list(SHAPES))
@pytest.mark.parametrize("method", ["paper", "tight"])
def test_calibrate_json_equals_api(algo, method):
    flags, shape, split = SHAPES[algo]
    r = run("calibrate", algo, "--epsilon", "2", "--delta", "1e-5", "--method", method, "--json", *flags,
            *split_flags(algo))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    api = ALGORITHMS[algo][0](**shape).calibrate(2.0, 1e-5, method=method, **split)
    assert out["algorithm"] == algo and out["method"] == method
    for key in ("epsilon", "delta", "sigma1", "sigma2", "sigma3", "sigma4", "noise", "achieved_epsilon", "order",
                "conversion", "warnings"):
        assert key in out
    for name, val in api.noise.items():
        assert out["noise"][name] == (None if val is None else pytest.approx(val, rel=1e-12))
    assert out["achieved_epsilon"] == pytest.approx(api.achieved_epsilon, rel=1e-12)
    assert out["warnings"] == list(api.warnings)
    for s in ("sigma1", "sigma2", "sigma3", "sigma4"):
        if out[s] is None:
            assert out["notes"][s]  # the reason is given


@pytest.mark.parametrize("algo", list(SHAPES))
def test_calibrate_table(algo):
    flags, _, _ = SHAPES[algo]
    r = run("calibrate", algo, "--epsilon", "2", "--delta", "1e-5", *flags)
    assert r.returncode == 0, r.stderr
    assert "achieved    epsilon=" in r.stdout and SPECS[algo].noise[0] in r.stdout


@pytest.mark.parametrize("algo", list(SHAPES))
def test_epsilon_json_and_table_equal_api(algo):
    flags, shape, _ = SHAPES[algo]
    noise = {"sigma1": 0.01, "sigma2": 0.05, "sigma3": 0.6, "noise_multiplier": 1.2, "sigma0": 0.03,
             "sigma": 0.9}
    if algo == "dp-srm":
        noise["sigma"] = 0.001
    if algo == "dicesgd":
        noise["sigma1"] = 0.1
    vals = [noise[n] for n in SPECS[algo].noise]
    nflags = [x for n, v in zip(SPECS[algo].noise, vals) for x in ("--" + n.replace("_", "-"), str(v))]
    r = run("epsilon", algo, "--delta", "1e-5", "--json", *flags, *nflags)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    acc = ALGORITHMS[algo][0](**shape).accountant(*vals)
    api = acc.get_epsilon(1e-5, "best")          # the CLI default: --accountant best
    assert out["epsilon"] == pytest.approx(api, rel=1e-12)
    assert out["epsilon"] <= acc.get_epsilon(1e-5) * (1 + 1e-12)   # never worse than RDP/GDP
    t = run("epsilon", algo, "--delta", "1e-5", *flags, *nflags)
    assert t.returncode == 0 and f"{api:.6g}" in t.stdout
    r = json.loads(run("epsilon", algo, "--delta", "1e-5", "--json", "--accountant", "rdp", *flags, *nflags).stdout)
    assert r["epsilon"] == pytest.approx(acc.get_epsilon(1e-5, "rdp"), rel=1e-12)


def test_issue_worked_invocation():
    r = run("calibrate", "diff2-gd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "2000", "--restart-interval",
            "20", "--clients", "10", "--n-min", "1651", "--u", "1.25", "--method", "paper", "--json")
    out = json.loads(r.stdout)
    assert f"{out['sigma1']:.6g}" == "0.00234584" and f"{out['sigma2']:.6g}" == "0.0204506"
    assert out["sigma3"] is None and out["sigma4"] is None and out["notes"]["sigma3"] and out["notes"]["sigma4"]


def test_method_both_and_curve_and_compare_and_list():
    flags = SHAPES["diff2-gd"][0]
    both = json.loads(run("calibrate", "diff2-gd", "--epsilon", "3", "--delta", "1e-5", "--method", "both", "--json",
                          *flags, *split_flags("diff2-gd")).stdout)
    assert [d["method"] for d in both] == ["paper", "tight"] and both[1]["sigma1"] < both[0]["sigma1"]
    cur = json.loads(run("epsilon", "dp-sgd", "--delta", "1e-5", "--noise-multiplier", "1.1", "--sampling-rate", "0.02",
                         "--steps", "150", "--curve", "--json").stdout)["curve"]
    assert [p["rounds"] for p in cur][-1] == 150 and all(a["epsilon"] < b["epsilon"] for a, b in zip(cur, cur[1:]))
    cmp_ = json.loads(run("compare", "dp-gd", "--epsilon", "3", "--delta", "1e-5", "--json", *SHAPES["dp-gd"][0]).stdout)
    row = cmp_["rows"][1]
    assert row["best_epsilon"] == pytest.approx(3.0, rel=1e-9)
    assert row["rdp_mironov_epsilon"] >= row["rdp_improved_epsilon"] >= row["best_epsilon"]
    assert row["dp_accounting_pld_epsilon"] == pytest.approx(3.0, abs=2e-3)
    lst = run("list")
    assert lst.returncode == 0 and all(name in lst.stdout for name in SPECS)


def test_adad2p_refused():
    r = run("calibrate", "adad2p", "--epsilon", "1", "--delta", "1e-5")
    assert r.returncode == 2 and "no finite (eps, delta) guarantee" in r.stderr and "Traceback" not in r.stderr


GD = SHAPES["diff2-gd"][0]


@pytest.mark.parametrize("args,fragment", [
    (["calibrate", "diff2-gd", "--epsilon", "0", "--delta", "1e-5", *GD], "epsilon=0.0"),
    (["calibrate", "diff2-gd", "--epsilon", "3", "--delta", "1", *GD], "delta=1.0"),
    (["calibrate", "diff2-gd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "10", "--restart-interval", "20",
      "--clients", "10", "--n-min", "1651"], "--restart-interval=20"),
    (["calibrate", "diff3-gd", "--epsilon", "3", "--delta", "1e-5"], "ALGORITHM='diff3-gd'"),
    (["calibrate", "diff2-gd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "2000"], "required"),
    (["calibrate", "diff2-gd", "--epsilon", "three", "--delta", "1e-5", *GD], "invalid float value: 'three'"),
    (["calibrate", "diff2-gd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "2000", "--restart-interval", "20",
      "--clients", "-10", "--n-min", "1651"], "clients=-10"),
    (["calibrate", "dp-sgd", "--epsilon", "3", "--delta", "1e-5", "--sampling-rate", "1.5", "--steps", "10"],
     "--sampling-rate=1.5"),
    (["calibrate", "diff2-bvr", "--epsilon", "3", "--delta", "1e-5", "--rounds", "2000", "--restart-interval", "20",
      "--clients", "10", "--n-min", "1651", "--local-steps", "5", "--batch-size", "13", "--u1", "1.25", "--u2", "1.25"],
     "1/u1 + 1/u2 < 1"),
    (["calibrate", "diff2-bvr", "--epsilon", "3", "--delta", "1e-5", "--rounds", "2000", "--restart-interval", "20",
      "--clients", "10", "--n-min", "100", "--local-steps", "5", "--batch-size", "130"], "--batch-size=130"),
    (["calibrate", "--epsilon", "3"], "ALGORITHM is required"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["calibrate", "diff2-gd", "--epsilon", "3", "--delta", "1e-5", "--method", "exact", *GD], "invalid choice"),
    (["epsilon", "dp-sgd", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "10"], "--noise-multiplier"),
    (["epsilon", "dp-sgd", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "10", "--noise-multiplier", "-1"],
     "--noise-multiplier=-1.0"),
    (["calibrate", "dp-sgd", "--epsilon", "3", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "2.5"],
     "invalid int value: '2.5'"),
])
def test_malformed_invocations_exit_2_with_one_line(args, fragment):
    r = run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert fragment in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_help_and_calibrate_do_not_import_torch():
    code = ("import sys, runpy\n"
            "from dpcalib.cli import main\n"
            "main(['--help']); main(['calibrate', 'diff2-gd', '--help'])\n"
            "main(['calibrate', 'diff2-gd', '--epsilon', '3', '--delta', '1e-5', '--rounds', '2000',"
            " '--restart-interval', '20', '--clients', '10', '--n-min', '1651'])\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "example:" in r.stdout and "--restart-interval" in r.stdout


def test_failed_paper_conditions_are_shown_beside_the_number_and_warned_in_python(capsys):
    """The table shows each failed paper condition in the block of the calibration it explains (the
    paper's achieved eps marked above the target), not again on stderr; --json keeps them in its
    ``warnings`` key and one line each on stderr, so that stdout stays JSON."""
    import json
    import warnings as W

    from dpcalib.mechanisms import DiceSGD, PaperConditionWarning

    with W.catch_warnings(record=True) as caught:
        W.simplefilter("always")
        rep = DiceSGD(50000, 1000, 150, C1=1.0, C2=1.0, C=1.0).calibrate(2.0, 1e-5, method="paper")
    py = [str(w.message) for w in caught if issubclass(w.category, PaperConditionWarning)]
    assert py and py == list(rep.warnings)
    argv = ["calibrate", "dicesgd", "--epsilon", "2", "--delta", "1e-5", "--n", "50000", "--batch-size", "1000",
            "--steps", "150", "--c1", "1", "--c2", "1", "--c", "1", "--method", "both"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    paper, tight = out.split("\n\n")
    achieved = next(line for line in paper.splitlines() if line.startswith("achieved"))
    assert achieved.startswith("achieved    epsilon=3.00214 (") and "ABOVE the target 2" in achieved, achieved
    assert [line[12:] for line in paper.splitlines() if line.startswith("warning     ")] == py
    assert "warning" not in tight and "ABOVE" not in tight
    assert err == "", err
    assert main(argv[:-2] + ["--method", "paper", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["warnings"] == py
    assert {f"dpcalib: warning: {m}" for m in py} == set(err.splitlines())


def test_a_failed_computation_is_an_internal_error_not_a_usage_error(monkeypatch, capsys):
    import math as _math

    import dpcalib.mechanisms as M

    def broken(self, *args, **kwargs):
        return _math.sqrt(-1.0)          # ValueError: math domain error, not a check of the input
    monkeypatch.setattr(M.DPSGD, "calibrate", broken)
    rc = main(["calibrate", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", "--sampling-rate", "0.02", "--steps", "10"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert len(err) == 1 and err[0].startswith("dpcalib: internal error: ValueError: math domain error")
    # a check of the input stays a usage error (exit 2)
    monkeypatch.undo()
    rc = main(["calibrate", "dp-sgd", "--epsilon", "-2", "--delta", "1e-5", "--sampling-rate", "0.02", "--steps", "10"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("dpcalib: error:")


def test_cli_options_are_the_mechanisms_fields():
    # one registry: every constructor field of every mechanism is an option, with its default
    import dataclasses

    for name, (cls, _) in ALGORITHMS.items():
        spec = SPECS[name]
        shape = {o.field: o for o in spec.options if o.target == "shape"}
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert set(shape) == set(fields), name
        for f in fields.values():
            assert shape[f.name].required == (f.default is dataclasses.MISSING)
            assert shape[f.name].required or shape[f.name].default == f.default
        assert {o.field for o in spec.options if o.target == "split"} == set(cls.calibrate_options)
    assert SPECS["diff2-bvr"].noise == ("sigma1", "sigma2", "sigma3")
    assert SPECS["dicesgd"].options[0].flag == "--n" and SPECS["dp-srm"].options[-1].flag == "--beta"
