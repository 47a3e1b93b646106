"""``dpcalib probe``: the record-level sensitivity probe of one algorithm's calibrated run.

    dpcalib probe ALGORITHM --epsilon E --delta D [shape options] [--lr LR] [--c1 C1 --c2 C2 | --clip C]
                  [--n N] [--hidden H] [--data SHAPE|PATH.csv] [--seed S] [--method paper|tight] [--json]

Calibrates the noise for (E, D), runs the run the shape describes on real records (synthetic data
of a paper's shape by default) and its neighbours (:mod:`dpcalib.optim.audit.probe`), and prints per
release kind and neighbouring pair the worst move of the noiseless query over the claimed
sensitivity.  Exit 0 whatever the verdict; bad input exits 2 with one line.
"""

from __future__ import annotations

import math

from .algorithms import SPECS, build as build_mechanism, dumps
from ..mechanisms.shape import POISSON
from .limits import MAX_TRAINING_RECORDS, check_int, check_real, choose_seed, seed_help, seed_line, training_limits

from ..accountant.validation import InputError

__all__ = ["add_arguments", "run"]

#: what stands for a move or a tolerance past the double range (an unclipped run whose values overflowed)
OVERFLOW = "overflow"


def _overflow_as_null(obj):
    """``obj`` with every number past the double range made None (JSON has no infinity); True beside it when any
    was."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None, True
    if isinstance(obj, dict):
        pairs = {k: _overflow_as_null(v) for k, v in obj.items()}
        return {k: v for k, (v, _) in pairs.items()}, any(f for _, f in pairs.values())
    if isinstance(obj, list):
        pairs = [_overflow_as_null(v) for v in obj]
        return [v for v, _ in pairs], any(f for _, f in pairs)
    return obj, False


def _ratio(x: float, spec: str) -> str:
    return format(x, spec) if math.isfinite(x) else OVERFLOW

#: the widest MLP the probe builds (two hidden layers: H^2 weights per example and step)
MAX_HIDDEN = 4096

def add_arguments(p, algorithm: str) -> None:
    """The probe's own options (the shape options and ``--epsilon``, ``--delta``, ``--json`` come from the
    algorithm's parser; ``--n`` is added only where the shape has none).

    Args:
        p: the algorithm's ``probe`` parser.
        algorithm: the registered algorithm name (its probe defaults choose the clip options).
    """
    p.add_argument("--method", choices=["paper", "tight"], default="tight",
                   help="which calibration drives the probed run (default tight)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the papers' value for the algorithm)")
    from ..mechanisms import REGISTRY

    defaults = REGISTRY[algorithm].clips            # the clip options this algorithm's probe takes
    if "c1" in defaults:
        p.add_argument("--c1", type=float, default=None, help="clip norm C1 of the gradient rounds (default 1)")
    if "c2" in defaults:
        p.add_argument("--c2", type=float, default=None,
                       help="clip factor C2 of the difference rounds, C_2,r = C2 ||x_{r-1} - x_{r-2}|| (default 10)")
    if "clip" in defaults:
        p.add_argument("--clip", type=float, default=None,
                       help="clip norm C (constd2p: the assumed gradient bound G; default 1)")
    if "--n" not in {o.flag for o in SPECS[algorithm].options}:
        p.add_argument("--n", type=int, default=1000,
                       help="records in the dataset, where the shape does not fix it (default 1000)")
    p.add_argument("--hidden", type=int, default=64,
                   help=f"hidden units of the MLP d -> H -> H -> 1, an integer in [1, {MAX_HIDDEN}] (default 64)")
    p.add_argument("--data", default="california",
                   help="a synthetic shape (california, gas_turbine, blogfeedback, covtype, ijcnn1) or the path of a "
                        "numeric CSV whose last column is the target (default california)")
    p.add_argument("--seed", type=int, default=None, help=seed_help("probe", "the data, the model and the runs"))
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def _fmt(x) -> str:
    return f"{x:.8g}" if isinstance(x, float) else str(x)


def run(args) -> int:
    """``dpcalib probe ALGORITHM ...``: calibrate, run the record probe and print each release's
    worst move against its claimed sensitivity.

    Args:
        args: the parsed command line (``args.algorithm``: the registered algorithm name).

    Returns:
        The exit status, 0.

    Raises:
        InputError: if the algorithm has no probe (it claims no sensitivity), or an option is out
            of range.
    """
    algorithm = args.algorithm
    from ..optim.audit import probe as P

    from ..mechanisms import REGISTRY

    if REGISTRY[algorithm].no_guarantee:
        raise InputError(P.refusal(algorithm))
    n = None
    if REGISTRY[algorithm].records is None:
        # the shape does not fix the records: --n is their number -- the shape of shuffled batches, or
        # (Poisson sampling) only the dataset's size
        n = args.n if getattr(args, "n", None) is not None else 1000
        if getattr(args, "sampling", None) == POISSON:
            args.n = None
    mech, split = build_mechanism(algorithm, args)
    choose_seed(args)
    check_int(args.hidden, "--hidden", 1, MAX_HIDDEN, "the MLP has two hidden layers: hidden^2 weights")
    for flag in ("lr", "c1", "c2", "clip"):
        if getattr(args, flag, None) is not None:
            check_real(getattr(args, flag), "--" + flag)
    if n is not None:
        check_int(n, "--n", 2, MAX_TRAINING_RECORDS, "records the probe keeps in memory")
    training_limits(algorithm, mech, args, records=n)
    rep = mech.calibrate(args.epsilon, args.delta, method=args.method, **split)
    clips = {k: getattr(args, k, None) for k in ("c1", "c2", "clip")}
    build, data, held = P.probe_harness(algorithm, mech, rep, n=n if n is not None else 1000, hidden=args.hidden,
                                        data=args.data, lr=args.lr, clips=clips, seed=args.seed)
    r = P.record_probe(build, data, held, seed=args.seed, progress=None if args.progress else False)
    noise = {k: v for k, v in rep.noise.items() if v is not None}
    if args.json:
        out, overflowed = _overflow_as_null(r.as_dict())
        if overflowed:          # the verdict stands: a move past the double range exceeds any claim
            out["notes"] = ["null: a move or tolerance past the double range (the run's values overflowed)"]
        print(dumps({**out, "epsilon": args.epsilon, "delta": args.delta, "method": args.method,
                     "noise": noise, "seed": args.seed, "seed_drawn": args.seed_drawn}))
        return 0
    w = r.worst()
    records = sum(x.shape[0] for x, _ in data)
    print(f"algorithm   {algorithm}")
    print(f"target      epsilon={_fmt(args.epsilon)} delta={_fmt(args.delta)} ({args.method} calibration: "
          + ", ".join(f"{k}={_fmt(v)}" for k, v in noise.items()) + ")")
    print(f"run         {r.releases // max(1, len({row['pair'] for row in r.rows}))} releases per neighbouring pair, "
          f"{len({row['pair'] for row in r.rows})} pairs; {records} records in {len(data)} "
          f"dataset{'s' if len(data) > 1 else ''} + 1 held out; the differing record: holder {r.slot[0]}, "
          f"record {r.slot[1]} ({w['relation']})")
    print(seed_line(args, "probe"))
    print(f"{'release':18s} {'neighbouring pair':42s} {'worst move/claim':>16s} {'releases':>8s}")
    for row in sorted(r.rows, key=lambda x: (x["release"], -x["worst_ratio"])):
        print(f"{row['release']:18s} {row['pair']:42s} {_ratio(row['worst_ratio'], '16.8f'):>16s} {row['releases']:8d}")
    worst = _fmt(r.worst_ratio) if math.isfinite(r.worst_ratio) else OVERFLOW + ", past the double range,"
    print(f"worst       {worst} ({w['release']}, {w['pair']})")
    print(f"tol         {_ratio(r.tol, '.3g')} (float rounding: {P.SLACK_ULPS} ulps of the queries' norms, over the "
          "claim)")
    print(f"exceeded    {r.exceeded} of {r.releases} releases over claim (1 + tol); std mismatches {r.std_mismatches}")
    print(f"verdict     {'within the claimed sensitivity' if r.passed else 'EXCEEDS the claimed sensitivity'}")
    return 0
