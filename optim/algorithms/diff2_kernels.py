"""The DIFF2 family's releases as kernels: one DIFF2 round (DP-GD, DIFF2-GD, the rounds of
DIFF2-BVR-L-SGD) and one DIFF2-BVR local step.

As the kernels of :mod:`.kernels`, a kernel here asks its :class:`~.kernels.Queries` for the terms
it needs (the clipped sum at the current point on a restart round; the distance the point moved
and the clipped differences against the previous point on a difference round), releases through
the ``release`` callable it is handed and keeps the running estimator ``v~`` (the last release) as
its state.  It touches neither data nor parameters nor loop: its drivers are the reference
optimizers of :mod:`.diff2`, whose :class:`ShardQueries` answer from the clients' records, and a
driver that stacks many runs along a leading dimension (its queries then answer one row per run,
its clips and stds are tensors with one entry per run).
"""

from __future__ import annotations

import math

import torch

from ...accountant.validation import InputError
from ..tensors import flat
from .kernels import Kernel, Queries

__all__ = []


def step_length(cur: dict, before: dict, lr: float, r: int) -> float:
    """``||x_{k-1} - x_{k-2}||``, the scale of a difference round's clip; a run whose iterate is no
    longer finite has diverged, which is said here rather than as a NaN clip norm downstream.

    Args:
        cur: the current parameters (dict name -> tensor).
        before: the previous parameters.
        lr: the run's step size (for the message).
        r: the round (for the message).

    Returns:
        The L2 distance between the two points, a finite float >= 0.

    Raises:
        InputError: if the distance is not finite (the run diverged).
    """
    dx = float(torch.linalg.vector_norm(flat(cur) - flat(before)))
    if not math.isfinite(dx):
        raise InputError(f"lr={lr!r} is not allowed for this run: the iterate is no longer finite at round {r} (the "
                         "run diverged); use a smaller learning rate.")
    return dx


class ShardQueries(Queries):
    """The DIFF2 family's queries: the records ``x, y`` (named ``ids``, weighted ``weights``) at ``cur``
    and ``prev``, computed by the driver's per-example object and, with ``aggregate``, summed over
    the processes by its transport (a DIFF2 round); without, on this process only (a local step).

    Args:
        opt: the driving optimizer (its per-example object, model, loss, transport and ``lr``).
        cur: the current parameters (dict name -> tensor).
        prev: the previous parameters, for ``clipped_diff_sum`` and ``step_length``; or None.
        x: the records' inputs.
        y: the records' targets.
        ids: the records' names, as the per-example object takes them.
        weights: one weight per record, or None for weight 1.
        aggregate: sum over the processes through the driver's transport.
        round: the round (for a divergence message).
    """

    def __init__(self, opt, cur: dict, prev: dict | None, x, y, ids, weights=None, *, aggregate: bool = True,
                 round: int = 0):
        self.opt, self.cur, self.prev = opt, cur, prev
        self.x, self.y, self.ids, self.weights = x, y, ids, weights
        self.aggregate, self.round = aggregate, round

    def _sum(self, part: torch.Tensor) -> torch.Tensor:
        return self.opt.transport.aggregate(part) if self.aggregate else part

    def clipped_sum(self, c, stabilizer=None):
        """:meth:`Queries.clipped_sum` over the records at ``cur`` (weighted).

        Args:
            c: the clip norm, >= 0.
            stabilizer: None for plain clipping, or the automatic clip's stabilizer (> 0).

        Returns:
            A flat tensor (summed over the processes with ``aggregate``).
        """
        o = self.opt
        return self._sum(o.per_example.clipped_sum(o.model, o.loss_fn, self.cur, self.x, self.y, c, ids=self.ids,
                                                   weights=self.weights, stabilizer=stabilizer))

    def clipped_diff_sum(self, c):
        """:meth:`Queries.clipped_diff_sum` over the records between ``cur`` and ``prev`` (weighted).

        Args:
            c: the clip norm, >= 0.

        Returns:
            A flat tensor (summed over the processes with ``aggregate``).
        """
        o = self.opt
        return self._sum(o.per_example.clipped_diff_sum(o.model, o.loss_fn, self.cur, self.prev, self.x, self.y, c,
                                                        ids=self.ids, weights=self.weights))

    def step_length(self):
        """:meth:`Queries.step_length`: ``||cur - prev||`` (see :func:`step_length`).

        Returns:
            A finite float >= 0.

        Raises:
            InputError: if the distance is not finite (the run diverged).
        """
        return step_length(self.cur, self.prev, self.opt.lr, self.round)


