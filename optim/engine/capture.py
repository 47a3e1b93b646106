"""One physical batch as the user's forward and backward left it (:class:`Capture`), and the batch a step
releases from the forwards since the last step (:func:`one_batch`: one forward, or several tied by position),
with the refusal of a second batch before the step (:func:`refuse_accumulation`)."""

from __future__ import annotations

import math

import torch

from ...accountant.validation import InputError
from ..clipping.paths import clip_factors, ghost_clipped_diff_sum, ghost_clipped_sum
from ..clipping.per_example import flat_of
from ..clipping.precision import exact_float32, narrowed, widened, widened_params
from ..clipping.units import add_sums

__all__ = ["Capture", "one_batch", "refuse_accumulation"]


class Capture:
    """One physical batch as the user's forward and backward left it: the batch, its records, the calls of the
    modules that own trained parameters (their output gradients set by the backward); the loss target when the
    engine's criterion saw it (DP-SRM's previous point needs it).

    Args:
        owner: the :class:`~.module.PrivateModule` that recorded it.
        x: the batch (the tensor or ``PackedSequence`` whose record dimension indexes the records).
        args: the forward's positional inputs.
        kwargs: the forward's keyword inputs.
        params: ``{name: detached tensor}`` the trained parameters the forward ran at.
        rows: the batch's records.
    """

    def __init__(self, owner, x, args, kwargs, params: dict, rows: int):
        self.owner, self.x, self.args, self.kwargs, self.params = owner, x, args, kwargs, params
        self.rows = int(rows)
        self.calls: list = []
        self.target = None
        self._terms = None
        #: the private loader's batch count when the forward ran, and the batch ``x`` came from (None: unknown)
        self.serial = getattr(owner.clock, "yielded", None)
        self.origin = owner.clock.origin_of(x) if hasattr(owner.clock, "origin_of") else None
        #: the forwards this capture ties by position (:func:`one_batch`); itself alone by default
        self.parts = [self]

    def scale(self) -> float:
        """The factor that turns the signals a reduced loss left into the records' own gradients.

        Returns:
            ``rows`` for a mean-reduced loss, else 1.
        """
        return float(self.rows) if self.owner.loss_reduction == "mean" else 1.0

    def complete(self) -> bool:
        """Whether the batch's backward has run (or the batch is empty).

        Returns:
            True for an empty batch or when some call has an output gradient.
        """
        return self.rows == 0 or any(c.grads for c in self.calls)

    def _ghost(self, calls):
        """The signals as the ghost numerics of an MLP take them (``nn.Sequential`` of Linear layers and
        elementwise activations on rows of one dtype: the reference optimizers' path for it), or None."""
        if not self.owner.ghost or not calls or any("weight" not in c.keys for c in calls) or \
                len({id(c.module) for c in calls}) < len(calls):        # a layer called twice: its calls' sum
            return None
        sig = [(c.name, c.module, c.a(), c.g()) for c in calls]
        dts = {t.dtype for _, _, a, g in sig for t in (a, g)}
        if any(a.dim() != 2 or c.dim != 0 for (_, _, a, _), c in zip(sig, calls)) or len(dts) != 1 or \
                dts.pop() not in (torch.float32, torch.float64):
            return None
        return [(name, a, g, "bias" in c.keys) for (name, mod, a, g), c in zip(sig, calls)]

    def _like(self, like=None) -> dict:
        like = self.params if like is None else like
        return {k: (v.float() if v.dtype.itemsize < 4 else v) for k, v in like.items()}

    @exact_float32()
    def _sum(self, norm2, terms, c, stabilizer=None, like=None) -> torch.Tensor:
        """``sum_i f_i v_i`` with ``v_i = scale * u_i`` the record's vector (``u_i`` from the signals as
        left), ``f_i`` its clip factor from ``||v_i|| = scale ||u_i||`` (float64); summed in the dtypes
        of ``like`` (default: the parameters; float32 for narrower ones), returned in the parameters'."""
        return self._sums([(norm2, terms, c)], stabilizer, like)

    def _sums(self, parts, stabilizer=None, like=None) -> torch.Tensor:
        """:meth:`_sum` of several ``(norm2, terms, c)``, each clipped at its own ``c`` (per-layer clipping), added."""
        like = self._like(like)
        s = self.scale()
        total = {k: torch.zeros_like(v) for k, v in like.items()}
        for norm2, terms, c in parts:
            f = clip_factors(torch.sqrt(torch.clamp(norm2, min=0.0)) * s, c, stabilizer) * s
            add_sums(total, terms, f.to(next(iter(like.values())).dtype))
        return flat_of(narrowed(total, self.params), self.params)

    @exact_float32()
    def _per_layer_sum(self, c: float, stabilizer=None) -> torch.Tensor:
        """Per-layer clipping (``owner.bounds``): each trained parameter's part clipped to its bound ``C_k c / ||C||``."""
        if stabilizer is not None:
            raise InputError("clipping='per_layer' is not allowed with automatic clipping (a stabilizer).")
        bounds = self.owner.bounds
        s = float(c) / float(bounds)
        return self._sums([(*self.owner.terms(self.calls, only=k), b * s) for (k, _), b in zip(self.owner.named, bounds)])

    def _zeros(self) -> torch.Tensor:
        p = self.params
        return next(iter(p.values())).new_zeros(sum(t.numel() for t in p.values()))

    # -- the terms a kernel asks for (under exact_float32: a step called inside autocast forms no vector in bf16) --
    @exact_float32()
    def clipped_sum(self, c: float, stabilizer=None) -> torch.Tensor:
        """``sum_i clip(g_i, C)`` of the batch's records at its own point, flat.

        Args:
            c: the clip norm C >= 0 (``inf``: unclipped).
            stabilizer: automatic clipping's offset (see :func:`~dpcalib.optim.clipping.paths.clip_factors`), or None.

        Returns:
            The clipped sum as one flat vector in the trained parameters' order (zeros for an empty batch).
        """
        if self.rows == 0:
            return self._zeros()
        if self.owner.bounds is not None:
            return self._per_layer_sum(c, stabilizer)
        ghost = self._ghost(self.calls)
        if ghost is not None:
            sums, _ = ghost_clipped_sum(ghost, c, None, stabilizer, self.scale())
            return flat_of(sums, self.params)
        if self._terms is None:
            self._terms = self.owner.terms(self.calls)
        return self._sum(*self._terms, c, stabilizer)

    def grad_sum(self) -> torch.Tensor:
        """``sum_i g_i`` unclipped, flat.

        Returns:
            The summed gradient as one flat vector (zeros for an empty batch).
        """
        return self.clipped_sum(math.inf)

    @exact_float32()
    def clipped_diff_sum(self, c: float, prev: dict, criterion) -> torch.Tensor:
        """Records' clipped gradient differences between this point and ``prev`` on this batch (the
        loss at ``prev`` by ``criterion`` on the recorded target).

        Args:
            c: the clip norm C >= 0.
            prev: ``{name: tensor}`` the earlier point.
            criterion: the loss evaluated at ``prev`` (the batch's own reduction).

        Returns:
            The clipped sum of the differences as one flat vector in the parameters' dtype (zeros for an
            empty batch), computed in float64.

        Raises:
            InputError: if the engine's criterion did not see the batch's target.
        """
        if self.rows == 0:
            return self._zeros()
        if any(part.target is None for part in self.parts):
            raise InputError("criterion is required: the gradient at the previous point needs the batch's loss "
                             "target; call the criterion that make_private returned (not the original one).")
        o = self.owner
        # both points' signals in float64 (dpcalib.optim.clipping.precision: the batch's own pass,
        # in the model's dtype, is used only where that is float64 already); a tied batch's forwards each
        p1, p0 = widened_params(self.params), widened_params(prev)
        own = all(v.dtype == p1[k].dtype for k, v in self.params.items())
        sig1, sig0 = [], []
        for part in self.parts:
            x, target = widened(part.x), widened(part.target)
            args = tuple(widened(a) for a in part.args)
            kwargs = {k: widened(v) for k, v in part.kwargs.items()}
            sig0 += o.signals_at(p0, x, target, criterion, args, kwargs, self.rows)
            sig1 += part.calls if own else o.signals_at(p1, x, target, criterion, args, kwargs, self.rows)
        g1, g0 = self._ghost(sig1), self._ghost(sig0)
        if g1 is not None and g0 is not None:
            sums, _ = ghost_clipped_diff_sum(g1, g0, c, None, self.scale())
            return flat_of(narrowed(sums, self.params), self.params)
        return self._sum(*o.terms(sig1, sig0), c, like=p1)


