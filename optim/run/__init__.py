"""Running an update: the loop and the transports.

Job: the loop up to the calibrated total with metrics, progress and atomic checkpoints
(:mod:`.runner`), the transport protocol and the one-process simulation (:mod:`.transport`), the
decentralised communication graphs (:mod:`.graph`), and the torch.distributed transports with
their process helpers (:mod:`.ranks`; imported on demand, it loads ``torch.distributed``).

May import: :mod:`dpcalib.accountant` (its input checks), :mod:`dpcalib.optim.tensors` and torch;
never an algorithm (an update is handed its transport and its runner).
"""

from .graph import VARIANTS, exponential_hops, mixing_matrix, period, send_offset, sgp_offsets
from .runner import CHECKPOINT_FORMAT, Runner
from .transport import ONE_PROCESS, OneProcess

__all__ = []
