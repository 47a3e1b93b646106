"""Empirical checks of the calibrated noise: sensitivity probes and white-box privacy audits.

Both run the real optimizers twice in lockstep: a **leader** on dataset D (one record replaced
by a gradient canary A) and a **twin** on the neighbouring dataset D' (canary B) whose noise
source is a :class:`~optim.replay.ReplaySource`: the twin receives the leader's releases
instead of adding its own noise, so it walks the same public history (same sampling, same
iterates) while its data and hidden state (DIFF2 differences, DP-SRM momentum, DiceSGD error
feedback) are its own.  At every release this gives both noiseless queries ``q_D``, ``q_D'`` and
both requested stds at the state actually visited.

* **Sensitivity probe**: ``||q_D - q_D'||`` against the sensitivity the algorithm claims, for
  adversarial canaries (zero, huge, opposite gradients); and ``std_D == std_D'`` (the noise scale
  must not depend on private data -- AdaD2P fails this).
* **Privacy audit**: the log-likelihood ratio ``S = sum_r log N(o_r; q_D, s_D^2) / N(o_r; q_D', s_D'^2)``
  of all releases, N runs with D the truth and N with D' the truth; 95 %-confidence lower bounds on
  eps from Clopper-Pearson intervals on the false positive / negative rates at thresholds fixed
  before looking (from the claimed GDP mu and N): the direct bound and the GDP bound.  For a
  full-batch Gaussian mechanism and a canary at the claimed sensitivity, ``S`` is exactly
  N(+mu^2/2, mu^2) vs N(-mu^2/2, mu^2).  The LLR conditions on the sampling, so the audit is valid
  for claims that do not rely on amplification by sampling (full batches, J = 1, DiceSGD's
  assumption-free accountant); see docs/audit.md.
* **Trade-off curve**: measured (FPR, FNR) regions against the claimed f-DP curve
  (:func:`curve_check`, :func:`plot_audit`).
* **Sampled claims**: Poisson (:func:`audit_poisson`), fixed-size without replacement under
  replace-one (:func:`audit_wor`, the coupling :class:`WORCoupling`); one training run with many
  canaries (:func:`one_run_audit`, Steinke, Nasr & Jagielski 2023).
* Batched runs of DP-GD / DIFF2-GD: :mod:`optim.batched` (``audit(..., batch=...)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from scipy import stats

from ..accountant import gdp_epsilon, gdp_mu
from ..accountant.tradeoff import TradeOffCurve

from .canaries import ManyCanaries, WORCoupling, plant
from .clipping import clip_factors
from .replay import ReplaySource
from .sampling import ForcedRecord

__all__ = ["zero", "constant", "alternating", "sensitivity_probe", "ProbeReport", "run_pair", "release_llr",
           "epsilon_lower_bounds", "heldout_lower_bound", "llr_samples", "pair_llr", "spent_tradeoff",
           "CurveCheck", "curve_check", "gdp_thresholds", "heldout_curve_check", "plot_audit", "TradeOffCurve",
           "WORCoupling", "wor_llr", "audit_wor", "one_run_p_value", "one_run_epsilon", "OneRunReport",
           "one_run_audit", "one_run_harness", "ONE_RUN", "wor_harness", "AuditReport", "audit", "audit_poisson",
           "AUDITABLE", "harness"]


# ---- canaries ----------------------------------------------------------------------------------
def _unit(d: int, direction=None) -> torch.Tensor:
    u = torch.ones(d, dtype=torch.float64) if direction is None else torch.as_tensor(direction, dtype=torch.float64)
    return u / torch.linalg.vector_norm(u)


def zero(d: int):
    """A record with zero gradient everywhere (under add/remove: the same as no record)."""
    z = torch.zeros(d, dtype=torch.float64)
    return lambda j: z


def constant(d: int, norm: float, direction=None):
    """The same gradient ``norm * u`` at every point."""
    g = norm * _unit(d, direction)
    return lambda j: g


def alternating(d: int, norm: float, direction=None, sign: float = 1.0):
    """``sign * (-1)^j * norm * u`` at the j-th point: its differences between consecutive points
    are ``2 norm`` long, so DIFF2's difference rounds carry it too."""
    g = sign * norm * _unit(d, direction)
    return lambda j: g if j % 2 == 0 else -g


# ---- lockstep runs -----------------------------------------------------------------------------
def _leader(build, seed, canary, holder=0):
    """A run that records its releases with their values (the truth of an experiment); record 0 of
    the ``holder`` is the gradient canary (:func:`optim.canaries.plant`)."""
    leader = build(seed)
    leader.noise.record = leader.noise.record_values = True
    plant(leader, canary, holder)
    return leader


def _follower(build, seed, leader, canary, holder=0):
    """A run on another dataset that walks ``leader``'s public history (see :class:`~optim.replay.ReplaySource`)."""
    f = build(seed)
    plant(f, canary, holder)
    f.noise = ReplaySource(leader.noise, f.device, f.dtype)
    return f


def _leader_twin(build, seed, canary_a, canary_b, holder):
    leader = _leader(build, seed, canary_a, holder)
    return leader, _follower(build, seed, leader, canary_b, holder)


def run_pair(build, seed: int, canary_a, canary_b, *, holder: int = 0, rounds: int | None = None):
    """Leader (canary A) and twin (canary B) stepped in lockstep; returns both optimizers."""
    leader, twin = _leader_twin(build, seed, canary_a, canary_b, holder)
    n = leader.total_rounds if rounds is None else int(rounds)
    for _ in range(n):
        leader.step()
        twin.step()
    return leader, twin


@dataclass(frozen=True)
class ProbeReport:
    rows: tuple            # (pair, release name, max observed / claimed sensitivity, releases)
    max_ratio: float       # over all pairs and releases with a claim
    exceeded: int          # releases whose change exceeds the claim beyond floating-point rounding
    std_mismatches: int    # releases where the requested std differs between D and D'
    unclaimed: int         # releases without a claimed sensitivity (AdaD2P)

    @property
    def passed(self) -> bool:
        return self.exceeded == 0 and self.std_mismatches == 0 and self.unclaimed == 0


