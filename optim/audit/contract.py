"""Anyone's private step behind one small contract, for the checks of :mod:`.steps`.

**The contract** (:class:`PrivateStep`): ``release(batch, *, noise, generator)`` returns the value
one step releases on ``batch`` at the current parameters -- flat, what the noise was added to
(e.g. the noisy sum of clipped gradients) -- with the noise drawn from ``generator``
(``noise=False``: the noiseless value), and leaves the parameters and the step's own state as they
were; ``claim`` (:class:`StepClaim`) says what the step claims: the L2 sensitivity of that value
for one record under a neighbouring relation, the std of the noise, the batch sampling.

Adapters: :class:`FunctionStep` (a plain function), :class:`EngineStep` (the optimizer of
:class:`dpcalib.optim.PrivacyEngine`), :class:`OpacusStep` (Opacus's ``DPOptimizer`` as
``make_private`` returns it, through its ``pre_step``: clip, noise, scale).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...accountant import gdp_epsilon
from ...accountant.validation import InputError
from ...mechanisms.shape import BALLS_IN_BINS, POISSON, SHUFFLE, WOR, SAMPLINGS as RUN_SAMPLINGS

__all__ = []

RELATIONS = ("add/remove", "replace-one")
SAMPLINGS = (*RUN_SAMPLINGS, "full batch")


@dataclass(frozen=True)
class StepClaim:
    """What a step claims about one release: ``sensitivity`` (L2, one record, under ``relation``),
    ``noise_std`` (per coordinate), and the sampling of its batches (``sample_rate`` for Poisson and
    for balls-in-bins -- ``1/t``, a record's chance to be in a given step --, ``batch_size`` for fixed-size
    or shuffled batches).

    Attributes:
        sensitivity: the claimed L2 sensitivity of one release to one record, finite and >= 0.
        noise_std: the per-coordinate noise std, finite and >= 0.
        relation: ``"add/remove"`` or ``"replace-one"``.
        sampling: one of :data:`SAMPLINGS` (``"poisson"``, ``"wor"``, ``"shuffle"``,
            ``"balls-in-bins"``, ``"full batch"``).
        sample_rate: the sampling rate, in (0, 1] (Poisson, balls-in-bins), or None.
        batch_size: the fixed batch size (``"wor"``, ``"shuffle"``), or None.

    Raises:
        InputError: if ``sensitivity`` or ``noise_std`` is not a finite number >= 0, ``relation`` or
            ``sampling`` is unknown, or a Poisson / balls-in-bins ``sample_rate`` is outside (0, 1].
    """

    sensitivity: float
    noise_std: float
    relation: str = "add/remove"
    sampling: str = POISSON
    sample_rate: float | None = None
    batch_size: int | None = None

    def __post_init__(self):
        for name in ("sensitivity", "noise_std"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0) or math.isinf(v):
                raise InputError(f"{name}={v!r} is not allowed: expected a finite number >= 0.")
        if self.relation not in RELATIONS:
            raise InputError(f"relation={self.relation!r} is not allowed: expected one of {', '.join(RELATIONS)}.")
        if self.sampling not in SAMPLINGS:
            raise InputError(f"sampling={self.sampling!r} is not allowed: expected one of {', '.join(SAMPLINGS)}.")
        if self.sampling in (POISSON, BALLS_IN_BINS) and self.sample_rate is not None \
                and not 0.0 < self.sample_rate <= 1.0:
            raise InputError(f"sample_rate={self.sample_rate!r} is not allowed: expected a number in (0, 1].")

    def epsilon(self, delta: float) -> float:
        """The claimed eps of one release given its batch (a Gaussian mechanism, no amplification by
        sampling: what a check that holds the batch fixed can test); inf without noise.

        Args:
            delta: the target delta, in (0, 1).

        Returns:
            The GDP eps at mu = sensitivity / noise_std; inf without noise (0.0 if the sensitivity is 0 too).
        """
        if self.noise_std == 0.0:
            return math.inf if self.sensitivity > 0 else 0.0
        return float(gdp_epsilon(self.sensitivity / self.noise_std, delta))


class PrivateStep:
    """The contract (see the module text).  Subclasses implement :meth:`release` and set ``claim``."""

    claim: StepClaim

    def release(self, batch, *, noise: bool, generator: torch.Generator) -> torch.Tensor:  # pragma: no cover
        """The value one step releases on ``batch`` at the current parameters (the contract).

        Args:
            batch: the batch, a tuple of tensors with one row per record (e.g. ``(x, y)``).
            noise: add the step's noise (False: the noiseless value).
            generator: the generator the noise is drawn from.

        Returns:
            The released value, flat, float64 on the CPU.
        """
        raise NotImplementedError


def _flat64(t) -> torch.Tensor:
    return torch.as_tensor(t).detach().reshape(-1).to("cpu", torch.float64)


class FunctionStep(PrivateStep):
    """A plain function ``fn(batch, noise: bool, generator) -> released tensor`` and its claim.

    Args:
        fn: ``fn(batch, noise, generator)`` -> the released tensor.
        claim: the step's :class:`StepClaim`.

    Raises:
        InputError: if ``fn`` is not callable or ``claim`` is not a StepClaim.
    """

    def __init__(self, fn, claim: StepClaim):
        if not callable(fn):
            raise InputError(f"fn={fn!r} is not allowed: expected a callable (batch, noise, generator) -> tensor.")
        if not isinstance(claim, StepClaim):
            raise InputError(f"claim={claim!r} is not allowed: expected a StepClaim.")
        self.fn, self.claim = fn, claim

    def release(self, batch, *, noise, generator):
        """``fn(batch, noise, generator)``, flat, in float64 on the CPU.

        Args:
            batch, noise, generator: as :meth:`PrivateStep.release`.

        Returns:
            The released value, flat, float64 on the CPU.
        """
        return _flat64(self.fn(batch, noise, generator))


class EngineStep(PrivateStep):
    """The optimizer ``make_private`` returned (:class:`dpcalib.optim.engine.DPOptimizer`), its
    module and the loss (``criterion(output, target)``, reduced as ``make_private`` was told): the
    kernel's release on the batch at the current parameters, through the optimizer's own per-record
    terms and noise source, its state restored after each call (nothing is charged or stepped).

    Args:
        module: the module ``make_private`` returned.
        optimizer: the :class:`dpcalib.optim.engine.DPOptimizer` ``make_private`` returned; its
            claim is read from its kernel and mechanism at construction.
        criterion: ``criterion(output, target)`` -> the loss, reduced as ``make_private`` was told.

    Raises:
        InputError: if ``optimizer`` is not such a DPOptimizer.
    """

    def __init__(self, module, optimizer, criterion):
        if not hasattr(optimizer, "kernel") or not hasattr(optimizer, "release_of"):
            raise InputError("optimizer is not allowed: expected the DPOptimizer that PrivacyEngine.make_private "
                             "returned.")
        self.module, self.optimizer, self.criterion = module, optimizer, criterion
        k = optimizer.kernel
        kind = k.kind(optimizer.round == 0)
        m = optimizer.mechanism
        spec = m.release(kind)
        sampling = {"Poisson": POISSON, "fixed size without replacement": WOR}.get(spec.sampling, "full batch")
        rate = getattr(m, "sampling_rate", None)
        if getattr(m, "shuffled", False):
            sampling = SHUFFLE
        if getattr(m, "balls_in_bins", False):
            sampling, rate = BALLS_IN_BINS, 1.0 / m.steps_per_epoch
        self.claim = StepClaim(float(m.sensitivity(kind, k.clip) if spec.scale == "clip" else m.sensitivity(kind)),
                               float(k.std(kind)), "add/remove" if spec.relation in ("add/remove", "zero-out")
                               else "replace-one", sampling, rate, getattr(m, "batch_size", None))

    def release(self, batch, *, noise, generator):
        """Forward and backward on ``batch``, then the optimizer's release of those terms (its state restored).

        Args:
            batch, noise, generator: as :meth:`PrivateStep.release`.

        Returns:
            The released value, flat, float64 on the CPU.
        """
        x, y = batch
        self.optimizer.zero_grad()
        self.criterion(self.module(x), y).backward()
        return _flat64(self.optimizer.release_of(noise=noise, generator=generator))


class OpacusStep(PrivateStep):
    """Opacus's ``DPOptimizer`` and ``GradSampleModule`` as ``PrivacyEngine.make_private`` returns
    them (hooks mode): forward, backward, then its ``pre_step`` -- per-sample clipping, noise from
    its ``generator``, scaling -- and the noisy SUM read back from ``.grad`` (times the expected
    batch size for a mean loss).  The accountant's step hook is held off; the gradients are zeroed.

    Args:
        module: Opacus's ``GradSampleModule``.
        optimizer: Opacus's ``DPOptimizer`` (its ``max_grad_norm`` C and ``noise_multiplier`` z
            make the claim: sensitivity C, std z C, add/remove, Poisson).
        criterion: ``criterion(output, target)`` -> the loss.
        sample_rate: the Poisson sampling rate of the claim, in (0, 1], or None.

    Raises:
        InputError: if ``optimizer`` has no ``pre_step`` or ``noise_multiplier``, or the claim is invalid.
    """

    def __init__(self, module, optimizer, criterion, sample_rate: float | None = None):
        if not hasattr(optimizer, "pre_step") or not hasattr(optimizer, "noise_multiplier"):
            raise InputError("optimizer is not allowed: expected Opacus's DPOptimizer.")
        self.module, self.optimizer, self.criterion = module, optimizer, criterion
        C, z = float(optimizer.max_grad_norm), float(optimizer.noise_multiplier)
        self.claim = StepClaim(C, z * C, "add/remove", POISSON, sample_rate)

    def release(self, batch, *, noise, generator):
        """Forward, backward and Opacus's ``pre_step`` on ``batch``; the noisy sum read back from ``.grad``.

        Args:
            batch, noise, generator: as :meth:`PrivateStep.release`.

        Returns:
            The released value, flat, float64 on the CPU (the gradients are zeroed).
        """
        opt = self.optimizer
        x, y = batch
        opt.zero_grad()
        self.criterion(self.module(x), y).backward()
        z, gen, hook = opt.noise_multiplier, opt.generator, opt.step_hook
        opt.noise_multiplier, opt.generator, opt.step_hook = (z if noise else 0.0), generator, None
        try:
            opt.pre_step()
        finally:
            opt.noise_multiplier, opt.generator, opt.step_hook = z, gen, hook
        scale = opt.expected_batch_size * opt.accumulated_iterations if opt.loss_reduction == "mean" else 1.0
        out = torch.cat([p.grad.reshape(-1) for p in opt.params]) * scale
        opt.zero_grad()
        return _flat64(out)
