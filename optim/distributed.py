"""The optimizers on real processes with ``torch.distributed`` (gloo on CPU, NCCL on CUDA).

* :class:`DistributedDIFF2GD` (and DP-GD, T = 1): every rank is a client holding its own shard.
  Each round the ranks all-reduce their clipped means ``(1/P) ClippedMean(D_p)``; the server rank
  (``src``, default 0) adds the DP noise from ITS generator -- the same stream as the one-process
  simulation's -- and broadcasts the release ``v~_r``; every rank applies the update.
* :class:`DistributedClipD2P`: every rank is a node of the decentralised network.  It samples and
  adds its noise with its own generators (node i's streams are those of node i in the
  simulation, :func:`optim._core.node_seeds`), then pushes ``(x^{k+1/2}, w)`` to its out-neighbour
  and receives from its in-neighbour on the time-varying exponential graph (point-to-point
  ``isend`` / ``irecv``).

Same seeds, same iterates as :class:`optim.DIFF2GD` / :class:`optim.ClipD2P` (to float rounding).
A peer that dies or hangs makes every collective or receive fail within the process group's
timeout (:func:`init_process_group`); the run then raises :class:`DistributedRunError` naming the
rank and the operation.  Checkpoints are per rank (``PATH.rank<r>``).  See docs/distributed.md.
"""

from __future__ import annotations

import datetime
import math
import os
import sys
from typing import NoReturn

import torch
import torch.distributed as dist

from .. import mechanisms as M
from ._core import NoiseSource, PrivateOptimizer, _check_clip, _check_lr, flat, node_seeds, unflat
from .clipping import clipped_grad_sum
from .d2p import NoGuarantee
from .diff2 import DIFF2BVR, DIFF2GD
from .graph import VARIANTS, send_offset

__all__ = ["DistributedRunError", "init_process_group", "shutdown", "abandon", "DistributedDIFF2GD", "DistributedDIFF2BVR",
           "DistributedClipD2P",
           "DistributedConstD2P", "DistributedAdaD2P"]


class DistributedRunError(RuntimeError):
    """A peer process died, hung past the timeout, or lost its connection."""


def init_process_group(backend: str = "gloo", *, timeout_s: float = 60.0, init_method: str | None = None,
                       rank: int | None = None, world_size: int | None = None) -> None:
    """``torch.distributed.init_process_group`` with a timeout that bounds every collective and
    receive (a dead or hung peer is detected within it).  Without ``rank``/``world_size`` the
    ``torchrun`` environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) is used."""
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend={backend!r} is not allowed: expected 'gloo' (CPU) or 'nccl' (CUDA).")
    t = float(timeout_s)
    if not t > 0 or math.isinf(t):
        raise ValueError(f"timeout_s={timeout_s!r} is not allowed: expected a finite number > 0.")
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
    """Leave this process after a failed run (a :class:`DistributedRunError`): flush stdout and
    stderr, then ``os._exit(code)``.  Once a peer has died the process group cannot be torn down
    cleanly -- destroying it, or letting the interpreter exit normally, can abort the process
    inside gloo ("terminate called without an active exception", exit -6) instead of exiting
    with ``code``.  Write any error report (and close its file) before calling this."""
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


def _world(expected: int, what: str) -> tuple[int, int]:
    if not dist.is_initialized():
        raise ValueError("torch.distributed is not initialised: call optim.distributed.init_process_group first "
                         "(or launch with torchrun).")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != expected:
        raise ValueError(f"world_size={world} is not allowed: the calibration is for {what}={expected} "
                         "(one process each).")
    return rank, world


class DistributedDIFF2GD(DIFF2GD):
    """DIFF2-GD with one client per rank.  ``shard``: this rank's ``(x, y)``; ``mechanism``:
    :class:`mechanisms.DIFF2GD` (or :class:`mechanisms.DPGD`) with ``clients`` = world size.
    Only the server rank ``src`` draws noise (and records releases)."""

    _mechanism_types = (M.DIFF2GD, M.DPGD)

    def __init__(self, model, loss_fn, shard, mechanism, noise, *, C1: float, C2: float = math.inf, lr: float,
                 src: int = 0, **kwargs):
        if not isinstance(mechanism, self._mechanism_types):
            raise ValueError(f"mechanism={mechanism!r} is not allowed: expected mechanisms.DIFF2GD or DPGD.")
        self.rank, world = _world(mechanism.clients, "clients")
        if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < world:
            raise ValueError(f"src={src!r} is not allowed: expected a rank in [0, {world - 1}].")
        self.src = src
        if isinstance(mechanism, M.DPGD):
            self.name = "dp-gd"
            if hasattr(noise, "algorithm"):
                noise = dict(noise.noise)
        super().__init__(model, loss_fn, [shard] * world, mechanism, noise, C1=C1, C2=C2, lr=lr, **kwargs)
        self.x, self.y = self.shards[0]
        n_p = self.x.shape[0]
        self.w = torch.full((n_p,), 1.0 / (self.P * n_p), device=self.device, dtype=self.dtype)
        self.w_all, self.shards = self.w, [self.shards[0]]

    def set_canary(self, gradient, holder: int = 0) -> None:
        raise ValueError("set_canary is not allowed in a distributed run: audit the one-process optimizer.")

    def _aggregate(self, part):
        out = part.clone()
        _guard("all_reduce of the clipped means", dist.all_reduce, out, op=dist.ReduceOp.SUM)
        return out

    def _release(self, v, std, **kw):
        vt = self.noise.privatize(v, std, **kw) if self.rank == self.src else torch.empty_like(v)
        _guard("broadcast of the release", dist.broadcast, vt, src=self.src)
        return vt

    def evaluate(self, params=None) -> dict:
        """Loss and ||grad f|| of the global objective (collective: every rank adds its clients' part)."""
        return _global_metrics(*self._loss_and_grad(params or self.params(), self.x, self.y, self.w))

    def save_checkpoint(self, path) -> None:
        super().save_checkpoint(f"{path}.rank{self.rank}")

    def load_checkpoint(self, path) -> None:
        super().load_checkpoint(f"{path}.rank{self.rank}")


