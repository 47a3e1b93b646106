"""Minibatch optimizers on one dataset: DP-SGD / DPSGD-GC (Abadi et al. 2016; DiceSGD paper Algorithm 1), DP-SRM (practical
clipped variant, DPSRM-E4) and DiceSGD with its Adam and automatic variants (DiceSGD paper Algorithms 2-4).

Sampling is exactly what each accountant assumes: Poisson (every record independently with
probability q) for DP-SGD and DiceSGD, fixed-size without replacement for DP-SRM; DP-SGD's mechanism
may instead say shuffled epochs or balls-in-bins epochs (``sampling="balls-in-bins"``: each epoch
every record in one of its ``t`` steps, uniformly; the sum divided by the expected batch ``n / t``).
"""

from __future__ import annotations

import math

import torch

from ...accountant.validation import InputError
from ... import mechanisms as M

from ..tensors import flat, unflat
from .core import PrivateOptimizer, check_clip, check_lr
from .kernels import DiceSGDKernel, DPSGDKernel, DPSRMKernel, RecordQueries
from ..clipping.paths import clip_factors
from ..data.sampling import bin_batches

__all__ = []


class _OneDataset(PrivateOptimizer):
    """The driver of a one-dataset kernel (:mod:`.kernels`): draws the batch from the run's data,
    asks the kernel for its release through :class:`~.kernels.RecordQueries`, writes the parameters."""

    _mechanism_type = None
    #: the kernel class this driver runs (the engine, dpcalib.optim.engine, runs the same one)
    kernel_class = None

    def __init__(self, model, loss_fn, data, mechanism, noise, **kwargs):
        if not isinstance(mechanism, self._mechanism_type):
            raise InputError(f"mechanism={mechanism!r} is not allowed: expected "
                             f"mechanisms.{self._mechanism_type.__name__}.")
        super().__init__(model, loss_fn, mechanism=mechanism, noise=noise, **kwargs)
        self.dataset = None
        if not isinstance(data, (list, tuple)) and hasattr(data, "__getitem__") and hasattr(data, "__len__"):
            # a map-style dataset (torch.utils.data.Dataset): records are read when a batch draws them
            self.dataset, self.x, self.y = data, None, None
            self.n = len(data)
            if self.n == 0:
                raise InputError("data is not allowed: the dataset is empty.")
        else:
            if not isinstance(data, (list, tuple)) or len(data) != 2:
                raise InputError("data is not allowed: expected a pair (x, y) of tensors or a map-style dataset "
                                 "whose items are (x_i, y_i).")
            self.x, self.y = (self._to(t) for t in data)
            if self.x.shape[0] != self.y.shape[0] or self.x.shape[0] == 0:
                raise InputError(f"data is not allowed: {self.x.shape[0]} inputs and {self.y.shape[0]} targets "
                                 "(expected the same positive number).")
            self.n = self.x.shape[0]
        self.w = torch.full((self.n,), 1.0 / self.n, device=self.device, dtype=self.dtype)

    def _poisson(self, q: float) -> torch.Tensor:
        """Indices of a Poisson sample: every record independently with probability q."""
        return self.sampler.poisson(self.n, q, self.data_generator)

    def _without_replacement(self, size: int) -> torch.Tensor:
        return self.sampler.without_replacement(self.n, size, self.data_generator)

    def rows(self, idx: torch.Tensor):
        """``(x[idx], y[idx])`` on the model's device: from the tensors, or read from the dataset item by
        item (only the drawn records) and stacked."""
        if self.dataset is None:
            return self.x[idx], self.y[idx]
        items = [self.dataset[int(i)] for i in idx.tolist()] or [self.dataset[0]]
        xs = torch.stack([torch.as_tensor(it[0]) for it in items])
        ys = torch.stack([torch.as_tensor(it[1]) for it in items])
        if idx.numel() == 0:
            xs, ys = xs[:0], ys[:0]
        return self._to(xs), self._to(ys)

    def _loss_and_grad(self, params: dict, x, y, w):
        if self.dataset is None:
            return super()._loss_and_grad(params, x, y, w)
        loss, grad = 0.0, 0.0                       # the dataset, 4096 records at a time
        for s in range(0, self.n, 4096):
            idx = torch.arange(s, min(s + 4096, self.n))
            xs, ys = self.rows(idx)
            lo, g = super()._loss_and_grad(params, xs, ys, w[s:s + idx.numel()])
            loss, grad = loss + lo, grad + g
        return loss, grad

    def _objective(self):
        return self.x, self.y, self.w


