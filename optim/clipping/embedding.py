"""The layers path's rule for ``nn.Embedding``: record i's gradient is ``sum_t onehot(id_it) g_it^T``
(``padding_idx`` rows get nothing); its squared norm sums ``g_it . g_is`` over the positions that
hold the same id (float64); differences subtract the signals directly."""

from __future__ import annotations

import torch
from torch import nn

from .linear import wants
from .numerics import in_work
from .rules import ALL, Rule, register_rule

__all__ = []


def _embedding_parts(mod, a, g):
    B = a.shape[0]
    ids = a.reshape(B, -1)
    (G,) = in_work(g.reshape(B, ids.shape[1], -1))
    if mod.padding_idx is not None:
        G = G * (ids != mod.padding_idx).unsqueeze(-1).to(G.dtype)
    return ids, G


def _embedding_sq(ids, G) -> torch.Tensor:
    same = (ids.unsqueeze(2) == ids.unsqueeze(1)).to(torch.float64)
    G64 = G.to(torch.float64)
    return (same * (G64 @ G64.transpose(1, 2))).sum((1, 2))


def _embedding_sum(mod, ids, G, f) -> torch.Tensor:
    D = G.shape[-1]
    return G.new_zeros(mod.num_embeddings, D).index_add_(0, ids.reshape(-1), (G * f.to(G.dtype)[:, None, None]).reshape(-1, D))


def _terms(mod, a1, g1, a0=None, g0=None, want=ALL):
    """:attr:`.rules.Rule.terms` of an embedding: the squared norms over the positions holding the same id."""
    ids, G = _embedding_parts(mod, a1, g1)
    if not wants(mod, "weight", want):
        return torch.zeros(ids.shape[0], dtype=torch.float64, device=ids.device), (lambda f: {})
    if a0 is not None:
        G = G - _embedding_parts(mod, a0, g0)[1]
    return _embedding_sq(ids, G), (lambda f: {"weight": _embedding_sum(mod, ids, G, f)})


def _per_record(mod, a, g, want=ALL) -> dict:
    """:attr:`.rules.Rule.per_record` of an embedding: ``{"weight": [B, num_embeddings, dim]}`` (``padding_idx``
    rows zero), or ``{}`` when the weight is not wanted."""
    if not wants(mod, "weight", want):
        return {}
    ids, G = _embedding_parts(mod, a, g)
    B, T, D = G.shape
    rows = (ids + torch.arange(B, device=ids.device)[:, None] * mod.num_embeddings).reshape(-1)
    return {"weight": G.new_zeros(B * mod.num_embeddings, D).index_add_(0, rows, G.reshape(-1, D))
            .view(B, mod.num_embeddings, D)}


def why_not(m) -> str | None:
    """Why this embedding cannot be taken by the rule (None: it can).

    Args:
        m: the ``nn.Embedding`` module.

    Returns:
        ``"max_norm / scale_grad_by_freq / sparse"`` when any of those options is set, else None.
    """
    return "max_norm / scale_grad_by_freq / sparse" if (m.max_norm is not None or m.scale_grad_by_freq or m.sparse) \
        else None


RULE = register_rule(Rule((nn.Embedding,), _terms, why_not, per_record=_per_record))
