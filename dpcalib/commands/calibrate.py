"""``dpcalib calibrate``: the noise for a target (epsilon, delta), as a table or JSON (with the ``run`` line
of a run given by its shape, the mechanism's ``shape_note``): its options and the command."""

from __future__ import annotations

import math

from .algorithms import build, dumps, fmt as _fmt, takes_accountant
from .common import accountant_argument

__all__ = ["add_arguments", "run", "report_dict", "print_report"]

#: the noise levels of the DIFF2 family, always present in the JSON (null with the reason where unused)
SIGMAS = ("sigma1", "sigma2", "sigma3", "sigma4")

#: an achieved eps this far above the target (relative) is marked: a paper's noise that misses it
ABOVE_TARGET_RTOL = 1e-6


def add_arguments(p, algorithm: str) -> None:
    """The calibrate command's own options (``--epsilon``, ``--delta`` and the algorithm's shape come from the
    algorithm's parser): ``--method``, and ``--accountant`` where the algorithm's calibration chooses one.

    Args:
        p: the algorithm's parser.
        algorithm: a registered algorithm name.
    """
    p.add_argument("--method", choices=["paper", "tight", "both"], default="tight",
                   help="paper: the paper's closed form as printed; tight: the smallest noise, same split; "
                        "both: paper and tight, one after the other.  Default: tight")
    if takes_accountant(algorithm):
        accountant_argument(p, solves=True)


def run(args) -> int:
    """``dpcalib calibrate ALGORITHM ...``: the noise for (``--epsilon``, ``--delta``) by ``--method``, as the
    table or JSON, with a progress bar on a terminal once it has run a second.

    Args:
        args: the parsed command line (``args.algorithm``: the registered algorithm name).

    Returns:
        The exit status, 0.
    """
    algorithm = args.algorithm
    from ..accountant import watching
    from .common import ProgressBar

    mech, split = build(algorithm, args)
    methods = ["paper", "tight"] if args.method == "both" else [args.method]
    extra = {"accountant": args.accountant} if takes_accountant(algorithm) else {}
    # a bar on a terminal once the calibration has run a second: the accountants built, the grids composed
    with ProgressBar(f"calibrate {algorithm}") as bar, watching(bar.note):
        reports = [report_dict(mech.calibrate(args.epsilon, args.delta, method=m, **split, **extra),
                               mech.shape_note) for m in methods]
    if args.json:
        print(dumps(reports if len(reports) > 1 else reports[0]))
    else:
        for i, d in enumerate(reports):
            if i:
                print()
            print_report(d, args.printed_warnings)
    return 0


def report_dict(rep, run_shape: str | None = None) -> dict:
    """A calibration as the command line's JSON: stable keys, the four sigmas always present.

    Args:
        rep: the mechanism's ``CalibrationReport``.
        run_shape: the mechanism's ``shape_note`` (joins ``notes`` as ``run_shape`` where they have none), or
            None.

    Returns:
        The dict (``algorithm``, ``method``, ``epsilon``, ``delta``, ``sigma1``..``sigma4``,
        ``noise``, the achieved, certified and bracketing eps, ``accounting``, ``warnings``,
        ``notes``).
    """
    notes = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in rep.notes.items()}
    if run_shape and not notes.get("run_shape"):
        notes["run_shape"] = run_shape
    out = {"algorithm": rep.algorithm, "method": rep.method, "epsilon": rep.epsilon, "delta": rep.delta}
    for s in SIGMAS:
        out[s] = rep.noise.get(s)
        if out[s] is None and s not in notes:
            notes[s] = (f"not a noise level of {rep.algorithm} (its noise: {', '.join(rep.noise)})"
                        if s not in rep.noise else "not needed")
    out.update({"noise": dict(rep.noise), "achieved_epsilon": rep.achieved_epsilon,
                "certified_epsilon": rep.certified_epsilon, "epsilon_lower": rep.epsilon_lower,
                "epsilon_upper": rep.epsilon_upper, "lower_bound_noise": rep.lower_bound_noise,
                "order": rep.order, "conversion": rep.conversion,
                "accounting": rep.accounting, "warnings": list(rep.warnings), "notes": notes})
    return out


def print_report(d: dict, printed: list | None = None) -> None:
    """Print a calibration (:func:`report_dict`) as the command line's table.  An achieved eps
    above the target is marked on its line, and the paper conditions that fail follow in the same
    block (``warning`` lines), beside the number they explain.

    Args:
        d: the calibration, as :func:`report_dict` returns it.
        printed: where the warnings printed are appended (the command line does not repeat them on
            stderr), or None.
    """
    from ..mechanisms import REGISTRY

    print(f"algorithm   {d['algorithm']}")
    print(f"method      {d['method']}")
    print(f"target      epsilon={_fmt(d['epsilon'])} delta={_fmt(d['delta'])}")
    if d["notes"].get("run_shape"):
        print(f"run         {d['notes']['run_shape']}")
    for name, val in d["noise"].items():
        note = "" if val is not None else f"   ({d['notes'].get(name, '')})"
        print(f"{name:11s} {_fmt(val)}{note}")
    for s in SIGMAS:
        if s not in d["noise"] and REGISTRY[d["algorithm"]].noise_notes:
            print(f"{s:11s} -   ({d['notes'].get(s, '')})")
    how = f"order {_fmt(d['order'])}, conversion {d['conversion']}; " if d["order"] is not None else ""
    above = d["achieved_epsilon"] is not None and d["achieved_epsilon"] > d["epsilon"] * (1 + ABOVE_TARGET_RTOL)
    mark = ""
    if above:
        mark = f"; ABOVE the target {_fmt(d['epsilon'])}" + ("; the warnings below say why" if d.get("warnings") else "")
    print(f"achieved    epsilon={_fmt(d['achieved_epsilon'])} ({how}{d['accounting']}{mark})")
    print(f"certified   epsilon={_fmt(d['certified_epsilon'])} (best sound accountant for this noise)")
    shuffled = "shuffle_mu" in d["notes"]
    if d.get("epsilon_lower") is not None:
        kind = ("Chua et al.'s shuffle lower bound, certified upper" if shuffled else
                "exact Gaussian DP at both ends" if d["accounting"].startswith("gdp") else
                "PLD lower bound, certified upper")
        print(f"bracket     [{_fmt(d['epsilon_lower'])}, {_fmt(d['epsilon_upper'])}] ({kind})")
    if d["notes"].get("poisson_epsilon_same_noise") is not None:
        print(f"poisson     {_fmt(d['notes']['poisson_epsilon_same_noise'])} (Poisson sampling at q = b/n for the same "
              "steps and noise: NOT valid for shuffled batches)")
    if d.get("lower_bound_noise"):
        room = ", ".join(f"{k}={_fmt(v)}" for k, v in d["lower_bound_noise"].items() if v is not None)
        print(f"floor       {room} (below this noise the lower bound already exceeds the target)")
    if d["notes"].get("versus_dp_sgd"):
        print(f"note        {d['notes']['versus_dp_sgd']}")
    for w in d.get("warnings", ()):
        print(f"warning     {w}")
        if printed is not None:
            printed.append(" ".join(str(w).split()))
