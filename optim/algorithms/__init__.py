"""The updates: one module per paper family, each a :class:`~.core.PrivateOptimizer` subclass
whose ``_step`` is one round of the algorithm.

Job: :mod:`.core` (the base class: parameters, the random streams, evaluation, the returned
iterate, the privacy spent, state), :mod:`.noise` (the noise source that makes and records every
release), :mod:`.diff2` (DP-GD, DIFF2-GD, DIFF2-BVR-L-SGD), :mod:`.sgd` (DP-SGD / DPSGD-GC, DP-SRM,
DiceSGD), :mod:`.d2p` (ClipD2P, ConstD2P, AdaD2P), :mod:`.registry` (the optimizer of each
registered algorithm) and :mod:`.distributed` (the same classes on the torch.distributed
transports; imported on demand).

May import: :mod:`dpcalib.accountant`, :mod:`dpcalib.mechanisms`, and the sub-packages below it
(``run``, ``clipping``, ``data``, ``tensors``); never a check (``audit``).
"""

from .core import PrivateOptimizer, accuracy, cross_entropy_loss, squared_loss
from .noise import NoiseSource, Release
from .d2p import AdaD2P, ClipD2P, ConstD2P
from .diff2 import DIFF2BVR, DIFF2GD, DPGD
from .sgd import DPSGD, DPSRM, DiceSGD
from .registry import OPTIMIZERS, register_optimizer

__all__ = ["NoiseSource", "PrivateOptimizer", "Release", "squared_loss", "cross_entropy_loss", "accuracy", "DPGD", "DIFF2GD", "DIFF2BVR", "DPSGD",
           "DPSRM", "DiceSGD", "ClipD2P", "ConstD2P", "AdaD2P", "OPTIMIZERS", "register_optimizer"]
