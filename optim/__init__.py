"""PyTorch reference optimizers driven by the calibrated noise (built on :mod:`mechanisms`).

Each optimizer is built from a ``mechanisms`` description of the run (its shape) and that
mechanism's calibration (its noise levels)::

    import dpcalib.mechanisms as M, dpcalib.optim as O
    mech = M.DIFF2GD(rounds=2000, restart_interval=20, clients=10, n_min=1651)
    opt = O.DIFF2GD(model, O.squared_loss, shards, mech, mech.calibrate(3.0, 1e-5), C1=1.0, C2=3.0, lr=0.5)
    opt.run()                      # metrics, progress bar, optional checkpoints

See docs/optimizers.md for every update rule, where its noise enters and what it releases.
"""

try:
    import torch  # noqa: F401
except ImportError as _exc:       # accounting, calibration and the CLI do not need it; this layer does
    raise ImportError("dpcalib.optim (the reference optimizers, audits and distributed runs) needs PyTorch, "
                      f"which is not installed ({_exc}): install the dpcalib[torch] extra: "
                      "pip install '.[torch]' from the repository's root") from None

from . import algorithms, audit, clipping, data, engine, randomness, run, tensors  # noqa: E402
from .algorithms import (AdaD2P, ClipD2P, ConstD2P, DIFF2BVR, DIFF2GD, DPGD, DPSGD, DPSRM, OPTIMIZERS, register_optimizer,  # noqa: E402
                         DiceSGD, NoiseSource, PrivateOptimizer, Release, accuracy,
                         cross_entropy_loss, squared_loss)
from .audit import noise_ks_test, noise_pooled_test, noise_std_test  # noqa: E402
from .engine import BatchMemoryManager, BudgetExceeded, DPDataLoader, PrivacyEngine  # noqa: E402
from .clipping import (ClippingFallbackWarning, LinearMultiheadAttention, ModuleValidator, PerExample,  # noqa: E402
                       clip_factors, clip_path, clipped_grad_diff_sum, clipped_grad_sum, linear_attention,
                       supports_ghost)


__all__ = [
    "OPTIMIZERS", "register_optimizer", "PrivateOptimizer", "NoiseSource", "Release", "squared_loss", "cross_entropy_loss", "accuracy", "noise_std_test", "noise_ks_test",
    "noise_pooled_test",
    "DPGD", "DIFF2GD", "DIFF2BVR", "DPSGD", "DPSRM", "DiceSGD", "ClipD2P", "ConstD2P", "AdaD2P",
    "clip_factors", "clipped_grad_sum", "clipped_grad_diff_sum", "supports_ghost", "clip_path",
    "ClippingFallbackWarning", "PerExample", "LinearMultiheadAttention", "linear_attention", "ModuleValidator",
    "PrivacyEngine", "BatchMemoryManager", "DPDataLoader", "BudgetExceeded",
    "algorithms", "audit", "clipping", "data", "engine", "randomness", "run", "tensors",
]
