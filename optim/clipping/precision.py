"""The working precision of a gradient-DIFFERENCE release: float64, whatever the model's dtype.

A record's gradient difference at a small step, ``grad l(x; z_i) - grad l(x'; z_i)``, is a small
difference of large gradients.  Whatever rounding its two forward and backward passes carry is
therefore amplified about ``||grad|| / ||difference||`` (~1/step) in the vector that is clipped.
That alone is harmless -- each record is clipped as computed -- but a machine's matrix products
may round a record's rows differently when ANOTHER record leaves the batch: MKL's one-column
matrix-vector product on AVX-512 does (tests/test_clipping_soundness.py), cuBLAS picks kernels by
shape, TF32 keeps 10 bits.  Then removing one record moves every other record's clipped
difference too, by its amplified rounding, and the sum moves by more than the record's ``C``: in
float32 at step 1e-4, by 1.0003 C (2026-11-27).  A release is private only if each record's
contribution is a function of that record alone.

So the difference release runs both passes in float64: the parameters and floating inputs are
widened (exactly: every float32 / bfloat16 / float16 value is a float64 value), the per-record
vectors, their norms and the clipped sum are float64, and the sum is cast back to the parameters'
dtype once at the end -- a rounding relative to the sum's magnitude, like any sum.  The batch-
dependent part of the rounding shrinks by ``eps64 / eps32 ~ 1e-9``.  Cost: the difference rounds'
two passes at float64 speed (on the CPU about twice float32; on a data-centre GPU float64 runs at
half the float32 rate without tensor cores).  Gradient releases keep the model's dtype: their
rounding is not amplified (relative to the gradients, i.e. to the summands).
"""

from __future__ import annotations

import torch

__all__ = ["DIFFERENCE_DTYPE", "widened", "widened_params", "widened_buffers", "narrowed"]

#: the dtype every gradient-difference release computes in (module text)
DIFFERENCE_DTYPE = torch.float64


def widened(t, dtype: torch.dtype | None = None):
    """``t`` in ``dtype`` when it is a floating tensor of a narrower dtype (an exact cast upwards), else
    ``t`` itself (integer ids, masks, tensors as wide or wider, anything that is not a tensor).
    ``dtype`` None: :data:`DIFFERENCE_DTYPE`."""
    dtype = DIFFERENCE_DTYPE if dtype is None else dtype
    if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype.itemsize < dtype.itemsize:
        return t.to(dtype)
    return t


def widened_params(params: dict, dtype: torch.dtype | None = None) -> dict:
    """Every floating parameter in ``dtype`` (detached: a release forms no parameter gradients)."""
    return {k: widened(v.detach(), dtype) for k, v in params.items()}


def widened_buffers(model, dtype: torch.dtype) -> dict:
    """The model's floating buffers narrower than ``dtype``, widened (to pass beside widened parameters
    to ``functional_call``: a float32 buffer in a product with float64 activations would raise);
    empty where none is."""
    return {k: widened(b, dtype) for k, b in model.named_buffers()
            if b.is_floating_point() and b.dtype.itemsize < dtype.itemsize}


def narrowed(sums: dict, like: dict) -> dict:
    """Each sum back in its parameter's dtype (one rounding, relative to the sum); every key of ``sums``
    names a parameter of ``like``."""
    return {k: v.to(like[k].dtype) for k, v in sums.items()}
