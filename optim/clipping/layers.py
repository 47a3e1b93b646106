"""Per-sample clipping layer by layer, for any module tree of the common layers (the "layers" path).

One forward pass records, for every module that owns parameters, its input ``a`` and its output
``z``; one backward pass gives the back-propagated signal ``g = dL_i/dz`` of every record at once.
Each layer kind then knows its per-sample gradient from ``(a, g)`` without a per-sample backward:

* ``nn.Linear`` on any leading dimensions (``T`` positions of a sequence): ``G_i = g_i^T a_i``
  (``[T, out]^T [T, in]``), bias ``sum_t g_it``;
* ``nn.Conv1d`` / ``nn.Conv2d`` (any stride, zero padding, dilation, groups): the same with ``a``
  the unfolded input patches (``T`` = output positions), per group; ``nn.Conv3d``, transposed
  convolutions and every padding mode by one weight-gradient convolution with the records as groups;
* ``nn.Embedding``: ``G_i = sum_t onehot(id_it) g_it^T`` (``padding_idx`` rows get nothing);
* ``nn.LayerNorm`` / ``nn.RMSNorm`` / ``nn.GroupNorm`` / ``nn.InstanceNorm*`` (affine): ``sum_t g_it *
  xhat_it`` and ``sum_t g_it`` with ``xhat`` the normalised input, recomputed from ``a``;
* ``nn.RNN`` / ``nn.LSTM`` / ``nn.GRU``: the call replayed unrolled, each weight's gradient a sum of
  outer products over time (:mod:`.recurrent`); ``nn.RNNCell`` / ``nn.LSTMCell`` / ``nn.GRUCell`` in a loop
  the same per step (:mod:`.cells`), and Opacus's ``DPLSTM`` / ``DPGRU`` / ``DPRNN`` by their ``RNNLinear`` cells
  (Linear layers called once per step: :mod:`.units` measures a module's calls as one);
* attention built from these (query/key/value/output ``nn.Linear`` layers, softmax in between:
  the softmax has no parameters and needs nothing), and the learned key / value position of
  ``add_bias_kv`` (:class:`~.attention.SequenceBias`: the output gradient at that position, :mod:`.sequence`).

Norms never need the per-sample gradients where the layer allows it (ghost norms, Goodfellow
2015; Li, Tramer, Liang & Hashimoto 2022; Bu et al. 2023, "mixed" ghost): for a Linear layer with
``T`` positions ``||g^T a||_F^2 = sum_{t,s} (a_t . a_s)(g_t . g_s)`` costs ``T^2 (in + out)`` per
record, against ``T in out`` for forming ``g^T a``; each layer takes the cheaper one.  Gradient
DIFFERENCES at two parameter points (DIFF2, DP-SRM), which Opacus does not compute, use the
decomposition of :mod:`dpcalib.optim.clipping.paths`: ``g^T a - g'^T a' = dg^T a + g'^T da`` (``dg = g - g'``,
``da = a - a'``) with the Gram terms ``(a.a)(dg.dg) + (da.da)(g'.g') + 2 (a.da)(dg.g')``, so that
rounding scales with the differences; embeddings and norm layers subtract their (small) per-sample
gradients directly.

Each layer kind's rule is its own module behind the registry of :mod:`.rules` (:mod:`.linear`,
:mod:`.conv`, :mod:`.embedding`, :mod:`.normalization`, :mod:`.recurrent`), and the float64 numerics they share
are :mod:`.numerics`; this module runs the path: the calls of every module that owns parameters
(:mod:`.calls`), the check that each parameter reaches the loss only through the calls of the modules
that own it, the clip factors from the summed norms, the sums (:mod:`.units`: calls that share a
parameter -- a module called twice, one weight owned by two modules -- are measured together).

**Guarantee** (as :mod:`dpcalib.optim.clipping.paths`): the norm behind each record's clip factor is the norm of
exactly the vector the path adds for that record, accumulated in float64 from the working-dtype
signals (the Gram products and the formed gradients are float64).  A module that owns parameters
and is not one of these kinds makes the model unsupported (:func:`unsupported_layers` names them);
a parameter that reaches the loss other than through the calls of the modules that own it (a weight
used functionally by a parent, as ``F.linear(h, self.emb.weight)``) is detected on the autograd graph
of every call (:func:`place_uses`); either way the caller falls back to vmap.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from . import cells, conv, embedding, linear, normalization, recurrent, sequence  # noqa: F401  (each registers its layer kind's rule)
from .calls import Recorder, delegated, leaves, owners
from .precision import widened, widened_buffers
from .rules import rule_for
from .units import add_sums, signal_terms

__all__ = ["key_map", "place_uses"]


def why_not(m: nn.Module) -> str | None:
    """Why the layers path cannot take this module (None: it can).

    Args:
        m: a module (only its own parameters matter; a module without any is taken).

    Returns:
        A one-line reason (fused attention, no rule, unexpected parameter names, or the rule's own
        ``why_not``), or None.
    """
    own = {k for k, _ in m.named_parameters(recurse=False)}
    if not own or delegated(m):
        return None
    if isinstance(m, nn.MultiheadAttention):
        return "fused projections: convert it with dpcalib.optim.linear_attention(model)"
    rule = rule_for(m)
    if rule is None:
        return "no per-sample rule for this layer"
    if rule.signals == "first" and not own <= {"weight", "bias"}:
        return f"unexpected parameters {sorted(own)}"
    return rule.why_not(m)


def unsupported_layers(model: nn.Module) -> list:
    """``"name (Type): reason"`` for every module with parameters the layers path cannot take.

    Args:
        model: the model.

    Returns:
        The list of reasons, in ``named_modules`` order (empty: every module is taken).
    """
    out = []
    for name, m in model.named_modules():
        why = why_not(m)
        if why is not None:
            out.append(f"{name or '<model>'} ({type(m).__name__}): {why}")
    return out


def supports_layers(model: nn.Module) -> bool:
    """Whether the layers path can take ``model``.

    Args:
        model: the model.

    Returns:
        True when it has parameters and :func:`unsupported_layers` finds nothing.
    """
    return any(True for _ in model.parameters()) and not unsupported_layers(model)


class SharedModule(Exception):
    """A parameter reaches the loss other than through the calls of the modules that own it (a weight used
    functionally by another module, a parent that uses a child's weight): its per-sample gradient would need
    terms the per-layer rules do not see, so the layers path does not take the model."""


def key_map(model: nn.Module, names) -> dict:
    """``{id(module): {own name: run's name}}`` for the parameters in ``names``.

    The run's names are as ``named_parameters()`` gives them: a tied weight under its first name.

    Args:
        model: the model.
        names: the run's parameter names (a container supporting ``in``).

    Returns:
        For every module that owns one of them, its own names mapped to the run's.
    """
    run = {id(p): k for k, p in model.named_parameters() if k in names}
    out = {}
    for _, m in model.named_modules(remove_duplicate=False):
        own = {k: run[id(p)] for k, p in m.named_parameters(recurse=False) if id(p) in run}
        if own:
            out[id(m)] = own
    return out


# -- signals -----------------------------------------------------------------------------------
def _signals(model, params, loss_fn, x, y):
    """The calls of every module that owns parameters (records on dim 0), their output gradients set."""
    p = {k: v.detach().requires_grad_(True) for k, v in params.items()}   # leaves: every output is in the graph
    dtype = next(iter(p.values())).dtype
    x, y = widened(x, dtype), widened(y, dtype)      # a difference release's float64 pass (.precision)
    keys = key_map(model, p)
    rec = Recorder(owners(model, {id(q) for k, q in model.named_parameters() if k in p}))
    calls = []
    rec.start(calls, x.shape[0])
    try:
        out = functional_call(model, (p, widened_buffers(model, dtype)), (x,))
    finally:
        rec.stop()
        rec.remove()
    for c in calls:
        c.keys = keys.get(id(c.module), {})
        rule = rule_for(c.module)
        c.dim = rule.record_dim(c.module) if rule is not None else None
        c.dim = 0 if c.dim is None else c.dim
        if rule is not None and rule.records is not None:
            continue
        a = c.input()
        if not isinstance(a, torch.Tensor) or a.dim() <= c.dim or a.shape[c.dim] != x.shape[0]:
            raise SharedModule(c.name)
    total = loss_fn(out, y).sum()
    moved, rest = place_uses(calls, out, p)
    if moved or rest:
        raise SharedModule((list(moved) + rest)[0])
    outs = [z for c in calls for z in c.outs]
    gs = torch.autograd.grad(total, outs, allow_unused=True)
    i = 0
    for c in calls:
        for j, z in enumerate(c.outs):
            if gs[i] is not None:
                c.grads[j] = gs[i].detach()
            i += 1
    return calls


def count_uses(calls) -> dict:
    """``{run's name: calls}``: how many recorded calls of modules owning each parameter ran.

    Args:
        calls: the recorded :class:`~.calls.Call` list (their ``keys`` set).

    Returns:
        The count of calls per run's parameter name.
    """
    out: dict = {}
    for c in calls:
        for k in c.keys.values():
            out[k] = out.get(k, 0) + 1
    return out


def _edges(total, leaves_: dict) -> dict:
    """``{name: n}``: the edges into each leaf's gradient accumulator on the autograd graph of ``total``."""
    ids = {id(t): k for k, t in leaves_.items()}
    count = dict.fromkeys(leaves_, 0)
    seen, stack = set(), [total.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        for nxt, _ in fn.next_functions:
            if nxt is None:
                continue
            var = getattr(nxt, "variable", None)
            if var is not None:
                k = ids.get(id(var))
                if k is not None:
                    count[k] += 1
            else:
                stack.append(nxt)
    return count


def place_uses(calls, out, leaves_: dict) -> tuple:
    r"""Where each parameter of ``leaves_`` is used on the graph of a forward.

    ``({name: (module, own name)}, [names])``: the parameters whose every use is inside the calls of the
    nearest recorded ancestor of their module rather than of the module itself (a parent that uses a
    child's weight, as ``nn.MultiheadAttention`` does ``out_proj``'s), and those used elsewhere too.  The
    others are used only inside the calls of the modules that own them: counted on the graph of ``out``
    against each such call replayed alone (a fused recurrent kernel uses its weights once per time step).

    Args:
        calls: the recorded calls of the forward.
        out: the forward's output.
        leaves\_: ``{run's name: leaf tensor}`` the parameters the forward ran with.

    Returns:
        ``(moved, rest)``: the parameters used by an ancestor's calls, and the sorted names of those used
        elsewhere too.
    """
    uses = uses_of(out, leaves_)
    expected = count_uses(calls)
    inside: dict = {}

    def within(c, names):
        if id(c) not in inside:
            q = {n: t.detach().requires_grad_(True) for n, t in c.module.named_parameters()}
            with torch.enable_grad():
                iso = functional_call(c.module, q, tuple(c.args), dict(c.kwargs))
            inside[id(c)] = uses_of(iso, q)
        return sum(inside[id(c)].get(n, 0) for n in names)
    moved, rest = {}, []
    for k in leaves_:
        if uses[k] == 0 or uses[k] == expected.get(k, 0):
            continue
        mine = [(c, [n for n, v in c.keys.items() if v == k]) for c in calls if k in c.keys.values()]
        if mine and sum(within(c, ns) for c, ns in mine) == uses[k]:
            continue
        owner = next((c for c in sorted(calls, key=lambda c: -len(c.name))
                      if c.name and k.startswith(c.name + ".") and c.keys), None)
        if owner is not None:
            rel = k[len(owner.name) + 1:]
            if sum(within(c, [rel]) for c in calls if c.module is owner.module) == uses[k]:
                moved[k] = (owner.module, rel)
                continue
        rest.append(k)
    return moved, sorted(rest)


def uses_of(out, leaves_: dict) -> dict:
    r"""``{name: uses}`` of every leaf parameter on the autograd graph of ``out``'s floating tensors.

    Args:
        out: a tensor or a nested container of them.
        leaves\_: ``{name: leaf tensor}``.

    Returns:
        The number of edges into each leaf's gradient accumulator (0 for every one when nothing in
        ``out`` requires a gradient).
    """
    ts = [t for t in leaves(out) if t.is_floating_point() and t.requires_grad]
    if not ts:
        return dict.fromkeys(leaves_, 0)
    return _edges(sum(t.sum() for t in ts), leaves_)


# -- the path ----------------------------------------------------------------------------------
def _signals_of(cache, model, params, loss_fn, x, y, s, e):
    if cache is None:
        return _signals(model, params, loss_fn, x[s:e], y[s:e])
    return cache.signals("layers", model, loss_fn, x, y, s, e, params,
                         lambda: _signals(model, params, loss_fn, x[s:e], y[s:e]))


def layers_clipped(model, loss_fn, x, y, c, params, prev, chunk_size, weights, stabilizer, factors_of, cache=None):
    """``(sum_i w_i clip(v_i, C), norms)`` by the layers path (see the module text): ``v_i`` record i's gradient at
    ``params``, or with ``prev`` its gradient difference ``grad_i(params) - grad_i(prev)``.

    Args:
        model: the model.
        loss_fn: ``loss_fn(output, target)`` returning one loss per example.
        x: the inputs, records on dim 0.
        y: the targets, records on dim 0.
        c: the clip norm C >= 0.
        params: ``{run's name: tensor}`` the (current) parameter point.
        prev: the earlier point, the same names; or None (the gradients at ``params``).
        chunk_size: records per chunk, > 0.
        weights: the records' weights ``[B]``, or None (1).
        stabilizer: automatic clipping's offset, or None.
        factors_of: ``factors_of(norms, c, stabilizer)``, the clip factors (:func:`~.paths.clip_factors`).
        cache: a :class:`~.signals.SignalCache`, or None.

    Returns:
        ``(sums, norms)``: the clipped sums (of the gradients or their differences) by run's name, and the
        records' unclipped norms ``[B]`` (float64).

    Raises:
        SharedModule: if a parameter reaches the loss other than through its own modules' calls, or a
            call's input has no dimension of the batch's records (the caller falls back to vmap).
    """
    total = {k: torch.zeros_like(v) for k, v in params.items()}
    all_norms = []
    for s in range(0, x.shape[0], chunk_size):
        e = min(s + chunk_size, x.shape[0])
        sig0 = _signals_of(cache, model, prev, loss_fn, x, y, s, e) if prev is not None else None
        sig1 = _signals_of(cache, model, params, loss_fn, x, y, s, e)
        norm2, terms = signal_terms(sig1, sig0)
        norms = torch.sqrt(torch.clamp(norm2, min=0.0))
        f = factors_of(norms, c, stabilizer)
        if weights is not None:
            f = f * weights[s:s + chunk_size].to(f.dtype)
        add_sums(total, terms, f.to(next(iter(params.values())).dtype))
        all_norms.append(norms)
    return total, torch.cat(all_norms)
