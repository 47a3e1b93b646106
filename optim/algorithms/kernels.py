"""The one-dataset updates as kernels that take a batch: DP-SGD / DPSGD-GC, DiceSGD and DP-SRM.

A kernel is one step of its algorithm on one batch, and nothing else: it asks the batch's
:class:`Queries` for the per-example terms it needs (clipped sums at the current point, the
unclipped sum, clipped differences against the previous point), makes its release through the
``release`` callable it is handed (the run's noise source and transport: noise, record, reduce),
updates its own state (DiceSGD's error feedback, DP-SRM's momentum) and returns what it released.
It touches neither data nor parameters nor loop.  Two drivers run them:

* the reference optimizers (:mod:`.sgd`): the sampler draws the batch from the run's data, the
  :class:`RecordQueries` compute its terms by forward and backward through the model, the
  driver writes the parameters (and DiceSGD's Adam of Algorithm 3);
* the engine (:mod:`dpcalib.optim.engine`): the user's DataLoader draws the batch, the terms come
  from the signals the user's own forward and backward left, and the user's ``torch.optim``
  optimizer takes :meth:`Kernel.direction` as its ``.grad``.

Both therefore release exactly the same thing for the same batch, parameters and noise draws.
"""

from __future__ import annotations

import torch

from ..clipping.paths import clip_factors

__all__ = ["Queries"]


class Queries:
    """The per-example terms of one batch, flat, summed over the batch (and over the processes of a
    data-parallel run): what a kernel may ask.  ``clipped_diff_sum`` is between the current point and
    the previous one (DP-SRM, DIFF2), ``step_length`` the distance between the two (DIFF2)."""

    def clipped_sum(self, c: float, stabilizer: float | None = None) -> torch.Tensor:   # pragma: no cover
        """The sum over the batch of the per-example gradients clipped to ``c``.

        Args:
            c: the clip norm, >= 0.
            stabilizer: None for plain clipping, or the automatic clip's stabilizer (> 0).

        Returns:
            A flat tensor, one entry per parameter coordinate.
        """
        raise NotImplementedError

    def clipped_diff_sum(self, c: float) -> torch.Tensor:                               # pragma: no cover
        """The batch sum of per-example gradient differences (current minus previous point) clipped to ``c``.

        Args:
            c: the clip norm, >= 0.

        Returns:
            A flat tensor, one entry per parameter coordinate.
        """
        raise NotImplementedError

    def grad_sum(self) -> torch.Tensor:                                                 # pragma: no cover
        """The sum over the batch of the unclipped per-example gradients.

        Returns:
            A flat tensor, one entry per parameter coordinate.
        """
        raise NotImplementedError

    def step_length(self) -> float:                                                     # pragma: no cover
        """The distance ``||cur - prev||`` between the current point and the previous one (the scale
        of a DIFF2 difference release's clip, :mod:`.diff2_kernels`).

        Returns:
            A finite float >= 0 (or a tensor of them, one per run, for queries over stacked runs).
        """
        raise NotImplementedError


