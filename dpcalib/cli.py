"""The ``dpcalib`` command line: budgets, noise levels and comparisons in one call.

    dpcalib list
    dpcalib calibrate ALGORITHM --epsilon E --delta D [shape options] [--method paper|tight|both] [--json]
    dpcalib epsilon ALGORITHM --delta D [noise and shape options] [--curve] [--plot FILE.png] [--json]
    dpcalib compare ALGORITHM --epsilon E --delta D [shape options] [--json]
    dpcalib account --poisson Q:Z:COUNT --gaussian Z:COUNT --wor GAMMA:Z:COUNT --delta D [--json]
    dpcalib report (ALGORITHM [noise and shape options] | --poisson ... ) --delta D [--plot FILE.png] [--json]
    dpcalib probe ALGORITHM --epsilon E --delta D [shape options] [--lr] [--c1 --c2 | --clip] [--n] [--json]

Bad input gives one line on stderr naming the option, the value and what is allowed, and exit
code 2 -- never a traceback; a failed computation that is not a check of the input is reported
as an internal error (exit 1).  Importing this module never imports torch; only ``audit``, ``probe``
and ``train`` do.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings

from .commands.algorithms import SPECS, build, dumps as _json, noise_args, noise_flags
from .commands.common import (CONVERSION_REFUSAL, accountant_argument, install_hint, finite_epsilon, need_matplotlib,
                              Parser, writable_plot, UsageError)

__all__ = ["main"]


# ---- helpers ---------------------------------------------------------------------------------
def _takes_accountant(algorithm: str) -> bool:
    """Does this algorithm's calibrate() choose between the RDP and the PLD accountant?"""
    import inspect

    from .mechanisms import ALGORITHMS

    return "accountant" in inspect.signature(ALGORITHMS[algorithm][0].calibrate).parameters


#: the commands that calibrate the noise for (--epsilon, --delta) and so take the calibration's options
#: (--method, the budget split); epsilon and report take the noise levels instead
CALIBRATING = ("calibrate", "compare", "audit", "probe")


def _algo_parser(command: str, algorithm: str) -> argparse.ArgumentParser:
    spec = SPECS[algorithm]
    from .mechanisms import ALGORITHMS

    p = Parser(prog=f"dpcalib {command} {algorithm}", description=ALGORITHMS[algorithm][1],
                epilog="example:\n  " + _example(command, algorithm),
                formatter_class=argparse.RawDescriptionHelpFormatter)
    if command in CALIBRATING:
        p.add_argument("--epsilon", type=float, required=True,
                       help="target epsilon, a number > 0" + (" (the claim the audit tests)" if command == "audit"
                                                              else ""))
    p.add_argument("--delta", type=float, required=True, help="target delta, a number in (0, 1)")
    if command == "calibrate":
        p.add_argument("--method", choices=["paper", "tight", "both"], default="tight",
                       help="paper: the paper's closed form as printed; tight: the smallest noise, same split; "
                            "both: paper and tight, one after the other.  Default: tight")
        if _takes_accountant(algorithm):
            accountant_argument(p, solves=True)
    if command == "compare" and _takes_accountant(algorithm):
        accountant_argument(p, solves=True)
    if command == "audit":
        from .commands.audit import add_arguments

        add_arguments(p, writable_plot)
    if command in ("epsilon", "report"):
        for name in spec.noise:
            p.add_argument("--" + name.replace("_", "-"), dest="noise_" + name, type=float, required=True,
                           metavar=name.upper(), help=f"noise level {name}, a number > 0")
    if command == "report":
        from .commands.report import add_arguments

        add_arguments(p, writable_plot)
        accountant_argument(p)
    if command == "epsilon":
        from .commands.epsilon import add_arguments

        add_arguments(p, writable_plot)
    if command == "probe":
        from .commands.probe import add_arguments

        add_arguments(p, algorithm, {o.flag for o in spec.options})
    for o in spec.options:
        if o.target == "split" and command not in CALIBRATING:
            continue                # a calibration's budget split: epsilon and report take the noise itself
        if o.type is bool:
            p.add_argument(o.flag, dest=o.field, action="store_true", help=o.help)
        else:
            p.add_argument(o.flag, dest=o.field, type=o.type, required=o.required, choices=o.choices,
                           default=o.default, help=o.help + ("" if o.default is None else f" (default {o.default})"))
    p.add_argument("--json", action="store_true", help="machine-readable output (stable keys)")
    return p


