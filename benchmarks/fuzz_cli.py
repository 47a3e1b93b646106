"""The parameter-space fuzz of every ``dpcalib`` command: each case is a worked command line of the
registry (or of the raw-event commands) with one to three of its options replaced by a value from a
grid that includes the extremes -- 1e-300, 1e300, 1e20 steps, n not divisible by the batch size,
every algorithm and relation -- or an option of another command added.  Every case must exit 0 with
a finite answer or exit 2 with one line on stderr that starts ``dpcalib: error:``; none may exit 1
(an internal error), print a traceback, run past its time limit or out of memory.

    python -m benchmarks.fuzz_cli --cases 3000 --workers 2 --timeout 300      # the long run (docs/testing.md)

The cases are a fixed function of ``--seed``.  The long run starts one process per case (its time
limit and peak memory are then the case's own); the CI slice (tests/test_cli_fuzz_space.py) runs
the cheap cases in process with an alarm per case.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import time

#: values of each kind of option: the extremes, the ordinary, and the malformed
COUNTS = ["1", "2", "3", "7", "100", "1001", "123457", "1000000000", "1000000001", "100000000000", "1e20",
          "100000000000000000000", "0", "-1", "1.5", "nan", "abc"]
REALS = ["1e-300", "1e-10", "0.01", "0.3", "1", "2", "5", "1e10", "1e300", "0", "-1", "nan", "inf", "-inf", "abc",
         "1e-320"]
PROBS = ["1e-300", "1e-4", "0.01", "0.5", "0.999", "1", "1.5", "0", "-0.1", "nan"]
DELTAS = ["1e-300", "1e-12", "1e-5", "0.01", "0.5", "0.999999", "1", "0", "nan"]
EPSILONS = ["1e-300", "1e-6", "0.01", "0.5", "2", "8", "100", "1e6", "1e300", "0", "-1", "nan", "inf"]
SEEDS = ["0", "1", "-1", "2147483648", "1e3", "abc"]
#: values that make a case long on purpose (the long run only): medium counts
LONG_COUNTS = ["10000000", "100000000"]
#: valid values whose answer takes 5-40 s (the privacy-loss distribution of 1e9 steps, of b/n = 1e-9,
#: of noise 0.01): the long run draws them, the CI slice does not
SLOW = {"1000000000", "0.01", "1e-4", "100"}

#: option -> value kind (options not listed: by their argparse type)
KINDS = {"--delta": DELTAS, "--epsilon": EPSILONS, "--sampling-rate": PROBS, "--seed": SEEDS}
#: options that make a run longer in proportion to their value (the CI slice draws only small or
#: refused values for them in the commands that train)
WORK = {"--rounds", "--steps", "--iterations", "--runs", "--canaries", "--n", "--n-min", "--clients", "--world-size",
        "--epochs", "--samples-per-node", "--hidden", "--batch", "--local-steps", "--batch-size", "--b0", "--b",
        "--restart-interval"}
TRAINING = ("audit", "probe", "train")
FOREIGN = ["--u 3", "--conversion mironov", "--canaries 10", "--runs 10", "--world-size 2", "--curve", "--one-run",
           "--accountant rdp", "--accountant pld", "--method both", "--method auto", "--sequential", "--batch 8",
           "--plot /proc/x.png", "--plot /nonexistent/x.png", "--json", "--deltas 1e-3", "--fprs 0.01"]


def _examples() -> list:
    """Worked command lines: the registry's, per algorithm and command, plus the raw-event ones."""
    from dpcalib.cli import _example
    from dpcalib.mechanisms import REGISTRY

    out = []
    for name in REGISTRY:
        for command in ("calibrate", "epsilon", "compare", "report", "audit", "probe"):
            line = _example(command, name)
            if line.startswith("dpcalib ") and "refused" not in line and "..." not in line:
                out.append(shlex.split(line)[1:])
    out += [["account", "--poisson", "0.01:1.0:10000", "--delta", "1e-5"],
            ["account", "--gaussian", "10:100", "--delta", "1e-5"],
            ["account", "--wor", "0.01:1.0:1000", "--delta", "1e-5"],
            ["report", "--poisson", "0.01:1.0:1000", "--delta", "1e-5"],
            ["epsilon", "dp-sgd", "--delta", "1e-5", "--sampling", "shuffle", "--n", "50000", "--batch-size", "256",
             "--epochs", "1", "--noise-multiplier", "0.8"],
            ["epsilon", "dp-sgd", "--delta", "1e-5", "--sampling", "balls-in-bins", "--n", "50001", "--batch-size",
             "256", "--epochs", "3", "--noise-multiplier", "0.8"],
            ["calibrate", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", "--sampling", "balls-in-bins", "--n", "60000",
             "--batch-size", "600", "--epochs", "3"],
            ["report", "dp-sgd", "--delta", "1e-5", "--sampling", "balls-in-bins", "--n", "1000", "--batch-size", "7",
             "--epochs", "2", "--noise-multiplier", "1.2"],
            ["compare", "dp-sgd", "--epsilon", "4", "--delta", "1e-5", "--sampling", "balls-in-bins", "--n", "5000",
             "--batch-size", "100", "--epochs", "2"],
            ["train", "dp-gd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "4", "--world-size", "2"],
            ["train", "dp-sgd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "4", "--batch-size", "64",
             "--world-size", "2"],
            ["list"], ["list", "--json"]]
    return out


def _kind(flag: str, value: str) -> list:
    if flag in KINDS:
        return KINDS[flag]
    try:
        float(value)
    except ValueError:
        return [value, "", "bogus"]
    return COUNTS if value.lstrip("-").isdigit() else REALS


def _pairs(argv: list) -> tuple:
    """(positional head, [[flag, value or None], ...]) of a command line."""
    head, pairs, i = [], [], 0
    while i < len(argv) and not argv[i].startswith("--"):
        head.append(argv[i])
        i += 1
    while i < len(argv):
        flag = argv[i]
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            pairs.append([flag, argv[i + 1]])
            i += 2
        else:
            pairs.append([flag, None])
            i += 1
    return head, pairs


def _event_value(rng, value: str) -> str:
    parts = value.split(":")
    j = rng.randrange(len(parts))
    grid = COUNTS if j == len(parts) - 1 else (PROBS if len(parts) == 3 and j == 0 else REALS)
    parts[j] = rng.choice(grid)
    return ":".join(parts)


def case(rng, *, cheap: bool) -> list:
    """One fuzz case: an argv list."""
    base = rng.choice(_examples())
    head, pairs = _pairs(base)
    command = head[0]
    training = command in TRAINING
    if training:
        for p in pairs:          # the registry's audits run 300-2000 runs: the fuzz runs 20
            if p[0] == "--runs":
                p[1] = "20"
    for _ in range(rng.choice([1, 1, 2, 3])):
        r = rng.random()
        if r < 0.7 and pairs:
            p = rng.choice(pairs)
            if p[1] is None:
                continue
            if p[0] in ("--poisson", "--gaussian", "--wor"):
                p[1] = _event_value(rng, p[1])
                continue
            grid = _kind(p[0], p[1])
            if training and p[0] in WORK:
                # a valid long training run is work, not a hang (the ceilings refuse the ones that would
                # take hours): the commands that train draw small or refused sizes only
                grid = [v for v in grid if v in ("1", "2", "3", "7", "0", "-1", "1.5", "abc", "1e20", "1000000001",
                                                 "100000000000", "100000000000000000000", "nan")]
            if cheap:
                grid = [v for v in grid if v not in SLOW]
            elif p[0] in WORK and grid is COUNTS and not training:
                grid = grid + LONG_COUNTS
            p[1] = rng.choice(grid)
        elif r < 0.85 and len(head) > 1:
            head = [command, rng.choice(_algorithms())]          # another algorithm, same options
        elif r < 0.95:
            extra = rng.choice(FOREIGN).split()
            pairs.append([extra[0], extra[1] if len(extra) > 1 else None])
        elif pairs:
            pairs.pop(rng.randrange(len(pairs)))                 # a required option missing
    argv = list(head)
    for flag, value in pairs:
        argv.append(flag)
        if value is not None:
            argv.append(value)
    if training and "--no-progress" not in argv and command != "train":
        argv.append("--no-progress")
    return argv


def _algorithms() -> list:
    from dpcalib.mechanisms import REGISTRY

    return list(REGISTRY)


def cases(count: int, seed: int = 0, *, cheap: bool = True) -> list:
    rng = random.Random(seed)
    return [case(rng, cheap=cheap) for _ in range(count)]


def judge(rc: int, out: str, err: str) -> str | None:
    """None if the outcome keeps the contract, else what broke it."""
    if "Traceback" in out or "Traceback" in err:
        return "traceback"
    if rc == 2:
        lines = [l for l in err.splitlines() if l.strip()]
        if len(lines) != 1 or not lines[0].startswith("dpcalib: error: "):
            return "exit 2 without one 'dpcalib: error:' line"
        return None
    if rc != 0:
        return f"exit {rc}"
    for token in out.replace(",", " ").replace("=", " ").split():
        if token.lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
            return f"non-finite number printed ({token})"
    return None


def _run_one(argv, timeout: float):
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "dpcalib", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        import signal

        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = "timeout"
    import resource

    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return rc, out, err, time.perf_counter() - t0, rss


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cheap", action="store_true", help="the CI slice's value grid (no long counts)")
    ap.add_argument("--out", default=None, help="write every case's outcome here (JSON lines)")
    a = ap.parse_args(argv)
    from concurrent.futures import ThreadPoolExecutor

    todo = cases(a.cases, a.seed, cheap=a.cheap)
    bad, slow, counts = [], [], {}
    t0 = time.perf_counter()
    sink = open(a.out, "w") if a.out else None
    with ThreadPoolExecutor(a.workers) as pool:
        for i, (argv_, res) in enumerate(zip(todo, pool.map(lambda v: _run_one(v, a.timeout), todo))):
            rc, out, err, dt, _ = res
            verdict = "timeout" if rc == "timeout" else judge(rc, out, err)
            counts[str(rc)] = counts.get(str(rc), 0) + 1
            slow.append((dt, argv_))
            if verdict:
                bad.append((verdict, argv_, err.strip().splitlines()[-1:] if err else ""))
                print(f"BAD {verdict}: dpcalib {shlex.join(argv_)}\n    {bad[-1][2]}", flush=True)
            if sink:
                sink.write(json.dumps({"argv": argv_, "rc": rc, "seconds": dt, "verdict": verdict,
                                       "stderr": err[-300:]}) + "\n")
            if (i + 1) % 100 == 0:
                print(f"{i + 1} cases, {len(bad)} bad, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    import resource

    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    slow.sort(reverse=True)
    print(f"cases {len(todo)}; exit codes {counts}; bad {len(bad)}; wall {time.perf_counter() - t0:.0f} s; "
          f"largest peak RSS of a case {peak:.0f} MiB")
    for dt, v in slow[:5]:
        print(f"slowest {dt:7.1f} s  dpcalib {shlex.join(v)}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
