"""The data loader the accountant assumes, built from the user's ``DataLoader``.

:func:`private_loader` keeps the user's dataset and loader settings (workers, collate function,
pin memory, worker init, persistent workers, prefetch) and replaces the batch sampler by the one
the accounting of the run assumes (:mod:`.samplers`: Poisson, fixed-size, shuffled or balls-in-bins
batches).  A sampler the accounting cannot follow (a weighted, subset or distributed sampler, a custom
``batch_sampler``, an ``IterableDataset``) is refused with the reason; the user's sequential or random
sampler is replaced -- with a one-line notice where its law was not "every record once a pass"
(:func:`uncovered_sampler`: drawn with replacement, ``num_samples``, another source), for the batches
it would have drawn are not those the run draws and charges.  The batches of a pass follow from public
numbers (:func:`batches_per_pass`: the batch size and the dataset size the run states), never from the
user's sampler's length.  An empty Poisson batch is collated as tensors with zero rows (the shape of
one record).
"""

from __future__ import annotations

import warnings
import weakref

import torch
from torch.utils.data import (BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler)
from torch.utils.data._utils.collate import default_collate

from ...accountant.validation import InputError
from ...mechanisms.shape import SHUFFLE, Sampling
from .samplers import BATCH_SAMPLERS, PoissonBatchSampler, ShuffleBatchSampler

__all__ = []

#: the batches handed out whose tensors :meth:`DPDataLoader.origin_of` looks among
_RECENT = 8


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
        if isinstance(batch_sampler, BATCH_SAMPLERS) and not isinstance(collate_fn, _Collate):
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
    if bs is not None and type(bs) is not BatchSampler and not isinstance(bs, BATCH_SAMPLERS):
        raise InputError(f"data_loader is not allowed: its batch_sampler {type(bs).__name__} decides the batches, "
                         "and the accountant could not follow it; give a plain DataLoader(dataset, batch_size=...).")
    inner = bs.sampler if type(bs) is BatchSampler else None
    if inner is not None and type(inner) not in (SequentialSampler, RandomSampler):
        raise InputError(f"data_loader is not allowed: its sampler {type(inner).__name__} draws records in a way the "
                         "accountant does not cover (it would be replaced by the run's own sampling, changing what "
                         "you asked for); give a plain DataLoader(dataset, batch_size=...).")
    if data_loader.batch_size is None and not isinstance(bs, BATCH_SAMPLERS):
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
    if isinstance(bs, BATCH_SAMPLERS):
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