def sensitivity_probe(build, candidates: dict | None = None, *, holder: int = 0, rounds: int | None = None,
                      seed: int = 0) -> ProbeReport:
    """Replace the ``holder``'s record 0 by each pair of candidate canaries and measure, at every
    release of the visited trajectory, ``||q_A - q_B||`` against the claimed sensitivity.

    ``build(seed)`` returns a fresh optimizer (same configuration every call).  Default candidates:
    zero gradient, a huge constant gradient (1e6) and its opposite, a huge alternating gradient.
    Under add/remove only pairs with the zero candidate (= the record removed) are compared.
    """
    probe = build(seed)
    d = sum(p.numel() for p in probe.model.parameters())
    if candidates is None:
        candidates = {"zero": zero(d), "huge": constant(d, 1e6), "opposite": constant(d, -1e6),
                      "alternating": alternating(d, 1e6)}
    names = list(candidates)
    rows, worst, mism, unclaimed, exceeded = [], 0.0, 0, 0, 0
    for a in names:
        for b in names:
            if a == b:
                continue
            leader, twin = run_pair(build, seed, candidates[a], candidates[b], holder=holder, rounds=rounds)
            rl, rt = leader.noise.releases, twin.noise.releases
            if rl and rl[0].relation == "add/remove" and "zero" not in (a, b):
                continue
            per_name: dict = {}
            for x, y in zip(rl, rt):
                if x.std != y.std:
                    mism += 1
                if x.sensitivity is None:
                    unclaimed += 1
                    continue
                dist = float(torch.linalg.vector_norm(x.value - y.value))
                ulp = torch.finfo(leader.dtype).eps
                slack = 1e-9 + 8 * ulp * float(torch.linalg.vector_norm(x.value) + torch.linalg.vector_norm(y.value))
                exceeded += dist > x.sensitivity * (1 + 1e-9) + slack
                ratio = dist / x.sensitivity if x.sensitivity > 0 else (math.inf if dist > 1e-12 else 0.0)
                key = x.name.split(" (")[0] if "client" not in x.name else "v~ (local)"
                prev = per_name.get(key, (0.0, 0))
                per_name[key] = (max(prev[0], ratio), prev[1] + 1)
            for key, (ratio, count) in per_name.items():
                rows.append((f"{a} -> {b}", key, ratio, count))
                worst = max(worst, ratio)
    return ProbeReport(tuple(rows), worst, exceeded, mism, unclaimed)


# ---- likelihood ratio --------------------------------------------------------------------------
def _log_density(o, q, s):
    """log N(o; q, s^2 I) without the 2 pi term; a point mass when s = 0 (+inf at q, -inf elsewhere)."""
    if s == 0.0:
        return math.inf if torch.equal(o, q) else -math.inf
    return float(-torch.sum((o - q) ** 2) / (2.0 * s * s)) - o.numel() * math.log(s)


def release_llr(o, q_a, s_a, q_b, s_b) -> float:
    """``log p_A(o) - log p_B(o)`` for one Gaussian release (inf - inf of identical point masses is 0)."""
    la, lb = _log_density(o, q_a, s_a), _log_density(o, q_b, s_b)
    if math.isinf(la) and math.isinf(lb):
        return 0.0 if la == lb else la
    return la - lb


def _llr_of_pair(leader, twin, truth_is_a: bool) -> float:
    """S = log p_D(transcript) - log p_D'(transcript) (D carries canary A)."""
    total = 0.0
    for x, y in zip(leader.noise.releases, twin.noise.releases):
        o = x.released.detach().to("cpu", torch.float64)
        q_t, s_t, q_o, s_o = x.value, x.std, y.value, y.std
        llr = release_llr(o, q_t, s_t, q_o, s_o) if truth_is_a else release_llr(o, q_o, s_o, q_t, s_t)
        total += llr
        if math.isinf(total):
            return total
    return total


def pair_llr(build, seed: int, canary_d, canary_dprime, truth_is_d: bool, holder: int = 0) -> float:
    """One run's statistic ``S = log p_D - log p_D'``: a leader releasing from D (``truth_is_d``) or
    D', and its twin on the other dataset."""
    a, b = (canary_d, canary_dprime) if truth_is_d else (canary_dprime, canary_d)
    return _llr_of_pair(*run_pair(build, seed, a, b, holder=holder), truth_is_a=truth_is_d)


