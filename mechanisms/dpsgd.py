"""DP-SGD / DPSGD-GC (Abadi et al. 2016; DiceSGD paper Algorithm 1 + Thm 2.3): Poisson-sampled
Gaussian steps, add/remove adjacency, noise ``N(0, z^2 C^2 I)`` on the SUM of clipped per-example
gradients (std ``z C / B`` on the average)."""

from __future__ import annotations

from dataclasses import dataclass

from ..accountant import PoissonSampledGaussianEvent, PrivacyAccountant
from ..accountant import validation as v

from ._releases import Mechanism, ReleaseSpec
from ._report import CalibrationReport, paper_warning
from ._solve import calibrate_poisson, certify, check_accountant, pld_tighten, rdp_start, rdp_tight_text, start_rtol
from ._shared import ABADI_ORDERS, abadi_multiplier, check_target as _check_target

__all__ = ["DPSGD", "ABADI_ORDERS", "classical_gaussian_multiplier"]

def classical_gaussian_multiplier(epsilon, delta) -> float:
    """Classical Gaussian mechanism (Dwork & Roth Thm A.1; AdaD2P Prop. 1; DiceSGD Def. 2.2; GAUSS-E1):
    ``sigma >= sqrt(2 log(1.25/delta)) / eps`` for ONE release.  Valid only for eps < 1 (the papers
    state it for all eps > 0): a ``PaperConditionWarning`` (GAUSS-E1) is issued for eps >= 1."""
    import math

    e = v.positive(epsilon, "epsilon")
    d = v.delta(delta)
    if e >= 1.0:
        paper_warning("GAUSS-E1", f"the classical Gaussian mechanism bound is proven only for eps < 1 (got eps={e:g})")
    return math.sqrt(2.0 * math.log(1.25 / d)) / e


@dataclass(frozen=True)
class DPSGD(Mechanism):
    """DP-SGD with Poisson sampling rate ``q = B/N`` for ``steps`` iterations (add/remove)."""

    sampling_rate: float
    steps: int

    name = "dp-sgd"
    releases = (ReleaseSpec("step", "noise_multiplier", "add/remove", "Poisson", "clip", "T steps"),)
    field_help = {"sampling_rate": "Poisson sampling rate q = B/N", "steps": "steps T"}
    calibrate_options = {}

    def __post_init__(self):
        v.in_range(self.sampling_rate, "sampling_rate", 0.0, 1.0, low_open=True)
        v.integer(self.steps, "steps", low=1)

    def sensitivity(self, release: str, clip=None) -> float:
        """The sum of per-example gradients clipped to ``clip`` changes by at most ``clip`` when one
        record is added or removed."""
        self.release(release)
        return 1.0 if clip is None else float(clip)

    def _event(self, release: str, z: float):
        return PoissonSampledGaussianEvent(self.sampling_rate, z)

    def accountant(self, noise_multiplier, **kwargs) -> PrivacyAccountant:
        return self._accountant_of({"noise_multiplier": noise_multiplier}, {"step": self.steps}, **kwargs)

    def calibrate(self, epsilon, delta, method="tight", accountant="pld", rtol=1e-9) -> CalibrationReport:
        """``"paper"``: Abadi's Theorem 1 (DPSGD-GC, Thm 2.3 of the DiceSGD paper) has unspecified constants (DPSGD-E2), so the
        paper's calibration is the numerical Poisson accountant (DPSGD-E2): integer orders
        2..256, 300, 400, 512, 768, 1024 and Lemma B.4.  ``"tight"``: the exact Poisson RDP at
        real orders with the improved conversion (``accountant="rdp"``), or, with
        ``accountant="pld"`` (the default), the smallest noise whose certified eps (the PLD upper bound of both
        directions, or RDP if smaller) meets the target (3-8 % less noise in the common regime, up to 25 % with few
        steps; 0.1-1 s per calibration).  Either way ``certified_epsilon`` is the best certified eps of the answer."""
        check_accountant(accountant)
        e, d = _check_target(epsilon, delta, method)
        warns, cap = [], None
        if method == "paper":
            warns.append(paper_warning("DPSGD-E2", "Abadi et al. Thm 1 (DPSGD-GC, Thm 2.3 of the DiceSGD paper) has unspecified constants c1, c2; "
                                       "the noise comes from the numerical Poisson-SGM accountant instead"))
            z = self.level("step", abadi_multiplier(self.sampling_rate, self.steps, e, d, rtol))
            rep = self.accountant(z, orders=ABADI_ORDERS).epsilon_report(d, "rdp", "mironov", refine=False)
            accounting = "rdp (Poisson SGM, integer orders, Lemma B.4)"
            lower_noise = None
        else:
            z0 = z = rdp_start(lambda: self.level("step", calibrate_poisson(
                self.sampling_rate, self.steps, e, d, conversion="improved", refine=True,
                rtol=start_rtol(accountant, rtol), exact=accountant == "rdp")), accountant)
            if accountant == "pld":
                z, _, z_lo, cap = pld_tighten(self.accountant, e, d, z0)
                lower_noise = None if z_lo is None else {"noise_multiplier": z_lo}
            else:
                lower_noise = None
        cert, br = certify(self.accountant(z), d, accountant)
        if method == "tight":
            rep = cert
            accounting = ("rdp (exact Poisson SGM, real order, improved conversion)" if br is None else
                          f"{br.method} (certified upper end of the bracket; Poisson SGM, remove and add "
                          f"directions; {rdp_tight_text(z0, note=cap)})")
        notes = {"noise_std_on_sum": "noise_multiplier * C",
                 "noise_std_on_average": "noise_multiplier * C / B (Thm 2.3 of the DiceSGD paper is missing this B^2 for noise "
                                         "on the sum: DPSGD-E1)"}
        if method == "tight" and br is not None:
            notes["rdp_tight_noise"] = None if z0 is None else {"noise_multiplier": z0}
        return CalibrationReport(self.name, method, e, d, {"noise_multiplier": z}, rep.epsilon, cert.epsilon,
                                 rep.order, rep.conversion, accounting, tuple(warns), notes,
                                 None if br is None else br.lower, lower_noise)
