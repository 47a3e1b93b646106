"""Batched audit runs: many independent runs of a full-batch optimizer stacked along a leading
tensor dimension (the "run" axis), on the model's device (CPU or CUDA).

The sequential audit (:mod:`optim.audit`) steps, per seed, a leader on dataset D and a twin on the
neighbour D' that receives the leader's releases.  For DP-GD and DIFF2-GD with full batches the twin
walks exactly the leader's iterates and hidden state -- DIFF2's running estimator ``v~`` *is* the
released value -- so at every release the two only differ in the canary's term of the current
query.  A batched round therefore needs, per run, one iterate, the previous iterate and ``v~``.

The round itself is the optimizer's own kernel (:class:`~dpcalib.optim.algorithms.diff2_kernels.DIFF2Kernel`,
a copy of the template's, its ``v~`` one row per run): it asks the queries of a batched
:class:`~dpcalib.optim.algorithms.kernels.Queries` (:class:`_Round`, one row per run, the clips and
stds one per run) and releases through the round's ``release``, which adds the canary's term on D
and on D', draws the noise and scores the release.  What this module adds:

* per-example gradients of every run at once, from the clipping package
  (:func:`dpcalib.optim.clipping.points.point_grads`: ``vmap`` over runs of ``vmap`` over records of
  ``grad`` of the per-example loss, any ``nn.Module``; the D2P nodes' gradients are the same code);
* each run's step length (the kernel turns it into the run's clip ``C_{2,r} = C2 ||x_{r-1} - x_{r-2}||``
  and std, ``mechanism.std`` being the one owner of the rule), the clipping rule from
  :func:`optim.clipping.clip_factors`;
* the noise of run i from run i's own generator, seeded exactly as the sequential run with the
  same seed seeds its :class:`~dpcalib.optim.algorithms.noise.NoiseSource`, drawn in the same order with the same
  shape and dtype: the sequential path is the oracle, and both give the same statistic per run
  (up to floating-point reassociation of the clipped sums; tests: float64 to 1e-9).

The configuration (model, data, weights, clips, learning rate, noise levels, mechanism) is read
from one optimizer built by ``build(seed)``, the same callable the sequential audit uses; the
initial parameters must not depend on the seed (checked on the first and last run of each batch).
"""

from __future__ import annotations

import copy
import math

import torch

from ...accountant.validation import InputError
from ...mechanisms.registry import names
from ..algorithms.noise import split_public
from ..algorithms.kernels import Queries
from ..tensors import flat
from .canaries import plant
from .lockstep import gaussian_llr
from ..clipping.paths import clip_factors
from ..clipping.points import clipped_point_sums, point_grads
from ..clipping.precision import DIFFERENCE_DTYPE, widened
from ..randomness import stream_seeds

__all__ = ["supports_batching"]


def supports_batching(opt) -> bool:
    """True for DP-GD and DIFF2-GD on one process (DIFF2-BVR's local steps sample records).

    Args:
        opt: an optimizer.

    Returns:
        Whether :func:`batched_llr` can run ``opt``'s audit.
    """
    from ..algorithms.diff2 import DIFF2BVR, DIFF2GD

    return isinstance(opt, DIFF2GD) and not isinstance(opt, DIFF2BVR) and opt.transport.holds_everyone


def _noise_sources(template, seeds) -> list:
    """Run i's noise source: the template's NoiseSource class, seeded as the sequential run with
    ``seeds[i]`` seeds its own (:func:`~dpcalib.optim.randomness.stream_seeds`), so every draw goes through the same code."""
    cls = type(template.privatizer)
    return [cls(stream_seeds(s)[1], template.device, template.dtype) for s in seeds]


