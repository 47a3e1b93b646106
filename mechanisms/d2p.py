"""AdaD2P, ConstD2P and ClipD2P (anonymous ICLR 2024 submission).

Every node adds Gaussian noise to ONE sampled example's gradient per iteration, K iterations,
J examples per node.  Only ClipD2P is accountable: its noise is ``sigma C`` on a gradient clipped
to ``C``.  Prop. 2's constants are unspecified (AdaD2P-E3), so its "paper" calibration is a
numerical accountant.  Two readings of the sampling (AdaD2P-E4): ``"add/remove"`` = Poisson with
q = 1/J and multiplier sigma (Abadi's setting, what Prop. 2 cites); ``"replace-one"`` = exactly one
example without replacement (gamma = 1/J) with sensitivity 2C, multiplier sigma/2.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..accountant.validation import InputError
from ..accountant import PoissonSampledGaussianEvent, PrivacyAccountant, WORSampledGaussianEvent
from ..accountant import validation as v

from .releases import Mechanism, ReleaseSpec, meets_accountant
from .report import CalibrationReport, paper_warning
from .search import start_rtol, tight_scale
from .tighten import certify, pld_tighten, rdp_start, rdp_tight_text
from .shared import check_calibration
from .tighten import calibrate_poisson

__all__ = []

RELATIONS = ("add/remove", "replace-one")


class NoPrivacyGuaranteeError(InputError):
    """The mechanism has no finite (eps, delta) guarantee; no eps or noise can be produced."""


@dataclass(frozen=True)
class ClipD2P(Mechanism):
    """ClipD2P: ``J`` examples per node, ``iterations`` = K, noise multiplier ``sigma`` (std sigma C).

    Attributes:
        samples_per_node: samples per node J, an integer in [1, 1e9].
        iterations: iterations K, an integer in [1, 1e9].
        relation: ``"add/remove"`` (Poisson, q = 1/J) or ``"replace-one"`` (one example without
            replacement).

    Raises:
        InputError: on construction, if a field is out of its range or the relation unknown.
    """

    samples_per_node: int
    iterations: int
    relation: str = "add/remove"

    name = "clipd2p"
    field_help = {"samples_per_node": "samples per node J", "iterations": "iterations K",
                  "relation": "add/remove (Poisson) or replace-one"}
    calibrate_options = {}

    def __post_init__(self):
        v.records(self.samples_per_node, "samples_per_node")
        v.run_length(self.iterations, "iterations")
        if self.relation not in RELATIONS:
            raise InputError(f"relation={self.relation!r} is not allowed: expected one of {RELATIONS}.")

    @property
    def releases(self):
        """The one release, ``"iteration"``, with the sampling of the chosen relation."""
        sampling = "Poisson" if self.relation == "add/remove" else "fixed size without replacement"
        return (ReleaseSpec("iteration", "sigma", self.relation, sampling, "clip", "K per node"),)

    def sensitivity(self, release: str, clip=None) -> float:
        """A node's sum of per-example gradients clipped to ``clip`` (one sampled example): ``clip``
        under add/remove, ``2 clip`` under replace-one.

        Args:
            release: ``"iteration"``.
            clip: the clip norm C (None: 1).

        Returns:
            The L2 sensitivity: ``clip`` (add/remove) or ``2 clip`` (replace-one).
        """
        self.release(release)
        c = 1.0 if clip is None else float(clip)
        return c if self.relation == "add/remove" else 2.0 * c

    def _event(self, release: str, z: float):
        J = self.samples_per_node
        if self.relation == "add/remove":
            return PoissonSampledGaussianEvent(1.0 / J, z)
        return WORSampledGaussianEvent.from_sizes(1, J, z)

    def release_counts(self) -> dict:
        """Iterations of a whole run.

        Returns:
            ``{"iteration": K}``.
        """
        return {"iteration": self.iterations}

    def accountant(self, sigma) -> PrivacyAccountant:
        """The privacy events of a whole run at noise multiplier ``sigma``.

        Args:
            sigma: noise level (std / clip norm C), > 0.

        Returns:
            A :class:`~dpcalib.accountant.PrivacyAccountant` of the whole run.
        """
        return self._accountant_of({"sigma": v.positive(sigma, "sigma")})

    @meets_accountant
    def calibrate(self, epsilon, delta, method="tight", accountant="best") -> CalibrationReport:
        """``"paper"``: Prop. 2 cannot be evaluated (c1, c2 unknown, AdaD2P-E3): a numerical
        accountant under the chosen relation with Lemma B.4.  ``"tight"``: the same events with the
        improved conversion (and real orders for add/remove) with ``accountant="rdp"``; with
        ``accountant="best"`` (the default) the smallest sigma whose certified PLD upper bound meets the target.

        Args:
            epsilon, delta, method, accountant: the target and the route, as
                :func:`~.shared.check_calibration` takes them.

        Returns:
            A :class:`CalibrationReport` with ``sigma``.
        """
        accountant, e, d = check_calibration(epsilon, delta, method, accountant)
        J, K = self.samples_per_node, self.iterations
        warns = []
        conv = "mironov" if method == "paper" else "improved"
        start = accountant if method == "tight" else "rdp"          # paper mode: unchanged
        r, exact = start_rtol(start), start == "rdp"
        if method == "paper":
            warns.append(paper_warning("AdaD2P-E3", "Prop. 2 has unspecified constants c1, c2: sigma comes from a numerical "
                                       f"accountant ({self.relation}, Lemma B.4)"))
            if self.relation == "add/remove":
                warns.append(paper_warning("AdaD2P-E4", "the algorithm samples exactly one example (fixed size) under "
                                           "replace-one adjacency, while Abadi's theorem assumes Poisson sampling and "
                                           "add/remove; relation='replace-one' accounts the algorithm as written"))
        # (a tight PLD calibration may start without RDP: rdp_start)
        start_acc = accountant if method == "tight" else "rdp"
        if self.relation == "add/remove":
            s = rdp_start(lambda: self.level("iteration", calibrate_poisson(
                1.0 / J, K, e, d, conversion=conv, refine=True, rtol=r, exact=exact)), start_acc)
        else:
            s = rdp_start(lambda: tight_scale(self.accountant, e, d, conv, rtol=r, exact=exact), start_acc)
        lower_noise = None
        accounting = "rdp (Poisson SGM, q = 1/J)" if self.relation == "add/remove" else "rdp (WBK19 Thm 27, gamma = 1/J)"
        s0, cap = s, None
        if method == "tight" and accountant == "pld":
            s, _, s_lo, cap = pld_tighten(self.accountant, e, d, s0)
            lower_noise = None if s_lo is None else {"sigma": s_lo}
        own, cert, br = certify(self.accountant(s), d, accountant)
        if method == "tight" and accountant == "pld":
            rep = cert
            accounting = f"{br.method} (certified upper end of the bracket; {self.relation}; {rdp_tight_text(s0, 'RDP-tight sigma', note=cap)})"
        else:
            rep = self.epsilon(d, s, accountant="auto", conversion=conv)
        notes = {"noise_std": "sigma * C", "relation": self.relation}
        if method == "tight" and accountant == "pld":
            notes["rdp_tight_noise"] = None if s0 is None else {"sigma": s0}
        return CalibrationReport(self.name, method, e, d, {"sigma": s}, rep.epsilon, cert.epsilon, rep.order,
                                 rep.conversion, accounting, tuple(warns), notes, br.lower, lower_noise)


@dataclass(frozen=True)
class ConstD2P(ClipD2P):
    """ConstD2P: noise ``sigma G`` with G an ESTIMATED gradient bound that is not enforced (AdaD2P-E2).

    Accounted as ClipD2P with C = G, which is valid only if every per-example gradient norm really
    is <= G; every calibration and epsilon carries that warning."""

    name = "constd2p"

    @meets_accountant
    def calibrate(self, epsilon, delta, method="tight", accountant="best") -> CalibrationReport:
        """ClipD2P's calibration with C = G, and the AdaD2P-E2 warning (emitted and in the report).

        Args:
            epsilon, delta, method, accountant: the target and the route, as
                :func:`~.shared.check_calibration` takes them.

        Returns:
            A :class:`CalibrationReport` with ``sigma``.
        """
        paper_warning("AdaD2P-E2", "ConstD2P's G is estimated from non-private runs and not enforced: the guarantee holds "
                      "only if every per-example gradient norm is <= G; clip at G (ClipD2P) to make it hold")
        rep = super().calibrate(epsilon, delta, method, accountant)
        w = rep.warnings + ("[AdaD2P-E2] G is estimated and not enforced; the eps holds only if ||grad|| <= G "
                            "for every example and iterate (use ClipD2P with C = G)",)
        return CalibrationReport(self.name, rep.method, rep.epsilon, rep.delta, rep.noise, rep.achieved_epsilon,
                                 rep.certified_epsilon, rep.order, rep.conversion, rep.accounting, w, rep.notes)


ADAD2P_REASON = (
    "AdaD2P has no finite (eps, delta) guarantee (AdaD2P-E1): its noise N(0, sigma^2 ||g||^2 I) is scaled by the "
    "norm of the very record's gradient, without clipping, so a record with zero gradient is released without noise "
    "while its neighbour's is noisy (infinite privacy loss), and different norms give Gaussians with different "
    "covariances. Prop. 2 cannot hold for it. Use ClipD2P (noise sigma*C on a gradient clipped to C) instead.")


@dataclass(frozen=True)
class AdaD2P:
    """AdaD2P: refused.  Kept so that every algorithm of the papers has an entry that explains itself.

    Attributes:
        samples_per_node: samples per node J.
        iterations: iterations K.
    """

    samples_per_node: int = 1
    iterations: int = 1

    name = "adad2p"
    field_help = {"samples_per_node": "samples per node J", "iterations": "iterations K"}
    calibrate_options = {}
    noise_levels = ("sigma",)     # what the paper calls its noise (no release is accountable)

    def claimed_mechanism(self) -> "ClipD2P":
        """The run whose guarantee the paper claims for AdaD2P at the same sigma (Prop. 2 is stated
        for the family): ClipD2P of the same shape under replace-one -- what an audit holds it to.

        Returns:
            A replace-one :class:`ClipD2P` of the same shape.
        """
        return ClipD2P(self.samples_per_node, self.iterations, "replace-one")

    def _refused(self, *args, **kwargs):
        """Refused, as every query of AdaD2P (``accountant``, ``epsilon``, ``epsilon_bracket``,
        ``calibrate``, ``report``): it has no privacy accountant, no finite eps, and no noise gives
        it a guarantee (AdaD2P-E1).

        Args:
            *args: ignored.
            **kwargs: ignored.

        Raises:
            NoPrivacyGuaranteeError: always.
        """
        raise NoPrivacyGuaranteeError(ADAD2P_REASON)

    accountant = epsilon = calibrate = epsilon_bracket = report = _refused
