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
``release(draw)``                ``draw()``                                 the server's ``draw()``, ``broadcast``
``run_on(p, fn, like)``          ``fn()``                                   client p runs, ``broadcast``
``mix(X, w, k, graph)``          ``P^k X``, ``P^k w`` (one matrix product)  push-sum ``isend``/``irecv``
``average(X)``                   ``X.mean(0)``                              ``all_reduce`` / n
``view(X, w)``                   the network average                        this node's ``z = x / w``
``metrics(loss, grad)``          as they are                                ``all_reduce`` of both
``agree(root)``                  ``root``                                   rank 0's, ``broadcast``
``gather(t)``                    ``t[None]``                                every rank's ``t``, ``all_gather``
===============================  =========================================  =================================

:class:`OneProcess` lives here; the torch.distributed transports live in
:mod:`dpcalib.optim.algorithms.distributed` (they import ``torch.distributed``).  An algorithm never branches
on the transport: a new transport (another backend, an audit-side follower) is a new class with
these methods, and every algorithm runs on it unchanged.
"""

from __future__ import annotations

import torch

from .graph import mixing_matrix

__all__ = ["ONE_PROCESS"]


class OneProcess:
    """All clients / nodes simulated in this process (the default transport)."""

    name = "one-process"
    holds_everyone = True      # one process sees every participant (a check may plant a record)

    def here(self, count: int) -> list[int]:
        """The participants this process runs: all ``count`` of them.

        Args:
            count: the number of clients / nodes of the run, >= 1.

        Returns:
            The indices ``0..count-1``.
        """
        return list(range(count))

    def total(self, held: int) -> int:
        """How many participants the network has, given that this process holds ``held``.

        Args:
            held: the number of participants this process holds.

        Returns:
            The number of participants of the network (here ``held``).
        """
        return held

    def share(self, idx: torch.Tensor) -> torch.Tensor:
        """The records of a one-dataset batch whose per-example terms this process computes: all.

        Args:
            idx: the batch's record indices, a 1-d tensor.

        Returns:
            The indices this process computes (here ``idx`` itself).
        """
        return idx

    def aggregate(self, part: torch.Tensor) -> torch.Tensor:
        """Sum of every client's weighted part: here all clients are in ``part`` already.

        Args:
            part: this process's weighted sum of the clients' terms.

        Returns:
            The sum over the network (here ``part`` itself).
        """
        return part

    def release(self, draw) -> torch.Tensor:
        """The server makes the release (``draw()``: the noise source adds the noise); every client gets it.
        The transport says who draws and how the others receive it, never what is drawn: the std, the
        record and the noise source stay with the caller.

        Args:
            draw: ``draw() -> Tensor``, the release (e.g. ``lambda: privatizer.privatize(value, std, ...)``).

        Returns:
            The released (noisy) tensor.
        """
        return draw()

    def run_on(self, p: int, fn, like: dict):
        """Run client p's local phase ``fn() -> (x_K, x_out)``; every process gets its result.

        Args:
            p: the index of the client that runs the phase.
            fn: the local phase, ``fn() -> (x_K, x_out)``.
            like: tensors shaped as the result (used by transports that broadcast it).

        Returns:
            ``fn()``'s result.
        """
        return fn()

    def mix(self, half: torch.Tensor, w: torch.Tensor, k: int, graph: str):
        """Push-sum mixing of iteration k: ``(P^k X^{k+1/2}, P^k w^k)`` for all nodes at once.

        Args:
            half: the nodes' half-step parameters ``X^{k+1/2}``, one row per node.
            w: the nodes' push-sum weights ``w^k``.
            k: the iteration, >= 0.
            graph: the exponential graph's variant, ``"paper"`` or ``"sgp"`` (:func:`~.graph.mixing_matrix`).

        Returns:
            ``(P^k X^{k+1/2}, P^k w^k)``.
        """
        P = mixing_matrix(half.shape[0], k, graph, dtype=half.dtype, device=half.device)
        return P @ half, P @ w

    def average(self, X: torch.Tensor) -> torch.Tensor:
        """The network average x-bar of the nodes' x (flat).

        Args:
            X: the nodes' parameters, one row per node.

        Returns:
            The mean over the nodes (flat).
        """
        return X.mean(0)

    def view(self, X: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """What the model holds after an iteration: the network average.

        Args:
            X: the nodes' parameters, one row per node.
            w: the nodes' push-sum weights (unused here).

        Returns:
            The mean over the nodes.
        """
        return X.mean(0)

    def metrics(self, loss: torch.Tensor, grad: torch.Tensor) -> dict:
        """Loss and gradient norm of the global objective from this process's share (all of it).

        Args:
            loss: the global objective's loss (a scalar tensor).
            grad: its gradient (flat).

        Returns:
            ``{"loss": float, "grad_norm": float}``.
        """
        return {"loss": float(loss), "grad_norm": float(torch.linalg.vector_norm(grad))}

    def path(self, path) -> str:
        """The checkpoint file of this process.

        Args:
            path: the run's checkpoint path.

        Returns:
            This process's checkpoint path (here ``path``).
        """
        return path

    def agree(self, root: bytes) -> bytes:
        """The run's random root, the same on every process of the run: here, ``root`` itself.

        Args:
            root: this process's random root.

        Returns:
            The run's common root (here ``root``).
        """
        return root

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Every process's ``t``, stacked in rank order (the checks that the ranks agree use it).

        Args:
            t: a tensor of the same shape and dtype on every process.

        Returns:
            ``t[None]``: this one process's.
        """
        return t.unsqueeze(0)


ONE_PROCESS = OneProcess()