class DistributedDIFF2BVR(DistributedDIFF2GD, DIFF2BVR):
    """DIFF2-BVR-L-SGD with one client per rank: the DIFF2 round as :class:`DistributedDIFF2GD`,
    then client ``p_r = 1 + (r mod P)`` alone runs the K - 1 noisy local steps on its shard -- its
    own minibatch sampling and its own local noise stream -- and broadcasts ``x_{K,r-1}`` and
    ``x^out_r`` to the others."""

    name = "diff2-bvr"
    _mechanism_types = (M.DIFF2BVR,)

    def _step(self, r: int) -> None:
        self._offer_output(self.x_out if self.x_out is not None else self.params())
        x0 = self.params()
        x1 = self._diff2_round(r)
        p = r % self.P
        d = flat(x0).numel()
        if self.rank == p:
            cur, keep, j_end = self._local_phase(r, p, self.shards[0], x0, x1, self.noise)
            buf = torch.cat([flat(cur), flat(keep), torch.tensor([float(j_end)], dtype=self.dtype,
                                                                 device=self.device)])
        else:
            buf = torch.empty(2 * d + 1, dtype=self.dtype, device=self.device)
        _guard(f"broadcast of client {p}'s local steps", dist.broadcast, buf, src=p)
        self.local[p] += self.K - 1
        self.x_out = unflat(buf[d:2 * d].clone(), x0)
        self._set_params(unflat(buf[:d].clone(), x0))
        self.prev_point, self.point = self.point, int(round(float(buf[-1])))