class DPSGD(_OneDataset):
    """DP-SGD with gradient clipping (Abadi et al.; DPSGD-GC, Algorithm 1 of the DiceSGD paper):
    ``x <- x - (lr/B) (sum_{i in B_t} clip(grad l(x, z_i), C) + N(0, z^2 C^2 I))`` with ``B_t`` a
    Poisson sample at rate ``q`` and ``B = q n`` the expected batch size (the noise is on the SUM,
    std ``z C``; claimed sensitivity ``C`` under add/remove).  ``mechanism``:
    :class:`mechanisms.DPSGD`; ``noise``: its calibration (``noise_multiplier``).

    Args:
        model: the model (its parameters are the starting point).
        loss_fn: ``loss_fn(output, target)`` -> per-example losses.
        data: a pair ``(x, y)`` of tensors with the same number (>= 1) of rows, or a non-empty
            map-style dataset whose items are ``(x_i, y_i)``.
        mechanism: a :class:`dpcalib.mechanisms.DPSGD`.
        noise: its calibration, or a dict with ``noise_multiplier``: std / C, >= 0.
        C: the clipping threshold, in [0, inf] (inf only with a zero noise multiplier).
        lr: the step size, finite and > 0.
        **kwargs: passed on to :class:`~dpcalib.optim.algorithms.core.PrivateOptimizer` (``seed``,
            ``record``, ``sampler``, ``regularizer``, ...).

    Raises:
        InputError: if the mechanism is of another kind, ``data`` is malformed or empty, C or
            ``lr`` is out of range, ``noise_multiplier`` is missing, or an epoch-wise mechanism's
            ``n`` is not the number of records.
    """

    supports_regularizer = True
    name = "dp-sgd"
    _mechanism_type = M.DPSGD
    kernel_class = DPSGDKernel

    def __init__(self, model, loss_fn, data, mechanism, noise, *, C: float, lr: float, **kwargs):
        super().__init__(model, loss_fn, data, mechanism, noise, **kwargs)
        self.C, self.lr = check_clip(C, "C"), check_lr(lr)
        self.total_rounds = mechanism.total_steps
        self.z = self._need("noise_multiplier")
        if self.C == math.inf and self.z > 0:
            raise InputError(f"C=inf is not allowed with noise_multiplier={self.z}: unclipped gradients have "
                             "unbounded sensitivity.")
        if mechanism.epoch_wise:
            if mechanism.n != self.n:
                raise InputError(f"mechanism.n={mechanism.n} is not allowed: the data holds {self.n} records.")
            self.B = mechanism.expected_batch_size
            self.q = self.B / self.n
        else:
            self.q = mechanism.sampling_rate
            self.B = self.q * self.n
        self.perm = None                    # shuffled batches: this epoch's permutation
        self.bins = None                    # balls-in-bins: this epoch's step of every record
        self._binned = None                 # ... and its batches in step order
        self.kernel = self.kernel_class(mechanism, self.levels, C=self.C, B=self.B)

    def _batch(self, r: int) -> torch.Tensor:
        """The records of round ``r`` (1-based): a Poisson sample, or batch ``(r-1) mod T`` of the
        epoch's permutation or balls-in-bins assignment (drawn at the epoch's first round)."""
        m = self.mechanism
        if not m.epoch_wise:
            return self._poisson(self.q)
        t = m.steps_per_epoch
        j = (r - 1) % t
        if m.balls_in_bins:
            if j == 0 or self.bins is None:
                self.bins, self._binned = self.sampler.bins(self.n, t, self.data_generator), None
            if self._binned is None:
                self._binned = bin_batches(self.bins, t)
            return self.sampler.binned(self._binned, j)
        if j == 0 or self.perm is None:
            self.perm = self.sampler.permutation(self.n, self.data_generator)
        return self.sampler.shuffled(self.perm, j, m.batch_size)

    def _state(self) -> dict:
        return {"perm": self.perm, "bins": self.bins, "round": self.round}

    def _load_state(self, state: dict) -> None:
        self.perm = state.get("perm")
        self.bins, self._binned = state.get("bins"), None
        m = self.mechanism
        done = int(state.get("round", 0)) % m.steps_per_epoch if m.epoch_wise else 0
        if done and not self.streams.seeded:
            # fresh entropy: the epoch goes on with the records it has not used, drawn afresh (a uniform order of
            # the rest; each unused record's step uniform on the rest), never in the saved run's order
            if self.perm is not None:
                rest = self.perm[done * m.batch_size:]
                self.perm = torch.cat([self.perm[:done * m.batch_size],
                                       rest[self.sampler.permutation(rest.numel(), self.data_generator)]])
            if self.bins is not None:
                late = (self.bins >= done).nonzero().flatten()
                self.bins = self.bins.clone()
                self.bins[late] = done + self.sampler.bins(late.numel(), m.steps_per_epoch - done,
                                                           self.data_generator)

    def _step(self, r: int) -> None:
        cur = self.params()
        self._offer_output(cur)
        noisy, kind = self.kernel.step(RecordQueries(self, self._batch(r), cur), self.release, r)
        self.counts[kind] += 1
        self._descend(cur, self._regularized(noisy, cur, self.B), self.lr / self.B)

    def _events(self) -> list:
        return self.mechanism.events(self.levels, self.counts)

    def sampled_record_signal(self, norm: float) -> tuple[float, float]:
        """``(sampling rate, what one sampled record whose gradient has norm ``norm`` adds to the
        release along that gradient)``: DP-SGD releases the clipped SUM.

        Args:
            norm: the L2 norm of the record's gradient, >= 0.

        Returns:
            ``(q, norm * clip factor)``: the sampling rate and the clipped norm.
        """
        f = float(clip_factors(torch.tensor([norm], dtype=torch.float64), self.C, None)[0])
        return self.q, norm * f