def _check_applicable(command: str, args) -> None:
    """Options that were given but do not apply to what the command will do are refused, never
    silently ignored (one line, exit 2)."""
    if getattr(args, "conversion", None) is not None and getattr(args, "accountant", None) != "rdp":
        raise UsageError(CONVERSION_REFUSAL.format(args.conversion))
    if command == "audit":
        from .commands.audit import check_applicable

        check_applicable(args)


def _example(command: str, algorithm: str) -> str:
    ex = SPECS[algorithm].example
    if command == "calibrate":
        return ex
    if command == "compare":
        return ex.replace("calibrate", "compare").split(" --method")[0]
    if command in ("audit", "probe"):
        from .commands.algorithms import example

        return example(algorithm, command)
    noise = " ".join(f"--{n.replace('_', '-')} 1.0" for n in SPECS[algorithm].noise)
    parts = ex.replace("calibrate", command).split(" --method")[0].split()
    out, skip = [], False
    for tok in parts:  # drop --epsilon E
        if skip:
            skip = False
            continue
        if tok == "--epsilon":
            skip = True
            continue
        out.append(tok)
    return " ".join(out) + " " + noise




# ---- commands --------------------------------------------------------------------------------
def _cmd_audit(args) -> int:
    algorithm = args.algorithm
    from .commands.audit import run

    return run(algorithm, args)


def _cmd_probe(args) -> int:
    algorithm = args.algorithm
    from .commands.probe import run

    return run(algorithm, args)


def _list_parser() -> argparse.ArgumentParser:
    p = Parser(prog="dpcalib list", description=COMMANDS["list"])
    p.add_argument("--json", action="store_true", help="machine-readable output (stable keys)")
    return p


def _cmd_account(args) -> int:
    from .commands.account import run_account

    return run_account(args)


def _cmd_train(args) -> int:
    from .commands.train import run

    return run(args, UsageError)


def _cmd_list(args) -> int:
    from .mechanisms import ALGORITHMS

    rows = []
    for name, (cls, source) in ALGORITHMS.items():
        spec = SPECS[name]
        rows.append({"algorithm": name, "source": source, "noise": list(spec.noise),
                     "options": [{"flag": o.flag, "required": o.required,
                                  "default": repr(o.default) if isinstance(o.default, float)
                                  and not math.isfinite(o.default) else o.default,
                                  "calibration": o.target == "split", "help": o.help} for o in spec.options]})
    if args.json:
        print(_json(rows))
        return 0
    for r in rows:
        opts = " ".join(o["flag"] + ("" if o["default"] is None else f"[={o['default']}]") for o in r["options"])
        print(f"{r['algorithm']:10s} {r['source']}")
        print(f"{'':10s} options: {opts}")
        print(f"{'':10s} noise:   {', '.join(r['noise'])}")
    return 0


def _cmd_calibrate(args) -> int:
    algorithm = args.algorithm
    from .accountant import watching
    from .commands.calibrate import print_report, report_dict
    from .commands.common import ProgressBar

    mech, split = build(algorithm, args)
    methods = ["paper", "tight"] if args.method == "both" else [args.method]
    extra = {"accountant": args.accountant} if _takes_accountant(algorithm) else {}
    # a bar on a terminal once the calibration has run a second: the accountants built, the grids composed
    with ProgressBar(f"calibrate {algorithm}") as bar, watching(bar.note):
        reports = [report_dict(mech.calibrate(args.epsilon, args.delta, method=m, **split, **extra),
                               mech.shape_note) for m in methods]
    if args.json:
        print(_json(reports if len(reports) > 1 else reports[0]))
    else:
        for i, d in enumerate(reports):
            if i:
                print()
            print_report(d, args.printed_warnings)
    return 0


def _cmd_epsilon(args) -> int:
    algorithm = args.algorithm
    from .commands.epsilon import run

    return run(algorithm, args)


def _cmd_compare(args) -> int:
    algorithm = args.algorithm
    from .commands.compare import run

    return run(algorithm, args)


