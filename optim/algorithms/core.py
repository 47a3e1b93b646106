"""What every reference optimizer's update shares: its parameters, the random streams, the output
iterate, the events of the releases made and the privacy they spend; the noise of each release and its
record are :mod:`dpcalib.optim.algorithms.noise`.  The loop
that drives an update -- metrics, progress bar, checkpoints -- is :mod:`dpcalib.optim.run.runner`; what the
records of a batch contribute is :mod:`dpcalib.optim.clipping.per_example`; how batches are drawn is
:mod:`dpcalib.optim.data.sampling`.  An update knows none of the checks that watch it.

Randomness is split into three independent streams (:class:`dpcalib.optim.randomness.RunStreams`):

* ``data``   -- minibatch / Poisson sampling,
* ``noise``  -- the DP noise, owned by :class:`~dpcalib.optim.algorithms.noise.NoiseSource` and never used
  for anything else,
* ``output`` -- the data-independent choice of the returned iterate (``x^out``).

All three are secrets.  With no ``seed`` (the default) they come from fresh operating-system
entropy; ``seed=s`` makes them reproducible (and known to anyone who knows ``s``);
``secure_mode=True`` draws them from a ChaCha20 generator and the noise from a sampler that
floating-point attacks cannot exploit (:mod:`dpcalib.optim.randomness.secure`).  A seeded run's
checkpoint (:mod:`dpcalib.optim.run.runner`) saves all three, so its resume makes exactly the same
draws; an unseeded run's saves none, so its resume (or two forks of one file) draws afresh and never
replays a noise draw.  Either way a checkpoint is as secret as the data.
"""

from __future__ import annotations

import math
from collections import Counter

import torch
from torch import nn
from torch.func import functional_call

from ...accountant.validation import InputError
from ...accountant import PrivacyAccountant
from ...mechanisms import CalibrationReport

from ..clipping.per_example import PerExample
from ..run.runner import Runner
from ..tensors import flat
from ..data.sampling import Sampler
from .noise import NoiseSource
from ..randomness import RunStreams, uniform
from ..run.transport import ONE_PROCESS

__all__ = []


def squared_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-example squared error ``||f(x) - y||^2`` (regression, DIFF2 experiments).

    Args:
        output: model outputs, shape (n, ...).
        target: targets with n rows and as many entries per row as ``output``.

    Returns:
        The per-example losses, shape (n,).
    """
    return (output.reshape(output.shape[0], -1) - target.reshape(target.shape[0], -1)).pow(2).sum(1)


def cross_entropy_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy of logits (classification).  ``output`` of shape (n, k >= 2):
    softmax cross-entropy with integer labels 0..k-1; of shape (n,) or (n, 1): binary logistic
    loss ``log(1 + exp(-s z))`` with labels 0/1 (bool, int or float; s = +-1 for label 1/0).

    Args:
        output: logits, shape (n, k) with k >= 2, or (n,) / (n, 1) for a binary model.
        target: labels, n of them (integers 0..k-1; 0/1 for a binary model).

    Returns:
        The per-example losses, shape (n,).
    """
    if output.dim() == 1 or (output.dim() == 2 and output.shape[1] == 1):
        return torch.nn.functional.binary_cross_entropy_with_logits(
            output.reshape(-1), target.reshape(-1).to(output.dtype), reduction="none")
    return torch.nn.functional.cross_entropy(output, target.reshape(-1).long(), reduction="none")


def accuracy(output: torch.Tensor, target: torch.Tensor) -> float:
    """Fraction of examples whose predicted class (argmax of the logits; logit > 0 for one output)
    is the label.

    Args:
        output: logits, shape (n, k) with k >= 2, or (n,) / (n, 1) for a binary model.
        target: labels, n of them.

    Returns:
        The fraction correct, in [0, 1]; NaN when there are no examples (n = 0).
    """
    if output.shape[0] == 0:
        return math.nan
    if output.dim() == 1 or (output.dim() == 2 and output.shape[1] == 1):
        pred = (output.reshape(-1) > 0).long()
    else:
        pred = output.argmax(1)
    return float((pred == target.reshape(-1).long()).double().mean())


