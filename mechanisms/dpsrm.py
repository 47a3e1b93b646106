"""DP-SRM (Wang, Jayaraman, Evans & Gu; supplement only, Algorithm 1 reconstructed: DPSRM-E4).

Releases ``v_p^t`` for t = 0..T-1 with ABSOLUTE noise stds ``sigma0`` (t = 0, batch ``b0``) and
``sigma`` (t > 0, batch ``b``), minibatches drawn without replacement, replace-one.
Sensitivities (supplement eqs. 2.2, 2.4; the practical clipped variant replaces G by C1 and zeta/n0 by C2):
``Delta_0 = 2 G / b0`` and ``Delta_t = 2 ((1 - gamma) zeta/n0 + gamma G) / b``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..accountant.validation import InputError
from ..accountant import PrivacyAccountant, WORSampledGaussianEvent
from ..accountant import validation as v

from .releases import Mechanism, ReleaseSpec, meets_accountant
from .report import CalibrationReport, paper_warning
from .search import start_rtol, tight_scale
from .tighten import WOR_START_LABEL, WOR_START_SUFFIX, certify, pld_tighten, rdp_start, rdp_tight_text
from .shared import check_calibration, check_target as _check_target, paper_order

__all__ = []


@dataclass(frozen=True)
class DPSRM(Mechanism):
    """DP-SRM on ``n`` records for ``steps`` = T iterations, batches ``b0`` then ``b``.

    ``lipschitz`` is G (or the clip C1), ``step_bound`` is zeta/n0 (or the clip C2), ``momentum``
    is gamma in (0, 1], ``beta`` in (0, 1) splits the budget (RDP ``beta eps``, conversion
    ``(1 - beta) eps``) in the paper's calibration.

    Attributes:
        n: dataset size n, an integer in [1, 1e9].
        steps: iterations T, an integer in [1, 1e9].
        b0: first batch b0, an integer in [1, n].
        b: batch b of the later steps, an integer in [1, n].
        lipschitz: G (or the clip C1), > 0.
        step_bound: zeta/n0 (or the clip C2), > 0.
        momentum: gamma, in (0, 1].

    Raises:
        InputError: on construction, if a field is out of its range.
    """

    n: int
    steps: int
    b0: int
    b: int
    lipschitz: float = 1.0
    step_bound: float = 0.01
    momentum: float = 0.01

    name = "dp-srm"
    releases = (ReleaseSpec("v^0", "sigma0", "replace-one", "fixed size without replacement", "absolute", "1 (t = 0)"),
                ReleaseSpec("v^t", "sigma", "replace-one", "fixed size without replacement", "absolute",
                            "T - 1 (t >= 1)"))
    field_help = {"n": "dataset size n", "steps": "iterations T", "b0": "first batch b0", "b": "batch b",
                  "lipschitz": "G (or clip C1)", "step_bound": "zeta/n0 (or clip C2)",
                  "momentum": "momentum gamma in (0, 1]"}
    calibrate_options = {"beta": "budget split beta (paper mode)"}

    def __post_init__(self):
        n = v.records(self.n, "n")
        v.run_length(self.steps, "steps")
        for name in ("b0", "b"):
            val = getattr(self, name)
            v.records(val, name)
            if val > n:
                raise InputError(f"{name}={val!r} is not allowed: expected an integer in [1, n={n}] "
                                 "(a batch larger than the dataset).")
        v.positive(self.lipschitz, "lipschitz")
        v.positive(self.step_bound, "step_bound")
        v.in_range(self.momentum, "momentum", 0.0, 1.0, low_open=True)

    @classmethod
    def from_run(cls, run) -> "DPSRM":
        """The mechanism of ``run`` (:class:`~dpcalib.mechanisms.shape.Run`): its records, steps and batches
        (``b0 = run.b0``, else ``b``), ``lipschitz = run.clip``, ``step_bound = run.clip2`` (None: 1, a clip
        norm's scale rather than the paper's zeta/n0) and ``run.momentum`` (None: the default).

        Args:
            run: the run's shape.

        Returns:
            The mechanism.

        Raises:
            InputError: if the run's shape is out of range.
        """
        s = run.sampling
        return cls(s.n, run.steps, s.batch_size if run.b0 is None else run.b0, s.batch_size, lipschitz=run.clip,
                   step_bound=1.0 if run.clip2 is None else run.clip2,
                   **({} if run.momentum is None else {"momentum": run.momentum}))

    def sensitivity(self, release: str, clip=None) -> float:
        """Replace-one sensitivity of the released estimator; the clip norms are the mechanism's
        ``lipschitz`` (C1) and ``step_bound`` (C2), so ``clip`` is not used.  ``v^0``: the mean of
        ``b0`` gradients clipped to L, ``2 L / b0``; ``v^t``: ``2 ((1 - gamma) C2 + gamma L) / b``.

        Args:
            release: ``"v^0"`` or ``"v^t"``.
            clip: ignored (the clips are the mechanism's fields).

        Returns:
            The replace-one L2 sensitivity of the release.
        """
        if self.release(release).name == "v^0":
            return 2.0 * self.lipschitz / self.b0
        return 2.0 * ((1.0 - self.momentum) * self.step_bound + self.momentum * self.lipschitz) / self.b

    def _event(self, release: str, z: float):
        b = self.b0 if release == "v^0" else self.b
        return WORSampledGaussianEvent.from_sizes(b, self.n, z)

    def release_counts(self) -> dict:
        """Releases of a whole run: one ``v^0``, ``T - 1`` ``v^t``.

        Returns:
            ``{"v^0": 1, "v^t": T - 1}``.
        """
        return {"v^0": 1, "v^t": self.steps - 1}

    def accountant(self, sigma0, sigma) -> PrivacyAccountant:
        """The privacy events of a whole run (fixed-size WOR sampled Gaussians, replace-one).

        Args:
            sigma0: absolute noise std of ``v^0``, > 0.
            sigma: absolute noise std of ``v^t``, > 0 (ignored when T = 1).

        Returns:
            A :class:`~dpcalib.accountant.PrivacyAccountant` of the whole run.
        """
        noise = {"sigma0": v.positive(sigma0, "sigma0")}
        if self.steps > 1:
            noise["sigma"] = v.positive(sigma, "sigma")
        return self._accountant_of(noise)

    def paper_sigmas(self, epsilon, delta, beta=0.5):
        """The supplement's (2.3)/(2.5) with alpha rounded up (DPSRM-E2): ``(alpha, sigma0, sigma)``.

        Args:
            epsilon: target eps, > 0.
            delta: target delta, in (0, 1).
            beta: budget split, in (0, 1).

        Returns:
            ``(alpha, sigma0, sigma)``: the integer order and the two absolute noise stds.
        """
        e, d = _check_target(epsilon, delta, "paper")
        bb = v.in_range(beta, "beta", 0.0, 1.0, low_open=True, high_open=True)
        a = paper_order(math.log(1.0 / d) / ((1.0 - bb) * e), e)
        c = 14.0 * self.steps * a / (bb * self.n ** 2 * e)
        s0 = math.sqrt(c * self.lipschitz ** 2)
        st = math.sqrt(c * ((1.0 - self.momentum) * self.step_bound + self.momentum * self.lipschitz) ** 2)
        return a, s0, st

    @staticmethod
    def lemma37_rhs(ratio2: float, tau: float, alpha: int) -> float:
        """Right-hand side of Lemma 3.7's order condition, ``alpha <= 1 + (2/3) ratio^2 log(1/(tau alpha (1 + ratio^2)))``
        (the value docs/calibration.md shows).

        Args:
            ratio2: ratio^2 = (sigma / sensitivity)^2, > 0.
            tau: sampling rate b/n, in (0, 1].
            alpha: integer Renyi order, >= 2.

        Returns:
            The right-hand side of the order condition.
        """
        return 1.0 + (2.0 / 3.0) * ratio2 * math.log(1.0 / (tau * alpha * (1.0 + ratio2)))

    @staticmethod
    def corollary53_min_steps(epsilon, delta, beta=0.5):
        """Corollary 5.3 regime (b0^2 = b^2 = n^2 eps/T, corrected ratio^2 = 7 alpha, DPSRM-E1): the
        smallest T for which Lemma 3.7's order condition holds.  Returns ``(alpha, ratio2, tau, T_min)``.

        Args:
            epsilon: target eps, > 0.
            delta: target delta, in (0, 1).
            beta: budget split, in (0, 1) (not checked here).

        Returns:
            ``(alpha, ratio2, tau, T_min)``.
        """
        e = v.positive(epsilon, "epsilon")
        d = v.delta(delta)
        a = paper_order(math.log(1.0 / d) / ((1.0 - beta) * e), e)
        r2 = 7.0 * a
        tau = math.exp(-(a - 1.0) * 1.5 / r2) / (a * (1.0 + r2))
        return a, r2, tau, e / (tau * tau)

    @staticmethod
    def lemma37_holds(ratio2: float, tau: float, alpha: int) -> bool:
        """Reconstructed Lemma 3.7 (the supplement's Lemma 3.7, corrected per DPSRM-E1, DPSRM-E3): ratio^2 >= 0.7 and
        alpha - 1 <= (2/3) ratio^2 log(1/(tau alpha (1 + ratio^2))).

        Args:
            ratio2: ratio^2 = (sigma / sensitivity)^2.
            tau: sampling rate b/n.
            alpha: integer Renyi order.

        Returns:
            True if both conditions hold.
        """
        x = tau * alpha * (1.0 + ratio2)
        if ratio2 < 0.7 or x >= 1.0:
            return False
        return alpha - 1.0 <= (2.0 / 3.0) * ratio2 * math.log(1.0 / x)

    @meets_accountant
    def calibrate(self, epsilon, delta, method="tight", accountant="best", beta=0.5) -> CalibrationReport:
        """``"paper"``: (2.3)/(2.5) with alpha = ceil(log(1/delta)/((1-beta) eps)) + 1; each step's
        RDP taken from the reconstructed Lemma 3.7 (``3.5 alpha tau^2 / ratio^2``), conversion
        Lemma B.4.  A warning is issued for every step group whose Lemma 3.7 conditions fail
        (DPSRM-E3); ``certified_epsilon`` then shows what the paper's noise really buys.
        ``"tight"``: both noise levels scaled by one factor (same split) until WBK19 Thm 27 + the
        improved conversion hits the target (``accountant="rdp"``), or until the certified
        eps (PLD upper bound of the replace-one WOR pair, or RDP if smaller) does
        (``accountant="best"``, the default).  ``certified_epsilon`` is the best certified eps of the answer.

        Args:
            epsilon, delta, method, accountant: the target and the route, as
                :func:`~.shared.check_calibration` takes them.
            beta: budget split, in (0, 1).

        Returns:
            A :class:`CalibrationReport` with ``sigma0``, ``sigma``.
        """
        accountant, e, d = check_calibration(epsilon, delta, method, accountant)
        a, p0, pt = self.paper_sigmas(e, d, beta)
        d0, dt = self.sensitivities
        warns = []
        if method == "paper":
            total = 0.0
            for label, s, delta_, bsz, count in (("t = 0", p0, d0, self.b0, 1), ("t > 0", pt, dt, self.b, self.steps - 1)):
                if count == 0:
                    continue
                r2 = (s / delta_) ** 2
                tau = bsz / self.n
                total += count * 3.5 * a * tau * tau / r2
                if not self.lemma37_holds(r2, tau, a):
                    warns.append(paper_warning("DPSRM-E3", f"Lemma 3.7's conditions fail at {label} (ratio^2 = {r2:.6g}, "
                                               f"tau = {tau:.6g}, alpha = {a}): the paper's per-step RDP is not "
                                               "certified; see certified_epsilon (exact WBK19 accountant)"))
            s0, st = p0, pt
            achieved = total + math.log(1.0 / d) / (a - 1.0)
            order, conv, accounting = float(a), "mironov", "rdp (reconstructed Lemma 3.7, Lemma B.4)"
            lower_noise = None
        else:
            build = lambda k: self.accountant(p0 * k, pt * k)  # noqa: E731
            t0 = t = rdp_start(lambda: tight_scale(build, e, d, rtol=start_rtol(accountant),
                                                   exact=accountant == "rdp"), accountant)
            t_lo = cap = None
            if accountant == "pld":
                t, _, t_lo, cap = pld_tighten(build, e, d, t0)
            s0, st = p0 * t, pt * t
            lower_noise = None if t_lo is None else {"sigma0": p0 * t_lo, "sigma": pt * t_lo}
            achieved = None
        own, cert, br = certify(self.accountant(s0, st), d, accountant)
        if achieved is None:
            achieved, order, conv = own.epsilon, own.order, own.conversion
            accounting = ("rdp (WBK19 Thm 27)" if accountant == "rdp" else
                          f"{br.method} (certified upper end of the bracket; fixed-size WOR, replace-one; "
                          f"{rdp_tight_text(t0, WOR_START_LABEL, WOR_START_SUFFIX, cap)})")
        notes = {"alpha_paper": a, "z0": s0 / d0, "z": st / dt,
                 "ratio2_t0": (s0 / d0) ** 2, "ratio2_t": (st / dt) ** 2, "beta": beta}
        if method == "tight" and accountant == "pld":
            notes["rdp_tight_noise"] = None if t0 is None else {"sigma0": p0 * t0, "sigma": pt * t0}
        return CalibrationReport(self.name, method, e, d, {"sigma0": s0, "sigma": st}, achieved, cert.epsilon,
                                 order, conv, accounting, tuple(warns), notes, br.lower, lower_noise)