# ---- epsilon lower bounds ----------------------------------------------------------------------
def _cp_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound on a binomial rate at confidence 1 - alpha."""
    return 1.0 if k >= n else float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))


def _direct(fpr_hi, fnr_hi, delta):
    best = 0.0
    for a, b in ((fnr_hi, fpr_hi), (fpr_hi, fnr_hi)):
        num = 1.0 - delta - a
        if num > 0 and b < 1.0:
            best = max(best, math.log(num / b) if b > 0 else math.inf)
    return best


def _gdp_from_rates(fpr_hi, fnr_hi, delta):
    mu = float(stats.norm.isf(fpr_hi) - stats.norm.ppf(fnr_hi))
    return (0.0, 0.0) if not mu > 0 else (mu, gdp_epsilon(mu, delta) if math.isfinite(mu) else math.inf)


def _expected_direct(t, mu, n, delta, alpha):
    """The direct bound a correct mechanism would give at threshold t (T-units), for choosing t."""
    fpr = float(stats.norm.sf(t))
    fnr = float(stats.norm.cdf(t - mu))
    return _direct(_cp_upper(int(round(fpr * n)), n, alpha), _cp_upper(int(round(fnr * n)), n, alpha), delta)


def epsilon_lower_bounds(s_d, s_dprime, delta: float, mu_claimed: float, confidence: float = 0.95) -> dict:
    """95 %-confidence lower bounds on eps from LLR samples under D (``s_d``) and D' (``s_dprime``).

    Statistics are standardised with the claimed mu, ``T = S/mu + mu/2`` (N(mu, 1) vs N(0, 1) for
    a full-batch Gaussian mechanism).  Thresholds, fixed from ``mu_claimed`` and N before the
    samples are looked at: ``mu/2`` for the GDP bound, the maximiser of the expected direct bound
    for the direct bound.  Each bound uses two one-sided Clopper-Pearson intervals at
    ``1 - (1 - confidence)/2`` (Bonferroni), so it holds with probability >= ``confidence``.
    """
    n0, n1 = len(s_d), len(s_dprime)
    if min(n0, n1) < 1:
        raise ValueError("samples are not allowed: expected at least one run per dataset.")
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


@dataclass(frozen=True)
class AuditReport:
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

    @property
    def verdict(self) -> str:
        """"violation" when a lower bound exceeds the claimed eps (the GDP bound counts only when the
        claim is exactly GDP), or a measured (FPR, FNR) region lies entirely below the claimed
        trade-off curve; else "consistent"."""
        if self.epsilon_verdict == "violation" or (self.curve is not None and self.curve.violation):
            return "violation"
        return "consistent"

    @property
    def epsilon_verdict(self) -> str:
        """The verdict of the eps lower bounds alone (without the trade-off curve)."""
        tol = 1e-9
        bad = self.epsilon_lo_direct > self.claimed_epsilon + tol or (
            self.gdp_exact and self.epsilon_lo_gdp > self.claimed_epsilon + tol)
        return "violation" if bad else "consistent"

    def as_dict(self) -> dict:
        out = {"algorithm": self.algorithm, "claimed_epsilon": self.claimed_epsilon, "delta": self.delta,
               "runs_per_dataset": self.runs, "epsilon_lo_direct": self.epsilon_lo_direct,
               "epsilon_lo_gdp": self.epsilon_lo_gdp, "mu_claimed": self.mu_claimed, "mu_lo": self.mu_lo,
               "verdict": self.verdict, **self.details}
        if self.curve is not None:
            out["curve"] = self.curve.as_dict()
        return out


# ---- the claimed trade-off curve against measured (FPR, FNR) regions -------------------------------
def _cp_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound on a binomial rate at confidence 1 - alpha."""
    return 0.0 if k <= 0 else float(stats.beta.ppf(alpha, k, n - k + 1))


@dataclass(frozen=True)
class CurveCheck:
    """Measured (FPR, FNR) of the tests "say D when S >= t" at fixed thresholds t, with
    Clopper-Pearson regions that hold simultaneously at ``confidence`` (Bonferroni over the
    thresholds and both rates), against the claimed trade-off curve ``f``.

    A region lies entirely below ``f`` when its upper-right corner does (``f`` is non-increasing):
    ``FNR_hi < f(FPR_hi)`` (or the same with the roles of D and D' exchanged).  Then no mechanism
    with the claimed curve produces these rates, at the stated confidence: ``violation``."""

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
        return any(self.below)

    def as_dict(self) -> dict:
        return {"claimed_curve": self.curve.label(), "confidence": self.confidence, "violation": self.violation,
                "points": [{"threshold": t, "fpr": a, "fnr": b, "fpr_hi": ah, "fnr_hi": bh, "claimed_fnr_at_fpr_hi": c,
                            "below": w}
                           for t, a, b, ah, bh, c, w in zip(self.thresholds, self.fpr, self.fnr, self.fpr_hi,
                                                             self.fnr_hi, self.claimed_fnr, self.below)]}


def gdp_thresholds(mu: float) -> list:
    """The curve check's thresholds for the LLR of a claimed ``mu``-GDP pair, fixed before looking:
    ``S = k mu`` for k in {-1, -1/2, 0, 1/2, 1} (the standardised ``T = S/mu + mu/2`` at ``mu/2 + k``)."""
    return [k * mu for k in (-1.0, -0.5, 0.0, 0.5, 1.0)]


def curve_check(s_d, s_dprime, curve: TradeOffCurve, thresholds, confidence: float = 0.95) -> CurveCheck:
    """Compare the measured trade-off of the statistic (samples under D and D') with ``curve`` at
    ``thresholds`` fixed before the samples were looked at (see :class:`CurveCheck`)."""
    import numpy as np

    ts = [float(t) for t in thresholds]
    if not ts or not all(math.isfinite(t) for t in ts):
        raise ValueError(f"thresholds={thresholds!r} is not allowed: expected at least one finite number.")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r} is not allowed: expected a number in (0, 1).")
    xd, xp = np.asarray(s_d, dtype=float), np.asarray(s_dprime, dtype=float)
    n0, n1 = xd.size, xp.size
    if min(n0, n1) < 1:
        raise ValueError("samples are not allowed: expected at least one run per dataset.")
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


def plot_audit(report: AuditReport, path) -> None:
    """Draw the claimed trade-off curve, the measured (FPR, FNR) points and their simultaneous
    confidence regions (needs matplotlib: ``pip install 'dpcalib[plot]'``)."""
    import numpy as np

    if report.curve is None:
        raise ValueError("report is not allowed: it carries no trade-off measurements (curve=None).")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError as exc:
        raise ValueError(f"plot is not available: matplotlib is not installed ({exc}); "
                         "pip install 'dpcalib[plot]'") from None
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
    fig.savefig(path, dpi=120)
    plt.close(fig)


DEFAULT_BATCH = 4096


def _check_runs(runs, low: int) -> int:
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < low:
        raise ValueError(f"runs={runs!r} is not allowed: expected an integer >= {low}.")
    return runs


def _check_claim(claimed_epsilon, delta) -> tuple[float, float]:
    """``(eps, delta)`` of the claim an audit tests, validated."""
    e = float(claimed_epsilon)
    if not e > 0 or math.isinf(e):
        raise ValueError(f"claimed_epsilon={claimed_epsilon!r} is not allowed: expected a finite number > 0.")
    d = float(delta)
    if not 0 < d < 1:
        raise ValueError(f"delta={delta!r} is not allowed: expected a number in (0, 1).")
    return e, d