class DPSRM(_OneDataset):
    """DP-SRM, practical clipped variant (reconstructed: DPSRM-E4).

    ``t = 0``: ``v^0 = (1/b0) sum_{B_0} clip(grad l(theta^0), C1) + N(0, sigma0^2 I)``.
    ``t >= 1``: ``theta^t = theta^{t-1} - eta_{t-1} v^{t-1}`` and
    ``v^t = (1/b) sum_{B_t} [(1-gamma) clip(grad l(theta^t) - grad l(theta^{t-1}), C2)
    + gamma clip(grad l(theta^t), C1)] + (1-gamma) v^{t-1} + N(0, sigma^2 I)``, with ``B_0, B_t`` drawn
    WITHOUT replacement (sizes b0, b).  ``eta = lr``, or ``min(lr, max_step/||v||)`` when
    ``max_step`` is given (the paper's normalised step, which caps ``||theta^t - theta^{t-1}||``).
    C1, C2, gamma are the mechanism's ``lipschitz``, ``step_bound``, ``momentum``; the noise stds
    ``sigma0``, ``sigma`` are ABSOLUTE stds.

    Args:
        model, loss_fn, data: as :class:`DPSGD`.
        mechanism: a :class:`dpcalib.mechanisms.DPSRM` whose ``n`` is the number of records.
        noise: its calibration, or a dict with ``sigma0`` and ``sigma``: absolute stds, >= 0.
        lr: the step size, finite and > 0.
        max_step: a cap on ``||theta^t - theta^{t-1}||``, finite and > 0; None for plain steps of ``lr``.
        C1: the gradient clip, in [0, lipschitz] with nonzero noise; None for the mechanism's ``lipschitz``.
        C2: the gradient-difference clip, in [0, step_bound] with nonzero noise; None for the
            mechanism's ``step_bound``.
        **kwargs: passed on to :class:`~dpcalib.optim.algorithms.core.PrivateOptimizer` (``seed``,
            ``record``, ``sampler``, ``regularizer``, ...).

    Raises:
        InputError: if the mechanism is of another kind, ``data`` is malformed, empty or of
            another size than the calibration's n, a noise level is missing, C1 or C2 is out of
            range, or ``lr`` or ``max_step`` is not a finite number > 0.
    """

    supports_regularizer = True
    name = "dp-srm"
    _mechanism_type = M.DPSRM
    kernel_class = DPSRMKernel

    def __init__(self, model, loss_fn, data, mechanism, noise, *, lr: float, max_step: float | None = None,
                 C1: float | None = None, C2: float | None = None, **kwargs):
        super().__init__(model, loss_fn, data, mechanism, noise, **kwargs)
        m = mechanism
        if self.n != m.n:
            raise InputError(f"data has {self.n} records, which is not allowed: the calibration is for n={m.n} "
                             "(the sampling rates b0/n, b/n would differ).")
        self.sigma0, self.sigma = self._need("sigma0"), self._need("sigma")
        self.C1 = check_clip(m.lipschitz if C1 is None else C1, "C1")
        self.C2 = check_clip(m.step_bound if C2 is None else C2, "C2")
        if (self.sigma0 > 0 or self.sigma > 0) and (self.C1 > m.lipschitz or self.C2 > m.step_bound):
            raise InputError(f"C1={self.C1}, C2={self.C2} are not allowed with non-zero noise: the calibration "
                             f"assumes C1 <= lipschitz={m.lipschitz} and C2 <= step_bound={m.step_bound}.")
        self.gamma, self.b0, self.b = m.momentum, m.b0, m.b
        self.lr = check_lr(lr)
        self.max_step = None if max_step is None else check_lr(max_step, "max_step")
        self.total_rounds = m.steps
        self.kernel = self.kernel_class(m, self.levels, C1=self.C1, C2=self.C2)

    @property
    def v(self):
        """The last released ``v^t`` (the kernel's state)."""
        return self.kernel.v

    def _eta(self, v) -> float:
        if self.max_step is None:
            return self.lr
        nv = float(torch.linalg.vector_norm(v))
        return self.lr if nv == 0.0 else min(self.lr, self.max_step / nv)

    def _step(self, r: int) -> None:
        prev, first = self.params(), r == 1
        if first:
            cur = prev
        else:
            d = self._regularized(self.kernel.v, prev)
            cur = unflat(flat(prev) - self._eta(d) * d, prev)
            self._set_params(cur)
        self._offer_output(cur)
        idx = self._without_replacement(self.kernel.batch_size(first))
        _, kind = self.kernel.step(RecordQueries(self, idx, cur, prev), self.release, r, first)
        self.counts[kind] += 1

    def _events(self) -> list:
        return self.mechanism.events(self.levels, self.counts)

    def _noise_keys(self) -> tuple:
        return ("sigma0", "sigma") if self.counts["v^t"] else ("sigma0",)

    def _state(self) -> dict:
        return self.kernel.state_dict()

    def _load_state(self, state: dict) -> None:
        self.kernel.load_state_dict(state)


