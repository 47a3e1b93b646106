"""``dpcalib account`` and ``dpcalib report --poisson ...``: eps of a raw composition of events: the
Gaussian events (full batch, Poisson-subsampled, subsampled without replacement, balls-in-bins), one
flag for each base mechanism of the accountant's registry of kinds (:func:`event_kinds`), and any
tree from a JSON file."""

from __future__ import annotations

import argparse

from .algorithms import dumps as _json
from ..accountant import watching
from .common import (CONVERSION_REFUSAL, ProgressBar, accountant_argument, conversion_argument, epsilon_of, finite_epsilon,
                      need_matplotlib, Parser, print_epsilon, UsageError)

__all__ = ["ACCOUNT_EXAMPLE", "account_parser", "run", "run_report", "event_flags", "event_kinds"]


#: the Gaussian events' flags, older than the registry's JSON names: flag -> (event class name, the fields the
#: flag gives in order, metavar, help)
_GAUSSIAN_FLAGS = {
    "gaussian": ("GaussianEvent", ("noise_multiplier",), "Z:COUNT",
                 "full-batch Gaussian, noise multiplier Z > 0, COUNT times (repeatable)"),
    "poisson": ("PoissonSampledGaussianEvent", ("sampling_probability", "noise_multiplier"), "Q:Z:COUNT",
                "Poisson-subsampled Gaussian (add/remove): sampling probability Q in [0, 1], noise multiplier Z > 0, "
                "COUNT times (repeatable)"),
    "wor": ("WORSampledGaussianEvent", ("sampling_ratio", "noise_multiplier"), "GAMMA:Z:COUNT",
            "Gaussian on a subsample without replacement (replace-one): GAMMA = b/n in [0, 1], Z > 0, COUNT times "
            "(repeatable)"),
    "balls-in-bins": ("BallsInBinsGaussianEvent", ("steps", "noise_multiplier"), "STEPS:Z:COUNT",
                      "one epoch of balls-in-bins batches (add/remove): each record in one of STEPS steps, noise "
                      "multiplier Z > 0; COUNT epochs (repeatable)"),
}


def event_kinds() -> dict:
    """Every event flag of ``dpcalib account``: the Gaussian events' (:data:`_GAUSSIAN_FLAGS`), then one per base
    mechanism of the accountant's registry of kinds -- every registered kind with a JSON name and no child event,
    flagged by that name (``laplace`` -> ``--laplace``), its dataclass fields in order: a kind registered later
    has its flag too.

    Returns:
        ``{flag name: (event class, fields, metavar, help)}`` (flag names without the leading ``--``).
    """
    import dataclasses
    import re

    from ..accountant import event_types

    kinds = {c.__name__: c for c in event_types()}
    out = {flag: (kinds[cls], fields, metavar, text) for flag, (cls, fields, metavar, text) in _GAUSSIAN_FLAGS.items()}
    for cls in kinds.values():
        name = getattr(cls, "JSON_NAME", None)
        fields = dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ()
        if not name or any(f.name in ("event", "events") for f in fields):
            continue                              # a sampling or a node around a child event: --events
        optional = [f.name.upper() for f in fields if f.default is not dataclasses.MISSING]
        doc = " ".join((cls.__doc__ or name).split("\n\n")[0].split()).replace("``", "")
        text = (re.split(r"\.\s+(?=[A-Z][a-z])", doc)[0].rstrip(".") + f" (the --events kind {name!r})"
                + (f"; {' and '.join(optional)} may be left out, last first (its default)" if optional else "")
                + "; COUNT times (repeatable)")
        out[name.replace("_", "-")] = (cls, tuple(f.name for f in fields),
                                       ":".join([f.name.upper() for f in fields] + ["COUNT"]), text)
    return out


def _number(text: str):
    """An integer where ``text`` is one, else a float (the kind checks its own fields' ranges)."""
    t = text.strip()
    return int(t) if t.lstrip("+-").isdigit() else float(t)


