"""The layers path's rule for the affine normalisations -- ``nn.LayerNorm``, ``nn.RMSNorm``, ``nn.GroupNorm`` and
``nn.InstanceNorm1d/2d/3d`` (``affine=True``): record i's weight gradient is ``sum_t g_it * xhat_it`` and its bias
gradient ``sum_t g_it``, with ``xhat`` the normalised input recomputed from the layer's input by the layer's own
normalisation (one fused kernel, in float32 or better); differences subtract the per-record gradients directly;
norms in float64.  Group and instance normalisation take records on dim 0 whatever the model's layout."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as Fn

from .linear import wants
from .numerics import formed_terms, in_work
from .rules import ALL, Rule, register_rule

__all__ = []

_INSTANCE = nn.modules.instancenorm._InstanceNorm
_CHANNELS = (nn.GroupNorm, _INSTANCE)
_RMS = (nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()


def _norm_stats(mod, a):
    """The normalised input ``xhat`` (what the weight multiplies): the layer's own normalisation without its
    affine part, one fused kernel."""
    if isinstance(mod, nn.LayerNorm):
        return Fn.layer_norm(a, mod.normalized_shape, eps=mod.eps)
    if _RMS and isinstance(mod, _RMS):
        return Fn.rms_norm(a, mod.normalized_shape, eps=mod.eps)
    if isinstance(mod, _INSTANCE):
        return Fn.instance_norm(a, eps=mod.eps)
    return Fn.group_norm(a, mod.num_groups, eps=mod.eps)


def _per_record(mod, a, g, want=ALL) -> dict:
    """:attr:`.rules.Rule.per_record` of an affine normalisation: ``{"weight": [B, ...], "bias": [B, ...]}``."""
    a, g = in_work(a, g)
    B = a.shape[0]
    out = {}
    w_on, b_on = wants(mod, "weight", want), wants(mod, "bias", want)
    if isinstance(mod, _CHANNELS):
        if w_on:
            out["weight"] = (g * _norm_stats(mod, a)).reshape(B, a.shape[1], -1).sum(2)
        if b_on:
            out["bias"] = g.reshape(B, a.shape[1], -1).sum(2)
        return out
    k = a.dim() - len(mod.normalized_shape)
    lead = tuple(range(1, k))
    if w_on:
        gx = g * _norm_stats(mod, a)
        out["weight"] = gx.sum(lead) if lead else gx
    if b_on:
        out["bias"] = g.sum(lead) if lead else g
    return out


def _terms(mod, a1, g1, a0=None, g0=None, want=ALL):
    """:attr:`.rules.Rule.terms` of an affine normalisation: from the formed per-record gradients."""
    return formed_terms(_per_record, mod, a1, g1, a0, g0, want)


def _record_dim(mod):
    return 0 if isinstance(mod, _CHANNELS) else None


RULE = register_rule(Rule((nn.LayerNorm, nn.GroupNorm, _INSTANCE) + _RMS, _terms, per_record=_per_record,
                          record_dim=_record_dim))