def _noise_levels(noise) -> dict:
    if isinstance(noise, CalibrationReport):
        return {k: v for k, v in noise.noise.items() if v is not None}
    if isinstance(noise, dict):
        out = {}
        for k, v in noise.items():
            if v is None:
                continue
            f = float(v)
            if not (f >= 0) or math.isinf(f):
                raise InputError(f"noise[{k!r}]={v!r} is not allowed: expected a finite number >= 0.")
            out[k] = f
        return out
    raise InputError(f"noise={noise!r} is not allowed: expected a CalibrationReport or a dict of noise levels.")


def check_clip(value, name: str) -> float:
    """A clipping threshold as a float, checked.

    Args:
        value: the threshold (anything ``float()`` accepts), in [0, inf].
        name: the argument's name, for the error message.

    Returns:
        ``float(value)``.

    Raises:
        InputError: if the value is NaN or negative.
    """
    c = float(value)
    if math.isnan(c) or c < 0:
        raise InputError(f"{name}={value!r} is not allowed: expected a number in [0, inf].")
    return c


def check_lr(value, name: str = "lr") -> float:
    """A learning rate (or other step size) as a float, checked.

    Args:
        value: the step size (anything ``float()`` accepts), finite and > 0.
        name: the argument's name, for the error message.

    Returns:
        ``float(value)``.

    Raises:
        InputError: if the value is not a finite number > 0.
    """
    f = float(value)
    if not (f > 0) or math.isinf(f):
        raise InputError(f"{name}={value!r} is not allowed: expected a finite number > 0.")
    return f


