"""DP-SGD / DPSGD-GC (Abadi et al. 2016; DiceSGD paper Algorithm 1 + Thm 2.3): Poisson-sampled
Gaussian steps, add/remove adjacency, noise ``N(0, z^2 C^2 I)`` on the SUM of clipped per-example
gradients (std ``z C / B`` on the average).

``sampling="shuffle"``: each epoch a random permutation cut into batches of ``b`` (what
``DataLoader(shuffle=True)`` does).  No theorem amplifies it: eps is the bracket of
:mod:`dpcalib.accountant.shuffle` (certified upper end: ``E`` Gaussian releases, exact GDP; lower
end: Chua et al.'s bound), never Poisson's eps for ``q = b/n``.

``sampling="balls-in-bins"``: each epoch every record goes to one of ``t = ceil(n / b)`` steps, chosen
uniformly and independently (Chua et al., AISTATS 2025): every record once an epoch, batches of
``Binomial(n, 1/t)`` records, add/remove.  The noise is added to the batch's sum and the sum is divided by
the *expected* batch ``n / t`` (never by the batch's own size, which tells whether the record is in
it).  eps is the PLD bracket of :class:`~dpcalib.accountant.BallsInBinsGaussianEvent` (one event an
epoch), close to Poisson's at ``q = b/n``."""

from __future__ import annotations

from dataclasses import dataclass

import math

from ..accountant import (ADD_REMOVE, BallsInBinsGaussianEvent, GaussianEvent, PoissonSampledGaussianEvent,
                          PrivacyAccountant, ZERO_OUT, gdp_mu, shuffle_epsilon_bracket, shuffle_lower_epsilon,
                          steps_per_epoch)
from ..accountant import validation as v
from ..accountant.shuffle import check_relation

from .releases import Mechanism, ReleaseSpec, meets_accountant
from .shape import BALLS_IN_BINS, POISSON, SHUFFLE, Run, Sampling
from .report import CalibrationReport, paper_warning
from .search import smallest_scale, start_rtol, tight_scale
from .tighten import calibrate_poisson, certify, pld_tighten, rdp_start, rdp_tight_text
from .shared import ABADI_ORDERS, abadi_multiplier, check_calibration

__all__ = []

def classical_gaussian_multiplier(epsilon, delta) -> float:
    """Classical Gaussian mechanism (Dwork & Roth Thm A.1; AdaD2P Prop. 1; DiceSGD Def. 2.2; GAUSS-E1):
    ``sigma >= sqrt(2 log(1.25/delta)) / eps`` for ONE release.  Valid only for eps < 1 (the papers
    state it for all eps > 0): a ``PaperConditionWarning`` (GAUSS-E1) is issued for eps >= 1.

    Args:
        epsilon: target eps of the one release, > 0 (the bound holds only for eps < 1).
        delta: target delta, in (0, 1).

    Returns:
        The noise multiplier ``sqrt(2 log(1.25/delta)) / eps`` (std / L2 sensitivity).
    """
    import math

    e = v.positive(epsilon, "epsilon")
    d = v.delta(delta)
    if e >= 1.0:
        paper_warning("GAUSS-E1", f"the classical Gaussian mechanism bound is proven only for eps < 1 (got eps={e:g})")
    return math.sqrt(2.0 * math.log(1.25 / d)) / e


#: the samplings DP-SGD's accountant covers
SAMPLINGS = (POISSON, SHUFFLE, BALLS_IN_BINS)
#: the samplings whose batches follow from n, batch_size and epochs (every record once an epoch)
EPOCH_SAMPLINGS = (SHUFFLE, BALLS_IN_BINS)


