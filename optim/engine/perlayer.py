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
one positional input, the batch on dimension 0 (``batch_first=False``: on dimension 1, ``[T, B, ...]``).

Where the records are in the output is found, not assumed: on the first batch of two records or more,
each record is also run alone (``vmap``), and the output's record dimension is the one dimension ``d``
where the batch's output has ``B`` rows, each record's own output one, and every other size agrees; each
record's slice of the batch's output along ``d`` must then equal its own output -- both computed in float64
where the model runs in it, to ``ALONE_RTOL`` of the values (else in its own dtype, with a warning, to 1e-4).
So a model that mixes records (attention across the declared record dimension, a mean over the batch, however
weak) or whose output has no such single dimension is refused in one line: a record's gradient of the
batch's loss would then carry other records' data, and one record could move every clipped term.  Every
later batch is checked to have ``B`` rows on ``d``, and the comparison runs again on the batches the
:class:`~dpcalib.optim.clipping.records.ProbeSchedule` names (larger than every batch compared so far, the
2^j-th); a refusal stands for the rest of the run.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

import warnings

from ...accountant.validation import InputError
from ..clipping.paths import clip_factors
from ..clipping.precision import widened, widened_buffers
from ..clipping.records import ProbeSchedule
from .capture import refuse_accumulation
from .module import per_layer_bounds

__all__ = ["PerLayerModule", "ALONE_RTOL"]

#: a record's slice of the batch's output (float64) may differ from its own output by this, relative to the
#: output's largest magnitude: the batched and the one-record kernels round differently (~1e-16), a mean over
#: the batch weighted 1e-6 moves it by ~1e-7
ALONE_RTOL = 1e-10


def _where(m) -> str:
    return f"dimension {m.dim} (batch_first={m.batch_first})"


