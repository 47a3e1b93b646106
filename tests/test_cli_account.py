"""`dpcalib account` run as a subprocess."""

import json
import subprocess
import sys

import pytest

from dpcalib.accountant import PoissonSampledGaussianEvent, PrivacyAccountant


def run(*args):
    return subprocess.run([sys.executable, "-m", "dpcalib", *args], capture_output=True, text=True)


def test_account_json_equals_api():
    r = run("account", "--poisson", "0.01:1.0:1000", "--delta", "1e-5", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 1000)
    b = acc.epsilon_bracket(1e-5)                       # the default: --accountant best
    assert out["epsilon"] == pytest.approx(b.upper, rel=1e-12) and out["method"] == "pld"
    assert out["epsilon_lower"] == pytest.approx(b.lower, rel=1e-12)
    assert out["epsilon"] == acc.get_epsilon(1e-5)      # the API's default: the same best certified eps
    assert out["epsilon"] < acc.get_epsilon(1e-5, "rdp")  # tighter than RDP
    rdp = json.loads(run("account", "--poisson", "0.01:1.0:1000", "--delta", "1e-5", "--json",
                         "--accountant", "rdp").stdout)
    assert rdp["epsilon"] == pytest.approx(acc.get_epsilon(1e-5, "rdp"), rel=1e-12) and rdp["method"] == "rdp"


def test_account_gaussian_is_exact():
    r = run("account", "--gaussian", "10:100", "--delta", "1e-5", "--json")
    assert json.loads(r.stdout)["epsilon"] == pytest.approx(4.3771781, abs=1e-6)   # 1-GDP at 1e-5 (published)


@pytest.mark.parametrize("args,fragment", [
    (["account", "--poisson", "1.5:1:3", "--delta", "1e-5"], "sampling_probability=1.5"),
    (["account", "--poisson", "a:1:3", "--delta", "1e-5"], "--poisson='a:1:3'"),
    (["account", "--gaussian", "1:10", "--delta", "1"], "delta=1.0"),
    (["account", "--delta", "1e-5"], "at least one of"),
    (["account", "--gaussian", "1:10"], "--delta"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["account", "--poisson", "0.01:1:3", "--delta", "1e-5", "--accountant", "gdp"], "--accountant gdp is not allowed"),
    (["account", "--wor", "0.01:1:3", "--delta", "1e-5", "--accountant", "gdp"], "--accountant gdp is not allowed"),
    (["epsilon", "dp-sgd", "--noise-multiplier", "1e-9", "--delta", "1e-5", "--sampling-rate", "0.5",
      "--steps", "10", "--accountant", "pld"], "--accountant='pld' is not allowed for these events"),
])
def test_bad_input_one_line_exit_2(args, fragment):
    r = run(*args)
    assert r.returncode == 2
    assert fragment in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


# ---- one flag per base mechanism of the registry of kinds (issue 74, build 3) ------------------------------------
def _api(cls, *fields):
    import dpcalib.accountant as A

    return getattr(A, cls)(*fields)


