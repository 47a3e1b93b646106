"""The reference optimizer of each registered algorithm.  The algorithms themselves (mechanism,
paper, checks) are registered in :data:`dpcalib.mechanisms.REGISTRY`, a layer that never imports
torch; this layer registers each one's optimizer class under the same name, by reference: nothing
is imported by a string.  An algorithm registered from outside dpcalib adds its class with
:func:`register_optimizer`."""

from __future__ import annotations

from ...accountant.validation import InputError
from ...mechanisms.registry import RegistryView, lookup

from .core import squared_loss
from .d2p import AdaD2P, ClipD2P, ConstD2P
from .diff2 import DIFF2BVR, DIFF2GD, DPGD
from .sgd import DPSGD, DPSRM, DiceSGD

__all__ = ["optimizer_class", "squared_loss"]

#: the papers' algorithms: registry name -> reference optimizer class (fixed)
_BUILT_IN: dict = {cls.name: cls for cls in (DPGD, DIFF2GD, DIFF2BVR, DPSGD, DPSRM, DiceSGD,
                                             ClipD2P, ConstD2P, AdaD2P)}
#: registry name -> the reference optimizer class (the built-in ones, then registered ones)
_CLASSES: dict = dict(_BUILT_IN)


def register_optimizer(name: str, cls: type) -> type:
    """Register ``cls`` as the reference optimizer of the registered algorithm ``name``.

    Args:
        name: a name already in :data:`dpcalib.mechanisms.REGISTRY` (register the algorithm first,
            :func:`dpcalib.mechanisms.register`).
        cls: the optimizer class (a :class:`~.core.PrivateOptimizer` subclass).

    Returns:
        ``cls`` itself.

    Raises:
        InputError: if ``name`` is not registered or is one of dpcalib's own algorithms, or ``cls``
            is not a class.
    """
    lookup(name)
    if not isinstance(cls, type):
        raise InputError(f"cls={cls!r} is not allowed: expected an optimizer class.")
    if name in _BUILT_IN and _BUILT_IN[name] is not cls:
        raise InputError(f"name={name!r} is not allowed: dpcalib's own algorithms keep their optimizers.")
    _CLASSES[name] = cls
    return cls


def optimizer_class(name: str) -> type:
    """The reference optimizer of the registered algorithm ``name``.

    Args:
        name: a registered algorithm's name (e.g. ``"dp-sgd"``).

    Returns:
        The optimizer class.

    Raises:
        InputError: if ``name`` is not registered, or no optimizer is registered for it.
    """
    lookup(name)
    try:
        return _CLASSES[name]
    except KeyError:
        raise InputError(f"algorithm={name!r} has no reference optimizer: register one with "
                         f"dpcalib.optim.register_optimizer({name!r}, cls).") from None


#: registry name -> optimizer class
OPTIMIZERS = RegistryView(optimizer_class)