def _paired_runs(one, runs: int, seed: int, desc: str, progress) -> tuple[list, list]:
    """``one(seed, truth_is_d)`` for ``runs`` runs with D the truth (seeds ``seed + 2 i``) and
    ``runs`` with D' (``seed + 2 i + 1``), one after another, with a progress bar."""
    from tqdm.auto import tqdm

    s_d, s_p = [], []
    bar = tqdm(total=2 * runs, desc=desc, disable=(None if progress is None else not progress), leave=False)
    try:
        for i in range(runs):
            s_d.append(one(seed + 2 * i, True))
            bar.update(1)
            s_p.append(one(seed + 2 * i + 1, False))
            bar.update(1)
    finally:
        bar.close()
    return s_d, s_p


def llr_samples(build, canary_d, canary_dprime, *, runs: int, seed: int = 0, holder: int = 0,
                batch: int | str | None = "auto", progress: bool | None = None) -> tuple[list, list]:
    """``(S under D, S under D')``: the transcript log-likelihood ratio ``log p_D - log p_D'`` of
    ``runs`` runs with D the truth (seeds ``seed + 2 i``) and ``runs`` with D' (``seed + 2 i + 1``).

    ``batch``: ``None`` -- one leader/twin pair after another (the oracle); an integer -- that many
    runs stacked along a tensor dimension (:mod:`optim.batched`; DP-GD and DIFF2-GD), same value
    per run; ``"auto"`` -- batched (4096 runs per batch) where the optimizer supports it.
    """
    _check_runs(runs, 1)
    if batch == "auto":
        from .batched import supports_batching

        batch = DEFAULT_BATCH if supports_batching(build(seed)) else None
    if batch is not None:
        from .batched import batched_llr

        seeds = [seed + i for i in range(2 * runs)]
        s = batched_llr(build, canary_d, canary_dprime, seeds, [i % 2 == 0 for i in range(2 * runs)],
                        holder=holder, batch=batch, progress=progress)
        return s[0::2], s[1::2]
    return _paired_runs(lambda sd, truth: pair_llr(build, sd, canary_d, canary_dprime, truth, holder), runs, seed,
                        "audit", progress)


def audit(build, canary_d, canary_dprime, *, runs: int, claimed_epsilon: float, delta: float,
          holder: int = 0, gdp_exact: bool = True, confidence: float = 0.95, progress: bool | None = None,
          seed: int = 0, name: str | None = None, batch: int | str | None = "auto",
          curve: TradeOffCurve | None = None) -> AuditReport:
    """White-box audit: ``runs`` runs with D (canary ``canary_d``) the truth and ``runs`` with D'
    (``canary_dprime``); returns the eps lower bounds, the measured trade-off against the claimed
    curve, and the verdict against ``claimed_epsilon``.

    ``build(seed)`` returns a fresh optimizer; each run uses its own seed (data sampling and noise).
    ``batch``: see :func:`llr_samples` (batched where supported; ``None`` runs one pair at a time).
    ``curve``: the claimed trade-off curve (:func:`dpcalib.accountant.claimed_tradeoff` of the
    calibration's accountant); default: ``mu``-GDP when ``gdp_exact``, else the curve the
    optimizer's own accountant certifies for a complete run (:func:`spent_tradeoff`).
    Its five thresholds are fixed from the claimed ``mu`` before the samples are looked at:
    ``S = k mu``, k in {-1, -1/2, 0, 1/2, 1} (T = S/mu + mu/2 at mu/2 + k).
    """
    _check_runs(runs, 1)
    e, d = _check_claim(claimed_epsilon, delta)
    mu = gdp_mu(e, d)
    s_d, s_p = llr_samples(build, canary_d, canary_dprime, runs=runs, seed=seed, holder=holder, batch=batch,
                           progress=progress)
    b = epsilon_lower_bounds(s_d, s_p, d, mu, confidence)
    finite = [v for v in s_d + s_p if math.isfinite(v)]
    details = {k: b[k] for k in ("threshold_direct", "threshold_gdp", "fpr_direct", "fnr_direct", "fpr_gdp",
                                 "fnr_gdp")}
    details["mean_llr_d"] = sum(v for v in s_d if math.isfinite(v)) / max(1, len([v for v in s_d if math.isfinite(v)]))
    details["infinite_llr"] = len(s_d) + len(s_p) - len(finite)
    if curve is None:
        curve = TradeOffCurve.gdp(mu) if gdp_exact else _default_curve(build, seed, e, d)
    check = curve_check(s_d, s_p, curve, gdp_thresholds(mu), confidence)
    return AuditReport(name or build(seed).name, e, d, runs, b["direct"], b["gdp"], mu, b["mu_lo"], gdp_exact,
                       details, check)


def spent_tradeoff(build, seed: int = 0) -> TradeOffCurve:
    """The trade-off curve the optimizer's own accountant certifies for one complete run (exact GDP
    for full-batch Gaussian compositions, else the PLD profile's envelope): the claim a curve check
    tests when the caller gives none."""
    from ..accountant import claimed_tradeoff

    spent = build(seed)
    spent.run(progress=False, log_every=spent.total_rounds)
    return claimed_tradeoff(spent.accountant())


def _default_curve(build, seed, e, d) -> TradeOffCurve:
    """:func:`spent_tradeoff`, or the (eps, delta) curve of the stated claim where the optimizer has no
    accountant of its own (AdaD2P: no finite guarantee, AdaD2P-E1)."""
    from ..mechanisms import NoPrivacyGuaranteeError

    try:
        return spent_tradeoff(build, seed)
    except NoPrivacyGuaranteeError:
        return TradeOffCurve.epsilon_delta(e, d)


