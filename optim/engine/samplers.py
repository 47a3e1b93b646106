"""The batch samplers the accountant assumes, one per sampling of :mod:`dpcalib.mechanisms.shape`:

* :class:`PoissonBatchSampler` -- every record independently with probability ``q`` in every batch
  (variable sizes, empty batches included), ``steps`` batches per pass;
* :class:`FixedSizeBatchSampler` -- ``b`` distinct records uniformly without replacement in every
  batch (DP-SRM; its first batch may have another size, ``b0``);
* :class:`ShuffleBatchSampler` -- each epoch a uniformly random permutation cut into consecutive
  batches of ``b`` (the last one short unless ``drop_last``): ``DataLoader(shuffle=True)``, which
  is accounted by the shuffle bracket, never as Poisson;
* :class:`BallsInBinsBatchSampler` -- each epoch every record put in one of the epoch's ``t`` steps,
  uniformly and independently, the ``t`` batches yielded in step order (``Binomial(n, 1/t)`` records
  each, empty batches included): accounted by the balls-in-bins bracket, one event an epoch.

The samplers draw exactly as :class:`dpcalib.optim.data.sampling.Sampler` does from the same
generator (:mod:`dpcalib.optim.randomness`), so a loop over a loader with one of them sees the same
batches as the reference optimizer with the same seed; without a seed the generator's root is fresh
entropy, and in ``secure_mode`` the generator is ChaCha20.  Each keeps its position for a checkpoint
and resumes without replaying an unseeded stream.

With ``share=(rank, world)`` (data-parallel) every process draws the same logical batch and loads
its records ``rank, rank + world, ...`` (:class:`dpcalib.optim.run.ranks.BatchOnRanks`' share).
"""

from __future__ import annotations

import torch
from torch.utils.data import Sampler as TorchSampler

from ...accountant.validation import InputError
from ...mechanisms.shape import BALLS_IN_BINS, POISSON, SHUFFLE, WOR
from ..data.sampling import bin_batches
from ..randomness import bins, note_restored, permutation, poisson_mask

__all__ = []