class RecordQueries(Queries):
    """The reference optimizers' queries: the records ``idx`` of the run's data at ``cur`` (and
    ``prev``), each computed by the run's per-example object on this process's share of the batch
    and summed by its transport -- the calls the per-example object has always seen, in order.

    Args:
        opt: the driving one-dataset optimizer (its transport, per-example object, model and data).
        idx: the indices of the batch's records in the run's data.
        cur: the current parameters (dict name -> tensor).
        prev: the previous parameters, for ``clipped_diff_sum``; or None.
    """

    def __init__(self, opt, idx: torch.Tensor, cur: dict, prev: dict | None = None):
        self.opt, self.cur, self.prev = opt, cur, prev
        self.mine = opt.transport.share(idx)
        self.xs, self.ys = opt.rows(self.mine)

    def clipped_sum(self, c, stabilizer=None):
        """:meth:`Queries.clipped_sum` over the records ``idx`` at ``cur``.

        Args:
            c: the clip norm, >= 0.
            stabilizer: None for plain clipping, or the automatic clip's stabilizer (> 0).

        Returns:
            A flat tensor, summed over this process's share and aggregated by the transport.
        """
        o = self.opt
        return o.transport.aggregate(o.per_example.clipped_sum(o.model, o.loss_fn, self.cur, self.xs, self.ys, c,
                                                               ids=(0, self.mine), stabilizer=stabilizer))

    def clipped_diff_sum(self, c):
        """:meth:`Queries.clipped_diff_sum` over the records ``idx`` between ``cur`` and ``prev``.

        Args:
            c: the clip norm, >= 0.

        Returns:
            A flat tensor, summed over this process's share and aggregated by the transport.
        """
        o = self.opt
        return o.transport.aggregate(o.per_example.clipped_diff_sum(o.model, o.loss_fn, self.cur, self.prev, self.xs,
                                                                    self.ys, c, ids=(0, self.mine)))

    def grad_sum(self):
        """:meth:`Queries.grad_sum` over the records ``idx`` at ``cur``.

        Returns:
            A flat tensor, summed over this process's share and aggregated by the transport.
        """
        o = self.opt
        return o.transport.aggregate(o.per_example.grad_sum(o.model, o.loss_fn, self.cur, self.xs, self.ys,
                                                            ids=(0, self.mine)))


