"""The layers path's rule for ``nn.Linear`` on any leading dimensions (``T`` positions of a
sequence): record i's weight gradient is ``G_i^T A_i`` (``[T, out]^T [T, in]``), its bias gradient
``sum_t g_it``; norms by Gram products when cheaper (``||G^T A||_F^2 = sum_{t,s} (a_t . a_s)(g_t .
g_s)``, ``T^2 (in + out)`` against ``T in out``), differences as ``dG^T A + G0^T dA``
(:func:`outer_terms`, which the convolutions share)."""

from __future__ import annotations

import torch
from torch import nn

from .numerics import gram_block
from .rules import Rule, register_rule

__all__ = ["outer_terms", "linear_blocks", "RULE"]


def outer_terms(mod, b1, b0=None, same_in: bool = False):
    """``(norm2, sums)`` of a layer whose per-record gradient is a sum over positions of outer products,
    block by block (``b1``, ``b0``: ``[(A [B, T, in], G [B, T, out])]`` per block at the two points;
    ``b0`` None: the gradient, else the difference ``dG^T A1 + G0^T (A1 - A0)``, with the second term
    dropped when the inputs are the same, ``same_in``).  The bias's signal is the (difference of the)
    back-propagated signal summed over positions."""
    if b0 is not None:
        blocks = []
        for (A1, G1), (A0, G0) in zip(b1, b0):
            dG = G1 - G0
            blocks.append([(dG, A1)] if same_in else [(dG, A1), (G0, A1 - A0)])
    else:
        blocks = [[(G, A)] for A, G in b1]
    parts = [gram_block(t) for t in blocks]
    norm2 = sum(n2 for n2, _ in parts)
    has_b = mod.bias is not None
    if has_b:
        bias_sig = torch.cat([t[0][0] for t in blocks], dim=2)           # [B, T, out]: dG or G
        norm2 = norm2 + bias_sig.sum(1).to(torch.float64).pow(2).sum(1)

    def sums(f):
        out = {"weight": torch.cat([fn(f) for _, fn in parts], 0).reshape(mod.weight.shape)}
        if has_b:
            out["bias"] = (bias_sig * f[:, None, None]).sum((0, 1))
        return out
    return norm2, sums


def linear_blocks(mod, a, g):
    """``[(A [B, T, in], G [B, T, out])]``: the layer's one block."""
    B = a.shape[0]
    return [(a.reshape(B, -1, a.shape[-1]), g.reshape(B, -1, g.shape[-1]))]


def terms(mod, a1, g1, a0=None, g0=None):
    b0 = linear_blocks(mod, a0, g0) if a0 is not None else None
    return outer_terms(mod, linear_blocks(mod, a1, g1), b0, a0 is not None and torch.equal(a1, a0))


RULE = register_rule(Rule((nn.Linear,), terms))
