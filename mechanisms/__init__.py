"""Mechanism descriptions of each paper's noise schedule, built on :mod:`accountant`.

Each class is a frozen description of a run's shape (validated at construction) with
``accountant(noise...)`` (its privacy events), ``epsilon(delta, noise...)`` and
``calibrate(epsilon, delta, method="paper" | "tight")`` returning a :class:`CalibrationReport`.
See docs/calibration.md.
"""

from ._releases import Mechanism, Releases, ReleaseSpec
from ._report import METHODS, CalibrationReport, PaperConditionWarning, paper_warning
from .d2p import AdaD2P, ClipD2P, ConstD2P, NoPrivacyGuaranteeError
from .dicesgd import DiceSGD, dice_code_multiplier, dice_const_needed, dice_safe_sigma1_rdp
from .diff2 import DIFF2BVR, DIFF2GD, DPGD
from ._shared import ABADI_ORDERS
from .dpsgd import DPSGD, classical_gaussian_multiplier
from .dpsrm import DPSRM

#: name -> (class, source)
ALGORITHMS = {
    "dp-gd": (DPGD, "DIFF2 (Murata & Suzuki, ICML 2023), DP-GD baseline: Prop. 4.1 with T = 1, u -> 1"),
    "diff2-gd": (DIFF2GD, "DIFF2 (Murata & Suzuki, ICML 2023), Algorithms 1-3, Prop. 4.1"),
    "diff2-bvr": (DIFF2BVR, "DIFF2 (Murata & Suzuki, ICML 2023), Algorithm 4, Prop. E.2"),
    "dp-sgd": (DPSGD, "Abadi et al. 2016; DPSGD-GC of DiceSGD (Zhang et al.) Algorithm 1, Thm 2.3"),
    "dp-srm": (DPSRM, "DP-SRM (Wang, Jayaraman, Evans & Gu), supplement eqs. 2.3, 2.5"),
    "dicesgd": (DiceSGD, "DiceSGD (Zhang, Bu, Wu & Hong, 2024), Algorithms 2-4, Thm 3.7"),
    "clipd2p": (ClipD2P, "AdaD2P paper (ICLR 2024 submission), Algorithm 3, Prop. 2"),
    "constd2p": (ConstD2P, "AdaD2P paper (ICLR 2024 submission), Algorithm 2, Prop. 2"),
    "adad2p": (AdaD2P, "AdaD2P paper (ICLR 2024 submission), Algorithm 1 -- no valid guarantee"),
}

__all__ = [
    "ALGORITHMS", "METHODS", "CalibrationReport", "PaperConditionWarning", "NoPrivacyGuaranteeError",
    "paper_warning", "Mechanism", "Releases", "ReleaseSpec",
    "DPGD", "DIFF2GD", "DIFF2BVR", "DPSGD", "ABADI_ORDERS", "DPSRM", "DiceSGD", "dice_const_needed",
    "dice_safe_sigma1_rdp", "dice_code_multiplier", "classical_gaussian_multiplier", "ClipD2P", "ConstD2P", "AdaD2P",
]
