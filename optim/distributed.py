"""Opacus's ``opacus.distributed``: :class:`DifferentiallyPrivateDistributedDataParallel` (scripts import it as
``DPDDP``), the module wrapper of a data-parallel private run.

In Opacus the wrapper only makes the processes start equal: it broadcasts rank 0's parameters and is the
module otherwise; Opacus's engine, seeing it, shares the batches out and sums the clipped per-sample gradients
across the processes.  dpcalib's engine does that summing itself with ``make_private(..., distributed=True)``
(the clipped per-record terms are all-reduced, rank 0 draws the noise once and broadcasts the release,
docs/how-to/distributed.md), so the wrapper here does the one thing left: rank 0's parameters and buffers
on every process before the first step, which ``distributed=True`` takes as given -- every rank applies the
same release to its own copy, and copies that start apart stay apart.  ``make_private`` given the wrapper
runs with ``distributed=True``, as Opacus infers it from the wrapper.  ``nn.parallel.DistributedDataParallel`` is not
needed and not wanted: its gradient all-reduce would average what the engine already sums.
"""

from __future__ import annotations

import torch
from torch import nn

from ..accountant.validation import InputError

__all__ = ["DifferentiallyPrivateDistributedDataParallel", "average_gradients"]


def _group_or_refuse(what: str) -> None:
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        raise InputError(f"{what} is not allowed without a torch.distributed process group: call "
                         "torch.distributed.init_process_group first (every rank).")


class DifferentiallyPrivateDistributedDataParallel(nn.Module):
    """Opacus's ``DPDDP``: rank 0's parameters and buffers broadcast to every process, then the module itself.

    Args:
        model: the module; its parameters and buffers are overwritten in place by rank 0's.

    Raises:
        InputError: if no ``torch.distributed`` process group is initialised.
    """

    #: ``make_private`` given this wrapper runs with ``distributed=True`` (Opacus infers it from the wrapper)
    shares_batches_across_ranks = True

    def __init__(self, model: nn.Module):
        super().__init__()
        _group_or_refuse("DifferentiallyPrivateDistributedDataParallel")
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                torch.distributed.broadcast(t.data, 0)
        self.module = model

    def forward(self, *args, **kwargs):
        """Call the wrapped module.

        Args:
            *args: its positional inputs.
            **kwargs: its keyword inputs.

        Returns:
            Its output.
        """
        return self.module(*args, **kwargs)


def average_gradients(model: nn.Module) -> None:
    """Opacus's ``average_gradients``: every trained parameter's ``.grad`` replaced by its mean over the processes.

    Not for a private run's gradients (the engine's release is already the same on every rank); for a public
    part of a model trained beside it.

    Args:
        model: the module whose ``.grad`` to average (parameters without one are skipped).

    Raises:
        InputError: if no ``torch.distributed`` process group is initialised.
    """
    _group_or_refuse("average_gradients")
    world = torch.distributed.get_world_size()
    for p in model.parameters():
        if p.requires_grad and p.grad is not None:
            torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)
            p.grad /= world
