"""The command line's options mean one thing and read one way: a rate is given as a number or a fraction
(a batch over a dataset's size), and the help of --method names its default once, apart from the
choices."""

import json

import pytest

from dpcalib.cli import main


def _json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("command, extra", [
    ("calibrate", ["--epsilon", "3"]),
    ("epsilon", ["--noise-multiplier", "0.9"]),
])
def test_a_rate_is_a_number_or_a_fraction(capsys, command, extra):
    base = [command, "dp-sgd", "--delta", "1e-5", "--steps", "500", *extra]
    frac = _json(capsys, base + ["--sampling-rate", "256/60000"])
    dec = _json(capsys, base + ["--sampling-rate", repr(256 / 60000)])
    assert frac == dec


@pytest.mark.parametrize("bad", ["1/0", "x", "1/", "/2", "1/2/3"])
def test_a_rate_that_is_not_a_number_is_one_line(capsys, bad):
    assert main(["calibrate", "dp-sgd", "--epsilon", "3", "--delta", "1e-5", "--steps", "5",
                 "--sampling-rate", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--sampling-rate" in err and repr(bad) in err and "a/b" in err


def test_the_method_help_cannot_be_read_as_both_being_the_default(capsys):
    with pytest.raises(SystemExit):
        main(["calibrate", "dp-sgd", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "both (default tight)" not in text and "Default: tight" in text


# --accountant X: one meaning in calibrate, epsilon, account, compare and report, for every X.  A subsampled
# run (gdp refused everywhere, in one line) and a full-batch one (every X answers).
RUNS = {"poisson": (["--sampling-rate", "0.01", "--steps", "100"], ["--poisson", "0.01:1.0:100"]),
        "full batch": (["--sampling-rate", "1", "--steps", "4"], ["--gaussian", "1.0:4"])}


@pytest.mark.parametrize("run", list(RUNS))
@pytest.mark.parametrize("x", ["best", "pld", "rdp", "gdp"])
def test_the_accountant_option_means_the_same_in_every_command(capsys, run, x):
    shape, events = RUNS[run]
    eps_argv = ["epsilon", "dp-sgd", "--delta", "1e-5", "--noise-multiplier", "1.0", *shape, "--accountant", x]
    argvs = {"epsilon": eps_argv,
             "account": ["account", *events, "--delta", "1e-5", "--accountant", x],
             "report": ["report", "dp-sgd", "--delta", "1e-5", "--noise-multiplier", "1.0", *shape, "--accountant", x],
             "report-events": ["report", *events, "--delta", "1e-5", "--accountant", x],
             "calibrate": ["calibrate", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", *shape, "--accountant", x],
             "compare": ["compare", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", *shape, "--accountant", x]}
    if x == "gdp" and run == "poisson":
        for name, argv in argvs.items():
            assert main(argv) == 2, name
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "gdp" in err and "full-batch" in err, (name, err)
        return
    eps = {}
    for name in ("epsilon", "account", "report", "report-events"):
        out = _json(capsys, argvs[name])
        eps[name] = out.get(f"epsilon_{x}_alone", out["epsilon"])
    assert len(set(eps.values())) == 1, eps
    cal = _json(capsys, argvs["calibrate"])
    z = cal["noise"]["noise_multiplier"]
    cmp = _json(capsys, argvs["compare"])
    assert cmp["rows"][-1]["noise"]["noise_multiplier"] == z
    # calibrate met the target with x itself: x's eps of the answer (what `epsilon --accountant x` prints)
    # is at most the target, and 1e-6 less noise misses it
    at = lambda noise: _json(capsys, [*eps_argv[:5], repr(noise), *eps_argv[6:]])["epsilon"]  # noqa: E731
    assert cal["achieved_epsilon"] == at(z) <= 2.0
    assert at(z * (1 - 1e-6)) > 2.0 or x == "best"      # best may hold the target with room (the RDP route's)
