"""``dpcalib compare``: the paper's closed form, the best certified eps, the RDP conversions and the
anchors (dp-accounting, Opacus's PRV accountant) side by side."""

from __future__ import annotations

import math

from .algorithms import dumps, SPECS, build as _build, fmt as _fmt, takes_accountant
from .common import accountant_argument

__all__ = ["add_arguments", "run"]


def add_arguments(p, algorithm: str) -> None:
    """The compare command's own option: ``--accountant``, where the algorithm's calibration chooses one
    (``--epsilon``, ``--delta`` and the algorithm's shape come from the algorithm's parser).

    Args:
        p: the algorithm's parser.
        algorithm: a registered algorithm name.
    """
    if takes_accountant(algorithm):
        accountant_argument(p, solves=True)


def run(args) -> int:
    """``dpcalib compare ALGORITHM ...``: the paper's and the tight calibrations, the RDP conversions
    and the anchors side by side.

    Args:
        args: the parsed command line (``args.algorithm``: the registered algorithm name).

    Returns:
        The exit status, 0.
    """
    algorithm = args.algorithm
    from tqdm.auto import tqdm

    mech, split = _build(algorithm, args)
    # six steps, seconds each: a bar on a terminal (stderr; none when piped)
    bar = tqdm(total=6, desc=f"compare {algorithm}", leave=False, disable=None)
    try:
        # balls-in-bins batches have no paper's calibration (the papers assume Poisson): the tight row alone
        paper = None if getattr(mech, "balls_in_bins", False) else \
            mech.calibrate(args.epsilon, args.delta, method="paper", **split)
        bar.update(1)
        chosen = {"accountant": args.accountant} if getattr(args, "accountant", None) else {}
        tight = mech.calibrate(args.epsilon, args.delta, method="tight", **split, **chosen)
        bar.update(1)
        rows = _compare_rows(algorithm, mech, args, paper, tight, bar)
    finally:
        bar.close()
    return _print_compare(algorithm, args, paper, rows, mech.shape_note)


def _compare_rows(algorithm, mech, args, paper, tight, bar) -> list:
    rows = []
    for label, rep in (("paper", paper), ("tight", tight)):
        if rep is None:
            continue
        noise = [rep.noise[n] for n in SPECS[algorithm].noise]
        acc = mech.accountant(*noise)
        cc = acc.cross_check(args.delta)
        bar.update(1)
        rows.append({"noise_from": label, "noise": dict(rep.noise),
                     "paper_closed_form_epsilon": paper.achieved_epsilon if label == "paper" else None,
                     "best_epsilon": cc["ours"], "best_method": cc["ours_method"],
                     "epsilon_lower": cc["ours_pld_lower"], "epsilon_upper": cc["ours"],
                     "pld_epsilon_lower": cc["ours_pld_lower"], "pld_epsilon_upper": cc["ours_pld_upper"],
                     "opacus_prv_epsilon": cc["opacus_prv"],
                     "rdp_improved_epsilon": acc.get_epsilon(args.delta, "rdp", "improved"),
                     "rdp_mironov_epsilon": acc.get_epsilon(args.delta, "rdp", "mironov"),
                     "dp_accounting_rdp_epsilon": cc["dp_accounting_rdp"],
                     "dp_accounting_pld_epsilon": cc["dp_accounting_pld"], "notes": list(cc["notes"])})
        row = rows[-1]
        if paper is None:
            row["notes"].insert(0, "balls-in-bins batches: no paper's calibration (the papers assume Poisson sampling); "
                                   "RDP is one Gaussian release per epoch (no amplification)")
        for k, v in list(row.items()):      # a bound that is not a number (inf: no bound here) is said, not printed
            if isinstance(v, float) and not math.isfinite(v):
                row[k] = None
                row["notes"].append(f"{k}: no finite value here ({v})")
        bar.update(1)
    return rows


def _print_compare(algorithm, args, paper, rows, shape=None) -> int:
    if args.json:
        out = {"algorithm": algorithm, "epsilon": args.epsilon, "delta": args.delta, "rows": rows,
               "warnings": list(paper.warnings) if paper is not None else []}
        print(dumps({**out, "run_shape": shape} if shape else out))
        return 0
    print(f"algorithm {algorithm}, target epsilon={_fmt(args.epsilon)} delta={_fmt(args.delta)}")
    if shape:
        print(f"run         {shape}")
    cols = ["paper_closed_form_epsilon", "best_epsilon", "pld_epsilon_lower", "pld_epsilon_upper",
            "rdp_improved_epsilon", "rdp_mironov_epsilon", "dp_accounting_rdp_epsilon", "dp_accounting_pld_epsilon",
            "opacus_prv_epsilon"]
    for row in rows:
        print(f"noise from {row['noise_from']}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in row["noise"].items()))
        for c in cols:
            print(f"  {c:28s} {_fmt(row[c])}")
        for note in row["notes"]:
            print(f"  note: {note}")
    return 0
