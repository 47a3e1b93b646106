"""The data loader the accountant assumes, built from the user's ``DataLoader``.

:func:`private_loader` keeps the user's dataset and loader settings (workers, collate function,
pin memory, worker init, persistent workers, prefetch) and replaces the batch sampler by the one
the accounting of the run assumes:

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
generator (:mod:`dpcalib.optim.randomness`), so a loop over this loader sees the same batches as the
reference optimizer with the same seed; without a seed the generator's root is fresh entropy, and
in ``secure_mode`` the generator is ChaCha20.  A sampler the accounting cannot follow
(a weighted, subset or distributed sampler, a custom ``batch_sampler``, an ``IterableDataset``)
is refused with the reason; the user's sequential or random sampler is replaced -- with a one-line
notice where its law was not "every record once a pass" (:func:`uncovered_sampler`: drawn with
replacement, ``num_samples``, another source), for the batches it would have drawn are not those
the run draws and charges.  The batches of a pass follow from public numbers
(:func:`batches_per_pass`: the batch size and the dataset size the run states), never from the
user's sampler's length.  An empty Poisson batch is collated as tensors with zero rows (the shape
of one record).

With ``share=(rank, world)`` (data-parallel) every process draws the same logical batch and loads
its records ``rank, rank + world, ...`` (:class:`dpcalib.optim.run.ranks.BatchOnRanks`' share).
"""

from __future__ import annotations

import warnings
import weakref

import torch
from torch.utils.data import (BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler)
from torch.utils.data import Sampler as TorchSampler
from torch.utils.data._utils.collate import default_collate

from ...accountant.validation import InputError
from ...mechanisms.shape import BALLS_IN_BINS, POISSON, SHUFFLE, WOR, Sampling
from ..data.sampling import bin_batches
from ..randomness import bins, note_restored, permutation, poisson_mask

__all__ = []

#: the batches handed out whose tensors :meth:`DPDataLoader.origin_of` looks among
_RECENT = 8


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


