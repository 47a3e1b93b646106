"""How a run draws the records of each release: the samplers the accountants assume.

Every reference optimizer draws its minibatches through a :class:`Sampler` (its ``sampler``
argument), from the run's data generator (a ``torch.Generator``, or the ChaCha20 generator of
``secure_mode``: :mod:`dpcalib.optim.randomness`, whose draws take either):

* :meth:`Sampler.poisson` -- every record independently with probability q (DP-SGD, DiceSGD,
  ClipD2P / ConstD2P under add/remove);
* :meth:`Sampler.without_replacement` -- a fixed-size sample without replacement (DP-SRM,
  DIFF2-BVR-L-SGD's local steps);
* :meth:`Sampler.one` -- one record uniformly (ClipD2P / ConstD2P under replace-one, J records);
* :meth:`Sampler.permutation` + :meth:`Sampler.shuffled` -- shuffled batches: each epoch a random
  permutation cut into consecutive batches of ``b`` (DP-SGD with ``sampling="shuffle"``; the last
  batch is short unless the mechanism drops it);
* :meth:`Sampler.bins` + :meth:`Sampler.binned` -- balls-in-bins: each epoch every record put in one
  of the epoch's ``t`` steps, uniformly and independently (:func:`~dpcalib.optim.randomness.bins`),
  the batches taken in step order (:func:`bin_batches`; ``Binomial(n, 1/t)`` records each, empty ones
  included) -- DP-SGD with ``sampling="balls-in-bins"``.

``holder`` names whose records are drawn (the client or node; 0 for one dataset).  The sampler
is the one place where the draws can be changed for a check: :class:`ForcedRecord` (the record
probe, :mod:`dpcalib.optim.audit.probe`) puts one record into every sample, or takes it out of every sample,
which is the worst case of a sampled release and the add/remove neighbour of a Poisson sample.
The optimizers' update code never knows which sampler drives it.
"""

from __future__ import annotations

import torch
from ...accountant.validation import InputError
from ..randomness import bins, permutation, poisson_mask, randint

__all__ = ["Sampler", "ForcedRecord", "bin_batches"]


def bin_batches(assignment: torch.Tensor, t: int) -> list:
    """An epoch's balls-in-bins batches in step order: batch ``j`` holds the records whose bin is ``j``,
    in ascending order (an empty tensor where no record went to ``j``).

    Args:
        assignment: a long tensor ``[n]``, each record's bin in ``0 .. t-1``.
        t: the epoch's steps.

    Returns:
        ``t`` long tensors of record indices (their sizes sum to ``n``).
    """
    order = torch.sort(assignment, stable=True).indices
    sizes = torch.bincount(assignment, minlength=int(t)).tolist()
    return list(torch.split(order, sizes))


class Sampler:
    """The plain draws (what the accountant assumes)."""

    def poisson(self, n: int, q: float, generator: torch.Generator, *, holder: int = 0) -> torch.Tensor:
        """Indices (ascending) of a Poisson sample of ``n`` records at rate ``q``.

        Args:
            n: number of records, >= 0.
            q: sampling rate, in [0, 1].
            generator: the run's data generator (``torch.Generator`` or a secure one).
            holder: whose records are drawn (client or node; 0 for one dataset).

        Returns:
            A long tensor of the sampled indices, ascending.
        """
        return poisson_mask(generator, n, q).nonzero().flatten()

    def without_replacement(self, n: int, size: int, generator: torch.Generator, *, holder: int = 0) -> torch.Tensor:
        """``size`` distinct indices of ``n`` records, uniformly.

        Args:
            n: number of records, >= 1.
            size: sample size, in [0, n].
            generator: the run's data generator.
            holder: whose records are drawn.

        Returns:
            A long tensor of ``size`` distinct indices.
        """
        return permutation(generator, n)[:size]

    def one(self, n: int, generator: torch.Generator, *, holder: int = 0) -> torch.Tensor:
        """One index of ``n`` records, uniformly (a tensor of shape [1]).

        Args:
            n: number of records, >= 1.
            generator: the run's data generator.
            holder: whose records are drawn.

        Returns:
            A long tensor of shape [1].
        """
        return randint(generator, n, 1)

    def permutation(self, n: int, generator: torch.Generator, *, holder: int = 0) -> torch.Tensor:
        """An epoch's order of the ``n`` records, uniformly at random (drawn once per epoch).

        Args:
            n, generator, holder: as :meth:`one`.

        Returns:
            A permutation of ``0..n-1`` (a long tensor).
        """
        return permutation(generator, n)

    def shuffled(self, perm: torch.Tensor, j: int, size: int, *, holder: int = 0) -> torch.Tensor:
        """Batch ``j`` of an epoch: records ``j*size .. (j+1)*size - 1`` of its permutation.

        Args:
            perm: the epoch's permutation.
            j: the batch's index in the epoch, >= 0.
            size: the batch size b, >= 1.
            holder: whose records are drawn.

        Returns:
            The batch's indices (the last batch may be short).
        """
        return perm[j * size:(j + 1) * size]

    def bins(self, n: int, t: int, generator: torch.Generator, *, holder: int = 0) -> torch.Tensor:
        """An epoch's balls-in-bins assignment: each of ``n`` records' step in ``0 .. t-1``, uniformly and
        independently (drawn once per epoch).

        Args:
            n: number of records, >= 0.
            t: the epoch's steps, >= 1.
            generator: the run's data generator.
            holder: whose records are drawn.

        Returns:
            A long tensor ``[n]`` of bins in ``0 .. t-1``.
        """
        return bins(generator, n, t)

    def binned(self, batches: list, j: int, *, holder: int = 0) -> torch.Tensor:
        """Step ``j`` of a balls-in-bins epoch: ``batches[j]`` of :func:`bin_batches` (may be empty).

        Args:
            batches: the epoch's batches, from :func:`bin_batches`.
            j: the step's index in the epoch, in ``0 .. t-1``.
            holder: whose records are drawn.

        Returns:
            ``batches[j]``.
        """
        return batches[j]