class _Batch:
    """One batch of runs: the template optimizer's configuration and the per-example gradient map."""

    def __init__(self, template, holder: int):
        t = template
        self.t = t
        # record 0 of the holder is the canary: its row leaves the real records, its weight moves to the canary
        row = t.offsets[holder]
        self.w = t.w.clone()
        self.w_canary = float(t.w[row])
        self.w[row] = 0.0
        self.d = sum(p.numel() for p in t.model.parameters())
        like = {k: p.detach() for k, p in t.model.named_parameters()}
        self._grads = point_grads(t.model, t.loss_fn, like, shared_records=True)

    def per_example(self, theta: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``[runs, records, d]`` per-example gradients at each run's flat parameters ``theta`` (computed
        in ``dtype`` when given: a difference release's float64, as the optimizer's own)."""
        if dtype is None:
            return self._grads(theta, self.t.x, self.t.y)
        return self._grads(widened(theta, dtype), widened(self.t.x, dtype), widened(self.t.y, dtype))


def _clipped_sum(per: torch.Tensor, c, w: torch.Tensor) -> torch.Tensor:
    """``sum_i w_i clip(per_i, c)`` per run (``c``: a float or one clip per run): the clipping
    package's clipped sums over points (:func:`dpcalib.optim.clipping.points.clipped_point_sums`,
    the D2P nodes' too; norms in float64)."""
    return clipped_point_sums(per, c, w)


def _canary_term(bt, g: torch.Tensor, c, runs: int) -> torch.Tensor:
    """``w_canary * clip(g, c)`` per run (``g``: the canary's gradient or gradient difference)."""
    n = torch.linalg.vector_norm(g, dtype=torch.float64).reshape(1)     # as the canary's own clip (canaries.py)
    f = clip_factors(n, c).to(g.dtype)          # c a tensor [runs]: one factor per run
    return bt.w_canary * f.reshape(-1, 1).expand(runs, 1) * g.reshape(1, -1)


def _cg(canary, j: int, t) -> torch.Tensor:
    return torch.as_tensor(canary(j)).to(t.device, t.dtype)


class _Round(Queries):
    """One round of every run of a batch: the kernel's queries at each run's point ``theta`` (and
    ``prev``), rows = runs, without the canary's record; the canary's terms on D and D' of the query
    asked, for :meth:`release`."""

    def __init__(self, bt: _Batch, j: int, theta, prev, canary_d, canary_dprime):
        self.bt, self.j, self.theta, self.prev = bt, j, theta, prev
        self.canaries = (canary_d, canary_dprime)
        self.terms = None

    def _canary_terms(self, g, c) -> None:
        runs = self.theta.shape[0]
        self.terms = tuple(_canary_term(self.bt, g(cn), c, runs) for cn in self.canaries)

    def clipped_sum(self, c, stabilizer=None):
        t = self.bt.t
        self._canary_terms(lambda cn: _cg(cn, self.j, t), c)
        return _clipped_sum(self.bt.per_example(self.theta), c, self.bt.w)

    def clipped_diff_sum(self, c):
        t, wide = self.bt.t, DIFFERENCE_DTYPE                  # as the release computes it (clipping.precision)
        self._canary_terms(lambda cn: _cg(cn, self.j, t) - _cg(cn, self.j - 1, t), c.to(t.dtype))
        per = self.bt.per_example(self.theta, wide) - self.bt.per_example(self.prev, wide)
        return _clipped_sum(per, c.to(per.dtype), self.bt.w).to(t.dtype)

    def step_length(self):
        return torch.linalg.vector_norm(self.theta - self.prev, dim=1).to(torch.float64)


def _run_batch(bt: _Batch, seeds, truth_is_d, canary_d, canary_dprime) -> torch.Tensor:
    """The statistic ``S = sum_r log p_D(o_r) - log p_D'(o_r)`` of each run (float64, CPU)."""
    t = bt.t
    runs = len(seeds)
    dev, dt = t.device, t.dtype
    sources = _noise_sources(t, seeds)
    truth = torch.as_tensor(truth_is_d, device=dev).reshape(-1, 1)
    theta = flat(t.params()).reshape(1, -1).expand(runs, -1).clone()
    prev = None
    stat = torch.zeros(runs, dtype=torch.float64, device=dev)
    kernel = copy.copy(t.kernel)                    # the optimizer's own round, v~ one row per run
    kernel.load_state_dict({"v": None})
    for r in range(1, t.total_rounds + 1):
        q = _Round(bt, r - 1, theta, prev, canary_d, canary_dprime)   # r - 1: id of the parameter point

        def release(value, std, public=None, **record):
            nonlocal stat
            std = torch.as_tensor(std, dtype=torch.float64, device=dev).expand(runs)
            query = split_public(value, public)[1]
            q_d, q_p = (query + term for term in q.terms)
            draw = (std > 0).tolist()
            z = torch.stack([src.standard((bt.d,)) if k else torch.zeros(bt.d, device=dev, dtype=dt)
                             for src, k in zip(sources, draw)])
            o = torch.where(truth, q_d, q_p) + std.to(dt).reshape(-1, 1) * z
            stat = stat + gaussian_llr(o, q_d, std, q_p, std)
            return o

        o, _ = kernel.step(q, release, r, t.is_restart(r))
        prev = theta
        theta = theta - t.lr * o
    return stat.cpu()


