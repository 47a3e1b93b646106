"""Per-sample clipping: what each record of a batch contributes to a release.

Job: the clipped sums of per-example gradients and of per-example gradient differences, on three
paths (:mod:`.paths`: ghost norms, per-layer gradients, ``torch.func.vmap``), the per-layer rules
(:mod:`.layers`: Linear, Conv 1-3d and transposed, Embedding, the norms, RNN / LSTM / GRU, SequenceBias, with the shared
float64 numerics), the calls a forward leaves and where their records are (:mod:`.calls`, :mod:`.records`),
calls that share a parameter (:mod:`.units`), the per-module vmap rule (:mod:`.generic`), the module
validator and fixer (:mod:`.validator`), attention built from Linear layers (:mod:`.attention`), the reuse of one batch's signals
(:mod:`.signals`), the per-example gradients and clipped sums at several parameter points at
once -- the D2P nodes, the batched audit's runs (:mod:`.points`) -- and the object the updates ask for every per-example part of a query
(:mod:`.per_example`).  The norm clipped is the norm of the vector added, computed in float64;
gradient differences are computed in float64 whatever the model's dtype (:mod:`.precision`).

May import: :mod:`dpcalib.accountant` (its input checks), :mod:`dpcalib.optim.tensors` and torch.
"""

from .attention import LinearMultiheadAttention, SequenceBias, linear_attention
from .paths import (ClippingFallbackWarning, clip_factors, clip_path, clipped_grad_diff_sum, clipped_grad_sum,
                    supports_ghost, supports_layers)
from .per_example import PerExample
from .points import clipped_point_sums, point_grads
from .signals import SignalCache
from .validator import REPLACEMENTS, ModuleValidator, UnsupportedModuleError

__all__ = ["LinearMultiheadAttention", "SequenceBias", "linear_attention", "ClippingFallbackWarning", "clip_factors", "clip_path",
           "clipped_grad_diff_sum", "clipped_grad_sum", "supports_ghost", "supports_layers", "PerExample",
           "point_grads", "clipped_point_sums",
           "SignalCache", "ModuleValidator", "UnsupportedModuleError", "REPLACEMENTS"]
