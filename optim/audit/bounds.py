"""The statistics of the audits: lower bounds on epsilon from measured error rates (Clopper-Pearson
intervals; direct and GDP bounds), the claimed trade-off curve against measured (FPR, FNR)
regions, held-out thresholds, and the one-run bound of Steinke, Nasr & Jagielski (2023, Thm 3).
Pure statistics: no optimizer is run here (drivers: :mod:`optim.audit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...accountant.validation import InputError
from ...accountant import TradeOffCurve, gdp_epsilon


def _stats():
    """scipy.stats, imported on first use (~0.6 s that every import of dpcalib.optim paid)."""
    from scipy import stats

    return stats


__all__ = []

#: the confidence of every audit's bounds unless told otherwise (many-run, without replacement, one-run, a step's,
#: anyone's scores)
CONFIDENCE = 0.95


# ---- epsilon lower bounds ----------------------------------------------------------------------
def _cp_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound on a binomial rate at confidence 1 - alpha."""
    return 1.0 if k >= n else float(_stats().beta.ppf(1.0 - alpha, k + 1, n - k))


def _direct(fpr_hi, fnr_hi, delta):
    best = 0.0
    for a, b in ((fnr_hi, fpr_hi), (fpr_hi, fnr_hi)):
        num = 1.0 - delta - a
        if num > 0 and b < 1.0:
            best = max(best, math.log(num / b) if b > 0 else math.inf)
    return best


def _gdp_from_rates(fpr_hi, fnr_hi, delta):
    norm = _stats().norm
    mu = float(norm.isf(fpr_hi) - norm.ppf(fnr_hi))
    return (0.0, 0.0) if not mu > 0 else (mu, gdp_epsilon(mu, delta) if math.isfinite(mu) else math.inf)


def _expected_direct(t, mu, n, delta, alpha):
    """The direct bound a correct mechanism would give at threshold t (T-units), for choosing t."""
    norm = _stats().norm
    fpr, fnr = float(norm.sf(t)), float(norm.cdf(t - mu))
    return _direct(_cp_upper(int(round(fpr * n)), n, alpha), _cp_upper(int(round(fnr * n)), n, alpha), delta)


def epsilon_lower_bounds(s_d, s_dprime, delta: float, mu_claimed: float, confidence: float = CONFIDENCE) -> dict:
    """95 %-confidence lower bounds on eps from LLR samples under D (``s_d``) and D' (``s_dprime``).

    Statistics are standardised with the claimed mu, ``T = S/mu + mu/2`` (N(mu, 1) vs N(0, 1) for
    a full-batch Gaussian mechanism).  Thresholds, fixed from ``mu_claimed`` and N before the
    samples are looked at: ``mu/2`` for the GDP bound, the maximiser of the expected direct bound
    for the direct bound.  Each bound uses two one-sided Clopper-Pearson intervals at
    ``1 - (1 - confidence)/2`` (Bonferroni), so it holds with probability >= ``confidence``.

    Args:
        s_d: LLR samples from runs on D, at least one.
        s_dprime: LLR samples from runs on D', at least one.
        delta: the delta of the bounds, in (0, 1).
        mu_claimed: the claimed GDP mu, >= 0 (0: the samples are used unstandardised, threshold 0).
        confidence: the confidence of each bound, in (0, 1).

    Returns:
        A dict: ``direct``, ``gdp`` (eps lower bounds), ``mu_lo``, ``threshold_direct``,
        ``threshold_gdp`` and the measured rates ``fpr_direct``, ``fnr_direct``, ``fpr_gdp``, ``fnr_gdp``.

    Raises:
        InputError: if either sample is empty.
    """
    n0, n1 = len(s_d), len(s_dprime)
    if min(n0, n1) < 1:
        raise InputError("samples are not allowed: expected at least one run per dataset.")
    alpha = (1.0 - confidence) / 2.0
    mu = float(mu_claimed)
    std = (lambda s: s / mu + mu / 2.0) if mu > 0 else (lambda s: s)  # noqa: E731
    t_d = [std(s) for s in s_d]
    t_p = [std(s) for s in s_dprime]

    def rates(t):
        fnr = sum(1 for v in t_d if not v >= t)
        fpr = sum(1 for v in t_p if v >= t)
        return fpr, fnr

    n = min(n0, n1)
    grid = [mu / 2.0 + 0.05 * i for i in range(-80, 121)] if mu > 0 else [0.0]
    t_direct = max(grid, key=lambda t: _expected_direct(t, mu, n, delta, alpha)) if mu > 0 else 0.0
    fpr, fnr = rates(t_direct)
    direct = _direct(_cp_upper(fpr, n1, alpha), _cp_upper(fnr, n0, alpha), delta)
    t_gdp = mu / 2.0
    fpr_g, fnr_g = rates(t_gdp)
    mu_lo, eps_gdp = _gdp_from_rates(_cp_upper(fpr_g, n1, alpha), _cp_upper(fnr_g, n0, alpha), delta)
    return {"direct": direct, "gdp": eps_gdp, "mu_lo": mu_lo, "threshold_direct": t_direct,
            "threshold_gdp": t_gdp, "fpr_direct": fpr / n1, "fnr_direct": fnr / n0,
            "fpr_gdp": fpr_g / n1, "fnr_gdp": fnr_g / n0}


