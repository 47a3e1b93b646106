"""Check anyone's private step (:mod:`.contract`: a step written by dpcalib's engine, by Opacus, or by
the user): the record probe, the noise test, an audit and the sampler test.  The checks see one release
at a time (white box): they cannot see what happens across steps (error feedback, momentum) except
through what one release exposes.

**The checks**: :func:`probe_step` (one record removed, added -- a canary whose features are a
record's times +-1e3, whose gradient reaches any clip norm -- or replaced -- by another record,
the canary, an all-zero one -- moves the noiseless release by at most the claimed sensitivity),
:func:`noise_test_step` (the released noise against the claimed std: chi-square interval on the std
ratio, Kolmogorov-Smirnov, independence of draws from different generators), :func:`audit_step` (many
independent releases on two neighbouring batches -> a lower bound on eps with 95 % confidence against
the claimed eps of one release), :func:`sampler_test` (the batch sizes a loader really produces
against what the accounting assumes), and :func:`check_step` (the first three in one report).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from ...accountant.validation import InputError, integer
from ...mechanisms.shape import BALLS_IN_BINS, POISSON, SHUFFLE
from ..algorithms.noise import Release
from ..randomness import choose_seed
from .bounds import CONFIDENCE
from .contract import PrivateStep, StepClaim
from .noise_tests import noise_ks_test, noise_std_test
from .probe import measure
from .scores import epsilon_from_scores

__all__ = []

#: the probe's added canaries: a record's features times these (their gradients' norms sweep
#: orders of magnitude, so that some lands near any clip norm and some far above it)
CANARY_SCALES = (1e3, -1e3, 1e2, -1e2, 10.0, -10.0, 3.0, -3.0, 0.3, -0.3, 0.1, -0.1, 0.03, 0.01)


def _check_step(step) -> None:
    if not isinstance(step, PrivateStep):
        raise InputError(f"step={type(step).__name__} is not allowed: expected a PrivateStep (FunctionStep, "
                         "EngineStep, OpacusStep).")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def _rows(batch) -> int:
    return int(batch[0].shape[0])


def _without(batch, i: int):
    keep = [j for j in range(_rows(batch)) if j != i]
    return tuple(t[keep] for t in batch)


def _replaced(batch, i: int, record):
    out = tuple(t.clone() for t in batch)
    for t, v in zip(out, record):
        t[i] = v
    return out


def _neighbours(batch, i: int, relation: str) -> dict:
    """name -> (neighbouring batch, claim multiplier) of record ``i`` of ``batch``."""
    x = batch[0]
    j = (i + 1) % _rows(batch)
    records = {"another record": tuple(t[j] for t in batch)}
    if x.is_floating_point():
        records["features x 1e3"] = (x[i] * 1e3,) + tuple(t[i] for t in batch[1:])
        records["all-zero record"] = (torch.zeros_like(x[i]),) + tuple(t[i] for t in batch[1:])
    replace = 2.0 if relation == "add/remove" else 1.0
    out = {f"{name} (replaced)": (_replaced(batch, i, r), replace) for name, r in records.items()}
    if relation == "add/remove":
        out["removed"] = (_without(batch, i), 1.0)
        if x.is_floating_point():      # canaries whose gradients sweep the norms around any clip, added
            for scale in CANARY_SCALES:
                extra = (x[i] * scale,) + tuple(t[i] for t in batch[1:])
                out[f"features x {scale:g} added"] = (tuple(torch.cat([t, v[None]]) for t, v in zip(batch, extra)), 1.0)
    return out


@dataclass(frozen=True)
class ProbeResult:
    """The worst move of the noiseless release over its claim, per neighbour.

    Attributes:
        worst_ratio: the largest move / claim over the records and neighbours probed, >= 0 (inf
            when a claim of 0 is broken).
        rows: one dict per neighbour: ``record``, ``neighbour``, ``move``, ``claim``, ``ratio``.
        tolerance: the relative tolerance of the verdict.
    """

    worst_ratio: float
    rows: list = field(repr=False)
    tolerance: float

    @property
    def passed(self) -> bool:
        """Is ``worst_ratio <= 1 + tolerance``?"""
        return self.worst_ratio <= 1.0 + self.tolerance


def probe_step(step: PrivateStep, batch, *, records=(0,), tolerance: float = 1e-5) -> ProbeResult:
    """One record removed or replaced moves the noiseless release by at most the claimed
    sensitivity (x2 for a replacement under add/remove), up to ``tolerance`` relative plus the
    release's float rounding: the record probe's one comparison (:func:`~.probe.measure`, its
    :data:`~.probe.SLACK_ULPS` ulps of the two releases' norms), the ratio taken net of that rounding.

    Args:
        step: the step under test (a :class:`PrivateStep`).
        batch: the batch, a tuple of tensors with one row per record (e.g. ``(x, y)``).
        records: the indices of the records probed.
        tolerance: the relative tolerance, >= 0.

    Returns:
        A :class:`ProbeResult`.

    Raises:
        InputError: if ``step`` is not a PrivateStep.
    """
    _check_step(step)
    c = step.claim
    base = step.release(batch, noise=False, generator=_gen(0))
    eps = torch.finfo(batch[0].dtype if batch[0].is_floating_point() else torch.float32).eps
    rows, worst = [], 0.0
    for i in records:
        for name, (nb, mult) in _neighbours(batch, int(i), c.relation).items():
            m = measure(base, step.release(nb, noise=False, generator=_gen(0)), mult * c.sensitivity, eps)
            rows.append({"record": int(i), "neighbour": name, "move": m.move, "claim": m.claim, "ratio": m.net_ratio})
            worst = max(worst, m.net_ratio)
    return ProbeResult(worst, rows, float(tolerance))


@dataclass(frozen=True)
class IndependenceTest:
    """Noise draws from different generators are independent: ``z`` is ``sum_{i<j} <n_i, n_j> /
    std^2`` over its standard deviation ``sqrt(d k (k - 1) / 2)`` (about N(0, 1) for independent
    isotropic draws; noise drawn once and reused gives ``z ~ sqrt(d k (k - 1) / 2)``).

    Attributes:
        z: the standardised cross-product statistic.
        p_value: its two-sided normal p-value, in [0, 1].
        level: the test's level: flagged below it.
    """

    z: float
    p_value: float
    level: float

    @property
    def passed(self) -> bool:
        """Is ``p_value >= level``?"""
        return self.p_value >= self.level


def noise_test_step(step: PrivateStep, batch, *, draws: int = 20, seed: int | None = None, level: float = 1e-3):
    """``(std test, KS test, independence test)`` of the released noise -- release minus the
    noiseless release on the same batch, from ``draws`` generators -- against the claimed std.

    Args:
        step: the step under test (a :class:`PrivateStep`).
        batch: the batch, a tuple of tensors with one row per record (e.g. ``(x, y)``).
        draws: the number of noisy releases, >= 1 (>= 2 for the independence test to run).
        seed: the seed of the first draw's generator (draw k: ``seed + k``); None (the default): a fresh one
            from the operating system's entropy (:func:`check_step` records the seed it passes).
        level: the tests' level, in (0, 1).

    Returns:
        ``(NoiseStdTest, NoiseKSTest, IndependenceTest)``.

    Raises:
        InputError: if ``step`` is not a PrivateStep, ``draws`` is not an integer >= 1 or ``seed`` is not None or an
            integer >= 0.
    """
    from scipy import stats

    _check_step(step)
    draws = integer(draws, "draws", 1)
    seed = choose_seed(seed)
    base = step.release(batch, noise=False, generator=_gen(0))
    std = step.claim.noise_std
    noise = [step.release(batch, noise=True, generator=_gen(seed + k)) - base for k in range(draws)]
    rel = [Release(k, "step", std, step.claim.sensitivity, step.claim.relation, v) for k, v in enumerate(noise)]
    k, dim = len(noise), noise[0].numel()
    if std > 0 and k > 1:
        total = noise[0] * 0.0
        cross = 0.0
        for v in noise:
            cross += float(total @ v)
            total = total + v
        z = cross / (std * std) / math.sqrt(dim * k * (k - 1) / 2.0)
        ind = IndependenceTest(z, float(2.0 * stats.norm.sf(abs(z))), float(level))
    else:
        ind = IndependenceTest(0.0, 1.0, float(level))
    return noise_std_test(rel, level), noise_ks_test(rel, level), ind


def audit_step(step: PrivateStep, batch, *, delta: float, runs: int = 1000, record: int = 0, seed: int | None = None,
               confidence: float = CONFIDENCE):
    """Many independent releases on the batch without record ``record`` (add/remove; replace-one: the
    record replaced by an all-zero one) and with it; score: the released value's projection on the
    direction between the two noiseless releases, as the log-likelihood ratio of the claimed
    Gaussian noise.  -> :class:`~.scores.ScoresAudit` against the claimed eps of one release.

    Args:
        step: the step under test (a :class:`PrivateStep`).
        batch: the batch, a tuple of tensors with one row per record (e.g. ``(x, y)``).
        delta: the delta of the eps bound, in (0, 1).
        runs: the number of releases on each of the two batches.
        record: the index of the record removed (or zeroed).
        seed: the seed of the first release's generator; None (the default): a fresh one from the operating
            system's entropy, recorded on the result.
        confidence: the confidence of the lower bound, in (0, 1).

    Returns:
        A :class:`~dpcalib.optim.audit.scores.ScoresAudit` (its ``seed``: the seed used).

    Raises:
        InputError: if ``step`` is not a PrivateStep or ``seed`` is not None or an integer >= 0.
    """
    _check_step(step)
    seed = choose_seed(seed)
    c = step.claim
    with_r = batch
    without = _without(batch, record) if c.relation == "add/remove" else _replaced(
        batch, record, (torch.zeros_like(batch[0][record]),) + tuple(t[record] for t in batch[1:]))
    r1 = step.release(with_r, noise=False, generator=_gen(0))
    r0 = step.release(without, noise=False, generator=_gen(0))
    d = r1 - r0
    gap = float(d.norm())
    u = d / gap if gap > 0 else d
    sigma = c.noise_std if c.noise_std > 0 else 1.0

    def score(b, base, k):
        proj = float((step.release(b, noise=True, generator=_gen(seed + k)) - r0) @ u)
        return (proj * gap - 0.5 * gap * gap) / (sigma * sigma)

    s_in = [score(with_r, r1, 2 * k) for k in range(int(runs))]
    s_out = [score(without, r0, 2 * k + 1) for k in range(int(runs))]
    return replace(epsilon_from_scores(s_in, s_out, delta=delta, confidence=confidence,
                                       claimed_epsilon=c.epsilon(delta), statistic="llr"), seed=seed)


@dataclass(frozen=True)
class SamplerReport:
    """The batch sizes a loader produced against the claimed sampling.

    Attributes:
        claimed: the claimed sampling (one of :data:`~dpcalib.optim.audit.contract.SAMPLINGS`).
        sizes: the batch sizes observed.
        p_value: the chi-square p-value (Poisson, balls-in-bins), or 1.0 / 0.0 for a fixed size
            that held / did not.
        passed: the verdict.
        note: a one-line explanation.
    """

    claimed: str
    sizes: list = field(repr=False)
    p_value: float
    passed: bool
    note: str

    def text(self) -> str:
        """One line: the verdict and the note.

        Returns:
            ``"sampler: ok (...)"`` or ``"sampler: FLAGGED (...)"``.
        """
        return f"sampler: {'ok' if self.passed else 'FLAGGED'} ({self.note})"


def sampler_test(data_loader, claim: StepClaim, *, n: int | None = None, batches: int = 500, level: float = 1e-3,
                 delta: float = 1e-5) -> SamplerReport:
    """The sizes of ``batches`` batches of ``data_loader`` against ``claim``'s sampling: Poisson at
    ``sample_rate`` (a chi-square test against Binomial(n, q), which fixed-size or shuffled batches
    fail: their sizes do not vary; balls-in-bins batches at ``q = 1/t`` have these sizes too), or fixed
    size ``batch_size``.  A flagged Poisson claim prints
    the shuffle bracket of the same run beside Poisson's eps (what a shuffled loader really spends).

    Args:
        data_loader: an iterable of batches (a batch, or a tuple / list whose first item has one row per record).
        claim: the :class:`StepClaim` whose sampling is tested.
        n: the number of records; None for ``len(data_loader.dataset)``.
        batches: the number of batch sizes to collect (the loader is iterated again as needed).
        level: the chi-square test's level, in (0, 1).
        delta: the delta of the eps comparison printed for a flagged Poisson claim, in (0, 1).

    Returns:
        A :class:`SamplerReport`.

    Raises:
        InputError: if the loader produces no batch, ``n`` is not an integer >= 1 (or None for a loader
            without a sized ``dataset``), or the claim lacks the ``sample_rate`` or ``batch_size`` its
            sampling needs.
    """
    from scipy import stats

    if n is None:
        ds = getattr(data_loader, "dataset", None)
        if ds is None or not hasattr(ds, "__len__"):
            raise InputError("n=None is not allowed: expected the number of records, an integer >= 1 (the loader has "
                             "no dataset whose length would give it).")
        n = len(ds)
    n = integer(n, "n", 1)
    sizes = []
    while len(sizes) < batches:
        before = len(sizes)
        for b in data_loader:
            x = b[0] if isinstance(b, (list, tuple)) else b
            sizes.append(int(x.shape[0]))
            if len(sizes) >= batches:
                break
        if len(sizes) == before:
            raise InputError("data_loader is not allowed: it produced no batch.")
    if claim.sampling in (POISSON, BALLS_IN_BINS):
        q = claim.sample_rate
        if q is None:
            raise InputError(f"claim.sample_rate is required to test a {claim.sampling} claim.")
        hi = int(stats.binom.ppf(1 - 1e-6, n, q)) + 1
        lo = int(stats.binom.ppf(1e-6, n, q))
        k = list(range(lo, hi + 1))
        expected = [stats.binom.pmf(v, n, q) * len(sizes) for v in k]
        expected[0] += stats.binom.cdf(lo - 1, n, q) * len(sizes)
        expected[-1] += stats.binom.sf(hi, n, q) * len(sizes)
        observed = [sum(1 for s in sizes if s == v) for v in k]
        observed[0] += sum(1 for s in sizes if s < lo)
        observed[-1] += sum(1 for s in sizes if s > hi)
        # pool the sparse cells (expected < 5) into their neighbours, as a chi-square test needs
        obs, exp, acc_o, acc_e = [], [], 0.0, 0.0
        for o, e in zip(observed, expected):
            acc_o, acc_e = acc_o + o, acc_e + e
            if acc_e >= 5.0:
                obs.append(acc_o)
                exp.append(acc_e)
                acc_o, acc_e = 0.0, 0.0
        if acc_e > 0 and obs:
            obs[-1] += acc_o
            exp[-1] += acc_e
        p = float(stats.chisquare(obs, [e * sum(obs) / sum(exp) for e in exp]).pvalue) if len(obs) > 1 else 0.0
        passed = p >= level
        note = f"{'Poisson' if claim.sampling == POISSON else BALLS_IN_BINS}(q = {q:g}) claimed; sizes mean {sum(sizes) / len(sizes):.4g} (expected {n * q:.4g}), " \
               f"{len(set(sizes))} distinct, chi-square p = {p:.3g}"
        if not passed and len(set(sizes)) == 1 and claim.noise_std > 0 and claim.sensitivity > 0:
            from ...mechanisms import DPSGD

            b = sizes[0]
            z = claim.noise_std / claim.sensitivity
            steps = -(-n // b)
            shuffled = DPSGD(sampling=SHUFFLE, n=n, batch_size=b, epochs=1).epsilon_bracket(delta, z)
            poisson = DPSGD(b / n, steps).epsilon(delta, z).epsilon
            note += (f"; every batch has {b} records: fixed-size or shuffled batches, not Poisson.  One epoch of "
                     f"{steps} such batches at noise {z:.4g} spends eps in [{shuffled.lower:.4g}, "
                     f"{shuffled.upper:.4g}] (shuffle bracket, delta {delta:g}), not Poisson's {poisson:.4g}")
        return SamplerReport(claim.sampling, sizes, p, passed, note)
    b = claim.batch_size
    if b is None:
        raise InputError(f"claim.batch_size is required to test a {claim.sampling} claim.")
    bad = [s for s in sizes if s != b and not (claim.sampling == SHUFFLE and s == n % b)]
    return SamplerReport(claim.sampling, sizes, 0.0 if bad else 1.0, not bad,
                         f"{claim.sampling} batches of {b} claimed; {len(bad)} of {len(sizes)} batches differ")


@dataclass(frozen=True)
class StepReport:
    """:func:`check_step`'s verdicts: the probe, the noise tests and (with ``runs``) the audit.

    Attributes:
        probe: the :class:`ProbeResult`.
        noise_std: the :class:`~dpcalib.optim.audit.noise_tests.NoiseStdTest`.
        noise_ks: the :class:`~dpcalib.optim.audit.noise_tests.NoiseKSTest`.
        noise_independence: the :class:`IndependenceTest`.
        audit: the :class:`~dpcalib.optim.audit.scores.ScoresAudit`, or None without ``runs``.
        claimed_epsilon: the claimed eps of one release at ``delta``.
        delta: the delta of the claim and the audit.
        seed: the seed of the noise tests' draws (the audit's is ``seed + 1``); passed back to
            :func:`check_step`, it repeats the checks.
    """

    probe: ProbeResult
    noise_std: object
    noise_ks: object
    noise_independence: IndependenceTest
    audit: object | None
    claimed_epsilon: float
    delta: float
    seed: int | None = None

    @property
    def flagged(self) -> list:
        """One line per check that failed (an empty list when all passed)."""
        out = []
        if not self.probe.passed:
            out.append(f"probe: a record moved the release by {self.probe.worst_ratio:.6g} x its claimed sensitivity")
        if not self.noise_std.passed:
            lo, hi = self.noise_std.ratio_interval
            out.append(f"noise: std / claimed std in [{lo:.4g}, {hi:.4g}] (p = {self.noise_std.p_value:.3g})")
        if not self.noise_ks.passed:
            pooled = self.noise_ks.pooled
            out.append(f"noise: not Gaussian at the claimed std (smallest KS p = {self.noise_ks.min_p:.3g} of "
                       f"{len(self.noise_ks.p_values)}" + ("" if pooled is None else
                       f"; pooled KS distance {pooled.statistic:.4g} over {pooled.draws} draws, p = {pooled.p_value:.3g}")
                       + ")")
        if not self.noise_independence.passed:
            out.append(f"noise: draws from different generators are correlated (z = {self.noise_independence.z:.4g})")
        if self.audit is not None and self.audit.verdict == "violation":
            out.append(f"audit: eps >= {self.audit.epsilon_lo:.6g} > claimed {self.claimed_epsilon:.6g}")
        return out

    @property
    def passed(self) -> bool:
        """Did every check pass?"""
        return not self.flagged

    def text(self) -> str:
        """The report in a few lines, ending with the verdict.

        Returns:
            The text, lines separated by newlines.
        """
        lines = [f"probe: worst move {self.probe.worst_ratio:.8g} of the claim (tolerance {self.probe.tolerance:g})",
                 f"noise: std ratio {self.noise_std.ratio:.6g} in [{self.noise_std.ratio_interval[0]:.4g}, "
                 f"{self.noise_std.ratio_interval[1]:.4g}], smallest KS p = {self.noise_ks.min_p:.3g}, independence z = "
                 f"{self.noise_independence.z:.3g}"]
        pooled = self.noise_ks.pooled
        if pooled is not None:
            lines.append(f"noise: pooled KS distance {pooled.statistic:.4g} over {pooled.draws} draws (p = "
                         f"{pooled.p_value:.3g}; flags any noise at distance >= {pooled.detectable:.3g} from the claimed "
                         f"normal with probability {pooled.power:g})")
        if self.audit is not None:
            lines.append("audit: " + self.audit.text())
        lines.append("verdict: " + ("passed" if self.passed else "FLAGGED -- " + "; ".join(self.flagged)))
        return "\n".join(lines)


def check_step(step: PrivateStep, batch, *, delta: float = 1e-5, records=(0,), draws: int = 20, runs: int = 0,
               tolerance: float = 1e-5, seed: int | None = None) -> StepReport:
    """The probe, the noise test and (``runs`` > 0) the audit of one step on ``batch``.

    Args:
        step: the step under test (a :class:`PrivateStep`).
        batch: the batch, a tuple of tensors with one row per record (e.g. ``(x, y)``).
        delta: the delta of the claimed eps and the audit, in (0, 1).
        records: the indices of the records probed (the first one is audited).
        draws: the number of noisy releases of the noise tests.
        runs: the number of audit releases per batch; 0 for no audit.
        tolerance: the probe's relative tolerance, >= 0.
        seed: the seed of the noise tests (the audit's: ``seed + 1``); None (the default): a fresh one from the
            operating system's entropy, recorded on the report.

    Returns:
        A :class:`StepReport`.

    Raises:
        InputError: if ``step`` is not a PrivateStep, or ``seed`` is not None or an integer >= 0 (raised by the
            checks).
    """
    seed = choose_seed(seed)
    probe = probe_step(step, batch, records=records, tolerance=tolerance)
    std, ks, ind = noise_test_step(step, batch, draws=draws, seed=seed)
    audit = audit_step(step, batch, delta=delta, runs=runs, record=int(records[0]), seed=seed + 1) if runs else None
    return StepReport(probe, std, ks, ind, audit, step.claim.epsilon(delta), delta, seed)
