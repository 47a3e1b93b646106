"""The optimizers on real processes with ``torch.distributed`` (gloo on CPU, NCCL on CUDA).

* :class:`DistributedDIFF2GD` (and DP-GD, T = 1): every rank is a client holding its own shard.
  Each round the ranks all-reduce their clipped means ``(1/P) ClippedMean(D_p)``; the server rank
  (``src``, default 0) adds the DP noise from ITS generator -- the same stream as the one-process
  simulation's -- and broadcasts the release ``v~_r``; every rank applies the update.
* :class:`DistributedClipD2P`: every rank is a node of the decentralised network.  It samples and
  adds its noise with its own generators (node i's streams are those of node i in the
  simulation, :func:`dpcalib.optim.algorithms.core.node_seeds`), then pushes ``(x^{k+1/2}, w)`` to its out-neighbour
  and receives from its in-neighbour on the time-varying exponential graph (point-to-point
  ``isend`` / ``irecv``).

The algorithms are not re-written here: each ``Distributed*`` class is the one-process optimizer
of :mod:`dpcalib.optim` running on a torch.distributed transport (:class:`ClientsOnRanks`,
:class:`NodesOnRanks`; the protocol is in :mod:`dpcalib.optim.run.transport`).  So the update, the
noise, the sensitivity claimed and the privacy accounted are the same code in both, and the same
seeds give the same iterates as :class:`dpcalib.optim.DIFF2GD` / :class:`dpcalib.optim.ClipD2P`
(to float rounding).
A peer that dies or hangs makes every collective or receive fail within the process group's
timeout (:func:`init_process_group`); the run then raises :class:`DistributedRunError` naming the
rank and the operation.  Checkpoints are per rank (``PATH.rank<r>``).  See docs/how-to/distributed.md.
"""

from __future__ import annotations

import datetime
import math
import os
import sys
from typing import NoReturn

import torch
import torch.distributed as dist

from ...accountant.validation import InputError
from ..tensors import flat, unflat
from .graph import send_offset

__all__ = ["DistributedRunError", "init_process_group", "shutdown", "abandon", "ClientsOnRanks", "NodesOnRanks",
           "BatchOnRanks"]


class DistributedRunError(RuntimeError):
    """A peer process died, hung past the timeout, or lost its connection."""


def init_process_group(backend: str = "gloo", *, timeout_s: float = 60.0, init_method: str | None = None,
                       rank: int | None = None, world_size: int | None = None) -> None:
    """``torch.distributed.init_process_group`` with a timeout that bounds every collective and
    receive (a dead or hung peer is detected within it).  Without ``rank``/``world_size`` the
    ``torchrun`` environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) is used.

    Args:
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (CUDA).
        timeout_s: the timeout of every collective and receive, in seconds, finite and > 0.
        init_method: the rendezvous URL, or None (the environment's).
        rank: this process's rank, or None (from the environment).
        world_size: the number of processes (given with ``rank``).

    Raises:
        InputError: if the backend is not ``"gloo"``/``"nccl"`` or the timeout is not a finite
            number > 0.
    """
    if backend not in ("gloo", "nccl"):
        raise InputError(f"backend={backend!r} is not allowed: expected 'gloo' (CPU) or 'nccl' (CUDA).")
    t = float(timeout_s)
    if not t > 0 or math.isinf(t):
        raise InputError(f"timeout_s={timeout_s!r} is not allowed: expected a finite number > 0.")
    kw = {"timeout": datetime.timedelta(seconds=t)}
    if init_method is not None:
        kw["init_method"] = init_method
    if rank is not None:
        kw["rank"], kw["world_size"] = int(rank), int(world_size)
    dist.init_process_group(backend, **kw)


def shutdown() -> None:
    """End a distributed run on this rank: a barrier, so that no rank tears down its connections
    while a peer still communicates with it, then ``destroy_process_group`` (which joins the
    backend's worker threads while the interpreter is fully alive).  Call it on every rank after
    the last collective, before the process exits; a no-op when no process group is initialised.
    A peer that died or hangs makes the barrier raise :class:`DistributedRunError` within the
    timeout."""
    if not dist.is_initialized():
        return
    try:
        _guard("barrier before shutdown", dist.barrier)
    finally:
        dist.destroy_process_group()


