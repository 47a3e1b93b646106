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
import sys
import warnings

from .commands.algorithms import SPECS
from .commands.common import CONVERSION_REFUSAL, install_hint, Parser, UsageError

__all__ = ["main"]


# ---- helpers ---------------------------------------------------------------------------------
#: the commands that calibrate the noise for (--epsilon, --delta) and so take the calibration's options
#: (--method, the budget split); epsilon and report take the noise levels instead
CALIBRATING = ("calibrate", "compare", "audit", "probe")


def _command(command: str):
    """The module of ``command`` (:mod:`dpcalib.commands`), imported on use (one command's start pays for its
    own imports only): its ``run(args)`` (every command), its ``add_arguments(parser, algorithm)`` on an
    algorithm (and, where some options exclude others, ``check_applicable(args)``); ``list``, ``account`` and
    ``train`` build their parsers whole."""
    if command == "list":
        from .commands import list as module
    elif command == "calibrate":
        from .commands import calibrate as module
    elif command == "epsilon":
        from .commands import epsilon as module
    elif command == "compare":
        from .commands import compare as module
    elif command == "account":
        from .commands import account as module
    elif command == "report":
        from .commands import report as module
    elif command == "audit":
        from .commands import audit as module
    elif command == "probe":
        from .commands import probe as module
    elif command == "train":
        from .commands import train as module
    else:
        raise KeyError(f"no module for the command {command!r}")   # a command of COMMANDS without its module
    return module


def _algo_parser(command: str, algorithm: str) -> argparse.ArgumentParser:
    """``dpcalib COMMAND ALGORITHM``'s parser: what the commands on an algorithm share (``--epsilon`` where
    the command calibrates, ``--delta``, the algorithm's shape options, ``--json``) around the command's own
    options, which its module adds."""
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
    _command(command).add_arguments(p, algorithm)
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
    silently ignored (one line, exit 2): ``--conversion`` without the RDP accountant here, the command's
    own rules in its module."""
    if getattr(args, "conversion", None) is not None and getattr(args, "accountant", None) != "rdp":
        raise UsageError(CONVERSION_REFUSAL.format(args.conversion))
    check = getattr(_command(command), "check_applicable", None)
    if check is not None:
        check(args)


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
    return _command(command).run(args)      # every command through one signature: run(parsed arguments)


def _parse(command: str, rest: list, printed: list):
    """The parsed arguments of ``command``'s line (None: the help was printed); an algorithm's command
    line is checked here, before any work (:func:`_check_applicable`)."""
    if command == "list":
        return _command("list").parser(COMMANDS["list"]).parse_args(rest)
    if command == "account":
        return _command("account").account_parser().parse_args(rest)
    if command == "train":
        _require_torch("train")
        return _command("train").parser().parse_args(rest)
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
