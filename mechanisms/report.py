"""What a calibration returns, and how paper errata are reported."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

__all__ = []

METHODS = ("paper", "tight")


class PaperConditionWarning(UserWarning):
    """A paper's formula is wrong, or is used outside its conditions (message cites the erratum id)."""


def paper_warning(erratum: str, reason: str, *, emit: bool = True) -> str:
    """Format ``[<erratum id>] <reason>`` (ids: docs/errata.md) and (optionally) emit it as a :class:`PaperConditionWarning`.

    Args:
        erratum: the erratum id (see docs/errata.md), e.g. ``"E3"``.
        reason: what failed, in words.
        emit: whether to also emit the message as a :class:`PaperConditionWarning`.

    Returns:
        The formatted message ``[<erratum id>] <reason>``.
    """
    msg = f"[{erratum}] {reason}"
    if emit:
        warnings.warn(msg, PaperConditionWarning, stacklevel=3)
    return msg


@dataclass(frozen=True)
class CalibrationReport:
    """Noise levels for a target (eps, delta) and how they were certified.

    Attributes:
      algorithm: registry name (``"diff2-gd"``...).
      method: ``"paper"`` (closed form as printed) or ``"tight"`` (smallest noise, same split).
      epsilon, delta: the target.
      noise: the noise levels under the algorithm's own names (``sigma1``... or ``noise_multiplier``).
      achieved_epsilon: eps recomputed by an accountant for these noise levels: in paper mode with
        the paper's own accounting (order and conversion as printed); in tight mode with the best
        accountant (exact GDP, or RDP with the improved conversion at the optimal order).
      certified_epsilon: eps of these noise levels under the best sound accountant -- the smallest
        of exact GDP, the PLD upper bound and RDP (equal to ``achieved_epsilon`` in tight mode; in
        paper mode it shows what the paper's noise really buys).
      order, conversion, accounting: how ``achieved_epsilon`` was obtained.
      warnings: one line per failed paper condition, each citing the spec's erratum id.
      notes: name -> text (e.g. why sigma4 is not needed).
    """

    algorithm: str
    method: str
    epsilon: float
    delta: float
    noise: dict
    achieved_epsilon: float
    certified_epsilon: float
    order: float | None
    conversion: str | None
    accounting: str
    warnings: tuple = field(default=())
    notes: dict = field(default_factory=dict)
    #: the PLD lower bound on the true eps of these noise levels (same dominating pairs); None
    #: where the PLD does not apply
    epsilon_lower: float | None = None
    #: tight mode: the noise levels (same split) below which that lower bound already exceeds the
    #: target -- no smaller noise can be certified with these pairs; the room left is the ratio
    lower_bound_noise: dict | None = None

    @property
    def epsilon_upper(self) -> float:
        """The certified upper end of the bracket (= ``certified_epsilon``)."""
        return self.certified_epsilon

    def __getitem__(self, name: str) -> float:
        return self.noise[name]
