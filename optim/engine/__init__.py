"""The engine: dpcalib's private updates in the user's own training loop, behind PyTorch's and
Opacus's conventions (``module``, a ``torch.optim`` optimizer, a ``DataLoader``).

Job: :mod:`.engine` (:class:`PrivacyEngine`: ``make_private``, ``make_private_with_epsilon``,
``get_epsilon``, checkpoints), :mod:`.module` (the wrapped module whose forward and backward leave
each record's signals), :mod:`.optimizer` (the wrapped optimizer whose ``step`` runs the
algorithm's kernel and hands its private direction to the user's optimizer), :mod:`.loader` (the
user's loader with the run's batches), :mod:`.samplers` (the batch samplers the accountant
assumes), :mod:`.memory` (logical batches in physical chunks) and :mod:`.ledger` (what really ran,
charged step by step).

May import: :mod:`dpcalib.accountant`, :mod:`dpcalib.mechanisms`, and the sub-packages below it
(``algorithms``, ``run``, ``clipping``, ``data``, ``tensors``); never a check (``audit``).
"""

from .engine import ACCOUNTANTS, DPLoss, PrivacyEngine
from .ledger import Ledger
from .loader import DPDataLoader
from .samplers import BallsInBinsBatchSampler, FixedSizeBatchSampler, PoissonBatchSampler, ShuffleBatchSampler
from .memory import BatchMemoryManager
from .capture import Capture
from .module import MixedPrecisionWarning, PrivateModule
from .optimizer import BudgetExceeded, DPOptimizer, OverspendWarning

__all__ = ["PrivacyEngine", "DPLoss", "PrivateModule", "DPOptimizer", "DPDataLoader", "BatchMemoryManager",
           "BudgetExceeded", "OverspendWarning", "MixedPrecisionWarning"]