def _scaled_clip(scale: float, dx):
    """``scale * dx``, 0 where ``dx`` is 0 (a float, or a tensor of them: one per stacked run)."""
    if isinstance(dx, torch.Tensor):
        return torch.where(dx == 0, torch.zeros_like(dx), scale * dx)
    return 0.0 if dx == 0.0 else scale * dx


def _std(mechanism, kind: str, level: float, c):
    """The std of release ``kind`` at ``level`` and clip ``c``; 0 without noise or with a zero clip
    (``c`` a tensor: one std per stacked run, float64)."""
    if isinstance(c, torch.Tensor):
        if level == 0.0:
            return torch.zeros(c.shape, dtype=torch.float64, device=c.device)
        return torch.where(c == 0, torch.zeros_like(c), torch.as_tensor(mechanism.std(kind, level, c)))
    return 0.0 if level == 0.0 or c == 0.0 else mechanism.std(kind, level, c)


def _sensitivity(mechanism, kind: str, c):
    """The claimed sensitivity at clip ``c``; None for stacked runs (one clip per run: the stacking
    driver keeps no per-release record)."""
    return None if isinstance(c, torch.Tensor) else mechanism.sensitivity(kind, c)


class DIFF2Kernel(Kernel):
    """One DIFF2 round (Algorithm 1 lines 2-11).  A restart round releases
    ``v~ = sum_i w_i clip(g_i, C1) + N(0, sigma1^2 C1^2 I)``; a difference round releases
    ``v~ = sum_i w_i clip(g_i - g_i', C_2) + v~_prev + N(0, sigma2^2 C_2^2 I)`` with
    ``C_2 = C2 ||x - x'||`` (``g'``, ``x'`` at the previous point; ``v~_prev``, the last release, is
    the public part).  The direction is ``v~``.  DP-GD is the kernel with ``T = 1``.

    Args:
        mechanism: a :class:`dpcalib.mechanisms.DIFF2GD`, :class:`~dpcalib.mechanisms.DPGD` or
            :class:`~dpcalib.mechanisms.DIFF2BVR`.
        levels: the noise levels (``sigma1``; ``sigma2`` when ``T > 1``: multipliers, std / clip).
        C1: the restart rounds' clip, >= 0.
        C2: the scale of the difference rounds' clip, >= 0.
        T: the restart interval, >= 1.
    """

    name = "diff2-gd"
    kinds = ("restart", "difference")           # a round that starts a restart period, the others
    state_names = ("v",)                        # the running estimator v~ (None before the first round)

    def __init__(self, mechanism, levels, *, C1: float, C2: float, T: int):
        super().__init__(mechanism, levels)
        self.C1, self.C2, self.T = float(C1), float(C2), int(T)
        self.clip = self.C1
        self.v = None

    @classmethod
    def for_run(cls, mechanism, levels, *, n, clip, dim, device, dtype, C2: float = math.inf):
        """A DIFF2 kernel with ``C1 = clip`` and the mechanism's restart interval.

        Args:
            mechanism: the run's mechanism (of the DIFF2 family).
            levels: the noise levels, a dict as a calibration's ``noise``.
            n: the number of records of the run (not used: the weights carry it).
            clip: the restart rounds' clip C1, >= 0.
            dim: the number of parameter coordinates (not used).
            device: the device of the kernel's state (not used).
            dtype: the dtype of the kernel's state (not used).
            C2: the scale of the difference rounds' clip, >= 0.

        Returns:
            The kernel, with no ``v~`` yet.
        """
        return cls(mechanism, levels, C1=clip, C2=C2, T=getattr(mechanism, "restart_interval", 1))

    def is_restart(self, round: int) -> bool:
        """Is ``round`` (1-based) a restart round (1, T + 1, ...)?

        Args:
            round: the round, >= 1.

        Returns:
            True for a restart round.
        """
        return (round - 1) % self.T == 0

    def asks(self, first):
        """A restart round: the clipped sum at C1; a difference round: the step length, then the
        clipped difference sum at ``C2`` times it (known only then: the clip is given as None).

        Args:
            first: is the round a restart round?

        Returns:
            A tuple of ``(query name, args tuple)`` pairs, in :meth:`step`'s order.
        """
        return (("clipped_sum", (self.C1, None)),) if first else (("step_length", ()), ("clipped_diff_sum", (None,)))

    def difference_clip(self, dx):
        """A difference round's clip ``C2 dx`` from the step length ``dx`` (a number, or a tensor of
        them: one per stacked run); 0 where the iterate did not move.

        Args:
            dx: the step length ``||x_{r-1} - x_{r-2}||`` (a float, or a tensor of them), >= 0.

        Returns:
            The clip ``C2 dx`` (0 where ``dx`` is 0), of the same kind as ``dx``.
        """
        return _scaled_clip(self.C2, dx)

    def std(self, kind, clip=None):
        """The std of release ``kind`` at clip ``clip`` (None: C1); 0 without noise or with a zero clip.

        Args:
            kind: ``"restart"`` or ``"difference"``.
            clip: the release's clip (a float, or a tensor with one per stacked run), or None for C1.

        Returns:
            The std, >= 0 (a float64 tensor where ``clip`` is a tensor).
        """
        level = self.levels["sigma1"] if kind == "restart" else self.levels.get("sigma2", 0.0)
        return _std(self.mechanism, kind, level, self.C1 if clip is None else clip)

    def step(self, queries, release, round, first=None):
        """One DIFF2 round: ask the query of its kind, release it (``v~_prev`` as the public part of a
        difference round) and keep the release as ``v~``.

        Args:
            queries: the round's :class:`~.kernels.Queries` (with ``step_length`` on a difference round).
            release: ``release(value, std, **record)`` -> the released tensor (the run's noise source and transport).
            round: the round of the release (1-based).
            first: is the round a restart round?  None: from ``round`` and T.

        Returns:
            ``(released, kind)``: ``v~`` and ``"restart"`` / ``"difference"``.
        """
        restart = self.is_restart(round) if first is None else bool(first)
        if restart:
            c = self.C1
            v = queries.clipped_sum(c)
        else:
            c = self.difference_clip(queries.step_length())
            v = queries.clipped_diff_sum(c)
        kind, m = self.kind(restart), self.mechanism
        public = None if restart else self.v          # v~_r = fresh difference term + v~_{r-1}
        self.v = release(v, self.std(kind, c), round=round, name=f"v~ ({kind})", sensitivity=_sensitivity(m, kind, c),
                         relation=m.release(kind).relation, public=public)
        return self.v, kind


