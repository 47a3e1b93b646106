"""The reference optimizers by name (the same names as :data:`dpcalib.mechanisms.ALGORITHMS`)."""

from ._core import squared_loss
from .d2p import AdaD2P, ClipD2P, ConstD2P
from .diff2 import DIFF2BVR, DIFF2GD, DPGD
from .sgd import DPSGD, DPSRM, DiceSGD

#: registry name -> optimizer class
OPTIMIZERS = {c.name: c for c in (DPGD, DIFF2GD, DIFF2BVR, DPSGD, DPSRM, DiceSGD, ClipD2P, ConstD2P, AdaD2P)}

__all__ = ["OPTIMIZERS", "squared_loss", "DPGD", "DIFF2GD", "DIFF2BVR", "DPSGD", "DPSRM", "DiceSGD", "ClipD2P",
           "ConstD2P", "AdaD2P"]
