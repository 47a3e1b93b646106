"""DP-GD, DIFF2-GD and DIFF2-BVR-L-SGD (Murata & Suzuki, ICML 2023): privacy events and calibration.

Noise levels follow the paper: ``sigma1`` (restart rounds), ``sigma2`` (difference rounds),
``sigma3`` (BVR-L-SGD local steps) are noise std divided by the clipping radius (``C1``,
``C_{2,r}``, ``C_{3,k,r}``).  With replace-one sensitivity ``2C/(n_min P)`` (Lemma C.1) the
noise multipliers are ``z1 = sigma1 n_min P / 2``, ``z2 = sigma2 n_min P / 2`` and, for the local
steps (sensitivity ``2 C_{3,k,r} / b``, Lemma E.1), ``z3 = sigma3 b / 2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..accountant.validation import InputError
from ..accountant import GaussianEvent, PrivacyAccountant, WORSampledGaussianEvent
from ..accountant import validation as v
from ..accountant import gdp_mu, subsampled_rdp_wor

from .releases import Mechanism, ReleaseSpec, meets_accountant
from .report import CalibrationReport, paper_warning
from .shared import check_calibration, check_target as _check_target, paper_order
from .search import smallest_scale, start_rtol, tight_scale
from .tighten import WOR_START_LABEL, WOR_START_SUFFIX, certify, pld_tighten, rdp_start, rdp_tight_text

__all__ = []

SIGMA4_NOTE = ("Algorithm 4 lists sigma4 but never adds noise with it: its outputs are "
               "post-processing of already-private releases (DIFF2-E4); no sigma4 is needed.")
SIGMA3_NOTE = "no local steps in DIFF2-GD / DP-GD (sigma3 belongs to DIFF2-BVR-L-SGD)"


def _paper_alpha(eps: float, delta: float) -> int:
    """DIFF2 Prop. 4.1 / E.2: alpha = 1 + ceil(2 log(1/delta) / eps)."""
    return paper_order(2.0 * math.log(1.0 / delta) / eps, eps)


_RESTART = ReleaseSpec("restart", "sigma1", "replace-one", "full batch", "clip", "ceil(R/T): rounds 1, T+1, ...")
_DIFFERENCE = ReleaseSpec("difference", "sigma2", "replace-one", "full batch", "clip", "R - ceil(R/T)")


@dataclass(frozen=True)
class _Diff2Run(Mechanism):
    """The run DIFF2-GD and DIFF2-BVR share: ``R`` rounds, restart every ``T``, ``P`` clients, smallest
    local dataset ``n_min`` (the fields and their checks)."""

    rounds: int
    restart_interval: int
    clients: int
    n_min: int

    def __post_init__(self):
        r = v.run_length(self.rounds, "rounds")
        v.run_length(self.restart_interval, "restart_interval")
        if self.restart_interval > r:
            raise InputError(f"restart_interval={self.restart_interval!r} is not allowed: expected an integer "
                             f"in [1, rounds={r}] (T > R leaves no restart after the first round).")
        v.records(self.clients, "clients")
        v.records(self.n_min, "n_min")


@dataclass(frozen=True)
class DIFF2GD(_Diff2Run):
    """DIFF2-GD (Algorithms 1-3): ``R`` rounds, restart every ``T``, ``P`` clients, smallest local
    dataset ``n_min``.  Releases ``v~_r, x_r`` every round (central DP, replace-one, full batch).

    Attributes:
        rounds: rounds R, an integer in [1, 1e9].
        restart_interval: restart interval T, an integer in [1, R].
        clients: clients P, an integer in [1, 1e9].
        n_min: smallest local dataset n_min, an integer in [1, 1e9].

    Raises:
        InputError: if a field is out of its range (checked on construction).
    """

    name = "diff2-gd"
    releases = (_RESTART, _DIFFERENCE)
    #: one line per field and per calibrate() option (the CLI's --help is built from these)
    field_help = {"rounds": "rounds R", "restart_interval": "restart interval T", "clients": "clients P",
                  "n_min": "smallest local dataset n_min"}
    calibrate_options = {"u": "budget split u > 1 (Prop. 4.1)"}

    # -- shape --------------------------------------------------------------------------------
    @classmethod
    def from_run(cls, run) -> "DIFF2GD":
        """The mechanism of a full-batch ``run`` (:class:`~dpcalib.mechanisms.shape.Run`): its rounds,
        restart interval, clients and their smallest dataset.

        Args:
            run: the run's shape.

        Returns:
            The mechanism.

        Raises:
            InputError: if the run's shape is out of range.
        """
        return cls(run.steps, run.restart_interval, run.clients, run.n_min)

    @property
    def restarts(self) -> int:
        """Restart rounds r = 1, T+1, 2T+1, ...: ceil(R/T)."""
        return -(-self.rounds // self.restart_interval)

    @property
    def differences(self) -> int:
        """Difference rounds (those that are not restarts): R - ceil(R/T)."""
        return self.rounds - self.restarts

    # -- releases -----------------------------------------------------------------------------
    def sensitivity(self, release: str, clip=None) -> float:
        """Lemma C.1: the average over P clients of each client's mean of gradients (or gradient
        differences) clipped to ``clip`` moves by at most ``2 clip / (n_min P)`` when one record is
        replaced.  Both releases (restart, difference) share the rule.

        Args:
            release: ``"restart"`` or ``"difference"``.
            clip: the clip radius (None: 1, so the result is per unit of clip).

        Returns:
            The L2 sensitivity ``2 clip / (n_min P)``.
        """
        self.release(release)
        return 2.0 * (1.0 if clip is None else float(clip)) / (self.n_min * self.clients)

    def _event(self, release: str, z: float):
        return GaussianEvent(z)

    def _z(self, sigma: float) -> float:
        return self.noise_multiplier("restart", sigma)

    # -- accounting ---------------------------------------------------------------------------
    def release_counts(self) -> dict:
        """Restart and difference rounds of a whole run.

        Returns:
            ``{"restart": ceil(R/T), "difference": R - ceil(R/T)}``.
        """
        return {"restart": self.restarts, "difference": self.differences}

    def accountant(self, sigma1, sigma2=None) -> PrivacyAccountant:
        """The privacy events of a run with these noise levels (Lemma C.1, adaptive composition).

        Args:
            sigma1: restart-round noise level (std / clip radius), > 0.
            sigma2: difference-round noise level, > 0; required only when there are difference
                rounds (T > 1).

        Returns:
            A :class:`~dpcalib.accountant.PrivacyAccountant` of the whole run.
        """
        noise = {"sigma1": v.positive(sigma1, "sigma1")}
        if self.differences:
            noise["sigma2"] = v.positive(sigma2, "sigma2")
        return self._accountant_of(noise)

    def _slope(self, s1, s2) -> float:
        """RDP(alpha) = alpha * slope (Prop. 4.1's expression: 1/(2 z^2) per Gaussian release)."""
        out = self.restarts / (2.0 * self._z(s1) ** 2)
        if self.differences:
            out += self.differences / (2.0 * self._z(s2) ** 2)
        return out

    # -- calibration --------------------------------------------------------------------------
    def paper_sigmas(self, epsilon, delta, u=1.25):
        """DIFF2 Prop. 4.1 as printed: ``(alpha, sigma1, sigma2)``.

        Args:
            epsilon: target eps, > 0.
            delta: target delta, in (0, 1).
            u: budget split u > 1 (u >= 1 when T = 1).

        Returns:
            ``(alpha, sigma1, sigma2)``: the integer order and the two noise levels (``sigma2`` None
            when there are no difference rounds).
        """
        e, d = _check_target(epsilon, delta, "paper")
        uu = self._check_u(u)
        a = _paper_alpha(e, d)
        n2p2 = (self.n_min * self.clients) ** 2
        s1 = math.sqrt(4.0 * uu * a * self.restarts / (n2p2 * e))
        s2 = math.sqrt(4.0 * uu / (uu - 1.0) * a * self.differences / (n2p2 * e)) if self.differences else None
        return a, s1, s2

    def _check_u(self, u) -> float:
        if self.differences == 0:  # T = 1: DP-GD, u -> 1 is exact (DIFF2-E3)
            uu = v.in_range(u, "u", 1.0, math.inf, high_open=True)
            return uu if uu > 1.0 else 1.0
        return v.in_range(u, "u", 1.0, math.inf, low_open=True, high_open=True)

    @meets_accountant
    def calibrate(self, epsilon, delta, method="tight", accountant="best", u=1.25, shares=None) -> CalibrationReport:
        """Noise levels ``sigma1, sigma2`` for an ``(epsilon, delta)`` target.

        Split of the budget: ``u`` as in Prop. 4.1 (restart rounds get ``1/u`` of the RDP budget,
        difference rounds ``(u-1)/u``), or ``shares=(s1, s2)`` with ``s1 + s2 = 1``, which is
        ``u = 1/s1``.  ``"paper"``: Prop. 4.1 verbatim (alpha = 1 + ceil(2 log(1/delta)/eps)).
        ``"tight"``: the same ratio sigma1/sigma2, scaled down until the exact GDP eps equals the
        target (never above it) -- the best certified eps (``accountant="best"``, the default);
        ``accountant="rdp"`` solves on RDP alone (more noise; for comparison).

        Args:
            epsilon, delta, method, accountant: the target and the route, as
                :func:`~.shared.check_calibration` takes them.
            u: budget split u > 1 (Prop. 4.1).
            shares: None, or ``(s1, s2)``, two positive numbers summing to 1 (replaces ``u``).

        Returns:
            A :class:`CalibrationReport` with ``sigma1``, ``sigma2`` (``sigma3`` and ``sigma4``
            None).
        """
        accountant, e, d = check_calibration(epsilon, delta, method, accountant)
        if shares is not None:
            u = self._u_from_shares(shares)
        a, p1, p2 = self.paper_sigmas(e, d, u)
        warns = []
        if method == "paper":
            s1, s2 = p1, p2
            slope = self._slope(s1, s2)
            achieved = a * slope + math.log(1.0 / d) / (a - 1.0)
            order, conv, accounting = float(a), "mironov", "rdp (Prop. 4.1 at the paper's alpha, Lemma B.4)"
        else:
            # GDP: mu scales as 1/noise, so the common factor is closed-form; then verified.
            t = math.sqrt(2.0 * self._slope(p1, p2)) / gdp_mu(e, d)

            solve_on = "auto" if accountant == "pld" else "rdp"     # auto: exact GDP here

            def eps_at(k):
                return self.epsilon(d, p1 * k, None if p2 is None else p2 * k, accountant=solve_on).epsilon
            if eps_at(t) > e:  # rounding (GDP) or RDP's larger eps: step to the feasible side
                t = smallest_scale(eps_at, e, start=t, rtol=1e-12)
            s1, s2 = p1 * t, (None if p2 is None else p2 * t)
            achieved, order, conv, accounting = None, None, None, "gdp (exact)"
            if accountant == "rdp":
                rdp = self.epsilon(d, s1, s2, accountant="rdp")
                achieved, order, conv = rdp.epsilon, rdp.order, rdp.conversion
                accounting = "rdp (solved on RDP alone; certified by exact GDP)"
        certified = self.epsilon(d, s1, s2).epsilon
        if achieved is None:
            achieved = certified
        noise = {"sigma1": s1, "sigma2": s2, "sigma3": None, "sigma4": None}
        notes = {"sigma3": SIGMA3_NOTE, "sigma4": "no local steps in DIFF2-GD (sigma4 is unused even in Algorithm 4)",
                 "z1": self._z(s1), "z2": None if s2 is None else self._z(s2), "u": u}
        if s2 is None:
            notes["sigma2"] = "T = 1: every round is a restart round (DP-GD); no difference rounds"
        return CalibrationReport(self.name, method, e, d, noise, achieved, certified, order, conv,
                                 accounting, tuple(warns), notes)

    @staticmethod
    def _u_from_shares(shares) -> float:
        try:
            s1, s2 = (float(x) for x in shares)
        except (TypeError, ValueError):
            raise InputError(f"shares={shares!r} is not allowed: expected two positive numbers summing to 1.") from None
        if not (s1 > 0 and s2 > 0 and abs(s1 + s2 - 1.0) < 1e-9):
            raise InputError(f"shares={shares!r} is not allowed: expected two positive numbers summing to 1.")
        return 1.0 / s1


@dataclass(frozen=True)
class DPGD(Mechanism):
    """DP-GD, the DIFF2 baseline (= DIFF2-GD with T = 1, u -> 1): ``sigma1`` only.

    Attributes:
        rounds: rounds R, an integer in [1, 1e9].
        clients: clients P, an integer in [1, 1e9].
        n_min: smallest local dataset n_min, an integer in [1, 1e9].
    """

    rounds: int
    clients: int
    n_min: int

    name = "dp-gd"
    releases = (ReleaseSpec("restart", "sigma1", "replace-one", "full batch", "clip", "R (every round)"),)
    field_help = {"rounds": "rounds R", "clients": "clients P", "n_min": "smallest local dataset n_min"}
    calibrate_options = {}

    def __post_init__(self):
        v.run_length(self.rounds, "rounds")
        v.records(self.clients, "clients")
        v.records(self.n_min, "n_min")

    @classmethod
    def from_run(cls, run) -> "DPGD":
        """The mechanism of a full-batch ``run`` (:class:`~dpcalib.mechanisms.shape.Run`): its rounds,
        clients and their smallest dataset.

        Args:
            run: the run's shape.

        Returns:
            The mechanism.

        Raises:
            InputError: if the run's shape is out of range.
        """
        return cls(run.steps, run.clients, run.n_min)

    @property
    def _as_diff2(self) -> DIFF2GD:
        return DIFF2GD(self.rounds, 1, self.clients, self.n_min)

    def sensitivity(self, release: str, clip=None) -> float:
        """DIFF2-GD's rule (Lemma C.1): ``2 clip / (n_min P)``.

        Args:
            release: ``"restart"``.
            clip: the clip radius (None: 1).

        Returns:
            The L2 sensitivity.
        """
        self.release(release)
        return self._as_diff2.sensitivity(release, clip)

    def _event(self, release: str, z: float):
        return GaussianEvent(z)

    def release_counts(self) -> dict:
        """Restart rounds of a whole run (every round).

        Returns:
            ``{"restart": R}``.
        """
        return {"restart": self._as_diff2.restarts}

    def accountant(self, sigma1) -> PrivacyAccountant:
        """The privacy events of a run at noise level ``sigma1`` (every round a restart round).

        Args:
            sigma1: noise level (std / clip radius), > 0.

        Returns:
            A :class:`~dpcalib.accountant.PrivacyAccountant` of the whole run.
        """
        return self._as_diff2.accountant(sigma1)

    @meets_accountant
    def calibrate(self, epsilon, delta, method="tight", accountant="best") -> CalibrationReport:
        """``"paper"``: sigma1^2 = 4 alpha R / (n_min^2 P^2 eps) (Prop. 4.1, T = 1, u -> 1);
        ``"tight"``: exact GDP (``accountant="rdp"``: RDP alone, for comparison).

        Args:
            epsilon, delta, method, accountant: the target and the route, as
                :func:`~.shared.check_calibration` takes them.

        Returns:
            A :class:`CalibrationReport` with ``sigma1``.
        """
        rep = self._as_diff2.calibrate(epsilon, delta, method, accountant=accountant, u=1.0)
        notes = dict(rep.notes)
        notes["sigma2"] = "DP-GD has no difference rounds"
        return CalibrationReport(self.name, rep.method, rep.epsilon, rep.delta, rep.noise, rep.achieved_epsilon,
                                 rep.certified_epsilon, rep.order, rep.conversion, rep.accounting, rep.warnings, notes)


@dataclass(frozen=True)
class DIFF2BVR(_Diff2Run):
    """DIFF2-BVR-L-SGD (Algorithm 4): DIFF2-GD plus, each round, ``K`` local steps on ONE client
    (round robin, ``p_r = 1 + r % P``) with minibatches of ``b`` records drawn without replacement.

    Privacy events per client (Prop. E.2): the DIFF2 rounds, and ``ceil(R/P)`` rounds of local
    steps each with a subsampled Gaussian (``gamma = b / n_min``, replace-one).  The paper counts
    ``K`` local noisy steps per round; the algorithm adds noise at k = 2..K, i.e. ``K - 1`` steps
    (DIFF2-E9): paper mode uses ``K``, tight mode ``K - 1``.

    Attributes:
        rounds, restart_interval, clients, n_min: as :class:`DIFF2GD`.
        local_steps: local steps K per round, an integer in [1, 1e9].
        batch_size: local minibatch b, an integer in [1, n_min].

    Raises:
        InputError: if a field is out of its range (checked on construction).
    """

    local_steps: int
    batch_size: int

    name = "diff2-bvr"
    releases = (_RESTART, _DIFFERENCE,
                ReleaseSpec("local", "sigma3", "replace-one", "fixed size without replacement", "clip",
                            "(K - 1) ceil(R/P) per client"))
    field_help = {**DIFF2GD.field_help, "local_steps": "local steps K",
                  "batch_size": "local minibatch b (without replacement)"}
    calibrate_options = {"u1": "budget split u1 (Prop. E.2)", "u2": "budget split u2 (Prop. E.2)"}

    def __post_init__(self):
        super().__post_init__()
        v.run_length(self.local_steps, "local_steps")
        v.records(self.batch_size, "batch_size")
        if self.batch_size > self.n_min:
            raise InputError(f"batch_size={self.batch_size!r} is not allowed: expected an integer in "
                             f"[1, n_min={self.n_min}] (b > n_min: a minibatch larger than the local dataset).")

    @property
    def _gd(self) -> DIFF2GD:
        return DIFF2GD(self.rounds, self.restart_interval, self.clients, self.n_min)

    @property
    def local_rounds(self) -> int:
        """Rounds in which one client does local work: ceil(R/P)."""
        return -(-self.rounds // self.clients)

    @property
    def gamma(self) -> float:
        """The local steps' sampling rate ``b / n_min``."""
        return self.batch_size / self.n_min

    def sensitivity(self, release: str, clip=None) -> float:
        """Restart and difference rounds: DIFF2-GD's ``2 clip / (n_min P)``; a local step's minibatch
        mean of ``b`` clipped differences: ``2 clip / b`` (Lemma E.1).

        Args:
            release: ``"restart"``, ``"difference"`` or ``"local"``.
            clip: the clip radius (None: 1).

        Returns:
            The L2 sensitivity.
        """
        if self.release(release).name == "local":
            return 2.0 * (1.0 if clip is None else float(clip)) / self.batch_size
        return self._gd.sensitivity(release, clip)

    def _event(self, release: str, z: float, bound: str = "thm27"):
        if release == "local":
            return WORSampledGaussianEvent.from_sizes(self.batch_size, self.n_min, z, bound)
        return GaussianEvent(z)

    def _z3(self, sigma3: float) -> float:
        return self.noise_multiplier("local", sigma3)

    def release_counts(self) -> dict:
        """Restart, difference and noisy local steps of a whole run (``K - 1`` per local round).

        Returns:
            A dict release name -> count.
        """
        return {**self._gd.release_counts(), "local": (self.local_steps - 1) * self.local_rounds}

    def accountant(self, sigma1, sigma2, sigma3, *, noisy_steps=None, bound="thm27") -> PrivacyAccountant:
        """Events of a run.  ``noisy_steps`` per local round defaults to the true ``K - 1``.

        Args:
            sigma1: restart-round noise level, > 0.
            sigma2: difference-round noise level, > 0 (None when T = 1).
            sigma3: local-step noise level, > 0.
            noisy_steps: noisy local steps per local round (None: ``K - 1``).
            bound: the WOR subsampled-Gaussian RDP bound (``"thm27"``: WBK19 Thm 27).

        Returns:
            A :class:`~dpcalib.accountant.PrivacyAccountant` of the whole run.
        """
        s3 = v.positive(sigma3, "sigma3")
        k = self.local_steps - 1 if noisy_steps is None else noisy_steps
        acc = self._gd.accountant(sigma1, sigma2)
        if k:
            acc.compose(self._event("local", self._z3(s3), bound), k * self.local_rounds)
        return acc

    # -- paper --------------------------------------------------------------------------------
    def paper_rdp(self, alpha: int, sigma1, sigma2, sigma3) -> float:
        """Prop. E.2's RDP at integer ``alpha``, with ``eps'`` from Lemma B.7 (exact sum) and K steps.

        Args:
            alpha: integer Renyi order, >= 2.
            sigma1: restart-round noise level, > 0.
            sigma2: difference-round noise level (None when T = 1).
            sigma3: local-step noise level, > 0.

        Returns:
            The RDP of the whole run at ``alpha``.
        """
        gd = self._gd.accountant(sigma1, sigma2).rdp([alpha])[0]
        b2s = self.batch_size ** 2 * sigma3 ** 2
        local = subsampled_rdp_wor(alpha, self.gamma, lambda j: 2.0 * np.asarray(j) / b2s)
        return gd + self.local_steps * self.local_rounds * local

    def simple_sigma3(self, epsilon, delta):
        """The explicit sigma3 of Prop. E.2's proof (Lemma B.8 with c = 1):
        ``sigma3^2 = max{(8/3)(4+e) alpha^2/(alpha-1) * 6 K ceil(R/P)/(n_min^2 eps), 6 alpha/b^2}``.
        Returns ``(sigma3, term1, term2, conditions_ok, largest_feasible_b)``.

        Args:
            epsilon: target eps, > 0.
            delta: target delta, in (0, 1).

        Returns:
            ``(sigma3, term1, term2, conditions_ok, largest_feasible_b)`` (the last None if no b
            meets Lemma B.8's conditions).
        """
        e, d = _check_target(epsilon, delta, "paper")
        a = _paper_alpha(e, d)
        n = self.n_min
        term1 = (8.0 / 3.0) * (4.0 + math.e) * a * a / (a - 1.0) * 6.0 * self.local_steps * self.local_rounds / (n * n * e)
        term2 = 6.0 * a / self.batch_size ** 2
        s3sq = max(term1, term2)
        ok = self._b_conditions(self.batch_size, a, s3sq)
        return math.sqrt(s3sq), term1, term2, ok, self._largest_feasible_b(a, term1)

    def _largest_feasible_b(self, a: int, term1: float):
        """The largest b in [1, n_min] that meets Lemma B.8's conditions with its own sigma3 (None if
        none does).  ``b^3 sigma3^2(b) = max(term1 b^3, 6 alpha b)`` grows with b, so the conditions
        hold on an interval [1, b*]: ``b* = floor(min(n/(2 e alpha), (4 n/(alpha term1))^(1/3),
        2 n/(3 alpha^2)))``, confirmed on the conditions themselves around it (float rounding) --
        not a scan of every b up to n_min (which took minutes at n_min = 1e9)."""
        n = self.n_min
        cap = min(n / (2.0 * math.e * a), 2.0 * n / (3.0 * a * a),
                  (4.0 * n / (a * term1)) ** (1.0 / 3.0) if term1 > 0 else math.inf)
        b = int(min(n, max(0.0, math.floor(cap))))

        def feasible(bb):
            return 1 <= bb <= n and self._b_conditions(bb, a, max(term1, 6.0 * a / bb ** 2))

        while b < n and feasible(b + 1):
            b += 1
        while b >= 1 and not feasible(b):
            b -= 1
        return b if b >= 1 else None

    def _b_conditions(self, b: int, a: int, s3sq: float) -> bool:
        n = self.n_min
        return b <= n / (2.0 * math.e * a) and b <= (4.0 * n / (a * s3sq)) ** (1.0 / 3.0)

    @meets_accountant
    def calibrate(self, epsilon, delta, method="tight", accountant="best", u1=3.0, u2=3.0) -> CalibrationReport:
        """``sigma1..sigma3`` (``sigma4`` reported as not needed).

        ``"paper"``: Prop. E.2 with ``u1, u2`` (1/u1 + 1/u2 < 1 is required, DIFF2-E6; the simple
        sigma3 bound needs 1/u1 + 1/u2 <= 2/3, DIFF2-E7, else sigma3 solves Prop. E.2's condition
        ``2 K ceil(R/P) eps'(alpha) <= (1 - 1/u1 - 1/u2) eps`` with the exact Lemma B.7).
        ``"tight"``: the paper's three noise levels scaled by one common factor (same split)
        until the RDP accountant (WBK19 Thm 27, improved conversion, K - 1 noisy steps) hits the
        target (``accountant="rdp"``); with ``accountant="best"`` (the default), until the certified eps
        (PLD upper bound of the replace-one WOR pairs, or RDP if smaller) does.

        Args:
            epsilon, delta, method, accountant: the target and the route, as
                :func:`~.shared.check_calibration` takes them.
            u1: budget split u1 > 1 (Prop. E.2).
            u2: budget split u2 > 1, with 1/u1 + 1/u2 < 1.

        Returns:
            A :class:`CalibrationReport` with ``sigma1``, ``sigma2``, ``sigma3`` (``sigma4`` None).

        Raises:
            InputError: if 1/u1 + 1/u2 >= 1 (DIFF2-E6), or a target or split is not allowed.
        """
        accountant, e, d = check_calibration(epsilon, delta, method, accountant)
        uu1 = v.in_range(u1, "u1", 1.0, math.inf, low_open=True, high_open=True)
        uu2 = v.in_range(u2, "u2", 1.0, math.inf, low_open=True, high_open=True)
        slack = 1.0 - 1.0 / uu1 - 1.0 / uu2
        if slack <= 0:
            raise InputError(f"u1={u1!r}, u2={u2!r} are not allowed: Prop. E.2 needs 1/u1 + 1/u2 < 1 "
                             f"(here 1 - 1/u1 - 1/u2 = {slack:.6g}, so no sigma3 exists; DIFF2-E6). "
                             "The u = 1.25 of the DIFF2-GD experiments is not usable here; e.g. u1 = u2 = 3.")
        emit = method == "paper"
        warns = []
        a = _paper_alpha(e, d)
        n2p2 = (self.n_min * self.clients) ** 2
        gd = self._gd
        p1 = math.sqrt(4.0 * uu1 * a * gd.restarts / (n2p2 * e))
        p2 = math.sqrt(4.0 * uu2 * a * gd.differences / (n2p2 * e)) if gd.differences else None
        p3, term1, term2, ok, best_b = self.simple_sigma3(e, d)
        if slack < 1.0 / 3.0 - 1e-12:
            warns.append(paper_warning("DIFF2-E7", f"the simple sigma3 bound assumes 1/u1 + 1/u2 <= 2/3 (here "
                                       f"{1 / uu1 + 1 / uu2:.6g}); sigma3 solved from Prop. E.2's condition "
                                       "with the exact Lemma B.7 instead", emit=emit))
            target_local = slack * e / (2.0 * self.local_steps * self.local_rounds)
            b2 = self.batch_size ** 2

            def local_eps(s3):
                return subsampled_rdp_wor(a, self.gamma, lambda j: 2.0 * np.asarray(j) / (b2 * s3 * s3))
            p3 = smallest_scale(local_eps, target_local, start=p3)
        elif not ok:
            warns.append(paper_warning("DIFF2-E8", f"b={self.batch_size} violates the simple sigma3 bound's conditions "
                                       f"b <= n_min/(2 e alpha) and b <= (4 n_min/(alpha sigma3^2))^(1/3) "
                                       f"(largest b that satisfies them: {best_b}); Lemma B.8 is not certified "
                                       "here, eps is recomputed with the exact Lemma B.7", emit=emit))
        if method == "paper":
            s1, s2, s3 = p1, p2, p3
            rdp = self.paper_rdp(a, s1, s2, s3)
            achieved = rdp + math.log(1.0 / d) / (a - 1.0)
            order, conv, accounting = float(a), "mironov", "rdp (Prop. E.2 at the paper's alpha, Lemma B.7, Lemma B.4)"
            lower_noise = None
        else:
            def build(k):
                return self.accountant(p1 * k, None if p2 is None else p2 * k, p3 * k)
            t0 = t = rdp_start(lambda: tight_scale(build, e, d, rtol=start_rtol(accountant),
                                                   exact=accountant == "rdp"), accountant)
            t_lo = cap = None
            if accountant == "pld":
                t, _, t_lo, cap = pld_tighten(build, e, d, t0)
            s1, s2, s3 = p1 * t, (None if p2 is None else p2 * t), p3 * t
            lower_noise = None if t_lo is None else {"sigma1": p1 * t_lo, "sigma2": None if p2 is None else p2 * t_lo,
                                                     "sigma3": p3 * t_lo}
            achieved = None
        own, cert, br = certify(self.accountant(s1, s2, s3), d, accountant)
        certified = cert.epsilon
        if achieved is None:
            achieved, order, conv = own.epsilon, own.order, own.conversion
            accounting = ("rdp (WBK19 Thm 27, K-1 noisy steps)" if accountant == "rdp" else
                          f"{br.method} (certified upper end of the bracket; WOR replace-one local steps, K-1 noisy "
                          f"steps; {rdp_tight_text(t0, WOR_START_LABEL, WOR_START_SUFFIX, cap)})")
        noise = {"sigma1": s1, "sigma2": s2, "sigma3": s3, "sigma4": None}
        notes = {"sigma4": SIGMA4_NOTE, "z1": gd._z(s1), "z2": None if s2 is None else gd._z(s2),
                 "z3": self._z3(s3), "u1": uu1, "u2": uu2, "sigma3_term1": term1, "sigma3_term2": term2}
        if method == "tight" and accountant == "pld":
            notes["rdp_tight_noise"] = None if t0 is None else {
                "sigma1": p1 * t0, "sigma2": None if p2 is None else p2 * t0, "sigma3": p3 * t0}
        return CalibrationReport(self.name, method, e, d, noise, achieved, certified, order, conv,
                                 accounting, tuple(warns), notes, br.lower, lower_noise)