class DPDataLoader(DataLoader):
    """The user's loader with the run's batch sampler; counts the passes begun and the batches the
    loop consumed in the current pass (its position for a checkpoint).

    Opacus's constructors too: ``DPDataLoader(dataset, sample_rate=q, generator=None, ...)`` (Poisson
    batches at rate ``q``, ``int(1/q)`` of them per pass, empty ones as zero-row tensors) and
    :meth:`from_data_loader`.  ``generator``: the batches' generator (the user owns its secret);
    None takes fresh operating-system entropy -- never torch's global generator, so
    ``torch.manual_seed`` does not make them reproducible (Opacus's loader follows it).

    Args:
        dataset: the dataset (map-style).
        sample_rate: Opacus's Poisson rate ``q`` in (0, 1], or None (give ``batch_sampler``).
        collate_fn: the collate function (None: torch's default); empty batches collate as zero-row tensors.
        drop_last: accepted for Opacus's signature (not used).
        generator: the batches' ``torch.Generator`` with ``sample_rate``, or None (fresh entropy).
        distributed: must be False with ``sample_rate`` (use ``make_private(..., distributed=True)``).
        batch_sampler: the run's batch sampler, or None (with ``sample_rate``).
        **kwargs: further ``DataLoader`` settings (workers, pin memory, ...).

    Raises:
        InputError: if ``sample_rate`` is given with ``batch_sampler`` or ``distributed=True``, is not in
            (0, 1], or ``generator`` is not a ``torch.Generator``.
    """

    consumed = 0
    passes = 0
    digest = None
    #: batches yielded over the loader's life (BatchMemoryManager counts each chunk): forwards made while
    #: the same count stood are positions of the same records (:func:`~.module.one_batch`)
    yielded = 0
    _recent = ()

    def __init__(self, dataset, *, sample_rate: float | None = None, collate_fn=None, drop_last: bool = False,
                 generator=None, distributed: bool = False, batch_sampler=None, **kwargs):
        if sample_rate is not None:
            if batch_sampler is not None:
                raise InputError("sample_rate and batch_sampler are not allowed together: give one.")
            if distributed:
                raise InputError("distributed=True is not allowed here: use make_private(..., distributed=True), "
                                 "which shares each batch out between the processes.")
            q = float(sample_rate) if isinstance(sample_rate, (int, float)) and not isinstance(sample_rate, bool) \
                else float("nan")
            if not (0 < q <= 1):
                raise InputError(f"sample_rate={sample_rate!r} is not allowed: expected a number in (0, 1].")
            if generator is not None and not isinstance(generator, torch.Generator):
                raise InputError(f"generator={type(generator).__name__} is not allowed: expected a torch.Generator.")
            n = len(dataset)
            batch_sampler = PoissonBatchSampler(n, q, int(1 / q), generator if generator is not None else
                                                _fresh_generator())
            collate_fn = _Collate(collate_fn if collate_fn is not None else default_collate, dataset)
        if isinstance(batch_sampler, _Batches) and not isinstance(collate_fn, _Collate):
            # its batches may be empty (Poisson, balls-in-bins): zero-row tensors, as make_private's loader
            collate_fn = _Collate(collate_fn if collate_fn is not None else default_collate, dataset)
        if collate_fn is not None:
            kwargs["collate_fn"] = collate_fn
        super().__init__(dataset, batch_sampler=batch_sampler, **kwargs)
        self.sample_rate = sample_rate

    @classmethod
    def from_data_loader(cls, data_loader, *, generator=None, distributed: bool = False) -> "DPDataLoader":
        """Opacus's: Poisson batches at ``q = 1 / len(data_loader)`` over its dataset, with its
        settings; ``generator`` default: the loader's own, else fresh entropy.  ``len(data_loader)`` is
        that of the plain loader, ``ceil(n / batch_size)`` (``floor`` with ``drop_last``), whatever its
        sampler draws: a ``RandomSampler`` with ``num_samples`` or replacement is replaced with a notice
        (:func:`uncovered_sampler`), never trusted for the rate.

        Args:
            data_loader: the user's ``DataLoader`` (checked as by :func:`check_loader`).
            generator: the batches' ``torch.Generator``, or None (the loader's own, else fresh entropy).
            distributed: must be False (as for the constructor).

        Returns:
            The new :class:`DPDataLoader`.

        Raises:
            InputError: if the loader is refused by :func:`check_loader`, has ``drop_last`` and a batch
                larger than its dataset, or as for the constructor.
        """
        check_loader(data_loader)
        b, passes = data_loader.batch_size, len(data_loader)
        if b is not None:
            # a pass of the plain loader over the dataset: its sampler's length (num_samples) sets nothing
            passes = batches_per_pass(len(data_loader.dataset), b, bool(data_loader.drop_last))
            law = uncovered_sampler(data_loader)
            if law is not None:
                notice_replaced(law, f"Poisson batches at q = 1/{passes}, {passes} per pass", stacklevel=3)
        if generator is None:
            generator = data_loader.generator
        return cls(data_loader.dataset, sample_rate=1 / passes, collate_fn=data_loader.collate_fn,
                   generator=generator, distributed=distributed, **_settings(data_loader))

    def __iter__(self):
        self.consumed = 0
        self.passes += 1
        skip, self._skip = getattr(self, "_skip", 0), 0
        for j, batch in enumerate(super().__iter__()):
            if j < skip:
                continue
            self.consumed = j + 1
            # the logical batch's digest and this rank's share's (several processes: the optimizer's check)
            digests = getattr(self.batch_sampler, "digests", None)
            self.digest = digests[j] if digests is not None and j < len(digests) else None
            self.note_batch(batch)
            yield batch

    def note_batch(self, batch) -> None:
        """Count a batch handed to the loop and remember its tensors (weakly, the last few batches), so that
        :meth:`origin_of` can tell which batch a forward's input came from.

        Args:
            batch: the batch (tensors in tuples, lists or dicts).
        """
        self.yielded += 1
        tensors = []

        def walk(b):
            if isinstance(b, torch.Tensor):
                tensors.append(weakref.ref(b))
            elif isinstance(b, (tuple, list)):
                for v in b:
                    walk(v)
            elif isinstance(b, dict):
                for v in b.values():
                    walk(v)
        walk(batch)
        self._recent = ((self.yielded, tensors),) + tuple(self._recent)[:_RECENT - 1]

    def origin_of(self, x):
        """Which of the last batches handed out holds ``x``'s memory (``x`` one of its tensors or a view).

        A tensor held alive keeps its memory, so a match with a live one is that batch; a copy (``x.to(device)``)
        matches none.

        Args:
            x: a forward's batch tensor.

        Returns:
            The batch's count (:attr:`yielded` when it was handed out), or None.
        """
        if not isinstance(x, torch.Tensor) or x.layout != torch.strided:
            return None
        ptr = x.untyped_storage().data_ptr()
        if not ptr:
            return None
        for serial, refs in self._recent:
            for r in refs:
                t = r()
                if t is not None and t.layout == torch.strided and t.untyped_storage().data_ptr() == ptr:
                    return serial
        return None

    def state_dict(self) -> dict:
        """The loader's position in the current pass, for a checkpoint.

        Returns:
            The batch sampler's ``position(consumed)`` where it has one, else ``{"skip": batches consumed}``,
            with ``passes``: the passes begun.
        """
        if hasattr(self.batch_sampler, "position"):
            out = dict(self.batch_sampler.position(self.consumed))
        else:
            out = {"skip": int(self.consumed), "mid_pass": self.consumed > 0}
        out["passes"] = int(self.passes)
        return out

    def load_state_dict(self, state: dict) -> None:
        """Go back to a position of :meth:`state_dict`: the next pass over the loader is the saved pass's
        rest when it was saved mid-pass (so its charge is not made twice), else a new pass.

        Args:
            state: what :meth:`state_dict` returned.
        """
        if hasattr(self.batch_sampler, "load_position"):
            self.batch_sampler.load_position(state)
        else:
            self._skip = int(state["skip"])
        mid = bool(state.get("mid_pass", int(state.get("skip", 0)) > 0))
        passes = int(state.get("passes", 0))
        self.passes = passes - 1 if mid and passes > 0 else passes