def heldout_lower_bound(s_d, s_dprime, delta: float, confidence: float = 0.95) -> dict:
    """Direct eps lower bound with the threshold chosen on a held-out half of the runs: the first
    half picks the threshold (the best direct bound there, among the first half's values), the
    second half is evaluated at it with Clopper-Pearson (valid for ANY statistic)."""
    h0, h1 = len(s_d) // 2, len(s_dprime) // 2
    if min(h0, h1) < 1:
        raise ValueError("samples are not allowed: expected at least two runs per dataset.")
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


def heldout_curve_check(s_d, s_dprime, curve: TradeOffCurve, confidence: float = 0.95,
                        quantiles=(0.1, 0.3, 0.5, 0.7, 0.9)) -> CurveCheck:
    """:func:`curve_check` with thresholds at ``quantiles`` of the first half of the runs (pooled,
    finite values), evaluated on the second half -- for statistics whose law is not known ahead."""
    import numpy as np

    h0, h1 = len(s_d) // 2, len(s_dprime) // 2
    if min(h0, h1) < 1:
        raise ValueError("samples are not allowed: expected at least two runs per dataset.")
    first = np.asarray(list(s_d[:h0]) + list(s_dprime[:h1]), dtype=float)
    first = first[np.isfinite(first)]
    ts = sorted(set(np.quantile(first, quantiles).tolist())) if first.size else [0.0]
    return curve_check(list(s_d[h0:]), list(s_dprime[h1:]), curve, ts, confidence)


def audit_poisson(build, canary, *, rate: float, runs: int, claimed_epsilon: float, delta: float,
                  confidence: float = 0.95, progress: bool | None = None, seed: int = 0,
                  name: str | None = None, curve: TradeOffCurve | None = None) -> AuditReport:
    """Audit of a Poisson-sampled optimizer under add/remove (D: with the canary record, D': without).

    The canary's inclusion is the mechanism's secret, so the statistic must not use it: two
    followers walk the leader's public history, one with the canary FORCED into every sample
    (``q_in``) and one without it (``q_out``); the others' sampling is shared.  Per release,
    ``log((1 - rate) + rate * p_in(o)/p_out(o))`` -- the exact LLR of a Poisson-subsampled Gaussian
    step; summed over releases (a valid statistic for any optimizer; exact when the steps do not
    carry hidden record-dependent state).  Direct bound and curve check (``curve``: default the
    optimizer's own certified curve, :func:`spent_tradeoff`), thresholds from a held-out half.
    """
    _check_runs(runs, 2)
    q = float(rate)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"rate={rate!r} is not allowed: expected a number in (0, 1].")
    e, d = _check_claim(claimed_epsilon, delta)
    dim = sum(p.numel() for p in build(seed).model.parameters())
    absent = zero(dim)
    log_keep = math.log1p(-q) if q < 1.0 else -math.inf

    def one(s, truth_has_canary):
        leader = _leader(build, s, canary if truth_has_canary else absent)
        f_in, f_out = _follower(build, s, leader, canary), _follower(build, s, leader, absent)
        f_in.sampler = ForcedRecord(0, 0, present=True)      # record 0 (the canary) in every sample
        for _ in range(leader.total_rounds):
            leader.step()
            f_in.step()
            f_out.step()
        total = 0.0
        for x, a, b in zip(leader.noise.releases, f_in.noise.releases, f_out.noise.releases):
            o = x.released.detach().to("cpu", torch.float64)
            llr = release_llr(o, a.value, a.std, b.value, b.std)
            total += _logaddexp(log_keep, math.log(q) + llr)
        return total

    s_d, s_p = _paired_runs(one, runs, seed, "audit", progress)
    b = heldout_lower_bound(s_d, s_p, d, confidence)
    details = {"threshold_direct": b["threshold"], "fpr_direct": b["fpr"], "fnr_direct": b["fnr"],
               "statistic": "Poisson mixture LLR, held-out threshold"}
    if curve is None:
        curve = _default_curve(build, seed, e, d)
    check = heldout_curve_check(s_d, s_p, curve, confidence)
    return AuditReport(name or build(seed).name, e, d, runs, b["direct"], 0.0, gdp_mu(e, d), 0.0, False, details,
                       check)


# ---- standard harnesses (CLI and docs) ------------------------------------------------------------
AUDITABLE = ("dp-gd", "diff2-gd", "dicesgd", "clipd2p", "constd2p", "adad2p")


def harness(algorithm: str, mechanism, noise):
    """``(build, canary_d, canary_dprime, holder, gdp_exact)`` for a standard white-box audit of
    ``algorithm`` at the run shape ``mechanism`` and noise levels ``noise``: a one-layer linear
    model on 2 synthetic features, ``n_min`` records per client / N records / one record per node.

    The LLR conditions on the sampling, so only claims without amplification by sampling are
    auditable: full-batch DP-GD / DIFF2-GD, DiceSGD's assumption-free accountant, and the D2P
    family with one record per node (J = 1).
    """
    from torch import nn

    from .. import mechanisms as M
    from .. import optim as O

    if algorithm not in AUDITABLE:
        raise ValueError(f"algorithm={algorithm!r} is not allowed for an audit: expected one of {AUDITABLE} "
                         "(claims that rely on amplification by sampling need a mixture statistic, not "
                         "implemented).")
    g = torch.Generator().manual_seed(12345)
    d_model = 3

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(2, 1))

    def table(n):
        return torch.randn(n, 2, generator=g), torch.randn(n, generator=g)

    if algorithm in ("dp-gd", "diff2-gd"):
        shards = [table(mechanism.n_min) for _ in range(mechanism.clients)]
        cls = O.DPGD if algorithm == "dp-gd" else O.DIFF2GD
        kw = {"C1": 1.0} if algorithm == "dp-gd" else {"C1": 1.0, "C2": 1.0}
        build = lambda s: cls(model(), O.squared_loss, shards, mechanism, noise, lr=0.1, seed=s, **kw)  # noqa: E731
        return build, alternating(d_model, 1e6), alternating(d_model, 1e6, sign=-1.0), 0, True
    if algorithm == "dicesgd":
        data = table(mechanism.N)
        build = lambda s: O.DiceSGD(model(), O.squared_loss, data, mechanism, noise, lr=0.1, seed=s)  # noqa: E731
        return build, constant(d_model, 1e6), zero(d_model), 0, False
    if mechanism.samples_per_node != 1:
        raise ValueError(f"samples_per_node={mechanism.samples_per_node} is not allowed for this audit: expected 1 "
                         "(with J > 1 the claim relies on amplification by sampling: under replace-one the "
                         "without-replacement audit applies, --relation replace-one; see docs/audit.md).")
    nodes = [table(1) for _ in range(4)]
    if algorithm == "clipd2p":
        build = lambda s: O.ClipD2P(model(), O.squared_loss, nodes, mechanism, noise, C=1.0, lr=0.1,  # noqa: E731
                                    seed=s)
    elif algorithm == "constd2p":
        build = lambda s: O.ConstD2P(model(), O.squared_loss, nodes, mechanism, noise, G=1.0,  # noqa: E731
                                     lr=0.1, seed=s)
    else:
        mech = M.AdaD2P(1, mechanism.iterations)
        build = lambda s: O.AdaD2P(model(), O.squared_loss, nodes, mech, noise, lr=0.1, seed=s)  # noqa: E731
    # "a record with gradient norm C vs a zero-gradient record" (ConstD2P: norm 100 G, far above its bound)
    norm = 100.0 if algorithm == "constd2p" else 1.0
    return build, constant(d_model, norm), zero(d_model), 0, False


