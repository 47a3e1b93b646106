"""White-box privacy audits of the calibrated noise: lower bounds on eps.

They run the real optimizers twice in lockstep (as the record probe does, :mod:`.probe`): a **leader** on dataset D (one record replaced
by a gradient canary A) and a **twin** on the neighbouring dataset D' (canary B) whose noise
source is a :class:`~dpcalib.optim.audit.replay.ReplaySource`: the twin receives the leader's releases
instead of adding its own noise, so it walks the same public history (same sampling, same
iterates) while its data and hidden state (DIFF2 differences, DP-SRM momentum, DiceSGD error
feedback) are its own.  At every release this gives both noiseless queries ``q_D``, ``q_D'`` and
both requested stds at the state actually visited.

* **Privacy audit**: the log-likelihood ratio ``S = sum_r log N(o_r; q_D, s_D^2) / N(o_r; q_D', s_D'^2)``
  of all releases, N runs with D the truth and N with D' the truth; 95 %-confidence lower bounds on
  eps from Clopper-Pearson intervals on the false positive / negative rates at thresholds fixed
  before looking (from the claimed GDP mu and N): the direct bound and the GDP bound.  For a
  full-batch Gaussian mechanism and a canary at the claimed sensitivity, ``S`` is exactly
  N(+mu^2/2, mu^2) vs N(-mu^2/2, mu^2).  The LLR conditions on the sampling, so the audit is valid
  for claims that do not rely on amplification by sampling (full batches, J = 1, DiceSGD's
  assumption-free accountant); see docs/audit.md.
* **Trade-off curve**: measured (FPR, FNR) regions against the claimed f-DP curve
  (:func:`curve_check`, :func:`~dpcalib.optim.audit.figures.plot_audit`).
* **Sampled claims**: Poisson (:func:`audit_poisson`), fixed-size without replacement under
  replace-one (:func:`audit_wor`, the coupling :class:`WORCoupling`); one training run with many
  canaries (:func:`one_run_audit`, Steinke, Nasr & Jagielski 2023).
* Batched runs of DP-GD / DIFF2-GD: :mod:`dpcalib.optim.audit.batched` (``audit(..., batch=...)``).

**Seeds.** Every driver takes ``seed``, default None: a fresh seed drawn from the operating
system's entropy (:func:`~dpcalib.optim.randomness.choose_seed`), so that a second audit is a
new experiment, as ``dpcalib audit`` without ``--seed``.  The seed used is recorded on the result
(``report.seed``, ``as_dict()["seed"]``): passed back as ``seed=``, it repeats the audit number for
number.  The runs simulate the adversary, who knows the seed, so it is no secret; tests and
recorded results give it.

This module holds the drivers and the reports; the lockstep runs and likelihood ratios are
:mod:`dpcalib.optim.audit.lockstep`, the statistics :mod:`dpcalib.optim.audit.bounds`, the
standard harnesses :mod:`dpcalib.optim.audit.harnesses` (all re-exported by
:mod:`dpcalib.optim.audit`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
from ...accountant.validation import InputError
from ...accountant import TradeOffCurve, gdp_mu

from .bounds import (CONFIDENCE, AuditReport, curve_check, epsilon_lower_bounds, gdp_thresholds, heldout_curve_check,
                     heldout_lower_bound, one_run_epsilon)
from .batched import batched_llr, supports_batching
from .canaries import ManyCanaries
from ...mechanisms.registry import names
from .lockstep import follow_run, lead_run, logaddexp, pair_llr, release_llr, wor_llr, zero
from ..data.sampling import ForcedRecord
from ..randomness import choose_seed

__all__ = []


DEFAULT_BATCH = 4096


def _check_runs(runs, low: int) -> int:
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < low:
        raise InputError(f"runs={runs!r} is not allowed: expected an integer >= {low}.")
    return runs


def _check_claim(claimed_epsilon, delta) -> tuple[float, float]:
    """``(eps, delta)`` of the claim an audit tests, validated."""
    e = float(claimed_epsilon)
    if not e > 0 or math.isinf(e):
        raise InputError(f"claimed_epsilon={claimed_epsilon!r} is not allowed: expected a finite number > 0.")
    d = float(delta)
    if not 0 < d < 1:
        raise InputError(f"delta={delta!r} is not allowed: expected a number in (0, 1).")
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


class LLRSamples(tuple):
    """``(S under D, S under D')`` of :func:`llr_samples`: a tuple of the two lists, which also
    records the ``seed`` of its first run (``llr_samples(..., seed=samples.seed)`` draws them again).

    Attributes:
        seed: the first run's seed.
    """

    def __new__(cls, s_d, s_p, seed: int):
        out = super().__new__(cls, (s_d, s_p))
        out.seed = int(seed)
        return out

    def __getnewargs__(self):
        return self[0], self[1], self.seed


def llr_samples(build, canary_d, canary_dprime, *, runs: int, seed: int | None = None, holder: int = 0,
                batch: int | str | None = "auto", progress: bool | None = None) -> LLRSamples:
    """``(S under D, S under D')``: the transcript log-likelihood ratio ``log p_D - log p_D'`` of
    ``runs`` runs with D the truth (seeds ``seed + 2 i``) and ``runs`` with D' (``seed + 2 i + 1``).

    ``batch``: ``None`` -- one leader/twin pair after another (the oracle); an integer -- that many
    runs stacked along a tensor dimension (:mod:`dpcalib.optim.audit.batched`; DP-GD and DIFF2-GD), same value
    per run; ``"auto"`` -- batched (4096 runs per batch) where the optimizer supports it.

    Args:
        build: ``build(seed)`` -> a fresh optimizer (the same configuration every call).
        canary_d: the canary of D (``canary(j)`` callable or flat tensor).
        canary_dprime: the canary of D'.
        runs: runs per dataset, an integer >= 1.
        seed: the first run's seed, an integer >= 0; None (the default): a fresh seed from the
            operating system's entropy, recorded as the result's ``seed`` (see **Seeds** above).
        holder: the canaries' holder.
        batch: None, an integer >= 1, or ``"auto"`` (see above).
        progress: show a progress bar (None: tqdm's default).

    Returns:
        An :class:`LLRSamples`: ``(list of S under D, list of S under D')``, ``runs`` floats each
        (possibly +-inf), with the seed used as its ``seed``.

    Raises:
        InputError: if ``runs`` is not an integer >= 1 or ``seed`` is neither None nor an integer >= 0.
    """
    _check_runs(runs, 1)
    seed = choose_seed(seed)
    if batch == "auto":
        batch = DEFAULT_BATCH if supports_batching(build(seed)) else None
    if batch is not None:
        seeds = [seed + i for i in range(2 * runs)]
        s = batched_llr(build, canary_d, canary_dprime, seeds, [i % 2 == 0 for i in range(2 * runs)],
                        holder=holder, batch=batch, progress=progress)
        return LLRSamples(s[0::2], s[1::2], seed)
    s_d, s_p = _paired_runs(lambda sd, truth: pair_llr(build, sd, canary_d, canary_dprime, truth, holder), runs,
                            seed, "audit", progress)
    return LLRSamples(s_d, s_p, seed)


def audit(build, canary_d, canary_dprime=None, *, runs: int, claimed_epsilon: float, delta: float,
          rate: float | None = None, holder: int = 0, gdp_exact: bool | None = None, confidence: float = CONFIDENCE,
          progress: bool | None = None, seed: int | None = None, name: str | None = None,
          batch: int | str | None = "auto",
          curve: TradeOffCurve | None = None) -> AuditReport:
    """The many-run likelihood-ratio audit: ``runs`` runs with D the truth and ``runs`` with D';
    returns the eps lower bounds, the measured trade-off against the claimed curve, and the verdict
    against ``claimed_epsilon``.

    **Conditioned on the sampling** (``rate`` None): D holds canary ``canary_d``, D' ``canary_dprime``;
    the statistic is the transcript LLR (:func:`llr_samples`; ``batch``: batched where supported,
    ``None`` one pair at a time).  Its five thresholds are fixed from the claimed ``mu`` before the
    samples are looked at: ``S = k mu``, k in {-1, -1/2, 0, 1/2, 1} (T = S/mu + mu/2 at mu/2 + k).

    **Poisson-sampled** (``rate`` given, add/remove): D holds the canary record ``canary_d``, D' does
    not (``canary_dprime`` None).  The canary's inclusion is the mechanism's secret, so two followers
    walk the leader's public history, one with the canary forced into every sample (``q_in``) and
    one without it (``q_out``); per release ``log((1 - rate) + rate * p_in(o)/p_out(o))``, the exact
    LLR of a Poisson-subsampled Gaussian step, summed over releases (valid for any optimizer; exact
    when the steps carry no hidden record-dependent state).  Thresholds from a held-out half; the
    direct bound only; runs one after another (``batch`` is not used).

    ``curve``: the claimed trade-off curve; default ``mu``-GDP when the claim is exactly GDP
    (``gdp_exact``), else the curve the optimizer's own accountant certifies for a complete run
    (:func:`spent_tradeoff`; the stated (eps, delta) where it has none) -- the default of every audit.

    Args:
        build: ``build(seed)`` -> a fresh optimizer (the same configuration every call).
        canary_d: the canary of D (``canary(j)`` callable or flat tensor), record 0 of the ``holder``.
        canary_dprime: the canary of D'; None with ``rate`` (D' is D without the canary).
        runs: runs per dataset, an integer >= 1 (>= 2 with ``rate``: half choose the threshold).
        claimed_epsilon: the claimed eps, finite and > 0.
        delta: the delta of the claim, in (0, 1).
        rate: the Poisson sampling rate, in (0, 1], or None for the audit conditioned on the sampling.
        holder: the canaries' holder.
        gdp_exact: is the claim exactly GDP (a full-batch Gaussian composition)?  The GDP bound
            counts only then.  None: True without ``rate``, False with it.
        confidence: the confidence of the bounds, in (0, 1).
        progress: show a progress bar (None: tqdm's default, shown on a terminal).
        seed: the first run's seed (run i: ``seed + 2 i`` with D the truth, ``seed + 2 i + 1`` with D'),
            an integer >= 0; None (the default): a fresh seed from the operating system's entropy,
            recorded in the report (``seed``; see **Seeds** above).
        name: the algorithm's name in the report; None for the optimizer's ``name``.
        batch: None, an integer >= 1, or ``"auto"`` (see :func:`llr_samples`); not used with ``rate``.
        curve: the claimed :class:`~dpcalib.accountant.TradeOffCurve`, or None for the default above.

    Returns:
        An :class:`~dpcalib.optim.audit.bounds.AuditReport` (with ``rate``: the direct bound only),
        its ``seed`` the seed used.

    Raises:
        InputError: if ``runs`` is not an integer >= 1 (>= 2 with ``rate``), ``rate`` is outside
            (0, 1], ``canary_dprime`` is missing without ``rate`` or given with it, ``gdp_exact`` is
            True with ``rate``, ``claimed_epsilon`` is not finite and > 0, ``delta`` is outside (0, 1),
            or ``seed`` is neither None nor an integer >= 0.
    """
    seed = choose_seed(seed)
    if rate is not None:
        return _audit_poisson(build, canary_d, canary_dprime, rate=rate, runs=runs, claimed_epsilon=claimed_epsilon,
                              delta=delta, holder=holder, gdp_exact=gdp_exact, confidence=confidence,
                              progress=progress, seed=seed, name=name, curve=curve)
    _check_runs(runs, 1)
    if canary_dprime is None:
        raise InputError("canary_dprime=None is not allowed: expected the canary of D' (or rate= for a "
                         "Poisson-sampled audit, whose D' is D without the canary).")
    e, d = _check_claim(claimed_epsilon, delta)
    gdp_exact = True if gdp_exact is None else bool(gdp_exact)
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
                       details, check, scores=(s_d, s_p), seed=seed)


def spent_tradeoff(build, seed: int | None = None) -> TradeOffCurve:
    """The trade-off curve the optimizer's own accountant certifies for one complete run (exact GDP
    for full-batch Gaussian compositions, else the PLD profile's envelope): the claim a curve check
    tests when the caller gives none.

    Args:
        build: ``build(seed)`` -> a fresh optimizer (the same configuration every call).
        seed: the run's seed, an integer >= 0; None (the default): a fresh seed from the operating
            system's entropy, recorded on the curve (see **Seeds** above).

    Returns:
        The :class:`~dpcalib.accountant.TradeOffCurve` of the complete run, the run's seed as its
        ``seed`` attribute.

    Raises:
        InputError: if ``seed`` is neither None nor an integer >= 0.
    """
    from ...accountant import claimed_tradeoff

    seed = choose_seed(seed)
    spent = build(seed)
    spent.run(progress=False, log_every=spent.total_rounds)
    curve = claimed_tradeoff(spent.accountant())
    object.__setattr__(curve, "seed", seed)       # a frozen dataclass: the seed rides along, outside its fields
    return curve


def _default_curve(build, seed, e, d) -> TradeOffCurve:
    """Every audit's default claimed curve: :func:`spent_tradeoff`, or the (eps, delta) curve of the
    stated claim where the optimizer has no accountant of its own (AdaD2P: no finite guarantee, AdaD2P-E1)."""
    from ...mechanisms import NoPrivacyGuaranteeError

    try:
        return spent_tradeoff(build, seed)
    except NoPrivacyGuaranteeError:
        return TradeOffCurve.epsilon_delta(e, d)


def _heldout_report(build, seed, name, e, d, runs, scores, curve, confidence, statistic) -> AuditReport:
    """The report of an audit whose thresholds come from a held-out half (Poisson, without replacement)."""
    s_d, s_p = scores
    b = heldout_lower_bound(s_d, s_p, d, confidence)
    details = {"threshold_direct": b["threshold"], "fpr_direct": b["fpr"], "fnr_direct": b["fnr"],
               "statistic": statistic}
    if curve is None:
        curve = _default_curve(build, seed, e, d)
    check = heldout_curve_check(s_d, s_p, curve, confidence)
    return AuditReport(name or build(seed).name, e, d, runs, b["direct"], 0.0, gdp_mu(e, d), 0.0, False, details,
                       check, measured_runs=runs - runs // 2, scores=(s_d, s_p), seed=seed)


def _audit_poisson(build, canary, canary_dprime, *, rate, runs, claimed_epsilon, delta, holder, gdp_exact,
                   confidence, progress, seed, name, curve) -> AuditReport:
    """:func:`audit` with ``rate``: the Poisson mixture LLR (see there)."""
    _check_runs(runs, 2)
    q = float(rate)
    if not 0.0 < q <= 1.0:
        raise InputError(f"rate={rate!r} is not allowed: expected a number in (0, 1].")
    if canary_dprime is not None:
        raise InputError(f"canary_dprime={canary_dprime!r} is not allowed with rate: expected None (under Poisson "
                         "sampling D' is D without the canary record).")
    if gdp_exact:
        raise InputError("gdp_exact=True is not allowed with rate: a Poisson-subsampled claim is not exactly GDP.")
    e, d = _check_claim(claimed_epsilon, delta)
    dim = sum(p.numel() for p in build(seed).model.parameters())
    absent = zero(dim)
    log_keep = math.log1p(-q) if q < 1.0 else -math.inf

    def one(s, truth_has_canary):
        leader = lead_run(build, s, canary if truth_has_canary else absent, holder)
        f_in, f_out = follow_run(build, s, leader, canary, holder), follow_run(build, s, leader, absent, holder)
        f_in.sampler = ForcedRecord(holder, 0, present=True)      # record 0 (the canary) in every sample
        for _ in range(leader.total_rounds):
            leader.step()
            f_in.step()
            f_out.step()
        total = 0.0
        for x, a, b in zip(leader.privatizer.releases, f_in.privatizer.releases, f_out.privatizer.releases):
            o = x.released.detach().to("cpu", torch.float64)
            llr = release_llr(o, a.value, a.std, b.value, b.std)
            total += logaddexp(log_keep, math.log(q) + llr)
        return total

    scores = _paired_runs(one, runs, seed, "audit", progress)
    return _heldout_report(build, seed, name, e, d, runs, scores, curve, confidence,
                           "Poisson mixture LLR, held-out threshold")


def audit_poisson(build, canary, *, rate: float, runs: int, claimed_epsilon: float, delta: float,
                  confidence: float = CONFIDENCE, progress: bool | None = None, seed: int | None = None,
                  name: str | None = None, curve: TradeOffCurve | None = None) -> AuditReport:
    """:func:`audit` of a Poisson-sampled optimizer under add/remove (D: with the canary record, D':
    without): ``audit(build, canary, None, rate=rate, ...)``, kept for its name.

    Args:
        build: ``build(seed)`` -> a fresh optimizer (the same configuration every call).
        canary: the canary record's gradient (``canary(j)`` callable or flat tensor), record 0 of holder 0.
        rate: the Poisson sampling rate, in (0, 1].
        runs: runs per dataset, an integer >= 2 (half choose the threshold, half measure).
        claimed_epsilon: the claimed eps, finite and > 0.
        delta: the delta of the claim, in (0, 1).
        confidence: the confidence of the bounds, in (0, 1).
        progress: show a progress bar (None: tqdm's default, shown on a terminal).
        seed: the first run's seed (run i: ``seed + 2 i`` with D the truth, ``seed + 2 i + 1`` with D'),
            an integer >= 0; None (the default): a fresh seed from the operating system's entropy,
            recorded in the report (``seed``; see **Seeds** above).
        name: the algorithm's name in the report; None for the optimizer's ``name``.
        curve: the claimed :class:`~dpcalib.accountant.TradeOffCurve`; None for the curve the
            optimizer's own accountant certifies (:func:`spent_tradeoff`).

    Returns:
        An :class:`~dpcalib.optim.audit.bounds.AuditReport` (direct bound only), its ``seed`` the seed used.

    Raises:
        InputError: as :func:`audit` with ``rate``.
    """
    return audit(build, canary, None, rate=rate, runs=runs, claimed_epsilon=claimed_epsilon, delta=delta,
                 confidence=confidence, progress=progress, seed=seed, name=name, curve=curve)


# ---- one-run audit (Steinke, Nasr & Jagielski 2023) ------------------------------------------------
#: the norm of every one-run canary's gradient (far above any clip: it is clipped to exactly C)
CANARY_NORM = 1e6


@dataclass(frozen=True)
class OneRunReport:
    """The result of :func:`one_run_audit`.

    Attributes:
        algorithm: the audited algorithm's name.
        claimed_epsilon: the claimed eps.
        delta: the delta of the claim and the bound.
        canaries: the number of canaries m.
        included: how many canaries were records of the dataset.
        epsilon_lo: the eps lower bound: the largest over the guess counts tried (Bonferroni-corrected).
        guesses: one ``(k, r, correct, eps_lo at the corrected level)`` per guess count k.
        seed: the run's seed (passed back as ``seed=``, it repeats the audit).
    """
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
        """``"violation"`` when ``epsilon_lo`` exceeds the claim, else ``"consistent"``."""
        return "violation" if self.epsilon_lo > self.claimed_epsilon + 1e-9 else "consistent"

    def as_dict(self) -> dict:
        """The report as plain data.

        Returns:
            A dict of the fields (``seed`` included), ``verdict``, and ``guesses`` as a list of dicts.
        """
        return {"algorithm": self.algorithm, "claimed_epsilon": self.claimed_epsilon, "delta": self.delta,
                "canaries": self.canaries, "included": self.included, "epsilon_lo": self.epsilon_lo,
                "verdict": self.verdict, "guesses": [dict(zip(("k", "r", "correct", "epsilon_lo"), g))
                                                     for g in self.guesses], "seed": self.seed}


def one_run_audit(build, *, canaries: int, claimed_epsilon: float, delta: float, ks=None,
                  confidence: float = CONFIDENCE, seed: int | None = None, progress: bool | None = None,
                  name: str | None = None) -> OneRunReport:
    """One-run audit (Steinke, Nasr & Jagielski, NeurIPS 2023) of a Poisson-sampled optimizer
    (DP-SGD, DiceSGD): ONE training run with ``canaries`` = m gradient canaries, each a record of
    the dataset with probability 1/2; canary i's gradient is 1e6 along its own coordinate of the
    model (distinct coordinates: m <= number of parameters), so it is clipped to exactly C.  The
    auditor sees every release (white box) and scores canary i by the sum over releases of the
    Poisson-subsampled Gaussian LLR of the released value's coordinate (in vs out, at the claimed
    std and the canary's contribution; the optimal score of one canary); it guesses "in" for
    the k highest and "out" for the k lowest scores.  The eps lower bound is their Theorem 3
    (:func:`one_run_epsilon`), maximised over the guess counts ``ks`` (default m/20, m/10, m/5)
    with a Bonferroni correction (each k at
    ``1 - (1 - confidence)/len(ks)``), so the reported bound holds at ``confidence``.

    Args:
        build: ``build(seed)`` -> a fresh optimizer (the same configuration every call).
        canaries: the number of canaries m, an integer in [2, number of parameters].
        claimed_epsilon: the claimed eps, finite and > 0.
        delta: the delta of the claim, in (0, 1).
        ks: the guess counts, each in [1, m // 2]; None for the defaults.
        confidence: the confidence of the reported bound, in (0, 1).
        seed: the run's seed (it also draws the canaries' coordinates and inclusions), an integer
            >= 0; None (the default): a fresh seed from the operating system's entropy, recorded in
            the report (``seed``; see **Seeds** above).
        progress: show a progress bar (None: tqdm's default).
        name: the algorithm's name in the report; None for the optimizer's ``name``.

    Returns:
        A :class:`OneRunReport`, its ``seed`` the seed used.

    Raises:
        InputError: if the optimizer is not a Poisson-sampled one-dataset optimizer (DP-SGD,
            DiceSGD), ``canaries`` is not an integer, is out of range, or its gradients would need more than 1 GiB,
            ``ks`` is empty or out of range, ``claimed_epsilon`` is not finite and > 0, ``delta`` is
            outside (0, 1), or ``seed`` is neither None nor an integer >= 0.
    """
    import numpy as np

    seed = choose_seed(seed)
    opt = build(seed)
    d = sum(p.numel() for p in opt.model.parameters())
    if opt.name not in names(audit="one-run"):
        raise InputError(f"the optimizer ({opt.name}) is not allowed for a one-run audit: expected a Poisson-sampled "
                         "optimizer on one dataset (dp-sgd, dicesgd).")
    integral = isinstance(canaries, numbers.Integral) and not isinstance(canaries, bool)
    if not integral or not 2 <= canaries <= d:
        raise InputError(f"canaries={canaries!r} is not allowed: expected an integer in [2, {d}] (one coordinate "
                         "of the model per canary).")
    m = int(canaries)
    if m * d * 8 > 1 << 30:
        raise InputError(f"canaries={canaries!r} is not allowed with a model of {d} parameters: the canaries' "
                         f"gradients ({m} x {d} float64) would need more than 1 GiB.")
    e, dl = _check_claim(claimed_epsilon, delta)
    ks = [max(1, m // 20), max(1, m // 10), max(1, m // 5)] if ks is None else [int(k) for k in ks]
    if not ks or any(not 1 <= k <= m // 2 for k in ks):
        raise InputError(f"ks={ks!r} is not allowed: expected guess counts in [1, {m // 2}].")
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 7])
    coords = rng.permutation(d)[:m]
    included = rng.random(m) < 0.5
    grads = torch.zeros(m, d, dtype=torch.float64)
    grads[torch.arange(m), torch.as_tensor(coords)] = CANARY_NORM
    ManyCanaries(grads, torch.as_tensor(included)).install(opt)
    opt.privatizer.record, opt.privatizer.record_noise, opt.privatizer.record_values = True, False, True
    opt.run(progress=progress, log_every=opt.total_rounds)
    q, c = opt.sampled_record_signal(CANARY_NORM)
    scores = np.zeros(m)
    log_keep = math.log1p(-q) if q < 1.0 else -math.inf
    for rel in opt.privatizer.releases:
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


def audit_wor(build, canary_a, canary_b, *, runs: int, claimed_epsilon: float, delta: float, holder: int = 0,
              curve: TradeOffCurve | None = None, confidence: float = CONFIDENCE, progress: bool | None = None,
              seed: int | None = None, name: str | None = None) -> AuditReport:
    """Audit of a claim that relies on fixed-size sampling without replacement under replace-one
    (DP-SRM with b < n, DIFF2-BVR-L-SGD's local steps, ClipD2P with J > 1): D holds canary A as
    record 0 of the ``holder``, D' canary B.  Statistic: :func:`wor_llr`; direct eps bound and
    trade-off curve check with thresholds from a held-out half (:func:`heldout_lower_bound`,
    :func:`heldout_curve_check`).  ``curve``: the claimed trade-off curve; default that of every
    audit (:func:`audit`): the curve the optimizer's own accountant certifies for a complete run
    (:func:`spent_tradeoff`), the stated (eps, delta) where it has none.

    Args:
        build: ``build(seed)`` -> a fresh optimizer (the same configuration every call).
        canary_a: the canary of D (``canary(j)`` callable or flat tensor).
        canary_b: the canary of D'.
        runs: runs per dataset, an integer >= 2 (half choose the thresholds, half measure).
        claimed_epsilon: the claimed eps, finite and > 0.
        delta: the delta of the claim, in (0, 1).
        holder: the canaries' holder (whose samples are coupled).
        curve: the claimed :class:`~dpcalib.accountant.TradeOffCurve`; None for the default above.
        confidence: the confidence of the bounds, in (0, 1).
        progress: show a progress bar (None: tqdm's default, shown on a terminal).
        seed: the first run's seed (run i: ``seed + 2 i`` with D the truth, ``seed + 2 i + 1`` with D'),
            an integer >= 0; None (the default): a fresh seed from the operating system's entropy,
            recorded in the report (``seed``; see **Seeds** above).
        name: the algorithm's name in the report; None for the optimizer's ``name``.

    Returns:
        An :class:`~dpcalib.optim.audit.bounds.AuditReport` (direct bound only), its ``seed`` the seed used.

    Raises:
        InputError: if ``runs`` is not an integer >= 2, ``claimed_epsilon`` is not finite and > 0,
            ``delta`` is outside (0, 1), or ``seed`` is neither None nor an integer >= 0.
    """
    _check_runs(runs, 2)
    e, d = _check_claim(claimed_epsilon, delta)
    seed = choose_seed(seed)
    scores = _paired_runs(lambda sd, truth: wor_llr(build, sd, canary_a, canary_b, truth, holder), runs, seed,
                          "audit (w/o replacement)", progress)
    return _heldout_report(build, seed, name, e, d, runs, scores, curve, confidence,
                           "without-replacement mixture LLR (replace-one coupling), held-out thresholds")
