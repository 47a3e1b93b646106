"""``dpcalib epsilon``: eps spent for given noise levels -- the headline under the chosen ``--accountant``
(with a shuffled run's own lower bound and its Poisson comparison), and with ``--curve`` or ``--plot`` the
curve over the run's length, each point from the same owner as the headline."""

from __future__ import annotations

import argparse

from .algorithms import SPECS, build, dumps, fmt as _fmt, noise_args, noise_arguments, noise_flags
from .common import (ProgressBar, UsageError, accountant_argument, conversion_argument, epsilon_of, finite_epsilon,
                     install_hint, print_epsilon, writable_plot)

__all__ = ["run", "add_arguments"]


def add_arguments(p, algorithm: str) -> None:
    """The epsilon command's own options: the noise levels, ``--accountant``, ``--conversion``, ``--curve`` and
    ``--plot`` (``--delta`` and the algorithm's shape come from the algorithm's parser).

    Args:
        p: the algorithm's parser.
        algorithm: a registered algorithm name.
    """
    noise_arguments(p, algorithm)
    accountant_argument(p)
    conversion_argument(p)
    p.add_argument("--curve", action="store_true", help="print eps as the rounds grow")
    p.add_argument("--plot", metavar="FILE.png", type=writable_plot, help="draw the curve (needs matplotlib)")


def run(args) -> int:
    """``dpcalib epsilon ALGORITHM ...``: eps of the given noise levels, the headline and (``--curve``,
    ``--plot``) the curve over the run's length, as text or JSON.

    Args:
        args: the parsed command line (``args.algorithm``: the registered algorithm name).

    Returns:
        The exit status, 0.

    Raises:
        UsageError: if eps is not finite at the given noise, or ``--plot`` lacks matplotlib.
    """
    algorithm = args.algorithm
    from ..accountant import watching

    mech, _ = build(algorithm, args)
    noise = noise_args(algorithm, args)
    points = _curve_points(algorithm, args) if args.curve or args.plot else None
    parts = 1 + len(points[1]) if points else 1
    # a bar on a terminal once the work has run a second: the headline, then each curve point, each
    # grid composed on the way shown (10^8 steps: tens of seconds a bracket, minutes a curve)
    with ProgressBar(f"epsilon {algorithm}", total=parts) as bar, watching(bar.note):
        out, (rep, lower, own) = _epsilon_numbers(algorithm, args, mech, noise)
        if mech.shape_note:
            out["run_shape"] = mech.shape_note
        if points:
            field, counts = points

            def done(k):                    # k points composed: the next one is named
                bar(1 + k, parts, f"curve at {counts[k]} {field}" if k < len(counts) else "curve")
            done(0)
            out["curve"] = _curve(algorithm, args, noise, points, done)
    if args.plot:
        _plot(out["curve"], args.plot, algorithm, args.delta)
    if args.json:
        print(dumps(out))
    else:
        print(f"algorithm   {algorithm}")
        if out.get("run_shape"):
            print(f"run         {out['run_shape']}")
        print_epsilon(rep, "lower: Chua et al.'s shuffle bound; upper: certified" if own is not None else None)
        for n in rep.notes:
            if own is not None and not str(n).startswith("bracket ["):
                print(f"note        {n}")
        if out.get("poisson_epsilon") is not None:
            print(f"poisson     {_fmt(out['poisson_epsilon'])} (Poisson sampling at q = b/n for the same steps: NOT "
                  "valid for shuffled batches" + (", and below the lower bound)" if lower > out["poisson_epsilon"]
                                                   else ")"))
        for pt in out.get("curve", []):
            print(f"curve       {pt['rounds']:>8d} {pt['unit']:6s} {_fmt(pt['epsilon'])}")
    return 0


def _epsilon_numbers(algorithm: str, args, mech, noise) -> tuple:
    """``dpcalib epsilon``'s answer: ``(out, (report, lower, own lower))`` -- the JSON keys, and what
    the text prints besides."""
    acc = mech.accountant(*noise)
    rep, lower = epsilon_of(acc, args)
    finite_epsilon(rep.epsilon, args, noise_flags(algorithm, args))
    # the mechanism's own lower bound (shuffled batches; none needed where eps is exactly 0)
    own = mech.epsilon_lower(args.delta, *noise) if rep.epsilon > 0 else None
    if own is not None:
        from ..accountant import EpsilonReport

        lower = min(own, rep.epsilon)
        rep = EpsilonReport(rep.epsilon, rep.delta, rep.method, rep.conversion, rep.order,
                            tuple(n for n in rep.notes if not str(n).startswith(("bracket [", "exact:")))
                            + (f"bracket [{lower:.9g}, {rep.epsilon:.9g}]",)
                            + tuple(mech.epsilon_bracket(args.delta, *noise).notes))
    out = {"algorithm": algorithm, "delta": rep.delta, "epsilon": rep.epsilon, "method": rep.method,
           "epsilon_lower": lower, "epsilon_upper": rep.epsilon,
           "order": rep.order, "conversion": rep.conversion,
           "noise": dict(zip(SPECS[algorithm].noise, noise)), "notes": list(rep.notes)}
    if getattr(mech, "poisson_epsilon", None) is not None:
        out["poisson_epsilon"] = mech.poisson_epsilon(args.delta, *noise)
    out["warnings"] = []
    from ..mechanisms import REGISTRY

    if REGISTRY[algorithm].warnings:
        from ..mechanisms import paper_warning

        out["warnings"].extend(paper_warning(erratum, text) for erratum, text in REGISTRY[algorithm].warnings)
    return out, (rep, lower, own)


def _curve_points(algorithm: str, args) -> tuple:
    """``(field, counts)``: the count that grows with training and the ten points of the curve."""
    field = SPECS[algorithm].rounds_field
    if getattr(args, field) is None and getattr(args, "epochs", None) is not None:
        field = "epochs"                   # shuffled batches grow by epochs
    total = getattr(args, field)
    return field, sorted({max(1, round(total * k / 10)) for k in range(1, 11)})


def _curve(algorithm: str, args, noise, points, done=lambda k: None) -> list:
    """eps at each of ``points`` (:func:`_curve_points`); ``done(k)`` after the k-th."""
    field, pts = points
    out = []
    for r in pts:
        ns = argparse.Namespace(**vars(args))
        setattr(ns, field, r)
        if hasattr(ns, "restart_interval"):
            ns.restart_interval = min(ns.restart_interval, r)
        mech, _ = build(algorithm, ns)
        # the same owner as the headline: the chosen accountant, so the last point is the headline eps
        out.append({"rounds": r, "epsilon": epsilon_of(mech.accountant(*noise), args)[0].epsilon,
                    "unit": field})
        done(len(out))
    return out


def _plot(curve, path, algorithm, delta) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(f"--plot needs matplotlib: {install_hint('plot')}") from None
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([p["rounds"] for p in curve], [p["epsilon"] for p in curve], marker="o")
    ax.set_xlabel("rounds")
    ax.set_ylabel(f"epsilon (delta = {delta:g})")
    ax.set_title(algorithm)
    fig.tight_layout()
    fig.savefig(path)
