"""The layers path's rule for ``nn.Linear`` on any leading dimensions (``T`` positions of a
sequence): record i's weight gradient is ``G_i^T A_i`` (``[T, out]^T [T, in]``), its bias gradient
``sum_t g_it``; norms by Gram products when cheaper (``||G^T A||_F^2 = sum_{t,s} (a_t . a_s)(g_t .
g_s)``, ``T^2 (in + out)`` against ``T in out``), differences as ``dG^T A + G0^T dA``
(:func:`outer_terms`, which the convolutions share).  The same rule takes Hugging Face's ``Conv1D``
(GPT-2's projections: a Linear whose weight is stored ``[in, out]``), matched by name so that
transformers is never imported here.  Signals of any floating dtype are formed in float32 or better
(:func:`~.numerics.work_dtype`: autocast, bfloat16 and float16 parameters)."""

from __future__ import annotations

import torch
from torch import nn

from .numerics import gram_block, in_work, row_sq64
from .rules import ALL, Rule, register_rule

__all__ = []


def wants(mod, name: str, want) -> bool:
    """The module has parameter ``name`` and the caller wants it (``want`` ALL: every one).

    Args:
        mod: the module.
        name: a parameter name of the module (``"weight"``, ``"bias"``).
        want: the names wanted, or ``ALL``.

    Returns:
        True when ``mod.<name>`` is not None and ``name`` is wanted.
    """
    return getattr(mod, name, None) is not None and (want is ALL or name in want)


def outer_terms(mod, b1, b0=None, same_in: bool = False, want=ALL, transposed: bool = False):
    """``(norm2, sums)`` of a layer whose per-record gradient is a sum over positions of outer products, block by block.

    The bias's signal is the (difference of the) back-propagated signal summed over positions.

    Args:
        mod: the layer (its ``weight`` / ``bias`` decide what is measured).
        b1: ``[(A [B, T, in], G [B, T, out])]``, one pair per block, at the current point.
        b0: the same blocks at the other point; None: the gradient, else the difference
            ``dG^T A1 + G0^T (A1 - A0)``.
        same_in: the inputs at the two points are equal, so the second term of the difference is dropped.
        want: the module's parameter names to include, or ``ALL``.
        transposed: the weight is stored ``[in, out]`` (Hugging Face's ``Conv1D``).

    Returns:
        ``(norm2, sums)``: the records' squared norms ``[B]`` (float64) and ``sums(f)``, the per-record
        gradients weighted by ``f [B]`` and summed, ``{"weight": ..., "bias": ...}`` shaped as the parameters.
    """
    if b0 is not None:
        blocks = []
        for (A1, G1), (A0, G0) in zip(b1, b0):
            dG = G1 - G0
            blocks.append([(dG, A1)] if same_in else [(dG, A1), (G0, A1 - A0)])
    else:
        blocks = [[(G, A)] for A, G in b1]
    B = b1[0][0].shape[0]
    norm2 = torch.zeros(B, dtype=torch.float64, device=b1[0][0].device)
    parts = []
    if wants(mod, "weight", want):
        parts = [gram_block([(A, G) for G, A in t] if transposed else t) for t in blocks]
        norm2 = norm2 + sum(n2 for n2, _ in parts)
    has_b = wants(mod, "bias", want)
    if has_b:
        bias_sig = blocks[0][0][0] if len(blocks) == 1 else torch.cat([t[0][0] for t in blocks], dim=2)  # dG or G
        norm2 = norm2 + row_sq64(bias_sig.sum(1))

    def sums(f):
        out = {}
        if parts:
            out["weight"] = torch.cat([fn(f) for _, fn in parts], 1 if transposed else 0).reshape(mod.weight.shape)
        if has_b:
            out["bias"] = (bias_sig * f[:, None, None]).sum((0, 1))
        return out
    return norm2, sums


def linear_blocks(mod, a, g):
    """``[(A [B, T, in], G [B, T, out])]``: the layer's one block, in the work dtype.

    Args:
        mod: the linear layer (unused: the block is the signals reshaped).
        a: the layer's input ``[B, ..., in]``.
        g: the gradient of its output ``[B, ..., out]``.

    Returns:
        A one-element list ``[(A, G)]``, every leading dimension after the records flattened into ``T``.
    """
    B = a.shape[0]
    a, g = in_work(a, g)
    return [(a.reshape(B, -1, a.shape[-1]), g.reshape(B, -1, g.shape[-1]))]


def _terms(mod, a1, g1, a0=None, g0=None, want=ALL, transposed: bool = False):
    """:attr:`.rules.Rule.terms` of a linear layer: its one block of signals, :func:`outer_terms`
    (``transposed``: the weight is stored ``[in, out]``)."""
    b0 = linear_blocks(mod, a0, g0) if a0 is not None else None
    return outer_terms(mod, linear_blocks(mod, a1, g1), b0, a0 is not None and torch.equal(a1, a0), want,
                       transposed=transposed)


def _per_record(mod, a, g, want=ALL, transposed: bool = False) -> dict:
    """:attr:`.rules.Rule.per_record` of a linear layer: ``{"weight": [B, out, in], "bias": [B, out]}``
    (``transposed``: the weight is stored ``[in, out]``, its gradients ``[B, in, out]``)."""
    (A, G), = linear_blocks(mod, a, g)
    out = {}
    if wants(mod, "weight", want):
        out["weight"] = torch.einsum("bti,bto->bio" if transposed else "bto,bti->boi", G, A)
    if wants(mod, "bias", want):
        out["bias"] = G.sum(1)
    return out


def _blocks(mod, call, want=ALL) -> dict:
    """:attr:`.rules.Rule.blocks` of a linear layer: ``{"weight": (G, A), "bias": G}`` of its one block."""
    (A, G), = linear_blocks(mod, call.a(), call.g())
    return {k: v for k, v in (("weight", (G, A)), ("bias", G)) if wants(mod, k, want)}


RULE = register_rule(Rule((nn.Linear,), _terms, per_record=_per_record, blocks=_blocks))


def is_hf_conv1d(mod) -> bool:
    """Hugging Face's ``transformers.pytorch_utils.Conv1D`` (matched by name: transformers is optional).

    Args:
        mod: a module.

    Returns:
        True when ``mod``'s class is named ``Conv1D``, comes from a ``transformers`` module and the
        instance has ``nf``.
    """
    t = type(mod)
    return t.__name__ == "Conv1D" and t.__module__.startswith("transformers") and hasattr(mod, "nf")


def _conv1d_terms(mod, a1, g1, a0=None, g0=None, want=ALL):
    return _terms(mod, a1, g1, a0, g0, want, transposed=True)


def _conv1d_per_record(mod, a, g, want=ALL):
    return _per_record(mod, a, g, want, transposed=True)


CONV1D_RULE = register_rule(Rule((), _conv1d_terms, per_record=_conv1d_per_record, match=is_hf_conv1d))
