"""``dpcalib calibrate``: the noise for a target (epsilon, delta), as a table or JSON (with the ``run`` line
of a run given by its shape, the mechanism's ``shape_note``)."""

from __future__ import annotations

import math

from .algorithms import fmt as _fmt

__all__ = ["report_dict", "print_report"]

#: the noise levels of the DIFF2 family, always present in the JSON (null with the reason where unused)
SIGMAS = ("sigma1", "sigma2", "sigma3", "sigma4")

#: an achieved eps this far above the target (relative) is marked: a paper's noise that misses it
ABOVE_TARGET_RTOL = 1e-6


def report_dict(rep, run_shape: str | None = None) -> dict:
    """A calibration as the command line's JSON: stable keys, the four sigmas always present.

    Args:
        rep: the mechanism's ``CalibrationReport``.
        run_shape: the mechanism's ``shape_note`` (joins ``notes`` as ``run_shape`` where they have none), or
            None.

    Returns:
        The dict (``algorithm``, ``method``, ``epsilon``, ``delta``, ``sigma1``..``sigma4``,
        ``noise``, the achieved, certified and bracketing eps, ``accounting``, ``warnings``,
        ``notes``).
    """
    notes = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in rep.notes.items()}
    if run_shape and not notes.get("run_shape"):
        notes["run_shape"] = run_shape
    out = {"algorithm": rep.algorithm, "method": rep.method, "epsilon": rep.epsilon, "delta": rep.delta}
    for s in SIGMAS:
        out[s] = rep.noise.get(s)
        if out[s] is None and s not in notes:
            notes[s] = (f"not a noise level of {rep.algorithm} (its noise: {', '.join(rep.noise)})"
                        if s not in rep.noise else "not needed")
    out.update({"noise": dict(rep.noise), "achieved_epsilon": rep.achieved_epsilon,
                "certified_epsilon": rep.certified_epsilon, "epsilon_lower": rep.epsilon_lower,
                "epsilon_upper": rep.epsilon_upper, "lower_bound_noise": rep.lower_bound_noise,
                "order": rep.order, "conversion": rep.conversion,
                "accounting": rep.accounting, "warnings": list(rep.warnings), "notes": notes})
    return out


def print_report(d: dict, printed: list | None = None) -> None:
    """Print a calibration (:func:`report_dict`) as the command line's table.  An achieved eps
    above the target is marked on its line, and the paper conditions that fail follow in the same
    block (``warning`` lines), beside the number they explain.

    Args:
        d: the calibration, as :func:`report_dict` returns it.
        printed: where the warnings printed are appended (the command line does not repeat them on
            stderr), or None.
    """
    from ..mechanisms import REGISTRY

    print(f"algorithm   {d['algorithm']}")
    print(f"method      {d['method']}")
    print(f"target      epsilon={_fmt(d['epsilon'])} delta={_fmt(d['delta'])}")
    if d["notes"].get("run_shape"):
        print(f"run         {d['notes']['run_shape']}")
    for name, val in d["noise"].items():
        note = "" if val is not None else f"   ({d['notes'].get(name, '')})"
        print(f"{name:11s} {_fmt(val)}{note}")
    for s in SIGMAS:
        if s not in d["noise"] and REGISTRY[d["algorithm"]].noise_notes:
            print(f"{s:11s} -   ({d['notes'].get(s, '')})")
    how = f"order {_fmt(d['order'])}, conversion {d['conversion']}; " if d["order"] is not None else ""
    above = d["achieved_epsilon"] is not None and d["achieved_epsilon"] > d["epsilon"] * (1 + ABOVE_TARGET_RTOL)
    mark = ""
    if above:
        mark = f"; ABOVE the target {_fmt(d['epsilon'])}" + ("; the warnings below say why" if d.get("warnings") else "")
    print(f"achieved    epsilon={_fmt(d['achieved_epsilon'])} ({how}{d['accounting']}{mark})")
    print(f"certified   epsilon={_fmt(d['certified_epsilon'])} (best sound accountant for this noise)")
    shuffled = "shuffle_mu" in d["notes"]
    if d.get("epsilon_lower") is not None:
        kind = ("Chua et al.'s shuffle lower bound, certified upper" if shuffled else
                "exact Gaussian DP at both ends" if d["accounting"].startswith("gdp") else
                "PLD lower bound, certified upper")
        print(f"bracket     [{_fmt(d['epsilon_lower'])}, {_fmt(d['epsilon_upper'])}] ({kind})")
    if d["notes"].get("poisson_epsilon_same_noise") is not None:
        print(f"poisson     {_fmt(d['notes']['poisson_epsilon_same_noise'])} (Poisson sampling at q = b/n for the same "
              "steps and noise: NOT valid for shuffled batches)")
    if d.get("lower_bound_noise"):
        room = ", ".join(f"{k}={_fmt(v)}" for k, v in d["lower_bound_noise"].items() if v is not None)
        print(f"floor       {room} (below this noise the lower bound already exceeds the target)")
    if d["notes"].get("versus_dp_sgd"):
        print(f"note        {d['notes']['versus_dp_sgd']}")
    for w in d.get("warnings", ()):
        print(f"warning     {w}")
        if printed is not None:
            printed.append(" ".join(str(w).split()))
