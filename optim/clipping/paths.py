"""Per-sample clipping of gradients and of gradient DIFFERENCES, without a Python loop over samples.

``clip(v, C) = min{1, C/||v||} v`` with ``clip(0, C) = 0`` and ``clip(v, 0) = 0`` .

Three paths, same results (the third, ``"layers"``, is described below):

* general: ``torch.func.vmap(torch.func.grad(...))`` over the batch, in chunks to bound memory;
  works for any ``nn.Module`` whose loss is a per-example function of its output.
* ghost (fast): for ``nn.Sequential`` stacks of ``nn.Linear`` and elementwise activations, the
  per-sample gradient of a Linear layer is the outer product ``g_i a_i^T`` of the back-propagated
  signal and the layer input, so ``||grad_i||^2 = ||g_i||^2 ||a_i||^2 (+ ||g_i||^2 for the bias)`` and
  the clipped sum is ``(c * G)^T A``: per-sample gradients are never materialised.  For a
  difference of gradients at two parameter points (DIFF2, DP-SRM) the path forms the differences
  of the signals first, ``dg = g - g'`` and ``da = a - a'``, and writes each record's vector as
  ``g a^T - g' a'^T = dg a^T + g' da^T``: its squared norm is
  ``||dg||^2 ||a||^2 + ||g'||^2 ||da||^2 + 2 (dg.g')(a.da)`` and the clipped sum is
  ``(c * dG)^T A + (c * G')^T dA``, so that rounding scales with the differences.

**Guarantee (every path, gradients and differences, any dtype).**  The norm behind record i's
clip factor is (at least) the norm of exactly the vector ``v_i`` that the path adds to the sum for
record i (built from that record's own signals): accumulated in float64, or -- for the squared
norms of float32 signals at most 1024 wide in a gradient's ghost norm -- a float32 sum inflated by
its a-priori rounding bound (:func:`dpcalib.optim.clipping.numerics.row_sq_upper`: an upper bound, over-stating by at
most about 6.2e-5 relative).  So ``||c_i v_i|| <= C`` up to the float64 rounding of that norm
(relative ~1e-15) and the one ulp of the factor's cast to the working dtype.  The sum itself is
then rounded in the working dtype like any sum: removing a record moves it by at most ``w_i C``
plus that rounding, which is relative to the magnitude of the summands, never to C -- provided each
record's vector depends on that record alone.  A difference of gradients at nearby points
amplifies its passes' rounding ~1/step, and machines whose matrix products round a row by the
batch would let a removal move the other records' differences too, so difference releases compute
in float64 whatever the model's dtype (:mod:`dpcalib.optim.clipping.precision`).  (An earlier
ghost formula expanded ``||g a^T - g' a'^T||^2`` into
``||g||^2 ||a||^2 + ||g'||^2 ||a'||^2 - 2 (g.g')(a.a')`` in the working dtype; at nearby parameter
points float32 cancellation made that norm wrong by orders of magnitude and let one record move
the sum by up to thousands of C -- see tests/test_clipping_soundness.py.)

Three paths: ``"ghost"`` (above), ``"layers"`` (:mod:`dpcalib.optim.clipping.layers`: any module tree of Linear,
convolutions, Embedding, the norms, recurrent layers -- sequences, CNNs, attention built from Linear layers),
``"vmap"`` (anything).  ``method="auto"`` takes the ghost path for an ``nn.Sequential`` MLP, the
layers path where every module with parameters has a rule, and vmap otherwise -- then with a
:class:`ClippingFallbackWarning` naming the layers, once per model class.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as Fn
from torch.func import functional_call, grad, vmap
from ...accountant.validation import InputError
from .layers import SharedModule, layers_clipped, supports_layers, unsupported_layers
from .numerics import rowdots64, rows_sq_upper
from .precision import exact_float32, narrowed, widened, widened_buffers, widened_params

__all__ = ["supports_ghost", "clipped_grad_sum", "clipped_grad_diff_sum", "clip_factors",
           "ClippingFallbackWarning", "clip_path", "ghost_clipped_sum", "ghost_clipped_diff_sum"]

METHODS = ("auto", "ghost", "layers", "vmap")


class ClippingFallbackWarning(UserWarning):
    """The model has a layer with parameters that no fast per-sample rule covers: per-sample
    gradients are formed by vmap (correct, slower, more memory)."""

_ELEMENTWISE = (nn.ReLU, nn.Softplus, nn.Tanh, nn.Sigmoid, nn.Identity, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU)


def supports_ghost(model: nn.Module) -> bool:
    """True for ``nn.Sequential`` models made of ``nn.Linear`` (at least one) and elementwise activations only,
    each layer at one place (a Linear the Sequential holds twice is called twice: a record's gradient of it is the
    sum of both calls', whose norm the per-layer ghost norms would not bound).

    Args:
        model: the model.

    Returns:
        Whether the ghost path can take ``model``.
    """
    return isinstance(model, nn.Sequential) and any(isinstance(m, nn.Linear) for m in model) and \
        all(isinstance(m, (nn.Linear,) + _ELEMENTWISE) for m in model) and \
        len({id(m) for m in model if isinstance(m, nn.Linear)}) == sum(isinstance(m, nn.Linear) for m in model)


def clip_factors(norms: torch.Tensor, max_norm: float, stabilizer: float | None = None) -> torch.Tensor:
    """``min{1, C/||v||}``, with 0 where the norm is 0 or C = 0 (the clipped vector is 0 there).

    With ``stabilizer=g`` (automatic clipping, Bu et al.; DiceSGD Algorithm 4): ``C/(||v|| + g)``,
    so every scaled vector has norm < C and ``v = 0`` maps to 0.

    Args:
        norms: the vectors' L2 norms ``||v||`` (>= 0).
        max_norm: the clip norm C >= 0 (``inf``: factor 1), or a tensor broadcastable against ``norms``
            (one C per batched run).
        stabilizer: the automatic-clipping offset g > 0, or None (plain clipping).

    Returns:
        The factors, shaped as ``norms``: ``||f v|| <= C`` for each.
    """
    if stabilizer is not None:
        return max_norm / (norms + stabilizer)
    if not isinstance(max_norm, torch.Tensor):
        if max_norm == math.inf:
            return torch.ones_like(norms)
        if max_norm == 0:
            return torch.zeros_like(norms)
        # C / max(norm, C): exactly 1 up to C, C / norm beyond, as tensor / tensor (rounded once)
        return torch.where(norms > 0, norms.new_tensor(max_norm) / torch.clamp(norms, min=max_norm), 0.0)
    # a tensor of C's (one per batched run): 1 up to C (also C = inf at an infinite norm), C / norm beyond
    safe = torch.where(norms > 0, norms, torch.ones_like(norms))
    f = torch.where(norms <= max_norm, 1.0, max_norm / safe)
    return torch.where(norms > 0, f, 0.0)


_WARNED: set = set()


def clip_path(model: nn.Module, method: str = "auto") -> str:
    """The path ``method`` takes for ``model``: ``"ghost"``, ``"layers"`` or ``"vmap"``.

    With ``"auto"``, a model that falls to vmap is reported once per model class by a
    :class:`ClippingFallbackWarning`.

    Args:
        model: the model.
        method: ``"auto"``, ``"ghost"``, ``"layers"`` or ``"vmap"``.

    Returns:
        The path's name (``method`` itself unless it is ``"auto"``).

    Raises:
        InputError: if ``method`` is unknown, or is ``"ghost"`` / ``"layers"`` for a model that path cannot take.
    """
    if method not in METHODS:
        raise InputError(f"method={method!r} is not allowed: expected one of {', '.join(METHODS)}.")
    if method == "ghost" and not supports_ghost(model):
        raise InputError("method='ghost' is not allowed for this model: expected an nn.Sequential of "
                         "nn.Linear and elementwise activations.")
    if method == "layers" and not supports_layers(model):
        raise InputError(f"method='layers' is not allowed for this model: {'; '.join(unsupported_layers(model))}.")
    if method != "auto":
        return method
    if supports_ghost(model):
        return "ghost"
    if supports_layers(model):
        return "layers"
    key = type(model)
    if key not in _WARNED:
        _WARNED.add(key)
        import warnings

        warnings.warn(f"per-sample clipping of {type(model).__name__} falls back to vmap (slower, more memory): "
                      f"no fast rule for {'; '.join(unsupported_layers(model)) or 'its layers'}",
                      ClippingFallbackWarning, stacklevel=3)
    return "vmap"


def _check(max_norm, method, model):
    """Validate; return ``(C, path)``."""
    c = float(max_norm)
    if not (c >= 0) or math.isnan(c):
        raise InputError(f"max_norm={max_norm!r} is not allowed: expected a number in [0, inf].")
    return c, clip_path(model, method)


def _shared_fallback(model, method: str) -> str:
    """A module with parameters ran twice in one forward: vmap (refused when 'layers' was asked)."""
    if method == "layers":
        raise InputError("method='layers' is not allowed for this model: a parameter reaches the loss other than "
                         "through one call of its own module (a module run twice, tied or shared weights).")
    key = (type(model), "shared")
    if key not in _WARNED:
        _WARNED.add(key)
        import warnings

        warnings.warn(f"per-sample clipping of {type(model).__name__} falls back to vmap: a parameter reaches the loss "
                      "other than through one call of its own module (a module run more than once per forward, tied "
                      "or shared weights)", ClippingFallbackWarning, stacklevel=4)
    return "vmap"


def _vmap_clipped_sum(per_sample, like: dict, n: int, c: float, chunk_size: int, weights=None, stabilizer=None):
    """Chunked general path: ``per_sample(start, stop)`` gives the per-sample vectors of a chunk."""
    total = {k: torch.zeros_like(v) for k, v in like.items()}
    all_norms = []
    for s in range(0, n, chunk_size):
        ps = per_sample(s, s + chunk_size)
        norms = _flat_norms(ps)
        f = clip_factors(norms, c, stabilizer)
        if weights is not None:
            f = f * weights[s:s + chunk_size]
        for k, v in ps.items():
            total[k] += torch.einsum("b,b...->...", _in_dtype(f, v), v)
        all_norms.append(norms)
    return total, torch.cat(all_norms)


def _weighted(factors, weights):
    return factors if weights is None else factors * weights


def _params(model, params):
    return dict(model.named_parameters()) if params is None else params


# ---- ghost path -------------------------------------------------------------------------------
def _ghost_signals(model: nn.Sequential, params: dict, loss_fn, x, y):
    """Per Linear layer: (name prefix, input a [B, d_in], back-prop signal g [B, d_out], has_bias)."""
    h = widened(x, next(iter(params.values())).dtype)    # a difference release's float64 pass (.precision)
    y = widened(y, h.dtype)
    records = []
    for idx, m in enumerate(model):
        if isinstance(m, nn.Linear):
            w = params[f"{idx}.weight"]
            b = params.get(f"{idx}.bias")
            # the graph stays connected through h; weights are constants (no weight gradients formed)
            z = Fn.linear(h, w.detach(), None if b is None else b.detach())
            if not z.requires_grad:  # first layer: z is a leaf
                z.requires_grad_(True)
            records.append((str(idx), h.detach(), z, b is not None))
            h = z
        else:
            h = m(h)
    losses = loss_fn(h, y)
    gs = torch.autograd.grad(losses.sum(), [r[2] for r in records])
    return [(name, a, g, has_b) for (name, a, _, has_b), g in zip(records, gs)]


def _ghost_signals_of(cache, model, params, loss_fn, x, y):
    if cache is None:
        return _ghost_signals(model, params, loss_fn, x, y)
    return cache.signals("ghost", model, loss_fn, x, y, 0, x.shape[0], params,
                         lambda: _ghost_signals(model, params, loss_fn, x, y))


def _ghost_norms(gg: torch.Tensor, aa: torch.Tensor, bias: list) -> torch.Tensor:
    """``sqrt(sum_l ||g_l||^2 (||a_l||^2 + [layer l has a bias]))`` from the ``[layers, B]`` squared norms
    (the same sum in fewest operations when every layer, or none, has a bias)."""
    if all(bias):
        t = torch.addcmul(gg, gg, aa)
    elif not any(bias):
        t = gg * aa
    else:
        t = gg * (aa + aa.new_tensor([1.0 if b else 0.0 for b in bias])[:, None])
    return t.sum(0).sqrt_()


def _ghost_sum(sig, factors):
    """``sum_i f_i g_i a_i^T`` (and ``sum_i f_i g_i``) per layer, the factors applied to the narrower signal."""
    out, cast = {}, {}
    for name, a, g, has_b in sig:
        if g.dtype not in cast:
            cast[g.dtype] = _in_dtype(factors, g)
        f = cast[g.dtype]
        if a.shape[1] < g.shape[1]:
            out[f"{name}.weight"] = g.T @ (a * f[:, None])
            if has_b:
                out[f"{name}.bias"] = g.T @ f
        else:
            cg = g * f[:, None]
            out[f"{name}.weight"] = cg.T @ a
            if has_b:
                out[f"{name}.bias"] = cg.sum(0)
    return out


def _factors(norms, c, stabilizer, weights, scale):
    """The clip factors of vectors ``scale * u_i`` whose ``||u_i||`` are ``norms``, times ``scale``
    (what multiplies ``u_i``); ``scale`` None: the vectors are the ``u_i`` themselves."""
    if scale is None:
        return _weighted(clip_factors(norms, c, stabilizer), weights)
    return _weighted(clip_factors(norms * scale, c, stabilizer) * scale, weights)


@exact_float32()
def ghost_clipped_sum(sig, c: float, weights=None, stabilizer=None, scale: float | None = None):
    """``(sum_i w_i clip(v_i, C), ||v_i||)`` of an MLP's per-record gradients from its ghost signals.

    ``v_i = scale * (g_i a_i^T, g_i)`` per Linear layer.

    Args:
        sig: the ghost signals ``[(name, a [B, in], g [B, out], has_bias)]``, one per Linear layer.
        c: the clip norm C >= 0.
        weights: the records' weights ``[B]`` (None: 1).
        stabilizer: the automatic-clipping offset (see :func:`clip_factors`), or None.
        scale: the factor of signals left by a mean-reduced loss (the batch's rows), or None (1).

    Returns:
        ``(sums, norms)``: the clipped sums ``{"<layer>.weight": ..., "<layer>.bias": ...}`` and the records'
        unclipped norms ``[B]``.
    """
    # sum over layers of ||g||^2 (||a||^2 + [bias]): upper bounds of its non-negative terms bound it
    sq = rows_sq_upper([t for _, a, g, _ in sig for t in (g, a)])
    norms = _ghost_norms(sq[0::2], sq[1::2], [hb for *_, hb in sig])
    return _ghost_sum(sig, _factors(norms, c, stabilizer, weights, scale)), norms if scale is None else norms * scale


@exact_float32()
def ghost_clipped_diff_sum(s1, s0, c: float, weights=None, scale: float | None = None):
    """The same for the records' gradient differences between the point of ``s1`` and that of ``s0``.

    Args:
        s1: the ghost signals at the current point (as for :func:`ghost_clipped_sum`).
        s0: the ghost signals at the other point, the same layers.
        c: the clip norm C >= 0.
        weights: the records' weights ``[B]`` (None: 1).
        scale: the factor of signals left by a mean-reduced loss, or None (1).

    Returns:
        ``(sums, norms)``: the clipped sums of the differences by parameter name, and the records'
        unclipped difference norms ``[B]`` (float64).
    """
    # record i adds v_i = dg_i a_i^T + g0_i da_i^T (+ dg_i for the bias): norms and sum from the same
    # differences, norms in float64 (module docstring: the guarantee)
    parts = []
    norms2 = torch.zeros(s1[0][1].shape[0], dtype=torch.float64, device=s1[0][1].device)
    for (name, a, g, hb), (_, a0, g0, _) in zip(s1, s0):
        dg = g - g0
        da = None if torch.equal(a, a0) else a - a0     # the first layer's input is the data itself
        if da is None:
            dgdg, aa = rowdots64([(dg, dg), (a, a)])
            norms2 = norms2 + dgdg * (aa + (1.0 if hb else 0.0))
        else:
            dgdg, aa, g0g0, dada, dgg0, ada = rowdots64([(dg, dg), (a, a), (g0, g0), (da, da), (dg, g0), (a, da)])
            norms2 = norms2 + dgdg * (aa + (1.0 if hb else 0.0)) + g0g0 * dada + 2.0 * dgg0 * ada
        parts.append((name, a, dg, g0, da, hb))
    norms = torch.sqrt(torch.clamp(norms2, min=0.0))
    f = _factors(norms, c, None, weights, scale)
    out = {}
    for name, a, dg, g0, da, hb in parts:
        fc = _in_dtype(f, dg)[:, None]
        cdg = dg * fc
        w = cdg.T @ a
        if da is not None:
            w = w + (g0 * fc).T @ da
        out[f"{name}.weight"] = w
        if hb:
            out[f"{name}.bias"] = cdg.sum(0)
    return out, norms if scale is None else norms * scale


# ---- general path -----------------------------------------------------------------------------
def _per_sample_grads(model, params, loss_fn, x, y):
    buffers = widened_buffers(model, next(iter(params.values())).dtype)

    def one(p, xi, yi):
        out = functional_call(model, (p, buffers), (xi.unsqueeze(0),))
        return loss_fn(out, yi.unsqueeze(0)).sum()

    detached = {k: v.detach() for k, v in params.items()}
    return vmap(grad(one), in_dims=(None, 0, 0))(detached, x, y)


def _flat_norms(per_sample: dict) -> torch.Tensor:
    """Per-sample L2 norms of the flattened vectors, accumulated in float64 (see the module's guarantee)."""
    return torch.sqrt(sum(_sq(v.flatten(1)) for v in per_sample.values()))


def _sq(t: torch.Tensor) -> torch.Tensor:
    """Per-row squared norms in float64."""
    return t.to(torch.float64).pow(2).sum(1)


def _in_dtype(factors: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return factors.to(like.dtype)


# ---- public -----------------------------------------------------------------------------------
@exact_float32()
def clipped_grad_sum(model: nn.Module, loss_fn, x: torch.Tensor, y: torch.Tensor, max_norm: float,
                     params: dict | None = None, *, method: str = "auto", chunk_size: int = 1024,
                     weights: torch.Tensor | None = None, stabilizer: float | None = None, cache=None):
    """``(sum_i w_i clip(grad l(params; x_i, y_i), C), per-sample norms)``.

    ``weights`` lets several clients' clipped MEANS be summed in one pass (``w_i = 1/(P n_p)`` for DIFF2).
    Formal guarantee: every summand has norm <= ``max_norm`` (L2 sensitivity of the sum: C under
    add/remove, 2C under replace-one).

    Args:
        model: the ``nn.Module``.
        loss_fn: ``loss_fn(output, target)`` returning one loss per example (no reduction).
        x: the inputs, records on dim 0.
        y: the targets, records on dim 0.
        max_norm: the clip norm C, in ``[0, inf]`` (``inf``: no clipping; 0: every summand 0).
        params: ``{name: tensor}`` the parameter point (None: the model's own parameters).
        method: ``"auto"``, ``"ghost"``, ``"layers"`` or ``"vmap"`` (see :func:`clip_path`).
        chunk_size: records per vmap chunk (bounds memory), > 0.
        weights: the records' weights ``[B]`` (None: 1).
        stabilizer: automatic clipping (see :func:`clip_factors`), or None.
        cache: a :class:`dpcalib.optim.clipping.signals.SignalCache` (full-batch runs reuse the signals of
            a point evaluated before; the result is the same), or None.

    Returns:
        ``(sums, norms)``: a dict of clipped sums by the model's parameter names, and the unclipped
        per-sample gradient norms ``[B]``.

    Raises:
        InputError: if ``max_norm`` is negative or NaN, ``method`` is unknown or cannot take the model.
    """
    c, path = _check(max_norm, method, model)
    params = _params(model, params)
    if path == "layers":
        try:
            return layers_clipped(model, loss_fn, x, y, c, params, None, chunk_size, weights, stabilizer, clip_factors,
                                  cache)
        except SharedModule:
            path = _shared_fallback(model, method)
    if path == "ghost":
        return ghost_clipped_sum(_ghost_signals_of(cache, model, params, loss_fn, x, y), c, weights, stabilizer)
    return _vmap_clipped_sum(lambda i, j: _per_sample_grads(model, params, loss_fn, x[i:j], y[i:j]),
                             params, x.shape[0], c, chunk_size, weights, stabilizer)


@exact_float32()
def clipped_grad_diff_sum(model: nn.Module, loss_fn, x: torch.Tensor, y: torch.Tensor, max_norm: float,
                          params: dict, params_prev: dict, *, method: str = "auto", chunk_size: int = 1024,
                          weights: torch.Tensor | None = None, cache=None):
    """``(sum_i clip(grad l(params; z_i) - grad l(params_prev; z_i), C), per-sample difference norms)``.

    The per-sample gradient differences that DIFF2 (``x_{r-1}`` vs ``x_{r-2}``) and DP-SRM
    (``theta^t`` vs ``theta^{t-1}``) clip.  Same contract as :func:`clipped_grad_sum`; computed in
    float64 whatever the model's dtype and the sums returned in the parameters' dtypes
    (:mod:`dpcalib.optim.clipping.precision`: why a difference needs it).

    Args:
        params: ``{name: tensor}`` the current parameter point.
        params_prev: the earlier point, the same names and shapes.
        model, loss_fn, x, y, max_norm, method, chunk_size, weights, cache: as :func:`clipped_grad_sum`.

    Returns:
        ``(sums, norms)``: a dict of clipped sums of the differences in the dtypes of ``params``, and the
        unclipped per-sample difference norms ``[B]``.

    Raises:
        InputError: as :func:`clipped_grad_sum`.
    """
    c, path = _check(max_norm, method, model)
    like, params, params_prev = params, widened_params(params), widened_params(params_prev)   # float64 (.precision)
    if path == "layers":
        try:
            sums, norms = layers_clipped(model, loss_fn, x, y, c, params, params_prev, chunk_size, weights, None,
                                         clip_factors, cache)
            return narrowed(sums, like), norms
        except SharedModule:
            path = _shared_fallback(model, method)
    if path == "ghost":
        s0 = _ghost_signals_of(cache, model, params_prev, loss_fn, x, y)     # (the earlier point first: kept)
        s1 = _ghost_signals_of(cache, model, params, loss_fn, x, y)
        sums, norms = ghost_clipped_diff_sum(s1, s0, c, weights)
        return narrowed(sums, like), norms

    def diffs(i, j):
        xs, ys = widened(x[i:j]), widened(y[i:j])
        g1 = _per_sample_grads(model, params, loss_fn, xs, ys)
        g0 = _per_sample_grads(model, params_prev, loss_fn, xs, ys)
        return {k: g1[k] - g0[k] for k in g1}

    sums, norms = _vmap_clipped_sum(diffs, params, x.shape[0], c, chunk_size, weights)
    return narrowed(sums, like), norms
