"""The layers path's rule for ``nn.RNN`` (tanh, relu), ``nn.LSTM`` and ``nn.GRU``: any number of layers, one or
two directions, ``batch_first`` either way, a ``PackedSequence`` or a padded batch, ``hx`` (``state_init``) given or not.

The user's forward runs the fused kernel.  At the step the rule replays the call unrolled -- each layer's input
projection ``gi = x W_ih^T + b_ih`` for every time step at once, then step by step ``gh_t = h_{t-1} W_hh^T + b_hh``
and the cell (sequences shorter than the batch's longest keep their state past their length, as the packed
kernel does) -- at the call's parameters, checks that it gives the call's output, and back-propagates the
call's output gradients through it to ``gi`` and every ``gh_t``.  Each weight's per-record gradient is then a
sum of outer products over time (the Linear rule's form: ``W_ih``: ``sum_t dgi_t x_t^T``; ``W_hh``:
``sum_t dgh_t h_{t-1}^T``; the biases ``sum_t dgi_t`` and ``sum_t dgh_t``), measured by Gram products or formed
(:func:`~.numerics.gram_block`), in float64, the norm of exactly the vector summed.  A record's replay reads only
its own sequence, initial state and output gradients.  Not taken (the per-module vmap rule of :mod:`.generic`
serves them): LSTM projections (``proj_size``), dropout between layers in training."""

from __future__ import annotations

import weakref

import torch
from torch import nn
from torch.nn import functional as Fn
from torch.nn.utils.rnn import PackedSequence, pad_packed_sequence

from ...accountant.validation import InputError
from .generic import autocast_of, tolerance
from .numerics import in_work
from .rules import ALL, Rule, block_rule, register_rule

__all__ = []

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
_CHECKED = weakref.WeakKeyDictionary()     # module -> the output shapes its replay was checked at


def _name(call) -> str:
    return f"{call.name or '<model>'} ({type(call.module).__name__})"


def _inputs(call):
    """``(X [B, T, in] records first, lengths [B] or None, h0, c0)`` of the call, records in the batch's order."""
    mod = call.module
    args = list(call.args) + [None] * 2
    x = args[0]
    # the initial state: torch's hx, or Opacus's DP layers' state_init (dpcalib.optim.layers), by keyword or second
    hx = next((h for h in (call.kwargs.get("hx"), call.kwargs.get("state_init"), args[1]) if h is not None), None)
    if isinstance(x, PackedSequence):
        X, lengths = pad_packed_sequence(x, batch_first=True)
        lengths = lengths.to(X.device)
    else:
        if x.dim() != 3:
            raise InputError(f"{_name(call)} is not allowed: an unbatched input of shape {tuple(x.shape)} has no "
                             "record dimension.")
        X, lengths = (x if mod.batch_first else x.transpose(0, 1)), None
    h0 = c0 = None
    if hx is not None:
        h0, c0 = (hx if mod.mode == "LSTM" else (hx, None))
    return X, lengths, h0, c0


def _padded_grad(call, j, like_T):
    """The output gradient of output ``j`` (0: the sequence, records first and padded; 1, 2: ``h_n``, ``c_n``)."""
    g = call.grads.get(j)
    if g is None:
        return None
    x = call.args[0]
    if j == 0:
        if isinstance(x, PackedSequence):
            out = call.out[0]
            g, _ = pad_packed_sequence(PackedSequence(g, out.batch_sizes, out.sorted_indices, out.unsorted_indices),
                                       batch_first=True, total_length=like_T)
            return g
        return g if call.module.batch_first else g.transpose(0, 1)
    return g


def step(mode: str, gi, gh, h, c):
    """One time step of a recurrent cell from its two projections.

    Args:
        mode: ``"LSTM"``, ``"GRU"``, ``"RNN_TANH"`` or ``"RNN_RELU"`` (torch's ``mode`` of the layer).
        gi: the input's projection ``x W_ih^T + b_ih`` ``[B, gates H]``.
        gh: the state's projection ``h W_hh^T + b_hh`` ``[B, gates H]``.
        h: the previous hidden state ``[B, H]`` (read by the GRU only).
        c: the previous cell state ``[B, H]`` (LSTM), else None.

    Returns:
        ``(h', c')``: the next hidden state and, for the LSTM, the next cell state (else None).
    """
    if mode == "LSTM":
        i, f, gg, o = (gi + gh).chunk(4, 1)
        c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
        return torch.sigmoid(o) * torch.tanh(c2), c2
    if mode == "GRU":
        ir, iz, inn = gi.chunk(3, 1)
        hr, hz, hn = gh.chunk(3, 1)
        r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
        n = torch.tanh(inn + r * hn)
        return (1 - z) * n + z * h, None
    s = gi + gh
    return (torch.tanh(s) if mode == "RNN_TANH" else torch.relu(s)), None


