"""The reference optimizer of each registered algorithm, resolved from
:data:`dpcalib.mechanisms.REGISTRY` (the one list of the algorithms): ``"module:Class"`` names a
class of this package, ``"package.module:Class"`` one anywhere (an algorithm registered from
outside dpcalib)."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module

from ...mechanisms import REGISTRY, lookup

from .core import squared_loss
from .d2p import AdaD2P, ClipD2P, ConstD2P
from .diff2 import DIFF2BVR, DIFF2GD, DPGD
from .sgd import DPSGD, DPSRM, DiceSGD

__all__ = ["OPTIMIZERS", "optimizer_class", "squared_loss", "DPGD", "DIFF2GD", "DIFF2BVR", "DPSGD", "DPSRM",
           "DiceSGD", "ClipD2P", "ConstD2P", "AdaD2P"]


def optimizer_class(name: str) -> type:
    """The reference optimizer of the registered algorithm ``name`` (an unknown name raises
    :class:`~dpcalib.accountant.validation.InputError`)."""
    path = lookup(name).optimizer
    if isinstance(path, type):
        return path
    module, cls = path.split(":")
    return getattr(import_module(module if "." in module else f"{__package__}.{module}"), cls)


class _Optimizers(Mapping):
    """registry name -> optimizer class, read from the registry at each lookup (so an algorithm
    registered after import is here too)."""

    def __getitem__(self, name):
        if name not in REGISTRY:
            raise KeyError(name)
        return optimizer_class(name)

    def __iter__(self):
        return iter(list(REGISTRY))

    def __len__(self):
        return len(REGISTRY)

    def __repr__(self):
        return repr(dict(self))


#: registry name -> optimizer class
OPTIMIZERS = _Optimizers()
