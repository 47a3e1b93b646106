"""The parameter-space fuzz of every command (benchmarks/fuzz_cli.py), its CI slice: worked command
lines of the registry and of the raw-event commands with one to three options replaced by values
from a grid that includes the extremes (1e-300, 1e300, 1e20 steps, n not divisible by b, every
algorithm and relation) or with an option of another command added.  Each case runs in process
under a time limit; it must exit 0 with finite numbers or 2 with one 'dpcalib: error:' line --
never exit 1, a traceback, a hang or a MemoryError.  The cases are a fixed function of the seed;
the long run (thousands of cases, one process each, with the slow values) is in docs/testing.md."""

import pytest

from benchmarks import fuzz_cli as F

from .cli_runner import Hang, alarms, call

CASES = F.cases(220, seed=41, cheap=True)
CHUNKS = 8


def test_the_slice_covers_every_command_and_algorithm():
    commands = {c[0] for c in CASES}
    assert {"calibrate", "epsilon", "compare", "report", "account", "audit", "probe", "train", "list"} <= commands
    algorithms = {c[1] for c in CASES if len(c) > 1 and not c[1].startswith("-")}
    from dpcalib.mechanisms import REGISTRY

    assert set(REGISTRY) <= algorithms
    extremes = {"1e-300", "1e300", "1e20", "100000000000000000000"}
    assert all(any(v in c for c in CASES) for v in extremes)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_every_case_exits_0_with_finite_numbers_or_2_with_one_line(capsys, chunk):
    outcomes, bad = [], []
    with alarms():
        for i in range(chunk, len(CASES), CHUNKS):
            argv = CASES[i]
            try:
                rc = call(argv, 90)                # a hang, not a slow machine (cases take < 10 s)
            except Hang:
                pytest.fail(f"case {i} hung: dpcalib {' '.join(argv)}")
            out, err = capsys.readouterr()
            verdict = F.judge(rc, out, err)
            if verdict is not None:
                bad.append((i, verdict, " ".join(argv), err.strip()[-300:]))
            outcomes.append(rc)
    assert not bad, "\n".join(map(str, bad))
    assert set(outcomes) <= {0, 2} and len(outcomes) == len(range(chunk, len(CASES), CHUNKS))
