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
decomposition of :mod:`optim.clipping`: ``g^T a - g'^T a' = dg^T a + g'^T da`` (``dg = g - g'``,
``da = a - a'``) with the Gram terms ``(a.a)(dg.dg) + (da.da)(g'.g') + 2 (a.da)(dg.g')``, so that
rounding scales with the differences; embeddings and norm layers subtract their (small) per-sample
gradients directly.

**Guarantee** (as :mod:`optim.clipping`): the norm behind each record's clip factor is the norm of
exactly the vector the path adds for that record, accumulated in float64 from the working-dtype
signals (the Gram products and the formed gradients are float64).  A module that owns parameters
and is not one of these kinds makes the model unsupported (:func:`unsupported_layers` names them);
a parameter that reaches the loss other than through one call of its own module (a module called
twice, tied weights, a weight used functionally elsewhere) is detected on the autograd graph of
every call (:func:`_check_uses`); either way the caller falls back to vmap.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as Fn

__all__ = ["unsupported_layers", "supports_layers", "layers_clipped_sum", "layers_clipped_diff_sum", "rowdots64",
           "row_sq_upper", "rows_sq_upper"]

_KINDS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Embedding, nn.LayerNorm, nn.GroupNorm)


def _conv_padding(m):
    """The conv's numeric padding, or None when it has none we unfold (a non-zero mode, uneven 'same')."""
    if m.padding_mode != "zeros":
        return None
    if m.padding == "valid":
        return (0,) * len(m.kernel_size)
    if m.padding == "same":
        pads = []
        for k, d in zip(m.kernel_size, m.dilation):
            if (d * (k - 1)) % 2:
                return None
            pads.append(d * (k - 1) // 2)
        return tuple(pads)
    return tuple(m.padding)


def _why_not(m: nn.Module) -> str | None:
    """Why the layers path cannot take this module (None: it can)."""
    own = {k for k, _ in m.named_parameters(recurse=False)}
    if not own:
        return None
    if isinstance(m, nn.MultiheadAttention):
        return "fused projections: convert it with dpcalib.optim.linear_attention(model)"
    if not isinstance(m, _KINDS):
        return "no per-sample rule for this layer"
    if not own <= {"weight", "bias"}:
        return f"unexpected parameters {sorted(own)}"
    if isinstance(m, (nn.Conv1d, nn.Conv2d)) and _conv_padding(m) is None:
        return f"padding {m.padding!r} / mode {m.padding_mode!r}"
    if isinstance(m, nn.Embedding) and (m.max_norm is not None or m.scale_grad_by_freq or m.sparse):
        return "max_norm / scale_grad_by_freq / sparse"
    return None


def unsupported_layers(model: nn.Module) -> list:
    """``"name (Type): reason"`` for every module with parameters the layers path cannot take."""
    out = []
    for name, m in model.named_modules():
        why = _why_not(m)
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
def _signals(model, params, loss_fn, x, y):
    """``[(prefix, module, input, grad of output)]`` for every module that owns parameters."""
    p = {k: v.detach().requires_grad_(True) for k, v in params.items()}   # leaves: every output is in the graph
    records, handles = [], []
    for name, m in model.named_modules():
        if any(True for _ in m.parameters(recurse=False)):
            def hook(mod, inp, out, name=name):
                records.append((name, mod, inp[0].detach(), out))
            handles.append(m.register_forward_hook(hook))
    try:
        out = functional_call(model, p, (x,))
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


def _linear_blocks(mod, a, g):
    """``[(A [B, T, in], G [B, T, out], weight shape slice)]``: the layer as a sum over positions of
    outer products, one block per conv group."""
    B = a.shape[0]
    if isinstance(mod, nn.Linear):
        return [(a.reshape(B, -1, a.shape[-1]), g.reshape(B, -1, g.shape[-1]))]
    pad = _conv_padding(mod)
    if isinstance(mod, nn.Conv1d):
        a4 = a.unsqueeze(2)
        k, d, s, pd = (1, mod.kernel_size[0]), (1, mod.dilation[0]), (1, mod.stride[0]), (0, pad[0])
    else:
        a4, k, d, s, pd = a, mod.kernel_size, mod.dilation, mod.stride, pad
    cols = Fn.unfold(a4, k, dilation=d, padding=pd, stride=s)            # [B, C_in k, L]
    G = g.reshape(B, g.shape[1], -1)                                     # [B, C_out, L]
    ng = mod.groups
    ci, co = cols.shape[1] // ng, G.shape[1] // ng
    return [(cols[:, j * ci:(j + 1) * ci].transpose(1, 2), G[:, j * co:(j + 1) * co].transpose(1, 2))
            for j in range(ng)]


#: rows per block of :func:`rowdots64` (the float64 copies of a block stay in cache)
ROW_BLOCK = 1024


def rowdots64(pairs) -> list:
    """``[sum_j x_ij y_ij for (x, y) in pairs]``: per-row dot products of ``[n, d]`` tensors accumulated in
    float64.  A pair of one tensor with itself is a squared norm (:func:`_row_sq64`); other pairs are cast
    block by block (casting whole matrices to float64 is memory-bound; a block's copies stay in cache)."""
    n = pairs[0][0].shape[0]
    dev = pairs[0][0].device
    out = [_row_sq64(x) if _same(x, y) else torch.empty(n, dtype=torch.float64, device=dev) for x, y in pairs]
    cross = [(o, x, y) for o, (x, y) in zip(out, pairs) if not _same(x, y)]
    for s in range(0, n if cross else 0, ROW_BLOCK):
        e = min(s + ROW_BLOCK, n)
        memo = {}

        def f64(t):
            k = id(t)
            if k not in memo:
                memo[k] = t[s:e].to(torch.float64)
            return memo[k]
        for o, x, y in cross:
            o[s:e] = torch.einsum("ij,ij->i", f64(x), f64(y))
    return out


#: rows at most this long take :func:`row_sq_upper`'s float32 reduction (its slack gamma_d <= 6.2e-5)
UPPER_MAX_COLS = 1024
_U32 = 2.0 ** -24          # unit roundoff of float32
_ETA32 = 2.0 ** -149       # smallest positive float32 (what an underflowing square may lose)


def row_sq_upper(x: torch.Tensor) -> torch.Tensor:
    """Per-row upper bounds, in float64, on the sums of squares of ``x [n, d]`` -- for the norm behind a
    clip factor, where only an upper bound is needed for soundness (clipping harder is safe).

    A float32 ``x`` with ``d <= UPPER_MAX_COLS`` is reduced in float32 (one pass, no float64 copy) and
    the result inflated by the a-priori bound on its rounding: squaring and summing ``d`` non-negative
    terms in ANY order gives ``s >= (1 - gamma_d) sum_j x_j^2 - d eta`` (Higham, Accuracy and Stability
    of Numerical Algorithms, Lemma 3.1 and eq. (4.4); ``gamma_d = d u / (1 - d u)``, ``u = 2^-24``,
    ``eta = 2^-149`` for squares that underflow), so ``(s + d eta) / (1 - gamma_d)`` is >= the exact
    sum.  The slack is at most ``(1 + gamma_d) / (1 - gamma_d) - 1 ~ 2 gamma_d`` relative on the sum
    (``gamma_d`` = 6.2e-5 at d = 1024): the norm is over-stated by at most about ``gamma_d``.  Rows
    whose float32 sum overflows, longer rows and other dtypes are summed exactly in float64
    (:func:`_row_sq64`)."""
    return rows_sq_upper([x])[0]


def rows_sq_upper(xs: list) -> torch.Tensor:
    """:func:`row_sq_upper` of several ``[n, d_j]`` tensors at once: ``[J, n]`` float64 (one float32
    reduction per tensor, the inflation and the overflow check on the stacked result: few small
    operations, which is what a millisecond step pays for)."""
    if not all(_bounded32(x) for x in xs):
        return torch.stack([row_sq_upper(x) if _bounded32(x) else _row_sq64(x) for x in xs])
    s = torch.stack([(x * x).sum(1) for x in xs]).to(torch.float64)
    add, scale = _inflation(tuple(x.shape[1] for x in xs), s.device)
    out = torch.addcmul(add, s, scale)          # add + s * scale, >= (s + d eta) / (1 - gamma_d)
    if not bool(torch.isfinite(s).all()):                 # a float32 sum overflowed: those rows exactly
        for j, x in enumerate(xs):
            big = ~torch.isfinite(s[j])
            if bool(big.any()):
                out[j, big] = _row_sq64(x[big])
    return out


@functools.lru_cache(maxsize=256)
def _inflation(widths: tuple, device) -> tuple:
    """``(add, scale)`` columns ``[J, 1]`` (float64) with ``add + s * scale >= (s + d eta) / (1 - gamma_d)``
    for each row length ``d`` of :func:`rows_sq_upper` -- the scale rounded UP, the added term too
    (kept per widths and device: a millisecond step should not rebuild two small tensors)."""
    scale = [math.nextafter(1.0 / (1.0 - d * _U32 / (1.0 - d * _U32)), math.inf) for d in widths]
    add = [math.nextafter(d * _ETA32 * s, math.inf) for d, s in zip(widths, scale)]
    return (torch.tensor(add, dtype=torch.float64, device=device)[:, None],
            torch.tensor(scale, dtype=torch.float64, device=device)[:, None])


def _bounded32(x: torch.Tensor) -> bool:
    """``x`` takes :func:`row_sq_upper`'s float32 reduction (float32 rows at most ``UPPER_MAX_COLS`` long)."""
    return x.dtype == torch.float32 and x.shape[1] <= UPPER_MAX_COLS


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    """``x`` and ``y`` are the same elements (the same tensor, or equal views of one storage)."""
    return x is y or (x.data_ptr() == y.data_ptr() and x.shape == y.shape and x.stride() == y.stride()
                      and x.dtype == y.dtype)


def _gram_cheaper(T: int, din: int, dout: int) -> bool:
    return T * (din + dout) < din * dout


def _block(terms):
    """``(norm2 [B] float64, sums(f) -> [out, in])`` of the per-record matrices ``sum_k G_k^T A_k``
    (``terms = [(G [B, T, out], A [B, T, in]), ...]``).  Gram products (float64) when cheaper --
    the sum is then formed from the signals; otherwise the per-record matrices are formed once in
    the working dtype, their norms taken in float64 and the SAME matrices summed, so that the norm
    is always that of the vector added."""
    G0, A0 = terms[0]
    B, T, din = A0.shape
    dout = G0.shape[2]
    if T == 1 and len(terms) == 1:
        gg, aa = rowdots64([(G0[:, 0], G0[:, 0]), (A0[:, 0], A0[:, 0])])
        n2 = gg * aa
        return n2, (lambda f: (G0[:, 0] * f[:, None]).T @ A0[:, 0])
    if _gram_cheaper(T, din, dout):
        n2 = torch.zeros(B, dtype=torch.float64, device=A0.device)
        step = max(1, _CAST_ELEMS // max(T * (din + dout) * len(terms), 1))   # records per float64 block
        for s in range(0, B, step):
            c = [(G[s:s + step].to(torch.float64), A[s:s + step].to(torch.float64)) for G, A in terms]
            for i, (Gi, Ai) in enumerate(c):
                for j in range(i, len(c)):
                    Gj, Aj = c[j]
                    v = ((Ai @ Aj.transpose(1, 2)) * (Gi @ Gj.transpose(1, 2))).sum((1, 2))
                    n2[s:s + step] += v if i == j else 2.0 * v
        return n2, (lambda f: sum(torch.einsum("bto,bti->oi", G * f[:, None, None], A) for G, A in terms))
    W = sum(torch.einsum("bto,bti->boi", G, A) for G, A in terms)            # [B, out, in]
    return _row_sq64(W.reshape(B, -1)), (lambda f: torch.einsum("b,boi->oi", f, W))


#: elements per float64 block of :func:`_row_sq64` and of the Gram products (the copies stay in cache)
_CAST_ELEMS = 1 << 18


def _row_sq64(W: torch.Tensor) -> torch.Tensor:
    """Per-row sums of squares of ``W [B, m]`` in float64 (``vector_norm`` with a float64 accumulator,
    squared: relative error ~1e-16), block by block for large ``W`` -- blocks of whole rows, or of
    columns when a row alone is larger than a block (each block's float64 copy stays in cache; a
    whole-matrix cast is memory-bound)."""
    B, m = W.shape
    if B * m <= _CAST_ELEMS:
        return torch.linalg.vector_norm(W, dim=1, dtype=torch.float64).square()
    if m <= _CAST_ELEMS:                      # many rows: blocks of whole rows
        rows = _CAST_ELEMS // m
        return torch.cat([torch.linalg.vector_norm(W[r:r + rows], dim=1, dtype=torch.float64).square()
                          for r in range(0, B, rows)])
    out = torch.zeros(B, dtype=torch.float64, device=W.device)       # few, very long rows: blocks of columns
    cols = max(1, _CAST_ELEMS // max(B, 1))
    for c in range(0, m, cols):
        out += torch.linalg.vector_norm(W[:, c:c + cols], dim=1, dtype=torch.float64).square()
    return out


def _conv_weight_grads(mod, a, g) -> torch.Tensor:
    """Per-sample weight gradients of a conv with ``groups == 1`` as ``[in, B, out, k0, k1]`` (record b's
    gradient is ``W[:, b]`` with its first two axes swapped), by ONE grouped convolution of the inputs
    with the back-propagated signals (the samples as groups; the layer's stride becomes the dilation
    and its dilation the stride) -- about 2x faster than unfolding the inputs into patches and
    multiplying on the papers' CNN shapes.  The result is a view of the convolution's output: it is
    measured and summed in that layout, never copied into a ``[B, out, in k]`` one."""
    pad = _conv_padding(mod)
    if isinstance(mod, nn.Conv1d):
        a, g = a.unsqueeze(2), g.unsqueeze(2)
        k, s, d, p = (1,) + tuple(mod.kernel_size), (1,) + tuple(mod.stride), (1,) + tuple(mod.dilation), (0,) + pad
    else:
        k, s, d, p = tuple(mod.kernel_size), tuple(mod.stride), tuple(mod.dilation), pad
    B, co = a.shape[0], g.shape[1]
    # give the convolution exactly the padded extent the k taps reach (reach <= extent + 2 padding: the
    # layer's own output used no more), so that its output is exactly k wide and contiguous (no slice,
    # no copy later): the far end is cropped, and where it still needs padding but less than the near
    # end, the input is padded explicitly (an asymmetric pad the convolution cannot do)
    reach = [d[j] * (k[j] - 1) + s[j] * (g.shape[2 + j] - 1) + 1 for j in range(2)]
    far = [reach[j] - a.shape[2 + j] - p[j] for j in range(2)]        # padding (< 0: crop) at the far end
    at = a.transpose(0, 1)
    if all(far[j] == p[j] or (p[j] == 0 and far[j] <= 0) for j in range(2)):
        at = at[:, :, :a.shape[2] + min(far[0], 0), :a.shape[3] + min(far[1], 0)]
    else:
        at, p = Fn.pad(at, [p[1], far[1], p[0], far[0]]), (0, 0)
    out = Fn.conv2d(at, g.reshape(B * co, 1, g.shape[2], g.shape[3]), stride=d, dilation=s, padding=p, groups=B)
    return out.unflatten(1, (B, co))


def _record_sq64(W: torch.Tensor) -> torch.Tensor:
    """Per-record sums of squares, in float64, of ``W [in, B, ...]`` (records on axis 1), cast block
    by block along axis 0 (each block's float64 copy stays in cache)."""
    dims = (0,) + tuple(range(2, W.dim()))
    step = max(1, _CAST_ELEMS // max(W[0].numel(), 1))
    out = torch.zeros(W.shape[1], dtype=torch.float64, device=W.device)
    for c in range(0, W.shape[0], step):
        out += torch.linalg.vector_norm(W[c:c + step], dim=dims, dtype=torch.float64).square()
    return out


def _conv_formed(mod, a1, g1, a0, g0):
    """A conv's ``(norm2, sums)`` from the formed per-sample weight gradients (gradient, or the
    difference ``dg a^T + g0 da^T``), measured and summed as the same matrices."""
    if a0 is None:
        W, bias_sig = _conv_weight_grads(mod, a1, g1), g1
    else:
        bias_sig = g1 - g0
        W = _conv_weight_grads(mod, a1, bias_sig)
        if not torch.equal(a1, a0):
            W = W + _conv_weight_grads(mod, a1 - a0, g0)
    B = W.shape[1]
    norm2 = _record_sq64(W)
    has_b = mod.bias is not None
    if has_b:
        bs = bias_sig.reshape(B, bias_sig.shape[1], -1).sum(2)
        norm2 = norm2 + rowdots64([(bs, bs)])[0]

    def sums(f):      # [in, B] x [in, B, out k0 k1] -> [in, out k0 k1]: a batched matrix product, no copy of W
        w = torch.matmul(f, W.reshape(W.shape[0], B, -1)).reshape(W.shape[0], *W.shape[2:]).transpose(0, 1)
        out = {"weight": w.reshape(mod.weight.shape)}
        if has_b:
            out["bias"] = (bs * f[:, None]).sum(0)
        return out
    return norm2, sums


def _norm_stats(mod, a):
    """The normalised input ``xhat`` of a LayerNorm / GroupNorm (what its weight multiplies): the
    layer's own normalisation without its affine part, one fused kernel."""
    if isinstance(mod, nn.LayerNorm):
        return Fn.layer_norm(a, mod.normalized_shape, eps=mod.eps)
    return Fn.group_norm(a, mod.num_groups, eps=mod.eps)


def _norm_per_sample(mod, a, g) -> dict:
    """Per-sample gradients ``{"weight": [B, ...], "bias": [B, ...]}`` of a LayerNorm / GroupNorm."""
    xhat = _norm_stats(mod, a)
    B = a.shape[0]
    out = {}
    if isinstance(mod, nn.LayerNorm):
        k = a.dim() - len(mod.normalized_shape)
        lead = tuple(range(1, k))
        out["weight"] = (g * xhat).sum(lead) if lead else g * xhat
        if mod.bias is not None:
            out["bias"] = g.sum(lead) if lead else g
    else:
        gx = (g * xhat).reshape(B, a.shape[1], -1).sum(2)
        out["weight"] = gx
        if mod.bias is not None:
            out["bias"] = g.reshape(B, a.shape[1], -1).sum(2)
    return out


def _embedding_parts(mod, a, g):
    B = a.shape[0]
    ids = a.reshape(B, -1)
    G = g.reshape(B, ids.shape[1], -1)
    if mod.padding_idx is not None:
        G = G * (ids != mod.padding_idx).unsqueeze(-1).to(G.dtype)
    return ids, G


def _embedding_sq(ids, G) -> torch.Tensor:
    same = (ids.unsqueeze(2) == ids.unsqueeze(1)).to(torch.float64)
    G64 = G.to(torch.float64)
    return (same * (G64 @ G64.transpose(1, 2))).sum((1, 2))


def _embedding_sum(mod, ids, G, f) -> torch.Tensor:
    D = G.shape[-1]
    return G.new_zeros(mod.num_embeddings, D).index_add_(0, ids.reshape(-1), (G * f[:, None, None]).reshape(-1, D))


# -- the path ----------------------------------------------------------------------------------
def _layer_terms(mod, a1, g1, a0=None, g0=None):
    """Per layer: ``(norm2 [B] float64, sums(f) -> {param: tensor})`` for the gradient (``a0`` None)
    or the gradient difference between the point of ``(a1, g1)`` and that of ``(a0, g0)``."""
    diff = a0 is not None
    if isinstance(mod, (nn.Conv1d, nn.Conv2d)) and mod.groups == 1:
        T, din = g1[0].numel() // g1.shape[1], mod.weight[0].numel()
        if not _gram_cheaper(T, din, mod.out_channels):      # formed: one grouped convolution, no unfold
            return _conv_formed(mod, a1, g1, a0, g0)
    if isinstance(mod, (nn.Linear, nn.Conv1d, nn.Conv2d)):
        b1 = _linear_blocks(mod, a1, g1)
        if diff:
            b0 = _linear_blocks(mod, a0, g0)
            same_in = torch.equal(a1, a0)
            blocks = []
            for (A1, G1), (A0, G0) in zip(b1, b0):
                dG = G1 - G0
                blocks.append([(dG, A1)] if same_in else [(dG, A1), (G0, A1 - A0)])
        else:
            blocks = [[(G, A)] for A, G in b1]
        parts = [_block(t) for t in blocks]
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
    if isinstance(mod, nn.Embedding):
        ids, G = _embedding_parts(mod, a1, g1)
        if diff:
            G = G - _embedding_parts(mod, a0, g0)[1]
        return _embedding_sq(ids, G), (lambda f: {"weight": _embedding_sum(mod, ids, G, f)})
    per = _norm_per_sample(mod, a1, g1)
    if diff:
        p0 = _norm_per_sample(mod, a0, g0)
        per = {k: v - p0[k] for k, v in per.items()}
    norm2 = sum(_row_sq64(v.reshape(v.shape[0], -1)) for v in per.values())
    return norm2, (lambda f: {k: torch.einsum("b,b...->...", f, v) for k, v in per.items()})


def _signals_of(cache, model, params, loss_fn, x, y, s, e):
    if cache is None:
        return _signals(model, params, loss_fn, x[s:e], y[s:e])
    return cache.signals("layers", model, loss_fn, x, y, s, e, params,
                         lambda: _signals(model, params, loss_fn, x[s:e], y[s:e]))


def _run(model, loss_fn, x, y, c, params, prev, chunk_size, weights, stabilizer, factors_of, cache=None):
    total = {k: torch.zeros_like(v) for k, v in params.items()}
    all_norms = []
    for s in range(0, x.shape[0], chunk_size):
        e = min(s + chunk_size, x.shape[0])
        xs = x[s:e]
        sig0 = _signals_of(cache, model, prev, loss_fn, x, y, s, e) if prev is not None else None
        sig1 = _signals_of(cache, model, params, loss_fn, x, y, s, e)
        if sig0 is None:
            sig0 = [None] * len(sig1)
        terms = []
        norm2 = torch.zeros(xs.shape[0], dtype=torch.float64, device=xs.device)
        for r1, r0 in zip(sig1, sig0):
            name, mod, a1, g1 = r1
            n2, sums = _layer_terms(mod, a1, g1, *((r0[2], r0[3]) if r0 is not None else ()))
            norm2 = norm2 + n2
            terms.append((name, sums))
        norms = torch.sqrt(torch.clamp(norm2, min=0.0))
        f = factors_of(norms, c, stabilizer)
        if weights is not None:
            f = f * weights[s:s + chunk_size].to(f.dtype)
        fw = f.to(next(iter(params.values())).dtype)
        for name, sums in terms:
            for p, v in sums(fw).items():
                total[_key(name, p)] += v
        all_norms.append(norms)
    return total, torch.cat(all_norms)


def layers_clipped_sum(model, loss_fn, x, y, c, params, chunk_size, weights, stabilizer, factors_of, cache=None):
    """``(sum_i w_i clip(grad_i, C), norms)`` by the layers path (see the module text)."""
    return _run(model, loss_fn, x, y, c, params, None, chunk_size, weights, stabilizer, factors_of, cache)


def layers_clipped_diff_sum(model, loss_fn, x, y, c, params, prev, chunk_size, weights, factors_of, cache=None):
    """The same for ``grad_i(params) - grad_i(prev)``."""
    return _run(model, loss_fn, x, y, c, params, prev, chunk_size, weights, None, factors_of, cache)
