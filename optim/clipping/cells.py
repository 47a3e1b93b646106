"""The layers path's rule for torch's cells ``nn.RNNCell`` (tanh, relu), ``nn.LSTMCell`` and ``nn.GRUCell``, called
once per time step in the user's own loop.

Each call is replayed from its two projections ``gi = x W_ih^T + b_ih`` and ``gh = h W_hh^T + b_hh`` (the cell's
step of :func:`~.recurrent.step`), at the call's parameters and under its autocast, checked against the call's
output, and the call's output gradients (``h'``, and ``c'`` for the LSTM) are back-propagated to ``gi`` and ``gh``.
Record i's gradient is then the Linear rule's form with one position: ``dgi_i^T x_i`` (``W_ih``), ``dgh_i^T h_i``
(``W_hh``), ``dgi_i`` and ``dgh_i`` (the biases) -- given as blocks (:attr:`~.rules.Rule.blocks`), so the calls of
one cell over a loop are measured as one call with the steps as positions (:mod:`.units`), by float64 Gram
products.  A record's replay reads only its own input, state and output gradients (records on dim 0); an
unbatched call (``x`` of one dimension) is refused."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as Fn

from ...accountant.validation import InputError
from .generic import autocast_of, tolerance
from .numerics import in_work
from .recurrent import step
from .rules import ALL, Rule, block_rule, register_rule

__all__ = []


def _mode(mod) -> str:
    if isinstance(mod, nn.LSTMCell):
        return "LSTM"
    if isinstance(mod, nn.GRUCell):
        return "GRU"
    return "RNN_TANH" if mod.nonlinearity == "tanh" else "RNN_RELU"


def _name(call) -> str:
    return f"{call.name or '<model>'} ({type(call.module).__name__})"


def _blocks(mod, call, want=ALL) -> dict:
    """:attr:`.rules.Rule.blocks` of a cell's call: ``(G [B, 1, out], A [B, 1, in])`` per weight, ``G`` per bias."""
    mode, x = _mode(mod), call.args[0]
    hx = call.kwargs.get("hx", call.args[1] if len(call.args) > 1 else None)
    if x.dim() != 2:
        raise InputError(f"{_name(call)} is not allowed: an unbatched input of shape {tuple(x.shape)} has no record "
                         "dimension.")
    p = call.point if call.point is not None else dict(mod.named_parameters())
    h, c = (hx if mode == "LSTM" else (hx, None)) if hx is not None else (None, None)
    h = x.new_zeros(x.shape[0], mod.hidden_size) if h is None else h.detach()
    c = x.new_zeros(x.shape[0], mod.hidden_size) if c is None and mode == "LSTM" else (c if c is None else c.detach())
    with torch.enable_grad(), autocast_of(call.autocast):
        gi = Fn.linear(x, p["weight_ih"].detach(), None if p.get("bias_ih") is None else p["bias_ih"].detach())
        gh = Fn.linear(h, p["weight_hh"].detach(), None if p.get("bias_hh") is None else p["bias_hh"].detach())
        gi, gh = gi.detach().requires_grad_(True), gh.detach().requires_grad_(True)
        outs = [t for t in step(mode, gi, gh, h, c) if t is not None]
        _check(call, outs[0])
        pairs = [(t, call.grads[j].to(t.dtype)) for j, t in enumerate(outs) if j in call.grads]
        d = torch.autograd.grad([t for t, _ in pairs], [gi, gh], [g for _, g in pairs], allow_unused=True) if pairs \
            else (None, None)
    dgi, dgh = (torch.zeros_like(t) if g is None else g for t, g in zip((gi, gh), d))
    dgi, x, dgh, h = (t[:, None] for t in in_work(dgi.detach(), x, dgh.detach(), h))
    got = {"weight_ih": (dgi, x), "weight_hh": (dgh, h), "bias_ih": dgi, "bias_hh": dgh}
    return {k: v for k, v in got.items() if getattr(mod, k, None) is not None and (want is ALL or k in want)}


def _check(call, h2) -> None:
    ref = call.outs[0].detach()
    tol = tolerance(call.autocast[1] if call.autocast else ref.dtype) * float(ref.abs().max() if ref.numel() else 0.0)
    if ref.shape != h2.shape or float((h2.detach().to(ref.dtype) - ref).abs().max() if ref.numel() else 0.0) > tol + 1e-30:
        raise InputError(f"{_name(call)} is not allowed: its replay from the projections does not give the cell's output.")


_terms, _per_record = block_rule(_blocks)
RULE = register_rule(Rule((nn.RNNCell, nn.LSTMCell, nn.GRUCell), _terms, per_record=_per_record, signals="call",
                          record_dim=lambda m: 0, blocks=_blocks))