def _fresh_generator() -> torch.Generator:
    """A CPU generator seeded from fresh operating-system entropy (dpcalib.optim.randomness)."""
    from ..randomness import RunStreams

    return RunStreams(None).run("cpu", data_device="cpu")[0]


def loader_generator(data_loader, fallback):
    """The generator the run's batches are drawn from: the loader's own ``generator`` where it has one
    (Opacus's behaviour; a warning says that whoever knows its seed knows the batches), else
    ``fallback`` (fresh entropy).

    Args:
        data_loader: the user's ``DataLoader``.
        fallback: the generator to use when the loader has none.

    Returns:
        The loader's ``generator``, or ``fallback``.

    Raises:
        InputError: if the loader's generator is not a CPU ``torch.Generator``.
    """
    gen = getattr(data_loader, "generator", None)
    if gen is None:
        return fallback
    if not isinstance(gen, torch.Generator) or gen.device.type != "cpu":
        raise InputError(f"data_loader.generator={gen!r} is not allowed: expected a CPU torch.Generator.")
    warnings.warn("the batches are drawn from data_loader's own generator (as Opacus does): whoever knows its seed "
                  "knows every batch, and the accounting's sampling then protects nobody from them; leave it unset "
                  "for fresh entropy.", UserWarning, stacklevel=4)
    return gen


def _settings(d) -> dict:
    """The user's loader settings a replacement keeps (workers, pin memory, timeout, ...)."""
    kwargs = dict(num_workers=d.num_workers, pin_memory=d.pin_memory, timeout=d.timeout,
                  worker_init_fn=d.worker_init_fn, multiprocessing_context=d.multiprocessing_context,
                  persistent_workers=d.persistent_workers if d.num_workers > 0 else False)
    if d.num_workers > 0 and d.prefetch_factor is not None:
        kwargs["prefetch_factor"] = d.prefetch_factor
    return kwargs


def _empty_like(batch):
    """The collated batch of one record, cut to zero rows (tensors), recursively."""
    if isinstance(batch, torch.Tensor):
        return batch[:0]
    if isinstance(batch, (list, tuple)):
        return type(batch)(_empty_like(b) for b in batch)
    if isinstance(batch, dict):
        return {k: _empty_like(v) for k, v in batch.items()}
    return batch


class _Collate:
    """The user's collate function; an empty batch becomes zero-row tensors shaped like a record."""

    def __init__(self, collate, dataset):
        self.collate, self.dataset = collate, dataset

    def __call__(self, items):
        if len(items) == 0:
            return _empty_like(self.collate([self.dataset[0]]))
        return self.collate(items)


