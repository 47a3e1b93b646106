"""The user's ``torch.optim`` optimizer, wrapped: its ``.grad`` is the algorithm's private direction.

:class:`DPOptimizer` is a ``torch.optim.Optimizer`` (learning-rate schedulers, ``state_dict``,
``param_groups`` are the wrapped optimizer's own).  Its :meth:`DPOptimizer.step`:

1. asks the batch's captures (:mod:`.module`) for the terms the kernel declares
   (:meth:`~dpcalib.optim.algorithms.kernels.Kernel.asks`), summed over the physical batches of the
   logical batch and, on several processes, over the processes (the transport);
2. checks the budget: a step past the calibrated run raises (``allow_overspend=True``: warns);
3. runs the kernel (:mod:`dpcalib.optim.algorithms.kernels`): it releases through the run's noise
   source -- the same noise, sensitivity and record as the reference optimizer -- and updates its
   state (DiceSGD's error feedback, DP-SRM's momentum);
4. charges the release to the engine's ledger (:mod:`.ledger`) as it ran;
5. writes :meth:`~dpcalib.optim.algorithms.kernels.Kernel.direction` into every parameter's
   ``.grad`` and calls the wrapped optimizer's ``step``.

A physical batch that is not the last of its logical batch (:class:`.memory.BatchMemoryManager`
signals it) only adds its terms.

Before anything is charged, a step checks that it holds what it wraps: every trained parameter is still
the module's own (one replaced after ``make_private`` -- ``module.weight = nn.Parameter(...)``, or
``model.to(...)`` making new ``Parameter`` objects -- would be updated in its stale copy while the model
stood still), the optimizer steps those parameters only, ``zero_grad`` ran since the last step (the
``.grad`` tensors the last step wrote, by identity and version counter, untouched since) and no gradient
reached the parameters outside the private forward.

``p.summed_grad`` (Opacus's attribute, read by its users' scripts): after each :meth:`step` of a physical
batch that is not the last of its logical batch, every trained parameter holds its part of the sum of the
records' clipped gradients of the logical batch so far, on this process, before any noise (the kernel's
clipped sum: DP-SGD's at its clip, per-layer bounds included; DiceSGD's and DP-SRM's at ``C1``), unscaled,
in the parameter's dtype and shape.  A copy: the release never writes into it.  It is the un-noised sum
-- as sensitive as the data (docs/threat-model.md) -- so the step that releases it with noise sets it to
``None``: nothing un-noised stays on the parameters after the release, nor in a model pickled then.  A release
without noise (every level 0, eps infinite: the release is that sum) keeps it, and so does
``make_private(..., keep_summed_grad=True)`` after every release, until :meth:`zero_grad` (Opacus's
behaviour).  :meth:`zero_grad` sets it to ``None`` except between the physical batches of one logical
batch, where the sum goes on, as Opacus's ``DPOptimizer`` does.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch.optim import Optimizer

from ...accountant.validation import InputError
from ..randomness import SecureGenerator, is_secure
from .hooks import engine_internal
from .capture import one_batch

__all__ = ["DPOptimizer", "BudgetExceeded", "OverspendWarning"]


class BudgetExceeded(RuntimeError):
    """A step would spend more privacy than the calibrated run (``allow_overspend=False``)."""


class OverspendWarning(UserWarning):
    """A step spent more privacy than the calibrated run (``allow_overspend=True``)."""


def _check_stds(kernel, levels: dict, dtype) -> None:
    """Every release's std at ``levels`` must be a number of the model's dtype (a float32 model cannot
    carry a std of 1e300: the noise would be inf)."""
    saved = kernel.levels
    kernel.levels = levels
    try:
        top = torch.finfo(dtype).max
        for first in (True, False):
            kind = kernel.kind(first)
            std = kernel.std(kind)
            if not std < top:
                raise InputError(f"noise={levels} is not allowed: the std of the release {kind!r} is {std:g}, more than "
                                 f"the model's {dtype} can hold ({top:g}).")
    finally:
        kernel.levels = saved


def _wrapped(name: str) -> property:
    """A property that reads and writes the wrapped optimizer's attribute ``name``."""
    return property(lambda self: getattr(self.original_optimizer, name),
                    lambda self, value: setattr(self.original_optimizer, name, value),
                    doc=f"The wrapped optimizer's ``{name}``.")


