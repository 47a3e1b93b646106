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