class _Batches(TorchSampler):
    """A batch sampler over ``n`` records from ``generator``; ``share``: this process's part.

    Position (a checkpoint's; :class:`DPDataLoader` counts the batches the loop consumed, since workers
    draw ahead):

    * ``replayable`` (a seeded run, or the user's own generator): the generator's state at the pass's
      start, the batches drawn before it and how many of the pass were consumed -- a resumed pass draws
      the same batches and skips the consumed ones, bit for bit;
    * otherwise (fresh entropy, the default) no generator state is kept -- a resumed run draws with its
      own fresh generator, never the saved run's stream.  The pass goes on from where it was, with the
      law it would have had: Poisson and fixed-size batches are independent draws, so the pass's remaining
      batches are drawn fresh; a shuffled epoch keeps the records it has not yet used, in a fresh random
      order (a uniform permutation given its first batches is a uniform order of the rest); a balls-in-bins
      epoch throws its unused records into its remaining steps afresh (each record's bin given that it is
      not among the first ``k`` is uniform on the others).  Each record is still used at most once an epoch.

    On several processes each batch's digest (counts and sums of the logical batch's record indices and of
    this rank's share) is kept for the optimizer's check that the ranks' shares are disjoint and cover it."""

    #: does the pass hold one fixed set of records (each once)?  The resumed pass keeps the unused ones.
    epoch_wise = False

    def __init__(self, n: int, generator: torch.Generator, share=(0, 1), replayable: bool = True):
        self.n, self.generator = int(n), generator
        self.rank, self.world = (int(share[0]), int(share[1]))
        self.replayable = bool(replayable)
        self.drawn = 0                  # batches drawn so far
        self.pass_state = generator.get_state() if self.replayable else None
        self.pass_drawn, self.offset = 0, 0
        self.skip = 0
        self.resume = None              # an unseeded pass to go on with: (consumed, unused records or None)
        self.current = None             # the pass's draw, for the unused records (epoch-wise samplers)
        self.digests: list = []

    def __iter__(self):
        self.pass_state = self.generator.get_state() if self.replayable else None
        self.pass_drawn = self.drawn
        skip, self.skip = self.skip, 0
        resume, self.resume = self.resume, None
        self.digests, self.current = [], None
        self.offset = skip if resume is None else resume[0]
        draws = self._draws() if resume is None else self._rest(*resume)
        for j, idx in enumerate(draws, 0 if resume is None else resume[0]):
            self.drawn += 1
            if j >= skip:
                mine = idx[self.rank::self.world]
                if self.world > 1:
                    self.digests.append(_digest(idx) + _digest(mine))
                yield mine.tolist()

    def __len__(self):
        return self.steps

    def _draws(self):
        """The pass's batches (independent draws: ``len(self)`` of :meth:`_batch`)."""
        for _ in range(len(self)):
            yield self._batch()

    def _rest(self, consumed: int, unused):
        """The pass's batches from ``consumed`` on, drawn afresh (independent batches: the default)."""
        for _ in range(len(self) - consumed):
            yield self._batch()

    def unused(self, done: int):
        """The records the pass has not used after ``done`` batches (None: its batches are independent).

        Args:
            done: the batches of the pass consumed.

        Returns:
            None here (an epoch-wise sampler returns a long tensor of record indices).
        """
        return None

    def position(self, consumed: int) -> dict:
        """Where the loop is: the state a checkpoint keeps (see the class text).

        Args:
            consumed: the batches of the current pass the loop consumed since this iteration began.

        Returns:
            A dict of plain data and tensors: ``generator`` (a replayable run's; else None), ``drawn``, ``skip``
            (the batches of the pass done), ``unused`` and ``mid_pass``.
        """
        if self.resume is not None:                       # loaded, not yet iterated
            return {"generator": None, "drawn": self.drawn, "skip": self.resume[0], "unused": self.resume[1],
                    "mid_pass": True}
        if self.skip:
            return {"generator": self.generator.get_state(), "drawn": self.drawn, "skip": self.skip, "unused": None,
                    "mid_pass": True}
        done = self.offset + int(consumed)
        if done == 0 or done >= len(self):                # between passes: the next one starts afresh
            return {"generator": self.generator.get_state() if self.replayable else None, "drawn": self.drawn,
                    "skip": 0, "unused": None, "mid_pass": False}
        if self.replayable:
            return {"generator": self.pass_state, "drawn": self.pass_drawn, "skip": done, "unused": None,
                    "mid_pass": True}
        return {"generator": None, "drawn": self.pass_drawn + done - self.offset, "skip": done,
                "unused": self.unused(done), "mid_pass": True}

    def load_position(self, state: dict) -> None:
        """Go back to a :meth:`position`: a replayable sampler takes the saved generator state (its own
        stream, bit for bit); any other keeps its fresh generator and goes on with the pass's remaining
        batches (see the class text).

        Args:
            state: what :meth:`position` returned.

        Raises:
            InputError: if the position was saved by a replayable run and this one is not, or the reverse.
        """
        saved = state.get("generator")
        if (saved is not None) != self.replayable:
            raise InputError("data_loader is not allowed: its position was saved by a run " + (
                "with a seed (or its own generator) and this run has none" if saved is not None else
                "without a seed and this run has one") + "; resume with the same seed= (or none) as the saved run.")
        self.drawn, self.resume, self.skip = int(state["drawn"]), None, 0
        if self.replayable:
            self.generator.set_state(saved)
            note_restored([saved])
            self.skip = int(state["skip"])
        elif state.get("mid_pass", False):
            self.resume = (int(state["skip"]), state.get("unused"))


def _digest(idx: torch.Tensor) -> list:
    """Count, sum and sum of squares (mod a prime) of record indices: equal for equal sets."""
    i = idx.to(torch.int64)
    return [int(i.numel()), int(i.sum()), int(((i * i) % _PRIME).sum() % _PRIME)]


_PRIME = 2147483647


class PoissonBatchSampler(_Batches):
    """``steps`` Poisson batches at rate ``q`` per pass over the loader.

    Args:
        n: the dataset's size.
        q: the sampling rate, each record's probability of being in a batch.
        steps: batches per pass.
        generator: the ``torch.Generator`` the batches are drawn from.
        share: ``(rank, world)``: this process loads records ``rank, rank + world, ...`` of each batch.
        replayable: a checkpoint keeps the generator's state (a seeded run; see :class:`_Batches`).
    """

    sampling = POISSON

    def __init__(self, n, q: float, steps: int, generator, share=(0, 1), replayable: bool = True):
        super().__init__(n, generator, share, replayable)
        self.q, self.steps = float(q), int(steps)

    def _batch(self):
        return poisson_mask(self.generator, self.n, self.q).nonzero().flatten()


class FixedSizeBatchSampler(_Batches):
    """``steps`` batches of ``b`` distinct records per pass (the very first of the run ``b0``).

    Args:
        n: the dataset's size.
        b: the batch size.
        steps: batches per pass.
        generator: the ``torch.Generator`` the batches are drawn from.
        share: ``(rank, world)``: this process loads records ``rank, rank + world, ...`` of each batch.
        b0: the size of the run's very first batch (None: ``b``).
        replayable: a checkpoint keeps the generator's state (a seeded run; see :class:`_Batches`).
    """

    sampling = WOR

    def __init__(self, n, b: int, steps: int, generator, share=(0, 1), b0: int | None = None,
                 replayable: bool = True):
        super().__init__(n, generator, share, replayable)
        self.b, self.steps, self.b0 = int(b), int(steps), int(b if b0 is None else b0)

    def _batch(self):
        size = self.b0 if self.drawn == 0 else self.b
        return permutation(self.generator, self.n)[:size]