def audit_power(runs: int, delta: float, gdp: bool, confidence: float = CONFIDENCE) -> float:
    """The largest eps lower bound ``runs`` runs per dataset can give (perfectly separated scores):
    the direct bound, and the GDP bound where the claim is GDP.

    Args:
        runs: runs per dataset, >= 1.
        delta: the delta of the bounds, in (0, 1).
        gdp: whether the GDP bound counts too (the claim is GDP).
        confidence: the confidence of the bounds, in (0, 1).

    Returns:
        The largest attainable eps lower bound, >= 0.
    """
    alpha = (1.0 - confidence) / 2.0                # two one-sided intervals (Bonferroni)
    b = _cp_upper(0, runs, alpha)
    best = _direct(b, b, delta)
    if gdp:
        best = max(best, _gdp_from_rates(b, b, delta)[1])
    return best


@dataclass(frozen=True)
class AuditReport:
    """The result of a many-run audit: eps lower bounds (and optionally a trade-off curve check) against a claim.

    Attributes:
        algorithm: the audited algorithm's name.
        claimed_epsilon: the claimed eps at ``delta``, >= 0.
        delta: the delta of the claim and the bounds, in (0, 1).
        runs: runs per dataset.
        epsilon_lo_direct: the direct eps lower bound.
        epsilon_lo_gdp: the GDP eps lower bound.
        mu_claimed: the claimed GDP mu.
        mu_lo: the lower bound on mu.
        gdp_exact: is the claim a full-batch Gaussian composition (its trade-off curve exactly GDP)?
        details: further entries of :meth:`as_dict`.
        curve: the :class:`CurveCheck` of measured (FPR, FNR) regions, or None.
        measured_runs: runs per dataset the eps bounds were measured on (a half for the held-out
            audits), or None for ``runs``.
        scores: ``(scores under D, scores under D')`` the bounds came from, or None.
        seed: the seed of the audit's first run (passed back as ``seed=``, it repeats the audit), or
            None for a report built from someone's scores.
    """
    algorithm: str
    claimed_epsilon: float
    delta: float
    runs: int
    epsilon_lo_direct: float
    epsilon_lo_gdp: float
    mu_claimed: float
    mu_lo: float
    gdp_exact: bool        # the claim is a full-batch Gaussian composition (its trade-off curve is GDP)
    details: dict = field(default_factory=dict)
    curve: "CurveCheck | None" = None   # measured (FPR, FNR) regions against the claimed trade-off curve

    #: runs per dataset the eps bounds were measured on (the held-out audits measure on a half)
    measured_runs: int | None = None
    #: ``(scores under D, scores under D')`` the bounds were computed from (not in :meth:`as_dict`):
    #: :func:`dpcalib.optim.audit.scores.epsilon_from_scores` gives the same bounds back from them
    scores: tuple | None = field(default=None, repr=False, compare=False)
    #: the seed of the first run: ``seed=report.seed`` repeats the audit (None: not a seeded audit's report)
    seed: int | None = None

    @property
    def verdict(self) -> str:
        """"violation" when a lower bound exceeds the claimed eps (the GDP bound counts only when the
        claim is exactly GDP), or a measured (FPR, FNR) region lies entirely below the claimed
        trade-off curve; "inconclusive" when no outcome of this many runs could have shown a
        violation (:attr:`max_epsilon_lo` at most the claim, and no region could fall below the
        curve); else "consistent"."""
        if self.epsilon_verdict == "violation" or (self.curve is not None and self.curve.violation):
            return "violation"
        return "consistent" if self.detectable else "inconclusive"

    @property
    def max_epsilon_lo(self) -> float:
        """The largest eps lower bound any outcome of these runs can give (perfectly separated
        samples): the audit's power.  A claim at or above it cannot be refuted by the eps bounds."""
        return audit_power(self.measured_runs or self.runs, self.delta, self.gdp_exact)

    @property
    def detectable(self) -> bool:
        """Could some outcome of this many runs have shown a violation of the claim?"""
        if self.max_epsilon_lo > self.claimed_epsilon + 1e-9:
            return True
        c = self.curve
        if c is None or not c.thresholds:
            return False
        # a perfectly separated outcome at one threshold: both rates 0, regions [0, b]
        alpha = (1.0 - c.confidence) / (2.0 * len(c.thresholds))
        b = _cp_upper(0, min(c.runs), alpha)
        return bool(b < float(c.curve(b)))

    @property
    def epsilon_verdict(self) -> str:
        """The verdict of the eps lower bounds alone (without the trade-off curve)."""
        tol = 1e-9
        bad = self.epsilon_lo_direct > self.claimed_epsilon + tol or (
            self.gdp_exact and self.epsilon_lo_gdp > self.claimed_epsilon + tol)
        return "violation" if bad else "consistent"

    def as_dict(self) -> dict:
        """The report as plain data (the scores left out).

        Returns:
            A dict of the claim, the bounds, ``verdict``, ``max_epsilon_lo``, the ``details``, with a
            curve check ``curve``, and with a seed ``seed``.
        """
        out = {"algorithm": self.algorithm, "claimed_epsilon": self.claimed_epsilon, "delta": self.delta,
               "runs_per_dataset": self.runs, "epsilon_lo_direct": self.epsilon_lo_direct,
               "epsilon_lo_gdp": self.epsilon_lo_gdp, "mu_claimed": self.mu_claimed, "mu_lo": self.mu_lo,
               "verdict": self.verdict, "max_epsilon_lo": self.max_epsilon_lo, **self.details}
        if self.curve is not None:
            out["curve"] = self.curve.as_dict()
        if self.seed is not None:
            out["seed"] = self.seed
        return out


