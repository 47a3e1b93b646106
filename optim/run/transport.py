"""Transports: how one algorithm's update kernel talks to the other participants.

Every reference optimizer is written once, as a kernel over the clients (DIFF2 family) or nodes
(D2P family) *held by this process*.  A transport says which those are and carries the few
operations that cross participants:

===============================  =========================================  =================================
operation                        :class:`OneProcess` (simulation)           torch.distributed (gloo, NCCL)
===============================  =========================================  =================================
``here(count)``                  every client / node                        the rank's own one
``share(idx)``                   every record of the batch                  records rank, rank + W, ... of it
``total(count)``                 ``count``                                  the world size
``aggregate(t)``                 ``t`` (all clients already summed in it)   ``all_reduce(SUM)``
``release(privatizer, v, std)``  ``privatizer.privatize(v, std)``           the server draws, ``broadcast``
``run_on(p, fn, like)``          ``fn()``                                   client p runs, ``broadcast``
``mix(X, w, k, graph)``          ``P^k X``, ``P^k w`` (one matrix product)  push-sum ``isend``/``irecv``
``average(X)``                   ``X.mean(0)``                              ``all_reduce`` / n
``view(X, w)``                   the network average                        this node's ``z = x / w``
``metrics(loss, grad)``          as they are                                ``all_reduce`` of both
``agree(root)``                  ``root``                                   rank 0's, ``broadcast``
===============================  =========================================  =================================

:class:`OneProcess` lives here; the torch.distributed transports live in
:mod:`dpcalib.optim.algorithms.distributed` (they import ``torch.distributed``).  An algorithm never branches
on the transport: a new transport (another backend, an audit-side follower) is a new class with
these methods, and every algorithm runs on it unchanged.
"""

from __future__ import annotations

import torch

from .graph import mixing_matrix

__all__ = ["OneProcess", "ONE_PROCESS"]


class OneProcess:
    """All clients / nodes simulated in this process (the default transport)."""

    name = "one-process"
    holds_everyone = True      # one process sees every participant (a check may plant a record)

    def here(self, count: int) -> list[int]:
        """The participants this process runs: all ``count`` of them."""
        return list(range(count))

    def total(self, held: int) -> int:
        """How many participants the network has, given that this process holds ``held``."""
        return held

    def share(self, idx: torch.Tensor) -> torch.Tensor:
        """The records of a one-dataset batch whose per-example terms this process computes: all."""
        return idx

    def aggregate(self, part: torch.Tensor) -> torch.Tensor:
        """Sum of every client's weighted part: here all clients are in ``part`` already."""
        return part

    def release(self, privatizer, value: torch.Tensor, std: float, **kw) -> torch.Tensor:
        """The server's ``privatizer`` adds the noise; every client gets the released value."""
        return privatizer.privatize(value, std, **kw)

    def run_on(self, p: int, fn, like: dict):
        """Run client p's local phase ``fn() -> (x_K, x_out)``; every process gets its result."""
        return fn()

    def mix(self, half: torch.Tensor, w: torch.Tensor, k: int, graph: str):
        """Push-sum mixing of iteration k: ``(P^k X^{k+1/2}, P^k w^k)`` for all nodes at once."""
        P = mixing_matrix(half.shape[0], k, graph, dtype=half.dtype, device=half.device)
        return P @ half, P @ w

    def average(self, X: torch.Tensor) -> torch.Tensor:
        """The network average x-bar of the nodes' x (flat)."""
        return X.mean(0)

    def view(self, X: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """What the model holds after an iteration: the network average."""
        return X.mean(0)

    def metrics(self, loss: torch.Tensor, grad: torch.Tensor) -> dict:
        """Loss and gradient norm of the global objective from this process's share (all of it)."""
        return {"loss": float(loss), "grad_norm": float(torch.linalg.vector_norm(grad))}

    def path(self, path) -> str:
        """The checkpoint file of this process."""
        return path

    def agree(self, root: bytes) -> bytes:
        """The run's random root, the same on every process of the run: here, ``root`` itself."""
        return root


ONE_PROCESS = OneProcess()