class ForcedRecord(Sampler):
    """The plain draws (same generator calls, so the other records are drawn as in the plain run),
    then record ``index`` of ``holder`` put into every sample (``present=True``; a fixed-size sample
    keeps its size: the record takes the last slot unless it is already in) or taken out of every
    sample (``present=False``).  A shuffled batch is compared under zero-out: the record joins it
    (nobody displaced) or leaves it.  Samples of other holders are left alone.

    Args:
        holder: the client or node whose record is forced (0 for one dataset).
        index: the record's index in the holder's data.
        present: True: the record is in every sample; False: in none.

    Attributes:
        draws: the samples drawn so far for ``holder`` (the probe: an add/remove claim needs at least one).
    """

    def __init__(self, holder: int, index: int, present: bool):
        self.holder, self.index, self.present = int(holder), int(index), bool(present)
        self.draws = 0

    def _forced_holder(self, holder: int) -> bool:
        """Is this a sample of the forced holder's?  Each draw asks once: it is counted in ``draws``."""
        mine = int(holder) == self.holder
        self.draws += mine
        return mine

    def _without(self, idx: torch.Tensor) -> torch.Tensor:
        return idx[idx != self.index]

    def _forced(self, idx: torch.Tensor, holder: int, ascending: bool = True) -> torch.Tensor:
        """``idx`` (the forced holder's) with the record taken out, then -- ``present`` -- joined: in ascending order,
        or (``ascending=False``) at the end."""
        if not self._forced_holder(holder):
            return idx
        idx = self._without(idx)
        if not self.present:
            return idx
        idx = torch.cat([idx, idx.new_tensor([self.index])])
        return torch.sort(idx).values if ascending else idx

    def poisson(self, n, q, generator, *, holder=0):
        """A Poisson sample with the record put in or taken out.

        Args:
            n, q, generator, holder: as :meth:`Sampler.poisson`.

        Returns:
            The sampled indices, ascending.
        """
        return self._forced(super().poisson(n, q, generator, holder=holder), holder)

    def without_replacement(self, n, size, generator, *, holder=0):
        """A fixed-size sample with the record in the last slot (unless already in), or taken out.

        Args:
            n, size, generator, holder: as :meth:`Sampler.without_replacement`.

        Returns:
            The sampled indices (one fewer where the record was drawn and is taken out).
        """
        return self._fixed_size(super().without_replacement(n, size, generator, holder=holder), holder)

    def shuffled(self, perm, j, size, *, holder=0):
        # shuffled batches are compared under zero-out: the record's contribution is there or not, the
        # other records of the batch are the same (present: the record joins the batch if the
        # permutation put it elsewhere; absent: it is taken out)
        """A shuffled batch with the record joined or taken out (zero-out: nobody displaced).

        Args:
            perm, j, size, holder: as :meth:`Sampler.shuffled`.

        Returns:
            The batch's indices.
        """
        return self._forced(super().shuffled(perm, j, size, holder=holder), holder, ascending=False)

    def binned(self, batches, j, *, holder=0):
        # as a shuffled batch, the record joins or leaves the step's batch, the others stay; the batch's
        # sum is divided by the expected batch, so this is the add/remove neighbour of the step
        """A balls-in-bins step with the record joined or taken out (the add/remove neighbour).

        Args:
            batches, j, holder: as :meth:`Sampler.binned`.

        Returns:
            The step's indices, ascending.
        """
        return self._forced(super().binned(batches, j, holder=holder), holder)

    def _fixed_size(self, idx, holder):
        if not self._forced_holder(holder):
            return idx
        if not self.present:
            return self._without(idx)
        if bool((idx == self.index).any()) or idx.numel() == 0:
            return idx
        idx = idx.clone()
        idx[-1] = self.index
        return idx

    def one(self, n, generator, *, holder=0):
        """The forced record as the one-record sample (for the forced holder).

        Args:
            n, generator, holder: as :meth:`Sampler.one`.

        Returns:
            A long tensor of shape [1].

        Raises:
            InputError: if ``present`` is False for the forced holder (a one-record sample cannot
                lose its only record).
        """
        idx = super().one(n, generator, holder=holder)
        if not self._forced_holder(holder):
            return idx
        if not self.present:
            raise InputError("present=False is not allowed for a one-record sample: removing the only record of a "
                             "replace-one release has no meaning (probe it under replace-one).")
        return idx.new_tensor([self.index])