# ---- the claimed trade-off curve against measured (FPR, FNR) regions -------------------------------
def _cp_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound on a binomial rate at confidence 1 - alpha."""
    return 0.0 if k <= 0 else float(_stats().beta.ppf(alpha, k, n - k + 1))


@dataclass(frozen=True)
class CurveCheck:
    """Measured (FPR, FNR) of the tests "say D when S >= t" at fixed thresholds t, with
    Clopper-Pearson regions that hold simultaneously at ``confidence`` (Bonferroni over the
    thresholds and both rates), against the claimed trade-off curve ``f``.

    A region lies entirely below ``f`` when its upper-right corner does (``f`` is non-increasing):
    ``FNR_hi < f(FPR_hi)`` (or the same with the roles of D and D' exchanged).  Then no mechanism
    with the claimed curve produces these rates, at the stated confidence: ``violation``.

    Attributes:
        curve: the claimed :class:`~dpcalib.accountant.TradeOffCurve` f.
        thresholds: the thresholds t.
        fpr: the measured FPR at each threshold.
        fnr: the measured FNR at each threshold.
        fpr_lo: the lower end of each FPR region.
        fpr_hi: the upper end of each FPR region.
        fnr_lo: the lower end of each FNR region.
        fnr_hi: the upper end of each FNR region.
        claimed_fnr: ``f(FPR_hi)`` at each threshold.
        below: whether each region lies entirely below f.
        confidence: the simultaneous confidence of the regions, in (0, 1).
        runs: ``(runs under D, runs under D')`` the rates were measured on.
    """

    curve: TradeOffCurve
    thresholds: tuple
    fpr: tuple
    fnr: tuple
    fpr_lo: tuple
    fpr_hi: tuple
    fnr_lo: tuple
    fnr_hi: tuple
    claimed_fnr: tuple        # f(FPR_hi)
    below: tuple
    confidence: float
    runs: tuple               # (runs under D, runs under D') the rates were measured on

    @property
    def violation(self) -> bool:
        """Does some region lie entirely below the claimed curve?"""
        return any(self.below)

    def as_dict(self) -> dict:
        """The check as plain data.

        Returns:
            A dict: ``claimed_curve`` (its label), ``confidence``, ``violation`` and ``points``
            (one dict per threshold).
        """
        return {"claimed_curve": self.curve.label(), "confidence": self.confidence, "violation": self.violation,
                "points": [{"threshold": t, "fpr": a, "fnr": b, "fpr_hi": ah, "fnr_hi": bh, "claimed_fnr_at_fpr_hi": c,
                            "below": w}
                           for t, a, b, ah, bh, c, w in zip(self.thresholds, self.fpr, self.fnr, self.fpr_hi,
                                                             self.fnr_hi, self.claimed_fnr, self.below)]}


def gdp_thresholds(mu: float) -> list:
    """The curve check's thresholds for the LLR of a claimed ``mu``-GDP pair, fixed before looking:
    ``S = k mu`` for k in {-1, -1/2, 0, 1/2, 1} (the standardised ``T = S/mu + mu/2`` at ``mu/2 + k``).

    Args:
        mu: the claimed GDP mu, >= 0.

    Returns:
        The five thresholds, a list of floats.
    """
    return [k * mu for k in (-1.0, -0.5, 0.0, 0.5, 1.0)]


def curve_check(s_d, s_dprime, curve: TradeOffCurve, thresholds, confidence: float = CONFIDENCE) -> CurveCheck:
    """Compare the measured trade-off of the statistic (samples under D and D') with ``curve`` at
    ``thresholds`` fixed before the samples were looked at (see :class:`CurveCheck`).

    Args:
        s_d: the statistic's samples from runs on D (the dataset with the canary; larger says D).
        s_dprime: the statistic's samples from runs on D'.
        curve: the claimed :class:`~dpcalib.accountant.TradeOffCurve`.
        thresholds: the thresholds, at least one, all finite.
        confidence: the simultaneous confidence of the regions, in (0, 1).

    Returns:
        A :class:`CurveCheck`.

    Raises:
        InputError: if there is no threshold or one is not finite, ``confidence`` is outside (0, 1),
            or either sample is empty.
    """
    import numpy as np

    ts = [float(t) for t in thresholds]
    if not ts or not all(math.isfinite(t) for t in ts):
        raise InputError(f"thresholds={thresholds!r} is not allowed: expected at least one finite number.")
    if not 0.0 < confidence < 1.0:
        raise InputError(f"confidence={confidence!r} is not allowed: expected a number in (0, 1).")
    xd, xp = np.asarray(s_d, dtype=float), np.asarray(s_dprime, dtype=float)
    n0, n1 = xd.size, xp.size
    if min(n0, n1) < 1:
        raise InputError("samples are not allowed: expected at least one run per dataset.")
    a = (1.0 - confidence) / (2.0 * len(ts))
    rows = []
    for t in ts:
        k_p = int(np.sum(xp >= t))            # D' true, test says D: type I error (FPR)
        k_d = int(np.sum(~(xd >= t)))         # D true, test says D': type II error (FNR)
        fpr_hi, fnr_hi = _cp_upper(k_p, n1, a), _cp_upper(k_d, n0, a)
        f_at = float(curve(fpr_hi))
        below = fnr_hi < f_at or fpr_hi < float(curve(fnr_hi))
        rows.append((t, k_p / n1, k_d / n0, _cp_lower(k_p, n1, a), fpr_hi, _cp_lower(k_d, n0, a), fnr_hi, f_at,
                     bool(below)))
    cols = list(zip(*rows))
    return CurveCheck(curve, *cols, confidence=float(confidence), runs=(n0, n1))


def heldout_lower_bound(s_d, s_dprime, delta: float, confidence: float = CONFIDENCE) -> dict:
    """Direct eps lower bound with the threshold chosen on a held-out half of the runs: the first
    half picks the threshold (the best direct bound there, among the first half's values), the
    second half is evaluated at it with Clopper-Pearson (valid for ANY statistic).

    Args:
        s_d: the statistic's samples from runs on D (the dataset with the canary; larger says D).
        s_dprime: the statistic's samples from runs on D'.
        delta: the delta of the bound, in (0, 1).
        confidence: the confidence of the bound, in (0, 1).

    Returns:
        A dict: ``direct`` (the eps lower bound), ``threshold``, and the second half's ``fpr`` and ``fnr``.

    Raises:
        InputError: if either sample has fewer than two runs.
    """
    h0, h1 = len(s_d) // 2, len(s_dprime) // 2
    if min(h0, h1) < 1:
        raise InputError("samples are not allowed: expected at least two runs per dataset.")
    alpha = (1.0 - confidence) / 2.0
    a_d, a_p, b_d, b_p = s_d[:h0], s_dprime[:h1], s_d[h0:], s_dprime[h1:]
    cands = sorted(set(v for v in a_d + a_p if math.isfinite(v))) or [0.0]

    def bound(t, xs_d, xs_p):
        fnr = sum(1 for v in xs_d if not v >= t)
        fpr = sum(1 for v in xs_p if v >= t)
        return _direct(_cp_upper(fpr, len(xs_p), alpha), _cp_upper(fnr, len(xs_d), alpha), delta), fpr, fnr

    t = max(cands, key=lambda c: bound(c, a_d, a_p)[0])
    eps, fpr, fnr = bound(t, b_d, b_p)
    return {"direct": eps, "threshold": t, "fpr": fpr / len(b_p), "fnr": fnr / len(b_d)}


def heldout_curve_check(s_d, s_dprime, curve: TradeOffCurve, confidence: float = CONFIDENCE,
                        quantiles=(0.1, 0.3, 0.5, 0.7, 0.9)) -> CurveCheck:
    """:func:`curve_check` with thresholds at ``quantiles`` of the first half of the runs (pooled,
    finite values), evaluated on the second half -- for statistics whose law is not known ahead.

    Args:
        s_d: the statistic's samples from runs on D (the dataset with the canary; larger says D).
        s_dprime: the statistic's samples from runs on D'.
        curve: the claimed :class:`~dpcalib.accountant.TradeOffCurve`.
        confidence: the simultaneous confidence of the regions, in (0, 1).
        quantiles: the quantiles of the first half that give the thresholds, each in [0, 1].

    Returns:
        A :class:`CurveCheck` on the second half.

    Raises:
        InputError: if either sample has fewer than two runs, or as :func:`curve_check`.
    """
    import numpy as np

    h0, h1 = len(s_d) // 2, len(s_dprime) // 2
    if min(h0, h1) < 1:
        raise InputError("samples are not allowed: expected at least two runs per dataset.")
    first = np.asarray(list(s_d[:h0]) + list(s_dprime[:h1]), dtype=float)
    first = first[np.isfinite(first)]
    ts = sorted(set(np.quantile(first, quantiles).tolist())) if first.size else [0.0]
    return curve_check(list(s_d[h0:]), list(s_dprime[h1:]), curve, ts, confidence)



def one_run_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """P[at least ``v`` of ``r`` guesses correct] for an (eps, delta)-DP mechanism whose ``m``
    canaries are each included with probability 1/2 (Steinke, Nasr & Jagielski 2023, Thm 3 with
    delta > 0, as in their Algorithm 2): ``P[Bin(r, p) >= v] + 2 m delta max_i P[v > Bin(r, p) >= v - i] / i``,
    ``p = e^eps / (1 + e^eps)``.

    Args:
        m: the number of canaries.
        r: the number of guesses, in [0, m].
        v: the number of right guesses, in [0, r].
        eps: the eps tested, >= 0.
        delta: the delta tested, in [0, 1].

    Returns:
        The p-value, in [0, 1].

    Raises:
        InputError: if not ``0 <= v <= r <= m``, eps is negative, or delta is outside [0, 1].
    """
    if not (0 <= v <= r <= m) or eps < 0 or not 0 <= delta <= 1:
        raise InputError(f"(m, r, v, eps, delta)={(m, r, v, eps, delta)!r} is not allowed: expected "
                         "0 <= v <= r <= m, eps >= 0, delta in [0, 1].")
    p = 1.0 / (1.0 + math.exp(-eps))
    binom = _stats().binom
    beta = float(binom.sf(v - 1, r, p))
    alpha, acc = 0.0, 0.0
    if delta > 0:
        pmf = binom.pmf(list(range(v - 1, -1, -1)), r, p)      # P[Bin = v - i], i = 1..v
        for i, x in enumerate(pmf, start=1):
            acc += float(x)
            alpha = max(alpha, acc / i)
    return min(1.0, beta + 2.0 * m * delta * alpha)


def one_run_epsilon(m: int, r: int, v: int, delta: float, confidence: float = CONFIDENCE) -> float:
    """The largest eps the guesses refute at ``confidence``: p-value < 1 - confidence (bisection to
    1e-6; 0 when not even eps = 0 is refuted).

    Args:
        m: the number of canaries.
        r: the number of guesses, in [0, m].
        v: the number of right guesses, in [0, r].
        delta: the delta of the bound, in [0, 1].
        confidence: the confidence of the bound, in (0, 1).

    Returns:
        The eps lower bound, >= 0 (512 when the doubling search refutes every eps up to 512).

    Raises:
        InputError: if the counts, or delta, are out of range (raised by :func:`one_run_p_value`).
    """
    a = 1.0 - confidence
    if one_run_p_value(m, r, v, 0.0, delta) >= a:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) < a:
        lo, hi = hi, 2.0 * hi
        if hi > 1e3:
            return lo
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        if one_run_p_value(m, r, v, mid, delta) < a:
            lo = mid
        else:
            hi = mid
    return lo
