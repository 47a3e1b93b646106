"""The layers path's rule for convolutions.  ``nn.Conv1d`` / ``nn.Conv2d`` (any stride, zero padding,
dilation, groups): the Linear rule with ``A`` the unfolded input patches (``T`` = output positions), per
group; or, for ``groups == 1`` where forming the per-record weight gradients is cheaper than the
Gram products, ONE grouped convolution of the inputs with the back-propagated signals
(:func:`conv_weight_grads`), measured and summed as the same matrices.  ``nn.Conv3d``, the transposed
convolutions (1-d, 2-d, 3-d) and every padding mode (reflect, replicate, circular, uneven 'same'): the
per-record weight gradients formed by ONE weight-gradient convolution with the records folded into the
groups (:func:`conv_backward_grads`), measured and summed as the same tensors.  Records are on dim 0 of
a convolution's input whatever the model's ``batch_first``."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as Fn

from .linear import outer_terms, wants
from .numerics import formed_terms, gram_cheaper, in_work, record_sq64, rowdots64
from .rules import ALL, Rule, register_rule

__all__ = ["conv_weight_grads"]

_TRANSPOSED = nn.modules.conv._ConvTransposeNd

#: a formed convolution takes the weight-gradient convolution with the records folded into the groups where its
#: per-record weight has at most this many elements per output position (measured on one CPU thread, 2026-12:
#: 0.2-0.8x the grouped forward convolution's time at 576 and fewer, 1.2-1.4x at 2304 and more)
FOLDED_PER_POSITION = 1500


def conv_padding(m):
    """The conv's numeric padding, or None when it has none we unfold (a non-zero mode, uneven 'same').

    Args:
        m: a convolution module (``nn.Conv1d`` / ``nn.Conv2d`` / ``nn.Conv3d``).

    Returns:
        A tuple of per-dimension paddings (``'valid'``: zeros; an even ``'same'``: half the dilated kernel
        extent), or None for a padding mode other than ``"zeros"`` or a ``'same'`` that pads unevenly.
    """
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


def conv_blocks(mod, a, g):
    """``[(A [B, T, in k], G [B, T, out])]``: the unfolded input patches and the signals, one block per group.

    Args:
        mod: an ``nn.Conv1d`` or ``nn.Conv2d`` with a padding :func:`conv_padding` can express.
        a: its input ``[B, C_in, ...]``.
        g: the gradient of its output ``[B, C_out, ...]``.

    Returns:
        A list of ``mod.groups`` pairs ``(A, G)``, ``T`` the number of output positions.
    """
    B = a.shape[0]
    pad = conv_padding(mod)
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


def conv_weight_grads(mod, a, g) -> torch.Tensor:
    """Per-sample weight gradients of a conv with ``groups == 1`` as ``[in, B, out, k0, k1]``.

    Record b's gradient is ``W[:, b]`` with its first two axes swapped, computed by ONE grouped convolution
    of the inputs with the back-propagated signals (the samples as groups; the layer's stride becomes the
    dilation and its dilation the stride) -- about 2x faster than unfolding the inputs into patches and
    multiplying on the papers' CNN shapes.  The result is a view of the convolution's output: it is
    measured and summed in that layout, never copied into a ``[B, out, in k]`` one.

    Args:
        mod: an ``nn.Conv1d`` or ``nn.Conv2d`` with ``groups == 1`` and a padding :func:`conv_padding` can express.
        a: its input ``[B, C_in, ...]``.
        g: the gradient of its output ``[B, C_out, ...]``.

    Returns:
        The per-sample weight gradients, ``[C_in, B, C_out, k0, k1]`` (a 1-d conv: ``k0 == 1``).
    """
    pad = conv_padding(mod)
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


def conv_formed(mod, a1, g1, a0, g0, want=ALL):
    """A conv's ``(norm2, sums)`` from the formed per-sample weight gradients.

    The gradient, or the difference ``dg a^T + g0 da^T``, measured and summed as the same matrices.

    Args:
        mod: an ``nn.Conv1d`` or ``nn.Conv2d`` with ``groups == 1``.
        a1: its input at the current point, records on dim 0.
        g1: the gradient of its output at the current point.
        a0: its input at the other point; None: the gradient at the current point, not a difference.
        g0: the gradient of its output at the other point (given with ``a0``).
        want: the module's parameter names to include, or ``ALL``.

    Returns:
        ``(norm2, sums)``: the records' squared norms ``[B]`` (float64) and ``sums(f)``, the per-record
        gradients weighted by ``f [B]`` and summed, ``{"weight": ..., "bias": ...}``.
    """
    bias_sig = g1 if a0 is None else g1 - g0
    B = g1.shape[0]
    norm2 = torch.zeros(B, dtype=torch.float64, device=g1.device)
    W = None
    if wants(mod, "weight", want):
        W = conv_weight_grads(mod, a1, bias_sig)
        if a0 is not None and not torch.equal(a1, a0):
            W = W + conv_weight_grads(mod, a1 - a0, g0)
        norm2 = norm2 + record_sq64(W)
    has_b = wants(mod, "bias", want)
    if has_b:
        bs = bias_sig.reshape(B, bias_sig.shape[1], -1).sum(2)
        norm2 = norm2 + rowdots64([(bs, bs)])[0]

    def sums(f):      # [in, B] x [in, B, out k0 k1] -> [in, out k0 k1]: a batched matrix product, no copy of W
        out = {}
        if W is not None:
            w = torch.matmul(f.to(W.dtype), W.reshape(W.shape[0], B, -1)).reshape(W.shape[0], *W.shape[2:]).transpose(0, 1)
            out["weight"] = w.reshape(mod.weight.shape)
        if has_b:
            out["bias"] = (bs * f.to(bs.dtype)[:, None]).sum(0)
        return out
    return norm2, sums


def _explicit_padding(mod, a):
    """``(a padded as the layer pads it, numeric padding left to the convolution)``: a padding mode other than
    zeros, or an uneven 'same', is applied to the input explicitly (as the layer's own forward does)."""
    if isinstance(mod, _TRANSPOSED):
        return a, tuple(mod.padding)
    if mod.padding_mode != "zeros":
        return Fn.pad(a, mod._reversed_padding_repeated_twice, mode=mod.padding_mode), (0,) * len(mod.kernel_size)
    pad = conv_padding(mod)
    if pad is not None:
        return a, pad
    lr = []                                    # 'same' with an odd total: torch pads the extra one at the far end
    for k, d in zip(reversed(mod.kernel_size), reversed(mod.dilation)):
        total = d * (k - 1)
        lr += [total // 2, total - total // 2]
    return Fn.pad(a, lr), (0,) * len(mod.kernel_size)


def conv_backward_grads(mod, a, g) -> torch.Tensor:
    """Per-record weight gradients ``[B, *weight.shape]`` of any convolution, by ONE weight-gradient convolution.

    Any convolution: 1-3 d, transposed, groups, every padding mode.  The records are folded into the groups
    (``B * groups`` groups of one batch element: no record's gradient sees another's signals).

    Args:
        mod: a convolution or transposed convolution module.
        a: its input, records on dim 0.
        g: the gradient of its output, records on dim 0.

    Returns:
        The records' weight gradients ``[B, *mod.weight.shape]``, in the work dtype.
    """
    a, pad = _explicit_padding(mod, a)
    a, g = in_work(a, g)
    B, w = a.shape[0], mod.weight
    wf = w.detach().to(a.dtype).expand(B, *w.shape).reshape(B * w.shape[0], *w.shape[1:])
    _, gw, _ = torch.ops.aten.convolution_backward(
        g.reshape(1, -1, *g.shape[2:]), a.reshape(1, -1, *a.shape[2:]), wf, None, list(mod.stride), list(pad),
        list(mod.dilation), isinstance(mod, _TRANSPOSED), list(getattr(mod, "output_padding", (0,) * len(pad))),
        mod.groups * B, [False, True, False])
    return gw.view(B, *w.shape)


def _per_record(mod, a, g, want=ALL) -> dict:
    """:attr:`.rules.Rule.per_record` of a convolution: ``{"weight": [B, *weight.shape], "bias": [B, out]}``."""
    out = {}
    if wants(mod, "weight", want):
        out["weight"] = conv_backward_grads(mod, a, g)
    if wants(mod, "bias", want):
        (gw,) = in_work(g)
        out["bias"] = gw.reshape(g.shape[0], g.shape[1], -1).sum(2)
    return out


def _backward_terms(mod, a1, g1, a0=None, g0=None, want=ALL):
    """``(norm2, sums)`` from :func:`_per_record` (the difference: of the two points' records' gradients)."""
    return formed_terms(_per_record, mod, a1, g1, a0, g0, want)


def _terms(mod, a1, g1, a0=None, g0=None, want=ALL):
    """:attr:`.rules.Rule.terms` of a convolution: a formed rule (:func:`_backward_terms`, :func:`conv_formed`) or
    the Linear rule's blocks of unfolded patches (:func:`conv_blocks`), whichever the layer and its sizes allow."""
    if isinstance(mod, (nn.Conv3d, _TRANSPOSED)) or conv_padding(mod) is None:
        return _backward_terms(mod, a1, g1, a0, g0, want)
    a1, g1, a0, g0 = in_work(a1, g1, a0, g0)
    if mod.groups == 1:
        T, din = g1[0].numel() // g1.shape[1], mod.weight[0].numel()
        if not gram_cheaper(T, din, mod.out_channels):      # formed: one convolution, no unfold
            if din * mod.out_channels <= FOLDED_PER_POSITION * T:
                return _backward_terms(mod, a1, g1, a0, g0, want)
            return conv_formed(mod, a1, g1, a0, g0, want)
    b0 = conv_blocks(mod, a0, g0) if a0 is not None else None
    return outer_terms(mod, conv_blocks(mod, a1, g1), b0, a0 is not None and torch.equal(a1, a0), want)


def _record_dim(mod) -> int:
    return 0


RULE = register_rule(Rule((nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                           nn.ConvTranspose3d), _terms, per_record=_per_record, record_dim=_record_dim))
