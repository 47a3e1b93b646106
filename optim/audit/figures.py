"""The audit's figure: the claimed trade-off curve, the measured (FPR, FNR) points of an audit and their
simultaneous confidence regions (matplotlib, imported where a figure is drawn: ``pip install '.[plot]'``).
"""

from __future__ import annotations

from ...accountant.validation import InputError
from .bounds import AuditReport

__all__ = []


def plot_audit(report: AuditReport, path) -> None:
    """Draw the claimed trade-off curve, the measured (FPR, FNR) points and their simultaneous
    confidence regions to ``path`` (needs matplotlib: ``pip install '.[plot]'`` from the repository's root).

    Args:
        report: an :class:`~dpcalib.optim.audit.bounds.AuditReport` with a curve check.
        path: the image file to write (str or path-like; its suffix picks the format).

    Raises:
        InputError: as :func:`audit_figure`.
    """
    fig = audit_figure(report)
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=120)
    plt.close(fig)


def audit_figure(report: AuditReport):
    """:func:`plot_audit`'s figure (a ``matplotlib.figure.Figure``; close it when done).

    Args:
        report: an :class:`~dpcalib.optim.audit.bounds.AuditReport` with a curve check.

    Returns:
        The figure: the claimed curve with the measured regions, and each region's gap to the curve.

    Raises:
        InputError: if the report has no trade-off measurements (``curve`` None), or matplotlib is not installed.
    """
    import numpy as np

    if report.curve is None:
        raise InputError("report is not allowed: it carries no trade-off measurements (curve=None).")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError as exc:
        raise InputError(f"plot is not available: matplotlib is not installed ({exc}); "
                         "pip install '.[plot]' from the repository's root") from None
    c = report.curve
    alpha = np.linspace(0.0, 1.0, 401)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.0, 4.6))
    ax.plot(alpha, 1.0 - alpha, color="0.75", lw=1, ls=":", label="perfect privacy (1 - FPR)")
    ax.plot(alpha, c.curve(alpha), color="C0", lw=2, label=f"claimed: {c.curve.label()}")
    for a, b, alo, ahi, blo, bhi, w in zip(c.fpr, c.fnr, c.fpr_lo, c.fpr_hi, c.fnr_lo, c.fnr_hi, c.below):
        col = "C3" if w else "C2"
        ax.add_patch(Rectangle((alo, blo), ahi - alo, bhi - blo, facecolor=col, alpha=0.25, edgecolor=col))
        ax.plot([a], [b], "o", color=col, ms=4)
    ax.plot([], [], "s", color="C2", alpha=0.5, label=f"measured, {c.confidence:.0%} simultaneous regions")
    if c.violation:
        ax.plot([], [], "s", color="C3", alpha=0.5, label="region entirely below the claim")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("FPR (type I: say D when D' is true)")
    ax.set_ylabel("FNR (type II: say D' when D is true)")
    ax.legend(loc="upper right", fontsize=7)
    # the vertical gap to the claim over each region: [b_lo - f(a_lo), b_hi - f(a_hi)] (f non-increasing)
    fa = np.asarray(c.fpr)
    gap = np.asarray(c.fnr) - c.curve(fa)
    lo = np.asarray(c.fnr_lo) - c.curve(np.asarray(c.fpr_lo))
    hi = np.asarray(c.fnr_hi) - c.curve(np.asarray(c.fpr_hi))
    cols = ["C3" if w else "C2" for w in c.below]
    for x, g, l, h, col in zip(fa, gap, lo, hi, cols):
        bx.errorbar([x], [g], yerr=[[g - l], [h - g]], fmt="o", color=col, capsize=4)
    bx.axhline(0.0, color="C0", lw=2, label="claimed curve")
    bx.set_xlabel("FPR")
    bx.set_ylabel("FNR - claimed f(FPR)  (region's range)")
    bx.set_title("below 0 everywhere in a region: violation", fontsize=8)
    bx.legend(loc="best", fontsize=7)
    fig.suptitle(f"{report.algorithm}: claimed eps={report.claimed_epsilon:g}, delta={report.delta:g}, "
                 f"{c.runs[0]} runs/dataset -- verdict: {report.verdict}", fontsize=9)
    fig.tight_layout()
    return fig
