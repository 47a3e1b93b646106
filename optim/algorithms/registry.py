"""The reference optimizer of each registered algorithm, resolved from
:data:`dpcalib.mechanisms.REGISTRY` (the one list of the algorithms): ``"module:Class"`` names a
class of this package, ``"package.module:Class"`` one anywhere (an algorithm registered from
outside dpcalib)."""

from __future__ import annotations

from importlib import import_module

from ...mechanisms.registry import RegistryView, lookup

from .core import squared_loss
from .d2p import AdaD2P, ClipD2P, ConstD2P
from .diff2 import DIFF2BVR, DIFF2GD, DPGD
from .sgd import DPSGD, DPSRM, DiceSGD

__all__ = ["OPTIMIZERS", "optimizer_class", "squared_loss", "DPGD", "DIFF2GD", "DIFF2BVR", "DPSGD", "DPSRM",
           "DiceSGD", "ClipD2P", "ConstD2P", "AdaD2P"]


def optimizer_class(name: str) -> type:
    """The reference optimizer of the registered algorithm ``name``.

    Args:
        name: a registered algorithm's name (e.g. ``"dp-sgd"``).

    Returns:
        The optimizer class (imported from its ``"module:Class"`` path when it is registered as one).

    Raises:
        InputError: if ``name`` is not registered (raised by the registry's lookup).
    """
    path = lookup(name).optimizer
    if isinstance(path, type):
        return path
    module, cls = path.split(":")
    return getattr(import_module(module if "." in module else f"{__package__}.{module}"), cls)


#: registry name -> optimizer class
OPTIMIZERS = RegistryView(optimizer_class)