def abandon(code: int = 1) -> NoReturn:
    """Leave this process after a failed run (a :class:`DistributedRunError`, or an error every rank
    raises at once, such as a refusal of per-rank seeds): flush stdout and stderr, then
    ``os._exit(code)``.  Once a peer has died or is going away the process group cannot be torn down
    cleanly -- destroying it, or letting the interpreter exit normally, can abort the process
    inside gloo ("terminate called without an active exception", exit -6) instead of exiting
    with ``code``.  Write any error report (and close its file) before calling this.

    Args:
        code: the exit status.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 -- a closed stream must not keep the process alive
            pass
    os._exit(int(code))


def _guard(what: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # gloo raises RuntimeError / DistBackendError subclasses
        rank = dist.get_rank() if dist.is_initialized() else "?"
        raise DistributedRunError(f"rank {rank}: {what} failed -- a peer process died, hung past the timeout or "
                                  f"lost its connection; stopping the run ({' '.join(str(exc).split())[:300]})") from None


def _global_metrics(loss: torch.Tensor, grad: torch.Tensor) -> dict:
    """Sum this rank's share of the loss and of the gradient over all ranks."""
    buf = torch.cat([loss.reshape(1), grad])
    _guard("all_reduce of the metrics", dist.all_reduce, buf, op=dist.ReduceOp.SUM)
    return {"loss": float(buf[0]), "grad_norm": float(torch.linalg.vector_norm(buf[1:]))}


