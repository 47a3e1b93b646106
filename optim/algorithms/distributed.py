"""The optimizers on real processes with ``torch.distributed``: each ``Distributed*`` class is the
one-process optimizer of :mod:`dpcalib.optim.algorithms` constructed on a torch.distributed
transport of :mod:`dpcalib.optim.run.ranks` (:class:`~dpcalib.optim.run.ranks.ClientsOnRanks`,
:class:`~dpcalib.optim.run.ranks.NodesOnRanks`, :class:`~dpcalib.optim.run.ranks.BatchOnRanks`).
No step, release, sensitivity or event is written here (tests/test_transport.py), so the same
seeds give the same iterates as the one-process optimizers (to float rounding).  See
docs/how-to/distributed.md.
"""

from __future__ import annotations

import math

import torch

from ...accountant.validation import InputError
from ... import mechanisms as M
from ..run.ranks import (BatchOnRanks, ClientsOnRanks, DistributedRunError, NodesOnRanks, abandon,
                         init_process_group, shutdown)
from .d2p import AdaD2P, ClipD2P, ConstD2P
from .diff2 import DIFF2BVR, DIFF2GD
from .sgd import DPSGD, DPSRM, DiceSGD

__all__ = ["init_process_group", "shutdown", "abandon", "DistributedRunError", "on_ranks"]


def _one_pair(data, name: str):
    if not isinstance(data, (list, tuple)) or len(data) != 2:
        raise InputError(f"{name} is not allowed: expected this rank's (x, y) pair.")
    return [data]


class DistributedDIFF2GD(DIFF2GD):
    """DIFF2-GD (or DP-GD) with one client per rank: :class:`dpcalib.optim.DIFF2GD` on
    :class:`ClientsOnRanks`.  ``shard``: this rank's ``(x, y)``; ``mechanism``:
    :class:`dpcalib.mechanisms.DIFF2GD` (or :class:`~dpcalib.mechanisms.DPGD`) with ``clients`` =
    world size.  Only the server rank ``src`` draws noise (and records releases).

    Args:
        model: the model (the same starting point on every rank).
        loss_fn: ``loss_fn(output, target)`` -> per-example losses.
        shard: this rank's ``(x, y)`` pair, at least ``n_min`` records.
        mechanism: a :class:`dpcalib.mechanisms.DIFF2GD` or :class:`dpcalib.mechanisms.DPGD`.
        noise: its calibration, or a dict of noise levels (``sigma1``, ``sigma2``).
        C1: the clip of the restart rounds, in [0, inf].
        C2: the scale of the difference rounds' clip, in [0, inf].
        lr: the step size, finite and > 0.
        src: the server rank (draws the noise), in [0, world size).
        **kwargs: the other keyword arguments of :class:`~dpcalib.optim.algorithms.diff2.DIFF2GD`.

    Raises:
        InputError: if the mechanism is of another kind, ``shard`` is not a pair, or on any of
            :class:`~dpcalib.optim.algorithms.diff2.DIFF2GD`'s checks.
    """

    _mechanism_types = (M.DIFF2GD, M.DPGD)

    def __init__(self, model, loss_fn, shard, mechanism, noise, *, C1: float, C2: float = math.inf, lr: float,
                 src: int = 0, **kwargs):
        if not isinstance(mechanism, self._mechanism_types):
            raise InputError(f"mechanism={mechanism!r} is not allowed: expected mechanisms."
                             f"{' or '.join(t.__name__ for t in self._mechanism_types)}.")
        self.name = mechanism.name        # DP-GD is DIFF2-GD with T = 1
        super().__init__(model, loss_fn, _one_pair(shard, "shard"), mechanism, noise, C1=C1, C2=C2, lr=lr,
                         transport=ClientsOnRanks(mechanism.clients, src), **kwargs)
        self.rank, self.src = self.transport.rank, self.transport.src


class DistributedDIFF2BVR(DIFF2BVR):
    """DIFF2-BVR-L-SGD with one client per rank: :class:`dpcalib.optim.DIFF2BVR` on
    :class:`ClientsOnRanks`.  The DIFF2 round as :class:`DistributedDIFF2GD`; then client
    ``p_r = 1 + (r mod P)`` alone runs the K - 1 noisy local steps on its shard -- its own
    minibatch sampling and its own local noise stream -- and broadcasts ``x_{K,r-1}`` and
    ``x^out_r`` to the others.

    Args:
        model: the model (the same starting point on every rank).
        loss_fn: ``loss_fn(output, target)`` -> per-example losses.
        shard: this rank's ``(x, y)`` pair, at least ``n_min`` records.
        mechanism: a :class:`dpcalib.mechanisms.DIFF2BVR`.
        noise: its calibration, or a dict of noise levels (``sigma1``, ``sigma2``, ``sigma3``).
        src: the server rank, in [0, world size).
        **kwargs: the keyword arguments of :class:`~dpcalib.optim.algorithms.diff2.DIFF2BVR`
            (``C1``, ``C2``, ``C3``, ``lr``, ...).

    Raises:
        InputError: if the mechanism is not a DIFF2-BVR, ``shard`` is not a pair, or on any of
            :class:`~dpcalib.optim.algorithms.diff2.DIFF2BVR`'s checks.
    """

    def __init__(self, model, loss_fn, shard, mechanism, noise, *, src: int = 0, **kwargs):
        if not isinstance(mechanism, M.DIFF2BVR):
            raise InputError(f"mechanism={mechanism!r} is not allowed: expected mechanisms.DIFF2BVR.")
        super().__init__(model, loss_fn, _one_pair(shard, "shard"), mechanism, noise,
                         transport=ClientsOnRanks(mechanism.clients, src), **kwargs)
        self.rank, self.src = self.transport.rank, self.transport.src


