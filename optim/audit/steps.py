"""Check anyone's private step: the record probe, the noise test, an audit and the sampler test
for a step written by dpcalib's engine, by Opacus, or by the user.

**The contract** (:class:`PrivateStep`): ``release(batch, *, noise, generator)`` returns the value
one step releases on ``batch`` at the current parameters -- flat, what the noise was added to
(e.g. the noisy sum of clipped gradients) -- with the noise drawn from ``generator``
(``noise=False``: the noiseless value), and leaves the parameters and the step's own state as they
were; ``claim`` (:class:`StepClaim`) says what the step claims: the L2 sensitivity of that value
for one record under a neighbouring relation, the std of the noise, the batch sampling.  The
checks see one release at a time (white box): they cannot see what happens across steps (error
feedback, momentum) except through what one release exposes.

Adapters: :class:`FunctionStep` (a plain function), :class:`EngineStep` (the optimizer of
:class:`dpcalib.optim.PrivacyEngine`), :class:`OpacusStep` (Opacus's ``DPOptimizer`` as
``make_private`` returns it, through its ``pre_step``: clip, noise, scale).

**The checks**: :func:`probe_step` (one record removed, added -- a canary whose features are a
record's times +-1e3, whose gradient reaches any clip norm -- or replaced -- by another record,
the canary, an all-zero one -- moves the noiseless release by at most the claimed sensitivity), :func:`noise_test_step` (the released noise against the claimed std:
chi-square interval on the std ratio, Kolmogorov-Smirnov, independence of draws from different
generators), :func:`audit_step` (many independent
releases on two neighbouring batches -> a lower bound on eps with 95 % confidence against the
claimed eps of one release), :func:`sampler_test` (the batch sizes a loader really produces
against what the accounting assumes), and :func:`check_step` (the first three in one report).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from ...accountant import gdp_epsilon
from ...accountant.validation import InputError, integer
from ...mechanisms.shape import BALLS_IN_BINS, POISSON, SHUFFLE, WOR, SAMPLINGS as RUN_SAMPLINGS
from ..algorithms.noise import Release
from ..randomness import choose_seed
from .bounds import CONFIDENCE
from .noise_tests import noise_ks_test, noise_std_test
from .probe import measure
from .scores import epsilon_from_scores

__all__ = []

RELATIONS = ("add/remove", "replace-one")
SAMPLINGS = (*RUN_SAMPLINGS, "full batch")
#: the probe's added canaries: a record's features times these (their gradients' norms sweep
#: orders of magnitude, so that some lands near any clip norm and some far above it)
CANARY_SCALES = (1e3, -1e3, 1e2, -1e2, 10.0, -10.0, 3.0, -3.0, 0.3, -0.3, 0.1, -0.1, 0.03, 0.01)


@dataclass(frozen=True)
class StepClaim:
    """What a step claims about one release: ``sensitivity`` (L2, one record, under ``relation``),
    ``noise_std`` (per coordinate), and the sampling of its batches (``sample_rate`` for Poisson and
    for balls-in-bins -- ``1/t``, a record's chance to be in a given step --, ``batch_size`` for fixed-size
    or shuffled batches).

    Attributes:
        sensitivity: the claimed L2 sensitivity of one release to one record, finite and >= 0.
        noise_std: the per-coordinate noise std, finite and >= 0.
        relation: ``"add/remove"`` or ``"replace-one"``.
        sampling: one of :data:`SAMPLINGS` (``"poisson"``, ``"wor"``, ``"shuffle"``,
            ``"balls-in-bins"``, ``"full batch"``).
        sample_rate: the sampling rate, in (0, 1] (Poisson, balls-in-bins), or None.
        batch_size: the fixed batch size (``"wor"``, ``"shuffle"``), or None.

    Raises:
        InputError: if ``sensitivity`` or ``noise_std`` is not a finite number >= 0, ``relation`` or
            ``sampling`` is unknown, or a Poisson / balls-in-bins ``sample_rate`` is outside (0, 1].
    """

    sensitivity: float
    noise_std: float
    relation: str = "add/remove"
    sampling: str = POISSON
    sample_rate: float | None = None
    batch_size: int | None = None

    def __post_init__(self):
        for name in ("sensitivity", "noise_std"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0) or math.isinf(v):
                raise InputError(f"{name}={v!r} is not allowed: expected a finite number >= 0.")
        if self.relation not in RELATIONS:
            raise InputError(f"relation={self.relation!r} is not allowed: expected one of {', '.join(RELATIONS)}.")
        if self.sampling not in SAMPLINGS:
            raise InputError(f"sampling={self.sampling!r} is not allowed: expected one of {', '.join(SAMPLINGS)}.")
        if self.sampling in (POISSON, BALLS_IN_BINS) and self.sample_rate is not None \
                and not 0.0 < self.sample_rate <= 1.0:
            raise InputError(f"sample_rate={self.sample_rate!r} is not allowed: expected a number in (0, 1].")

    def epsilon(self, delta: float) -> float:
        """The claimed eps of one release given its batch (a Gaussian mechanism, no amplification by
        sampling: what a check that holds the batch fixed can test); inf without noise.

        Args:
            delta: the target delta, in (0, 1).

        Returns:
            The GDP eps at mu = sensitivity / noise_std; inf without noise (0.0 if the sensitivity is 0 too).
        """
        if self.noise_std == 0.0:
            return math.inf if self.sensitivity > 0 else 0.0
        return float(gdp_epsilon(self.sensitivity / self.noise_std, delta))


class PrivateStep:
    """The contract (see the module text).  Subclasses implement :meth:`release` and set ``claim``."""

    claim: StepClaim

    def release(self, batch, *, noise: bool, generator: torch.Generator) -> torch.Tensor:  # pragma: no cover
        """The value one step releases on ``batch`` at the current parameters (the contract).

        Args:
            batch: the batch, a tuple of tensors with one row per record (e.g. ``(x, y)``).
            noise: add the step's noise (False: the noiseless value).
            generator: the generator the noise is drawn from.

        Returns:
            The released value, flat, float64 on the CPU.
        """
        raise NotImplementedError


def _flat64(t) -> torch.Tensor:
    return torch.as_tensor(t).detach().reshape(-1).to("cpu", torch.float64)


class FunctionStep(PrivateStep):
    """A plain function ``fn(batch, noise: bool, generator) -> released tensor`` and its claim.

    Args:
        fn: ``fn(batch, noise, generator)`` -> the released tensor.
        claim: the step's :class:`StepClaim`.

    Raises:
        InputError: if ``fn`` is not callable or ``claim`` is not a StepClaim.
    """

    def __init__(self, fn, claim: StepClaim):
        if not callable(fn):
            raise InputError(f"fn={fn!r} is not allowed: expected a callable (batch, noise, generator) -> tensor.")
        if not isinstance(claim, StepClaim):
            raise InputError(f"claim={claim!r} is not allowed: expected a StepClaim.")
        self.fn, self.claim = fn, claim

    def release(self, batch, *, noise, generator):
        """``fn(batch, noise, generator)``, flat, in float64 on the CPU.

        Args:
            batch, noise, generator: as :meth:`PrivateStep.release`.

        Returns:
            The released value, flat, float64 on the CPU.
        """
        return _flat64(self.fn(batch, noise, generator))


class EngineStep(PrivateStep):
    """The optimizer ``make_private`` returned (:class:`dpcalib.optim.engine.DPOptimizer`), its
    module and the loss (``criterion(output, target)``, reduced as ``make_private`` was told): the
    kernel's release on the batch at the current parameters, through the optimizer's own per-record
    terms and noise source, its state restored after each call (nothing is charged or stepped).

    Args:
        module: the module ``make_private`` returned.
        optimizer: the :class:`dpcalib.optim.engine.DPOptimizer` ``make_private`` returned; its
            claim is read from its kernel and mechanism at construction.
        criterion: ``criterion(output, target)`` -> the loss, reduced as ``make_private`` was told.

    Raises:
        InputError: if ``optimizer`` is not such a DPOptimizer.
    """

    def __init__(self, module, optimizer, criterion):
        if not hasattr(optimizer, "kernel") or not hasattr(optimizer, "release_of"):
            raise InputError("optimizer is not allowed: expected the DPOptimizer that PrivacyEngine.make_private "
                             "returned.")
        self.module, self.optimizer, self.criterion = module, optimizer, criterion
        k = optimizer.kernel
        kind = k.kind(optimizer.round == 0)
        m = optimizer.mechanism
        spec = m.release(kind)
        sampling = {"Poisson": POISSON, "fixed size without replacement": WOR}.get(spec.sampling, "full batch")
        rate = getattr(m, "sampling_rate", None)
        if getattr(m, "shuffled", False):
            sampling = SHUFFLE
        if getattr(m, "balls_in_bins", False):
            sampling, rate = BALLS_IN_BINS, 1.0 / m.steps_per_epoch
        self.claim = StepClaim(float(m.sensitivity(kind, k.clip) if spec.scale == "clip" else m.sensitivity(kind)),
                               float(k.std(kind)), "add/remove" if spec.relation in ("add/remove", "zero-out")
                               else "replace-one", sampling, rate, getattr(m, "batch_size", None))

    def release(self, batch, *, noise, generator):
        """Forward and backward on ``batch``, then the optimizer's release of those terms (its state restored).

        Args:
            batch, noise, generator: as :meth:`PrivateStep.release`.

        Returns:
            The released value, flat, float64 on the CPU.
        """
        x, y = batch
        self.optimizer.zero_grad()
        self.criterion(self.module(x), y).backward()
        return _flat64(self.optimizer.release_of(noise=noise, generator=generator))


class OpacusStep(PrivateStep):
    """Opacus's ``DPOptimizer`` and ``GradSampleModule`` as ``PrivacyEngine.make_private`` returns
    them (hooks mode): forward, backward, then its ``pre_step`` -- per-sample clipping, noise from
    its ``generator``, scaling -- and the noisy SUM read back from ``.grad`` (times the expected
    batch size for a mean loss).  The accountant's step hook is held off; the gradients are zeroed.

    Args:
        module: Opacus's ``GradSampleModule``.
        optimizer: Opacus's ``DPOptimizer`` (its ``max_grad_norm`` C and ``noise_multiplier`` z
            make the claim: sensitivity C, std z C, add/remove, Poisson).
        criterion: ``criterion(output, target)`` -> the loss.
        sample_rate: the Poisson sampling rate of the claim, in (0, 1], or None.

    Raises:
        InputError: if ``optimizer`` has no ``pre_step`` or ``noise_multiplier``, or the claim is invalid.
    """

    def __init__(self, module, optimizer, criterion, sample_rate: float | None = None):
        if not hasattr(optimizer, "pre_step") or not hasattr(optimizer, "noise_multiplier"):
            raise InputError("optimizer is not allowed: expected Opacus's DPOptimizer.")
        self.module, self.optimizer, self.criterion = module, optimizer, criterion
        C, z = float(optimizer.max_grad_norm), float(optimizer.noise_multiplier)
        self.claim = StepClaim(C, z * C, "add/remove", POISSON, sample_rate)

    def release(self, batch, *, noise, generator):
        """Forward, backward and Opacus's ``pre_step`` on ``batch``; the noisy sum read back from ``.grad``.

        Args:
            batch, noise, generator: as :meth:`PrivateStep.release`.

        Returns:
            The released value, flat, float64 on the CPU (the gradients are zeroed).
        """
        opt = self.optimizer
        x, y = batch
        opt.zero_grad()
        self.criterion(self.module(x), y).backward()
        z, gen, hook = opt.noise_multiplier, opt.generator, opt.step_hook
        opt.noise_multiplier, opt.generator, opt.step_hook = (z if noise else 0.0), generator, None
        try:
            opt.pre_step()
        finally:
            opt.noise_multiplier, opt.generator, opt.step_hook = z, gen, hook
        scale = opt.expected_batch_size * opt.accumulated_iterations if opt.loss_reduction == "mean" else 1.0
        out = torch.cat([p.grad.reshape(-1) for p in opt.params]) * scale
        opt.zero_grad()
        return _flat64(out)


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
        claimed: the claimed sampling (one of :data:`SAMPLINGS`).
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