class PrivateOptimizer:
    """Base class of the updates.  Subclasses set ``mechanism``, ``total_rounds`` and implement
    ``_step(r)`` (one round: its releases go through ``self.privatizer``), ``_events()``, ``_state()`` /
    ``_load_state()`` and ``_objective()``.  Minibatches are drawn through ``sampler``
    (:class:`~dpcalib.optim.data.sampling.Sampler`, the plain draws by default), and the per-example part of
    every query is asked of ``per_example`` (:class:`~dpcalib.optim.clipping.per_example.PerExample`, naming the
    records by ``(holder, index)``).  :class:`~dpcalib.optim.run.runner.Runner` drives the rounds
    (:meth:`run` is its shortcut).

    ``seed``: None (the default) draws the run's data, noise and output streams from fresh
    operating-system entropy, so nobody can predict its batches or its noise.  An integer makes the
    run reproducible, for tests, audits and research -- and gives it away: anyone who knows the seed
    can regenerate every batch and every noise draw, subtract the noise from the released iterates
    and recover the clipped gradient sums exactly, so the run's eps protects nobody from them.
    ``secure_mode=True`` (Opacus's name) draws every stream from a ChaCha20 generator keyed by the
    operating system and adds the noise on a fixed grid, exactly as a rounded Gaussian, so that
    floating-point attacks on the noise's low bits learn nothing; the privacy accounted is the
    Gaussian mechanism's, unchanged (:mod:`dpcalib.optim.randomness.secure`).  On several processes
    the root of the streams is drawn once and shared inside the process group only.

    Args:
        model: the model whose parameters are trained (in place); it must have parameters.
        loss_fn: ``loss_fn(output, target)`` -> per-example losses (e.g. :func:`squared_loss`).
        mechanism: the mechanism the update implements (its ``name`` must match a calibration's).
        noise: a :class:`~dpcalib.mechanisms.CalibrationReport` or a dict of noise levels (each a
            finite number >= 0, or None for unused).
        seed: None (fresh entropy) or an integer >= 0 (reproducible, and known to whoever knows it).
        secure_mode: draw the streams from ChaCha20 and the noise on a fixed grid.
        record: record every release (see :class:`~dpcalib.optim.algorithms.noise.NoiseSource`).
        record_noise: with recording on, keep each release's noise.
        record_values: also keep the noiseless queries (audits).
        clip_method: ``"auto"``, ``"ghost"``, ``"layers"`` or ``"vmap"`` (see :class:`~dpcalib.optim.clipping.per_example.PerExample`).
        chunk_size: the number of examples per chunk of the per-example computation.
        transport: the process layout (one process by default).
        sampler: how minibatches are drawn (a :class:`~dpcalib.optim.data.sampling.Sampler`; the plain one by default).
        regularizer: ``regularizer(params) -> scalar tensor``, a data-independent term of the
            objective (only for updates with ``supports_regularizer``), or None.

    Raises:
        InputError: if an argument is of the wrong kind, the model has no parameters, the noise
            calibrates another algorithm, a regulariser is given where it is not supported, or
            ``seed`` is neither None nor an integer >= 0.
    """

    name = "private-optimizer"

    #: does the update add a regulariser's gradient to its direction (see ``regularizer``)?
    supports_regularizer = False
    #: the paper's learning rate and clip norms (by clip option: ``c1``, ``c2``, ``clip``) where they are not
    #: 0.1 and 1
    paper_values: dict = {}

    def __init__(self, model: nn.Module, loss_fn, *, mechanism, noise, seed: int | None = None,
                 secure_mode: bool = False, record: bool = False, record_noise: bool = True,
                 record_values: bool = False, clip_method: str = "auto", chunk_size: int = 1024, transport=None,
                 sampler: Sampler | None = None, regularizer=None):
        if not isinstance(model, nn.Module):
            raise InputError(f"model={model!r} is not allowed: expected a torch.nn.Module.")
        if not callable(loss_fn):
            raise InputError(f"loss_fn={loss_fn!r} is not allowed: expected a callable (output, target) -> "
                             "per-example losses.")
        self.model, self.loss_fn, self.mechanism = model, loss_fn, mechanism
        if regularizer is not None and not callable(regularizer):
            raise InputError(f"regularizer={regularizer!r} is not allowed: expected a callable (parameters dict) -> "
                             "scalar tensor.")
        if regularizer is not None and not self.supports_regularizer:
            raise InputError(f"regularizer is not allowed for {self.name}: only DP-GD, DIFF2-GD, DP-SGD, DP-SRM and "
                             "DiceSGD add a regulariser's gradient to their direction.")
        #: r(params): a data-independent term of the objective f = sum_i w_i l_i + r; its gradient is
        #: public (it depends on the released iterate only) and is added to the noisy direction
        self.regularizer = regularizer
        self.transport = ONE_PROCESS if transport is None else transport
        if regularizer is not None and self.transport is not ONE_PROCESS:
            raise InputError("regularizer is not allowed on several processes: each would add it to its share "
                             "of the objective.")
        first = next(model.parameters(), None)
        if first is None:
            raise InputError("model is not allowed: it has no parameters.")
        self.device, self.dtype = first.device, first.dtype
        self.levels = _noise_levels(noise)
        self.delta = noise.delta if isinstance(noise, CalibrationReport) else None
        if isinstance(noise, CalibrationReport) and noise.algorithm != getattr(mechanism, "name", None):
            raise InputError(f"noise is not allowed: a calibration of {noise.algorithm!r} cannot drive "
                             f"{getattr(mechanism, 'name', mechanism)!r}.")
        #: the run's secret streams (RunStreams): fresh entropy without a seed, shared inside a process group
        self.streams = RunStreams(seed, secure_mode=secure_mode, agree=self.transport.agree,
                                  gather=getattr(self.transport, "gather", None))
        self.data_generator, noise_generator, self.output_generator = self.streams.run(self.device)
        self.privatizer = NoiseSource(noise_generator, self.device, self.dtype, record, record_noise, record_values)
        self.privatizer.replayable = self.streams.seeded     # fresh entropy is never restored from a checkpoint
        self.clip_method, self.chunk_size = clip_method, int(chunk_size)
        # what the records of a batch contribute (dpcalib.optim.clipping.per_example); a check may put another object here
        self.per_example = PerExample(clip_method, chunk_size)
        if sampler is not None and not isinstance(sampler, Sampler):
            raise InputError(f"sampler={sampler!r} is not allowed: expected a dpcalib.optim.data.sampling.Sampler.")
        self.sampler = Sampler() if sampler is None else sampler   # how minibatches are drawn (dpcalib.optim.data.sampling)
        self.round = 0
        self.counts: Counter = Counter()
        self.metrics: list[dict] = []
        self._out = None          # reservoir: the returned iterate, uniform over the candidates so far
        self._n_candidates = 0

    def holders(self) -> int:
        """How many data holders (clients, nodes) the run has; record ``(holder, index)`` names a record.

        Returns:
            The number of data holders (1 for a single-holder update).
        """
        return 1

    # -- helpers for subclasses ----------------------------------------------------------------
    def _need(self, key: str) -> float:
        if key not in self.levels:
            raise InputError(f"noise is not allowed: it has no {key!r} (got {sorted(self.levels)}).")
        return self.levels[key]

    def _to(self, t) -> torch.Tensor:
        t = torch.as_tensor(t)
        return t.to(self.device, self.dtype if t.is_floating_point() else t.dtype)

    def params(self) -> dict:
        """A copy of the current parameters (never a view: the model is updated in place).

        Returns:
            A dict parameter name -> detached copy of the parameter.
        """
        return {k: p.detach().clone() for k, p in self.model.named_parameters()}

    def _set_params(self, new: dict) -> None:
        with torch.no_grad():
            for k, p in self.model.named_parameters():
                p.copy_(new[k])

    def _descend(self, cur: dict, direction: torch.Tensor, scale: float) -> None:
        """Set the model's parameters to ``cur - scale * direction`` (``direction`` flat, in ``cur``'s
        order), written into the parameters in one pass."""
        with torch.no_grad():
            i = 0
            for k, p in self.model.named_parameters():
                n = p.numel()
                torch.sub(cur[k], direction[i:i + n].view_as(p), alpha=scale, out=p)
                i += n

    def release(self, value: torch.Tensor, std: float, **kwargs) -> torch.Tensor:
        """One release through the run's transport and noise source (what a kernel is handed:
        ``value + N(0, std^2 I)``, recorded and, on several processes, drawn once).

        Args:
            value: the noiseless query.
            std: per-coordinate noise std, >= 0.
            **kwargs: passed on to :meth:`~dpcalib.optim.algorithms.noise.NoiseSource.privatize` (``round``, ``name``,
                ``sensitivity``, ``relation``, ``public``).

        Returns:
            The released tensor.
        """
        return self.transport.release(lambda: self.privatizer.privatize(value, std, **kwargs))

    def _offer_output(self, candidate: dict) -> None:
        """Reservoir sampling of one candidate iterate (uniform over all offered so far)."""
        self._n_candidates += 1
        u = uniform(self.output_generator)
        if self._out is None or u < 1.0 / self._n_candidates:
            self._out = {k: v.detach().clone() for k, v in candidate.items()}

    def output(self) -> dict:
        """The iterate the paper returns (uniform among the candidates; the last one if none).

        Returns:
            A dict parameter name -> tensor.
        """
        return self._out if self._out is not None else self.params()

    # -- privacy ---------------------------------------------------------------------------------
    def sampled_record_signal(self, norm: float) -> tuple[float, float]:
        """``(sampling rate, what one Poisson-sampled record whose gradient has norm ``norm`` adds to
        a release along that gradient)`` -- for updates that release a clipped sum of Poisson-sampled
        records (DP-SGD, DiceSGD); the others have no such release.

        Args:
            norm: the L2 norm of the record's gradient.

        Raises:
            InputError: always here; updates that make such a release override this.
        """
        raise InputError(f"{self.name} makes no release of a clipped sum of Poisson-sampled records.")

    def _events(self) -> list:
        """``[(event, count)]`` of the releases made so far (worst-case client / node)."""
        raise NotImplementedError

    def accountant(self) -> PrivacyAccountant:
        """A privacy accountant holding the events of the releases made so far.

        Returns:
            A :class:`~dpcalib.accountant.PrivacyAccountant` composed of :meth:`_events`.
        """
        acc = PrivacyAccountant()
        for ev, k in self._events():
            if k:
                acc.compose(ev, k)
        return acc

    def epsilon_spent(self, delta: float | None = None, accountant: str = "best") -> float:
        """eps spent so far at ``delta`` (the calibration's delta by default); inf with zero noise.
        ``accountant``: as :meth:`~dpcalib.accountant.PrivacyAccountant.epsilon_report` -- the best
        certified eps by default (for the whole calibrated run, the number ``dpcalib epsilon``
        prints), ``"auto"`` for the fast GDP/RDP bound.

        Args:
            delta: the target delta, in (0, 1); None for the calibration's delta.
            accountant: the accountant choice of ``get_epsilon`` (``"best"``, ``"auto"``, ...).

        Returns:
            The eps spent: 0.0 before the first round, inf if a release had zero noise.

        Raises:
            InputError: if ``delta`` is None and the noise was not a CalibrationReport.
        """
        d = self.delta if delta is None else delta
        if self.round == 0:
            return 0.0
        if self._noiseless():
            return math.inf               # a release without noise: no eps holds, at any delta
        if d is None:
            raise InputError("delta=None is not allowed here: the noise was not a CalibrationReport; pass delta.")
        return float(self.accountant().get_epsilon(d, accountant))

    def _noiseless(self) -> bool:
        """Has a release been made with zero noise (so that no finite eps holds)?"""
        return any(self.levels.get(k, 1.0) == 0.0 for k in self._noise_keys())

    def _noise_keys(self) -> tuple:
        return tuple(self.levels)

    def epsilon_metric(self, delta) -> float:
        """The metrics' eps: the best certified eps spent so far (at the end of the calibrated run,
        the run's eps -- what ``dpcalib epsilon`` prints for it).

        Args:
            delta: the target delta, in (0, 1), or None.

        Returns:
            The eps spent at ``delta``; inf if a release had zero noise; NaN when ``delta`` is None.
        """
        if self.round > 0 and self._noiseless():
            return math.inf
        return self.epsilon_spent(delta) if delta is not None else math.nan

    # -- metrics ---------------------------------------------------------------------------------
    def _objective(self):
        """``(x, y, weights)`` with f = sum_i w_i l(x_i, y_i) the training objective."""
        raise NotImplementedError

    def _eval_params(self) -> dict:
        return self.params()

    def _loss_and_grad(self, params: dict, x, y, w) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sum_i w_i l(params; x_i, y_i), its gradient as one flat vector)`` by plain autograd."""
        p = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        loss = (self.loss_fn(functional_call(self.model, p, (x,)), y) * w).sum()
        g = torch.autograd.grad(loss, list(p.values()))
        return loss.detach(), flat(dict(zip(p, g)))

    def regularizer_value_and_grad(self, params: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(r(params), grad r(params) as one flat vector)`` (zeros without a regulariser).

        Args:
            params: a dict parameter name -> tensor.

        Returns:
            ``(value, gradient)``: a scalar tensor and a flat tensor with one entry per parameter coordinate.

        Raises:
            InputError: if the regulariser does not return a one-element tensor.
        """
        if self.regularizer is None:
            n = sum(v.numel() for v in params.values())
            z = torch.zeros((), device=self.device, dtype=self.dtype)
            return z, torch.zeros(n, device=self.device, dtype=self.dtype)
        p = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        r = self.regularizer(p)
        if not isinstance(r, torch.Tensor) or r.numel() != 1:
            raise InputError(f"regularizer is not allowed: it returned {type(r).__name__}, expected a scalar tensor.")
        g = torch.autograd.grad(r.reshape(()), list(p.values()), allow_unused=True)
        g = [torch.zeros_like(v) if gi is None else gi for gi, v in zip(g, p.values())]
        return r.detach().reshape(()), flat(dict(zip(p, g)))

    def _regularized(self, direction: torch.Tensor, params: dict, scale: float = 1.0) -> torch.Tensor:
        """``direction + scale * grad r(params)``: the released direction plus the public gradient of the
        regulariser (post-processing: no privacy cost); ``direction`` itself without one."""
        if self.regularizer is None:
            return direction
        return direction + scale * self.regularizer_value_and_grad(params)[1].to(direction.dtype)

    def evaluate(self, params: dict | None = None, *, test=None, metrics: dict | None = None) -> dict:
        """Train objective f = sum_i w_i l_i (+ the regulariser) and ||grad f|| at ``params`` (current iterate
        by default); not private.  ``test=(x, y)``: also ``test_loss`` (the mean loss l over the test records,
        without the regulariser); ``metrics={"name": fn(output, target) -> float}`` (e.g.
        ``{"accuracy": O.accuracy}``): each on the training records (``train_<name>``) and, with ``test``, on
        the test records (``test_<name>``).  On a multi-process transport this is a collective: every process
        adds its share of f (the other metrics are this process's).

        Args:
            params: a dict parameter name -> tensor; None (or empty) for the current iterate.
            test: ``(x_test, y_test)`` with the same number of rows, >= 1; or None.
            metrics: a dict name -> ``fn(output, target) -> float``, or None.

        Returns:
            A dict with ``loss`` and ``grad_norm``, plus ``train_<name>``, ``test_loss`` and
            ``test_<name>`` as requested.

        Raises:
            InputError: if a metric is not callable, metrics are asked of records read item by item,
                or ``test`` is not a pair of tensors with the same number (>= 1) of rows.
        """
        params = params or self._eval_params()
        loss, grad = self._loss_and_grad(params, *self._objective())
        if self.regularizer is not None:
            r, gr = self.regularizer_value_and_grad(params)
            out = self.transport.metrics(loss, grad, extra=(r, gr)) if self.transport.name != "one-process" else \
                self.transport.metrics(loss + r, grad + gr)
        else:
            out = self.transport.metrics(loss, grad)
        metrics = {} if metrics is None else dict(metrics)
        for name, fn in metrics.items():
            if not callable(fn):
                raise InputError(f"metrics[{name!r}]={fn!r} is not allowed: expected a callable (output, target) -> float.")
        if metrics or test is not None:
            with torch.no_grad():
                x, y, _ = self._objective()
                if metrics:
                    if not isinstance(x, torch.Tensor):
                        raise InputError("metrics is not allowed here: the training records are read from a "
                                         "dataset item by item; evaluate the metrics on tensors (test=...).")
                    out_train = self._predict(params, x)
                    for name, fn in metrics.items():
                        out[f"train_{name}"] = float(fn(out_train, y))
                if test is not None:
                    if not (isinstance(test, (tuple, list)) and len(test) == 2):
                        raise InputError("test is not allowed: expected a pair (x_test, y_test).")
                    xt, yt = self._to(test[0]), self._to(test[1])
                    if xt.shape[0] != yt.shape[0] or xt.shape[0] == 0:
                        raise InputError(f"test is not allowed: x_test has {xt.shape[0]} rows and y_test "
                                         f"{yt.shape[0]} (expected the same number, >= 1).")
                    ot = self._predict(params, xt)
                    out["test_loss"] = float(self.loss_fn(ot, yt).mean())
                    for name, fn in metrics.items():
                        out[f"test_{name}"] = float(fn(ot, yt))
        return out

    def _predict(self, params: dict, x: torch.Tensor) -> torch.Tensor:
        """The model's outputs at ``params`` (4096 rows at a time)."""
        parts = [functional_call(self.model, params, (x[s:s + 4096],)) for s in range(0, x.shape[0], 4096)]
        return torch.cat(parts) if parts else functional_call(self.model, params, (x,))

    # -- run loop --------------------------------------------------------------------------------
    def _step(self, r: int) -> None:
        raise NotImplementedError

    def step(self) -> None:
        """One round (one release of the mechanism).

        Raises:
            RuntimeError: if all the calibrated rounds have been run.
        """
        if self.round >= self.total_rounds:
            raise RuntimeError(f"the run is complete: {self.total_rounds} rounds were calibrated "
                               "(running further would spend more privacy than the calibration covers).")
        self.round += 1
        self._step(self.round)

    # -- state -----------------------------------------------------------------------------
    def _state(self) -> dict:
        """The algorithm's own state (plain tensors, numbers, lists, dicts): the hook a subclass writes."""
        return {}

    def _load_state(self, state: dict) -> None:
        """Restore :meth:`_state`'s output: the hook a subclass writes."""

    def algorithm_state(self) -> dict:
        """What a checkpoint keeps of the algorithm itself (:meth:`_state`), for the runner.

        Returns:
            A dict of plain data (tensors, numbers, lists, dicts).
        """
        return self._state()

    def load_algorithm_state(self, state: dict) -> None:
        """Restore what :meth:`algorithm_state` returned (for the runner).

        Args:
            state: a dict as returned by :meth:`algorithm_state`.
        """
        self._load_state(state)

    def output_state(self) -> tuple:
        """``(iterate kept for output, candidates seen)``: the output reservoir, for the runner.

        Returns:
            A pair (dict parameter name -> tensor, or None; int >= 0).
        """
        return self._out, self._n_candidates

    def load_output_state(self, out, n_candidates: int) -> None:
        """Restore the output reservoir from :meth:`output_state`'s pair (for the runner).

        Args:
            out: the iterate kept for output (dict parameter name -> tensor), or None.
            n_candidates: how many candidates had been offered, >= 0.
        """
        self._out, self._n_candidates = out, int(n_candidates)

    # -- shortcuts to the runner (dpcalib.optim.run.runner.Runner owns the loop, metrics and checkpoints) -----
    def run(self, rounds: int | None = None, **kwargs) -> list[dict]:
        """:meth:`dpcalib.optim.run.runner.Runner.run`: run ``rounds`` more rounds (default: to the calibrated total).

        Args:
            rounds: the number of rounds to run; None to run to the calibrated total.
            **kwargs: passed on to :meth:`dpcalib.optim.run.runner.Runner.run`.

        Returns:
            The list of metric rows recorded (one dict per evaluation).
        """
        return Runner(self).run(rounds, **kwargs)

    def state_dict(self) -> dict:
        """:meth:`dpcalib.optim.run.runner.Runner.state_dict`: the whole state as plain data.

        Returns:
            A dict of plain data (``torch.load(weights_only=True)`` reads it back).
        """
        return Runner(self).state_dict()

    def load_state_dict(self, state: dict) -> None:
        """:meth:`dpcalib.optim.run.runner.Runner.load_state_dict`: resume from :meth:`state_dict`.

        Args:
            state: a dict as returned by :meth:`state_dict`.
        """
        Runner(self).load_state_dict(state)

    def save_checkpoint(self, path) -> None:
        """:meth:`dpcalib.optim.run.runner.Runner.save_checkpoint` (atomic).

        Args:
            path: the checkpoint file (str or path-like).
        """
        Runner(self).save_checkpoint(path)

    def load_checkpoint(self, path) -> None:
        """:meth:`dpcalib.optim.run.runner.Runner.load_checkpoint` (read with ``weights_only=True``: never unpickles).

        Args:
            path: the checkpoint file (str or path-like).
        """
        Runner(self).load_checkpoint(path)
