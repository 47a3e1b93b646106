"""``dpcalib report``: what a run's eps means -- eps brackets at several delta, GDP mu where exact, the
trade-off curve and the attack risk (largest membership-inference TPR at low FPR, largest
advantage), all from the certified side, with the assumptions in words.

    dpcalib report --poisson Q:Z:COUNT [--gaussian Z:COUNT] [--wor GAMMA:Z:COUNT] --delta D
    dpcalib report ALGORITHM --delta D [shape options] [noise options, as in epsilon]
    ... [--deltas D1,D2,...] [--fprs A1,A2,...] [--plot FILE.png] [--json]
"""

from __future__ import annotations

import argparse

from .algorithms import SPECS, build, dumps, fmt, noise_args, noise_arguments, noise_flags
from .common import ProgressBar, accountant_argument, finite_epsilon, need_matplotlib, writable_plot

__all__ = ["add_arguments", "report_arguments", "run", "run_algorithm", "ProgressBar"]

EXAMPLE = """examples:
  dpcalib report --poisson 0.01:1.0:10000 --delta 1e-5
      eps brackets, trade-off curve and attack risk of 10 000 Poisson-subsampled Gaussian steps
  dpcalib report dp-sgd --delta 1e-5 --sampling shuffle --n 60000 --batch-size 600 --epochs 1 --noise-multiplier 0.8
      shuffled batches: the bracket [Chua et al.'s lower bound, exact GDP], beside Poisson's eps
"""


