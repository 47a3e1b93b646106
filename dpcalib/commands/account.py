"""``dpcalib account`` and ``dpcalib report --poisson ...``: eps of a raw composition of Gaussian
events (full batch, Poisson-subsampled, subsampled without replacement)."""

from __future__ import annotations

import argparse

from .algorithms import dumps as _json
from ..accountant import watching
from .common import (CONVERSION_REFUSAL, ProgressBar, accountant_argument, conversion_argument, epsilon_of, finite_epsilon,
                      need_matplotlib, Parser, writable_plot, print_epsilon, UsageError)

__all__ = ["ACCOUNT_EXAMPLE", "account_parser", "run_account", "run_report", "event_flags"]


def _event_spec(kind: str, n_fields: int):
    def parse(text: str):
        from ..accountant.validation import MAX_RUN_LENGTH

        parts = text.split(":")
        if len(parts) != n_fields:
            raise argparse.ArgumentTypeError(
                f"--{kind}={text!r} is not allowed: expected {n_fields} numbers separated by ':'")
        try:
            vals = [float(p) for p in parts[:-1]] + [int(parts[-1])]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--{kind}={text!r} is not allowed: expected numbers, the last one an integer count") from None
        if not 0 <= vals[-1] <= MAX_RUN_LENGTH:
            raise argparse.ArgumentTypeError(
                f"--{kind}={text!r} is not allowed: expected a COUNT in [0, {MAX_RUN_LENGTH:.0e}] (no training run is "
                "longer, and accounting for 1e9 steps already takes 10-40 s and about 2 GB)")
        return vals
    return parse


ACCOUNT_EXAMPLE = """example:
  dpcalib account --poisson 0.01:1.0:10000 --delta 1e-5
      eps of 10 000 Poisson-subsampled Gaussian steps (q = 0.01, noise multiplier 1.0)
  dpcalib account --gaussian 10:100 --delta 1e-5 --json
      100 full-batch Gaussian releases, noise multiplier 10: exact (GDP) eps
  dpcalib account --events tree.json --delta 1e-5
      any event tree, e.g. [{"kind": "laplace", "noise_multiplier": 2},
      {"kind": "self_composed", "count": 100, "event": {"kind": "poisson", "sampling_probability": 0.01,
       "event": {"kind": "gaussian", "noise_multiplier": 1}}}]
"""


def account_parser(command: str = "account", description: str = "eps(delta) of a composition of Gaussian events",
                    example: str = ACCOUNT_EXAMPLE) -> argparse.ArgumentParser:
    """The parser of ``dpcalib account`` (and of the raw-events form of ``dpcalib report``).

    Args:
        command: the command's name (``"account"`` or ``"report"``); ``--conversion`` only for
            ``"account"``.
        description: the ``--help`` description.
        example: the ``--help`` epilog.

    Returns:
        The :class:`Parser`.
    """
    acc = Parser(prog=f"dpcalib {command}", description=description,
                  epilog=example, formatter_class=argparse.RawDescriptionHelpFormatter)
    acc.add_argument("--gaussian", action="append", default=[], type=_event_spec("gaussian", 2),
                     metavar="Z:COUNT", help="full-batch Gaussian, noise multiplier Z > 0, COUNT times (repeatable)")
    acc.add_argument("--poisson", action="append", default=[], type=_event_spec("poisson", 3),
                     metavar="Q:Z:COUNT", help="Poisson-subsampled Gaussian (add/remove): sampling probability Q in "
                                               "[0, 1], noise multiplier Z > 0, COUNT times (repeatable)")
    acc.add_argument("--wor", action="append", default=[], type=_event_spec("wor", 3),
                     metavar="GAMMA:Z:COUNT", help="Gaussian on a subsample without replacement (replace-one): "
                                                   "GAMMA = b/n in [0, 1], Z > 0, COUNT times (repeatable)")
    acc.add_argument("--events", default=None, metavar="FILE",
                     help="an event tree in JSON (docs/accounting.md, 'Event trees'): {\"kind\": NAME, ...}, children "
                          "under \"event\" / \"events\"; a list is a composition (Laplace, randomized response, "
                          "zCDP, sampling, repeat-and-select, ...)")
    acc.add_argument("--delta", type=float, required=True, help="target delta, a number in (0, 1)")
    accountant_argument(acc)
    if command == "account":
        conversion_argument(acc)
    acc.add_argument("--json", action="store_true", help="machine-readable output")
    return acc


