"""``dpcalib audit``: run the reference optimizer with its calibrated noise on neighbouring datasets
and lower-bound its eps (many runs, sampling without replacement, or one run with canaries)."""

from __future__ import annotations

from .algorithms import build as _build, dumps as _json, fmt as _fmt
from .common import need_matplotlib, UsageError, writable_plot
from ..mechanisms.registry import names
from .limits import (MAX_CANARIES, MAX_RUNS, check_int as _check_int, choose_seed, seed_help, seed_line,
                     training_limits as _training_limits)

__all__ = ["run", "add_arguments", "check_applicable"]


def add_arguments(p, algorithm: str) -> None:
    """The audit's own options (the algorithm's shape and ``--epsilon``, ``--delta`` come from the algorithm's
    parser).

    Args:
        p: the algorithm's parser.
        algorithm: a registered algorithm name (every one takes the same options).
    """
    p.add_argument("--method", choices=["paper", "tight"], default="tight",
                   help="which calibration drives the audited runs (default tight)")
    p.add_argument("--runs", type=int, default=None,
                   help=f"runs per neighbouring dataset, an integer in [1, {MAX_RUNS:.0e}] (at least 2 for the "
                        "without-replacement audit; required unless --one-run)")
    p.add_argument("--one-run", action="store_true",
                   help="one training run with --canaries gradient canaries, each included with probability 1/2 "
                        "(Steinke, Nasr & Jagielski 2023; dp-sgd, dicesgd)")
    p.add_argument("--canaries", type=int, default=None,
                   help=f"canaries of the one-run audit, an integer in [2, {MAX_CANARIES:.0e}] (default 1000; "
                        "--one-run only)")
    p.add_argument("--seed", type=int, default=None, help=seed_help("audit", "the runs' sampling, noise and "
                                                                              "canaries (run i: seed + i)"))
    p.add_argument("--batch", type=int, default=None, metavar="RUNS",
                   help="runs stacked along a tensor dimension at a time, to bound memory (dp-gd, diff2-gd; an "
                        "integer >= 1, default 4096; not with --sequential)")
    p.add_argument("--sequential", action="store_true",
                   help="one run after another (the reference path; slow)")
    p.add_argument("--plot", metavar="FILE.png", type=writable_plot,
                   help="draw the claimed trade-off curve and the measured (FPR, FNR) regions (needs matplotlib; "
                        "not with --one-run)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def check_applicable(args) -> None:
    """Refuse the audit's options that were given but do not apply (one line, exit 2), never ignore them;
    fill the defaults that depend on the others (``--canaries``, ``--batch``) and the seed.

    Args:
        args: the parsed command line (changed in place).

    Raises:
        UsageError: ``--runs``, ``--batch`` or ``--sequential`` with ``--one-run``; ``--canaries`` without it;
            ``--batch`` with ``--sequential``.
    """
    if args.one_run:
        for flag, given in (("--runs", args.runs is not None), ("--batch", args.batch is not None),
                            ("--sequential", args.sequential)):
            if given:
                raise UsageError(f"{flag} is not allowed with --one-run: the one-run audit is one training run "
                                 "with --canaries canaries")
        args.canaries = 1000 if args.canaries is None else args.canaries
    elif args.canaries is not None:
        raise UsageError("--canaries is not allowed without --one-run: the many-run audit (--runs) has one "
                         "differing record, not canaries")
    if args.sequential and args.batch is not None:
        raise UsageError("--batch is not allowed with --sequential: --batch stacks runs along a tensor "
                         "dimension, --sequential runs them one after another")
    args.batch = 4096 if args.batch is None else args.batch
    choose_seed(args)


def run(args) -> int:
    """``dpcalib audit ALGORITHM ...``: calibrate, run the reference optimizer on neighbouring
    datasets (many runs, or ``--one-run`` with canaries) and print the lower bound on eps, with the
    seed of the runs (``--seed``, or one drawn fresh: :func:`~dpcalib.commands.limits.choose_seed`).

    Args:
        args: the parsed command line (``args.algorithm``: the registered algorithm name).

    Returns:
        The exit status, 0.

    Raises:
        UsageError: if ``--runs`` is missing (without ``--one-run``), the algorithm cannot be
            audited this way, or ``--method=paper`` is asked where the paper's claim rests on
            amplification by sampling.
    """
    algorithm = args.algorithm
    from ..mechanisms import REGISTRY
    from ..optim import audit as A

    if args.one_run:
        return _cmd_one_run(algorithm, args)
    if args.runs is None:
        raise UsageError("--runs is required (runs per neighbouring dataset), unless --one-run")
    _check_int(args.runs, "--runs", 1, MAX_RUNS, "each run's statistic is kept for the bounds, and a million runs "
                                                 "already take hours here")
    _check_int(args.batch, "--batch", 1, MAX_RUNS, "runs stacked at a time")
    _training_limits(algorithm, _build(algorithm, args)[0], args, runs=args.runs)
    if "wor" in REGISTRY[algorithm].audit:
        mech, split = _build(algorithm, args)
        if A.wor_claim(algorithm, mech):
            return _cmd_audit_wor(algorithm, mech, split, args)
    if algorithm not in names(audit="llr"):
        raise UsageError(f"ALGORITHM={algorithm!r} is not allowed for an audit: expected one of "
                         f"{', '.join(names(audit='llr'))} (claims that rely on amplification by sampling: use --one-run "
                         "for dp-sgd and dicesgd)")
    mech, split = _build(algorithm, args)
    entry = REGISTRY[algorithm]
    if entry.claimed_by:   # the paper claims that algorithm's (eps, delta) for this one at the same noise
        rep = mech.claimed_mechanism().calibrate(args.epsilon, args.delta, method=args.method)
        noise = dict(rep.noise)
    else:
        if not entry.paper_auditable and args.method == "paper":
            raise UsageError(f"--method=paper is not allowed for {algorithm}: the paper's claim relies on "
                              "amplification by sampling, which this audit's statistic (conditioned on the sampling) "
                              "cannot test; audit the assumption-free (tight) calibration")
        rep = mech.calibrate(args.epsilon, args.delta, method=args.method, **split)
        noise = rep
    build, cd, cp, holder, exact = A.harness(algorithm, mech, noise)
    if args.plot:
        need_matplotlib()
    curve = None
    if entry.claimed_by:   # the claim is the other algorithm's at the same noise: its certified curve
        from ..accountant import claimed_tradeoff

        curve = claimed_tradeoff(mech.claimed_mechanism().accountant(**noise))
    r = A.audit(build, cd, cp, runs=args.runs, claimed_epsilon=args.epsilon, delta=args.delta, holder=holder,
                curve=curve, gdp_exact=exact, progress=None if args.progress else False, seed=args.seed,
                name=algorithm, batch=None if args.sequential else _audit_batch(build, args))
    return _finish_audit(r, rep, args, [
        f"algorithm   {algorithm}",
        f"claimed     epsilon={_fmt(r.claimed_epsilon)} delta={_fmt(r.delta)} (GDP mu {_fmt(r.mu_claimed)})",
        "noise       " + ", ".join(f"{k}={_fmt(v)}" for k, v in rep.noise.items() if v is not None),
        f"runs        {r.runs} per neighbouring dataset",
        seed_line(args, "audit"),
        f"eps_lo      direct {_fmt(r.epsilon_lo_direct)}   GDP {_fmt(r.epsilon_lo_gdp)} (mu_lo {_fmt(r.mu_lo)}) "
        "-- 95% confidence lower bounds"])


def _finish_audit(r, rep, args, head: list) -> int:
    """What every many-run audit prints: ``head``, the trade-off curve line, the plot and the verdict
    (or the report as JSON); draws the plot when ``--plot`` was given."""
    from ..optim import audit as A

    d = {**r.as_dict(), "noise": dict(rep.noise), "seed": args.seed, "seed_drawn": args.seed_drawn}
    if args.plot:
        A.plot_audit(r, args.plot)
        d["plot"] = args.plot
    if args.json:
        print(_json(d))
        return 0
    for line in head:
        print(line)
    c = r.curve
    worst = min(range(len(c.thresholds)), key=lambda i: c.fnr_hi[i] - c.claimed_fnr[i])
    print(f"curve       claimed {c.curve.label()}: {sum(c.below)} of {len(c.below)} measured regions entirely below "
          f"(tightest: FPR<={_fmt(c.fpr_hi[worst])}, FNR<={_fmt(c.fnr_hi[worst])} vs claimed "
          f"{_fmt(c.claimed_fnr[worst])}; {c.confidence:.0%} simultaneous)")
    if args.plot:
        print(f"plot        {args.plot}")
    verdict = r.verdict
    if verdict == "inconclusive":
        verdict += (f" (no outcome of {r.runs} runs per dataset could show eps above {_fmt(r.max_epsilon_lo)}, "
                    f"nor a region below the claimed curve: the claim {_fmt(r.claimed_epsilon)} cannot be refuted "
                    "with this many runs; use more)")
    print(f"verdict     {verdict}")
    return 0


def _cmd_audit_wor(algorithm: str, mech, split, args) -> int:
    """Claims that rely on fixed-size sampling without replacement (replace-one): audit_wor."""
    from ..optim import audit as A

    if args.runs is None:
        raise UsageError("--runs is required (runs per neighbouring dataset), unless --one-run")
    if args.runs < 2:
        raise UsageError(f"--runs={args.runs} is not allowed: expected an integer >= 2 (half of the runs pick the "
                         "thresholds)")
    if args.plot:
        need_matplotlib()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # paper-condition warnings are printed by `calibrate`, not here
        rep = mech.calibrate(args.epsilon, args.delta, method=args.method, **split)
    build, ca, cb, holder = A.wor_harness(algorithm, mech, rep)
    r = A.audit_wor(build, ca, cb, runs=args.runs, claimed_epsilon=args.epsilon, delta=args.delta, holder=holder,
                    progress=None if args.progress else False, seed=args.seed, name=algorithm)
    return _finish_audit(r, rep, args, [
        f"algorithm   {algorithm} (sampling without replacement, replace-one)",
        f"claimed     epsilon={_fmt(r.claimed_epsilon)} delta={_fmt(r.delta)}",
        "noise       " + ", ".join(f"{k}={_fmt(v)}" for k, v in rep.noise.items() if v is not None),
        f"runs        {r.runs} per neighbouring dataset (half pick the thresholds, half measure)",
        seed_line(args, "audit"),
        f"eps_lo      direct {_fmt(r.epsilon_lo_direct)} -- 95% confidence lower bound"])


def _cmd_one_run(algorithm: str, args) -> int:
    from ..optim import audit as A

    if algorithm not in names(audit="one-run"):
        raise UsageError(f"--one-run is not allowed for {algorithm}: expected one of {', '.join(names(audit='one-run'))} "
                         "(Poisson-sampled optimizers on one dataset)")
    _check_int(args.canaries, "--canaries", 2, MAX_CANARIES, "each canary is a record of the one run")
    if args.plot:
        raise UsageError("--plot is not allowed with --one-run: a one-run audit measures one point (the guesses), "
                         "not a trade-off curve")
    mech, split = _build(algorithm, args)
    if getattr(mech, "shuffled", False):
        raise UsageError("--one-run is not allowed with --sampling shuffle: the one-run audit includes each canary "
                          "in each batch independently (Poisson sampling); no audit of shuffled batches is implemented")
    if getattr(mech, "balls_in_bins", False):
        raise UsageError("--one-run is not allowed with --sampling balls-in-bins: the one-run audit includes each "
                         "canary in each batch independently (Poisson sampling); no audit of balls-in-bins batches "
                         "is implemented")
    _training_limits(algorithm, mech, args)
    rep = mech.calibrate(args.epsilon, args.delta, method=args.method, **split)
    build = A.one_run_harness(algorithm, mech, rep, args.canaries)
    r = A.one_run_audit(build, canaries=args.canaries, claimed_epsilon=args.epsilon, delta=args.delta,
                        seed=args.seed, progress=None if args.progress else False, name=algorithm)
    d = {**r.as_dict(), "noise": dict(rep.noise), "seed": args.seed, "seed_drawn": args.seed_drawn}
    if args.json:
        print(_json(d))
        return 0
    print(f"algorithm   {algorithm} (one-run audit)")
    print(f"claimed     epsilon={_fmt(r.claimed_epsilon)} delta={_fmt(r.delta)}")
    print("noise       " + ", ".join(f"{k}={_fmt(v)}" for k, v in rep.noise.items() if v is not None))
    print(f"canaries    {r.canaries} ({r.included} included, each with probability 1/2), one training run")
    print(seed_line(args, "audit"))
    for k, rr, correct, eps in r.guesses:
        print(f"guesses     k={k} in + {k} out: {correct} of {rr} correct -> eps_lo {_fmt(eps)}")
    print(f"eps_lo      {_fmt(r.epsilon_lo)} -- 95% confidence lower bound (Bonferroni over the guess counts)")
    print(f"verdict     {r.verdict}")
    return 0


def _audit_batch(build, args):
    """``args.batch`` where the optimizer's runs can be batched, else None (one run after another)."""
    from ..optim.audit.batched import supports_batching

    return args.batch if supports_batching(build(args.seed)) else None
