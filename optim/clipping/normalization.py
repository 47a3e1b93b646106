"""The layers path's rule for ``nn.LayerNorm`` / ``nn.GroupNorm`` (affine): record i's weight
gradient is ``sum_t g_it * xhat_it`` and its bias gradient ``sum_t g_it``, with ``xhat`` the
normalised input recomputed from the layer's input by the layer's own normalisation; differences
subtract the per-record gradients directly; norms in float64."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as Fn

from .numerics import row_sq64
from .rules import Rule, register_rule

__all__ = ["RULE"]


def _norm_stats(mod, a):
    """The normalised input ``xhat`` of a LayerNorm / GroupNorm (what its weight multiplies): the
    layer's own normalisation without its affine part, one fused kernel."""
    if isinstance(mod, nn.LayerNorm):
        return Fn.layer_norm(a, mod.normalized_shape, eps=mod.eps)
    return Fn.group_norm(a, mod.num_groups, eps=mod.eps)


def _norm_per_sample(mod, a, g) -> dict:
    """Per-sample gradients ``{"weight": [B, ...], "bias": [B, ...]}`` of a LayerNorm / GroupNorm."""
    xhat = _norm_stats(mod, a)
    B = a.shape[0]
    out = {}
    if isinstance(mod, nn.LayerNorm):
        k = a.dim() - len(mod.normalized_shape)
        lead = tuple(range(1, k))
        out["weight"] = (g * xhat).sum(lead) if lead else g * xhat
        if mod.bias is not None:
            out["bias"] = g.sum(lead) if lead else g
    else:
        gx = (g * xhat).reshape(B, a.shape[1], -1).sum(2)
        out["weight"] = gx
        if mod.bias is not None:
            out["bias"] = g.reshape(B, a.shape[1], -1).sum(2)
    return out


def terms(mod, a1, g1, a0=None, g0=None):
    per = _norm_per_sample(mod, a1, g1)
    if a0 is not None:
        p0 = _norm_per_sample(mod, a0, g0)
        per = {k: v - p0[k] for k, v in per.items()}
    norm2 = sum(row_sq64(v.reshape(v.shape[0], -1)) for v in per.values())
    return norm2, (lambda f: {k: torch.einsum("b,b...->...", f, v) for k, v in per.items()})


RULE = register_rule(Rule((nn.LayerNorm, nn.GroupNorm), terms))
