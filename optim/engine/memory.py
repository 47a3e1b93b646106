"""Logical batches larger than memory, in physical chunks (Opacus's ``BatchMemoryManager``).

    with BatchMemoryManager(data_loader=loader, max_physical_batch_size=64, optimizer=optimizer) as chunks:
        for x, y in chunks:
            optimizer.zero_grad(); criterion(model(x), y).backward(); optimizer.step()

Each logical batch of the private loader is cut into chunks of at most ``max_physical_batch_size``
rows; the optimizer only adds the terms of every chunk but the last (``signal_skip_step``), and
makes the step -- one release, one ledger charge -- at the last.  The per-record terms of a batch
are sums over its records, so the step is the one of a single pass over the whole batch (up to the
float rounding of the order of the sums).  An empty Poisson or balls-in-bins batch is one (empty)
chunk.
"""

from __future__ import annotations

import torch

from ...accountant.validation import InputError
from ...mechanisms.shape import BALLS_IN_BINS, POISSON

__all__ = []


def _rows(batch) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, (list, tuple)) and batch:
        return _rows(batch[0])
    if isinstance(batch, dict) and batch:
        return _rows(next(iter(batch.values())))
    raise InputError(f"a batch of type {type(batch).__name__} is not allowed: expected tensors, or tuples, lists or "
                     "dicts of tensors whose first dimension indexes the records.")


def _cut(batch, s: int, e: int):
    if isinstance(batch, torch.Tensor):
        return batch[s:e]
    if isinstance(batch, (list, tuple)):
        return type(batch)(_cut(b, s, e) for b in batch)
    if isinstance(batch, dict):
        return {k: _cut(v, s, e) for k, v in batch.items()}
    return batch


class BatchMemoryManager:
    """Context manager over ``data_loader`` (the one ``make_private`` returned) that yields physical
    chunks of at most ``max_physical_batch_size`` records and tells ``optimizer`` which are not last.

    Args:
        data_loader: the private loader ``make_private`` returned.
        max_physical_batch_size: the most records per chunk, an integer >= 1.
        optimizer: the :class:`~.optimizer.DPOptimizer` ``make_private`` returned.

    Raises:
        InputError: if ``max_physical_batch_size`` is not an integer >= 1, or ``optimizer`` has no
            ``signal_skip_step``.
    """

    def __init__(self, *, data_loader, max_physical_batch_size: int, optimizer):
        if isinstance(max_physical_batch_size, bool) or not isinstance(max_physical_batch_size, int) \
                or max_physical_batch_size < 1:
            raise InputError(f"max_physical_batch_size={max_physical_batch_size!r} is not allowed: expected an "
                             "integer >= 1.")
        if not hasattr(optimizer, "signal_skip_step"):
            raise InputError("optimizer is not allowed: expected the DPOptimizer that make_private returned.")
        self.data_loader, self.size, self.optimizer = data_loader, max_physical_batch_size, optimizer

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.optimizer.signal_skip_step(False)
        return False

    def __len__(self):
        """Physical batches per pass (Opacus's count): ``len(loader) * ceil(b / size)`` for batches of a
        fixed size ``b``; for Poisson batches the expected count, ``int(len(loader) * q n / size)``
        (sizes vary from batch to batch), and for balls-in-bins batches ``int(len(loader) * (n / t) / size)``."""
        bs = getattr(self.data_loader, "batch_sampler", None)
        steps = len(self.data_loader)
        if getattr(bs, "sampling", None) == POISSON:
            return int(steps * (bs.q * bs.n) / self.size)
        if getattr(bs, "sampling", None) == BALLS_IN_BINS:
            return int(steps * bs.expected_batch_size / self.size)
        b = getattr(bs, "b", None) or getattr(bs, "batch_size", None) or getattr(self.data_loader, "batch_size", None)
        if b is None:
            return steps
        return steps * -(-int(b) // self.size)

    def __iter__(self):
        for batch in self.data_loader:
            n = _rows(batch)
            starts = list(range(0, n, self.size)) or [0]
            for j, s in enumerate(starts):
                self.optimizer.signal_skip_step(j < len(starts) - 1)
                chunk = _cut(batch, s, min(s + self.size, n))
                if hasattr(self.data_loader, "note_batch"):
                    self.data_loader.note_batch(chunk)      # each chunk is a batch of its own records
                yield chunk