def _cmd_report(args) -> int:
    algorithm = args.algorithm
    from .accountant import watching
    from .commands.report import ProgressBar, run_algorithm

    if args.plot:
        need_matplotlib()
    mech, _ = build(algorithm, args)
    noise = noise_args(algorithm, args)
    # (the bar from the start: the check's bracket at --delta is the report's first long part)
    with ProgressBar(f"report {algorithm}") as bar, watching(bar.note):
        finite_epsilon(mech.epsilon(args.delta, *noise).epsilon, args, noise_flags(algorithm, args))
        return run_algorithm(algorithm, mech, noise, SPECS[algorithm].noise, args, progress=bar)


def _show_warnings(caught, printed=()) -> None:
    """The paper conditions that failed (PaperConditionWarning, SubsamplingConditionWarning), one
    line each on stderr, each message once, unless the command's table already showed it beside
    the number it explains (``printed``).  Only after the command succeeded, so that an error
    stays one line.  Warnings of the dependencies (numpy's floating-point notices, dp-accounting's
    or Opacus's own advice) are not dpcalib's and are not relabelled as such: they are dropped."""
    from .accountant import SubsamplingConditionWarning
    from .mechanisms import PaperConditionWarning

    ours = [w for w in caught if issubclass(w.category, (PaperConditionWarning, SubsamplingConditionWarning))]
    msgs = [m for m in dict.fromkeys(" ".join(str(w.message).split()) for w in ours) if m not in set(printed)]
    for msg in msgs[:20]:
        print(f"dpcalib: warning: {msg}", file=sys.stderr)
    if len(msgs) > 20:
        print(f"dpcalib: warning: ... and {len(msgs) - 20} more warnings", file=sys.stderr)


#: the commands and what each does: the one table behind the top-level parser and its help
COMMANDS = {
    "list": "the algorithms, their options and the paper each comes from",
    "calibrate": "the noise levels for a target (epsilon, delta)",
    "epsilon": "epsilon spent for given noise levels (--curve, --plot)",
    "compare": "paper closed form, best certified eps, RDP conversions and dp-accounting side by side",
    "account": "epsilon of a raw composition of events (Gaussian, Laplace, zCDP, ... or a JSON event tree)",
    "report": "what eps means: brackets at several delta, trade-off curve, attack risk (TPR at low FPR), assumptions",
    "audit": "run the reference optimizer with its calibrated noise and lower-bound its epsilon",
    "probe": "run it on real neighbouring records and measure each release's move against its claimed sensitivity",
    "train": "train on local processes (torch.distributed, gloo): DIFF2-GD / DP-GD one client each, DP-SGD / DP-SRM / "
             "DiceSGD data-parallel",
}
def _top_parser() -> argparse.ArgumentParser:
    """``dpcalib COMMAND ...``: argparse subparsers, one per command of :data:`COMMANDS`, which
    choose the command (and print the help); each command parses the rest of the line with its
    own parser (the algorithm's, built from the registry and the mechanism)."""
    p = Parser(prog="dpcalib", description="Privacy accounting and noise calibration for DP nonconvex optimizers.",
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="'dpcalib COMMAND ALGORITHM --help' shows the algorithm's options and a worked example, e.g.\n"
                       "  dpcalib calibrate diff2-gd --epsilon 3 --delta 1e-5 --rounds 2000 --restart-interval 20 "
                       "--clients 10 --n-min 1651 --u 1.25 --method paper --json")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser, required=True,
                           title="commands")
    for name, text in COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False, prog=f"dpcalib {name}")
    return p


