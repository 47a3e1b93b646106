"""Per-algorithm command-line options, derived from the mechanisms (one registry).

The shape options are the mechanism dataclass's fields (flag ``--field-name``, type and default
from the field, help from the class's ``field_help``); the calibration options are the
``calibrate`` keywords the class lists in ``calibrate_options`` (default from the signature); the
noise levels are the positional parameters of the class's ``accountant`` (in that order).  Only
the command line's own facts of each algorithm are written here: the worked examples.  Everything is computed on first use, so that importing
the CLI stays cheap.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from dataclasses import dataclass

def number(text: str) -> float:
    """A number as the command line takes it: a float (``0.004``) or a fraction of two (``256/60000``,
    a batch over a dataset's size), computed as ``float(a) / float(b)``.

    Args:
        text: the option's text.

    Returns:
        The number, as a float.

    Raises:
        argparse.ArgumentTypeError: not a number, or not a fraction of two numbers with b != 0 (argparse
            reports it in one line naming the option).
    """
    import argparse

    a, slash, b = str(text).partition("/")
    try:
        if not slash:
            return float(text)
        den = float(b)
        if den != 0.0:
            return float(a) / den
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r} is not allowed: expected a number, or a fraction a/b of two numbers "
                                     "with b != 0")


# ---- the command line's facts of each algorithm (the registry, :mod:`dpcalib.mechanisms.registry`, holds
# the math's) ----------------------------------------------------------------------------------------
def _d2p(name: str) -> dict:
    """The worked command lines of ClipD2P and ConstD2P: the paper's shape, a one-node audit, a probe."""
    return dict(calibrate=f"dpcalib calibrate {name} --epsilon 1 --delta 1e-5 --samples-per-node 2500 --iterations 3500",
                audit=f"dpcalib audit {name} --epsilon 2 --delta 1e-5 --samples-per-node 1 --iterations 1 "
                      "--relation replace-one --runs 300",
                probe=f"dpcalib probe {name} --epsilon 1 --delta 1e-5 --samples-per-node 50 --iterations 20")


#: algorithm -> command -> a worked command line (an algorithm without one gets "(no standard ...)")
EXAMPLES = {
    "dp-gd": dict(
        calibrate="dpcalib calibrate dp-gd --epsilon 3 --delta 1e-5 --rounds 2000 --clients 10 --n-min 1651",
        audit="dpcalib audit dp-gd --epsilon 2 --delta 1e-5 --rounds 4 --clients 2 --n-min 5 --runs 2000",
        probe="dpcalib probe dp-gd --epsilon 3 --delta 1e-5 --rounds 20 --clients 4 --n-min 250"),
    "diff2-gd": dict(
        calibrate="dpcalib calibrate diff2-gd --epsilon 3 --delta 1e-5 --rounds 2000 --restart-interval 20 "
                  "--clients 10 --n-min 1651 --u 1.25 --method paper",
        audit="dpcalib audit diff2-gd --epsilon 2 --delta 1e-5 --rounds 4 --restart-interval 2 --clients 2 "
              "--n-min 5 --runs 2000",
        probe="dpcalib probe diff2-gd --epsilon 3 --delta 1e-5 --rounds 40 --restart-interval 20 --clients 4 "
              "--n-min 250 --c2 0.01"),
    "diff2-bvr": dict(
        calibrate="dpcalib calibrate diff2-bvr --epsilon 3 --delta 1e-5 --rounds 2000 --restart-interval 20 "
                  "--clients 10 --n-min 1651 --local-steps 5 --batch-size 13",
        audit="dpcalib audit diff2-bvr --epsilon 8 --delta 1e-5 --rounds 2 --restart-interval 2 --clients 2 "
              "--n-min 4 --local-steps 3 --batch-size 2 --runs 1000",
        probe="dpcalib probe diff2-bvr --epsilon 3 --delta 1e-5 --rounds 8 --restart-interval 4 --clients 2 "
              "--n-min 500 --local-steps 3 --batch-size 50"),
    "dp-sgd": dict(
        calibrate="dpcalib calibrate dp-sgd --epsilon 2 --delta 1e-5 --sampling-rate 0.02 --steps 150",
        audit="dpcalib audit dp-sgd --epsilon 2 --delta 1e-5 --sampling-rate 0.01 --steps 1000 --one-run",
        probe="dpcalib probe dp-sgd --epsilon 2 --delta 1e-5 --sampling-rate 0.05 --steps 20"),
    "dp-srm": dict(
        calibrate="dpcalib calibrate dp-srm --epsilon 0.5 --delta 1e-5 --n 49990 --steps 100 --b0 256 --b 64",
        audit="dpcalib audit dp-srm --epsilon 8 --delta 1e-5 --n 4 --steps 2 --b0 2 --b 2 --momentum 1 "
              "--step-bound 1 --runs 200",
        probe="dpcalib probe dp-srm --epsilon 0.5 --delta 1e-5 --n 2000 --steps 30 --b0 64 --b 16"),
    "dicesgd": dict(
        calibrate="dpcalib calibrate dicesgd --epsilon 2 --delta 1e-5 --n 50000 --batch-size 1000 "
                  "--steps 150 --c1 1 --c2 1 --c 1 --method both",
        audit="dpcalib audit dicesgd --epsilon 2 --delta 1e-5 --n 20 --batch-size 5 --steps 4 --c1 1 "
              "--c2 0.1 --runs 500",
        probe="dpcalib probe dicesgd --epsilon 2 --delta 1e-5 --n 1000 --batch-size 50 --steps 20 --c1 1 "
              "--c2 1 --c 1"),
    "clipd2p": _d2p("clipd2p"),
    "constd2p": _d2p("constd2p"),
    "adad2p": dict(
        calibrate="dpcalib calibrate adad2p --epsilon 1 --delta 1e-5   (refused: no guarantee)",
        audit="dpcalib audit adad2p --epsilon 2 --delta 1e-5 --samples-per-node 1 --iterations 1 --runs 300",
        probe="dpcalib probe adad2p ...   (refused: AdaD2P claims no sensitivity)"),
}

def example(algorithm: str, command: str) -> str:
    """The worked command line of ``command`` for ``algorithm``.

    Args:
        algorithm: a registered algorithm name.
        command: a command (``"calibrate"``, ``"audit"``, ``"probe"``).

    Returns:
        The command line, or ``"(no standard COMMAND for ALGORITHM)"``.
    """
    return EXAMPLES.get(algorithm, {}).get(command, f"(no standard {command} for {algorithm})")


_TYPES = {"int": int, "float": number, "str": str, "bool": bool}


@dataclass(frozen=True)
class Opt:
    """One command-line option of an algorithm.

    Attributes:
        flag: the option (``--rounds``).
        field: the constructor or ``calibrate`` keyword it sets.
        type: the type argparse converts the text with.
        help: the help text.
        default: the default shown in ``--help``; None: no default.
        target: ``"shape"`` (a constructor field) or ``"split"`` (a ``calibrate`` keyword).
        required: whether the option must be given.
        choices: the values argparse accepts, or None (any).
    """
    flag: str            # --rounds
    field: str           # constructor / calibrate keyword
    type: type
    help: str
    default: object = None  # shown in --help; None: no default
    target: str = "shape"   # "shape" (constructor), "split" (calibrate keyword)
    required: bool = False
    choices: tuple | None = None  # the values argparse accepts (the class's ``field_choices``)


@dataclass(frozen=True)
class Spec:
    """The command-line description of an algorithm.

    Attributes:
        options: the shape and split options (:class:`Opt`).
        noise: the names of the noise levels, in the order ``epsilon()`` takes them.
        rounds_field: the field that grows with training (for ``--curve``), or None.
        example: a worked ``calibrate`` command line.
    """
    options: tuple         # shape and split options
    noise: tuple           # names of the noise levels, in the order epsilon() takes them
    rounds_field: str | None  # the count that grows with training (for --curve)
    example: str


ROUNDS_FIELDS = ("rounds", "steps", "iterations")


def _type(annotation) -> type:
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return _TYPES[name.split("|")[0].strip()]


def spec_of(cls) -> Spec:
    """The command-line description of a mechanism class.

    Args:
        cls: the mechanism class (registered in :data:`~dpcalib.mechanisms.REGISTRY`).

    Returns:
        Its :class:`Spec`.
    """
    opts = []
    for f in dataclasses.fields(cls):
        has_default = f.default is not dataclasses.MISSING
        opts.append(Opt("--" + f.name.lower().replace("_", "-"), f.name, _type(f.type), cls.field_help[f.name],
                        f.default if has_default else None, "shape", not has_default,
                        getattr(cls, "field_choices", {}).get(f.name)))
    params = inspect.signature(cls.calibrate).parameters
    for name, text in cls.calibrate_options.items():
        default = params[name].default
        opts.append(Opt("--" + name.replace("_", "-"), name, type(default), text, default, "split"))
    noise = getattr(cls, "noise_levels", None)
    if not isinstance(noise, tuple):
        noise = tuple(p.name for p in list(inspect.signature(cls.accountant).parameters.values())[1:]
                      if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD)
    from ..mechanisms import Mechanism

    names = [f.name for f in dataclasses.fields(cls)]
    # the count that grows with training, for --curve (none for a mechanism without accountable releases)
    rounds = next((r for r in ROUNDS_FIELDS if r in names), None) if issubclass(cls, Mechanism) else None
    return Spec(tuple(opts), noise, rounds, example(cls.name, "calibrate"))


class _Specs(Mapping):
    """``name -> Spec`` for every algorithm of the registry, each built on first use (an algorithm
    registered after import is here too)."""

    def __init__(self):
        self._d = {}

    def __getitem__(self, key):
        from ..mechanisms import REGISTRY

        if key not in REGISTRY:
            raise KeyError(key)
        cls = REGISTRY[key].mechanism
        if self._d.get(key, (None,))[0] is not cls:
            self._d[key] = (cls, spec_of(cls))
        return self._d[key][1]

    def __iter__(self):
        from ..mechanisms import REGISTRY

        return iter(list(REGISTRY))

    def __len__(self):
        from ..mechanisms import REGISTRY

        return len(REGISTRY)


SPECS = _Specs()


def dumps(obj) -> str:
    """JSON that is JSON: a number that is not finite is an error of ours, never 'Infinity'.

    Args:
        obj: a JSON-serialisable object.

    Returns:
        The JSON text.
    """
    import json

    return json.dumps(obj, allow_nan=False)


def fmt(x) -> str:
    """A number as the command line prints it (6 significant digits; "-" for none).

    Args:
        x: a number, None, or anything printable.

    Returns:
        The text.
    """
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def build(algorithm: str, args):
    """``(mechanism, split)`` from parsed options: the shape options construct the mechanism, the
    split options are ``calibrate`` keywords.

    Args:
        algorithm: a registered algorithm name.
        args: the parsed command line.

    Returns:
        ``(mechanism, split)``: the mechanism instance and a dict of ``calibrate`` keywords.
    """
    from ..mechanisms import REGISTRY

    cls = REGISTRY[algorithm].mechanism
    shape = {o.field: getattr(args, o.field) for o in SPECS[algorithm].options if o.target == "shape"}
    split = {o.field: getattr(args, o.field) for o in SPECS[algorithm].options
             if o.target == "split" and hasattr(args, o.field)}     # (epsilon and report take no split)
    return cls(**shape), split


def noise_args(algorithm: str, args) -> list:
    """The noise levels the command line was given, in the algorithm's order (``SPECS[algorithm].noise``).

    Args:
        algorithm: a registered algorithm name.
        args: the parsed command line (its ``noise_*`` options).

    Returns:
        The list of values.
    """
    return [getattr(args, "noise_" + n) for n in SPECS[algorithm].noise]


def noise_flags(algorithm: str, args) -> list:
    """``(flag, value)`` of each noise level given (``--sigma1``, ...), for the messages that name them.

    Args:
        algorithm: a registered algorithm name.
        args: the parsed command line.

    Returns:
        The list of pairs.
    """
    return [("--" + n.replace("_", "-"), v) for n, v in zip(SPECS[algorithm].noise, noise_args(algorithm, args))]


def noise_arguments(p, algorithm: str) -> None:
    """The algorithm's noise levels as required options (``--noise-multiplier``, ``--sigma1``, ...): the
    commands that take the noise itself (``epsilon``, ``report``) rather than calibrate it.

    Args:
        p: the algorithm's parser.
        algorithm: a registered algorithm name.
    """
    for name in SPECS[algorithm].noise:
        p.add_argument("--" + name.replace("_", "-"), dest="noise_" + name, type=float, required=True,
                       metavar=name.upper(), help=f"noise level {name}, a number > 0")


def takes_accountant(algorithm: str) -> bool:
    """Whether the algorithm's ``calibrate`` chooses between the accountants (its ``accountant=`` keyword).

    Args:
        algorithm: a registered algorithm name.

    Returns:
        True where ``calibrate`` and ``compare`` take ``--accountant``.
    """
    from ..mechanisms import REGISTRY

    return "accountant" in inspect.signature(REGISTRY[algorithm].mechanism.calibrate).parameters
