"""The user's module, wrapped so that its own forward and backward leave each record's contribution.

:class:`PrivateModule` runs the user's module on the batch as usual, but with the parameters
detached and every module that owns trained parameters hooked (:mod:`dpcalib.optim.clipping.calls`): the
forward records each call's inputs, and the backward of the user's loss leaves the gradient of its
outputs.  No parameter gradient is formed by that backward (the parameters are not in the graph: each
hooked output is joined to it by adding a zero leaf), so the user's ``loss.backward()`` costs the
back-propagation of the signals only.  The private step (:mod:`.optimizer`) then asks the batch's
:class:`Capture` for the terms its kernel needs -- clipped sums, the unclipped sum, clipped differences
against the previous point -- from the layer rules of :mod:`dpcalib.optim.clipping.rules`, with the norm of
each record computed in float64 from exactly the vector that is summed (the paths' guarantee).

The batch is the first tensor (or ``PackedSequence``) among the positional inputs, else among the keyword
inputs (``model(input_ids=..., attention_mask=..., labels=...)``); ``batch_first`` says, with Opacus's
meaning, whether its records are on dimension 0 (``[B, ...]``) or 1 (``[T, B, ...]``).  Every layer's record
dimension is determined on the first batch of two records or more (:mod:`dpcalib.optim.clipping.records`:
a probe changes one record and back-propagates one record's loss, in float64 where the model runs in it, and
any other record that moves by more than a few ulps is mixing, however weak) and its size checked at every
batch.  The probe runs again, before the forward returns, on every batch larger than all those probed so far in
some dimension (more records, longer sequences) and on the 2^j-th batch of two records or more (1, 2, 4, 8, ...):
about ``2 log2(steps)`` probes in a run, each ~3 forwards and a backward (benchmarks/results/mixing_check.md);
:meth:`PrivateModule.check_records` probes any batch on demand.  Where the records cannot be told apart, or
a probe sees them mixed, the run is refused in one line naming the layer -- at that batch and every later one.
The model's outputs -- tensors, tuples, dicts, ``ModelOutput`` -- reach the user's loss unchanged.  Frozen parameters are constants (fine-tuning,
LoRA).  A ``torch.compile``'d module is trained through its original module (the hooks need eager calls) and
evaluated compiled.  Under ``torch.autocast`` or with bfloat16 / float16 parameters the per-record gradients are formed
in float32 or better, their norms in float64, and the sums cast to the parameters' dtype once.

The loss must be a sum or a mean of per-record terms (``loss_reduction``): with ``"mean"`` the
signals are multiplied by the batch's rows, so that a record's term is its own gradient.  A module no
per-layer rule covers is served by the per-module vmap rule (:mod:`dpcalib.optim.clipping.generic`), and a
parameter that reaches the loss other than through the calls of the modules that own it (a weight a parent
uses functionally) by the same rule on the whole model; both with one
:class:`~dpcalib.optim.clipping.ClippingFallbackWarning`.  Modules that mix the records of a batch or learn
from them outside the gradient (BatchNorm, running statistics) are refused with the replacement
:class:`~dpcalib.optim.clipping.ModuleValidator` makes.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.func import functional_call

from ...accountant.validation import InputError
from ...mechanisms import PerLayerClip
from ..clipping.calls import Call, Recorder, first_tensor, leaves, owners, rebuild
from ..clipping.layers import key_map, place_uses
from ..clipping.paths import ClippingFallbackWarning, supports_ghost
from ..clipping.precision import widened, widened_buffers, widened_params
from ..clipping.records import (FORWARD_ULPS, ProbeSchedule, check_rows, last_record_loss, layout_of, mixed_output,
                                perturbed, records_of, resolve)
from ..clipping.rules import rule_for
from ..clipping.units import rule_of, signal_terms
from ..clipping.validator import ModuleValidator
from .capture import Capture, refuse_accumulation

__all__ = ["PrivateModule", "REDUCTIONS", "MixedPrecisionWarning", "per_layer_bounds"]

REDUCTIONS = ("mean", "sum")


class MixedPrecisionWarning(UserWarning):
    """Signals in bfloat16 / float16 with a mean-reduced loss: the mean's ``1/B`` is rounded in the low-precision
    backward, so each record's clipped vector depends on the batch's size by up to ~2^-8 relative, and removing a
    record can move the release by slightly more than C; ``loss_reduction="sum"`` with a summed loss does not."""
#: keyword inputs that are the batch, before any other (Hugging Face's names)
_BATCH_NAMES = ("input_ids", "pixel_values", "inputs_embeds", "input_values", "input_features", "input", "x")


class _no_autocast:
    """Autocast off (on every device it is on) inside the block."""

    def __enter__(self):
        self.ctx = [torch.autocast(d, enabled=False) for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)]
        for c in self.ctx:
            c.__enter__()

    def __exit__(self, *exc):
        for c in reversed(self.ctx):
            c.__exit__(*exc)
        return False


def _rng_state():
    return torch.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None)


def _set_rng_state(state) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


class PrivateModule(nn.Module):
    """``module`` wrapped for private training (see the module text).  In ``eval()`` mode, or
    under ``torch.no_grad()``, the forward is the plain module's and records nothing.

    Args:
        module: the user's ``torch.nn.Module`` (a compiled one trains its original module eagerly).
        loss_reduction: ``"mean"`` or ``"sum"``, the criterion's reduction.
        batch_first: records on dimension 0 of the module's input (else 1).
        bounds: per-layer clipping's bounds, one per trained parameter (each parameter's part of a record's
            gradient clipped to its own, by the same rules), or None (flat clipping).

    Raises:
        InputError: if ``module`` is not a module, already a ``PrivateModule``, has a layer private training
            refuses, no parameters or none that requires grad; or ``loss_reduction`` / ``batch_first`` /
            ``bounds`` is not allowed.
    """

    def __init__(self, module: nn.Module, *, loss_reduction: str = "mean", batch_first: bool = True, bounds=None):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise InputError(f"module={module!r} is not allowed: expected a torch.nn.Module.")
        if isinstance(module, PrivateModule):
            raise InputError("module is not allowed: it is already a PrivateModule (make_private was called on it).")
        if loss_reduction not in REDUCTIONS:
            raise InputError(f"loss_reduction={loss_reduction!r} is not allowed: expected 'mean' or 'sum'.")
        if not isinstance(batch_first, bool):
            raise InputError(f"batch_first={batch_first!r} is not allowed: expected True (records on dimension 0 of the "
                             "module's input) or False (on dimension 1).")
        self.__dict__["_plain"] = module  # what evaluation runs (a compiled module: compiled); not a submodule
        module = getattr(module, "_orig_mod", module)     # torch.compile: training runs the original module eagerly
        errors = ModuleValidator.validate(module)
        if errors:
            raise InputError(f"module is not allowed: {errors[0]}")
        if next(module.parameters(), None) is None:
            raise InputError("module is not allowed: it has no parameters.")
        #: the parameters trained (``requires_grad``) by name, in the order of every flat vector of the run;
        #: frozen ones are constants of the model (fine-tuning), outside every record's gradient
        self.named = [(k, p) for k, p in module.named_parameters() if p.requires_grad]
        if not self.named:
            raise InputError("module is not allowed: none of its parameters requires grad (nothing to train).")
        self._module = module
        #: per-layer clipping's bounds (a ``PerLayerClip``, one per trained parameter), or None (flat clipping)
        self.bounds = None if bounds is None else per_layer_bounds(self.named, bounds)
        self.loss_reduction, self.batch_first = loss_reduction, batch_first
        self._dim = 0 if batch_first else 1
        self._keys = key_map(module, {k for k, _ in self.named})
        trained = {id(p) for _, p in self.named}
        self._owners = owners(module, trained)
        self.unsupported = [f"{n or '<model>'} ({type(m).__name__}): {_why(m)}" for n, m in self._owners
                            if _why(m) is not None]
        self.ghost = batch_first and supports_ghost(module)
        self._root_keys: dict = {}        # parameters only the whole model's vmap can serve (decided at the first batch)
        self._layout = None               # (call signatures, record dims) found at the first batch of 2 or more
        self._surveyed = False
        self._schedule = ProbeSchedule()  # which batches the record probe runs on
        #: the batches the record probe has run on so far (the module text says which)
        self.probes = 0
        self._warned_probe = False
        self._refused = None              # the probe's refusal, repeated at every later training forward
        self._warned_precision = False
        self.captures: list[Capture] = []
        #: the private loader whose batch count tells two loader batches apart (the optimizer sets it), or None
        self.clock = None
        self.zeroed = True                # zero_grad since the last optimizer step (what the next step checks)
        dim = self._dim
        self._rec = Recorder(self._owners, broadcast_dim=lambda m: dim if isinstance(m, nn.Embedding) else None)
        if self.unsupported:
            warnings.warn(f"per-sample clipping of {type(module).__name__} takes vmap (slower, more memory) for: "
                          f"{'; '.join(self.unsupported)}", ClippingFallbackWarning, stacklevel=3)

    @property
    def fast(self) -> bool:
        """Every trained parameter is served by a per-layer rule (no vmap)."""
        return not self.unsupported and not self._root_keys

    @property
    def inner(self) -> nn.Module:
        """The user's module (``_module`` in Opacus)."""
        return self._module

    def params(self) -> dict:
        """The trained parameters, detached.

        Returns:
            ``{name: tensor}`` in the run's order.
        """
        return {k: p.detach() for k, p in self.named}

    def clear(self, pending: bool = False) -> None:
        """Forget the batches recorded since the last step.

        Args:
            pending: keep those whose backward has not run yet (``zero_grad()`` between a forward and its
                ``backward()``, legal in PyTorch: the backward that follows still reaches them).
        """
        self.captures = [c for c in self.captures if not c.complete()] if pending else []

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The parameters' ``.grad`` and the back-propagated batches recorded since the last step cleared (as
        Opacus's ``GradSampleModule.zero_grad`` clears its per-sample gradients; a forward whose backward has not
        run is kept for it); counts as the ``zero_grad`` the next step requires.

        Args:
            set_to_none: set the gradients to None instead of zero.
        """
        super().zero_grad(set_to_none)
        self.clear(pending=True)
        self.zeroed = True

    def _option(self) -> str:
        return f"batch_first={self.batch_first}"

    def _batch(self, args, kwargs):
        x = first_tensor(args, {})
        if x is None:
            x = next((kwargs[k] for k in _BATCH_NAMES if isinstance(kwargs.get(k), torch.Tensor)), None)
        if x is None:
            x = first_tensor((), kwargs)
        if x is None:
            raise InputError("the module's input (no tensor) is not allowed in training: expected the batch, a tensor "
                             f"(or PackedSequence) whose dimension {self._dim} indexes the records (batch_first="
                             f"{self.batch_first}).")
        return x

    # -- the forward -----------------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        """The module's forward, recording the batch for the private step when training with gradients enabled.

        In ``eval()`` mode or under ``torch.no_grad()``: the plain module's forward, nothing recorded.

        Args:
            *args: the module's positional inputs (the batch among them).
            **kwargs: its keyword inputs.

        Returns:
            The module's output, unchanged in type and value.

        Raises:
            InputError: if a back-propagated batch awaits ``optimizer.step()``, the input holds no batch
                tensor, or its layers or record layout cannot be matched.
        """
        if not (self.training and torch.is_grad_enabled()):
            return self._plain(*args, **kwargs)
        return self._training_forward(args, kwargs)

    # torch.compile of the private module compiles evaluation; training's hooks and probes run eagerly
    @torch.compiler.disable
    def _training_forward(self, args, kwargs):
        """:meth:`forward` in training: the batch recorded (see there)."""
        refuse_accumulation(self.captures)
        if self._refused is not None:
            raise InputError(self._refused)
        x = self._batch(args, kwargs)
        rows = records_of(x, self._dim)
        params = self.params()
        due = self._due(x, rows)
        if due is not None or (rows == 1 and not self._surveyed):
            self._checked(args, kwargs, x, rows, params)
            if due is not None:
                self._schedule.done(due)
        cap = Capture(self, x.detach() if isinstance(x, torch.Tensor) and x.is_floating_point() else x, args, kwargs,
                      params, rows)
        self.captures.append(cap)
        calls = []
        out = self._recorded(None, args, kwargs, calls, rows)
        out = self._finish(calls, out, args, kwargs, rows, None)
        if self.bounds is not None and rows >= 2 and not any(rows in t.shape for t in leaves(out)):
            raise InputError(f"the module's output of shape {[tuple(t.shape) for t in leaves(out)]} is not allowed with "
                             f"clipping='per_layer': no dimension could hold the batch's {rows} records.")
        cap.calls = calls
        if self.loss_reduction == "mean" and not self._warned_precision and any(
                z.dtype in (torch.bfloat16, torch.float16) for c in calls for z in c.outs):
            self._warned_precision = True
            warnings.warn("the module's signals are bfloat16 / float16 and the loss a mean: the mean's 1/B is rounded in "
                          "the low-precision backward, so each record's clipped vector depends on the batch's size "
                          "(removing a record moved the release by up to 1.0035 C in tests); for records independent "
                          "of the batch give a summed loss and loss_reduction='sum'", MixedPrecisionWarning,
                          stacklevel=2)
        return out

    def _recorded(self, params, args, kwargs, calls, rows):
        """A forward with every owner of trained parameters recorded (at ``params``, or at the module's own
        parameters, taken out of the graph for the call, when ``params`` is None)."""
        self._rec.start(calls, rows)
        try:
            if params is not None:
                dtype = next(iter(params.values())).dtype
                frozen = {k: widened(p.detach(), dtype) for k, p in self._module.named_parameters() if k not in params}
                buffers = widened_buffers(self._module, dtype)
                return functional_call(self._module, ({**frozen, **params}, buffers), tuple(args), kwargs)
            own = [p for _, p in self.named]
            for p in own:
                p.requires_grad_(False)
            try:
                return self._module(*args, **kwargs)
            finally:
                for p in own:
                    p.requires_grad_(True)
        finally:
            self._rec.stop()

    def _finish(self, calls, out, args, kwargs, rows, point):
        """The calls' run names, the whole model's call where it serves parameters, the record dimensions."""
        for c in calls:
            c.keys = {k: v for k, v in self._keys.get(id(c.module), {}).items() if v not in self._root_keys}
            if c.point is None and rule_of(c) is None:     # a parent's call serving a child's parameter
                c.point = dict(c.module.named_parameters())
        if self._layout is not None and rows >= 2:
            check_rows(calls, self._matched(calls), rows, self._option())
        elif rows >= 1:
            check_rows(calls, resolve(calls, None, None, rows, self._dim, self._option()), rows, self._option())
        calls[:] = [c for c in calls if c.keys]
        if self._root_keys and rows > 0:
            out = self._root_call(calls, out, args, kwargs, rows, point)
        return out

    def _matched(self, calls) -> list:
        """The record dims of the batch's calls by the first batch's layout (:func:`~dpcalib.optim.clipping.records.
        layout_of`); an :class:`InputError` where the calls cannot be matched."""
        dims = layout_of(self._layout, [c.signature() for c in calls])
        if dims is None:
            raise InputError("the module is not allowed: this batch ran other layers than the first batch did "
                             f"({len(calls)} calls against {len(self._layout[0])}); the records' layers cannot be matched.")
        return dims

    def _root_call(self, calls, out, args, kwargs, rows, point):
        """The whole model as one call (its output joined to the graph and hooked), for the parameters that
        reach the loss other than through their own modules' calls."""
        outs = []

        def join(t):
            if not t.is_floating_point():
                return t
            z = t if t.requires_grad else t + t.new_zeros((), requires_grad=True)
            outs.append(z)
            return z
        new = rebuild(out, join)
        call = Call("", self._module, tuple(args), dict(kwargs), new, outs, rows)
        call.keys, call.dim = dict(self._root_keys), self._dim
        call.out_dims = [self._dim if (z.dim() > self._dim and z.shape[self._dim] == rows) else None for z in outs]
        call.point = point
        for j, z in enumerate(outs):
            if z.requires_grad:
                z.register_hook(lambda g, j=j: call.grads.__setitem__(j, g if j not in call.grads else call.grads[j] + g))
        calls.append(call)
        return new

    def check_records(self, *args, **kwargs) -> None:
        """Run the record probe on this batch now, as the forward does on the batches it probes (the module text):
        e.g. on a batch of a size or kind the run has not probed, or on every batch of a run that must check all.

        Args:
            *args: the module's positional inputs (the batch among them, two records or more to probe).
            **kwargs: its keyword inputs.

        Raises:
            InputError: (one line, naming the layer) if the probe finds the records of the batch mixed or cannot
                tell where they are; every later training forward then raises it again.
        """
        if self._refused is not None:
            raise InputError(self._refused)
        x = self._batch(args, kwargs)
        self._checked(args, kwargs, x, records_of(x, self._dim), self.params())

    def _checked(self, args, kwargs, x, rows, params) -> None:
        """:meth:`_survey`, its refusal kept: a model the probe saw mixing stays refused, whatever the next batch."""
        try:
            self._survey(args, kwargs, x, rows, params)
        except InputError as e:
            if rows >= 2:
                self._refused = str(e)
            raise

    # -- the first batch: which parameters the rules serve; every probed batch: where every layer's records are --
    def _due(self, x, rows: int):
        """The :class:`~dpcalib.optim.clipping.records.ProbeSchedule`'s word on this training batch (None: not
        probed; else what to record once its probe passed)."""
        if rows < 2:
            return None
        shape = (rows, len(x.batch_sizes), *x.data.shape[1:]) if isinstance(x, nn.utils.rnn.PackedSequence) \
            else tuple(x.shape)
        return self._schedule.due(shape, self._layout is None)

    def _survey(self, args, kwargs, x, rows, params) -> None:
        """Run without autocast: where the records are and which calls use a parameter do not depend on the
        precision, and autocast's cache of cast weights would merge two uses of one weight into one."""
        with _no_autocast():
            self._survey_plain(args, kwargs, x, rows, params)

    def _survey_plain(self, args, kwargs, x, rows, params) -> None:
        if self._layout is None:
            self._place(args, kwargs, rows, params)
        if rows < 2:
            return
        self.probes += 1
        saved = _rng_state()
        try:
            try:
                calls, dims = self._probe(args, kwargs, x, rows, params, torch.float64)
            except RuntimeError as e:        # a cast inside the forward, no float64 kernel, memory: its own dtype
                _set_rng_state(saved)
                if not self._warned_probe:
                    self._warned_probe = True
                    warnings.warn(f"the record probe of {type(self._module).__name__} runs in the model's dtype, not "
                                  f"float64 ({str(e).splitlines()[0][:120]}): it sees records mixed by more than "
                                  f"{FORWARD_ULPS} ulps of that dtype only", UserWarning, stacklevel=4)
                calls, dims = self._probe(args, kwargs, x, rows, params, None)
        finally:
            _set_rng_state(saved)
        sigs = [c.signature() for c in calls]
        if self._layout is None:
            self._layout = (sigs, dims)
            return
        for c, d, d0 in zip(calls, dims, self._matched(calls)):
            if d[0] != d0[0]:                # the input's (the extra outputs keep the first batch's)
                raise InputError(f"{c.name or '<model>'} ({type(c.module).__name__}) is not allowed: on a batch of "
                                 f"{rows} records the probe found its records in dimension {d[0]} of its input, on "
                                 f"the first batch in {d0[0]}; the records' layers cannot be matched.")

    def _place(self, args, kwargs, rows, params) -> None:
        """Which calls serve each trained parameter, from one forward in the model's dtype."""
        self._surveyed = True
        saved = _rng_state()
        p = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        calls = []
        with torch.enable_grad():
            out = self._recorded(p, args, kwargs, calls, rows)
        _set_rng_state(saved)
        for c in calls:
            c.keys = dict(self._keys.get(id(c.module), {}))
        extra = self._placed(calls, out, p)
        if extra:
            self._root_keys = {k: k for k in extra}
            warnings.warn(f"per-sample clipping of {type(self._module).__name__} takes vmap over the whole model for "
                          f"{', '.join(extra)}: used other than inside the calls of the modules that own them (a weight "
                          "used functionally by another module)", ClippingFallbackWarning, stacklevel=5)

    def _probe(self, args, kwargs, x, rows, params, dtype):
        """The probes of :func:`~dpcalib.optim.clipping.records.resolve` on this batch: one forward and the
        last record's loss back-propagated, and the forward again with record 0 changed, both on the same path
        (gradients on, parameters as leaves) in ``dtype`` (None: the model's own); returns the calls and dims."""
        def wide(obj):
            return obj if dtype is None else rebuild(obj, lambda t: widened(t, dtype))
        p = {k: v.requires_grad_(True) for k, v in (widened_params(params, dtype) if dtype is not None else
                                                    {k: v.detach() for k, v in params.items()}).items()}
        saved = _rng_state()
        calls = []
        with torch.enable_grad():
            out = self._recorded(p, wide(tuple(args)), wide(dict(kwargs)), calls, rows)
        probe = None
        loss = last_record_loss(out, self._dim, rows)
        outs = [(k, j, z) for k, c in enumerate(calls) for j, z in enumerate(c.outs) if z.requires_grad]
        if loss is not None and outs:
            gs = torch.autograd.grad(loss, [z for *_, z in outs], allow_unused=True)
            probe = {(k, j): g for (k, j, _), g in zip(outs, gs) if g is not None}
        moved = out_m = None
        xm = perturbed(x, self._dim)
        if xm is not None:
            a2 = wide(tuple(xm if a is x else a for a in args))
            k2 = wide({k: (xm if v is x else v) for k, v in kwargs.items()})
            moved = []
            _set_rng_state(saved)
            with torch.enable_grad():
                out_m = self._recorded(p, a2, k2, moved, rows)
        dims = resolve(calls, moved, probe, rows, self._dim, self._option())
        hit = mixed_output(out, out_m, rows, self._dim) if out_m is not None else None
        if hit is not None:
            raise InputError(f"the module is not allowed: changing record 0 of a batch of {rows} moved other records "
                             f"of its output {hit[0]} of shape {hit[1]}, so something after its last trained layer "
                             "mixes the records of a batch (a mean or norm across them, however weak).")
        return calls, dims

    def _placed(self, calls, out, p) -> list:
        """Place every trained parameter (:func:`~dpcalib.optim.clipping.layers.place_uses`): one a parent's call
        serves joins that call's keys; returns those only the whole model's replay serves."""
        moved, rest = place_uses(calls, out, p)
        for k, (owner, rel) in moved.items():
            for keys in self._keys.values():
                for n in [n for n, v in keys.items() if v == k]:
                    del keys[n]
            self._keys.setdefault(id(owner), {})[rel] = k
            for c in calls:
                c.keys = {n: v for n, v in c.keys.items() if v != k}
                if c.module is owner:
                    c.keys[rel] = k
        return rest

    def signals_at(self, params: dict, x, target, criterion, args=(), kwargs=None, rows=None) -> list:
        """The calls of the batch at another point ``params`` (DP-SRM's previous iterate): a forward and the
        criterion's backward (the same reduction as the batch's own).

        Args:
            params: ``{name: tensor}`` the point to run at.
            x: the batch.
            target: the batch's loss target.
            criterion: the loss, ``criterion(output, target)``.
            args: the forward's positional inputs.
            kwargs: its keyword inputs (None: none).
            rows: the batch's records (None: counted from the batch).

        Returns:
            The recorded :class:`~dpcalib.optim.clipping.calls.Call` list, their output gradients set.
        """
        kwargs = kwargs or {}
        if rows is None:
            rows = records_of(self._batch(args, kwargs), self._dim)
        calls = []
        with torch.enable_grad():
            out = self._recorded(params, args, kwargs, calls, rows)
            out = self._finish(calls, out, args, kwargs, rows, params)
            loss = criterion(out, target)
            zs = [(c, j, z) for c in calls for j, z in enumerate(c.outs) if z.requires_grad]
            gs = torch.autograd.grad(loss, [z for *_, z in zs], allow_unused=True)
        for c in calls:
            c.grads.clear()
        for (c, j, _), g in zip(zs, gs):
            if g is not None:
                c.grads[j] = g
        return calls

    def terms(self, calls1, calls0=None, only=None):
        """``(norm2, terms)`` of the calls (:func:`~dpcalib.optim.clipping.units.signal_terms`).

        Args:
            calls1: the calls at the current point.
            calls0: the same calls at the other point, or None (the gradient).
            only: one trained parameter's run name (per-layer clipping), or None (every one).

        Returns:
            ``(norm2 [B] float64, [(names, sums)])``.
        """
        return signal_terms(calls1, calls0, self.loss_reduction, only)

    # the user's module's own names stay reachable (model.fc1, model.state_dict() keys of the wrapped module)
    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("_module"), name)


def per_layer_bounds(named: list, bounds):
    """Per-layer clipping's bounds checked against the trained parameters.

    Args:
        named: ``[(name, parameter)]`` the trained parameters.
        bounds: one clip bound per trained parameter, in ``module.parameters()`` order.

    Returns:
        The bounds as a :class:`~dpcalib.mechanisms.PerLayerClip` (its norm the clipped sum's sensitivity).

    Raises:
        InputError: if ``bounds`` is not a list of one bound per trained parameter.
    """
    if isinstance(bounds, (int, float)) or not hasattr(bounds, "__len__"):
        raise InputError(f"max_grad_norm={bounds!r} is not allowed with clipping='per_layer': expected a list of "
                         f"{len(named)} bounds, one per trained parameter.")
    if len(bounds) != len(named):
        raise InputError(f"max_grad_norm is not allowed with clipping='per_layer': {len(bounds)} bounds for "
                         f"{len(named)} trained parameters (one each, in module.parameters() order).")
    return PerLayerClip(bounds)


def _why(m) -> str | None:
    """Why no per-layer rule serves ``m`` (its trained parameters go to the per-module vmap rule), or None."""
    rule = rule_for(m)
    if rule is None:
        return "no per-layer rule for this layer"
    return rule.why_not(m)