@dataclass(frozen=True)
class DPSGD(Mechanism):
    """DP-SGD with Poisson sampling rate ``q = B/N`` for ``steps`` iterations (add/remove), or
    (``sampling="shuffle"``) ``epochs`` epochs of shuffled batches of ``batch_size`` out of ``n``
    records (relation ``"zero-out"``, Chua et al.'s, or ``"replace-one"``; add/remove refused), or
    (``sampling="balls-in-bins"``) ``epochs`` epochs of ``ceil(n / batch_size)`` steps, each record in
    one step an epoch chosen at random (add/remove only).

    Attributes:
        sampling_rate: Poisson sampling rate q, in [1e-9, 1] (``sampling="poisson"``; else None).
        steps: steps T, an integer in [1, 1e9] (``sampling="poisson"``; else None).
        sampling: ``"poisson"``, ``"shuffle"`` or ``"balls-in-bins"``.
        n: number of records N (epoch-wise samplings; with Poisson it sets q = b/N and T).
        batch_size: batch size b (the expected batch for Poisson and balls-in-bins).
        epochs: epochs E.
        relation: neighbouring relation of ``sampling="shuffle"`` (``"zero-out"`` by default, or
            ``"replace-one"``); ``"add/remove"`` for the other samplings.
        drop_last: ``sampling="shuffle"`` only: drop each epoch's last, partial batch.

    Raises:
        InputError: on construction, if the sampling is unknown, a field is missing, out of
            range or not allowed with the sampling.
    """

    sampling_rate: float | None = None
    steps: int | None = None
    sampling: str = POISSON
    n: int | None = None
    batch_size: int | None = None
    epochs: int | None = None
    relation: str | None = None
    drop_last: bool = False

    name = "dp-sgd"
    field_help = {"sampling_rate": "Poisson sampling rate q = B/N (--sampling poisson; or give --n, --batch-size "
                                   "and --epochs: q = b/N)",
                  "steps": "steps T (--sampling poisson; from --n, --batch-size, --epochs: T = E * ceil(N/b))",
                  "sampling": "poisson (default: each record in each batch independently with probability q), "
                              "shuffle (each epoch a random permutation cut into batches of --batch-size) or "
                              "balls-in-bins (each epoch every record in one of ceil(N/b) steps, at random)",
                  "n": "number of records N (any --sampling; with poisson it sets q = b/N and T = E * ceil(N/b))",
                  "batch_size": "batch size b (--sampling shuffle; poisson and balls-in-bins: the expected batch, "
                                "ceil(N/b) steps an epoch)",
                  "epochs": "epochs E (any --sampling; with poisson: T = E * ceil(N/b) steps)",
                  "relation": "neighbouring relation of --sampling shuffle: zero-out (default: a record replaced by one "
                              "that contributes nothing) or replace-one; add/remove is refused",
                  "drop_last": "--sampling shuffle: drop the last, partial batch of each epoch"}
    calibrate_options = {}
    field_choices = {"sampling": SAMPLINGS}

    def __post_init__(self):
        if self.sampling == "random-allocation":
            raise v.InputError("sampling='random-allocation' is not allowed: each record in k > 1 of an epoch's "
                               "steps has no dominating pair dpcalib can cite and certify yet; "
                               "sampling='balls-in-bins' is its k = 1 case.")
        if self.sampling not in SAMPLINGS:
            raise v.InputError(f"sampling={self.sampling!r} is not allowed: expected one of {', '.join(SAMPLINGS)}.")
        if self.sampling == POISSON:
            if self.relation is not None:
                raise v.InputError(f"relation={self.relation!r} is not allowed with sampling='poisson': Poisson "
                                   "sampling is analysed under add/remove (relation is --sampling shuffle's option).")
            shape = [name for name in ("n", "batch_size", "epochs") if getattr(self, name) is not None]
            if shape:
                self._poisson_from_shape(shape)
            if self.drop_last:
                raise v.InputError("drop_last=True is not allowed with sampling='poisson': Poisson batches have no "
                                   "last batch to drop.")
            if self.sampling_rate is None or self.steps is None:
                raise v.InputError("sampling_rate and steps are required with sampling='poisson' (got "
                                   f"sampling_rate={self.sampling_rate!r}, steps={self.steps!r}).")
            v.in_range(self.sampling_rate, "sampling_rate", 1.0 / v.MAX_RECORDS, 1.0)
            v.run_length(self.steps, "steps")
            return
        self._refuse_given(("sampling_rate", "steps"), f"sampling={self.sampling!r}",
                           "the batches follow from n, batch_size and epochs (q = b/n and E * ceil(n/b) steps); "
                           "give those instead.")
        self._require(("n", "batch_size", "epochs"), f"sampling={self.sampling!r}", "n, batch_size and epochs")
        v.run_length(self.epochs, "epochs")
        v.records(self.n, "n")
        if self.sampling == BALLS_IN_BINS:
            if self.drop_last:
                raise v.InputError("drop_last=True is not allowed with sampling='balls-in-bins': every step of an "
                                   "epoch is taken (its batch may be empty); there is no last batch to drop.")
            if self.relation not in (None, ADD_REMOVE):
                raise v.InputError(f"relation={self.relation!r} is not allowed with sampling='balls-in-bins': "
                                   "expected 'add/remove' (its accountant's relation).")
            steps_per_epoch(self.n, self.batch_size)
            object.__setattr__(self, "relation", ADD_REMOVE)
            return
        steps_per_epoch(self.n, self.batch_size, self.drop_last)
        object.__setattr__(self, "relation", check_relation(self.relation or ZERO_OUT))

    def _refuse_given(self, names, context: str, why: str):
        """Refuse the first of ``names`` that is given: ``name=value is not allowed with {context}: {why}``."""
        for name in names:
            if getattr(self, name) is not None:
                raise v.InputError(f"{name}={getattr(self, name)!r} is not allowed with {context}: {why}")

    def _require(self, names, context: str, why: str):
        """Refuse the first of ``names`` that is not given: ``name is required with {context} ({why}).``"""
        for name in names:
            if getattr(self, name) is None:
                raise v.InputError(f"{name} is required with {context} ({why}).")

    def _poisson_from_shape(self, given):
        """Poisson sampling described by the run's shape: ``q = b/n`` (the expected batch is ``b``) and
        ``T = E * ceil(n/b)`` steps (an epoch is ``ceil(n/b)`` batches, the last one counted whole: the
        rounding never undercounts the steps)."""
        self._refuse_given(("sampling_rate", "steps"), "n, batch_size and epochs",
                           "give either sampling_rate and steps, or n, batch_size and epochs (then q = b/n and "
                           "T = E * ceil(n/b)).")
        self._require(("n", "batch_size", "epochs"), ", ".join(given),
                      "sampling='poisson' from the run's shape takes n, batch_size and epochs: q = b/n, "
                      "T = E * ceil(n/b)")
        n = v.records(self.n, "n")
        epochs = v.run_length(self.epochs, "epochs")
        steps_per_epoch(n, self.batch_size)                 # b in [1, n]
        run = Run.of(Sampling(POISSON, n, int(self.batch_size)), epochs=epochs)   # the one owner of q and T
        if run.steps > v.MAX_RUN_LENGTH:
            raise v.InputError(f"epochs={epochs!r} is not allowed with n={n}, batch_size={self.batch_size}: "
                               f"E * ceil(n/b) = {run.steps} steps exceeds the largest run ({v.MAX_RUN_LENGTH:g} steps).")
        object.__setattr__(self, "sampling_rate", run.sampling.rate)
        object.__setattr__(self, "steps", run.steps)

    # -- the run's shape ------------------------------------------------------------------------
    @classmethod
    def from_run(cls, run: Run) -> "DPSGD":
        """The mechanism of ``run``: Poisson (and fixed-size) batches at ``q = min(1, b / N)`` for ``run.steps``
        steps, or ``run.epochs`` epoch-wise epochs of ``run.sampling``.

        Args:
            run: the run's :class:`~dpcalib.mechanisms.shape.Run`.

        Returns:
            The mechanism.

        Raises:
            InputError: if the run's shape is out of range.
        """
        s = run.sampling
        if not s.epoch_wise:
            return cls(sampling_rate=s.rate, steps=run.steps)
        return cls(sampling=s.kind, n=s.n, batch_size=s.batch_size, epochs=run.epochs,
                   drop_last=s.drop_last and s.kind == SHUFFLE)

    @property
    def shape_note(self) -> str | None:
        """How the accounting reads a run given by its shape (``n``, ``batch_size``, ``epochs``): the batches and
        ``T`` with its rounding, one sentence for every sampling (the ``run`` line every command prints); None
        where the run was given by ``q`` and ``T``."""
        if self.n is None:
            return None
        if self.sampling == POISSON:
            t = steps_per_epoch(self.n, self.batch_size)
            return (f"Poisson sampling from the run's shape: q = b/N = {self.batch_size}/{self.n} = "
                    f"{self.sampling_rate:.6g}, T = E * ceil(N/b) = {self.epochs} * {t} = {self.steps} steps (an "
                    "epoch's last, partial batch counted as a step)")
        n, b, e, t = self.n, self.batch_size, self.epochs, self.steps_per_epoch
        rounding = "floor" if self.drop_last else "ceil"
        steps = f"T = E * {rounding}(N/b) = {e} * {t} = {e * t} steps"
        if self.balls_in_bins:
            return (f"balls-in-bins batches from the run's shape: each epoch every record in one of ceil(N/b) = {t} "
                    f"steps at random, expected batch N/{t} = {n}/{t} = {n / t:.6g}, {steps}")
        last = "dropped" if rounding == "floor" else "counted as a step"
        return (f"shuffled batches from the run's shape: each epoch a permutation of the N = {n} records cut into "
                f"batches of b = {b}, {steps} (an epoch's last, partial batch {last})")

    @property
    def shuffled(self) -> bool:
        """Whether the batches are shuffled (``sampling="shuffle"``)."""
        return self.sampling == SHUFFLE

    @property
    def balls_in_bins(self) -> bool:
        """Whether each record goes to one random step an epoch (``sampling="balls-in-bins"``)."""
        return self.sampling == BALLS_IN_BINS

    @property
    def epoch_wise(self) -> bool:
        """Every record once an epoch (shuffle, balls-in-bins): the run is ``epochs`` epochs."""
        return self.sampling in EPOCH_SAMPLINGS

    @property
    def steps_per_epoch(self) -> int:
        """Batches per epoch (shuffle, balls-in-bins): ``ceil(n/b)``, ``floor(n/b)`` with ``drop_last``."""
        return steps_per_epoch(self.n, self.batch_size, self.drop_last)

    @property
    def expected_batch_size(self) -> float | None:
        """What the noisy sum of a step is divided by (the optimizers' ``B``): the shuffled batch ``b``;
        balls-in-bins: the *expected* batch ``n / steps_per_epoch`` (never the batch's own size, which would
        tell whether the record is in it); Poisson: None (``q n``, with ``n`` the data's)."""
        if self.shuffled:
            return float(self.batch_size)
        if self.balls_in_bins:
            return self.n / self.steps_per_epoch
        return None

    @property
    def total_steps(self) -> int:
        """Steps of the whole run: ``epochs * steps_per_epoch`` (epoch-wise samplings) or ``steps``."""
        return self.epochs * self.steps_per_epoch if self.epoch_wise else self.steps

    @property
    def releases(self) -> tuple:
        """The one release, ``"step"``, with the sampling and relation of this run."""
        if self.shuffled:
            return (ReleaseSpec("step", "noise_multiplier", self.relation, "shuffled batches (one per record per "
                                "epoch)", "clip", f"{self.epochs} epoch(s) of {self.steps_per_epoch} steps"),)
        if self.balls_in_bins:
            return (ReleaseSpec("step", "noise_multiplier", ADD_REMOVE, "balls-in-bins (each record in one step "
                                "per epoch, chosen at random)", "clip",
                                f"{self.epochs} epoch(s) of {self.steps_per_epoch} steps"),)
        return (ReleaseSpec("step", "noise_multiplier", "add/remove", "Poisson", "clip", "T steps"),)

    def sensitivity(self, release: str, clip=None) -> float:
        """The sum of per-example gradients clipped to ``clip`` changes by at most ``clip`` when one
        record is added or removed (or zeroed out); by ``2 clip`` when it is replaced.

        Args:
            release: ``"step"``.
            clip: the clip norm (None: 1).

        Returns:
            The L2 sensitivity of the noisy sum: ``clip``, or ``2 clip`` for shuffled batches under
            replace-one.
        """
        self.release(release)
        c = 1.0 if clip is None else float(clip)
        return 2.0 * c if self.shuffled and self.relation != ZERO_OUT else c

    def participations(self, release: str, count: int) -> int:
        """Shuffled and balls-in-bins batches: a record sits in one batch per epoch, so ``count`` steps reach
        it at most ``ceil(count / steps_per_epoch)`` times (at most once in each epoch begun; a balls-in-bins
        epoch cut short releases a prefix of the epoch, a post-processing of the whole).

        Args:
            release: ``"step"``.
            count: steps made, >= 0.

        Returns:
            The number of those steps that can include one record.
        """
        return -(-int(count) // self.steps_per_epoch) if self.epoch_wise else count

    def _event(self, release: str, z: float):
        if self.balls_in_bins:
            return BallsInBinsGaussianEvent(self.steps_per_epoch, z)
        return GaussianEvent(z) if self.shuffled else PoissonSampledGaussianEvent(self.sampling_rate, z)

    def release_counts(self) -> dict:
        """Steps of a whole run.

        Returns:
            ``{"step": total_steps}``.
        """
        return {"step": self.total_steps}

    def accountant(self, noise_multiplier, **kwargs) -> PrivacyAccountant:
        """The privacy events of a whole run at this noise multiplier.

        Args:
            noise_multiplier: noise std / clip norm, > 0.
            **kwargs: passed to :class:`~dpcalib.accountant.PrivacyAccountant` (e.g. ``orders``).

        Returns:
            A :class:`~dpcalib.accountant.PrivacyAccountant` of the whole run.
        """
        return self._accountant_of({"noise_multiplier": noise_multiplier}, **kwargs)

    # -- shuffled batches: the bracket ------------------------------------------------------------
    def epsilon_lower(self, delta, noise_multiplier):
        """Shuffled batches: Chua et al.'s lower bound on eps; None for the other samplings.

        Args:
            delta: the delta, in (0, 1).
            noise_multiplier: noise std / clip norm, > 0.

        Returns:
            A lower bound on eps, or None.
        """
        if not self.shuffled:
            return None
        return shuffle_lower_epsilon(noise_multiplier, self.n, self.batch_size, self.epochs, delta, self.relation)

    def epsilon_bracket(self, delta, noise_multiplier):
        """The eps bracket at ``delta``: for shuffled batches :mod:`dpcalib.accountant.shuffle`'s, else
        the accountant's.

        Args:
            delta: the delta, in (0, 1).
            noise_multiplier: noise std / clip norm, > 0.

        Returns:
            An ``EpsilonBracket``.
        """
        if not self.shuffled:
            return super().epsilon_bracket(delta, noise_multiplier)
        return shuffle_epsilon_bracket(noise_multiplier, self.n, self.batch_size, self.epochs, delta, self.relation,
                                       self.drop_last)

    def poisson_twin(self) -> "DPSGD":
        """Poisson sampling at the same ``q = b/n`` and number of steps: what a shuffled run is often
        (wrongly) reported as.

        Returns:
            A Poisson :class:`DPSGD` with q = b/n and ``total_steps`` steps.
        """
        return DPSGD(self.batch_size / self.n, self.total_steps)

    def poisson_epsilon(self, delta, noise_multiplier) -> float | None:
        """Poisson's certified eps for the same ``q = b/n`` and steps (zero-out only: it is
        add/remove's for Poisson sampling) -- shown beside the bracket, never valid for shuffling.

        Args:
            delta: the delta, in (0, 1).
            noise_multiplier: noise std / clip norm, > 0.

        Returns:
            The Poisson twin's certified eps, or None (not shuffled, not zero-out, or a run longer
            than 1e9 steps).
        """
        if not self.shuffled or self.relation != ZERO_OUT or self.total_steps > v.MAX_RUN_LENGTH:
            return None               # (no Poisson twin of a run longer than any run: nothing to compare)
        return self.poisson_twin().epsilon(delta, noise_multiplier).epsilon

    def report_notes(self, delta, noise_multiplier) -> tuple:
        """The report's note comparing a shuffled zero-out run with its Poisson twin (none otherwise).

        Args:
            delta: the delta, in (0, 1).
            noise_multiplier: noise std / clip norm, > 0.

        Returns:
            A tuple of zero or one note line.
        """
        pe = self.poisson_epsilon(delta, noise_multiplier)
        if pe is None:
            return ()
        lo = self.epsilon_lower(delta, noise_multiplier)
        verdict = ("the lower bound EXCEEDS it: reporting Poisson's eps for this shuffled run would understate the "
                   "privacy loss" if lo > pe else "not valid for shuffled batches either way")
        return (f"Poisson sampling at q = b/n = {self.batch_size / self.n:.6g} for the same {self.total_steps} steps "
                f"would spend eps {pe:.6g} (certified) -- {verdict}",)

    def _calibrate_shuffle(self, e, d, method, accountant, rtol):
        if method == "paper":
            raise v.InputError("method='paper' is not allowed with sampling='shuffle': the papers' calibrations "
                               "(Abadi et al.'s moments accountant, Thm 2.3 of the DiceSGD paper) assume Poisson "
                               "sampling; use method='tight'.")
        # E Gaussian releases: exact GDP is the best certified eps under either accountant
        z = smallest_scale(lambda t: self.accountant(t).epsilon_report(d, "auto").epsilon, e, start=1.0, rtol=rtol)
        _, cert, _ = certify(self.accountant(z), d, accountant)
        lo = self.epsilon_lower(d, z)
        mu = math.sqrt(self.epochs) * self.sensitivity("step") / z
        notes = {"noise_std_on_sum": "noise_multiplier * C", "shuffle_mu": mu,
                 "steps_per_epoch": self.steps_per_epoch, "relation": self.relation}
        pe = self.poisson_epsilon(d, z)
        if pe is not None:
            notes["poisson_epsilon_same_noise"] = pe
        accounting = (f"{cert.method} (shuffled batches: {self.epochs} Gaussian release(s) per record, exact GDP "
                      f"mu={mu:.6g}; no amplification by shuffling); lower end: Chua et al.'s shuffle bound")
        return CalibrationReport(self.name, method, e, d, {"noise_multiplier": z}, cert.epsilon, cert.epsilon,
                                 cert.order, cert.conversion, accounting, (), notes, lo, None)

    def _calibrate_balls_in_bins(self, e, d, method, accountant, rtol):
        if method == "paper":
            raise v.InputError("method='paper' is not allowed with sampling='balls-in-bins': the papers' calibrations "
                               "(Abadi et al.'s moments accountant, Thm 2.3 of the DiceSGD paper) assume Poisson "
                               "sampling; use method='tight'.")
        notes = {"noise_std_on_sum": "noise_multiplier * C",
                 "noise_std_on_average": "noise_multiplier * C / (n / steps_per_epoch), the expected batch",
                 "steps_per_epoch": self.steps_per_epoch, "expected_batch_size": self.expected_batch_size}
        if accountant == "rdp":
            # the event's RDP is one Gaussian release per epoch (no amplification)
            z = smallest_scale(lambda t: self.accountant(t).epsilon_report(d, "auto").epsilon, e, start=1.0,
                               rtol=rtol)
            own, cert, br = certify(self.accountant(z), d, accountant)
            return CalibrationReport(self.name, method, e, d, {"noise_multiplier": z}, own.epsilon, cert.epsilon,
                                     own.order, own.conversion, "rdp (balls-in-bins: one Gaussian release per "
                                     "record per epoch, no amplification)", (), notes, br.lower, None)
        z0 = _feasible_start(self, e, d)
        z, _, z_lo, cap = pld_tighten(self.accountant, e, d, z0)
        own, cert, br = certify(self.accountant(z), d, accountant)
        accounting = (f"{br.method} (certified upper end of the bracket; balls-in-bins, {self.epochs} epoch(s) of "
                      f"{self.steps_per_epoch} steps, remove and add directions)" + (f"; {cap}" if cap else ""))
        return CalibrationReport(self.name, method, e, d, {"noise_multiplier": z}, own.epsilon, cert.epsilon,
                                 own.order, own.conversion, accounting, (), notes, br.lower,
                                 None if z_lo is None else {"noise_multiplier": z_lo})

    @meets_accountant
    def calibrate(self, epsilon, delta, method="tight", accountant="best", rtol=1e-9) -> CalibrationReport:
        """``"paper"``: Abadi's Theorem 1 (DPSGD-GC, Thm 2.3 of the DiceSGD paper) has unspecified constants (DPSGD-E2), so the
        paper's calibration is the numerical Poisson accountant (DPSGD-E2): integer orders
        2..256, 300, 400, 512, 768, 1024 and Lemma B.4.  ``"tight"``: the exact Poisson RDP at
        real orders with the improved conversion (``accountant="rdp"``), or, with
        ``accountant="best"`` (the default), the smallest noise whose certified eps (the PLD upper bound of both
        directions, or RDP if smaller) meets the target (3-8 % less noise in the common regime, up to 25 % with few
        steps; 0.1-1 s per calibration).  Either way ``certified_epsilon`` is the best certified eps of the answer.

        Args:
            epsilon: target eps, in (0, 1e4].
            delta: target delta, in (0, 1).
            method: ``"paper"`` or ``"tight"`` (shuffle and balls-in-bins: ``"tight"`` only).
            accountant: what tight mode meets: ``"best"``, ``"pld"``, ``"rdp"`` or ``"gdp"``.
            rtol: relative tolerance of the searches on the multiplier.

        Returns:
            A :class:`CalibrationReport` with ``noise_multiplier``.

        Raises:
            InputError: if ``method="paper"`` with shuffled or balls-in-bins batches, or the target is
                not allowed.
        """
        accountant, e, d = check_calibration(epsilon, delta, method, accountant)
        if self.shuffled:
            return self._calibrate_shuffle(e, d, method, accountant, rtol)
        if self.balls_in_bins:
            return self._calibrate_balls_in_bins(e, d, method, accountant, rtol)
        warns, cap = [], None
        full_batch = self.sampling_rate >= 1.0      # q = 1: every record in every step
        if method == "paper":
            warns.append(paper_warning("DPSGD-E2", "Abadi et al. Thm 1 (DPSGD-GC, Thm 2.3 of the DiceSGD paper) has unspecified constants c1, c2; "
                                       "the noise comes from the numerical Poisson-SGM accountant instead"))
            z = self.level("step", abadi_multiplier(self.sampling_rate, self.steps, e, d, rtol))
            rep = self.accountant(z, orders=ABADI_ORDERS).epsilon_report(d, "rdp", "mironov", refine=False)
            accounting = "rdp (Poisson SGM, integer orders, Lemma B.4)"
            lower_noise = None
        elif full_batch:
            # the steps compose to exactly mu-GDP (accountant.full_batch_form): the noise in closed
            # form, no search
            z0, lower_noise = None, None
            z = self.level("step", math.sqrt(self.steps) / gdp_mu(e, d))
            while certify(self.accountant(z), d, accountant)[0].epsilon > e:    # rounding: the feasible side
                z *= 1.0 + 1e-12
        else:
            # the RDP-tight start on the run's own events (the level is the multiplier: std z C, sensitivity C)
            z0 = z = rdp_start(lambda: tight_scale(self.accountant, e, d, "improved", rtol=start_rtol(accountant, rtol),
                                                   exact=accountant == "rdp"), accountant)
            if accountant == "pld":
                z, _, z_lo, cap = pld_tighten(self.accountant, e, d, z0)
                lower_noise = None if z_lo is None else {"noise_multiplier": z_lo}
            else:
                lower_noise = None
        own, cert, br = certify(self.accountant(z), d, accountant)
        if method == "tight":
            rep = own
            if full_batch:
                accounting = "gdp (exact: q = 1 puts every record in every step)"
            elif accountant == "rdp":
                accounting = "rdp (exact Poisson SGM, real order, improved conversion)"
            else:
                accounting = (f"{br.method} (certified upper end of the bracket; Poisson SGM, remove and add "
                              f"directions; {rdp_tight_text(z0, note=cap)})")
        notes = {"noise_std_on_sum": "noise_multiplier * C",
                 "noise_std_on_average": "noise_multiplier * C / B (Thm 2.3 of the DiceSGD paper is missing this B^2 for noise "
                                         "on the sum: DPSGD-E1)"}
        if method == "tight" and accountant == "pld":
            notes["rdp_tight_noise"] = None if z0 is None else {"noise_multiplier": z0}
        if self.shape_note:
            notes["run_shape"] = self.shape_note
        return CalibrationReport(self.name, method, e, d, {"noise_multiplier": z}, rep.epsilon, cert.epsilon,
                                 rep.order, rep.conversion, accounting, tuple(warns), notes, br.lower, lower_noise)


def _feasible_start(mech: DPSGD, e: float, d: float) -> float:
    """A noise multiplier whose certified balls-in-bins eps is at most ``e`` -- the start of the PLD search:
    Poisson's RDP-tight noise at ``q = b/n`` for the same steps (balls-in-bins spends about as much, Chua et
    al. 2025) if a coarse bracket certifies it, else up by 15 % at a time, else the noise of ``E`` Gaussian
    releases (exact GDP: always feasible, the epoch being a post-processing of one release)."""
    from ..accountant import pld_epsilon
    from .pld_search import COARSE_ATOL, COARSE_RTOL, SEARCH_CAP

    gdp = mech.level("step", math.sqrt(mech.epochs) / gdp_mu(e, d))
    try:
        z = calibrate_poisson(mech.batch_size / mech.n, mech.total_steps, e, d, conversion="improved", refine=True,
                              rtol=1e-3, exact=False) if mech.total_steps <= v.MAX_RUN_LENGTH else gdp
    except ValueError:
        return gdp
    for _ in range(8):
        if z >= gdp:
            break
        try:
            b = pld_epsilon(mech.accountant(z).events, d, rtol=COARSE_RTOL, memory_cap=SEARCH_CAP,
                            atol=COARSE_ATOL * e)
        except ValueError:
            break
        if b.upper <= e:
            return z
        z *= 1.15
    return gdp
