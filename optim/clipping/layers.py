"""Per-sample clipping layer by layer, for any module tree of the common layers (the "layers" path).

One forward pass records, for every module that owns parameters, its input ``a`` and its output
``z``; one backward pass gives the back-propagated signal ``g = dL_i/dz`` of every record at once.
Each layer kind then knows its per-sample gradient from ``(a, g)`` without a per-sample backward:

* ``nn.Linear`` on any leading dimensions (``T`` positions of a sequence): ``G_i = g_i^T a_i``
  (``[T, out]^T [T, in]``), bias ``sum_t g_it``;
* ``nn.Conv1d`` / ``nn.Conv2d`` (any stride, zero padding, dilation, groups): the same with ``a``
  the unfolded input patches (``T`` = output positions), per group;
* ``nn.Embedding``: ``G_i = sum_t onehot(id_it) g_it^T`` (``padding_idx`` rows get nothing);
* ``nn.LayerNorm`` / ``nn.GroupNorm`` (affine): ``sum_t g_it * xhat_it`` and ``sum_t g_it`` with
  ``xhat`` the normalised input, recomputed from ``a``;
* attention built from these (query/key/value/output ``nn.Linear`` layers, softmax in between:
  the softmax has no parameters and needs nothing).

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
:mod:`.conv`, :mod:`.embedding`, :mod:`.normalization`), and the float64 numerics they share are
:mod:`.numerics`; this module runs the path: the signals of every module, the checks that each
parameter is used once by its own module, the clip factors from the summed norms, the sums.

**Guarantee** (as :mod:`dpcalib.optim.clipping.paths`): the norm behind each record's clip factor is the norm of
exactly the vector the path adds for that record, accumulated in float64 from the working-dtype
signals (the Gram products and the formed gradients are float64).  A module that owns parameters
and is not one of these kinds makes the model unsupported (:func:`unsupported_layers` names them);
a parameter that reaches the loss other than through one call of its own module (a module called
twice, tied weights, a weight used functionally elsewhere) is detected on the autograd graph of
every call (:func:`_check_uses`); either way the caller falls back to vmap.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from . import conv, embedding, linear, normalization  # noqa: F401  (each registers its layer kind's rule)
from .precision import widened, widened_buffers
from .rules import rule_for

__all__ = ["unsupported_layers", "why_not", "supports_layers", "layers_clipped_sum", "layers_clipped_diff_sum", "SharedModule",
           "signal_terms", "add_sums", "check_single_use"]


def why_not(m: nn.Module) -> str | None:
    """Why the layers path cannot take this module (None: it can)."""
    own = {k for k, _ in m.named_parameters(recurse=False)}
    if not own:
        return None
    if isinstance(m, nn.MultiheadAttention):
        return "fused projections: convert it with dpcalib.optim.linear_attention(model)"
    rule = rule_for(m)
    if rule is None:
        return "no per-sample rule for this layer"
    if not own <= {"weight", "bias"}:
        return f"unexpected parameters {sorted(own)}"
    return rule.why_not(m)


def unsupported_layers(model: nn.Module) -> list:
    """``"name (Type): reason"`` for every module with parameters the layers path cannot take."""
    out = []
    for name, m in model.named_modules():
        why = why_not(m)
        if why is not None:
            out.append(f"{name or '<model>'} ({type(m).__name__}): {why}")
    return out


def supports_layers(model: nn.Module) -> bool:
    return any(True for _ in model.parameters()) and not unsupported_layers(model)


class SharedModule(Exception):
    """A parameter reaches the loss other than through one call of its own module (a module run
    twice, tied weights, a weight used functionally by another module): its per-sample gradient
    would need terms the per-layer rules do not see, so the layers path does not take the model."""


# -- signals -----------------------------------------------------------------------------------
# -- signals -----------------------------------------------------------------------------------
def _signals(model, params, loss_fn, x, y):
    """``[(prefix, module, input, grad of output)]`` for every module that owns parameters."""
    p = {k: v.detach().requires_grad_(True) for k, v in params.items()}   # leaves: every output is in the graph
    dtype = next(iter(p.values())).dtype
    x, y = widened(x, dtype), widened(y, dtype)      # a difference release's float64 pass (.precision)
    records, handles = [], []
    for name, m in model.named_modules():
        if any(True for _ in m.parameters(recurse=False)):
            def hook(mod, inp, out, name=name):
                records.append((name, mod, inp[0].detach(), out))
            handles.append(m.register_forward_hook(hook))
    try:
        out = functional_call(model, (p, widened_buffers(model, dtype)), (x,))
    finally:
        for h in handles:
            h.remove()
    names = [r[0] for r in records]
    if len(set(names)) != len(names):
        raise SharedModule(next(n for n in names if names.count(n) > 1))
    total = loss_fn(out, y).sum()
    _check_uses(total, p, set(names))
    gs = torch.autograd.grad(total, [r[3] for r in records], allow_unused=True)
    return [(name, mod, a, torch.zeros_like(z) if g is None else g.detach())
            for (name, mod, a, z), g in zip(records, gs)]


def _check_uses(total, leaves: dict, recorded: set) -> None:
    """Every parameter must reach the loss through exactly one operation of its own module's call,
    and a parameter of a module that did not run must not reach it at all: the per-sample rules see
    only the module's own call.  Tied weights (an embedding's matrix reused by an output layer),
    a parent that uses a child's weight functionally (``nn.MultiheadAttention``'s ``out_proj``) or a
    module called twice would otherwise lose terms of the per-sample gradient.  Counted on the
    autograd graph: the edges into each parameter's gradient accumulator."""
    ids = {id(t): k for k, t in leaves.items()}
    count = dict.fromkeys(leaves, 0)
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
    for k, c in count.items():
        owner = k.rsplit(".", 1)[0] if "." in k else ""
        if c != (1 if owner in recorded else 0):
            raise SharedModule(k)