class _Epoch:
    """What the epoch-wise samplers share (put before :class:`_Batches` in the bases): a pass deals every
    record once, and a resumed unseeded pass deals its unused records into its remaining steps; how the
    records are dealt is the sampler's ``_deal(first, records)``."""

    def _draws(self):
        """The pass's batches: every record, dealt into the epoch's steps."""
        return self._deal(0, torch.arange(self.n))

    def _rest(self, consumed: int, unused):
        """The pass's batches from ``consumed`` on: its ``unused`` records, dealt afresh into the steps left."""
        return self._deal(consumed, unused)


class ShuffleBatchSampler(_Epoch, _Batches):
    """One epoch per pass: a random permutation cut into batches of ``b``.

    Args:
        n: the dataset's size.
        b: the batch size.
        generator: the ``torch.Generator`` the batches are drawn from.
        share: ``(rank, world)``: this process loads records ``rank, rank + world, ...`` of each batch.
        drop_last: drop the epoch's last, short batch.
        replayable: a checkpoint keeps the generator's state (a seeded run; see :class:`_Batches`).
    """

    sampling = SHUFFLE
    epoch_wise = True

    def __init__(self, n, b: int, generator, share=(0, 1), drop_last: bool = False, replayable: bool = True):
        super().__init__(n, generator, share, replayable)
        self.b, self.drop_last = int(b), bool(drop_last)

    def __len__(self):
        return self.n // self.b if self.drop_last else -(-self.n // self.b)

    def _deal(self, first: int, records: torch.Tensor):
        """Batches ``first, first + 1, ...`` of the epoch: ``records`` in a random order, cut into batches of ``b``."""
        order = records[permutation(self.generator, records.numel())]
        self.current = (first, order)
        for j in range(first, len(self)):
            yield order[(j - first) * self.b:(j - first + 1) * self.b]

    def unused(self, done: int):
        """The records of the epoch not in its first ``done`` batches (in the pass's order).

        Args:
            done: the batches of the epoch consumed.

        Returns:
            A long tensor of record indices.
        """
        first, order = self.current
        return order[(done - first) * self.b:].clone()


class BallsInBinsBatchSampler(_Epoch, _Batches):
    """One epoch per pass: every record put in one of ``t`` steps uniformly at random (the run's secret
    data stream: :func:`~dpcalib.optim.randomness.bins`), the ``t`` batches in step order.

    ``t`` is the mechanism's ``steps_per_epoch`` (``ceil(n / batch_size)``,
    :func:`dpcalib.accountant.steps_per_epoch`); a batch holds ``Binomial(n, 1/t)`` records, ``n / t`` on
    average (:attr:`expected_batch_size`), and may be empty (collated as zero-row tensors, as a Poisson
    batch is).

    Args:
        n: the dataset's size.
        t: the steps of an epoch, an integer in ``[1, n]``.
        generator: the ``torch.Generator`` the batches are drawn from.
        share: ``(rank, world)``: this process loads records ``rank, rank + world, ...`` of each batch.
        replayable: a checkpoint keeps the generator's state (a seeded run; see :class:`_Batches`).

    Raises:
        InputError: if ``t`` is not in ``[1, n]``.
    """

    sampling = BALLS_IN_BINS
    epoch_wise = True

    def __init__(self, n, t: int, generator, share=(0, 1), replayable: bool = True):
        super().__init__(n, generator, share, replayable)
        self.t = int(t)
        if not 1 <= self.t <= self.n:
            raise InputError(f"t={t!r} is not allowed: expected an integer in [1, n={self.n}] (the steps of an epoch).")

    @property
    def expected_batch_size(self) -> float:
        """The mean batch size, ``n / t``."""
        return self.n / self.t

    def __len__(self):
        return self.t

    def _deal(self, first: int, records: torch.Tensor):
        """Steps ``first, first + 1, ...`` of the epoch: each of ``records`` thrown into one of them uniformly."""
        where = first + bins(self.generator, records.numel(), self.t - first)
        self.current = (records, where)
        for part in bin_batches(where - first, self.t - first):
            yield records[part]

    def unused(self, done: int):
        """The records of the epoch whose step is ``done`` or later.

        Args:
            done: the steps of the epoch consumed.

        Returns:
            A long tensor of record indices.
        """
        records, where = self.current
        return records[where >= done].clone()


#: every batch sampler above: the ones a loader may already carry and keep (a loader built with one,
#: Opacus's ``DPDataLoader`` among them)
BATCH_SAMPLERS = (PoissonBatchSampler, FixedSizeBatchSampler, ShuffleBatchSampler, BallsInBinsBatchSampler)