def replay(mod, p: dict, X, lengths, h0, c0):
    """The unrolled forward of ``mod`` at parameters ``p``, and the nodes the backward is taken to.

    Args:
        mod: the ``nn.RNN`` / ``nn.LSTM`` / ``nn.GRU`` module (its configuration; its parameters are not read).
        p: ``{name: tensor}`` the module's parameters to run at (their dtype is the replay's).
        X: the input sequences ``[B, T, in]``, records first.
        lengths: the sequences' lengths ``[B]`` (a packed batch), or None (every sequence ``T`` long).
        h0: the initial hidden state ``[layers * directions, B, H]``, or None (zeros).
        c0: the LSTM's initial cell state (same shape), or None (zeros).

    Returns:
        ``(output [B, T, D H], h_n, c_n, pieces)``, ``c_n`` None unless LSTM, and
        ``pieces[(layer, direction)] = (layer input, gi, [h_{t-1}], [gh_t])``.
    """
    B, T, _ = X.shape
    D, H, L, mode = (2 if mod.bidirectional else 1), mod.hidden_size, mod.num_layers, mod.mode
    dt = p[f"weight_hh_l0"].dtype
    X = X.to(dt)
    if h0 is None:
        h0 = X.new_zeros(L * D, B, H)
    if mode == "LSTM" and c0 is None:
        c0 = X.new_zeros(L * D, B, H)
    mask = None if lengths is None else (torch.arange(T, device=X.device)[None, :] < lengths[:, None]).to(dt)[..., None]
    layer_in, pieces, hn, cn = X, {}, [], []
    for layer in range(L):
        outs = []
        for s in range(D):
            sfx = f"_l{layer}" + ("_reverse" if s else "")
            w_ih, w_hh = p["weight_ih" + sfx], p["weight_hh" + sfx]
            b_ih, b_hh = p.get("bias_ih" + sfx), p.get("bias_hh" + sfx)
            gi = Fn.linear(layer_in, w_ih, b_ih)
            h = h0[layer * D + s].to(dt)
            c = c0[layer * D + s].to(dt) if mode == "LSTM" else None
            hprev, ghs, out = [None] * T, [None] * T, [None] * T
            for t in (range(T) if s == 0 else range(T - 1, -1, -1)):
                gh = Fn.linear(h, w_hh, b_hh)
                hprev[t], ghs[t] = h, gh
                h2, c2 = step(mode, gi[:, t], gh, h, c)
                if mask is not None:
                    m = mask[:, t]
                    out[t] = m * h2
                    h = out[t] + (1 - m) * h
                    c = None if c2 is None else m * c2 + (1 - m) * c
                else:
                    out[t], h, c = h2, h2, c2
            outs.append(torch.stack(out, 1))
            hn.append(h)
            cn.append(c)
            pieces[(layer, s)] = (layer_in, gi, hprev, ghs)
        layer_in = torch.cat(outs, 2) if D == 2 else outs[0]
    return layer_in, torch.stack(hn), (torch.stack(cn) if mode == "LSTM" else None), pieces


def _blocks(mod, call, want=ALL) -> dict:
    """:attr:`.rules.Rule.blocks` of a recurrent layer: per parameter (own name) ``(G [B, T, out], A [B, T, in])``
    for a weight, ``G`` for a bias (summed over time)."""
    point = call.point if call.point is not None else dict(mod.named_parameters())
    X, lengths, h0, c0 = _inputs(call)
    with torch.enable_grad(), autocast_of(call.autocast):
        p = {k: v.detach().requires_grad_(True) for k, v in point.items()}      # so that gi and gh are graph nodes
        out, hn, cn, pieces = replay(mod, p, X, lengths, h0, c0)
        _check(call, out, X.shape[1])
        leaves = [gi for _, gi, _, _ in pieces.values()] + [g for *_, ghs in pieces.values() for g in ghs]
        targets, grads = [], []
        for j, t in ((0, out), (1, hn), (2, cn)):
            g = _padded_grad(call, j, X.shape[1])
            if t is not None and g is not None and t.requires_grad:
                targets.append(t)
                grads.append(g.to(t.dtype))
        if not targets:
            d = [None] * len(leaves)
        else:
            d = torch.autograd.grad(targets, leaves, grads, allow_unused=True)
    d = [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, d)]
    n_gi = len(pieces)
    dgi, dgh = d[:n_gi], d[n_gi:]
    out, k = {}, 0
    for i, ((layer, s), (inp, _, hprev, _)) in enumerate(pieces.items()):
        T = len(hprev)
        sfx = f"_l{layer}" + ("_reverse" if s else "")
        gh = torch.stack(dgh[k:k + T], 1)
        k += T
        G_i, A_i, G_h, A_h = in_work(dgi[i].detach(), inp.detach(), gh.detach(), torch.stack(hprev, 1).detach())
        for name, val in (("weight_ih" + sfx, (G_i, A_i)), ("weight_hh" + sfx, (G_h, A_h)),
                          ("bias_ih" + sfx, G_i), ("bias_hh" + sfx, G_h)):
            if getattr(mod, name, None) is not None and (want is ALL or name in want):
                out[name] = val
    return out