class DistributedClipD2P(PrivateOptimizer):
    """ClipD2P with one node per rank (world size = number of nodes).  ``node_data``: this rank's
    ``(x, y)`` (J records); ``mechanism``: :class:`mechanisms.ClipD2P`.  ``x_local``, ``w_local``
    are this node's push-sum state; the model holds ``z = x / w``."""

    name = "clipd2p"
    _mechanism_type = M.ClipD2P

    def __init__(self, model, loss_fn, node_data, mechanism, noise, *, C: float, lr: float, graph: str = "paper",
                 seed: int = 0, record: bool = False, **kwargs):
        if type(mechanism) is not self._mechanism_type:
            raise ValueError(f"mechanism={mechanism!r} is not allowed: expected "
                             f"mechanisms.{self._mechanism_type.__name__}.")
        if not dist.is_initialized():
            _world(0, "nodes")
        self.rank, self.nodes = dist.get_rank(), dist.get_world_size()
        super().__init__(model, loss_fn, mechanism=mechanism, noise=noise, seed=seed, record=record, **kwargs)
        if graph not in VARIANTS:
            raise ValueError(f"graph={graph!r} is not allowed: expected one of {VARIANTS}.")
        self.graph, self.lr, self.C = graph, _check_lr(lr), _check_clip(C, "C")
        self.sigma = self._need("sigma")
        if self._mechanism_type is M.ClipD2P and self.C == math.inf and self.sigma > 0:
            raise ValueError(f"C=inf is not allowed with sigma={self.sigma}: unclipped gradients have unbounded "
                             "sensitivity.")
        self.xs, self.ys = (self._to(t) for t in node_data)
        self.J = self.xs.shape[0]
        if self.J < mechanism.samples_per_node or self.ys.shape[0] != self.J:
            raise ValueError(f"node_data has J={self.J} records, which is not allowed: expected as many targets and "
                             f"J >= samples_per_node={mechanism.samples_per_node}.")
        self.total_rounds = mechanism.iterations
        self.relation = getattr(mechanism, "relation", "replace-one")
        self.poisson = self.relation == "add/remove"
        data_seeds, noise_seeds = node_seeds(seed, self.nodes)
        self.node_generator = torch.Generator(device=self.device).manual_seed(data_seeds[self.rank])
        self.noise = NoiseSource(noise_seeds[self.rank], self.device, self.dtype, record)
        self.like = self.params()
        self.x_local = flat(self.like)
        self.w_local = torch.ones((), device=self.device, dtype=self.dtype)

    def _step(self, r: int) -> None:
        k = r - 1
        z = unflat(self.x_local / self.w_local, self.like)
        if self.poisson:
            keep = torch.rand(self.J, generator=self.node_generator, device=self.device) < 1.0 / self.J
            idx = keep.nonzero().flatten()
        else:
            idx = torch.randint(self.J, (1,), generator=self.node_generator, device=self.device)
        if idx.numel():
            sums, _ = clipped_grad_sum(self.model, self.loss_fn, self.xs[idx], self.ys[idx], self._clip, z,
                                       method="vmap")
            g = flat({n: sums[n] for n in self.like})
        else:
            g = torch.zeros_like(self.x_local)
        noisy = self.noise.privatize(g, self._std(g), round=r, name=f"node {self.rank}: g + N",
                                     sensitivity=self._sensitivity(), relation=self.relation)
        half = self.x_local - self.lr * noisy
        o = send_offset(self.nodes, k, self.graph)
        if o == 0:
            self.x_local = half
        else:
            buf = torch.cat([half, self.w_local.reshape(1)])
            got = torch.empty_like(buf)
            dst, frm = (self.rank + o) % self.nodes, (self.rank - o) % self.nodes
            reqs = [_guard("send to its out-neighbour", dist.isend, buf, dst),
                    _guard("receive from its in-neighbour", dist.irecv, got, frm)]
            for q in reqs:
                _guard(f"push-sum exchange of iteration {k}", q.wait)
            self.x_local = 0.5 * half + 0.5 * got[:-1]
            self.w_local = 0.5 * self.w_local + 0.5 * got[-1]
        self.counts["iteration"] += 1
        self.point += 1
        self._set_params(unflat(self.x_local / self.w_local, self.like))

    # ClipD2P: clip at C, std sigma C, claimed sensitivity C (add/remove) or 2C (replace-one)
    @property
    def _clip(self) -> float:
        return self.C

    def _std(self, g) -> float:
        return 0.0 if self.sigma == 0.0 else self.mechanism.std("iteration", self.sigma, self.C)

    def _sensitivity(self):
        return self.mechanism.sensitivity("iteration", self.C)

    def evaluate(self, params=None) -> dict:
        """Loss and ||grad f|| at the network average x-bar over all nodes' data (collective)."""
        xbar = self.x_local.clone()
        _guard("all_reduce of the average", dist.all_reduce, xbar, op=dist.ReduceOp.SUM)
        xbar = xbar / self.nodes
        w = torch.full((self.J,), 1.0 / (self.nodes * self.J), device=self.device, dtype=self.dtype)
        return _global_metrics(*self._loss_and_grad(unflat(xbar, self.like), self.xs, self.ys, w))

    def _events(self) -> list:
        return self.mechanism.events(self.levels, self.counts)

    def _state(self) -> dict:
        return {"x": self.x_local, "w": self.w_local, "node_rng": self.node_generator.get_state()}

    def _load_state(self, state: dict) -> None:
        self.x_local, self.w_local = state["x"], state["w"]
        self.node_generator.set_state(state["node_rng"].cpu())

    def save_checkpoint(self, path) -> None:
        super().save_checkpoint(f"{path}.rank{self.rank}")

    def load_checkpoint(self, path) -> None:
        super().load_checkpoint(f"{path}.rank{self.rank}")


class DistributedConstD2P(DistributedClipD2P):
    """ConstD2P on processes: no clipping, std sigma G with an estimated, NOT enforced G (AdaD2P-E2)."""

    name = "constd2p"
    _mechanism_type = M.ConstD2P

    def __init__(self, model, loss_fn, node_data, mechanism, noise, *, G: float, lr: float, **kwargs):
        super().__init__(model, loss_fn, node_data, mechanism, noise, C=G, lr=lr, **kwargs)

    @property
    def _clip(self) -> float:
        return math.inf


class DistributedAdaD2P(NoGuarantee, DistributedClipD2P):
    """AdaD2P on processes: std sigma ||g|| -- NO valid privacy guarantee (AdaD2P-E1)."""

    name = "adad2p"
    _mechanism_type = M.AdaD2P

    def __init__(self, model, loss_fn, node_data, mechanism, noise, *, lr: float, **kwargs):
        super().__init__(model, loss_fn, node_data, mechanism, noise, C=math.inf, lr=lr, **kwargs)

    @property
    def _clip(self) -> float:
        return math.inf

    def _std(self, g) -> float:
        return self.sigma * float(torch.linalg.vector_norm(g))

    def _sensitivity(self):
        return None