class _Summed:
    """The kernel's queries answered from terms already summed over the logical batch, in the order
    the kernel declared them."""

    def __init__(self, values: dict):
        self.values = values

    def _get(self, key):
        if key not in self.values:
            raise RuntimeError(f"the kernel asked for {key}, which it did not declare")    # pragma: no cover
        return self.values[key]

    def clipped_sum(self, c, stabilizer=None):
        return self._get(("clipped_sum", float(c), stabilizer))

    def clipped_diff_sum(self, c):
        return self._get(("clipped_diff_sum", float(c)))

    def grad_sum(self):
        return self._get(("grad_sum",))


class DPOptimizer(Optimizer):
    """``optimizer`` (any ``torch.optim.Optimizer``) driven by ``kernel`` on the batches of
    ``module`` (a :class:`~.module.PrivateModule`).  Built by :class:`~.engine.PrivacyEngine`.

    Args:
        optimizer: the user's ``torch.optim.Optimizer`` of the module's parameters.
        module: the :class:`~.module.PrivateModule` (or :class:`~.perlayer.PerLayerModule`) whose batches it steps on.
        kernel: the algorithm's kernel (its release, noise levels and clip; its mechanism is the run's,
            charged to ``ledger``).
        ledger: the engine's :class:`~.ledger.Ledger`.
        privatizer: the noise source.
        transport: how the terms are reduced and the noise released (one process, or ranks).
        budget: the calibrated budget of ``make_private_with_epsilon`` (a dict), or None.
        allow_overspend: a step past the budget warns instead of raising.
        criterion: the engine's criterion (DP-SRM's previous point needs it), or None.
        regularizer: ``r(params) -> scalar tensor``, a public term of the objective, or None.
        loader: the private loader (its passes, for the shuffled runs' charges), or None.
        per_layer: the ``PerLayerClip`` of ``clipping="per_layer"``, or None.
        keep_summed_grad: keep ``p.summed_grad`` after a release with noise, until the next ``zero_grad``.

    Raises:
        InputError: if ``optimizer`` is not a ``torch.optim.Optimizer``, is already a ``DPOptimizer``, holds
            parameters that are not the module's, or a release's std does not fit the model's dtype.
    """

    def __init__(self, optimizer: Optimizer, *, module, kernel, ledger, privatizer, transport, budget=None,
                 allow_overspend: bool = False, criterion=None, regularizer=None, loader=None, per_layer=None,
                 keep_summed_grad: bool = False):
        if not isinstance(optimizer, Optimizer):
            raise InputError(f"optimizer={type(optimizer).__name__} is not allowed: expected a torch.optim.Optimizer.")
        if isinstance(optimizer, DPOptimizer):
            raise InputError("optimizer is not allowed: it is already a DPOptimizer (make_private was called on it).")
        mine = {id(p) for p in module.inner.parameters()}
        foreign = [p for g in optimizer.param_groups for p in g["params"] if id(p) not in mine]
        if foreign:
            raise InputError(f"optimizer is not allowed: {len(foreign)} of its parameters are not the module's "
                             "(Module parameters are different than optimizer Parameters: build the optimizer from "
                             "the parameters of the module passed in, after any ModuleValidator.fix).")
        self.original_optimizer = optimizer
        self.dtype = module.named[0][1].dtype
        _check_stds(kernel, dict(kernel.levels), self.dtype)
        self.module, self.kernel, self.ledger = module, kernel, ledger
        self.privatizer, self.transport = privatizer, transport
        self.budget, self.allow_overspend, self.criterion = budget, bool(allow_overspend), criterion
        self.round = 0                      # logical steps taken
        self.prev = None                    # the parameters before the last step (DP-SRM's previous point)
        self._keeps_prev = any(op == "clipped_diff_sum" for first in (True, False) for op, _ in kernel.asks(first))
        self._sums: dict | None = None      # terms of the logical batch so far
        self._skip = False
        self._after_skip = False            # the last step was a physical batch that was not the last of its batch
        self._step_hooks: list = []
        self.regularizer = regularizer      # r(params): its gradient is added to the direction (public)
        self._given = None                  # the .grad views the last step wrote, and their version counters
        self.loader = loader                # the private loader: its passes, for the shuffled runs' charges
        if loader is not None:
            module.clock = loader           # its batch count tells two loader batches apart (module.one_batch)
        self.per_layer = per_layer          # PerLayerClip of clipping="per_layer" (the kernel's C is its norm)
        self._pass = None                   # (pass, levels) whose one release per record is charged already
        self.keep_summed_grad = bool(keep_summed_grad)
        for _, p in module.named:            # Opacus's attribute, None until the first step (see the module text)
            p.summed_grad = None

    # -- torch.optim.Optimizer: the wrapped optimizer's state -----------------------------------------
    param_groups = _wrapped("param_groups")
    state = _wrapped("state")
    defaults = _wrapped("defaults")

    @property
    def mechanism(self):
        """The run's mechanism, charged to the ledger: the kernel's (its one holder)."""
        return self.kernel.mechanism

    def __repr__(self):
        return f"DPOptimizer({self.kernel.name}, noise={self.noise}, {self.original_optimizer!r})"

    # -- noise (Opacus's name for DP-SGD's level, and every algorithm's levels) --------------------------
    @property
    def noise(self) -> dict:
        """The noise levels of the next step (``{"noise_multiplier": z}`` for DP-SGD)."""
        return dict(self.kernel.levels)

    def set_noise(self, **levels) -> None:
        """Change noise levels from the next step on (charged to the ledger as they run).

        Args:
            **levels: ``name=level`` for some of the algorithm's noise levels, each a finite number >= 0.

        Raises:
            InputError: if a name is not one of the algorithm's levels, a level is not a finite number >= 0, or
                a release's std would not fit the model's dtype.
        """
        for k, v in levels.items():
            if k not in self.kernel.levels:
                raise InputError(f"{k}={v!r} is not allowed: this algorithm's noise levels are {sorted(self.kernel.levels)}.")
            f = float(v)
            if not (f >= 0) or math.isinf(f):
                raise InputError(f"{k}={v!r} is not allowed: expected a finite number >= 0.")
            _check_stds(self.kernel, {**self.kernel.levels, k: f}, self.dtype)
            self.kernel.levels[k] = f

    @property
    def noise_multiplier(self) -> float:
        """DP-SGD's noise multiplier (Opacus's name); settable mid-run."""
        if "noise_multiplier" not in self.kernel.levels:
            raise AttributeError(f"{self.kernel.name} has no noise_multiplier: its levels are {sorted(self.kernel.levels)}")
        return self.kernel.levels["noise_multiplier"]

    @noise_multiplier.setter
    def noise_multiplier(self, value):
        """Set DP-SGD's noise multiplier from the next step on (:meth:`set_noise`)."""
        self.set_noise(noise_multiplier=value)

    @property
    def max_grad_norm(self):
        """The clip norm of the next step (Opacus's name; settable mid-run, e.g. by its grad-clip
        schedulers).  Per-layer clipping: the list of bounds; setting a number scales them all so
        that their norm (the sensitivity) is that number.  The noise std follows it (``z C``), so the
        noise multiplier -- what the ledger charges -- is unchanged."""
        if self.per_layer is not None:
            return list(self.per_layer.scaled(self.kernel.clip / float(self.per_layer)))
        return self.kernel.clip

    @max_grad_norm.setter
    def max_grad_norm(self, value):
        """Set the clip norm from the next step on (a number; per-layer clipping: a number or the list of bounds)."""
        if value == self.max_grad_norm:
            return
        if not self.kernel.clip_schedulable:
            raise InputError(f"max_grad_norm={value!r} is not allowed to change for {self.kernel.name}: its "
                             "mechanism's sensitivities are fixed by the clips it was calibrated with.")
        if self.per_layer is not None and isinstance(value, (list, tuple)):
            from ...mechanisms import PerLayerClip

            new = PerLayerClip(value)
            if len(new) != len(self.per_layer):
                raise InputError(f"max_grad_norm is not allowed: {len(new)} bounds for {len(self.per_layer)} "
                                 "trained parameters.")
            self.per_layer, c = new, float(new)
        else:
            c = value if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")
            if not (c > 0) or math.isinf(c):
                raise InputError(f"max_grad_norm={value!r} is not allowed: expected a finite number > 0.")
        old, self.kernel.C = self.kernel.C, float(c)
        try:
            _check_stds(self.kernel, dict(self.kernel.levels), self.dtype)
        except InputError:
            self.kernel.C = old
            raise
        self.kernel.clip = self.kernel.C

    # -- the loop's calls -------------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True):
        """Clear the gradients and the recorded batches (between physical batches the logical batch's sum goes on).

        Args:
            set_to_none: set the gradients to None instead of zero.
        """
        self.original_optimizer.zero_grad(set_to_none)
        if not self._after_skip:             # between physical batches the logical batch's sum goes on
            self._clear_summed()
        self.module.clear(pending=True)      # a forward awaiting its backward stays (zero_grad between them)
        self.module.zeroed = True

    def signal_skip_step(self, do_skip: bool = True) -> None:
        """The next :meth:`step` is a physical batch that is not the last of its logical batch.

        Args:
            do_skip: True: the next step only adds its terms; False: it releases.
        """
        self._skip = bool(do_skip)

    def _first(self) -> bool:
        return self.round == 0

    def _terms(self) -> dict:
        """The terms the kernel asks for, of the one batch the module recorded since the last step."""
        cap, out = one_batch(self.module.captures), {}
        for op, args in self.kernel.asks(self._first()):
            key = (op,) + tuple(float(a) if isinstance(a, (int, float)) and a is not None else a for a in args)
            if op == "clipped_sum":
                out[key] = cap.clipped_sum(*args)
            elif op == "grad_sum":
                out[key] = cap.grad_sum()
            else:
                out[key] = cap.clipped_diff_sum(args[0], self.prev, self.criterion)
        return out

    def _accumulate(self) -> None:
        terms = self._terms()
        self._sums = terms if self._sums is None else {k: self._sums[k] + v for k, v in terms.items()}
        self.module.clear()
        self._set_summed()

    def _set_summed(self) -> None:
        """``p.summed_grad``: each trained parameter's part of the logical batch's clipped sum so far
        (this process's records, before noise), copied out of the sums so that nothing the release or a
        later accumulation does can write into it."""
        key = next((k for k in self._sums if k[0] == "clipped_sum"), None)
        if key is None:                                                   # pragma: no cover - every kernel asks one
            return
        flat = self._sums[key].detach().clone()
        i = 0
        for _, p in self.module.named:
            n = p.numel()
            p.summed_grad = flat[i:i + n].view_as(p).to(device=p.device, dtype=p.dtype)
            i += n

    def _clear_summed(self) -> None:
        for _, p in self.module.named:
            p.summed_grad = None

    def release_of(self, *, noise: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """The release :meth:`step` would make on the batch the module recorded, at the current
        parameters -- from ``generator`` (default: the run's noise stream), or noiseless -- while
        nothing is charged, stepped or kept (the kernel's state, levels and stream are restored).
        What the checks of :mod:`dpcalib.optim.audit.steps` call; in ``secure_mode`` the noise is
        drawn by the secure sampler, keyed by ``generator``'s seed, so that a check sees the noise
        the run adds.

        Args:
            noise: add the noise (False: the noiseless release).
            generator: the generator to draw the noise from, or None (the run's noise stream).

        Returns:
            The release (a flat tensor), as :meth:`step` would make it.

        Raises:
            InputError: if the module has not recorded exactly one back-propagated batch since the last step.
        """
        with engine_internal():
            sums = {k: self.transport.aggregate(v) for k, v in self._terms().items()}
            state, levels, gen = self.kernel.state_dict(), dict(self.kernel.levels), self.privatizer.generator
            if generator is not None:
                # a check's generator; a secure run's checks draw through its own sampler, keyed by that generator
                self.privatizer.generator = SecureGenerator.from_seed(generator.initial_seed(), gen.device) \
                    if is_secure(gen) else generator
            if not noise:
                self.kernel.levels = {k: 0.0 for k in levels}
            try:
                released, _ = self.kernel.step(_Summed(sums), self._release, self.round + 1, self._first())
                return released.clone()
            finally:
                self.kernel.load_state_dict(state)
                self.kernel.levels, self.privatizer.generator = levels, gen
                self.module.clear()

    def _check_budget(self, kind: str, count: int = 1) -> None:
        if self.budget is None or not count:
            return
        after = self.ledger.with_step(self.mechanism, self.kernel.levels, kind, count)
        plan = self.budget
        if "planned" not in plan:
            plan["planned"] = {k: v for k, v in plan["mechanism"].release_counts().items() if v}
        planned = plan["planned"]
        same = (len(after.groups) == 1 and after.groups[0][0] == plan["mechanism"]
                and after.groups[0][1] == {k: float(v) for k, v in plan["levels"].items()})
        if same and all(c <= planned.get(k, 0) for k, c in after.groups[0][2].items()):
            return                              # within the calibrated run
        eps = after.epsilon(plan["delta"], plan.get("accountant", "best"))     # the engine's get_epsilon
        if eps <= plan["epsilon"]:
            return
        msg = (f"step {self.round + 1} would spend eps = {eps:.6g} at delta = {plan['delta']:g}, past the budget "
               f"eps = {plan['epsilon']:g} (the calibrated run has {sum(planned.values())} steps)")
        if not self.allow_overspend:
            raise BudgetExceeded(msg + "; make_private(..., allow_overspend=True) to go on and keep charging.")
        warnings.warn(msg, OverspendWarning, stacklevel=3)

    def step(self, closure=None):
        """The private step: the batch's terms released with noise, charged to the ledger, then the wrapped step.

        A physical batch that is not the last of its logical batch (:meth:`signal_skip_step`) only adds its terms.

        Args:
            closure: a closure re-evaluating the loss (``torch.optim``'s), or None.

        Returns:
            The closure's loss, or None.

        Raises:
            InputError: if a trained parameter is not the one ``make_private`` wrapped (replaced since) or the
                optimizer holds trained parameters that are not the module's, ``zero_grad()`` was not called since
                the last step, the module did not record exactly one back-propagated batch, a gradient reached the
                parameters outside the private step, or the regularizer returned no scalar tensor.
            BudgetExceeded: if the step would spend past the calibrated budget (``allow_overspend=False``).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with engine_internal():            # the step's own calls of a hooked module (wrap_model=False) are plain
            self._step()
        return loss

    def _charges(self, kind: str) -> int:
        """Releases to charge for this step.  Shuffled or balls-in-bins batches and the loader's own (a
        partition): a record is in one batch per pass, so the first step of each (pass, noise levels) charges the
        pass's whole epoch -- ``steps_per_epoch`` releases, which the mechanism counts as one
        participation -- and the others nothing; a pass is the loader's (restarting it mid-pass
        starts a new one) or, past ``steps_per_epoch`` steps without a restart, a new one."""
        m = self.mechanism
        if not getattr(m, "epoch_wise", False):
            return 1
        T = m.steps_per_epoch
        passes = getattr(self.loader, "passes", 0)
        levels = tuple(sorted(self.kernel.levels.items()))
        pid, done, seen = self._pass if self._pass is not None else (None, 0, ())
        if pid != passes or done >= T:
            pid, done, seen = passes, 0, ()
        count = 0 if levels in seen else T
        self._pass = (pid, done + 1, seen if levels in seen else seen + (levels,))
        return count

    def _step(self) -> None:
        self._refuse_replaced()
        if not getattr(self.module, "zeroed", True) and (self._after_skip or self._stale()):
            raise InputError("optimizer.step() is not allowed here: optimizer.zero_grad() was not called since the "
                             "last step (Opacus requires it on each step, the physical batches of BatchMemoryManager "
                             "included; the gradients would otherwise be the last step's).")
        self._accumulate()
        self.module.zeroed = False
        self._after_skip = self._skip
        if self._skip:
            self._skip = False
            return
        self._refuse_foreign_grads()
        if getattr(self.transport, "world", 1) > 1:
            self._check_shares()
        first = self._first()
        kind = self.kernel.kind(first)
        saved = self._pass
        charge = self._charges(kind)
        try:
            self._check_budget(kind, charge)
        except BudgetExceeded:
            self._pass = saved
            raise
        sums = {k: self.transport.aggregate(v) for k, v in self._sums.items()}
        self._sums = None
        self.round += 1
        released, kind = self.kernel.step(_Summed(sums), self._release, self.round, first)
        if charge:
            self.ledger.charge(self.mechanism, self.kernel.levels, kind, count=charge)
        if not self.keep_summed_grad and any(self.kernel.levels.values()):
            self._clear_summed()            # released with noise: the un-noised sum does not outlive the release
        direction = self.kernel.direction(released)
        if self.regularizer is not None:
            direction = direction + self._regularizer_grad().to(direction.dtype)
        if self._keeps_prev:
            self.prev = {k: p.detach().clone() for k, p in self.module.named}
        i = 0
        for _, p in self.module.named:               # views of the one direction vector, made fresh each step
            n = p.numel()
            p.grad = direction[i:i + n].view_as(p)
            i += n
        for hook in self._step_hooks:
            hook(self)
        self.original_optimizer.step()
        views = [p.grad for _, p in self.module.named]
        self._given = (views, [v._version for v in views])      # as the step left them (its optimizer's own writes)

    def _check_shares(self) -> None:
        """On several processes: every rank drew the same logical batch, and the ranks' shares are disjoint
        and cover it (an all-gathered digest of the record indices: counts, sums and sums of squares), so that
        each record enters the release at most once whatever seeds or loaders the ranks were given."""
        digest = getattr(self.loader, "digest", None)
        if digest is None:
            raise InputError("optimizer.step() is not allowed here on several processes: the batch did not come from "
                             "the data loader make_private returned (its records' shares between the ranks cannot be "
                             "checked); loop over that loader.")
        self.loader.digest = None
        every = self.transport.gather(torch.tensor(digest, dtype=torch.int64))
        logical, shares = every[:, :3], every[:, 3:]
        for r in range(1, every.shape[0]):
            if not torch.equal(logical[r], logical[0]):
                raise InputError(f"optimizer.step() is not allowed here: at step {self.round + 1} rank {r} drew a "
                                 f"logical batch of {int(logical[r, 0])} records and rank 0 one of "
                                 f"{int(logical[0, 0])} (other records): the ranks' batches do not come from one root "
                                 "(a seed or loader generator per rank?); give every rank the same seed, or none.")
        total = shares.sum(0)
        total[2] = total[2] % 2147483647
        if not torch.equal(total, logical[0]):
            raise InputError(f"optimizer.step() is not allowed here: at step {self.round + 1} the ranks' shares hold "
                             f"{int(total[0])} records for a logical batch of {int(logical[0, 0])}: they overlap or miss "
                             "records, and a record would count twice or not as accounted.")

    def _regularizer_grad(self) -> torch.Tensor:
        """grad r at the current parameters, flat in the module's order."""
        params = {k: p.detach().requires_grad_(True) for k, p in self.module.named}
        r = self.regularizer(params)
        if not isinstance(r, torch.Tensor) or r.numel() != 1:
            raise InputError(f"regularizer is not allowed: it returned {type(r).__name__}, expected a scalar tensor.")
        gs = torch.autograd.grad(r.reshape(()), list(params.values()), allow_unused=True)
        return torch.cat([(torch.zeros_like(v) if g is None else g).reshape(-1) for g, v in zip(gs, params.values())])

    def _refuse_foreign_grads(self) -> None:
        """A gradient on the parameters that the private forward did not make (a regulariser added to the
        loss, a term computed from the parameters outside the module) would be overwritten by the private
        direction -- silently dropped -- or, if it were kept, could carry data that was never clipped or
        noised.  Refused in one line."""
        views = self._given[0] if self._given is not None else None
        mine = views is not None and all(p.grad is v for (_, p), v in zip(self.module.named, views))
        if mine:
            if self._stale():
                raise InputError("optimizer.step() is not allowed here: optimizer.zero_grad() was not called since "
                                 "the last step (Opacus requires it on each step too; the gradients would otherwise "
                                 "be the last step's).")
            # written since the step (their version moved): zeroed in place (zero_grad(set_to_none=False)) is fine
            foreign = any(bool(v.any()) for v in views)
        else:
            foreign = any(p.grad is not None and (views is None or p.grad is not views[i]) and bool(p.grad.any())
                          for i, (_, p) in enumerate(self.module.named))
        if foreign:
            raise InputError("optimizer.step() is not allowed here: a gradient reached the parameters outside the "
                             "private forward (e.g. a regulariser added to the loss), which the private step would "
                             "drop; pass regularizer=fn(params) to make_private (its gradient is public and is added "
                             "after the release), and call optimizer.zero_grad() before each batch.")

    def _stale(self) -> bool:
        """The parameters' ``.grad`` are still the tensors the last private step left, unwritten since (the
        same objects, their version counters unmoved: no ``zero_grad`` of any kind, no accumulation)."""
        if self._given is None:
            return False
        views, versions = self._given
        return all(p.grad is v and v._version == n for (_, p), v, n in zip(self.module.named, views, versions))

    def _refuse_replaced(self) -> None:
        """Every trained parameter must still be the module's own under its name, and the optimizer must step
        those only: a parameter replaced after ``make_private`` (``module.weight = nn.Parameter(...)``, or
        ``model.to(...)`` making new ``Parameter`` objects) would take the private step in its stale copy while
        the model's own never moved -- a run that trains nothing and is charged.  Refused in one line, before
        anything is charged."""
        now = dict(self.module.inner.named_parameters())
        gone = next((k for k, p in self.module.named if now.get(k) is not p), None)
        mine = {id(p) for p in now.values()}
        foreign = sum(id(p) not in mine and p.requires_grad for g in self.original_optimizer.param_groups
                      for p in g["params"])
        if gone is not None or foreign:
            what = (f"the module's parameter {gone!r} is not the one make_private wrapped" if gone is not None else
                    f"{foreign} of the optimizer's trained parameters are not the module's")
            raise InputError(f"optimizer.step() is not allowed here: {what} (a parameter replaced or added after "
                             "make_private, e.g. by module.weight = nn.Parameter(...) or model.to(...) making new "
                             "Parameters), so the step would train a stale copy while the model stays as it is; move "
                             "or replace the parameters before make_private and build the optimizer from them.")

    def _release(self, value, std, **kw):
        return self.transport.release(lambda: self.privatizer.privatize(value, std, **kw))

    def attach_step_hook(self, fn) -> None:
        """``fn(optimizer)`` after each private step's release, before the wrapped optimizer's step.

        Args:
            fn: ``fn(optimizer)``, called with this optimizer.
        """
        self._step_hooks.append(fn)

    # -- state -------------------------------------------------------------------------------------------
    def state_dict(self):
        """The optimizer's state for a checkpoint.

        The wrapped optimizer's state, the round, the previous point, the kernel's state, the noise levels,
        the noise source's state (its generator's only for a seeded run or the user's own generator:
        :meth:`~dpcalib.optim.algorithms.noise.NoiseSource.state_dict`), the epoch charged so far and the
        private loader's position.

        Returns:
            A dict of plain data and tensors.
        """
        loader = self.loader.state_dict() if hasattr(self.loader, "state_dict") else None
        return {"optimizer": self.original_optimizer.state_dict(), "round": self.round, "prev": self.prev,
                "kernel": self.kernel.state_dict(), "levels": dict(self.kernel.levels),
                "noise": self.privatizer.state_dict(), "pass": self._pass, "loader": loader}

    def load_state_dict(self, state):
        """Take back a :meth:`state_dict` (the noise levels included).  A run of fresh entropy keeps its own
        fresh noise stream and goes on with the saved loader position (see :mod:`.checkpoint`).

        Args:
            state: what :meth:`state_dict` returned.

        Raises:
            InputError: if the state was saved in the other mode (secure / plain, seeded / unseeded).
        """
        self.privatizer.load_state_dict(state["noise"])      # refuses a mode mismatch before anything changes
        self.original_optimizer.load_state_dict(state["optimizer"])
        self.round, self.prev = int(state["round"]), state["prev"]
        self.kernel.load_state_dict(state["kernel"])
        self.kernel.levels = dict(state["levels"])
        saved = state.get("pass")
        self._pass = None if saved is None else (saved[0], int(saved[1]), tuple(tuple(tuple(p) for p in lv) for lv in saved[2]))
        if state.get("loader") is not None and hasattr(self.loader, "load_state_dict"):
            self.loader.load_state_dict(state["loader"])
