"""Per-layer clipping (Opacus's ``clipping="per_layer"``, ``max_grad_norm`` a list): each record's
gradient of each trained parameter ``k`` is clipped to its own bound ``C_k`` (McMahan et al.,
ICLR 2018, Sec. 3).

The record's whole clipped vector then has norm at most ``||(C_1, ..., C_K)||_2``: that norm is the
sensitivity of the clipped sum, owned by the release's spec
(:class:`dpcalib.mechanisms.PerLayerClip`, which ``DPSGD.sensitivity`` and ``std`` take as that
number), so the noise is ``z * ||C||`` and the accountant sees ``z`` -- as Opacus's per-layer
optimizer adds it.

:class:`PerLayerModule` runs the user's module with its trained parameters detached
(``functional_call``) and keeps the gradient of the output; the step's clipped sum forms each
record's gradient by ``vmap`` over the records of the linearised loss ``<f(x_i), g_i>`` (its
gradient at this point is the record's gradient), measures each parameter's part in float64,
clips it and sums.  It serves the same calls of :class:`~.optimizer.DPOptimizer` as
:class:`~.module.PrivateModule` (``captures``, ``clear``, ``named``, ``inner``).  A model called with
one positional input, the batch on dimension 0.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ...accountant.validation import InputError
from ...mechanisms import PerLayerClip
from ..clipping.paths import clip_factors

__all__ = ["PerLayerModule"]


class _Capture:
    """One physical batch: the input, the detached parameters, and the gradient of the output."""

    def __init__(self, owner: "PerLayerModule", x, params: dict):
        self.owner, self.x, self.params = owner, x, params
        self.g = None
        self.target = None

    @property
    def rows(self) -> int:
        return int(self.x.shape[0])

    def complete(self) -> bool:
        return self.g is not None or self.rows == 0

    def _add(self, g):
        self.g = g if self.g is None else self.g + g

    def per_record(self) -> dict:
        """Each record's gradient of every trained parameter (float64), ``{name: [B, ...]}``."""
        o = self.owner

        def one(p, xi, gi):
            out = functional_call(o.inner, p, (xi.unsqueeze(0),))
            return (out * gi.unsqueeze(0)).sum()

        per = vmap(grad(one), in_dims=(None, 0, 0))(self.params, self.x, self.g)
        scale = float(self.rows) if o.loss_reduction == "mean" else 1.0
        return {k: v.to(torch.float64) * scale for k, v in per.items()}

    def clipped_sum(self, c: float, stabilizer=None) -> torch.Tensor:
        """``sum_i (clip(g_i^1, C_1 s), ..., clip(g_i^K, C_K s))`` flat, with ``s = c / ||C||`` (a clip
        scheduler's change of the whole vector; ``c = inf``: unclipped)."""
        if stabilizer is not None:
            raise InputError("clipping='per_layer' is not allowed with automatic clipping (a stabilizer).")
        like = next(iter(self.params.values()))
        if self.rows == 0:
            return like.new_zeros(sum(p.numel() for p in self.params.values()))
        per = self.per_record()
        bounds = self.owner.bounds
        s = float(c) / float(bounds)
        parts = []
        for (k, p), b in zip(self.owner.named, bounds):
            v = per[k].reshape(self.rows, -1)
            if s == float("inf"):
                parts.append(v.sum(0))
                continue
            f = clip_factors(torch.linalg.vector_norm(v, dim=1), b * s)
            parts.append((v * f[:, None]).sum(0))
        return torch.cat(parts).to(like.dtype)

    def grad_sum(self) -> torch.Tensor:
        return self.clipped_sum(float("inf"))

    def clipped_diff_sum(self, c, prev, criterion):          # pragma: no cover - refused at make_private
        raise InputError("clipping='per_layer' is not allowed here: it serves DP-SGD only.")


class PerLayerModule(nn.Module):
    """``module`` wrapped for per-layer clipping at ``bounds`` (one per trained parameter)."""

    def __init__(self, module: nn.Module, bounds, *, loss_reduction: str = "mean"):
        super().__init__()
        self.named = [(k, p) for k, p in module.named_parameters() if p.requires_grad]
        if not self.named:
            raise InputError("module is not allowed: none of its parameters requires grad (nothing to train).")
        if isinstance(bounds, (int, float)) or not hasattr(bounds, "__len__"):
            raise InputError(f"max_grad_norm={bounds!r} is not allowed with clipping='per_layer': expected a list of "
                             f"{len(self.named)} bounds, one per trained parameter.")
        if len(bounds) != len(self.named):
            raise InputError(f"max_grad_norm is not allowed with clipping='per_layer': {len(bounds)} bounds for "
                             f"{len(self.named)} trained parameters (one each, in module.parameters() order).")
        self.bounds = PerLayerClip(bounds)
        self._module, self.loss_reduction = module, loss_reduction
        self.captures: list = []

    @property
    def inner(self) -> nn.Module:
        return self._module

    def clear(self) -> None:
        self.captures = []

    def forward(self, *args, **kwargs):
        if not (self.training and torch.is_grad_enabled()):
            return self._module(*args, **kwargs)
        if len(args) != 1 or kwargs or not isinstance(args[0], torch.Tensor):
            raise InputError("the module's input is not allowed with clipping='per_layer': expected one positional "
                             "tensor, the batch on dimension 0.")
        x = args[0]
        cap = _Capture(self, x.detach() if x.is_floating_point() else x, {k: p.detach() for k, p in self.named})
        self.captures.append(cap)
        out = functional_call(self._module, cap.params, (x,))
        out = out + out.new_zeros((), requires_grad=True)
        out.register_hook(cap._add)
        return out

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("_module"), name)