# ---- fixed-size sampling without replacement (replace-one) ----------------------------------------
def _log_kernel(o, q, s: float) -> float:
    """``-||o - q||^2 / (2 s^2)`` (the part of log N(o; q, s^2 I) that differs between means); a point
    mass for s = 0 (0 at q, -inf elsewhere)."""
    if s == 0.0:
        return 0.0 if torch.equal(o, q) else -math.inf
    return float(-torch.sum((o - q) ** 2) / (2.0 * s * s))


def _logaddexp(x: float, y: float) -> float:
    """``log(e^x + e^y)`` in double precision (either may be -inf)."""
    m = max(x, y)
    if m == -math.inf:
        return -math.inf
    return m + math.log1p(math.exp(min(x, y) - m))


def _mixture_llr(o, q_out, q_a, q_b, s: float, gamma: float) -> float:
    """``log p_A(o) - log p_B(o)`` with ``p_X = (1 - gamma) N(q_out, s^2) + gamma N(q_X, s^2)``."""
    la, lb, lo = _log_kernel(o, q_a, s), _log_kernel(o, q_b, s), _log_kernel(o, q_out, s)
    if gamma < 1.0:
        w_out, w_in = math.log1p(-gamma), math.log(gamma)
        la, lb = _logaddexp(w_out + lo, w_in + la), _logaddexp(w_out + lo, w_in + lb)
    if la == lb:
        return 0.0
    return la - lb


def wor_llr(build, seed: int, canary_a, canary_b, truth_is_a: bool, holder: int = 0) -> float:
    """One run of the without-replacement statistic: the leader releases from D (canary A) or D'
    (canary B); three followers walk its public history with the coupled batches -- "out", "in"
    with canary A, "in" with canary B -- and each release contributes the exact mixture LLR
    (:func:`_mixture_llr`, gamma = b/n of the sample that could hold the canary; a release whose
    query holds the canary for sure -- a full batch -- has gamma = 1; one that cannot -- another
    client's local step -- has equal queries and contributes 0)."""
    leader = _leader(build, seed, canary_a if truth_is_a else canary_b, holder)
    f_out = _follower(build, seed, leader, canary_a, holder)
    f_a = _follower(build, seed, leader, canary_a, holder)
    f_b = _follower(build, seed, leader, canary_b, holder)
    for f, mode in ((f_out, "out"), (f_a, "in"), (f_b, "in")):
        f.sampler = WORCoupling(seed, mode, (lambda f=f: len(f.noise.releases)), holder, base=f.sampler)
    for _ in range(leader.total_rounds):
        leader.step()
        for f in (f_out, f_a, f_b):
            f.step()
    gam = f_out.sampler.gammas
    if f_a.sampler.gammas != gam or f_b.sampler.gammas != gam:
        raise RuntimeError("the followers sampled differently: the optimizer's sampling depends on private data.")
    total = 0.0
    for i, (x, u, a, b) in enumerate(zip(leader.noise.releases, f_out.noise.releases, f_a.noise.releases,
                                         f_b.noise.releases)):
        o = x.released.detach().to("cpu", torch.float64)
        total += _mixture_llr(o, u.value, a.value, b.value, a.std, gam.get(i, 1.0))
    return total


def audit_wor(build, canary_a, canary_b, *, runs: int, claimed_epsilon: float, delta: float, holder: int = 0,
              curve: TradeOffCurve | None = None, confidence: float = 0.95, progress: bool | None = None,
              seed: int = 0, name: str | None = None) -> AuditReport:
    """Audit of a claim that relies on fixed-size sampling without replacement under replace-one
    (DP-SRM with b < n, DIFF2-BVR-L-SGD's local steps, ClipD2P with J > 1): D holds canary A as
    record 0 of the ``holder``, D' canary B.  Statistic: :func:`wor_llr`; direct eps bound and
    trade-off curve check with thresholds from a held-out half (:func:`heldout_lower_bound`,
    :func:`heldout_curve_check`).  ``curve``: the claimed trade-off curve (default: the
    :func:`dpcalib.accountant.claimed_tradeoff` of the composition the run spends)."""
    _check_runs(runs, 2)
    e, d = _check_claim(claimed_epsilon, delta)
    s_d, s_p = _paired_runs(lambda sd, truth: wor_llr(build, sd, canary_a, canary_b, truth, holder), runs, seed,
                            "audit (w/o replacement)", progress)
    if curve is None:
        curve = spent_tradeoff(build, seed)
    b = heldout_lower_bound(s_d, s_p, d, confidence)
    check = heldout_curve_check(s_d, s_p, curve, confidence)
    details = {"threshold_direct": b["threshold"], "fpr_direct": b["fpr"], "fnr_direct": b["fnr"],
               "statistic": "without-replacement mixture LLR (replace-one coupling), held-out thresholds"}
    return AuditReport(name or build(seed).name, e, d, runs, b["direct"], 0.0, gdp_mu(e, d), 0.0, False, details,
                       check)


