"""Scores in, eps lower bound out: the audits' statistics for anyone's scores.

A user who audits their own training black-box -- canaries inserted or not, a membership score per
run or per canary -- needs only the statistics.  :func:`epsilon_from_scores` turns the scores of
runs on two neighbouring datasets into lower bounds on eps at a delta, holding with the stated
confidence (Clopper-Pearson intervals on the two error rates, Bonferroni over the two):

* ``statistic="llr"`` with a ``claimed_epsilon``: the scores are log-likelihood ratios of a
  mechanism claimed ``mu``-GDP (``mu = gdp_mu(claimed_epsilon, delta)``); the thresholds are
  fixed from the claim before the scores are looked at (:func:`.bounds.epsilon_lower_bounds`:
  the direct bound and the GDP bound) -- what ``dpcalib audit``'s many-run audits do;
* ``statistic="any"``: any score; the threshold is chosen on a random half and the rates measured
  on the other (:func:`.bounds.heldout_lower_bound`) -- what the Poisson and without-replacement
  audits do.

:func:`epsilon_from_guesses` is the one-run audit's bound (Steinke, Nasr & Jagielski 2023, Thm 3):
``m`` canaries, ``r`` guesses, ``v`` of them right.  Every audit report of :mod:`.drivers` keeps the
scores it measured (``report.scores``), and these functions give its numbers back from them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...accountant import gdp_mu
from ...accountant.validation import InputError
from .bounds import CONFIDENCE, audit_power, epsilon_lower_bounds, heldout_lower_bound, one_run_epsilon

__all__ = []

STATISTICS = ("llr", "any")


@dataclass(frozen=True)
class ScoresAudit:
    """Lower bounds on eps from scores (:func:`epsilon_from_scores`).

    ``verdict`` compares ``epsilon_lo`` with the claim; ``max_epsilon_lo`` is the largest bound any
    outcome of this many runs could give (the audit's power).

    Attributes:
        epsilon_lo: the larger of the direct bound and (for a GDP claim) the GDP bound, >= 0.
        epsilon_lo_direct: the direct bound from the two error rates.
        epsilon_lo_gdp: the GDP bound (0.0 for ``statistic="any"``).
        mu_lo: the lower bound on the GDP mu (0.0 for ``statistic="any"``).
        statistic: ``"llr"`` or ``"any"``.
        delta: the delta of the bounds, in (0, 1).
        confidence: the confidence of the bounds, in (0, 1).
        runs_in: the number of scores with the canary.
        runs_out: the number of scores without it.
        fpr: the false-positive rate at the threshold.
        fnr: the false-negative rate at the threshold.
        threshold: the score threshold of the direct bound.
        claimed_epsilon: the claimed eps, >= 0, or None.
        max_epsilon_lo: the largest bound this many runs could give.
        seed: the seed of the releases scored, where the caller drew them (:func:`~.steps.audit_step`), or None.
    """

    epsilon_lo: float
    epsilon_lo_direct: float
    epsilon_lo_gdp: float
    mu_lo: float
    statistic: str
    delta: float
    confidence: float
    runs_in: int
    runs_out: int
    fpr: float
    fnr: float
    threshold: float
    claimed_epsilon: float | None
    max_epsilon_lo: float
    seed: int | None = None

    @property
    def verdict(self) -> str | None:
        """``"violation"`` when ``epsilon_lo`` exceeds the claim, ``"consistent"`` when the audit could have
        exceeded it but did not, ``"inconclusive"`` when it could not have; None without a claim.
        """
        if self.claimed_epsilon is None:
            return None
        if self.epsilon_lo > self.claimed_epsilon + 1e-9:
            return "violation"
        return "consistent" if self.max_epsilon_lo > self.claimed_epsilon else "inconclusive"

    def text(self) -> str:
        """The bound, the verdict and the error rates in one line.

        Returns:
            The line.
        """
        claim = "" if self.claimed_epsilon is None else f" (claimed {self.claimed_epsilon:.6g}: {self.verdict})"
        return (f"eps >= {self.epsilon_lo:.6g} at delta = {self.delta:g} with {self.confidence:.0%} confidence{claim}; "
                f"{self.runs_in} + {self.runs_out} runs, {self.statistic} scores, FPR {self.fpr:.4g}, FNR {self.fnr:.4g}")


def _floats(values, name: str) -> list:
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        raise InputError(f"{name} is not allowed: expected a sequence of numbers.") from None
    if not out:
        raise InputError(f"{name} is not allowed: it is empty (expected at least one score).")
    if any(math.isnan(v) for v in out):
        raise InputError(f"{name} is not allowed: it holds NaN.")
    return out


def epsilon_from_scores(in_scores, out_scores, *, delta: float, confidence: float = CONFIDENCE,
                        claimed_epsilon: float | None = None, statistic: str = "any") -> ScoresAudit:
    """Lower bounds on eps at ``delta`` from the scores of runs on the dataset with the canary
    (``in_scores``: a larger score says "in") and without it (``out_scores``); see the module text.

    Args:
        in_scores: the scores of the runs with the canary (numbers, none NaN, at least one).
        out_scores: the scores of the runs without it (numbers, none NaN, at least one).
        delta: the delta of the bounds, in (0, 1).
        confidence: the confidence of the bounds, in (0, 1).
        claimed_epsilon: the claimed eps, >= 0 (required for ``statistic="llr"``), or None.
        statistic: ``"llr"`` (log-likelihood ratios of a GDP claim) or ``"any"`` (any score; at
            least two runs per dataset).

    Returns:
        A :class:`ScoresAudit`.

    Raises:
        InputError: if ``delta`` or ``confidence`` is outside (0, 1), ``statistic`` is unknown, the
            scores are not numbers, empty or hold NaN, ``claimed_epsilon`` is negative (or missing
            with ``"llr"``), or ``"any"`` has fewer than two runs per dataset.
    """
    from ...accountant.validation import delta as check_delta

    d = check_delta(delta)
    if not 0.0 < float(confidence) < 1.0:
        raise InputError(f"confidence={confidence!r} is not allowed: expected a number in (0, 1).")
    if statistic not in STATISTICS:
        raise InputError(f"statistic={statistic!r} is not allowed: expected one of {', '.join(STATISTICS)}.")
    s_in, s_out = _floats(in_scores, "in_scores"), _floats(out_scores, "out_scores")
    claim = None
    if claimed_epsilon is not None:
        claim = float(claimed_epsilon)
        if not claim >= 0.0:
            raise InputError(f"claimed_epsilon={claimed_epsilon!r} is not allowed: expected a number >= 0.")
    if statistic == "llr":
        if claim is None:
            raise InputError("claimed_epsilon is required with statistic='llr': the thresholds come from the claim.")
        b = epsilon_lower_bounds(s_in, s_out, d, gdp_mu(claim, d) if claim > 0 else 0.0, confidence)
        top = audit_power(min(len(s_in), len(s_out)), d, True, confidence)
        return ScoresAudit(max(b["direct"], b["gdp"]), b["direct"], b["gdp"], b["mu_lo"], statistic, d,
                           float(confidence), len(s_in), len(s_out), b["fpr_direct"], b["fnr_direct"],
                           b["threshold_direct"], claim, top)
    if min(len(s_in), len(s_out)) < 2:
        raise InputError("scores are not allowed: statistic='any' needs at least two runs per dataset (a half to "
                         "choose the threshold, a half to measure).")
    b = heldout_lower_bound(s_in, s_out, d, confidence)
    n = min(len(s_in), len(s_out))
    top = audit_power(n - n // 2, d, False, confidence)
    return ScoresAudit(b["direct"], b["direct"], 0.0, 0.0, statistic, d, float(confidence), len(s_in), len(s_out),
                       b["fpr"], b["fnr"], b["threshold"], claim, top)


def epsilon_from_guesses(canaries: int, guesses: int, correct: int, *, delta: float, confidence: float = CONFIDENCE) -> float:
    """The one-run bound (Steinke, Nasr & Jagielski 2023, Thm 3): ``canaries`` canaries each in or
    out with probability 1/2, ``guesses`` of them guessed, ``correct`` right -> eps >= this with
    probability >= ``confidence``.

    Args:
        canaries: the number of canaries m, an integer >= 1.
        guesses: the number of guesses r, an integer in [0, m].
        correct: the number of right guesses v, an integer in [0, r].
        delta: the delta of the bound, in (0, 1).
        confidence: the probability the bound holds with, in (0, 1).

    Returns:
        The lower bound on eps, >= 0.

    Raises:
        InputError: if a count is not an integer >= 0 or not ``0 <= correct <= guesses <= canaries``
            with ``canaries >= 1``.
    """
    for name, v in (("canaries", canaries), ("guesses", guesses), ("correct", correct)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InputError(f"{name}={v!r} is not allowed: expected an integer >= 0.")
    if not correct <= guesses <= canaries or canaries < 1:
        raise InputError(f"correct={correct}, guesses={guesses}, canaries={canaries} are not allowed: expected "
                         "0 <= correct <= guesses <= canaries and canaries >= 1.")
    return one_run_epsilon(canaries, guesses, correct, delta, confidence)
