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

A release adds each record's vector as clipped: the norm is measured in float64 on the very vector
added.  A float32 product that rounds its INPUTS to fewer bits breaks that: TF32 (10 bits; CUDA's
``torch.backends.cuda.matmul`` / ``cudnn`` after ``torch.set_float32_matmul_precision("high")``) and
bf16 (8 bits; oneDNN on CPUs with AMX after ``"medium"``) re-round the clipped vectors inside the sum,
and a record then moves the release by up to ``(1 + 2^-9)`` or ``(1 + 2^-7)`` times C -- measured:
1.0032 C on the vmap path of a float32 MLP, ``"medium"`` on an AMX CPU (2026-11-28).  So every
release runs under :func:`exact_float32`: float32 products in IEEE float32 for its duration, the
user's settings restored after (their forward and backward outside the release keep them).
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["DIFFERENCE_DTYPE", "widened", "widened_params", "widened_buffers", "narrowed", "exact_float32", "EXACT_FLOAT32"]

#: the dtype every gradient-difference release computes in (module text)
DIFFERENCE_DTYPE = torch.float64

#: whether :func:`exact_float32` takes effect (False only to measure what it prevents: benchmarks, tests)
EXACT_FLOAT32 = True


def widened(t, dtype: torch.dtype | None = None):
    """``t`` in ``dtype`` when it is a floating tensor of a narrower dtype (an exact cast upwards), else ``t`` itself.

    ``t`` itself: integer ids, masks, tensors as wide or wider, anything that is not a tensor.

    Args:
        t: any value.
        dtype: the dtype to widen to; None: :data:`DIFFERENCE_DTYPE`.

    Returns:
        The widened tensor, or ``t`` unchanged.
    """
    dtype = DIFFERENCE_DTYPE if dtype is None else dtype
    if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype.itemsize < dtype.itemsize:
        return t.to(dtype)
    return t


def widened_params(params: dict, dtype: torch.dtype | None = None) -> dict:
    """Every floating parameter in ``dtype`` (detached: a release forms no parameter gradients).

    Args:
        params: ``{name: tensor}``.
        dtype: the dtype to widen to; None: :data:`DIFFERENCE_DTYPE`.

    Returns:
        A new dict of detached, widened tensors (as wide or wider: unchanged but detached).
    """
    return {k: widened(v.detach(), dtype) for k, v in params.items()}


def widened_buffers(model, dtype: torch.dtype) -> dict:
    """The model's floating buffers narrower than ``dtype``, widened.

    To pass beside widened parameters to ``functional_call``: a float32 buffer in a product with float64
    activations would raise.

    Args:
        model: the model.
        dtype: the dtype to widen to.

    Returns:
        ``{buffer name: widened tensor}``; empty where no buffer is narrower.
    """
    return {k: widened(b, dtype) for k, b in model.named_buffers()
            if b.is_floating_point() and b.dtype.itemsize < dtype.itemsize}


def narrowed(sums: dict, like: dict) -> dict:
    """Each sum back in its parameter's dtype (one rounding, relative to the sum).

    Args:
        sums: ``{name: tensor}``; every key names a parameter of ``like``.
        like: ``{name: tensor}`` giving the dtypes.

    Returns:
        A new dict of the sums cast to their parameters' dtypes.
    """
    return {k: v.to(like[k].dtype) for k, v in sums.items()}


def _fp32_settings() -> list:
    """The per-backend float32 precision settings of this torch (``fp32_precision``, torch >= 2.9): CUDA
    and oneDNN matrix products, convolutions and RNNs."""
    b = torch.backends
    out = []
    for backend in (getattr(b, "cuda", None), getattr(b, "cudnn", None), getattr(b, "mkldnn", None)):
        for op in ("matmul", "conv", "rnn"):
            leaf = getattr(backend, op, None)
            if leaf is not None and isinstance(getattr(leaf, "fp32_precision", None), str):
                out.append(leaf)
    return out


@contextlib.contextmanager
def exact_float32():
    """Float32 matrix products and convolutions in IEEE float32 (no TF32, no bf16), autocast off, inside a block.

    Applies inside the ``with`` block or the call decorated by ``@exact_float32()``; the previous settings
    are restored on leaving, also on an error (module text: why every release needs it).  Re-entrant; the
    settings are process-wide, so another thread's products inside the block run exact too.  Costs ~5 us a
    call.  Does nothing while ``EXACT_FLOAT32`` is False.

    Yields:
        None, once, with the exact settings in force.
    """
    if not EXACT_FLOAT32:
        yield
        return
    with contextlib.ExitStack() as stack:
        for dev in ("cpu", "cuda"):           # a step called inside an autocast region: the release's products stay exact
            if torch.is_autocast_enabled(dev):
                stack.enter_context(torch.autocast(dev, enabled=False))
        with _ieee():
            yield


@contextlib.contextmanager
def _ieee():
    leaves = _fp32_settings()
    if leaves:
        saved = [(leaf, leaf.fp32_precision) for leaf in leaves]
        for leaf, value in saved:
            if value != "ieee":
                leaf.fp32_precision = "ieee"
        try:
            yield
        finally:
            for leaf, value in reversed(saved):
                if leaf.fp32_precision != value:
                    leaf.fp32_precision = value
        return
    saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)   # torch < 2.9: legacy
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.allow_tf32 = saved[1]
