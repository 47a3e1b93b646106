"""The ``dpcalib`` command line.

    dpcalib account --poisson 0.01:1.0:10000 --delta 1e-5
    dpcalib account --gaussian 10:100 --wor 0.01:1.2:500 --delta 1e-5 --json

Bad input gives one line on stderr naming the option, the value and what is allowed, and exit
code 2 -- never a traceback.  Importing this module does not import torch.
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["main"]

ACCOUNT_EXAMPLE = """example:
  dpcalib account --poisson 0.01:1.0:10000 --delta 1e-5
      eps of 10 000 Poisson-subsampled Gaussian steps (q = 0.01, noise multiplier 1.0)
  dpcalib account --gaussian 10:100 --delta 1e-5 --json
      100 full-batch Gaussian releases, noise multiplier 10: exact (GDP) eps
"""


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no traceback
        raise _UsageError(message)


def _event_spec(kind: str, n_fields: int):
    def parse(text: str):
        parts = text.split(":")
        if len(parts) != n_fields:
            raise argparse.ArgumentTypeError(
                f"--{kind}={text!r} is not allowed: expected {n_fields} numbers separated by ':'")
        try:
            nums = [float(p) for p in parts[:-1]] + [int(parts[-1])]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--{kind}={text!r} is not allowed: expected numbers, the last one an integer count") from None
        return nums
    return parse


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="dpcalib", description="Privacy accounting and noise calibration for DP optimizers.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    acc = sub.add_parser("account", help="eps(delta) of a composition of Gaussian events",
                         epilog=ACCOUNT_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    acc.add_argument("--gaussian", action="append", default=[], type=_event_spec("gaussian", 2),
                     metavar="Z:COUNT", help="full-batch Gaussian, noise multiplier Z, COUNT times")
    acc.add_argument("--poisson", action="append", default=[], type=_event_spec("poisson", 3),
                     metavar="Q:Z:COUNT", help="Poisson-subsampled Gaussian (add/remove)")
    acc.add_argument("--wor", action="append", default=[], type=_event_spec("wor", 3),
                     metavar="GAMMA:Z:COUNT", help="Gaussian on a subsample without replacement (replace-one)")
    acc.add_argument("--delta", type=float, required=True, help="target delta in (0, 1)")
    acc.add_argument("--method", choices=["auto", "gdp", "rdp"], default="auto")
    acc.add_argument("--conversion", choices=["improved", "mironov"], default="improved")
    acc.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def _account(args) -> int:
    from accountant import GaussianEvent, PoissonSampledGaussianEvent, PrivacyAccountant, WORSampledGaussianEvent

    if not (args.gaussian or args.poisson or args.wor):
        raise _UsageError("account: at least one of --gaussian, --poisson, --wor is required")
    acc = PrivacyAccountant()
    for z, k in args.gaussian:
        acc.compose(GaussianEvent(z), k)
    for q, z, k in args.poisson:
        acc.compose(PoissonSampledGaussianEvent(q, z), k)
    for g, z, k in args.wor:
        acc.compose(WORSampledGaussianEvent(g, z), k)
    rep = acc.epsilon_report(args.delta, method=args.method, conversion=args.conversion)
    out = {"epsilon": rep.epsilon, "delta": rep.delta, "method": rep.method,
           "order": rep.order, "conversion": rep.conversion, "notes": list(rep.notes)}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"epsilon    {rep.epsilon:.6g}")
        print(f"delta      {rep.delta:.6g}")
        print(f"method     {rep.method}" + (" (exact)" if rep.method == "gdp" else ""))
        if rep.order is not None:
            print(f"order      {rep.order:.6g}")
            print(f"conversion {rep.conversion}")
        for n in rep.notes:
            print(f"note       {n}")
    return 0


def main(argv=None) -> int:
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 0
        return _account(args)
    except (_UsageError, ValueError) as exc:
        print(f"dpcalib: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
