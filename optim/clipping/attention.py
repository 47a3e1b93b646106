"""``nn.MultiheadAttention`` with its projections as ``nn.Linear`` layers, for fast per-sample clipping.

``nn.MultiheadAttention`` keeps the query/key/value projections in one fused ``in_proj_weight`` and
uses ``out_proj``'s weight functionally, so no per-layer rule sees them (the layers path of
:mod:`optim.clipping` sends such a model to vmap).  :func:`linear_attention` replaces every one in
a module tree, in place, by :class:`LinearMultiheadAttention`: the same function (the same weights,
split into ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj``; masks, ``batch_first``, dropout,
``need_weights``), whose four Linear layers the per-layer rules clip.  ``add_bias_kv`` appends one
learned key and value position (:class:`SequenceBias`, Opacus's module: its one parameter is served by the
per-module vmap rule) and ``add_zero_attn`` one zero position, as ``nn.MultiheadAttention`` does.  It also
works inside ``nn.TransformerEncoderLayer`` / ``DecoderLayer`` (in evaluation mode too: ``in_proj_bias`` is
None, so torch's fused inference path is not taken).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as Fn

from ...accountant.validation import InputError

__all__ = ["LinearMultiheadAttention", "SequenceBias"]


class SequenceBias(nn.Module):
    """One learned position appended to a sequence: ``[L, B, E] -> [L + 1, B, E]`` (``[B, L, E] -> [B, L + 1, E]``
    when ``batch_first``) -- Opacus's ``SequenceBias``, ``nn.MultiheadAttention``'s ``bias_k`` / ``bias_v``.

    Args:
        embed_dim: the dimension E of the positions.
        batch_first: inputs are ``[B, L, E]`` (else ``[L, B, E]``).
    """

    def __init__(self, embed_dim: int, batch_first: bool = False):
        super().__init__()
        self.batch_first = batch_first
        self.bias = nn.Parameter(torch.empty(embed_dim))
        nn.init.normal_(self.bias)

    def forward(self, x):
        """Append the learned position to every sequence of ``x``.

        Args:
            x: ``[L, B, E]`` (``[B, L, E]`` when ``batch_first``).

        Returns:
            ``x`` with one more position, the bias, at the end of each sequence.
        """
        if self.batch_first:
            return torch.cat([x, self.bias.to(x.dtype).expand(x.shape[0], 1, -1)], 1)
        return torch.cat([x, self.bias.to(x.dtype).expand(1, x.shape[1], -1)], 0)


class LinearMultiheadAttention(nn.Module):
    """Multi-head attention from four ``nn.Linear`` layers, call-compatible with ``nn.MultiheadAttention``.

    Args:
        embed_dim: the model dimension E (queries and outputs), a multiple of ``num_heads``.
        num_heads: the number of heads h; each has dimension ``embed_dim // num_heads``.
        dropout: the dropout probability on the attention weights (applied in training mode only).
        bias: whether the four projections have biases.
        kdim: the keys' dimension (None: ``embed_dim``).
        vdim: the values' dimension (None: ``embed_dim``).
        batch_first: inputs and outputs are ``[B, L, E]`` (else ``[L, B, E]``).
        add_bias_kv: append a learned position to the projected keys and values (:class:`SequenceBias`
            ``seq_bias_k`` / ``seq_bias_v``).
        add_zero_attn: append a zero position to the projected keys and values (after the bias).

    Raises:
        InputError: if ``embed_dim`` is not a multiple of ``num_heads``.
    """

    # torch's Transformer layers read these to choose their fused inference path: None / False refuse it
    in_proj_weight = None
    in_proj_bias = None
    _qkv_same_embed_dim = False

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True, kdim=None,
                 vdim=None, batch_first: bool = False, add_bias_kv: bool = False, add_zero_attn: bool = False):
        super().__init__()
        if embed_dim % num_heads:
            raise InputError(f"num_heads={num_heads!r} is not allowed: expected a divisor of embed_dim={embed_dim}.")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, float(dropout), batch_first
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.add_bias_kv, self.add_zero_attn = bool(add_bias_kv), bool(add_zero_attn)
        self.seq_bias_k = SequenceBias(embed_dim, batch_first=True) if add_bias_kv else None
        self.seq_bias_v = SequenceBias(embed_dim, batch_first=True) if add_bias_kv else None

    @classmethod
    def from_module(cls, m: nn.MultiheadAttention) -> "LinearMultiheadAttention":
        """The same attention as ``m`` (its weights copied).

        Args:
            m: the ``nn.MultiheadAttention`` to convert (left unchanged).

        Returns:
            A new :class:`LinearMultiheadAttention` on ``m``'s device and dtype, in ``m``'s training mode.
        """
        E = m.embed_dim
        w0 = m.out_proj.weight
        new = cls(E, m.num_heads, dropout=m.dropout, bias=m.in_proj_bias is not None, kdim=m.kdim, vdim=m.vdim,
                  batch_first=m.batch_first, add_bias_kv=m.bias_k is not None, add_zero_attn=m.add_zero_attn)
        new = new.to(device=w0.device, dtype=w0.dtype)
        with torch.no_grad():
            if m._qkv_same_embed_dim:
                ws = (m.in_proj_weight[:E], m.in_proj_weight[E:2 * E], m.in_proj_weight[2 * E:])
            else:
                ws = (m.q_proj_weight, m.k_proj_weight, m.v_proj_weight)
            for j, lin in enumerate((new.q_proj, new.k_proj, new.v_proj)):
                lin.weight.copy_(ws[j])
                if m.in_proj_bias is not None:
                    lin.bias.copy_(m.in_proj_bias[j * E:(j + 1) * E])
            new.out_proj.weight.copy_(m.out_proj.weight)
            if m.out_proj.bias is not None:
                new.out_proj.bias.copy_(m.out_proj.bias)
            if m.bias_k is not None:
                new.seq_bias_k.bias.copy_(m.bias_k.reshape(-1))
                new.seq_bias_v.bias.copy_(m.bias_v.reshape(-1))
        new.train(m.training)
        return new

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        """Attend ``query`` to ``key`` / ``value``, as ``nn.MultiheadAttention.forward`` does.

        Args:
            query: ``[L, B, E]`` (``[B, L, E]`` when ``batch_first``).
            key: ``[S, B, kdim]`` (``[B, S, kdim]`` when ``batch_first``).
            value: ``[S, B, vdim]`` (``[B, S, vdim]`` when ``batch_first``).
            key_padding_mask: ``[B, S]``, True (or ``-inf`` added) at keys to ignore; None: none.
            need_weights: also return the attention weights.
            attn_mask: ``[L, S]`` or ``[B * num_heads, L, S]``, boolean (True: masked) or additive; None: none.
            average_attn_weights: average the returned weights over the heads.
            is_causal: with no ``attn_mask``, mask every key after the query's position.

        Returns:
            ``(output, weights)``: the output shaped as ``query``, and the attention weights ``[B, L, S]``
            (averaged) or ``[B, num_heads, L, S]``, or None when ``need_weights`` is False.
        """
        if not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        B, L, E = query.shape
        S = key.shape[1]
        h, d = self.num_heads, self.head_dim
        k, v = self.k_proj(key), self.v_proj(value)
        if self.seq_bias_k is not None:
            k, v = self.seq_bias_k(k), self.seq_bias_v(v)
        if self.add_zero_attn:
            k, v = Fn.pad(k, (0, 0, 0, 1)), Fn.pad(v, (0, 0, 0, 1))
        extra, S = k.shape[1] - S, k.shape[1]      # the positions appended: never masked
        q = self.q_proj(query).reshape(B, L, h, d).transpose(1, 2)
        k = k.reshape(B, S, h, d).transpose(1, 2)
        v = v.reshape(B, S, h, d).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        if attn_mask is None and is_causal:
            attn_mask = torch.ones(L, S - extra, dtype=torch.bool, device=query.device).triu(1)
        if extra:
            attn_mask = None if attn_mask is None else Fn.pad(attn_mask, (0, extra))
            key_padding_mask = None if key_padding_mask is None else Fn.pad(key_padding_mask, (0, extra))
        if attn_mask is not None:
            am = attn_mask.reshape(B, h, L, S) if attn_mask.dim() == 3 else attn_mask
            scores = scores.masked_fill(am, float("-inf")) if am.dtype == torch.bool else scores + am
        if key_padding_mask is not None:
            kpm = key_padding_mask.reshape(B, 1, 1, S)
            scores = scores.masked_fill(kpm, float("-inf")) if kpm.dtype == torch.bool else scores + kpm
        att = Fn.dropout(torch.softmax(scores, dim=-1), self.dropout, self.training)
        out = self.out_proj((att @ v).transpose(1, 2).reshape(B, L, E))
        if not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        return out, (att.mean(1) if average_attn_weights else att)


def linear_attention(model: nn.Module) -> nn.Module:
    """Replace every ``nn.MultiheadAttention`` in ``model`` (in place) by the equivalent :class:`LinearMultiheadAttention`.

    Convert before building the optimizer.

    Args:
        model: the module tree to convert.

    Returns:
        ``model`` itself, converted.
    """
    for name, child in list(model.named_children()):
        if isinstance(child, nn.MultiheadAttention):
            setattr(model, name, LinearMultiheadAttention.from_module(child))
        else:
            linear_attention(child)
    return model
