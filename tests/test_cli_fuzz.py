"""Bad-input fuzz of the CLI, in process (``main(argv)``): generated invocations with wrong types,
NaN, +-inf, negatives, zeros, 1e300, missing and repeated options and unknown names.  Every one
must exit 0 or 2, and an exit 2 must say so in exactly one line on stderr -- never a traceback.

The invocations are a fixed function of the seed (``random.Random(0)``): CI replays exactly the
ones that were checked.  Commands that train (``audit``, ``train``) get only values that fail
before any training starts, so the fuzz stays fast; each invocation is bounded by a generous
alarm (a hang fails the test, no timing is asserted).
"""

import random

import pytest

from dpcalib.commands.algorithms import SPECS, number

from .cli_runner import Hang, alarms, call

BAD = ["nan", "NaN", "inf", "-inf", "-1", "0", "1e300", "-1e300", "abc", "", "1e-320", "0x10", "1.5", "--",
       "3:4", "None", "1/0", "0/0", "3/", "/4", "a/b", "1e300/1e-300"]
GOOD = {int: ["2", "10", "20", "40"], float: ["0.5", "1", "2", "3", "1e-5", "0.01", "1.25"],
        str: ["add/remove", "replace-one", "poisson"], bool: [""]}
GOOD[number] = GOOD[float] + ["256/60000", "1/100"]  # a rate may be written as a fraction
COMMANDS = ["calibrate", "epsilon", "compare", "list", "account", "audit", "train", "calibrat", "", "--help",
            "-h", "--version"]


def _value(rng, typ, p_bad):
    if rng.random() < p_bad:
        return rng.choice(BAD)
    return rng.choice(GOOD[typ])


def _invocation(rng):
    command = rng.choices(COMMANDS, weights=[4, 3, 2, 1, 2, 1, 1, 1, 1, 1, 1, 1])[0]
    argv = [command] if command else []
    if command == "account":
        for _ in range(rng.randint(0, 3)):
            kind = rng.choice(["--gaussian", "--poisson", "--wor", "--laplace"])
            n = {"--gaussian": 2}.get(kind, 3) + rng.choice([0, 0, -1, 1])
            argv += [kind, ":".join(rng.choice(BAD + ["0.5", "1", "10", "100"]) for _ in range(max(1, n)))]
        if rng.random() < 0.8:
            argv += ["--delta", rng.choice(BAD + ["1e-5", "0.1"])]
        if rng.random() < 0.3:
            argv += ["--method", rng.choice(["auto", "gdp", "rdp", "pld", ""])]
        return argv
    if command not in ("calibrate", "epsilon", "compare", "audit", "train"):
        return argv + rng.sample(["diff2-gd", "--json", "x", "--help"], rng.randint(0, 2))
    algorithm = rng.choice(list(SPECS)) if rng.random() < 0.85 else rng.choice(["sgd", "DIFF2-GD", "", "--epsilon"])
    argv.append(algorithm)
    spec = SPECS.get(algorithm)
    # mostly valid invocations with one bad value reach the mechanisms; the rest are random.
    # audit and train only ever get bad values (they must fail before training starts).
    mode = "bad" if command in ("audit", "train") else rng.choice(["good", "one-bad", "one-bad", "random"])
    p_bad = {"good": 0.0, "one-bad": 0.0, "random": 0.5, "bad": 1.0}[mode]
    opts = [("--delta", float)] if command == "epsilon" and mode != "random" else [("--epsilon", float), ("--delta", float)]
    if spec is not None:
        opts += [(o.flag, o.type) for o in spec.options]
        if command == "epsilon":
            opts += [("--" + n.replace("_", "-"), float) for n in spec.noise]
    if command == "calibrate":
        opts.append(("--method", str))
    if command in ("audit", "train"):
        opts += [("--runs", int), ("--world-size", int)]
    bad_one = rng.randrange(len(opts)) if mode == "one-bad" else -1
    for j, (flag, typ) in enumerate(opts):
        r = rng.random()
        if mode in ("random", "bad") and r < 0.15:
            continue                                   # missing
        reps = 2 if mode != "good" and r > 0.9 else 1  # repeated
        for _ in range(reps):
            if typ is bool:
                argv.append(flag)
            elif flag == "--method":
                argv += [flag, rng.choice(["paper", "tight", "both"] + (["pld", ""] if mode != "good" else []))]
            elif flag == "--delta" and j != bad_one and rng.random() >= p_bad:
                argv += [flag, rng.choice(["1e-5", "1e-6", "0.01"])]
            elif flag == "--relation":
                argv += [flag, rng.choice(["add/remove", "replace-one"] + (["poisson", ""] if mode != "good" else []))]
            else:
                argv += [flag, rng.choice(BAD) if j == bad_one else _value(rng, typ, p_bad)]
    if mode != "good" and rng.random() < 0.1:
        argv += ["--no-such-option", "1"]
    if rng.random() < 0.2:
        argv.append("--json")
    return argv


@pytest.mark.slow
def test_six_hundred_bad_invocations_exit_0_or_2_with_one_line(capsys):
    rng = random.Random(0)
    codes = {}
    with alarms():
        for i in range(600):
            argv = _invocation(rng)
            try:
                rc = call(argv, 120)   # generous: a hang, not a slow machine
            except Hang:
                pytest.fail(f"invocation {i} hung: dpcalib {' '.join(argv)}")
            out, err = capsys.readouterr()
            assert rc in (0, 2), (i, argv, rc, err)
            assert "Traceback" not in err and "Traceback" not in out, (i, argv, err)
            if rc == 2:
                assert err.count("\n") == 1 and err.startswith("dpcalib: error: "), (i, argv, err)
            codes[rc] = codes.get(rc, 0) + 1
    assert sum(codes.values()) == 600
    assert codes.get(2, 0) > 400 and codes.get(0, 0) > 100     # refused ones and real calibrations both
