"""Mechanism descriptions of each paper's noise schedule, built on :mod:`accountant`.

Each class is a frozen description of a run's shape (validated at construction) with
``accountant(noise...)`` (its privacy events), ``epsilon(delta, noise...)`` and
``calibrate(epsilon, delta, method="paper" | "tight")`` returning a :class:`CalibrationReport`.
See docs/calibration.md.
"""

from .releases import Mechanism, PerLayerClip, ReleaseSpec
from .report import METHODS, CalibrationReport, PaperConditionWarning, paper_warning
from .d2p import AdaD2P, ClipD2P, ConstD2P, NoPrivacyGuaranteeError
from .dicesgd import DiceSGD, dice_code_multiplier, dice_const_needed, dice_safe_sigma1_rdp
from .diff2 import DIFF2BVR, DIFF2GD, DPGD
from .shared import ABADI_ORDERS
from .dpsgd import DPSGD, classical_gaussian_multiplier
from .dpsrm import DPSRM

from .registry import ALGORITHMS, REGISTRY, Algorithm, lookup, register


__all__ = [
    "ALGORITHMS", "REGISTRY", "Algorithm", "lookup", "register", "METHODS", "CalibrationReport",
    "PaperConditionWarning", "NoPrivacyGuaranteeError",
    "paper_warning", "Mechanism", "PerLayerClip", "ReleaseSpec",
    "DPGD", "DIFF2GD", "DIFF2BVR", "DPSGD", "ABADI_ORDERS", "DPSRM", "DiceSGD", "dice_const_needed",
    "dice_safe_sigma1_rdp", "dice_code_multiplier", "classical_gaussian_multiplier", "ClipD2P", "ConstD2P", "AdaD2P",
]