def _numbers(flag: str, low: float, high: float):
    def parse(text: str):
        try:
            vals = [float(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag}={text!r} is not allowed: expected numbers separated by ','") \
                from None
        if not vals or not all(low < x < high for x in vals):
            raise argparse.ArgumentTypeError(f"{flag}={text!r} is not allowed: expected numbers in ({low:g}, {high:g}) "
                                             "separated by ','")
        return tuple(vals)
    return parse


def add_arguments(p, algorithm: str) -> None:
    """The report's own options on an algorithm's run: the noise levels, the report's options
    (:func:`report_arguments`) and ``--accountant`` (``--delta`` and the shape come from the algorithm's parser).

    Args:
        p: the algorithm's parser.
        algorithm: a registered algorithm name.
    """
    noise_arguments(p, algorithm)
    report_arguments(p)
    accountant_argument(p)


def report_arguments(p) -> None:
    """The report's options of both forms (an algorithm's run, a raw composition of events).

    Args:
        p: the parser to add ``--deltas``, ``--fprs`` and ``--plot`` to.
    """
    from ..accountant.report import DEFAULT_DELTAS, DEFAULT_FPRS

    p.add_argument("--deltas", type=_numbers("--deltas", 0.0, 1.0), default=None, metavar="D1,D2,...",
                   help="the deltas of the eps table (default " + ",".join(f"{d:g}" for d in DEFAULT_DELTAS)
                        + "; --delta is always included)")
    p.add_argument("--fprs", type=_numbers("--fprs", 0.0, 1.0), default=DEFAULT_FPRS, metavar="A1,A2,...",
                   help="false-positive rates of the attack-risk terms (default "
                        + ",".join(f"{a:g}" for a in DEFAULT_FPRS) + ")")
    p.add_argument("--plot", metavar="FILE.png", type=writable_plot,
                   help="draw the certified trade-off curve and the ROC bound with the attack points (needs matplotlib)")


def _emit(rep, args, title: str, extra: dict | None = None, plot_title: str = "") -> int:
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            from ..accountant.validation import InputError

            from .common import install_hint

            raise InputError(f"--plot needs matplotlib: {install_hint('plot')}") from None
        rep.plot(args.plot, plot_title)
    if args.json:
        out = rep.to_dict()
        out.update(extra or {})
        print(dumps(out))
    else:
        if title:
            print(title)
        print(rep.text())
        for k, v in (extra or {}).items():
            if v is not None and k not in ("algorithm", "noise", "run_shape"):
                print(f"{k.replace('_', ' ')}: {fmt(v)}")
    return 0


def _chosen_accountant(args, epsilon_of) -> dict:
    """``--accountant X`` other than best: X's eps at ``--delta`` beside the report, the number ``dpcalib
    epsilon --accountant X`` prints (the brackets and the attack risk stay the certified PLD's)."""
    x = getattr(args, "accountant", None)
    if x in (None, "best"):
        return {}
    return {f"epsilon_{x}_alone": epsilon_of(x)}


def run_events(acc, args) -> int:
    """``dpcalib report --poisson ... --delta D``.

    Args:
        acc: the :class:`~dpcalib.accountant.PrivacyAccountant` of the events.
        args: the parsed command line.

    Returns:
        The exit status, 0.

    Raises:
        InputError: if ``--plot`` is given and matplotlib is not installed.
    """
    from ..accountant import watching

    with ProgressBar("report") as bar, watching(bar.note):
        extra = _chosen_accountant(args, lambda x: acc.get_epsilon(args.delta, x))
        rep = acc.report(args.delta, args.deltas, args.fprs, progress=bar)
    return _emit(rep, args, "", extra)


def run(args) -> int:
    """``dpcalib report ALGORITHM ...``: the run's eps checked finite at ``--delta``, then its report
    (:func:`run_algorithm`), with a progress bar on a terminal from the start.

    Args:
        args: the parsed command line (``args.algorithm``: the registered algorithm name).

    Returns:
        The exit status, 0.

    Raises:
        InputError: if ``--plot`` is given and matplotlib is not installed, or eps is not finite.
    """
    algorithm = args.algorithm
    from ..accountant import watching

    if args.plot:
        need_matplotlib()
    mech, _ = build(algorithm, args)
    noise = noise_args(algorithm, args)
    # (the bar from the start: the check's bracket at --delta is the report's first long part)
    with ProgressBar(f"report {algorithm}") as bar, watching(bar.note):
        finite_epsilon(mech.epsilon(args.delta, *noise).epsilon, args, noise_flags(algorithm, args))
        return run_algorithm(algorithm, mech, noise, SPECS[algorithm].noise, args, progress=bar)


def run_algorithm(algorithm: str, mech, noise: list, names, args, progress=None) -> int:
    """``dpcalib report ALGORITHM ...``: the mechanism's report (its bracket and assumptions);
    ``progress`` as :func:`~dpcalib.accountant.report.privacy_report`'s.

    Args:
        algorithm: the registered algorithm name.
        mech: its mechanism instance.
        noise: the noise levels, in the mechanism's order.
        names: the noise levels' names, in the same order.
        args: the parsed command line.
        progress: None or ``progress(done, total, part)``.

    Returns:
        The exit status, 0.

    Raises:
        InputError: if ``--plot`` is given and matplotlib is not installed.
    """
    rep = mech.report(args.delta, *noise, deltas=args.deltas, fprs=args.fprs, progress=progress)
    extra = {"algorithm": algorithm, "noise": dict(zip(names, noise))}
    extra.update(_chosen_accountant(args, lambda x: mech.epsilon(args.delta, *noise, accountant=x).epsilon))
    pe = getattr(mech, "poisson_epsilon", None)
    if pe is not None:
        extra["poisson_epsilon"] = pe(args.delta, *noise)
    if mech.shape_note:
        extra["run_shape"] = mech.shape_note
    levels = ", ".join(f"{k}={v:g}" for k, v in extra["noise"].items())
    title = f"algorithm   {algorithm} ({levels})" + (f"\nrun         {extra['run_shape']}" if mech.shape_note else "")
    return _emit(rep, args, title, extra,
                 plot_title=f"{algorithm} ({levels}): epsilon {rep.epsilon_upper:.4g} at delta {rep.delta:g}")
