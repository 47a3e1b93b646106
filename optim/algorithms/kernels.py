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

__all__ = ["Queries", "RecordQueries", "Kernel", "DPSGDKernel", "DiceSGDKernel", "DPSRMKernel"]


class Queries:
    """The per-example terms of one batch, flat, summed over the batch (and over the processes of a
    data-parallel run): what a kernel may ask.  ``clipped_diff_sum`` is between the current point and
    the previous one (DP-SRM)."""

    def clipped_sum(self, c: float, stabilizer: float | None = None) -> torch.Tensor:   # pragma: no cover
        raise NotImplementedError

    def clipped_diff_sum(self, c: float) -> torch.Tensor:                               # pragma: no cover
        raise NotImplementedError

    def grad_sum(self) -> torch.Tensor:                                                 # pragma: no cover
        raise NotImplementedError


class RecordQueries(Queries):
    """The reference optimizers' queries: the records ``idx`` of the run's data at ``cur`` (and
    ``prev``), each computed by the run's per-example object on this process's share of the batch
    and summed by its transport -- the calls the per-example object has always seen, in order."""

    def __init__(self, opt, idx: torch.Tensor, cur: dict, prev: dict | None = None):
        self.opt, self.cur, self.prev = opt, cur, prev
        self.mine = opt.transport.share(idx)
        self.xs, self.ys = opt.rows(self.mine)

    def clipped_sum(self, c, stabilizer=None):
        o = self.opt
        return o.transport.aggregate(o.per_example.clipped_sum(o.model, o.loss_fn, self.cur, self.xs, self.ys, c,
                                                               ids=(0, self.mine), stabilizer=stabilizer))

    def clipped_diff_sum(self, c):
        o = self.opt
        return o.transport.aggregate(o.per_example.clipped_diff_sum(o.model, o.loss_fn, self.cur, self.prev, self.xs,
                                                                    self.ys, c, ids=(0, self.mine)))

    def grad_sum(self):
        o = self.opt
        return o.transport.aggregate(o.per_example.grad_sum(o.model, o.loss_fn, self.cur, self.xs, self.ys,
                                                            ids=(0, self.mine)))


class Kernel:
    """One step of an algorithm on one batch.  ``mechanism`` describes the run (its releases, their
    sensitivities and events); ``levels`` the noise levels (a dict, as a calibration's ``noise``).

    :meth:`step` returns ``(released, kind)``; :meth:`direction` turns the released value into the
    descent direction a ``torch.optim`` optimizer takes as ``.grad`` (the same scale as the
    reference optimizer's ``lr`` step).  ``state_dict`` / ``load_state_dict``: plain tensors only."""

    name = "kernel"
    #: records per batch the direction is normalised by (DP-SGD: the expected batch size B)
    normaliser = 1.0
    #: may the clip norm change between steps (a grad-clip scheduler)?  Only where the one release's
    #: sensitivity is the clip itself, so that the ledger charges each step at its own clip
    clip_schedulable = False
    #: may the clip be a vector of per-layer bounds (``clipping="per_layer"``), the sensitivity their norm?
    per_layer = False

    def __init__(self, mechanism, levels: dict):
        self.mechanism, self.levels = mechanism, dict(levels)

    def kind(self, first: bool) -> str:                                  # pragma: no cover - abstract
        raise NotImplementedError

    def asks(self, first: bool) -> tuple:
        """``((query, args), ...)``: the queries :meth:`step` asks, in its order (a driver that sums
        the terms of several physical batches computes exactly these)."""
        raise NotImplementedError                                       # pragma: no cover - abstract

    def step(self, queries: Queries, release, round: int, first: bool) -> tuple:   # pragma: no cover
        raise NotImplementedError

    def direction(self, released: torch.Tensor) -> torch.Tensor:
        """The descent direction of a release (a new tensor: the release is left as it was)."""
        return released.clone() if self.normaliser == 1.0 else released / self.normaliser

    def std(self, kind: str) -> float:
        """The per-coordinate std of release ``kind`` at this kernel's levels and clips."""
        raise NotImplementedError                                       # pragma: no cover - abstract

    @classmethod
    def for_run(cls, mechanism, levels: dict, *, n: int, clip: float, dim: int, device, dtype) -> "Kernel":
        """The kernel of a run of ``mechanism`` on ``n`` records at ``levels`` (``clip``: the
        per-record clip norm the user asked for, where the mechanism does not fix it)."""
        raise NotImplementedError                                       # pragma: no cover - abstract

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class DPSGDKernel(Kernel):
    """DP-SGD / DPSGD-GC: ``release(sum_{i in batch} clip(g_i, C) + N(0, (z C)^2 I))``, direction
    ``released / B`` (``B`` the expected batch size ``q n``, the shuffled batch size, or balls-in-bins'
    expected batch ``n / t``: the mechanism's ``expected_batch_size``)."""

    name = "dp-sgd"
    clip_schedulable = True
    per_layer = True

    def __init__(self, mechanism, levels, *, C: float, B: float):
        super().__init__(mechanism, levels)
        self.C, self.normaliser = float(C), float(B)
        self.clip = self.C

    @classmethod
    def for_run(cls, mechanism, levels, *, n, clip, dim, device, dtype):
        B = mechanism.expected_batch_size if mechanism.epoch_wise else mechanism.sampling_rate * n
        return cls(mechanism, levels, C=clip, B=B)

    def kind(self, first):
        return "step"

    def asks(self, first):
        return (("clipped_sum", (self.C, None)),)

    def std(self, kind):
        z = self.levels["noise_multiplier"]
        return 0.0 if z == 0.0 else self.mechanism.std("step", z, self.C)

    def step(self, queries, release, round, first=False):
        s = queries.clipped_sum(self.C)
        m = self.mechanism
        noisy = release(s, self.std("step"), round=round, name="clipped gradient sum",
                        sensitivity=m.sensitivity("step", self.C), relation=m.release("step").relation)
        return noisy, "step"


