"""The user's module, wrapped so that its own forward and backward leave each record's contribution.

:class:`PrivateModule` runs the user's module on the batch as usual, but with the parameters
detached and every module that owns parameters hooked (the layers path of
:mod:`dpcalib.optim.clipping.layers`): the forward records each such module's input ``a``, and the
backward of the user's loss leaves the gradient ``g`` of its output.  No parameter gradient is
formed by that backward (the parameters are not in the graph: each hooked output is joined to it
by adding a zero leaf), so the user's ``loss.backward()`` costs the back-propagation of the
signals only.  The private step (:mod:`.optimizer`) then asks the batch's :class:`Capture` for the
terms its kernel needs -- clipped sums, the unclipped sum, clipped differences against the
previous point -- from the layer rules of :mod:`dpcalib.optim.clipping.rules`, with the norm of
each record computed in float64 from exactly the vector that is summed (the paths' guarantee).

The loss must be a sum or a mean of per-record terms (``loss_reduction``): with ``"mean"`` the
signals are multiplied by the batch's row count, so that a record's term is its own gradient.
A model with a layer no rule covers, or a parameter used twice (tied weights, a module called
twice), falls back to vmap over a linearised loss ``<f(x_i), g_i>`` whose gradient is the record's
gradient at this point (one :class:`~dpcalib.optim.clipping.ClippingFallbackWarning`).  BatchNorm
mixes the records of a batch and is refused (replace it with GroupNorm, as with Opacus).
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn
from torch.func import functional_call

from ...accountant.validation import InputError
from ..clipping.layers import SharedModule, add_sums, check_single_use, signal_terms, why_not
from ..clipping.paths import (ClippingFallbackWarning, clip_factors, clipped_grad_diff_sum, clipped_grad_sum,
                              ghost_clipped_diff_sum, ghost_clipped_sum, supports_ghost)
from ..clipping.per_example import flat_of
from ..clipping.precision import exact_float32, narrowed, widened, widened_buffers, widened_params

__all__ = ["PrivateModule", "Capture", "REDUCTIONS"]

REDUCTIONS = ("mean", "sum")
_MIXING = (nn.modules.batchnorm._BatchNorm, nn.SyncBatchNorm)


def _linear_loss(out, g):
    """``<f(x_i), g_i>`` per record: its gradient at this point is ``J_i^T g_i``, the record's gradient."""
    return (out * g).reshape(out.shape[0], -1).sum(1)


