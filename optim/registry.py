"""The reference optimizers by name, resolved from :data:`dpcalib.mechanisms.REGISTRY` (the one
list of the algorithms)."""

from importlib import import_module

from ..mechanisms import REGISTRY

from ._core import squared_loss
from .d2p import AdaD2P, ClipD2P, ConstD2P
from .diff2 import DIFF2BVR, DIFF2GD, DPGD
from .sgd import DPSGD, DPSRM, DiceSGD


def _resolve(path: str):
    module, cls = path.split(":")
    return getattr(import_module(f"{__package__}.{module}"), cls)


#: registry name -> optimizer class
OPTIMIZERS = {name: _resolve(a.optimizer) for name, a in REGISTRY.items()}

__all__ = ["OPTIMIZERS", "squared_loss", "DPGD", "DIFF2GD", "DIFF2BVR", "DPSGD", "DPSRM", "DiceSGD", "ClipD2P",
           "ConstD2P", "AdaD2P"]
