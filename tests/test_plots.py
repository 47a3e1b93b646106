"""The report's and the audit's plots read: no two pieces of text sit on each other (the attack points'
labels at FPR 0.001 and 0.01 did, on the linear panel), and the titles carry no table padding."""

import pytest

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.text import Text  # noqa: E402

from dpcalib.accountant import PoissonSampledGaussianEvent, PrivacyAccountant  # noqa: E402


def overlapping_texts(fig) -> list:
    """Pairs of drawn, non-empty text artists whose boxes intersect (a tick label outside its axis's
    view is not drawn, and not counted)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r = canvas.get_renderer()
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo <= tick.get_loc() <= hi:
                    hidden.update({id(tick.label1), id(tick.label2)})
    boxes = [(t.get_text(), t.get_window_extent(r)) for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and id(t) not in hidden]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]


def test_the_report_plot_has_no_overlapping_text():
    import matplotlib.pyplot as plt

    acc = PrivacyAccountant()
    acc.compose(PoissonSampledGaussianEvent(0.01, 1.0), count=1000)
    fig = acc.report(1e-5).figure("dp-sgd (noise_multiplier=1): epsilon 1.2 at delta 1e-05")
    try:
        assert overlapping_texts(fig) == []
        labels = [t.get_text() for t in fig.findobj(Text)]
        assert sum(s.startswith("FPR ") for s in labels) == 3          # each attack point named once
    finally:
        plt.close(fig)


def test_the_overlap_check_sees_overlapping_labels():
    """The check has power: two annotations at FPR 0.001 and 0.01 on a linear axis overlap."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.set_xlim(0, 1)
    for x in (0.001, 0.01):
        ax.annotate(f"FPR {x:g}: TPR <= 0.1", (x, 0.5), textcoords="offset points", xytext=(6, 4), fontsize=7)
    try:
        assert overlapping_texts(fig)
    finally:
        plt.close(fig)


def test_the_cli_report_title_has_no_table_padding(tmp_path, monkeypatch):
    from dpcalib.accountant import report as R
    from dpcalib.cli import main

    titles = []
    monkeypatch.setattr(R.PrivacyReport, "plot", lambda self, path, title="": titles.append(title))
    rc = main(["report", "dp-sgd", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "100",
               "--noise-multiplier", "1.0", "--plot", str(tmp_path / "r.png")])
    assert rc == 0 and titles and "  " not in titles[0] and titles[0].startswith("dp-sgd (noise_multiplier=1)")


def test_the_audit_plot_has_no_overlapping_text(tmp_path, monkeypatch, capsys):
    import matplotlib.pyplot as plt

    from dpcalib.cli import main
    from dpcalib.optim.audit import figures

    figs = []
    make = figures.audit_figure
    monkeypatch.setattr(figures, "audit_figure", lambda rep: figs.append(make(rep)) or figs[-1])
    rc = main(["audit", "dp-gd", "--epsilon", "2", "--delta", "1e-5", "--rounds", "2", "--clients", "2",
               "--n-min", "3", "--runs", "200", "--seed", "0", "--no-progress", "--plot", str(tmp_path / "a.png")])
    capsys.readouterr()
    assert rc == 0 and len(figs) == 1
    try:
        assert overlapping_texts(figs[0]) == []
    finally:
        plt.close(figs[0])