def _require_torch(command: str) -> None:
    """audit and train run the PyTorch reference optimizers, which come with the [torch] extra;
    everything else needs numpy and scipy only."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"{command} needs PyTorch, which is not installed ({exc}): {install_hint('torch')} "
                         "(PyTorch's CPU build: pip install torch --index-url https://download.pytorch.org/whl/cpu "
                         "first)") from None


def main(argv=None) -> int:
    """The ``dpcalib`` command: 0 on success; 2 on a user's mistake (one line on stderr naming the
    option, the value and what is allowed); 1 on a bug (one line "internal error ... please
    report"); 130 when interrupted -- never a Python traceback.

    Args:
        argv: the arguments after ``dpcalib`` (None: ``sys.argv[1:]``).

    Returns:
        The exit status: 0, 1, 2 or 130.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            printed: list = []
            rc = _main(argv, printed)
        _show_warnings(caught, printed)
        sys.stdout.flush()          # inside the try: a reader that went away is seen here, not at exit
        return rc
    except BrokenPipeError:
        # `dpcalib ... | head`: the reader stopped reading; end quietly, as a pipeline expects
        import os
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 0
    except KeyboardInterrupt:
        print("dpcalib: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise                       # argparse's --help (exit 0)
    except Exception as exc:        # noqa: BLE001 -- every failure becomes one line
        from .accountant.validation import InputError

        msg = " ".join(str(exc).split())
        if isinstance(exc, (UsageError, InputError)):
            print(f"dpcalib: error: {_option_names(msg, argv)}", file=sys.stderr)
            return 2
        # not a check of the input: a computation failed -- a bug to report, not a usage error
        import traceback
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" (at {where.filename}:{where.lineno})" if where else ""
        print(f"dpcalib: internal error: {type(exc).__name__}: {msg[:300]}{at}; this is a bug in dpcalib, please "
              "report it with the command line", file=sys.stderr)
        return 1


def _option_names(msg: str, argv: list) -> str:
    """A refusal from the layers below names the API's argument (``steps=...``, ``C1=...``); on the
    command line it names the option the user typed (``--steps=...``, ``--c1=...``)."""
    import re

    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(=| is | must )", msg)
    if not m:
        return msg
    flag = "--" + m.group(1).lower().replace("_", "-")
    if flag in argv or any(a.startswith(flag + "=") for a in argv):
        return flag + msg[len(m.group(1)):]
    return msg


def _main(argv: list, printed: list) -> int:
    top = _top_parser()
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0
    command, rest = top.parse_args(argv[:1]).command, argv[1:]
    if command == "report" and (not rest or rest[0].startswith("-")):
        from .commands.account import run_report

        return run_report(rest)             # a raw composition's report: its own line (dpcalib.commands.account)
    args = _parse(command, rest, printed)
    if args is None:
        return 0                            # help printed
    # every command through one signature: handler(parsed arguments) -> exit status
    return {"list": _cmd_list, "account": _cmd_account, "train": _cmd_train, "calibrate": _cmd_calibrate,
            "epsilon": _cmd_epsilon, "compare": _cmd_compare, "audit": _cmd_audit, "probe": _cmd_probe,
            "report": _cmd_report}[command](args)


def _parse(command: str, rest: list, printed: list):
    """The parsed arguments of ``command``'s line (None: the help was printed); an algorithm's command
    line is checked here, before any work (:func:`_check_applicable`)."""
    if command == "list":
        return _list_parser().parse_args(rest)
    if command == "account":
        from .commands.account import account_parser

        return account_parser().parse_args(rest)
    if command == "train":
        _require_torch("train")
        from .commands.train import parser

        return parser(UsageError).parse_args(rest)
    if not rest or rest[0].startswith("-"):
        if any(a in ("-h", "--help") for a in rest):
            print(f"usage: dpcalib {command} ALGORITHM [options]\n\nalgorithms: {', '.join(SPECS)}\n\n"
                  f"example:\n  {_example(command, 'diff2-gd')}\n\n"
                  f"'dpcalib {command} ALGORITHM --help' lists the algorithm's options.")
            return None
        raise UsageError(f"{command}: ALGORITHM is required: expected one of {', '.join(SPECS)}")
    algorithm = rest[0]
    if algorithm not in SPECS:
        raise UsageError(f"ALGORITHM={algorithm!r} is not allowed: expected one of {', '.join(SPECS)}")
    args = _algo_parser(command, algorithm).parse_args(rest[1:])
    args.algorithm, args.command_name = algorithm, command
    args.printed_warnings = printed         # the warnings a table shows in place, not repeated on stderr
    _check_applicable(command, args)
    if command in ("audit", "probe"):
        _require_torch(command)
    return args


if __name__ == "__main__":
    raise SystemExit(main())