def refuse_accumulation(captures) -> None:
    """A training forward after a batch was back-propagated, before ``optimizer.step()`` consumed it, is
    refused in one line: the two batches' terms would meet in one step, and a record in both would count
    twice.  Opacus raises a ``ValueError`` at the second backward of Poisson batches for the same reason
    ("Poisson sampling is not compatible with grad accumulation"); here it is an ``InputError``, a
    ``ValueError``, at the second forward, whatever the sampling.  A forward whose backward did not run
    (an evaluation in training mode) is refused only at the step, which ``zero_grad()`` avoids.

    Args:
        captures: the batches recorded since the last step.

    Raises:
        InputError: if one of them has been back-propagated.
    """
    if any(c.complete() for c in captures):
        raise InputError("a second training batch before optimizer.step() is not allowed: the last batch was "
                         "back-propagated and not yet stepped, and a record in both would count twice (Opacus: "
                         "Poisson sampling is not compatible with grad accumulation); call optimizer.step() after "
                         "every forward/backward pass, and cut a large batch into chunks with BatchMemoryManager.")


def _records_apart(a, b) -> bool:
    """Whether two forwards' batch tensors are views of one tensor at other records (``x[:16]`` and ``x[16:]``:
    their starts differ by a record or more along the record dimension; ``x[:, 0]`` and ``x[:, 1]`` hold the
    same records)."""
    xa, xb = a.x, b.x
    if not all(isinstance(t, torch.Tensor) and t.layout == torch.strided and t.dim() > a.owner._dim for t in (xa, xb)):
        return False
    if xa.untyped_storage().data_ptr() != xb.untyped_storage().data_ptr():
        return False
    step = xa.stride(a.owner._dim)
    return abs(xa.storage_offset() - xb.storage_offset()) >= max(step, 1)


