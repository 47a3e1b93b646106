"""``dpcalib list``: the algorithms, their options (flags, defaults, help) and the paper each comes from,
as a table or JSON -- read from the registry, as every other command's options are."""

from __future__ import annotations

import math

from .algorithms import SPECS, dumps
from .common import Parser

__all__ = ["parser", "run"]


def parser(description: str):
    """The list command's parser: ``--json`` only.

    Args:
        description: the command's line in the top-level help.

    Returns:
        The parser.
    """
    p = Parser(prog="dpcalib list", description=description)
    p.add_argument("--json", action="store_true", help="machine-readable output (stable keys)")
    return p


def run(args) -> int:
    """``dpcalib list``: one block per algorithm (or one JSON row each, with stable keys).

    Args:
        args: the parsed command line (``--json``).

    Returns:
        The exit status, 0.
    """
    from ..mechanisms import ALGORITHMS

    rows = []
    for name, (cls, source) in ALGORITHMS.items():
        spec = SPECS[name]
        rows.append({"algorithm": name, "source": source, "noise": list(spec.noise),
                     "options": [{"flag": o.flag, "required": o.required,
                                  "default": repr(o.default) if isinstance(o.default, float)
                                  and not math.isfinite(o.default) else o.default,
                                  "calibration": o.target == "split", "help": o.help} for o in spec.options]})
    if args.json:
        print(dumps(rows))
        return 0
    for r in rows:
        opts = " ".join(o["flag"] + ("" if o["default"] is None else f"[={o['default']}]") for o in r["options"])
        print(f"{r['algorithm']:10s} {r['source']}")
        print(f"{'':10s} options: {opts}")
        print(f"{'':10s} noise:   {', '.join(r['noise'])}")
    return 0