def _check_against_sequential(build, canary_d, canary_dprime, seed, truth, holder, value, dtype, rounds):
    """Re-run one run as a sequential leader/twin pair and compare its statistic with the batched one."""
    from .lockstep import pair_llr

    ref = pair_llr(build, seed, canary_d, canary_dprime, truth, holder)
    tol = 1e4 * torch.finfo(dtype).eps * (1.0 + abs(ref)) * max(1, rounds)
    same = ref == value if math.isinf(ref) or math.isinf(value) else abs(ref - value) <= tol
    if not same:
        raise RuntimeError(f"the batched audit disagrees with the optimizer itself on seed {seed}: statistic "
                           f"{value!r} batched vs {ref!r} sequential (tolerance {tol:.2g}); the optimizer's update "
                           "is not the one the batched runs model -- audit it with batch=None.")


def batched_llr(build, canary_d, canary_dprime, seeds, truth_is_d, *, holder: int = 0, batch: int = 4096,
                progress=None, verify: bool = True):
    """Per-run statistics ``S`` (list of floats) of the runs with the given seeds; ``truth_is_d[i]``:
    run i releases from D (canary ``canary_d``) or from D' (``canary_dprime``).  Same values as the
    sequential audit's leader/twin pairs with those seeds and truths (see module doc).

    ``verify``: the first run of every batch is also run as a sequential leader/twin pair of the
    real optimizer and the two statistics must agree (to a few thousand ulps), else RuntimeError --
    so a batched audit never audits a model of the optimizer that has drifted from the optimizer.

    Args:
        build: ``build(seed)`` -> a fresh optimizer whose initial parameters do not depend on the seed.
        canary_d: the canary of D (``canary(j)`` callable or flat tensor).
        canary_dprime: the canary of D'.
        seeds: the runs' seeds.
        truth_is_d: one flag per seed: does the run release from D?
        holder: the canaries' holder.
        batch: runs per batch, an integer >= 1.
        progress: show a progress bar (None: tqdm's default, shown on a terminal).
        verify: check the first run of every batch against the sequential pair.

    Returns:
        A list of floats, one statistic S per seed, in order.

    Raises:
        InputError: if ``batch`` is not an integer >= 1, the optimizer cannot be batched, its
            initial parameters depend on the seed, or the canary or holder is invalid.
        RuntimeError: if ``verify`` finds the batched and sequential statistics disagree.
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch={batch!r} is not allowed: expected an integer >= 1 (runs per batch).")
    from tqdm.auto import tqdm

    seeds, truth_is_d = list(seeds), [bool(x) for x in truth_is_d]
    out: list[float] = []
    bar = tqdm(total=len(seeds), desc="audit (batched)", disable=(None if progress is None else not progress),
               leave=False)
    try:
        for a in range(0, len(seeds), batch):
            chunk = seeds[a:a + batch]
            template = build(chunk[0])
            if not supports_batching(template):
                raise InputError(f"the audited optimizer ({template.name}) is not allowed in a batched audit: "
                                 f"expected one of {names(batched=True)} on one process (pass batch=None for the "
                                 "sequential audit).")
            last = build(chunk[-1])
            if not all(torch.equal(x, y) for x, y in zip(template.params().values(), last.params().values())):
                raise InputError("build is not allowed in a batched audit: the initial parameters depend on the "
                                 "seed (batched runs share one starting point; use batch=None).")
            plant(template, canary_d, holder)           # validates the canary and the holder
            with torch.no_grad():
                vals = _run_batch(_Batch(template, holder), chunk, truth_is_d[a:a + batch], canary_d,
                                  canary_dprime).tolist()
            if verify:
                _check_against_sequential(build, canary_d, canary_dprime, chunk[0], truth_is_d[a], holder,
                                          vals[0], template.dtype, template.total_rounds)
            out.extend(vals)
            bar.update(len(chunk))
    finally:
        bar.close()
    return out