def _key(prefix: str, p: str) -> str:
    return f"{prefix}.{p}" if prefix else p


# -- the path ----------------------------------------------------------------------------------
def _layer_terms(mod, a1, g1, a0=None, g0=None):
    """Per layer: ``(norm2 [B] float64, sums(f) -> {param: tensor})`` for the gradient (``a0`` None)
    or the gradient difference between the point of ``(a1, g1)`` and that of ``(a0, g0)``: its kind's rule."""
    return rule_for(mod).terms(mod, a1, g1, a0, g0)


def _signals_of(cache, model, params, loss_fn, x, y, s, e):
    if cache is None:
        return _signals(model, params, loss_fn, x[s:e], y[s:e])
    return cache.signals("layers", model, loss_fn, x, y, s, e, params,
                         lambda: _signals(model, params, loss_fn, x[s:e], y[s:e]))


def signal_terms(sig1, sig0=None) -> tuple:
    """``(norm2 [B] float64, [(module name, sums)])`` of every layer's signals ``[(name, module, a, g)]``
    at one point (``sig0`` None: the gradient) or at two (the difference): the records' squared norms
    summed over the layers, and each layer's ``sums(f)`` (:class:`~.rules.Rule`)."""
    if sig0 is None:
        sig0 = [None] * len(sig1)
    terms, norm2 = [], None
    for r1, r0 in zip(sig1, sig0):
        name, mod, a1, g1 = r1
        n2, sums = _layer_terms(mod, a1, g1, *((r0[2], r0[3]) if r0 is not None else ()))
        if norm2 is None:
            norm2 = torch.zeros(a1.shape[0], dtype=torch.float64, device=a1.device)
        norm2 = norm2 + n2
        terms.append((name, sums))
    return norm2, terms


def add_sums(total: dict, terms, f) -> None:
    """``total[param] += sum_i f_i v_i`` for every layer of :func:`signal_terms` (``f`` in the parameters' dtype)."""
    for name, sums in terms:
        for p, v in sums(f).items():
            total[_key(name, p)] += v


def check_single_use(model, params: dict, x, args=(), kwargs=None) -> None:
    """Raise :class:`SharedModule` unless every parameter reaches the output through exactly one call
    of its own module (:func:`_check_uses` on a forward of ``x`` at ``params``)."""
    p = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    names, handles = [], []
    for name, m in model.named_modules():
        if any(True for _ in m.parameters(recurse=False)):
            handles.append(m.register_forward_hook(lambda mod, inp, out, name=name: names.append(name)))
    try:
        with torch.enable_grad():
            out = functional_call(model, p, (x,) + tuple(args), kwargs or {})
    finally:
        for h in handles:
            h.remove()
    if len(set(names)) != len(names):
        raise SharedModule(next(n for n in names if names.count(n) > 1))
    _check_uses(out.sum(), p, set(names))


def _run(model, loss_fn, x, y, c, params, prev, chunk_size, weights, stabilizer, factors_of, cache=None):
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


def layers_clipped_sum(model, loss_fn, x, y, c, params, chunk_size, weights, stabilizer, factors_of, cache=None):
    """``(sum_i w_i clip(grad_i, C), norms)`` by the layers path (see the module text)."""
    return _run(model, loss_fn, x, y, c, params, None, chunk_size, weights, stabilizer, factors_of, cache)


def layers_clipped_diff_sum(model, loss_fn, x, y, c, params, prev, chunk_size, weights, factors_of, cache=None):
    """The same for ``grad_i(params) - grad_i(prev)``."""
    return _run(model, loss_fn, x, y, c, params, prev, chunk_size, weights, None, factors_of, cache)