class LocalStepKernel(Kernel):
    """One DIFF2-BVR local step (Algorithm 4 lines 6-8) on one client's minibatch of ``b`` records:
    ``v~_k = (1/b) sum_{I_k} clip(g_i - g_i', C_3) + v~_{k-1} + N(0, sigma3^2 C_3^2 I)`` with
    ``C_3 = C3 ||x_{k-1} - x_{k-2}||`` (``v~_{k-1}``, the last release, is the public part).  The
    driver sets :attr:`v` to the round's ``v~`` before the client's first local step.

    Args:
        mechanism: a :class:`dpcalib.mechanisms.DIFF2BVR` (its ``batch_size`` b).
        levels: the noise levels (``sigma3`` when ``local_steps > 1``: a multiplier, std / clip).
        C3: the scale of the local steps' clip, >= 0.
    """

    name = "diff2-bvr-local"
    kinds = ("local", "local")                  # every local step makes a "local" release

    def __init__(self, mechanism, levels, *, C3: float):
        super().__init__(mechanism, levels)
        self.C3, self.b = float(C3), mechanism.batch_size
        self.v = None

    def asks(self, first):
        """The step length, then the clipped difference sum at ``C3`` times it (the clip is given as None).

        Args:
            first: ignored.

        Returns:
            ``(("step_length", ()), ("clipped_diff_sum", (None,)))``.
        """
        return (("step_length", ()), ("clipped_diff_sum", (None,)))

    def std(self, kind, clip=None):
        """The std of a local release at clip ``clip``; 0 without noise or with a zero clip.

        Args:
            kind: ``"local"``.
            clip: the release's clip, >= 0 (None: 0).

        Returns:
            The std, >= 0.
        """
        return _std(self.mechanism, kind, self.levels.get("sigma3", 0.0), 0.0 if clip is None else clip)

    def step(self, queries, release, round, first=False):
        """One local step: ask the step length and the clipped differences of the minibatch, release
        their mean (``v~_{k-1}`` as the public part) and keep the release as ``v~``.

        Args:
            queries: the minibatch's :class:`~.kernels.Queries` (``step_length`` and ``clipped_diff_sum``).
            release: ``release(value, std, **record)`` -> the released tensor (the client's noise).
            round: the round of the release (1-based).
            first: ignored.

        Returns:
            ``(released, "local")``.
        """
        c = _scaled_clip(self.C3, queries.step_length())
        v = queries.clipped_diff_sum(c)
        m = self.mechanism
        self.v = release(v / self.b, self.std("local", c), round=round, name="v~ (local)",
                         sensitivity=_sensitivity(m, "local", c), relation=m.release("local").relation, public=self.v)
        return self.v, "local"