class DiceSGDKernel(Kernel):
    """DiceSGD (Algorithm 2): ``v = (1/B) sum clip(g_i, C1) + clip(e, C2)``, ``release(v + w)``,
    ``e <- e + (1/B) sum g_i - v`` (the error feedback is never released).  ``stabilizer``:
    automatic clipping (Algorithm 4)."""

    name = "dicesgd"

    def __init__(self, mechanism, levels, *, C1: float, C2: float, stabilizer: float | None, dim: int, device, dtype):
        super().__init__(mechanism, levels)
        self.C1, self.C2, self.stabilizer = float(C1), float(C2), stabilizer
        self.clip = self.C1
        self.B = mechanism.batch_size
        self.e = torch.zeros(dim, device=device, dtype=dtype)

    @classmethod
    def for_run(cls, mechanism, levels, *, n, clip, dim, device, dtype, stabilizer: float = 0.01):
        c1, c2, _ = mechanism.clips
        return cls(mechanism, levels, C1=c1, C2=c2, stabilizer=stabilizer if mechanism.automatic else None, dim=dim,
                   device=device, dtype=dtype)

    def kind(self, first):
        return "first" if first else "later"

    def asks(self, first):
        return (("clipped_sum", (self.C1, self.stabilizer)), ("grad_sum", ()))

    def std(self, kind):
        return self.mechanism.std(kind, self.levels["sigma1"])

    def _clip_e(self):
        ne = torch.linalg.vector_norm(self.e).reshape(1)
        return clip_factors(ne, self.C2, self.stabilizer)[0] * self.e

    def step(self, queries, release, round, first=False):
        clipped = queries.clipped_sum(self.C1, self.stabilizer)
        plain = queries.grad_sum()
        v = clipped / self.B + self._clip_e()
        kind, m = self.kind(first), self.mechanism
        vw = release(v, self.std(kind), round=round, name=f"v^t + w^t ({kind})",
                     sensitivity=m.sensitivity(kind, (self.C1, self.C2)), relation=m.release(kind).relation)
        self.e = self.e + plain / self.B - v
        return vw, kind

    def state_dict(self):
        return {"e": self.e}

    def load_state_dict(self, state):
        self.e = state["e"]


class DPSRMKernel(Kernel):
    """DP-SRM (practical clipped variant, DPSRM-E4): ``v^0 = release((1/b0) sum clip(g_i, C1))``;
    later ``v^t = release((1/b) sum [(1 - gamma) clip(g_i - g_i', C2) + gamma clip(g_i, C1)]
    + (1 - gamma) v^{t-1})`` with ``g'`` at the previous point; the direction is ``v^t``."""

    name = "dp-srm"

    def __init__(self, mechanism, levels, *, C1: float, C2: float):
        super().__init__(mechanism, levels)
        self.C1, self.C2 = float(C1), float(C2)
        self.clip = self.C1
        self.gamma, self.b0, self.b = mechanism.momentum, mechanism.b0, mechanism.b
        self.v = None

    @classmethod
    def for_run(cls, mechanism, levels, *, n, clip, dim, device, dtype):
        return cls(mechanism, levels, C1=mechanism.lipschitz, C2=mechanism.step_bound)

    def kind(self, first):
        return "v^0" if first else "v^t"

    def asks(self, first):
        return (("clipped_sum", (self.C1, None)),) if first else (("clipped_diff_sum", (self.C2,)),
                                                                   ("clipped_sum", (self.C1, None)))

    def std(self, kind):
        return self.mechanism.std(kind, self.levels["sigma0" if kind == "v^0" else "sigma"])

    def batch_size(self, first: bool) -> int:
        return self.b0 if first else self.b

    def step(self, queries, release, round, first=False):
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

    def state_dict(self):
        return {"v": self.v}

    def load_state_dict(self, state):
        self.v = state["v"]

