"""Where long accounting work is (accountant.progress.watching) and the command line's bars on it:
the work is told grid by grid, the answers are the same watched or not, and a bar shows on a
terminal only (stdout unchanged)."""

from __future__ import annotations

import io
import sys

import pytest

from dpcalib.accountant import PoissonSampledGaussianEvent, PrivacyAccountant, clear_cache, watching
from dpcalib.accountant.progress import tell


def _acc(steps=1000):
    return PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), steps)


def test_a_bracket_tells_each_grid_it_composes_and_is_the_same_watched_or_not():
    clear_cache()
    plain = _acc().epsilon_bracket(1e-6)
    clear_cache()
    told = []
    with watching(told.append):
        watched = _acc().epsilon_bracket(1e-6)
    assert watched == plain
    grids = [float(p.rsplit(" ", 1)[1]) for p in told]
    assert told and all(p.startswith(("upper end on grid ", "lower end on grid ")) for p in told)
    # the refinement goes from coarse to fine and ends on the bracket's grid, both ends composed there
    assert grids == sorted(grids, reverse=True)
    assert {f"upper end on grid {watched.discretization:.3g}", f"lower end on grid {watched.discretization:.3g}"} <= set(told)
    # a remembered bracket composes nothing: nothing is told
    again = []
    with watching(again.append):
        assert _acc().epsilon_bracket(1e-6) == plain
    assert again == []


def test_watchers_nest_and_end_with_their_block():
    outer, inner = [], []
    with watching(outer.append):
        tell("a")
        with watching(inner.append):
            tell("b")
        tell("c")
    tell("d")                                 # nobody watches: nothing told, nothing raised
    assert outer == ["a", "b", "c"] and inner == ["b"]


def test_a_watcher_that_is_not_callable_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"watcher=3 is not allowed: expected a callable"):
        with watching(3):
            pass


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("argv,desc", [
    (["epsilon", "dp-sgd", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "100", "--noise-multiplier", "1.0",
      "--curve"], "epsilon dp-sgd"),
    (["account", "--poisson", "0.01:1.0:100", "--delta", "1e-5"], "account"),
])
def test_cli_shows_a_bar_on_a_terminal_and_none_when_piped_with_the_same_answer(monkeypatch, capsys, argv, desc):
    from dpcalib.cli import main
    from dpcalib.commands import common

    monkeypatch.setattr(common, "PROGRESS_DELAY", 0.0)
    clear_cache()
    assert main(argv) == 0                                      # piped (pytest's capture): no bar
    piped = capsys.readouterr()
    assert "parts" not in piped.err and "epsilon" in piped.out
    clear_cache()                                               # (the grids composed again: told again)
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main(argv) == 0
    shown = capsys.readouterr()
    bar = term.getvalue()
    assert desc in bar and "end on grid" in bar
    if "--curve" in argv:
        assert "curve at 10 steps" in bar and "11/11" in bar    # the headline, then ten points
    assert shown.out == piped.out                               # the same answer on stdout
