"""Injected-gradient canaries and the sampler couplings of the audits: data-layer objects.

An audit of the *noise alone* (is the released noise what the accountant assumes, at the claimed
sensitivity?) is sharpest with a record whose gradient the auditor chooses: a *gradient canary*.
It lives here, in the data layer, and no optimizer knows it:

* :class:`GradientCanary` -- a :class:`~dpcalib.optim.clipping.per_example.PerExample` that answers for one named
  record (record ``index`` of ``holder``): its gradient at the j-th parameter point is
  ``gradient(j)``, clipped by the same rule (:func:`~optim.clipping.clip_factors`) the real records
  go through; every other record is computed by the wrapped object.  ``j`` counts the distinct
  parameter points the run asked about, in order -- every query is asked at every release
  (:mod:`dpcalib.optim.clipping.per_example`), so ``j`` is a function of the run's public history and is the same
  for a leader and its twins.
* :class:`ManyCanaries` -- ``m`` gradient canaries for the one-run audit: a sampler that draws,
  after each Poisson sample of the records, the canaries' own Poisson inclusion from the run's
  data generator, and the per-example object that adds the sampled canaries' terms.
* :class:`WORCoupling` -- a sampler that rewrites the holder's fixed-size samples into the
  "canary in" or "canary out" batch of the replace-one coupling (see its docstring).

These canaries never count as a check of the per-example code: their gradient is injected, not
computed by forward and backward.  The record-level probe (:mod:`dpcalib.optim.audit.probe`) checks that code.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from ...accountant.validation import InputError
from ..clipping.paths import clip_factors
from ..clipping.per_example import PerExample
from ..data.sampling import Sampler

__all__ = []


def _key(t: torch.Tensor) -> bytes:
    return hashlib.blake2b(t.detach().to("cpu").contiguous().numpy().tobytes(), digest_size=16).digest()


def _flat(params) -> torch.Tensor:
    if isinstance(params, torch.Tensor):
        return params
    return torch.cat([t.detach().reshape(-1) for t in params.values()])


def _select(ids, keep):
    holder, index = ids
    return (holder if isinstance(holder, int) else holder[keep]), index[keep]


class GradientCanary(PerExample):
    """Record ``index`` of ``holder`` replaced by a record whose per-example gradient at the j-th
    parameter point is ``gradient(j)`` (a flat tensor of the model's size; a tensor: the same
    vector at every point).  Its term is ``w clip(gradient(j), C)`` (``w`` the weight the run gives
    that record), or the clip of ``gradient(j) - gradient(j')`` for a difference between points j'
    and j.  Everything else is answered by ``base``.

    Args:
        base: the per-example object that answers for every other record.
        gradient: ``gradient(j)`` -> the flat gradient at the j-th point, or a flat tensor (the same at every point).
        holder: the canary's holder.
        index: the canary's index in the holder's data.
    """

    def __init__(self, base: PerExample, gradient, holder: int = 0, index: int = 0):
        self.base = base
        self.fn = gradient if callable(gradient) else (lambda j, g=gradient: g)
        self.holder, self.index = int(holder), int(index)
        self.points: dict = {}

    def point(self, params) -> int:
        """Id of a parameter point: the order in which the run first asked about it.

        Args:
            params: the parameters, a dict name -> tensor or one flat tensor.

        Returns:
            j, the point's id (0 for the first point asked about).
        """
        return self.points.setdefault(_key(_flat(params)), len(self.points))

    def gradient(self, j: int, like: torch.Tensor) -> torch.Tensor:
        """The canary's gradient at the j-th point, on ``like``'s device and dtype.

        Args:
            j: the point's id.
            like: a tensor whose device and dtype the gradient takes.

        Returns:
            The flat gradient.
        """
        return torch.as_tensor(self.fn(j)).to(like.device, like.dtype)

    def _clip(self, g: torch.Tensor, c, stabilizer=None) -> torch.Tensor:
        n = torch.linalg.vector_norm(g.to(torch.float64)).reshape(1)
        return clip_factors(n, c, stabilizer)[0].to(g.dtype) * g

    def _hit(self, ids) -> torch.Tensor:
        holder, index = ids
        return (index == self.index) & (holder == self.holder)

    def _weight(self, weights, hit) -> float:
        return 1.0 if weights is None else float(weights[hit].sum())

    def clipped_sum(self, model, loss_fn, params, x, y, c, *, ids, weights=None, stabilizer=None):
        """The base's clipped sum, with the canary's row (if in the batch) replaced by its injected gradient, clipped.

        Args:
            model, loss_fn, params, x, y, c, ids, weights, stabilizer: as :meth:`PerExample.clipped_sum` (``ids``:
                ``(holder, index)`` of each row, holder an int or a tensor of them).

        Returns:
            The flat clipped (weighted) sum.
        """
        j = self.point(params)
        hit = self._hit(ids)
        if not bool(hit.any()):
            return self.base.clipped_sum(model, loss_fn, params, x, y, c, ids=ids, weights=weights,
                                         stabilizer=stabilizer)
        keep = ~hit
        rest = self.base.clipped_sum(model, loss_fn, params, x[keep], y[keep], c, ids=_select(ids, keep),
                                     weights=None if weights is None else weights[keep], stabilizer=stabilizer)
        return rest + self._weight(weights, hit) * self._clip(self.gradient(j, rest), c, stabilizer)

    def clipped_diff_sum(self, model, loss_fn, cur, prev, x, y, c, *, ids, weights=None):
        """The base's clipped difference sum, with the canary's difference ``gradient(j) - gradient(j')`` clipped.

        Args:
            cur: the current parameters (point j).
            prev: the previous parameters (point j').
            model, loss_fn, x, y, c, ids, weights: as :meth:`clipped_sum`.

        Returns:
            The flat clipped (weighted) difference sum.
        """
        j_prev = self.point(prev)
        j = self.point(cur)
        hit = self._hit(ids)
        if not bool(hit.any()):
            return self.base.clipped_diff_sum(model, loss_fn, cur, prev, x, y, c, ids=ids, weights=weights)
        keep = ~hit
        rest = self.base.clipped_diff_sum(model, loss_fn, cur, prev, x[keep], y[keep], c, ids=_select(ids, keep),
                                          weights=None if weights is None else weights[keep])
        g = self.gradient(j, rest) - self.gradient(j_prev, rest)
        return rest + self._weight(weights, hit) * self._clip(g, c)

    def grad_sum(self, model, loss_fn, params, x, y, *, ids):
        """The base's unclipped gradient sum, with the canary's row replaced by its injected gradient.

        Args:
            model, loss_fn, params, x, y, ids: as :meth:`clipped_sum`.

        Returns:
            The flat gradient sum.
        """
        j = self.point(params)
        hit = self._hit(ids)
        if not bool(hit.any()):
            return self.base.grad_sum(model, loss_fn, params, x, y, ids=ids)
        keep = ~hit
        rest = self.base.grad_sum(model, loss_fn, params, x[keep], y[keep], ids=_select(ids, keep))
        return rest + float(hit.sum()) * self.gradient(j, rest)

    def grads(self, grad_fn, Z, x, y, *, ids):
        """The base's per-example gradients (D2P), with the canary's rows replaced by its injected gradient.

        Args:
            grad_fn, Z, x, y, ids: as :meth:`PerExample.grads` (``ids``: the records' ``(holder, index)`` tensors).

        Returns:
            The per-example gradients, ``[nodes, records, d]``.
        """
        j = self.point(Z)
        g = self.base.grads(grad_fn, Z, x, y, ids=ids)
        hit = self._hit(ids)
        if bool(hit.any()):
            g = g.clone()
            g[hit] = self.gradient(j, g)
        return g


def plant(opt, gradient, holder: int = 0) -> None:
    """Make record 0 of ``holder``'s data in ``opt`` a :class:`GradientCanary` (validated against the
    model's size and the run's holders); ``None`` leaves the records as they are.

    Args:
        opt: the optimizer (one-process transport).
        gradient: ``gradient(j)`` -> the flat gradient at the j-th point, a flat tensor of the model's
            size, or None.
        holder: the canary's holder, an integer in [0, ``opt.holders()``).

    Raises:
        InputError: if the transport does not hold every holder, the gradient is not a flat vector
            of the model's size, or ``holder`` is out of range.
    """
    if gradient is None:
        return
    if not getattr(opt.transport, "holds_everyone", True):
        raise InputError(f"a gradient canary is not allowed on the {opt.transport.name} transport: audit the "
                         "one-process optimizer.")
    d = sum(p.numel() for p in opt.model.parameters())
    fn = gradient if callable(gradient) else (lambda j, g=gradient: g)
    g0 = torch.as_tensor(fn(0))
    if g0.shape != (d,):
        raise InputError(f"gradient is not allowed: expected a flat vector of the model's {d} parameters, "
                         f"got shape {tuple(g0.shape)}.")
    holders = opt.holders()
    if isinstance(holder, bool) or not isinstance(holder, int) or not 0 <= holder < holders:
        raise InputError(f"holder={holder!r} is not allowed: expected an integer in [0, {holders - 1}].")
    opt.per_example = GradientCanary(opt.per_example, fn, holder)


class _ManyTerms(PerExample):
    def __init__(self, base: PerExample, owner: "ManyCanaries"):
        self.base, self.owner = base, owner

    def _rows(self, like):
        return self.owner.current.to(like.device, like.dtype)

    def clipped_sum(self, model, loss_fn, params, x, y, c, *, ids, weights=None, stabilizer=None):
        s = self.base.clipped_sum(model, loss_fn, params, x, y, c, ids=ids, weights=weights, stabilizer=stabilizer)
        rows = self._rows(s)
        f = clip_factors(torch.linalg.vector_norm(rows.to(torch.float64), dim=1), c, stabilizer).to(s.dtype)
        return s + (f[:, None] * rows).sum(0)

    def grad_sum(self, model, loss_fn, params, x, y, *, ids):
        s = self.base.grad_sum(model, loss_fn, params, x, y, ids=ids)
        return s + self._rows(s).sum(0)


class ManyCanaries(Sampler):
    """``m`` gradient canaries (row i of ``gradients``: canary i's gradient at every point); canary i
    is a record of the dataset iff ``included[i]`` and is then Poisson-sampled at the records' rate,
    its draw taken from the run's data generator after the records'.  Install with :meth:`install`
    (the optimizer's sampler and per-example object).

    Args:
        gradients: ``[m, d]``, row i the gradient of canary i at every point.
        included: m flags: is canary i a record of the dataset?
        base: the sampler of the records; None for the plain one (:meth:`install` replaces it by the run's).

    Raises:
        InputError: if ``gradients`` is not two-dimensional or ``included`` does not have m flags.
    """

    def __init__(self, gradients: torch.Tensor, included, base: Sampler | None = None):
        self.gradients = torch.as_tensor(gradients)
        self.included = torch.as_tensor(included, dtype=torch.bool).reshape(-1)
        if self.gradients.ndim != 2 or self.included.shape[0] != self.gradients.shape[0]:
            raise InputError(f"included is not allowed: {self.included.shape[0]} flags for "
                             f"{self.gradients.shape[0]} canaries.")
        self.base = Sampler() if base is None else base
        self.current = self.gradients[:0]

    def install(self, opt) -> None:
        """Make this the optimizer's sampler (the old one its base) and wrap its per-example object.

        Args:
            opt: the optimizer.

        Raises:
            InputError: if ``gradients`` is not ``[m, d]`` with m >= 1 and d the model's size.
        """
        d = sum(p.numel() for p in opt.model.parameters())
        if self.gradients.shape[1] != d or self.gradients.shape[0] < 1:
            raise InputError(f"gradients is not allowed: expected a [m, {d}] tensor (one row per canary), got shape "
                             f"{tuple(self.gradients.shape)}.")
        self.base = opt.sampler
        opt.sampler = self
        opt.per_example = _ManyTerms(opt.per_example, self)

    def poisson(self, n, q, generator, *, holder=0):
        """The base's Poisson sample, then each canary's inclusion at the same rate (kept for the per-example terms).

        Args:
            n, q, generator, holder: as :meth:`Sampler.poisson`.

        Returns:
            The indices (ascending) of the sampled records.
        """
        idx = self.base.poisson(n, q, generator, holder=holder)
        keep = (torch.rand(self.gradients.shape[0], generator=generator, device=generator.device) < q).cpu()
        self.current = self.gradients[keep & self.included]
        return idx

    def without_replacement(self, n, size, generator, *, holder=0):
        """The base's sample (the canaries take no part).

        Args:
            n, size, generator, holder: as :meth:`Sampler.without_replacement`.

        Returns:
            ``size`` distinct indices.
        """
        return self.base.without_replacement(n, size, generator, holder=holder)

    def one(self, n, generator, *, holder=0):
        """The base's draw (the canaries take no part).

        Args:
            n, generator, holder: as :meth:`Sampler.one`.

        Returns:
            One index, a tensor of shape [1].
        """
        return self.base.one(n, generator, holder=holder)


class WORCoupling(Sampler):
    """The coupling behind the replace-one amplification of fixed-size sampling without replacement.

    A uniform b-subset B of a population {0, ..., n-1} whose record 0 differs between D and D' (the
    canary) is drawn as: a uniform b-subset S' of the others, a uniform k in S', and with
    probability gamma = b/n the batch is ``S' - {k} + {0}`` ("in"), else ``S'`` ("out").  Given
    (S', k) each release is the mixture ``(1 - gamma) N(q(S'), s^2) + gamma N(q(S' - k + canary), s^2)``
    under D and the same with the other canary under D' -- the pair the replace-one analysis of
    sampling without replacement bounds (Balle, Barthe & Gaboardi 2018, Thm 10: the coupling that
    gives amplification under the substitution relation), so a test that knows (S', k) tests the
    claim itself.  From the batch B the run drew, (S', k) is completed with the auditor's own
    randomness: if 0 in B, S' = B - {0} + {k} with k uniform among the others outside B; else
    S' = B and k uniform in B.  Every follower of a run gets the same (S', k) for a release (its
    randomness is keyed by the run's seed and the release's index, ``releases()`` being the number
    of releases the run has recorded; a one-record draw is a D2P node's, released ``holder`` rows
    after them); ``mode`` picks the batch it computes: "in" (canary in) or "out".  Only the
    ``holder``'s samples are rewritten.  ``gammas`` records b/n per release index.

    Args:
        seed: the run's seed (keys the coupling's randomness).
        mode: ``"in"`` (canary in) or ``"out"``.
        releases: ``releases()`` -> the number of releases the run has recorded; required to rewrite samples.
        holder: the holder whose samples are rewritten.
        base: the sampler that draws; None for the plain one.

    Raises:
        InputError: if ``mode`` is not ``"in"`` or ``"out"``.
    """

    def __init__(self, seed: int, mode: str, releases=None, holder: int = 0, base: Sampler | None = None):
        if mode not in ("in", "out"):
            raise InputError(f"mode={mode!r} is not allowed: expected 'in' or 'out'.")
        self.seed, self.mode, self.gammas = int(seed), mode, {}
        self.releases, self.holder = releases, int(holder)
        self.base = Sampler() if base is None else base

    def poisson(self, n, q, generator, *, holder=0):
        """The base's Poisson sample, unchanged.

        Args:
            n, q, generator, holder: as :meth:`Sampler.poisson`.

        Returns:
            The indices (ascending) of the sampled records.
        """
        return self.base.poisson(n, q, generator, holder=holder)

    def without_replacement(self, n, size, generator, *, holder=0):
        """The base's sample, rewritten into the coupling's ``mode`` batch for ``holder``.

        Args:
            n, size, generator, holder: as :meth:`Sampler.without_replacement`.

        Returns:
            ``size`` distinct indices (the holder's: the coupled batch).

        Raises:
            InputError: if the holder's sample is to be rewritten and ``releases`` is None.
        """
        idx = self.base.without_replacement(n, size, generator, holder=holder)
        return idx if int(holder) != self.holder else self(idx, n, self._at())

    def one(self, n, generator, *, holder=0):
        """The base's one-record draw, rewritten into the coupling's ``mode`` for ``holder``.

        Args:
            n, generator, holder: as :meth:`Sampler.one`.

        Returns:
            One index, a tensor of shape [1] (the holder's: the coupled draw).

        Raises:
            InputError: if the holder's draw is to be rewritten and ``releases`` is None.
        """
        idx = self.base.one(n, generator, holder=holder)
        return idx if int(holder) != self.holder else self(idx, n, self._at() + self.holder)

    def _at(self) -> int:
        if self.releases is None:
            raise InputError("releases=None is not allowed for a coupling that draws: pass a callable giving the "
                             "number of releases the run has recorded.")
        return int(self.releases())

    def __call__(self, idx: torch.Tensor, population: int, at: int) -> torch.Tensor:
        b = int(idx.numel())
        self.gammas[at] = b / population
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, at])
        chosen = idx.tolist()
        if 0 in chosen:
            others = [i for i in chosen if i != 0]
            taken = set(chosen)
            pool = [i for i in range(1, population) if i not in taken]
            if self.mode == "in" or not pool:       # no "out" batch when b = n (gamma = 1: never used)
                return idx
            k = pool[int(rng.integers(len(pool)))]
            return torch.tensor(others + [k], dtype=idx.dtype, device=idx.device)
        if self.mode == "out":
            return idx
        drop = int(rng.integers(b))
        return torch.tensor([i for j, i in enumerate(chosen) if j != drop] + [0], dtype=idx.dtype, device=idx.device)