class _Ranks:
    """What the torch.distributed transports share: one participant per rank."""

    name = "torch.distributed"
    holds_everyone = False     # a check that plants a record needs every participant in one process

    def __init__(self, expected: int | None = None, what: str = "participants"):
        if not dist.is_initialized():
            raise InputError("torch.distributed is not initialised: call dpcalib.optim.algorithms.distributed."
                             "init_process_group first (or launch with torchrun).")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        if expected is not None and self.world != expected:
            raise InputError(f"world_size={self.world} is not allowed: the calibration is for {what}={expected} "
                             "(one process each).")

    def here(self, count: int) -> list[int]:
        return [self.rank]

    def total(self, held: int) -> int:
        return self.world

    def metrics(self, loss: torch.Tensor, grad: torch.Tensor) -> dict:
        return _global_metrics(loss, grad)

    def path(self, path) -> str:
        return f"{path}.rank{self.rank}"

    def agree(self, root: bytes) -> bytes:
        """Rank 0's ``root`` on every rank (a broadcast inside the process group: the run's secret streams
        are shared with its own processes only)."""
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
        buf = torch.tensor(list(root), dtype=torch.uint8, device=device)
        _guard("broadcast of the run's random root", dist.broadcast, buf, src=0)
        return bytes(buf.cpu().tolist())

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's ``t``, stacked in rank order (an ``all_gather`` inside the process group).

        Args:
            t: a tensor of the same shape and dtype on every rank.

        Returns:
            A tensor ``[world, *t.shape]`` on ``t``'s device.
        """
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
        part = t.to(device).contiguous()
        out = [torch.empty_like(part) for _ in range(self.world)]
        _guard("all_gather of the ranks' check", dist.all_gather, out, part)
        return torch.stack(out).to(t.device)


class _ServerSums(_Ranks):
    """Ranks whose parts are summed (``all_reduce``) and whose release is noised once, by the server
    rank ``src`` from its generator (the simulation's stream), and broadcast."""

    _summed = "clipped sums"             # what aggregate() all-reduces (named in a failure)

    def __init__(self, src: int, expected: int | None = None, what: str = "participants"):
        super().__init__(expected, what)
        if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < self.world:
            raise InputError(f"src={src!r} is not allowed: expected a rank in [0, {self.world - 1}].")
        self.src = src

    def aggregate(self, part: torch.Tensor) -> torch.Tensor:
        out = part.clone()
        _guard(f"all_reduce of the {self._summed}", dist.all_reduce, out, op=dist.ReduceOp.SUM)
        return out

    def release(self, draw) -> torch.Tensor:
        # every rank draws the same noise from the stream it shares with the server (one root, one seed), so
        # that every rank's noise stream -- and so every rank's checkpoint -- is where the server's is; the
        # server's release is the one broadcast
        vt = draw()
        _guard("broadcast of the release", dist.broadcast, vt, src=self.src)
        return vt


class BatchOnRanks(_ServerSums):
    """DP-SGD, DP-SRM, DiceSGD data-parallel: every rank holds the dataset and draws the same batch
    (the same data generator, so the same sampling as one process); rank r computes the per-example
    terms of records r, r + W, r + 2W, ... of the batch; the clipped sums are all-reduced; the
    server rank ``src`` adds the noise once and broadcasts the release.

    Args:
        src: the server rank that adds the noise, in [0, world size).

    Raises:
        InputError: if torch.distributed is not initialised or ``src`` is not a rank.
    """

    def __init__(self, src: int = 0):
        super().__init__(src)

    def share(self, idx: torch.Tensor) -> torch.Tensor:
        """The records of the batch whose per-example terms this rank computes: ``idx[rank::world]``.

        Args:
            idx: the batch's record indices, a 1-d tensor (the same on every rank).

        Returns:
            This rank's share of ``idx``.
        """
        return idx[self.rank::self.world]

    def metrics(self, loss: torch.Tensor, grad: torch.Tensor) -> dict:
        # every rank holds the whole dataset: its objective is already the global one
        """Loss and gradient norm as they are (every rank holds the whole dataset).

        Args:
            loss: the loss (a scalar tensor).
            grad: its gradient (flat).

        Returns:
            ``{"loss": float, "grad_norm": float}``.
        """
        return {"loss": float(loss), "grad_norm": float(torch.linalg.vector_norm(grad))}


class ClientsOnRanks(_ServerSums):
    """DIFF2 family: rank p is client p.  The clipped means are all-reduced; the server rank ``src``
    adds the noise and broadcasts the release; client p_r runs its local steps and broadcasts the
    result.

    Args:
        clients: the number of clients P; the world size must equal it.
        src: the server rank that adds the noise, in [0, P).

    Raises:
        InputError: if torch.distributed is not initialised, the world size is not ``clients``,
            or ``src`` is not a rank.
    """

    _summed = "clipped means"

    def __init__(self, clients: int, src: int = 0):
        super().__init__(src, clients, "clients")

    def run_on(self, p: int, fn, like: dict):
        """Client ``p`` runs its local phase and broadcasts ``(x_K, x_out)`` to every rank.

        Args:
            p: the rank (client) that runs the phase.
            fn: the local phase, ``fn() -> (x_K, x_out)`` (called on rank ``p`` only).
            like: the parameter dict whose shapes the results take.

        Returns:
            ``(x_K, x_out)``, two parameter dicts shaped as ``like``.

        Raises:
            DistributedRunError: if the broadcast fails (a peer died, hung or lost its connection).
        """
        x = flat(like)
        d = x.numel()
        if self.rank == p:
            cur, keep = fn()
            buf = torch.cat([flat(cur), flat(keep)])
        else:
            buf = torch.empty(2 * d, dtype=x.dtype, device=x.device)
        _guard(f"broadcast of client {p}'s local steps", dist.broadcast, buf, src=p)
        return unflat(buf[:d].clone(), like), unflat(buf[d:2 * d].clone(), like)


class NodesOnRanks(_Ranks):
    """D2P family: rank i is node i.  Push-sum sends ``(x^{k+1/2}, w)`` to the out-neighbour of
    iteration k and receives from the in-neighbour (``isend``/``irecv``, both waited); the model
    holds the node's own ``z = x / w``; the network average is an all-reduce."""

    def mix(self, half: torch.Tensor, w: torch.Tensor, k: int, graph: str):
        """Push-sum exchange of iteration ``k``: send ``(x^{k+1/2}, w)`` to the out-neighbour, receive
        from the in-neighbour, keep half.

        Args:
            half: this node's half-step parameters, shape ``(1, d)``.
            w: this node's push-sum weight, shape ``(1,)``.
            k: the iteration, >= 0.
            graph: the exponential graph's variant, ``"paper"`` or ``"sgp"``.

        Returns:
            The mixed ``(X, w)`` (unchanged where nobody sends at ``k``).

        Raises:
            DistributedRunError: if the exchange fails.
        """
        o = send_offset(self.world, k, graph)
        if o == 0:
            return half, w
        buf = torch.cat([half[0], w])
        got = torch.empty_like(buf)
        dst, frm = (self.rank + o) % self.world, (self.rank - o) % self.world
        reqs = [_guard("send to its out-neighbour", dist.isend, buf, dst),
                _guard("receive from its in-neighbour", dist.irecv, got, frm)]
        for q in reqs:
            _guard(f"push-sum exchange of iteration {k}", q.wait)
        return (0.5 * half[0] + 0.5 * got[:-1]).unsqueeze(0), 0.5 * w + 0.5 * got[-1:]

    def average(self, X: torch.Tensor) -> torch.Tensor:
        """The network average of the nodes' x (an all-reduce).

        Args:
            X: this node's parameters, shape ``(1, d)``.

        Returns:
            The average over the ranks (flat).

        Raises:
            DistributedRunError: if the all-reduce fails.
        """
        xbar = X[0].clone()
        _guard("all_reduce of the average", dist.all_reduce, xbar, op=dist.ReduceOp.SUM)
        return xbar / self.world

    def view(self, X: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """What the model holds: this node's ``z = x / w``.

        Args:
            X: this node's parameters, shape ``(1, d)``.
            w: this node's push-sum weight, shape ``(1,)``.

        Returns:
            ``X[0] / w[0]``.
        """
        return X[0] / w[0]


