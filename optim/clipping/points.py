"""Per-example gradients at several parameter points at once, and their clipped sums: the
decentralised (D2P) updates, where each node holds its own point and its own records, and the
batched audit, where each of many independent runs holds its own point over the same records.

:func:`point_grads` builds ``grads(Z [points, d], x, y) -> [points, records, d]`` (one nested
``torch.func.vmap``; ``x``, ``y`` per point ``[points, records, ...]``, or shared ``[records, ...]``);
:func:`clipped_point_sums` clips each row to the norm C (one C, or one per point) and sums a point's
rows with their weights.  As on every path of :mod:`.paths`, the norm behind a row's clip factor is
the norm of exactly the vector added, accumulated in float64, and the factor is cast once to the
working dtype, so ``||f_i g_i|| <= C`` up to that one rounding.
"""

from __future__ import annotations

import torch
from torch.func import functional_call, grad, vmap

from .paths import clip_factors
from .precision import exact_float32, widened_buffers

__all__ = ["point_grads", "clipped_point_sums"]


def point_grads(model, loss_fn, like: dict, *, shared_records: bool = False):
    """``grads(Z, x, y)``: the per-example gradients ``[points, records, d]`` at each of several parameter points.

    The gradients of ``loss_fn`` (one loss per example) through ``model`` at each flat parameter vector
    ``Z[i]`` (shaped as the tensors of ``like``, in their order), by one nested ``torch.func.vmap``.

    Args:
        model: the ``nn.Module`` whose parameters ``Z`` replaces (its buffers widened to ``Z``'s dtype).
        loss_fn: ``loss_fn(output, target)`` returning one loss per example.
        like: ``{name: tensor}`` giving the names, shapes and order of the parameters in a flat vector.
        shared_records: every point takes the same ``x [records, ...]``, ``y`` (else ``[points, records, ...]``).

    Returns:
        The function ``grads(Z [points, d], x, y) -> [points, records, d]``.
    """
    def one(pflat, xi, yi):
        p, i = {}, 0
        for k, t in like.items():
            p[k] = pflat[i:i + t.numel()].reshape(t.shape)
            i += t.numel()
        buffers = widened_buffers(model, pflat.dtype)       # points in float64 (a difference: .precision)
        return loss_fn(functional_call(model, (p, buffers), (xi.unsqueeze(0),)), yi.unsqueeze(0)).sum()

    outer = (0, None, None) if shared_records else (0, 0, 0)
    return vmap(vmap(grad(one), in_dims=(None, 0, 0)), in_dims=outer)


@exact_float32()
def clipped_point_sums(g: torch.Tensor, max_norm, weights: torch.Tensor) -> torch.Tensor:
    """``[points, d]``: ``sum_m w_m clip(g_pm, C_p)`` for per-example gradients at several points; norms in float64.

    Args:
        g: per-example gradients ``[points, M, d]``.
        max_norm: the clip norm C, a float or a tensor ``[points]`` (one per point).
        weights: ``[points, M]`` or ``[M]``, 0 for a record not in the sample.

    Returns:
        The clipped, weighted sums ``[points, d]`` in ``g``'s dtype.
    """
    norms = torch.linalg.vector_norm(g, dim=2, dtype=torch.float64)
    c = max_norm[:, None] if isinstance(max_norm, torch.Tensor) else max_norm
    f = clip_factors(norms, c).to(g.dtype) * weights
    return torch.einsum("nm,nmd->nd", f, g)