class Kernel:
    """One step of an algorithm on one batch.  ``mechanism`` describes the run (its releases, their
    sensitivities and events); ``levels`` the noise levels (a dict, as a calibration's ``noise``).

    :meth:`step` returns ``(released, kind)``; :meth:`direction` turns the released value into the
    descent direction a ``torch.optim`` optimizer takes as ``.grad`` (the same scale as the
    reference optimizer's ``lr`` step).  ``state_dict`` / ``load_state_dict``: plain tensors only.

    Args:
        mechanism: the run's mechanism.
        levels: the noise levels (copied).
    """

    name = "kernel"
    #: records per batch the direction is normalised by (DP-SGD: the expected batch size B)
    normaliser = 1.0
    #: may the clip norm change between steps (a grad-clip scheduler)?  Only where the one release's
    #: sensitivity is the clip itself, so that the ledger charges each step at its own clip
    clip_schedulable = False
    #: may the clip be a vector of per-layer bounds (``clipping="per_layer"``), the sensitivity their norm?
    per_layer = False
    #: the kinds of release (the keys of the mechanism's events): the first step's, then every later one's
    kinds: tuple = ()
    #: the attributes that are the kernel's state across steps (plain tensors, or None before the first step)
    state_names: tuple = ()

    def __init__(self, mechanism, levels: dict):
        self.mechanism, self.levels = mechanism, dict(levels)

    def kind(self, first: bool) -> str:
        """The kind of release a step makes (the key of the mechanism's events), from :attr:`kinds`.

        Args:
            first: is this the run's first step (DIFF2: the first of its restart period)?

        Returns:
            The kind's name: ``kinds[0]`` for a first step, else ``kinds[1]``.
        """
        return self.kinds[0] if first else self.kinds[1]

    def asks(self, first: bool) -> tuple:
        """``((query, args), ...)``: the queries :meth:`step` asks, in its order (a driver that sums
        the terms of several physical batches computes exactly these).

        Args:
            first: is this the run's first step?

        Returns:
            A tuple of ``(query name, args tuple)`` pairs.
        """
        raise NotImplementedError                                       # pragma: no cover - abstract

    def step(self, queries: Queries, release, round: int, first: bool) -> tuple:   # pragma: no cover
        """One step on one batch: ask the queries, make the release, update the kernel's state.
        Args:
            queries: the batch's :class:`Queries`.
            release: ``release(value, std, **record)`` -> the released tensor (the run's noise source and transport).
            round: the round of the release (1-based), for the record.
            first: is this the run's first step?

        Returns:
            ``(released, kind)``: the released tensor and its kind.
        """
        raise NotImplementedError

    def direction(self, released: torch.Tensor) -> torch.Tensor:
        """The descent direction of a release (a new tensor: the release is left as it was).

        Args:
            released: the released tensor of :meth:`step`.

        Returns:
            ``released / normaliser`` as a new tensor.
        """
        return released.clone() if self.normaliser == 1.0 else released / self.normaliser

    def std(self, kind: str) -> float:
        """The per-coordinate std of release ``kind`` at this kernel's levels and clips.

        Args:
            kind: the release kind (as :meth:`kind` returns it).

        Returns:
            The std, >= 0.
        """
        raise NotImplementedError                                       # pragma: no cover - abstract

    @classmethod
    def for_run(cls, mechanism, levels: dict, *, run, dim: int, device, dtype) -> "Kernel":
        """The kernel of ``run`` (:class:`dpcalib.mechanisms.shape.Run`, the shape ``mechanism`` was built
        from) at ``levels``: its clip norm where the mechanism does not fix it, its public number of records
        N (the engine's ``dataset_size``: a normaliser is read from it and the mechanism, never from the data).

        Args:
            mechanism: the run's mechanism (of this kernel's algorithm), ``from_run(run)``.
            levels: the noise levels, a dict as a calibration's ``noise``.
            run: the run's shape (``run.clip``: the per-record clip norm the user asked for).
            dim: the number of parameter coordinates.
            device: the device of the kernel's state.
            dtype: the dtype of the kernel's state.

        Returns:
            The kernel.
        """
        raise NotImplementedError                                       # pragma: no cover - abstract

    def state_dict(self) -> dict:
        """The kernel's state as plain tensors: its :attr:`state_names` attributes.

        Returns:
            A dict by attribute name (empty for a stateless kernel).
        """
        return {k: getattr(self, k) for k in self.state_names}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output.

        Args:
            state: a dict as returned by :meth:`state_dict`.
        """
        for k in self.state_names:
            setattr(self, k, state[k])


class DPSGDKernel(Kernel):
    """DP-SGD / DPSGD-GC: ``release(sum_{i in batch} clip(g_i, C) + N(0, (z C)^2 I))``, direction
    ``released / B`` (``B`` the expected batch size ``q n``, the shuffled batch size, or balls-in-bins'
    expected batch ``n / t``: the mechanism's ``expected_batch_size``).

    Args:
        mechanism: a :class:`dpcalib.mechanisms.DPSGD`.
        levels: the noise levels (``noise_multiplier``: std / C, >= 0).
        C: the clip norm, >= 0.
        B: the batch size the direction is normalised by, > 0.
    """

    name = "dp-sgd"
    kinds = ("step", "step")                    # every step makes a "step" release
    clip_schedulable = True
    per_layer = True

    def __init__(self, mechanism, levels, *, C: float, B: float):
        super().__init__(mechanism, levels)
        self.C, self.normaliser = float(C), float(B)
        self.clip = self.C

    @classmethod
    def for_run(cls, mechanism, levels, *, run, dim, device, dtype):
        """A DP-SGD kernel with ``C = run.clip`` and ``B`` the expected batch size: ``q N`` when Poisson (``b`` at
        ``q = b / N``), else the mechanism's ``expected_batch_size``; ``N`` is the run's public N, so that ``B``,
        the divisor of the noisy sum, is the same on neighbouring datasets.

        Args:
            mechanism: the run's mechanism (a DP-SGD mechanism).
            levels, run, dim, device, dtype: as :meth:`Kernel.for_run`.

        Returns:
            The kernel.
        """
        B = mechanism.expected_batch_size if mechanism.epoch_wise else mechanism.sampling_rate * run.sampling.n
        return cls(mechanism, levels, C=run.clip, B=B)

    def asks(self, first):
        """One clipped sum at C.
        Args:
            first: is this the run's first step?

        Returns:
            ``(("clipped_sum", (C, None)),)``.
        """
        return (("clipped_sum", (self.C, None)),)

    def std(self, kind):
        """The std ``z C`` of a step's release (0 without noise).
        Args:
            kind: as :meth:`Kernel.std`.

        Returns:
            The std, >= 0.
        """
        z = self.levels["noise_multiplier"]
        return 0.0 if z == 0.0 else self.mechanism.std("step", z, self.C)

    def step(self, queries, release, round, first=False):
        """Release the clipped gradient sum plus N(0, (z C)^2 I).
        Args:
            queries, release, round, first: as :meth:`Kernel.step`.

        Returns:
            ``(released, kind)``: the noisy sum and ``"step"``.
        """
        s = queries.clipped_sum(self.C)
        m = self.mechanism
        noisy = release(s, self.std("step"), round=round, name="clipped gradient sum",
                        sensitivity=m.sensitivity("step", self.C), relation=m.release("step").relation)
        return noisy, "step"


class DiceSGDKernel(Kernel):
    """DiceSGD (Algorithm 2): ``v = (1/B) sum clip(g_i, C1) + clip(e, C2)``, ``release(v + w)``,
    ``e <- e + (1/B) sum g_i - v`` (the error feedback is never released).  ``stabilizer``:
    automatic clipping (Algorithm 4).

    Args:
        mechanism: a :class:`dpcalib.mechanisms.DiceSGD` (its ``batch_size`` B).
        levels: the noise levels (``sigma1``: the absolute std of the noise on the average, >= 0).
        C1: the gradient clip, >= 0.
        C2: the error-feedback clip, >= 0.
        stabilizer: None for plain clipping, or the automatic clip's stabilizer (> 0).
        dim: the number of parameter coordinates (the size of ``e``).
        device: the device of ``e``.
        dtype: the dtype of ``e``.
    """

    name = "dicesgd"
    kinds = ("first", "later")                  # their sensitivities differ
    state_names = ("e",)                        # the error feedback

    def __init__(self, mechanism, levels, *, C1: float, C2: float, stabilizer: float | None, dim: int, device, dtype):
        super().__init__(mechanism, levels)
        self.C1, self.C2, self.stabilizer = float(C1), float(C2), stabilizer
        self.clip = self.C1
        self.B = mechanism.batch_size
        self.e = torch.zeros(dim, device=device, dtype=dtype)

    @classmethod
    def for_run(cls, mechanism, levels, *, run, dim, device, dtype, stabilizer: float = 0.01):
        """A DiceSGD kernel at the mechanism's clips (``C1`` is ``run.clip``, set by ``from_run``).

        Args:
            mechanism: the run's mechanism (a DiceSGD mechanism).
            levels, run, dim, device, dtype: as :meth:`Kernel.for_run`.
            stabilizer: the automatic clip's stabilizer, > 0 (used only when ``mechanism.automatic``).

        Returns:
            The kernel, with zero error feedback.
        """
        c1, c2, _ = mechanism.clips
        return cls(mechanism, levels, C1=c1, C2=c2, stabilizer=stabilizer if mechanism.automatic else None, dim=dim,
                   device=device, dtype=dtype)

    def asks(self, first):
        """The clipped sum at C1 and the plain gradient sum.
        Args:
            first: is this the run's first step?

        Returns:
            ``(("clipped_sum", (C1, stabilizer)), ("grad_sum", ()))``.
        """
        return (("clipped_sum", (self.C1, self.stabilizer)), ("grad_sum", ()))

    def std(self, kind):
        """The mechanism's std of release ``kind`` at ``sigma1``.
        Args:
            kind: as :meth:`Kernel.std`.

        Returns:
            The std, >= 0.
        """
        return self.mechanism.std(kind, self.levels["sigma1"])

    def _clip_e(self):
        ne = torch.linalg.vector_norm(self.e).reshape(1)
        return clip_factors(ne, self.C2, self.stabilizer)[0] * self.e

    def step(self, queries, release, round, first=False):
        """Release ``v + w`` and update the error feedback ``e``.
        Args:
            queries, release, round, first: as :meth:`Kernel.step`.

        Returns:
            ``(released, kind)``: ``v + w`` and ``"first"`` / ``"later"``.
        """
        clipped = queries.clipped_sum(self.C1, self.stabilizer)
        plain = queries.grad_sum()
        v = clipped / self.B + self._clip_e()
        kind, m = self.kind(first), self.mechanism
        vw = release(v, self.std(kind), round=round, name=f"v^t + w^t ({kind})",
                     sensitivity=m.sensitivity(kind, (self.C1, self.C2)), relation=m.release(kind).relation)
        self.e = self.e + plain / self.B - v
        return vw, kind


class DPSRMKernel(Kernel):
    """DP-SRM (practical clipped variant, DPSRM-E4): ``v^0 = release((1/b0) sum clip(g_i, C1))``;
    later ``v^t = release((1/b) sum [(1 - gamma) clip(g_i - g_i', C2) + gamma clip(g_i, C1)]
    + (1 - gamma) v^{t-1})`` with ``g'`` at the previous point; the direction is ``v^t``.

    Args:
        mechanism: a :class:`dpcalib.mechanisms.DPSRM` (its ``momentum`` gamma, ``b0`` and ``b``).
        levels: the noise levels (``sigma0``, ``sigma``: absolute stds, >= 0).
        C1: the gradient clip, >= 0.
        C2: the gradient-difference clip, >= 0.
    """

    name = "dp-srm"
    kinds = ("v^0", "v^t")
    state_names = ("v",)                        # the last release (None before the first step)

    def __init__(self, mechanism, levels, *, C1: float, C2: float):
        super().__init__(mechanism, levels)
        self.C1, self.C2 = float(C1), float(C2)
        self.clip = self.C1
        self.gamma, self.b0, self.b = mechanism.momentum, mechanism.b0, mechanism.b
        self.v = None

    @classmethod
    def for_run(cls, mechanism, levels, *, run, dim, device, dtype):
        """A DP-SRM kernel at the mechanism's ``lipschitz`` and ``step_bound`` clips (``run.clip`` and
        ``run.clip2``, set by ``from_run``).

        Args:
            mechanism: the run's mechanism (a DP-SRM mechanism).
            levels, run, dim, device, dtype: as :meth:`Kernel.for_run`.

        Returns:
            The kernel, with no ``v`` yet.
        """
        return cls(mechanism, levels, C1=mechanism.lipschitz, C2=mechanism.step_bound)

    def asks(self, first):
        """The first step: the clipped sum at C1; later: the clipped difference sum at C2, then the clipped sum at C1.
        Args:
            first: is this the run's first step?

        Returns:
            A tuple of ``(query name, args tuple)`` pairs, in :meth:`step`'s order.
        """
        return (("clipped_sum", (self.C1, None)),) if first else (("clipped_diff_sum", (self.C2,)),
                                                                   ("clipped_sum", (self.C1, None)))

    def std(self, kind):
        """The mechanism's std of release ``kind`` at ``sigma0`` (``"v^0"``) or ``sigma``.
        Args:
            kind: as :meth:`Kernel.std`.

        Returns:
            The std, >= 0.
        """
        return self.mechanism.std(kind, self.levels["sigma0" if kind == "v^0" else "sigma"])

    def batch_size(self, first: bool) -> int:
        """The batch size of a step.

        Args:
            first: is this the run's first step?

        Returns:
            ``b0`` for the first step, ``b`` after.
        """
        return self.b0 if first else self.b

    def step(self, queries, release, round, first=False):
        """Release ``v^t`` (the momentum term ``(1 - gamma) v^{t-1}`` as its public part) and keep it.
        Args:
            queries, release, round, first: as :meth:`Kernel.step`.

        Returns:
            ``(released, kind)``: ``v^t`` and ``"v^0"`` / ``"v^t"``.
        """
        if first:
            v = queries.clipped_sum(self.C1) / self.b0
        else:
            dsum = queries.clipped_diff_sum(self.C2)
            g = queries.clipped_sum(self.C1)
            v = ((1.0 - self.gamma) * dsum + self.gamma * g) / self.b
        kind, m = self.kind(first), self.mechanism
        public = None if first else (1.0 - self.gamma) * self.v     # the released v^{t-1} is public
        self.v = release(v, self.std(kind), round=round, name=kind, sensitivity=m.sensitivity(kind),
                         relation=m.release(kind).relation, public=public)
        return self.v, kind

