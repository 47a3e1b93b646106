"""DiceSGD (Zhang, Bu, Wu & Hong; arXiv 2311.14632v2) and its automatic variant.

Noise ``w^t ~ N(0, sigma1^2 I)`` is added to the AVERAGE-scale update ``v^t`` (clipped-gradient
mean + clipped error feedback).  Only ``x^t`` is released; the error state ``e^t`` is hidden.

Two accountants:

* the paper's own bound (Thm 3.7 / A.3, Step III of its proof): total RDP ``16 alpha T G~/(sigma1^2 N^2)``,
  which rests on Assumptions 3.4/3.5 and the conditions of Lemma A.10 (DiceSGD-E4);
* the assumption-free accountant (DiceSGD-E5): given the sampling randomness each release is a
  Gaussian mechanism with sensitivity ``Delta_0 = C1/B`` (t = 0, e^0 = 0) and
  ``Delta = 2 C2 + C1/B`` (t >= 1), with no amplification by sampling (the hidden e carries each
  record forward).  The composition is then accounted exactly by GDP:
  ``mu^2 = (Delta_0^2 + (T-1) Delta^2) / sigma1^2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..accountant import GaussianEvent, PrivacyAccountant, gdp_mu
from ..accountant import validation as v

from .releases import Mechanism, ReleaseSpec, meets_accountant
from .report import CalibrationReport, paper_warning
from .shared import abadi_multiplier, check_calibration
from .search import smallest_scale
from .tighten import calibrate_poisson

__all__ = []


def dice_const_needed(epsilon, delta) -> float:
    """The constant c that the paper's own RDP bound needs in place of 32 (DiceSGD-E3):
    ``c = (32 eps/L / (sqrt(64 + 64 eps/L) - 8))^2``, ``L = log(1/delta)``.

    Args:
        epsilon: target eps, > 0.
        delta: target delta, in (0, 1).

    Returns:
        The constant c.
    """
    e = v.positive(epsilon, "epsilon")
    L = math.log(1.0 / v.delta(delta))
    return (32.0 * e / L / (math.sqrt(64.0 + 64.0 * e / L) - 8.0)) ** 2


def dice_safe_sigma1_rdp(steps, C1, C2, batch_size, epsilon, delta) -> float:
    """The assumption-free bound (DiceSGD-E5, docs/errata.md) in RDP: every step at ``Delta = 2 C2 + C1/B`` and
    Lemma B.4 at the best real order: ``sigma1 = Delta sqrt(T / (2 S_max))``,
    ``S_max = (sqrt(L + eps) - sqrt(L))^2``.  (The GDP accountant used by ``calibrate`` is tighter.)

    Args:
        steps: iterations T, an integer >= 1.
        C1: per-example clip, > 0.
        C2: error-feedback clip (average scale), > 0.
        batch_size: batch B, an integer >= 1.
        epsilon: target eps, > 0.
        delta: target delta, in (0, 1).

    Returns:
        The noise std ``sigma1`` on the average-scale update.
    """
    e = v.positive(epsilon, "epsilon")
    L = math.log(1.0 / v.delta(delta))
    s_max = (math.sqrt(L + e) - math.sqrt(L)) ** 2
    delta_t = 2.0 * v.positive(C2, "C2") + v.positive(C1, "C1") / v.integer(batch_size, "batch_size", low=1)
    return delta_t * math.sqrt(v.integer(steps, "steps", low=1) / (2.0 * s_max))


def dice_code_multiplier(sampling_rate, steps, epsilon, delta, ratio=1.0) -> float:
    """The authors' code's calibration (DiceSGD-E6): the DP-SGD noise multiplier for
    (q, T, eps, delta) times ``sqrt(1 + 2 ratio)``, ratio = C2/C1 (1.92943 for CIFAR).
    Reported for comparison only: it is not the paper's Thm 3.7 and not certified here.

    Args:
        sampling_rate: Poisson sampling rate q, in (0, 1].
        steps: steps T, an integer >= 1.
        epsilon: target eps, > 0.
        delta: target delta, in (0, 1).
        ratio: C2/C1, > 0.

    Returns:
        The noise multiplier (std / C1 on the sum).
    """
    r = v.positive(ratio, "ratio")
    z = abadi_multiplier(sampling_rate, steps, v.positive(epsilon, "epsilon"), v.delta(delta))
    return z * math.sqrt(1.0 + 2.0 * r)


@dataclass(frozen=True)
class DiceSGD(Mechanism):
    """DiceSGD on ``N`` records, batch ``B`` (Poisson rate B/N in the proof), ``steps`` = T.

    ``C1``: per-example clip; ``C2``: error-feedback clip (average scale); ``C``: the constant with
    ``B C2 <= C`` of Thm 3.7 (default ``B C2``); ``G_prime``: G' = max{0, G + sigma - C1} if known
    (default inf, i.e. min{C^2, G'^2} = C^2).  ``automatic=True``: Algorithm 4, C1 = C2 = C = 1
    (the learning rate absorbs C).

    Attributes:
        N: dataset size N, an integer in [1, 1e9].
        batch_size: batch B, an integer in [1, N].
        steps: iterations T, an integer in [1, 1e9].
        C1: per-example clip, > 0.
        C2: error-feedback clip (average scale), > 0.
        C: the constant with ``B C2 <= C`` of Thm 3.7, > 0 (None: ``B C2``).
        G_prime: G' if known, >= 0 (default inf).
        automatic: the automatic variant (Algorithm 4: C1 = C2 = C = 1).

    Raises:
        InputError: on construction, if a field is out of its range.
    """

    N: int
    batch_size: int
    steps: int
    C1: float = 1.0
    C2: float = 1.0
    C: float | None = None
    G_prime: float = math.inf
    automatic: bool = False

    name = "dicesgd"
    releases = (ReleaseSpec("first", "sigma1", "add/remove", "full batch", "absolute", "1 (t = 0)"),
                ReleaseSpec("later", "sigma1", "add/remove", "full batch", "absolute", "T - 1 (t >= 1)"))
    field_help = {"N": "dataset size N", "batch_size": "batch B", "steps": "iterations T", "C1": "clip C1",
                  "C2": "error-feedback clip C2 (average scale)", "C": "constant C with B*C2 <= C (default B*C2)",
                  "G_prime": "G' if known (default inf)", "automatic": "automatic variant (Algorithm 4)"}
    calibrate_options = {}

    def __post_init__(self):
        n = v.records(self.N, "N")
        v.integer(self.batch_size, "batch_size", low=1, high=n)
        v.run_length(self.steps, "steps")
        v.positive(self.C1, "C1")
        v.positive(self.C2, "C2")
        if self.C is not None:
            v.positive(self.C, "C")
        v.in_range(self.G_prime, "G_prime", 0.0, math.inf)

    @classmethod
    def from_run(cls, run) -> "DiceSGD":
        """The mechanism of ``run`` (:class:`~dpcalib.mechanisms.shape.Run`): its records, batch and steps,
        ``C1 = run.clip``, ``C2 = run.clip2`` (None: 1).

        Args:
            run: the run's shape.

        Returns:
            The mechanism.

        Raises:
            InputError: if the run's shape is out of range.
        """
        s = run.sampling
        return cls(s.n, s.batch_size, run.steps, C1=run.clip,
                   **({} if run.clip2 is None else {"C2": run.clip2}))

    @property
    def sampling_rate(self) -> float:
        """The Poisson rate ``B/N`` of the batches (the proof's sampling; the assumption-free
        accountant does not amplify by it)."""
        return self.batch_size / self.N

    @property
    def clips(self):
        """(C1, C2, C) actually in force (automatic variant: 1, 1, 1)."""
        if self.automatic:
            return 1.0, 1.0, 1.0
        return float(self.C1), float(self.C2), float(self.C if self.C is not None else self.batch_size * self.C2)

    @property
    def G_tilde(self) -> float:
        """G~ = C1^2 + 2 min{C^2, G'^2} (DiceSGD-E1: C, not C2)."""
        c1, _, c = self.clips
        return c1 * c1 + 2.0 * min(c * c, self.G_prime ** 2)

    def sensitivity(self, release: str, clip=None) -> float:
        """Add/remove sensitivity of ``v^t + w^t`` (DiceSGD-E5, assumption-free): ``C1/B`` at t = 0
        (no error feedback yet), ``2 C2 + C1/B`` after (the clipped feedback of both runs may differ
        by 2 C2).  ``clip``: ``(C1, C2)`` actually used by a run (default: the mechanism's).

        Args:
            release: ``"first"`` (t = 0) or ``"later"`` (t >= 1).
            clip: ``(C1, C2)`` used by a run, or None (the mechanism's).

        Returns:
            The L2 sensitivity of the release (average scale).
        """
        self.release(release)
        c1, c2 = self.clips[:2] if clip is None else (float(clip[0]), float(clip[1]))
        return c1 / self.batch_size if release == "first" else 2.0 * c2 + c1 / self.batch_size

    def _event(self, release: str, z: float):
        return GaussianEvent(z)

    def release_counts(self) -> dict:
        """Releases of a whole run: one first, ``T - 1`` later.

        Returns:
            ``{"first": 1, "later": T - 1}``.
        """
        return {"first": 1, "later": self.steps - 1}

    def accountant(self, sigma1) -> PrivacyAccountant:
        """Assumption-free events (DiceSGD-E5): full-batch Gaussian releases, no amplification.

        Args:
            sigma1: noise std on the average-scale update, > 0.

        Returns:
            A :class:`~dpcalib.accountant.PrivacyAccountant` of the whole run.
        """
        return self._accountant_of({"sigma1": v.positive(sigma1, "sigma1")})

    def paper_epsilon(self, delta, sigma1) -> float:
        """eps by the paper's own RDP bound (16 alpha T G~/(sigma1^2 N^2)) at the best real order, Lemma B.4.

        Args:
            delta: the delta, in (0, 1) (not checked here).
            sigma1: noise std on the average-scale update, > 0.

        Returns:
            eps by the paper's bound (valid only under its assumptions, DiceSGD-E4).
        """
        S = 16.0 * self.steps * self.G_tilde / (sigma1 ** 2 * self.N ** 2)
        return S + 2.0 * math.sqrt(S * math.log(1.0 / delta))

    def _versus_dp_sgd(self, e: float, d: float, s1: float) -> dict:
        """How this noise compares with DP-SGD's (DPSGD-GC) at the same setting: Poisson rate B/N, T steps,
        (eps, delta), clip C1, noise on the average.  DP-SGD's multiplier comes from the exact Poisson RDP
        (at least its tight noise), so the ratio is a lower bound on the true one."""
        c1 = self.clips[0]
        try:
            z = calibrate_poisson(self.batch_size / self.N, self.steps, e, d, conversion="improved", refine=True,
                                  rtol=1e-6, exact=True)
        except (v.InputError, ArithmeticError):      # no DP-SGD noise meets this target: nothing to compare
            return {"dp_sgd_sigma1": None, "ratio_to_dp_sgd": None}
        sgd = z * c1 / self.batch_size
        out = {"dp_sgd_sigma1": sgd, "ratio_to_dp_sgd": s1 / sgd}
        if s1 > 3.0 * sgd:
            out["versus_dp_sgd"] = (
                f"sigma1 = {s1:.4g} is {s1 / sgd:.3g}x DP-SGD's noise on the average ({sgd:.4g}: multiplier {z:.4g}, "
                f"C = C1 = {c1:g}, B = {self.batch_size}) at the same setting.  The sound (assumption-free) noise must "
                "cover the error feedback e^t, which is never subsampled and moves by up to 2 C2 per step when one "
                "record changes; the paper's smaller noise needs its Assumptions 3.4-3.5 (bounded gradient deviation, "
                "G' <= C) and Lemma A.6's amplification of that hidden state, which are not verified "
                "(DiceSGD-E2, DiceSGD-E5 in docs/errata.md).  A smaller C2 lowers it; without amplification of the "
                "error feedback it stays above DP-SGD's.")
        return out

    @meets_accountant
    def calibrate(self, epsilon, delta, method="tight", accountant="best") -> CalibrationReport:
        """``"paper"``: Thm 3.7, ``sigma1^2 = 32 T G~ log(1/delta) / (N^2 eps^2)`` (automatic variant:
        ``sqrt(96 T log(1/delta)) / (N eps)``), with a warning for every failed condition.
        ``"tight"``: the assumption-free accountant (DiceSGD-E5), exact by GDP; the paper's sigma1
        is reported beside it in ``notes``.  ``accountant="rdp"``: tight mode solves on RDP alone
        (more noise; for comparison); the default solves on the best certified eps (exact GDP).

        Args:
            epsilon, delta, method, accountant: the target and the route, as
                :func:`~.shared.check_calibration` takes them.

        Returns:
            A :class:`CalibrationReport` with ``sigma1``.

        Raises:
            InputError: if Thm 3.7's noise is not finite at this eps (eps too small), or the target
                is not allowed.
        """
        accountant, e, d = check_calibration(epsilon, delta, method, accountant)
        L = math.log(1.0 / d)
        c1, c2, c = self.clips
        B, N, T = self.batch_size, self.N, self.steps
        paper_s1 = math.sqrt(32.0 * T * self.G_tilde * L / (N * N) / e / e)
        if not math.isfinite(paper_s1):
            raise v.InputError(f"epsilon={epsilon!r} is not allowed: Thm 3.7's noise sqrt(32 T G L / (N^2 eps^2)) is not "
                             "a finite number at this eps; expected a larger epsilon.")
        d0, dt = self.sensitivities
        tight_s1 = math.sqrt(d0 * d0 + (T - 1) * dt * dt) / gdp_mu(e, d)
        while self.epsilon(d, tight_s1, accountant="auto").epsilon > e:  # rounding guard: stay on the feasible side
            tight_s1 *= 1.0 + 1e-12
        warns = []
        notes = {"noise_multiplier": None, "paper_sigma1": paper_s1, "assumption_free_sigma1": tight_s1,
                 "G_tilde": self.G_tilde, "constant_needed": dice_const_needed(e, d)}
        if method == "paper":
            s1 = paper_s1
            achieved = self.paper_epsilon(d, s1)
            warns.append(paper_warning("DiceSGD-E3", f"the constant 32 does not deliver the target even by the paper's own "
                                       f"RDP bound: it gives eps = {achieved:.6g} > {e:g}; the bound needs "
                                       f"c = {dice_const_needed(e, d):.6g}"))
            z = s1 * B / c1
            if z <= 8.0:
                warns.append(paper_warning("DiceSGD-E4", f"Lemma A.10 needs sigma1 > 8 C1/B (noise multiplier > 8 on the "
                                           f"2C1/B sensitivity); here sigma1 B/C1 = {z:.6g}"))
            if B / N > 0.2:
                warns.append(paper_warning("DiceSGD-E4", f"Lemma A.10 needs the sampling rate B/N <= 1/5; here {B / N:.6g}"))
            if not (c1 <= c2 <= c / B * (1 + 1e-12)):
                warns.append(paper_warning("DiceSGD-E2", f"Thm 3.7 needs 0 < C1 <= C2 <= C/B; here C1 = {c1:g}, C2 = {c2:g}, "
                                           f"C/B = {c / B:g}"))
            if self.automatic and self.G_prime > 1.0:
                warns.append(paper_warning("DiceSGD-E2", "the automatic variant's 96 = 32 * 3 assumes G' <= C; G' is not "
                                           "bounded here"))
            order, conv, accounting = None, "mironov", "rdp (the paper's Thm 3.7 bound, best real order, Lemma B.4)"
        elif accountant == "rdp":
            s1 = smallest_scale(lambda s: self.epsilon(d, s, accountant="rdp").epsilon, e, start=tight_s1, rtol=1e-12)
            rdp = self.epsilon(d, s1, accountant="rdp")
            achieved, order, conv = rdp.epsilon, rdp.order, rdp.conversion
            accounting = "rdp (solved on RDP alone, assumption-free; certified by exact GDP)"
        else:
            s1 = tight_s1
            achieved = None
        certified = self.epsilon(d, s1).epsilon
        if achieved is None:
            achieved, order, conv, accounting = certified, None, None, "gdp (assumption-free, DiceSGD-E5)"
        notes["noise_multiplier"] = s1 * B / c1
        notes.update(self._versus_dp_sgd(e, d, s1))
        return CalibrationReport(self.name, method, e, d, {"sigma1": s1}, achieved, certified, order, conv,
                                 accounting, tuple(warns), notes)