def _event_spec(flag: str, cls, fields: tuple, metavar: str):
    """The argparse ``type`` of the flag ``--flag``: ``FIELD:...:COUNT`` -> ``(event, count, values)``, the event built
    (and so checked) here, so that a bad value is refused in one line naming the flag, its value and the range."""
    import dataclasses

    declared = {f.name: f for f in dataclasses.fields(cls)}
    required = sum(declared[n].default is dataclasses.MISSING for n in fields)

    def value(field: str, text: str):
        kind = str(declared[field].type)            # the dataclass's annotation: 'float', 'int', 'tuple'
        if "tuple" in kind:
            return tuple(_number(x) for x in text.split(","))
        return _number(text) if kind == "int" else float(text)

    def parse(text: str):
        from ..accountant.validation import InputError, MAX_RUN_LENGTH

        parts = text.split(":")
        n = len(parts) - 1
        if not required <= n <= len(fields):
            many = f"{required + 1}" if required == len(fields) else f"{required + 1} to {len(fields) + 1}"
            raise argparse.ArgumentTypeError(
                f"--{flag}={text!r} is not allowed: expected {many} numbers separated by ':' ({metavar})")
        try:
            values = [value(f, p) for f, p in zip(fields, parts[:-1])]
            count = int(parts[-1])
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--{flag}={text!r} is not allowed: expected numbers, the last one an integer count") from None
        if not 0 <= count <= MAX_RUN_LENGTH:
            raise argparse.ArgumentTypeError(
                f"--{flag}={text!r} is not allowed: expected a COUNT in [0, {MAX_RUN_LENGTH:.0e}] (no training run is "
                "longer, and accounting for 1e9 steps already takes 10-40 s and about 2 GB)")
        try:
            event = cls(*values)
        except InputError as exc:
            raise argparse.ArgumentTypeError(f"--{flag}={text!r}: {exc}") from None
        return event, count, values
    return parse


ACCOUNT_EXAMPLE = """example:
  dpcalib account --poisson 0.01:1.0:10000 --delta 1e-5
      eps of 10 000 Poisson-subsampled Gaussian steps (q = 0.01, noise multiplier 1.0)
  dpcalib account --gaussian 10:100 --delta 1e-5 --json
      100 full-batch Gaussian releases, noise multiplier 10: exact (GDP) eps
  dpcalib account --laplace 20:100 --zcdp 0.001:50 --delta 1e-5
      100 Laplace releases (noise multiplier 20) and 50 releases of a 0.001-zCDP mechanism: one flag per
      base mechanism of the registry, its fields then COUNT
  dpcalib account --events tree.json --delta 1e-5
      any event tree, e.g. [{"kind": "laplace", "noise_multiplier": 2},
      {"kind": "self_composed", "count": 100, "event": {"kind": "poisson", "sampling_probability": 0.01,
       "event": {"kind": "gaussian", "noise_multiplier": 1}}}]
"""


def account_parser(command: str = "account", description: str = "eps(delta) of a composition of events",
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
    for flag, (cls, fields, metavar, text) in event_kinds().items():
        acc.add_argument(f"--{flag}", action="append", default=[], type=_event_spec(flag, cls, fields, metavar),
                         metavar=metavar, help=text)
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


def run(args) -> int:
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
    out = [(f"--{flag}", ":".join(_shown(x) for x in (*values, k))) for flag in event_kinds()
           for _, k, values in getattr(args, flag.replace("-", "_"), ())]
    if getattr(args, "events", None):
        out.append(("--events", args.events))
    return out


def _shown(x) -> str:
    """A flag's number as a refusal names it (a list of them joined by ',')."""
    return ",".join(f"{e:g}" for e in x) if isinstance(x, tuple) else f"{x:g}"


def _compose_events(args):
    from ..accountant import PrivacyAccountant

    flags = [flag.replace("-", "_") for flag in event_kinds()]
    events = getattr(args, "events", None)
    if not (any(getattr(args, f) for f in flags) or events):
        raise UsageError(f"{args.command_name}: at least one of "
                         f"{', '.join('--' + f.replace('_', '-') for f in flags)}, --events is required")
    acc = PrivacyAccountant()
    if events:
        acc.compose(_read_events(events))
    for f in flags:
        for event, k, _ in getattr(args, f):
            acc.compose(event, k)
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
    from .report import EXAMPLE, report_arguments, run_events

    p = account_parser("report", "what eps means for a composition of events, or for an ALGORITHM's "
                                  "run ('dpcalib report ALGORITHM --help')", EXAMPLE)
    report_arguments(p)
    args = p.parse_args(rest)
    args.command_name = "report"
    if args.plot:
        need_matplotlib()
    acc = _compose_events(args)
    finite_epsilon(acc.get_epsilon(args.delta), args, event_flags(args))
    return run_events(acc, args)