class Capture:
    """One physical batch as the user's forward and backward left it: the input ``x``, each hooked
    module's ``(name, module, a, output)`` and, after the backward, its ``g``; the loss target when
    the engine's criterion saw it (DP-SRM's previous point needs it)."""

    def __init__(self, owner: "PrivateModule", x, args, kwargs, params: dict):
        self.owner, self.x, self.args, self.kwargs, self.params = owner, x, args, kwargs, params
        self.records: list = []          # fast path: (name, module, a, output)
        self.grads: dict = {}            # index in records (or "out") -> gradient of that output
        self.out = None                  # fallback: the module's output
        self.target = None
        self._terms = None

    @property
    def rows(self) -> int:
        return int(self.x.shape[0])

    def scale(self) -> float:
        return float(self.rows) if self.owner.loss_reduction == "mean" else 1.0

    def complete(self) -> bool:
        return bool(self.grads) or self.rows == 0

    def signals(self) -> list:
        """``[(name, module, a, g)]`` as the backward left them: ``g`` is a record's own gradient
        divided by :meth:`scale` (a mean-reduced loss); the terms multiply the norms and the
        factors by it instead of every signal."""
        return [(name, mod, a, (self.grads[i] if i in self.grads else torch.zeros_like(z)))
                for i, (name, mod, a, z) in enumerate(self.records)]

    def _ghost(self, signals):
        """The signals as the ghost numerics of an MLP take them (``nn.Sequential`` of Linear layers and
        elementwise activations on rows: the reference optimizers' path for it), or None."""
        if not self.owner.ghost or any(a.dim() != 2 for _, _, a, _ in signals):
            return None
        return [(name, a, g, mod.bias is not None) for name, mod, a, g in signals]

    @exact_float32()
    def _sum(self, norm2, terms, c, stabilizer=None, like=None) -> torch.Tensor:
        """``sum_i f_i v_i`` with ``v_i = scale * u_i`` the record's vector (``u_i`` from the signals as
        left), ``f_i`` its clip factor from ``||v_i|| = scale ||u_i||`` (float64); summed in the dtypes
        of ``like`` (default: the parameters), returned in the parameters'."""
        like = self.params if like is None else like
        s = self.scale()
        f = clip_factors(torch.sqrt(torch.clamp(norm2, min=0.0)) * s, c, stabilizer) * s
        total = {k: torch.zeros_like(v) for k, v in like.items()}
        add_sums(total, terms, f.to(next(iter(like.values())).dtype))
        return flat_of(narrowed(total, self.params), self.params)

    def _zeros(self) -> torch.Tensor:
        p = self.params
        return next(iter(p.values())).new_zeros(sum(t.numel() for t in p.values()))

    # -- the terms a kernel asks for ---------------------------------------------------------------
    def clipped_sum(self, c: float, stabilizer=None) -> torch.Tensor:
        if self.rows == 0:
            return self._zeros()
        if self.owner.fast:
            sig = self.signals()
            ghost = self._ghost(sig)
            if ghost is not None:
                sums, _ = ghost_clipped_sum(ghost, c, None, stabilizer, self.scale())
                return flat_of(sums, self.params)
            if self._terms is None:
                self._terms = signal_terms(sig)
            return self._sum(*self._terms, c, stabilizer)
        sums, _ = clipped_grad_sum(self.owner.inner, _linear_loss, self.x, self.out_grad(), c, self.params,
                                   method="vmap", stabilizer=stabilizer)
        return flat_of(sums, self.params)

    def grad_sum(self) -> torch.Tensor:
        return self.clipped_sum(math.inf)

    def clipped_diff_sum(self, c: float, prev: dict, criterion) -> torch.Tensor:
        """Records' clipped gradient differences between this point and ``prev`` on this batch (the
        loss at ``prev`` by ``criterion`` on the recorded target)."""
        if self.rows == 0:
            return self._zeros()
        if self.target is None:
            raise InputError("criterion is required: the gradient at the previous point needs the batch's loss "
                             "target; call the criterion that make_private returned (not the original one).")
        o = self.owner
        if o.fast:
            # both points' signals in float64 (dpcalib.optim.clipping.precision: the batch's own pass,
            # in the model's dtype, is used only where that is float64 already)
            p1, p0 = widened_params(self.params), widened_params(prev)
            x, target = widened(self.x), widened(self.target)
            args = tuple(widened(a) for a in self.args)
            kwargs = {k: widened(v) for k, v in self.kwargs.items()}
            sig0 = o.signals_at(p0, x, target, criterion, args, kwargs)
            own = all(v.dtype == p1[k].dtype for k, v in self.params.items())
            sig1 = self.signals() if own else o.signals_at(p1, x, target, criterion, args, kwargs)
            g1, g0 = self._ghost(sig1), self._ghost(sig0)
            if g1 is not None and g0 is not None:
                sums, _ = ghost_clipped_diff_sum(g1, g0, c, None, self.scale())
                return flat_of(narrowed(sums, self.params), self.params)
            return self._sum(*signal_terms(sig1, sig0), c, like=p1)
        per_record = _per_record(criterion, o.loss_reduction)
        sums, _ = clipped_grad_diff_sum(o.inner, per_record, self.x, self.target, c, self.params, prev, method="vmap")
        return flat_of(sums, self.params)

    def out_grad(self) -> torch.Tensor:
        return self.grads.get("out", torch.zeros_like(self.out)) * self.scale()


def _per_record(criterion, reduction):
    """The per-record loss of a reduced criterion, as vmap calls it (a batch of one record)."""
    def loss(out, y):
        v = criterion(out, y)
        return v.reshape(-1).expand(out.shape[0]) * (out.shape[0] if reduction == "mean" else 1.0)
    return loss