class _NodeOnRank:
    """One D2P node per rank (world size = number of nodes): the one-process optimizer on
    :class:`NodesOnRanks`.  ``node_data``: this rank's ``(x, y)`` (J records).  ``x_local``,
    ``w_local`` are this node's push-sum state; the model holds ``z = x / w``."""

    def __init__(self, model, loss_fn, node_data, mechanism, noise, **kwargs):
        super().__init__(model, loss_fn, _one_pair(node_data, "node_data"), mechanism, noise,
                         transport=NodesOnRanks(), **kwargs)
        self.rank = self.transport.rank

    @property
    def x_local(self) -> torch.Tensor:
        return self.X[0]

    @property
    def w_local(self) -> torch.Tensor:
        return self.w[0]


class DistributedClipD2P(_NodeOnRank, ClipD2P):
    """ClipD2P with one node per rank: per-example gradients clipped to C, std sigma C."""


class DistributedConstD2P(_NodeOnRank, ConstD2P):
    """ConstD2P with one node per rank: no clipping, std sigma G with an estimated, NOT enforced G
    (AdaD2P-E2)."""


class DistributedAdaD2P(_NodeOnRank, AdaD2P):
    """AdaD2P with one node per rank: std sigma ||g|| -- NO valid privacy guarantee (AdaD2P-E1)."""


class _BatchOnRanks:
    """A one-dataset optimizer data-parallel over the ranks (:class:`BatchOnRanks`): ``data`` is the
    whole dataset on every rank; each batch's per-example work is split over the ranks."""

    def __init__(self, model, loss_fn, data, mechanism, noise, *, src: int = 0, **kwargs):
        super().__init__(model, loss_fn, data, mechanism, noise, transport=BatchOnRanks(src), **kwargs)
        self.rank, self.src = self.transport.rank, self.transport.src


class DistributedDPSGD(_BatchOnRanks, DPSGD):
    """DP-SGD (Poisson or shuffled batches) data-parallel over the ranks."""


class DistributedDPSRM(_BatchOnRanks, DPSRM):
    """DP-SRM data-parallel over the ranks (gradient and gradient-difference sums all-reduced)."""


class DistributedDiceSGD(_BatchOnRanks, DiceSGD):
    """DiceSGD data-parallel over the ranks (clipped and plain gradient sums all-reduced; the error
    feedback state is the same on every rank)."""


def on_ranks(cls: type) -> type:
    """The torch.distributed variant of the one-process optimizer class ``cls``: the class here whose
    algorithm is ``cls`` (DP-GD runs as DIFF2-GD with T = 1), or, for a subclass registered from
    outside (its own kernel, its own step size), that class's rank mixin over ``cls`` itself.

    Args:
        cls: a one-process optimizer class (e.g. :class:`~dpcalib.optim.algorithms.sgd.DPSGD`).

    Returns:
        The ``Distributed*`` class for ``cls``.

    Raises:
        InputError: if no class here implements ``cls``'s algorithm or one of its bases.
    """
    variants = (DistributedDIFF2GD, DistributedDIFF2BVR, DistributedClipD2P, DistributedConstD2P,
                DistributedAdaD2P, DistributedDPSGD, DistributedDPSRM, DistributedDiceSGD)
    best = None
    for d in variants:
        base = d.__mro__[d.__mro__.index(d) + 1:]
        algo = next(b for b in base if b.__module__ != __name__)      # skip the rank mixins
        if issubclass(cls, algo) and (best is None or cls.__mro__.index(algo) < cls.__mro__.index(best[1])):
            best = (d, algo)
    if best is None:
        raise InputError(f"{cls.__name__} has no torch.distributed variant.")
    d, algo = best
    if cls is algo or cls.__module__ == algo.__module__:
        return d
    mixins = tuple(b for b in d.__bases__ if b.__module__ == __name__)
    return type(f"Distributed{cls.__name__}", (*mixins, cls),
                {"__doc__": f"{cls.__name__} on torch.distributed ranks.", "__module__": cls.__module__})