def run_account(args) -> int:
    """``dpcalib account``: eps(delta) of the composed events, as text or JSON.

    Args:
        args: the parsed command line (:func:`account_parser`).

    Returns:
        The exit status, 0.

    Raises:
        UsageError: if ``--conversion`` is given without ``--accountant rdp``, no event is given,
            or eps is not finite.
    """
    args.command_name = "account"
    if args.conversion is not None and args.accountant != "rdp":
        raise UsageError(CONVERSION_REFUSAL.format(args.conversion))
    acc = _compose_events(args)
    with ProgressBar("account", total=1) as bar, watching(bar.note):   # (a bar after a second, on a terminal)
        rep, lower = epsilon_of(acc, args)
    finite_epsilon(rep.epsilon, args, event_flags(args))
    out = {"epsilon": rep.epsilon, "delta": rep.delta, "method": rep.method,
           "epsilon_lower": lower, "epsilon_upper": rep.epsilon,
           "order": rep.order, "conversion": rep.conversion, "notes": list(rep.notes)}
    if args.json:
        print(_json(out))
    else:
        print_epsilon(rep)
        for n in rep.notes:
            if not str(n).startswith("bracket ["):
                print(f"note        {n}")
    return 0


def event_flags(args) -> list:
    """The event options the user gave, for a refusal that names them.

    Args:
        args: the parsed command line.

    Returns:
        A list of ``(flag, value text)`` pairs.
    """
    out = [(f"--{kind}", ":".join(f"{x:g}" for x in v)) for kind in ("gaussian", "poisson", "wor")
           for v in getattr(args, kind)]
    if getattr(args, "events", None):
        out.append(("--events", args.events))
    return out


def _compose_events(args):
    from ..accountant import GaussianEvent, PoissonSampledGaussianEvent, PrivacyAccountant, WORSampledGaussianEvent

    events = getattr(args, "events", None)
    if not (args.gaussian or args.poisson or args.wor or events):
        raise UsageError(f"{args.command_name}: at least one of --gaussian, --poisson, --wor, --events is required")
    acc = PrivacyAccountant()
    if events:
        acc.compose(_read_events(events))
    for z, k in args.gaussian:
        acc.compose(GaussianEvent(z), k)
    for q, z, k in args.poisson:
        acc.compose(PoissonSampledGaussianEvent(q, z), k)
    for g, z, k in args.wor:
        acc.compose(WORSampledGaussianEvent(g, z), k)
    return acc


def _read_events(path: str):
    """The event tree of the JSON file ``path`` (:func:`~dpcalib.accountant.event_from_json`)."""
    import json

    from ..accountant import event_from_json

    try:
        with open(path) as f:
            obj = json.load(f)
    except OSError as exc:
        raise UsageError(f"--events={path!r} is not allowed: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"--events={path!r} is not allowed: not JSON ({exc})") from None
    return event_from_json(obj)


def run_report(rest) -> int:
    """``dpcalib report --poisson ... --delta D``: the raw composition's report.

    Args:
        rest: the arguments after ``dpcalib report``.

    Returns:
        The exit status, 0.
    """
    from .report import EXAMPLE, add_arguments, run_events

    p = account_parser("report", "what eps means for a composition of Gaussian events, or for an ALGORITHM's "
                                  "run ('dpcalib report ALGORITHM --help')", EXAMPLE)
    add_arguments(p, writable_plot)
    args = p.parse_args(rest)
    args.command_name = "report"
    if args.plot:
        need_matplotlib()
    acc = _compose_events(args)
    finite_epsilon(acc.get_epsilon(args.delta), args, event_flags(args))
    return run_events(acc, args)