# ---- one-run audit (Steinke, Nasr & Jagielski 2023) ------------------------------------------------
#: the norm of every one-run canary's gradient (far above any clip: it is clipped to exactly C)
CANARY_NORM = 1e6


def one_run_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """P[at least ``v`` of ``r`` guesses correct] for an (eps, delta)-DP mechanism whose ``m``
    canaries are each included with probability 1/2 (Steinke, Nasr & Jagielski 2023, Thm 3 with
    delta > 0, as in their Algorithm 2): ``P[Bin(r, p) >= v] + 2 m delta max_i P[v > Bin(r, p) >= v - i] / i``,
    ``p = e^eps / (1 + e^eps)``."""
    if not (0 <= v <= r <= m) or eps < 0 or not 0 <= delta <= 1:
        raise ValueError(f"(m, r, v, eps, delta)={(m, r, v, eps, delta)!r} is not allowed: expected "
                         "0 <= v <= r <= m, eps >= 0, delta in [0, 1].")
    p = 1.0 / (1.0 + math.exp(-eps))
    beta = float(stats.binom.sf(v - 1, r, p))
    alpha, acc = 0.0, 0.0
    if delta > 0:
        pmf = stats.binom.pmf(list(range(v - 1, -1, -1)), r, p)      # P[Bin = v - i], i = 1..v
        for i, x in enumerate(pmf, start=1):
            acc += float(x)
            alpha = max(alpha, acc / i)
    return min(1.0, beta + 2.0 * m * delta * alpha)


def one_run_epsilon(m: int, r: int, v: int, delta: float, confidence: float = 0.95) -> float:
    """The largest eps the guesses refute at ``confidence``: p-value < 1 - confidence (bisection to
    1e-6; 0 when not even eps = 0 is refuted)."""
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


@dataclass(frozen=True)
class OneRunReport:
    algorithm: str
    claimed_epsilon: float
    delta: float
    canaries: int
    included: int
    epsilon_lo: float              # max over the guess counts tried (Bonferroni-corrected)
    guesses: tuple                 # (k, r, correct, eps_lo at the corrected level) per k
    seed: int

    @property
    def verdict(self) -> str:
        return "violation" if self.epsilon_lo > self.claimed_epsilon + 1e-9 else "consistent"

    def as_dict(self) -> dict:
        return {"algorithm": self.algorithm, "claimed_epsilon": self.claimed_epsilon, "delta": self.delta,
                "canaries": self.canaries, "included": self.included, "epsilon_lo": self.epsilon_lo,
                "verdict": self.verdict, "guesses": [dict(zip(("k", "r", "correct", "epsilon_lo"), g))
                                                     for g in self.guesses]}


def _one_run_signal(opt, norm: float):
    """(sampling rate, what one sampled canary of gradient norm ``norm`` adds to a release's
    coordinate along its gradient): DP-SGD releases the clipped SUM, DiceSGD the clipped sum over
    its nominal batch B (plus its error feedback, which no canary enters)."""
    stabilizer = getattr(opt, "stabilizer", None)
    c = opt.C if opt.name == "dp-sgd" else opt.C1
    f = float(clip_factors(torch.tensor([norm], dtype=torch.float64), c, stabilizer)[0])
    return opt.q, norm * f / (1.0 if opt.name == "dp-sgd" else opt.B)