class PrivateModule(nn.Module):
    """``module`` wrapped for private training (see the module text).  In ``eval()`` mode, or
    under ``torch.no_grad()``, the forward is the plain module's and records nothing."""

    def __init__(self, module: nn.Module, *, loss_reduction: str = "mean"):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise InputError(f"module={module!r} is not allowed: expected a torch.nn.Module.")
        if isinstance(module, PrivateModule):
            raise InputError("module is not allowed: it is already a PrivateModule (make_private was called on it).")
        if loss_reduction not in REDUCTIONS:
            raise InputError(f"loss_reduction={loss_reduction!r} is not allowed: expected 'mean' or 'sum'.")
        mixing = [n or "<model>" for n, m in module.named_modules() if isinstance(m, _MIXING)]
        if mixing:
            raise InputError(f"module is not allowed: {', '.join(mixing)} (BatchNorm) mixes the records of a batch, so "
                             "no record has its own gradient; replace it with GroupNorm (or LayerNorm).")
        if next(module.parameters(), None) is None:
            raise InputError("module is not allowed: it has no parameters.")
        #: the parameters trained (``requires_grad``) by name, in the order of every flat vector of the run;
        #: frozen ones are constants of the model (fine-tuning), outside every record's gradient
        self.named = [(k, p) for k, p in module.named_parameters() if p.requires_grad]
        if not self.named:
            raise InputError("module is not allowed: none of its parameters requires grad (nothing to train).")
        self._module = module
        self.loss_reduction = loss_reduction
        self._owners, self.unsupported = [], []
        for name, m in module.named_modules():
            own = [p.requires_grad for _, p in m.named_parameters(recurse=False)]
            if not any(own):
                continue
            why = why_not(m) or (None if all(own) else "some of its parameters are frozen")
            if why is not None:
                self.unsupported.append(f"{name or '<model>'} ({type(m).__name__}): {why}")
            self._owners.append((name, m))
        self.fast = not self.unsupported           # decided again at the first forward (parameters used once)
        self.ghost = supports_ghost(module)
        self._checked = False
        self.captures: list[Capture] = []
        self._rec = None                  # (records, grads) while a forward is recorded
        self._handles = [] if self.unsupported else [
            m.register_forward_hook(lambda mod, inp, out, name=name: self._record(name, mod, inp, out))
            for name, m in self._owners]
        if self.unsupported:
            warnings.warn(f"per-sample clipping of {type(module).__name__} falls back to vmap (slower, more memory): "
                          f"no fast rule for {'; '.join(self.unsupported)}", ClippingFallbackWarning, stacklevel=3)

    @property
    def inner(self) -> nn.Module:
        """The user's module (``_module`` in Opacus)."""
        return self._module

    def params(self) -> dict:
        return {k: p.detach() for k, p in self.named}

    def clear(self) -> None:
        self.captures = []

    def forward(self, *args, **kwargs):
        if not (self.training and torch.is_grad_enabled()):
            return self._module(*args, **kwargs)
        if not args or not isinstance(args[0], torch.Tensor):
            got = type(args[0]).__name__ if args else "no positional input"
            raise InputError(f"the module's input ({got}) is not allowed in training: its first positional input must "
                             "be the batch, a tensor whose first dimension indexes the records.")
        x, args = args[0], args[1:]
        params = self.params()
        if self.fast and not self._checked:
            self._checked = True
            try:
                check_single_use(self._module, params, x, args, kwargs)
            except SharedModule as exc:
                self.fast = False
                warnings.warn(f"per-sample clipping of {type(self._module).__name__} falls back to vmap: a parameter "
                              f"reaches the loss more than once ({exc}: tied weights or a module called twice)",
                              ClippingFallbackWarning, stacklevel=2)
        cap = Capture(self, x.detach() if x.is_floating_point() else x, args, kwargs, params)
        self.captures.append(cap)
        if self.fast:
            out = self._hooked(None, x, args, kwargs, cap.records, cap.grads)
        else:
            out = functional_call(self._module, params, (x,) + tuple(args), kwargs)
            out = out + out.new_zeros((), requires_grad=True)
            cap.out = out.detach()
            out.register_hook(lambda g: cap.grads.__setitem__("out", g if "out" not in cap.grads else cap.grads["out"] + g))
        return out

    def _record(self, name, mod, inp, out):
        """The forward hook of every owner of parameters: while a forward is recorded, its input and
        its output -- joined to the graph by a zero leaf where it is not in it (the parameters are
        not), so that the backward reaches it -- and, in the backward, its output's gradient."""
        rec = self._rec
        if rec is None:
            return None
        records, grads = rec
        # an output already in the graph (downstream of a recorded layer) is hooked as it is; only one that
        # is not (the first layer's) is joined to it, by adding a zero leaf
        z = out if out.requires_grad else out + out.new_zeros((), requires_grad=True)
        i = len(records)
        records.append((name, mod, inp[0].detach(), z))
        z.register_hook(lambda g, i=i: grads.__setitem__(i, g if i not in grads else grads[i] + g))
        return z

    def _hooked(self, params, x, args, kwargs, records, grads):
        """A forward with every owner of parameters recorded (at ``params``, or at the module's own
        parameters, taken out of the graph for the call, when ``params`` is None)."""
        self._rec = (records, grads)
        try:
            if params is not None:
                buffers = widened_buffers(self._module, next(iter(params.values())).dtype)
                return functional_call(self._module, (params, buffers), (x,) + tuple(args), kwargs)
            own = [p for _, p in self.named if p.requires_grad]
            for p in own:
                p.requires_grad_(False)
            try:
                return self._module(x, *args, **kwargs)
            finally:
                for p in own:
                    p.requires_grad_(True)
        finally:
            self._rec = None

    def signals_at(self, params: dict, x, target, criterion, args=(), kwargs=None) -> list:
        """``[(name, module, a, g)]`` of the batch at another point ``params`` (DP-SRM's previous
        iterate): a forward and the criterion's backward (the same reduction as the batch's own)."""
        records, grads = [], {}
        with torch.enable_grad():
            out = self._hooked(params, x, args, kwargs or {}, records, grads)
            loss = criterion(out, target)
            gs = torch.autograd.grad(loss, [r[3] for r in records], allow_unused=True)
        return [(name, mod, a, torch.zeros_like(z) if g is None else g) for (name, mod, a, z), g in zip(records, gs)]

    # the user's module's own names stay reachable (model.fc1, model.state_dict() keys of the wrapped module)
    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("_module"), name)