class DiceSGD(_OneDataset):
    """DiceSGD (Algorithms 2-4 of the DiceSGD paper): clipping with error feedback.

    ``v^t = (1/B) sum_{B_t} clip(g_i, C1) + clip(e^t, C2)`` (B_t Poisson at rate B/N, divided by
    the nominal B); ``x <- x - lr (v^t + w^t)``, ``w^t ~ N(0, sigma1^2 I)`` (noise on the AVERAGE);
    ``e^{t+1} = e^t + (1/B) sum_{B_t} g_i - v^t`` (noise-free; e is never released).
    ``optimizer="adam"``: Algorithm 3, Adam on ``v^t + w^t`` with bias corrections
    ``1 - beta^(t+1)`` (Adam's bias correction at step t + 1).  ``mechanism.automatic``: Algorithm 4, ``clip(x) =
    x / (||x|| + stabilizer)`` with C1 = C2 = 1.  Claimed sensitivity (assumption-free,
    DiceSGD-E5 in docs/errata.md): ``C1/B`` at t = 0, ``2 C2 + C1/B`` afterwards (add/remove).

    Args:
        model, loss_fn, data: as :class:`DPSGD`.
        mechanism: a :class:`dpcalib.mechanisms.DiceSGD` whose ``N`` is the number of records.
        noise: its calibration, or a dict with ``sigma1``: the absolute std of the noise on the average, >= 0.
        lr: the step size, finite and > 0.
        optimizer: ``"sgd"`` (Algorithm 2) or ``"adam"`` (Algorithm 3).
        betas: Adam's ``(beta1, beta2)``, each in [0, 1).
        eps: Adam's denominator term.
        stabilizer: the automatic clip's stabilizer, > 0 (used only when ``mechanism.automatic``).
        C1: the gradient clip, at most the calibration's with nonzero noise; None for the calibration's.
        C2: the error-feedback clip, at most the calibration's with nonzero noise; None for the calibration's.
        **kwargs: passed on to :class:`~dpcalib.optim.algorithms.core.PrivateOptimizer` (``seed``,
            ``record``, ``sampler``, ``regularizer``, ...).

    Raises:
        InputError: if the mechanism is of another kind, ``data`` is malformed, empty or of
            another size than the calibration's N, ``optimizer`` is unknown, ``sigma1`` is missing,
            C1 or C2 is out of range, ``stabilizer`` is not > 0 (automatic clipping), ``lr`` is not
            a finite number > 0, or a beta is outside [0, 1).
    """

    supports_regularizer = True
    name = "dicesgd"
    _mechanism_type = M.DiceSGD
    kernel_class = DiceSGDKernel

    def __init__(self, model, loss_fn, data, mechanism, noise, *, lr: float, optimizer: str = "sgd",
                 betas=(0.9, 0.999), eps: float = 1e-8, stabilizer: float = 0.01, C1: float | None = None,
                 C2: float | None = None, **kwargs):
        super().__init__(model, loss_fn, data, mechanism, noise, **kwargs)
        m = mechanism
        if self.n != m.N:
            raise InputError(f"data has {self.n} records, which is not allowed: the calibration is for N={m.N} "
                             "(the Poisson rate B/N would differ).")
        if optimizer not in ("sgd", "adam"):
            raise InputError(f"optimizer={optimizer!r} is not allowed: expected 'sgd' or 'adam'.")
        c1, c2, _ = m.clips
        self.sigma1 = self._need("sigma1")
        self.C1 = check_clip(c1 if C1 is None else C1, "C1")
        self.C2 = check_clip(c2 if C2 is None else C2, "C2")
        if self.sigma1 > 0 and (self.C1 > c1 or self.C2 > c2):
            raise InputError(f"C1={self.C1}, C2={self.C2} are not allowed with non-zero noise: the calibration "
                             f"assumes C1 <= {c1} and C2 <= {c2}.")
        self.automatic = bool(m.automatic)
        self.stabilizer = float(stabilizer) if self.automatic else None
        if self.automatic and not (self.stabilizer > 0):
            raise InputError(f"stabilizer={stabilizer!r} is not allowed: expected a number > 0.")
        self.lr, self.opt = check_lr(lr), optimizer
        self.beta1, self.beta2 = (float(b) for b in betas)
        for name, b in (("betas[0]", self.beta1), ("betas[1]", self.beta2)):
            if not 0.0 <= b < 1.0:
                raise InputError(f"{name}={b!r} is not allowed: expected a number in [0, 1).")
        self.adam_eps = float(eps)
        self.B, self.q, self.total_rounds = m.batch_size, m.batch_size / m.N, m.steps
        d = sum(p.numel() for p in self.model.parameters())
        self.kernel = self.kernel_class(m, self.levels, C1=self.C1, C2=self.C2, stabilizer=self.stabilizer, dim=d,
                                    device=self.device, dtype=self.dtype)
        self.m1, self.m2 = torch.zeros_like(self.e), torch.zeros_like(self.e)

    @property
    def e(self):
        """The error feedback ``e^t`` (the kernel's state; never released)."""
        return self.kernel.e

    def sampled_record_signal(self, norm: float) -> tuple[float, float]:
        """``(sampling rate, what one sampled record whose gradient has norm ``norm`` adds to the
        release along that gradient)``: the clipped sum over the nominal batch B (the error feedback
        is not a record's).

        Args:
            norm: the L2 norm of the record's gradient, >= 0.

        Returns:
            ``(q, norm * clip factor / B)``: the sampling rate B / N and the clipped norm over B.
        """
        f = float(clip_factors(torch.tensor([norm], dtype=torch.float64), self.C1, self.stabilizer)[0])
        return self.q, norm * f / self.B

    def _step(self, r: int) -> None:
        t = r - 1
        cur = self.params()
        self._offer_output(cur)
        idx = self._poisson(self.q)
        vw, kind = self.kernel.step(RecordQueries(self, idx, cur), self.release, r, t == 0)
        vw = self._regularized(vw, cur)
        self.counts[kind] += 1
        if self.opt == "sgd":
            step = vw
        else:
            vt = vw
            self.m1 = self.beta1 * self.m1 + (1.0 - self.beta1) * vt
            self.m2 = self.beta2 * self.m2 + (1.0 - self.beta2) * vt * vt
            m1h = self.m1 / (1.0 - self.beta1 ** (t + 1))
            m2h = self.m2 / (1.0 - self.beta2 ** (t + 1))
            step = m1h / (torch.sqrt(m2h) + self.adam_eps)
        self._set_params(unflat(flat(cur) - self.lr * step, cur))

    def _events(self) -> list:
        # the clips this run really uses (<= the calibration's): their sensitivity, the run's epsilon
        return self.mechanism.events(self.levels, self.counts, (self.C1, self.C2))

    def _state(self) -> dict:
        return {**self.kernel.state_dict(), "m1": self.m1, "m2": self.m2}

    def _load_state(self, state: dict) -> None:
        self.kernel.load_state_dict(state)
        self.m1, self.m2 = state["m1"], state["m2"]