def _check(call, out, T) -> None:
    key = tuple(tuple(z.shape) for z in call.outs)
    if key in _CHECKED.get(call.module, ()):
        return
    x = call.args[0]
    ref = call.out[0]
    if isinstance(x, PackedSequence):
        ref, _ = pad_packed_sequence(ref, batch_first=True, total_length=T)
    elif not call.module.batch_first:
        ref = ref.transpose(0, 1)
    ref = ref.detach()
    # under autocast the fused kernel may compute in the autocast dtype and return float32 (CPU: GRU)
    tol = tolerance(call.autocast[1] if call.autocast else ref.dtype) * float(ref.abs().max() if ref.numel() else 0.0)
    tol += 1e-30
    if ref.shape != out.shape or float((out.detach().to(ref.dtype) - ref).abs().max() if ref.numel() else 0.0) > tol:
        raise InputError(f"{_name(call)} is not allowed: its unrolled replay does not give the layer's output.")
    _CHECKED.setdefault(call.module, set()).add(key)


_terms, _per_record = block_rule(_blocks)


def records(call, moved, probe, rows: int, option: str):
    """The record layout of a recurrent call (its own ``batch_first``, or packed), checked by the probes of :mod:`.records`.

    Args:
        call: the :class:`~.calls.Call` of the layer on the batch.
        moved: the same call with one record of the batch changed, or None (no move probe).
        probe: ``{output index: gradient}`` of the gradient probe (one record's loss), or empty / None.
        rows: the number of records in the batch.
        option: the user's option named in the error message.

    Returns:
        ``(input dim, output dims)``: the input's record dimension (None: packed) and one per output
        (``[d, 1, 1]``: the sequence, ``h_n``, ``c_n``).

    Raises:
        InputError: if the layer's input does not hold ``rows`` sequences, or a probe shows one record
            reaching several of its sequences.
    """
    from .records import advice, moved_only_at_first, only_at

    X, _, _, _ = _inputs(call)
    mod = call.module
    if X.shape[0] != rows:
        raise InputError(f"{_name(call)} is not allowed with {option}: with its own batch_first={mod.batch_first} its "
                         f"input holds {X.shape[0]} sequences, the batch {rows} records; {advice(option)}.")
    if rows > 1 and moved is not None:
        Xm, _, _, _ = _inputs(moved)
        if not moved_only_at_first(X, Xm, 0):
            raise InputError(f"{_name(call)} is not allowed with {option}: changing one record of the batch changes "
                             f"several of this layer's sequences; {advice(option)}.")
    if rows > 1 and probe:
        g = probe.get(0)
        if g is not None:
            gp = _padded_grad(_Grads(call, g), 0, X.shape[1])
            if not only_at(gp != 0, 0, rows - 1):
                raise InputError(f"{_name(call)} is not allowed with {option}: one record's loss reaches several of "
                                 f"this layer's sequences; {advice(option)}.")
    d = None if isinstance(call.args[0], PackedSequence) else (0 if mod.batch_first else 1)
    return d, [d, 1, 1]


class _Grads:
    """A call seen with other output gradients (the gradient probe's)."""

    def __init__(self, call, g0):
        self.module, self.args, self.out, self.grads = call.module, call.args, call.out, {0: g0}


def why_not(m) -> str | None:
    """Why this recurrent layer cannot be taken by the rule (None: it can).

    Args:
        m: the ``nn.RNN`` / ``nn.LSTM`` / ``nn.GRU`` module.

    Returns:
        A reason for LSTM projections (``proj_size > 0``) or dropout between layers, else None.
    """
    if getattr(m, "proj_size", 0):
        return "proj_size > 0 (LSTM projections)"
    if m.dropout and m.num_layers > 1:
        return "dropout between layers (the fused kernel's masks cannot be replayed)"
    return None


RULE = register_rule(Rule((nn.RNN, nn.LSTM, nn.GRU), _terms, why_not, per_record=_per_record, signals="call",
                          records=records, blocks=_blocks))