#: every event flag: (its value, the same event through the Python API, its count, a bad value and the range the
#: refusal names)
FLAGS = {
    "gaussian": ("2:10", ("GaussianEvent", 2.0), 10, "-2:10", "(0, inf)"),
    "poisson": ("0.01:1:100", ("PoissonSampledGaussianEvent", 0.01, 1.0), 100, "1.5:1:3", "[0, 1]"),
    "wor": ("0.01:1:100", ("WORSampledGaussianEvent", 0.01, 1.0), 100, "2:1:3", "[0, 1]"),
    "balls-in-bins": ("10:1:3", ("BallsInBinsGaussianEvent", 10, 1.0), 3, "0:1:3", "[1, inf]"),
    "laplace": ("20:100", ("LaplaceEvent", 20.0), 100, "-1:10", "(0, inf)"),
    "discrete-laplace": ("0.5:2:10", ("DiscreteLaplaceEvent", 0.5, 2), 10, "0.5:0.5:10", "[1, 1000000]"),
    "discrete-gaussian": ("3:10", ("DiscreteGaussianEvent", 3.0), 10, "-1:10", "(0, 10000]"),
    "randomized-response": ("0.2:4:10", ("RandomizedResponseEvent", 0.2, 4), 10, "2:10", "[0, 1]"),
    "epsilon-delta": ("0.5:1e-7:10", ("EpsilonDeltaEvent", 0.5, 1e-7), 10, "1:2:10", "[0, 1)"),
    "zcdp": ("0.001:50", ("ZCDPEvent", 0.001), 50, "-1:10", "[0, inf)"),
    "mixture-of-gaussians": ("2:0,1:0.5,0.5:10", ("MixtureOfGaussiansEvent", 2.0, (0, 1), (0.5, 0.5)), 10,
                             "2:0,1:0.5:10", "summing to 1"),
    "tree-aggregation": ("2:3,1:5", ("TreeAggregationEvent", 2.0, (3, 1)), 5, "2:0:5", "not all 0"),
    "non-private": ("1", ("NonPrivateEvent",), 1, "x", "integer count"),
    "truncated-subsampled-gaussian": ("1000:0.1:120:1:20", ("TruncatedPoissonGaussianEvent", 1000, 0.1, 120, 1.0), 20,
                                      "1000:0.1:0:1:20", "[1, inf]"),
}


def test_every_base_mechanism_of_the_registry_has_a_flag():
    import dataclasses

    from dpcalib.accountant import event_types
    from dpcalib.commands.account import account_parser, event_kinds

    leaves = {c.__name__ for c in event_types()
              if not any(f.name in ("event", "events") for f in dataclasses.fields(c))}
    assert {cls.__name__ for cls, *_ in event_kinds().values()} == leaves    # a kind registered later too
    assert {flag for flag, (cls, *_) in event_kinds().items() if cls.__module__.startswith("dpcalib.")} == set(FLAGS)
    options = {o for a in account_parser()._actions for o in a.option_strings}
    assert {f"--{flag}" for flag in event_kinds()} <= options


@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_each_flag_is_the_api_event(flag, capsys):
    from dpcalib.cli import main

    text, (cls, *fields), count, _, _ = FLAGS[flag]
    acc = PrivacyAccountant().compose(_api(cls, *fields), count)
    rc = main(["account", f"--{flag}={text}", "--delta", "1e-5", "--json"])
    out = capsys.readouterr()
    if flag == "non-private":              # no privacy: refused in one line naming the flag, as the API's eps says
        assert rc == 2 and f"--non-private='{text}'" in out.err and acc.get_epsilon(1e-5) == float("inf")
        return
    assert rc == 0, out.err
    b = acc.epsilon_bracket(1e-5)          # the default: --accountant best
    assert json.loads(out.out)["epsilon"] == b.upper


@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_each_flag_refuses_a_bad_value_in_one_line(flag, capsys):
    from dpcalib.cli import main

    *_, bad, allowed = FLAGS[flag]
    assert main(["account", f"--{flag}={bad}", "--delta", "1e-5"]) == 2
    err = capsys.readouterr().err
    assert f"--{flag}={bad!r}" in err and allowed in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_flags_compose_with_each_other_and_with_events(tmp_path, capsys):
    from dpcalib.accountant import LaplaceEvent, ZCDPEvent
    from dpcalib.cli import main

    tree = tmp_path / "tree.json"
    tree.write_text('{"kind": "laplace", "noise_multiplier": 20}')
    assert main(["account", "--events", str(tree), "--laplace", "20:99", "--zcdp", "0.001:50", "--delta", "1e-5",
                 "--json"]) == 0
    # the same calls as the command: the file's tree, then each flag in turn
    acc = PrivacyAccountant().compose(LaplaceEvent(20)).compose(LaplaceEvent(20.0), 99).compose(ZCDPEvent(0.001), 50)
    assert json.loads(capsys.readouterr().out)["epsilon"] == acc.epsilon_bracket(1e-5).upper