class _Capture:
    """One physical batch: the input, the detached parameters, and the gradient of the output."""

    def __init__(self, owner: "PerLayerModule", x, params: dict):
        self.owner, self.x, self.params = owner, x, params
        self.g = None
        self.target = None
        self.out_dim = 0                    # the output's record dimension (set by the forward)

    @property
    def rows(self) -> int:
        return int(self.x.shape[self.owner.dim])

    def complete(self) -> bool:
        return self.g is not None or self.rows == 0

    def _add(self, g):
        self.g = g if self.g is None else self.g + g

    def per_record(self) -> dict:
        """Each record's gradient of every trained parameter (float64), ``{name: [B, ...]}``."""
        o = self.owner

        d_in, d_out = o.dim, self.out_dim

        def one(p, xi, gi):
            out = functional_call(o.inner, p, (xi.unsqueeze(d_in),))
            return (out * gi.unsqueeze(d_out)).sum()

        per = vmap(grad(one), in_dims=(None, d_in, d_out))(self.params, self.x, self.g)
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
    """``module`` wrapped for per-layer clipping at ``bounds`` (one per trained parameter).

    Args:
        module: the user's module.
        bounds: the clip bounds, one per trained parameter (in ``module.parameters()`` order).
        loss_reduction: ``"mean"`` or ``"sum"``, the criterion's reduction.
        batch_first: records on dimension 0 of the input (else 1).

    Raises:
        InputError: if no parameter requires grad, or ``bounds`` is not a list of one bound per trained
            parameter.
    """

    def __init__(self, module: nn.Module, bounds, *, loss_reduction: str = "mean", batch_first: bool = True):
        super().__init__()
        self.named = [(k, p) for k, p in module.named_parameters() if p.requires_grad]
        if not self.named:
            raise InputError("module is not allowed: none of its parameters requires grad (nothing to train).")
        self.bounds = per_layer_bounds(self.named, bounds)
        self._module, self.loss_reduction = module, loss_reduction
        self.batch_first, self.dim = bool(batch_first), 0 if batch_first else 1
        self._out = None                    # (output's record dimension, its number of dimensions), once found
        self._schedule = ProbeSchedule()    # the batches whose records are compared with their own outputs
        self._refused = None                # the comparison's refusal, repeated at every later training forward
        self._warned = False
        self.captures: list = []
        self.zeroed = True

    @property
    def inner(self) -> nn.Module:
        """The user's module."""
        return self._module

    def clear(self, pending: bool = False) -> None:
        """Forget the captured batches.

        Args:
            pending: keep those whose backward has not run yet (``zero_grad()`` between forward and backward).
        """
        self.captures = [c for c in self.captures if not c.complete()] if pending else []

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The module's ``zero_grad``, and the captured batches forgotten.

        Args:
            set_to_none: set the gradients to None instead of zero.
        """
        super().zero_grad(set_to_none)
        self.clear(pending=True)
        self.zeroed = True

    def forward(self, *args, **kwargs):
        """Run the module, capturing the batch for the private step (training with gradients enabled).

        Outside training or with gradients disabled, the module's own forward.

        Args:
            *args: one positional tensor, the batch (records on the ``batch_first`` dimension).
            **kwargs: none accepted in training.

        Returns:
            The module's output (one tensor), joined to the graph so that its gradient is captured.

        Raises:
            InputError: if a back-propagated batch awaits ``optimizer.step()``, the input is not one tensor
                with the record dimension, the output is not one tensor, or its record dimension cannot be told.
        """
        if not (self.training and torch.is_grad_enabled()):
            return self._module(*args, **kwargs)
        refuse_accumulation(self.captures)
        if self._refused is not None:
            raise InputError(self._refused)
        if len(args) != 1 or kwargs or not isinstance(args[0], torch.Tensor) or args[0].dim() <= self.dim:
            raise InputError("the module's input is not allowed with clipping='per_layer': expected one positional "
                             f"tensor, the batch on {_where(self)}.")
        x = args[0]
        cap = _Capture(self, x.detach() if x.is_floating_point() else x, {k: p.detach() for k, p in self.named})
        out = functional_call(self._module, cap.params, (x,))
        if not isinstance(out, torch.Tensor):
            raise InputError(f"the module's output ({type(out).__name__}) is not allowed with clipping='per_layer': "
                             "expected one tensor.")
        if cap.rows:
            cap.out_dim = self._records_of_output(cap, out)
        self.captures.append(cap)
        out = out + out.new_zeros((), requires_grad=True)
        out.register_hook(cap._add)
        return out

    def _records_of_output(self, cap: _Capture, out: torch.Tensor) -> int:
        """The output's record dimension (see the module text), found on the first batch of two records or
        more and checked on every batch; refused in one line where it cannot be told."""
        rows, shape = cap.rows, tuple(out.shape)
        if self._out is not None:
            d, nd = self._out
            if len(shape) != nd or shape[d] != rows:
                raise InputError(f"the module's output of shape {list(shape)} is not allowed with clipping='per_layer':"
                                 f" the first batch had its records on dimension {d} of {nd}, this one does not have "
                                 f"its {rows} records there.")
        elif rows == 1:                     # one record: any dimension of size 1 holds it (all give its gradient)
            ones = [d for d, n in enumerate(shape) if n == 1]
            if not ones:
                raise InputError(f"the module's output of shape {list(shape)} is not allowed with clipping='per_layer':"
                                 " no dimension holds the batch's one record.")
            return ones[0]
        due = self._schedule.due(tuple(cap.x.shape), self._out is None) if rows >= 2 else None
        if due is None:
            return self._out[0]
        try:
            d = self._compared(cap, shape)
        except InputError as e:
            self._refused = str(e)
            raise
        self._out = (d, len(shape))
        self._schedule.done(due)
        return d

    def _compared(self, cap: _Capture, shape: tuple) -> int:
        """Each record's slice of the batch's output against its own output (float64 where the model runs in it)."""
        try:
            mine, alone = self._alone(cap, torch.float64)
            tol = ALONE_RTOL
        except RuntimeError as e:           # a cast inside the forward, memory: in the model's own dtype
            if not self._warned:
                self._warned = True
                warnings.warn(f"the per-record comparison of clipping='per_layer' runs in the model's dtype, not "
                              f"float64 ({str(e).splitlines()[0][:120]}): it sees records mixed by more than 1e-4 of "
                              "the values only", UserWarning, stacklevel=4)
            mine, alone = self._alone(cap, None)
            tol = 1e-4 if mine.dtype.itemsize >= 8 else 1e-3
        rows, one = cap.rows, tuple(alone.shape[1:])
        dims = [d for d in range(len(shape)) if len(one) == len(shape) and one[d] == 1 and shape[d] == rows
                and all(one[k] == shape[k] for k in range(len(shape)) if k != d)]
        if self._out is not None and self._out[0] in dims:
            dims = [self._out[0]]
        if len(dims) != 1:
            raise InputError(f"the module's output of shape {list(shape)} is not allowed with clipping='per_layer': "
                             f"one record alone gives {list(one)}, so {'several dimensions' if dims else 'no dimension'}"
                             f" could hold the batch's {rows} records (input records on {_where(self)}).")
        d = dims[0]
        mine, theirs = mine.movedim(d, 0), alone.squeeze(d + 1)
        scale = float(theirs.abs().max()) if theirs.numel() else 0.0
        if not torch.allclose(mine, theirs, rtol=tol, atol=tol * max(scale, 1e-30)):
            raise InputError(f"the module is not allowed with clipping='per_layer': on a batch of {rows} its output's "
                             f"record dimension {d} does not hold each record's own output (records on {_where(self)} "
                             "are mixed, e.g. attention or a mean across them, however weak), so one record could "
                             "move every record's gradient.")
        return d

    def _alone(self, cap: _Capture, dtype):
        """The batch's output and every record's own output (``vmap``), without gradients, in ``dtype`` (None: the
        model's own parameters and input)."""
        d_in, x, p = self.dim, cap.x, dict(cap.params)
        if dtype is not None:
            x = widened(x, dtype)
            p = {**{k: widened(v.detach(), dtype) for k, v in self._module.named_parameters()},
                 **widened_buffers(self._module, dtype)}
        with torch.no_grad():
            mine = functional_call(self._module, p, (x,))
            alone = vmap(lambda xi: functional_call(self._module, p, (xi.unsqueeze(d_in),)), in_dims=d_in)(x)
        return mine, alone

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("_module"), name)