def check_loader(data_loader) -> None:
    """Refuse a loader whose sampling the accountant cannot follow (one line, the reason).

    Args:
        data_loader: the user's loader.

    Raises:
        InputError: if it is not a ``DataLoader``, its dataset is iterable, unsized or empty, its batch
            sampler or sampler is one the accountant cannot follow, or it has ``batch_size=None``.
    """
    if not isinstance(data_loader, DataLoader):
        raise InputError(f"data_loader={type(data_loader).__name__} is not allowed: expected a "
                         "torch.utils.data.DataLoader.")
    ds = data_loader.dataset
    if isinstance(ds, IterableDataset):
        raise InputError("data_loader is not allowed: its dataset is an IterableDataset, whose records cannot be "
                         "sampled by index (the accountant needs every record to be drawable at its rate).")
    try:
        n = len(ds)
    except TypeError:
        raise InputError("data_loader is not allowed: its dataset has no len().") from None
    if n == 0:
        raise InputError("data_loader is not allowed: its dataset is empty.")
    bs = data_loader.batch_sampler
    if bs is not None and type(bs) is not BatchSampler and not isinstance(bs, _Batches):
        raise InputError(f"data_loader is not allowed: its batch_sampler {type(bs).__name__} decides the batches, "
                         "and the accountant could not follow it; give a plain DataLoader(dataset, batch_size=...).")
    inner = bs.sampler if type(bs) is BatchSampler else None
    if inner is not None and type(inner) not in (SequentialSampler, RandomSampler):
        raise InputError(f"data_loader is not allowed: its sampler {type(inner).__name__} draws records in a way the "
                         "accountant does not cover (it would be replaced by the run's own sampling, changing what "
                         "you asked for); give a plain DataLoader(dataset, batch_size=...).")
    if data_loader.batch_size is None and not isinstance(bs, _Batches):
        raise InputError("data_loader is not allowed: it has batch_size=None (records one at a time); give a "
                         "batch_size.")


def uncovered_sampler(data_loader) -> str | None:
    """What the loader's sampler is, where its law is not "every record of the dataset once a pass"
    (the law of a plain ``DataLoader``, shuffled or not): None for a ``SequentialSampler`` or a
    ``RandomSampler`` without replacement over all the records, or a :class:`ShuffleBatchSampler`.

    Args:
        data_loader: a loader :func:`check_loader` accepts.

    Returns:
        None, or the sampler named with what makes its law another one (``"RandomSampler(replacement=True)"``,
        ``"RandomSampler(num_samples=64)"``, ``"SequentialSampler over 10 of the 800 records"``,
        ``"FixedSizeBatchSampler"``).
    """
    bs = data_loader.batch_sampler
    if isinstance(bs, _Batches):
        return None if isinstance(bs, ShuffleBatchSampler) else type(bs).__name__
    inner, n = bs.sampler, len(data_loader.dataset)
    name = type(inner).__name__
    if getattr(inner, "replacement", False):
        return f"{name}(replacement=True)"
    if isinstance(inner, RandomSampler) and inner.num_samples != n:
        return f"{name}(num_samples={inner.num_samples})"
    if len(inner) != n:
        return f"{name} over {len(inner)} of the {n} records"
    return None


def batches_per_pass(n: int, batch_size: int, drop_last: bool = False) -> int:
    """The batches of one pass from public numbers: ``ceil(n / batch_size)`` (1 for a batch larger than
    the dataset), ``floor(n / batch_size)`` with ``drop_last``
    (:func:`dpcalib.accountant.steps_per_epoch`).

    Args:
        n: the dataset size the run states (public), an integer >= 1.
        batch_size: the loader's batch size, an integer >= 1.
        drop_last: drop each pass's last, short batch.

    Returns:
        The number of batches, >= 1.

    Raises:
        InputError: if ``drop_last`` and ``batch_size > n`` (no whole batch), or a number is not an integer >= 1.
    """
    return Sampling(SHUFFLE, n, batch_size, drop_last).steps_per_epoch     # the run shape's count


def notice_replaced(sampler: str, by: str, stacklevel: int = 4) -> None:
    """Say in one line (a ``UserWarning``) that the user's ``sampler`` is replaced ``by`` the run's batches.

    Args:
        sampler: the user's sampler, as :func:`uncovered_sampler` names it.
        by: what replaces it (the batches the accountant charges).
        stacklevel: as ``warnings.warn``'s (the user's call).
    """
    warnings.warn(f"data_loader's {sampler} is replaced by {by}, the sampling the accountant charges (that "
                  "sampler's law is not one it covers).", UserWarning, stacklevel=stacklevel)


def private_loader(data_loader, batch_sampler) -> DataLoader:
    """A ``DataLoader`` over the user's dataset with ``batch_sampler`` and the user's settings.

    Args:
        data_loader: the user's ``DataLoader`` (its dataset, collate function and settings are kept).
        batch_sampler: the run's batch sampler.

    Returns:
        A :class:`DPDataLoader`.
    """
    d = data_loader
    return DPDataLoader(d.dataset, batch_sampler=batch_sampler, collate_fn=_Collate(d.collate_fn, d.dataset),
                        **_settings(d))