def one_batch(captures) -> Capture:
    """The batch a step releases: the back-propagated forwards since the last step, tied by position.

    One forward is its own batch.  Several (a GAN's discriminator on the real batch and on as many generated
    records, a siamese pair's two views, a contrastive model's augmentations) are one batch whose record i is
    position i of every forward: its gradients across them are summed, then clipped together
    (:func:`~dpcalib.optim.clipping.units.signal_terms`), so removing the record moves the clipped sum by at
    most C -- provided every forward's position i holds record i or data that is not private (docs/threat-model.md,
    "Several forwards before one backward").  What the engine can tell is refused: forwards of different sizes,
    inputs from two batches of the private loader (found by their memory: :meth:`~.loader.DPDataLoader.origin_of`)
    or made while it handed out another (a copy to a device), two chunks of BatchMemoryManager, and two slices of
    one batch tensor; forwards whose backward did not run add nothing and are dropped.

    Args:
        captures: the batches recorded since the last step.

    Returns:
        The :class:`Capture` to release (a tied one holds its forwards in ``parts``).

    Raises:
        InputError: if no forward was back-propagated, or the forwards cannot be tied by position.
    """
    caps = [c for c in captures if c.complete()]
    if not caps:
        raise InputError("optimizer.step() is not allowed here: no backward of the batch's loss since the last "
                         "step (call loss.backward() on the output of the module make_private returned).")
    if len(caps) == 1:
        return caps[0]
    why = None
    if not all(isinstance(c, Capture) for c in caps):
        why = "clipping='per_layer' takes one forward a step"
    elif len({c.rows for c in caps}) > 1:
        why = f"they hold {', '.join(str(c.rows) for c in caps)} records, so their positions cannot be the same records"
    elif len({c.origin for c in caps} - {None}) > 1 or len({c.serial for c in caps}) > 1:
        why = "they are two batches of the private loader (a record in both would count twice)"
    else:
        if any(_records_apart(a, b) for i, a in enumerate(caps) for b in caps[i + 1:]):
            why = "they are two slices of one batch tensor (other records at the same positions)"
    if why is not None:
        raise InputError(f"optimizer.step() is not allowed here: the module ran {len(caps)} back-propagated training "
                         f"forwards since the last step and {why}; forwards are tied position by position only when "
                         "position i of each is record i or public data (a GAN's real and generated batch, a siamese "
                         "pair); cut a batch into chunks with BatchMemoryManager, one step each.")
    first = caps[0]
    tied = Capture(first.owner, first.x, first.args, first.kwargs, first.params, first.rows)
    tied.calls, tied.parts = [c for cap in caps for c in cap.calls], caps
    return tied