def one_run_audit(build, *, canaries: int, claimed_epsilon: float, delta: float, ks=None,
                  confidence: float = 0.95, seed: int = 0, progress: bool | None = None,
                  name: str | None = None) -> OneRunReport:
    """One-run audit (Steinke, Nasr & Jagielski, NeurIPS 2023) of a Poisson-sampled optimizer
    (DP-SGD, DiceSGD): ONE training run with ``canaries`` = m gradient canaries, each a record of
    the dataset with probability 1/2; canary i's gradient is 1e6 along its own coordinate of the
    model (distinct coordinates: m <= number of parameters), so it is clipped to exactly C.  The
    auditor sees every release (white box) and scores canary i by the sum over releases of the
    Poisson-subsampled Gaussian LLR of the released value's coordinate (in vs out, at the claimed
    std and the canary's contribution; the optimal score of one canary); it guesses "in" for
    the k highest and "out" for the k lowest scores.  The eps lower bound is their Theorem 3
    (:func:`one_run_epsilon`), maximised over the guess counts ``ks`` (default m/20, m/10, m/5) with a Bonferroni correction (each k at
    ``1 - (1 - confidence)/len(ks)``), so the reported bound holds at ``confidence``.
    """
    import numpy as np

    m = int(canaries)
    opt = build(seed)
    d = sum(p.numel() for p in opt.model.parameters())
    if opt.name not in ONE_RUN:
        raise ValueError(f"the optimizer ({opt.name}) is not allowed for a one-run audit: expected a Poisson-sampled "
                         "optimizer on one dataset (dp-sgd, dicesgd).")
    if isinstance(canaries, bool) or not 2 <= m <= d:
        raise ValueError(f"canaries={canaries!r} is not allowed: expected an integer in [2, {d}] (one coordinate "
                         "of the model per canary).")
    if m * d * 8 > 1 << 30:
        raise ValueError(f"canaries={canaries!r} is not allowed with a model of {d} parameters: the canaries' "
                         f"gradients ({m} x {d} float64) would need more than 1 GiB.")
    e, dl = _check_claim(claimed_epsilon, delta)
    ks = [max(1, m // 20), max(1, m // 10), max(1, m // 5)] if ks is None else [int(k) for k in ks]
    if not ks or any(not 1 <= k <= m // 2 for k in ks):
        raise ValueError(f"ks={ks!r} is not allowed: expected guess counts in [1, {m // 2}].")
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 7])
    coords = rng.permutation(d)[:m]
    included = rng.random(m) < 0.5
    grads = torch.zeros(m, d, dtype=torch.float64)
    grads[torch.arange(m), torch.as_tensor(coords)] = CANARY_NORM
    ManyCanaries(grads, torch.as_tensor(included)).install(opt)
    opt.noise.record, opt.noise.record_noise, opt.noise.record_values = True, False, True
    opt.run(progress=progress, log_every=opt.total_rounds)
    q, c = _one_run_signal(opt, CANARY_NORM)
    scores = np.zeros(m)
    log_keep = math.log1p(-q) if q < 1.0 else -math.inf
    for rel in opt.noise.releases:
        x = rel.released.detach().to("cpu", torch.float64).reshape(-1).numpy()[coords]
        s2 = rel.std * rel.std
        if s2 == 0.0:
            continue
        # log((1 - q) + q N(x; c, s^2) / N(x; 0, s^2)): the canary's per-release LLR, in vs out
        scores += np.logaddexp(log_keep, math.log(q) + (x * c - 0.5 * c * c) / s2)
    order = np.argsort(scores, kind="stable")
    a_each = (1.0 - confidence) / len(ks)
    rows, best = [], 0.0
    for k in ks:
        guess_in, guess_out = order[-k:], order[:k]
        correct = int(included[guess_in].sum() + (~included[guess_out]).sum())
        eps_k = one_run_epsilon(m, 2 * k, correct, dl, 1.0 - a_each)
        rows.append((k, 2 * k, correct, eps_k))
        best = max(best, eps_k)
    return OneRunReport(name or opt.name, e, dl, m, int(included.sum()), best, tuple(rows), int(seed))


#: optimizers the one-run audit supports (Poisson-sampled, one dataset)
ONE_RUN = ("dp-sgd", "dicesgd")


def one_run_harness(algorithm: str, mechanism, noise, canaries: int):
    """``build(seed)`` for the standard one-run audit of ``algorithm`` (CLI and docs): an MLP
    32 -> h -> 1 (ReLU) with h the smallest width >= 32 giving at least ``canaries`` parameters, on
    synthetic records (100 for DP-SGD, N for DiceSGD), C = 1 (DiceSGD: its C1, C2)."""
    from torch import nn

    from .. import optim as O

    if algorithm not in ONE_RUN:
        raise ValueError(f"algorithm={algorithm!r} is not allowed for a one-run audit: expected one of {ONE_RUN}.")
    m = int(canaries)
    h = max(32, -(-(m - 1) // 34))
    g = torch.Generator().manual_seed(12345)
    n = 100 if algorithm == "dp-sgd" else mechanism.N
    data = (torch.randn(n, 32, generator=g), torch.randn(n, generator=g))

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(32, h), nn.ReLU(), nn.Linear(h, 1))

    if algorithm == "dp-sgd":
        return lambda s: O.DPSGD(model(), O.squared_loss, data, mechanism, noise, C=1.0, lr=0.01, seed=s)
    return lambda s: O.DiceSGD(model(), O.squared_loss, data, mechanism, noise, lr=0.01, seed=s)


def _wor_claim(algorithm: str, mechanism) -> bool:
    return algorithm in ("dp-srm", "diff2-bvr") or (
        algorithm == "clipd2p" and mechanism.samples_per_node > 1 and mechanism.relation == "replace-one")


def wor_harness(algorithm: str, mechanism, noise):
    """``(build, canary_a, canary_b, holder)`` for the standard without-replacement audit (CLI and
    docs): a one-layer linear model on 2 features.  The holder's records (DP-SRM's dataset, ClipD2P's
    node 0) have x = 0 and y = 1e6, so their clipped gradient is -C along the bias; canary B is the
    same gradient and canary A its opposite -- the worst case of the replace-one pair (see
    docs/audit.md).  DIFF2-BVR: P clients of n_min random records, alternating canaries (every
    DIFF2 round and local difference moves by its claimed sensitivity)."""
    from torch import nn

    from .. import optim as O

    if not _wor_claim(algorithm, mechanism):
        raise ValueError(f"algorithm={algorithm!r} is not allowed for a without-replacement audit: expected dp-srm, "
                         "diff2-bvr, or clipd2p with samples_per_node > 1 under replace-one.")
    e_bias = torch.tensor([0.0, 0.0, 1.0])
    up, down = constant(3, 1e6, e_bias), constant(3, -1e6, e_bias)
    g = torch.Generator().manual_seed(12345)

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(2, 1))

    if algorithm == "dp-srm":
        data = (torch.zeros(mechanism.n, 2), torch.full((mechanism.n,), 1e6))
        return (lambda s: O.DPSRM(model(), O.squared_loss, data, mechanism, noise, lr=0.1, seed=s)), up, down, 0
    if algorithm == "clipd2p":
        J = mechanism.samples_per_node
        nodes = [(torch.zeros(J, 2), torch.full((J,), 1e6))] + \
            [(torch.randn(J, 2, generator=g), torch.randn(J, generator=g)) for _ in range(3)]
        return (lambda s: O.ClipD2P(model(), O.squared_loss, nodes, mechanism, noise, C=1.0, lr=0.1, seed=s)), \
            up, down, 0
    shards = [(torch.randn(mechanism.n_min, 2, generator=g), torch.randn(mechanism.n_min, generator=g))
              for _ in range(mechanism.clients)]
    build = lambda s: O.DIFF2BVR(model(), O.squared_loss, shards, mechanism, noise, C1=1.0, C2=1.0,  # noqa: E731
                                 lr=0.1, seed=s)
    return build, alternating(3, 1e6), alternating(3, 1e6, sign=-1.0), 0
