"""``PrivacyEngine``: dpcalib's private updates in the user's own training loop, with Opacus's names.

In the user's own loop::

    from dpcalib.optim import PrivacyEngine          # was: from opacus import PrivacyEngine
    engine = PrivacyEngine()
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=loader,
        target_epsilon=3.0, target_delta=1e-5, epochs=10, max_grad_norm=1.0)
    for epoch in range(10):
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
    engine.get_epsilon(1e-5)                          # the best certified eps of what ran

``make_private`` returns the three objects of Opacus -- a :class:`~.module.PrivateModule`, a
:class:`~.optimizer.DPOptimizer` around the user's ``torch.optim`` optimizer and a data loader
whose batch sampler is the one the accountant assumes (:mod:`.loader`, :mod:`.samplers`) -- plus, when a
``criterion`` is given, the criterion to call in the loop (first after the optimizer, as Opacus's
ghost mode returns it).  What is new against Opacus: ``algorithm=`` (``"dp-sgd"``, ``"dicesgd"``,
``"dp-srm"``: every registered algorithm with an ``engine`` entry), ``sampling=`` (``"poisson"``,
``"wor"``, ``"shuffle"``, ``"balls-in-bins"``, as the algorithm's accountant covers), the tight certified
calibration, a
ledger of what really ran with a budget, and the checks of :mod:`dpcalib.optim.audit`.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import numbers
import warnings

import torch
from torch.utils.data import RandomSampler

from ...accountant import ACCOUNTANTS as _CERTIFIED
from ...accountant import validation
from ...accountant.validation import InputError, in_range
from ...mechanisms import CalibrationReport, PerLayerClip
from ...mechanisms.registry import lookup
from ...mechanisms.shape import BALLS_IN_BINS, POISSON, SAMPLINGS, SHUFFLE, WOR, Run, Sampling

from ..algorithms.noise import NoiseSource
from ..algorithms.registry import optimizer_class
from ..clipping.paths import ClippingFallbackWarning
from ..clipping.validator import ModuleValidator
from ..randomness import RunStreams, check_seed, same_on_ranks
from ..run.transport import ONE_PROCESS
from . import checkpoint
from .errors import opacus_flavoured
from .hooks import ModuleHooks
from .ledger import Ledger, calibrate
from .loader import check_loader, loader_generator, notice_replaced, private_loader, uncovered_sampler
from .samplers import BallsInBinsBatchSampler, FixedSizeBatchSampler, PoissonBatchSampler, ShuffleBatchSampler
from .module import REDUCTIONS, PrivateModule
from .optimizer import DPOptimizer
from .perlayer import PerLayerModule

__all__ = []

#: what ``get_epsilon`` reports: the accountants of every eps query, and ``"auto"`` (GDP where exact, else RDP)
ACCOUNTANTS = (*_CERTIFIED, "auto")
#: Opacus's grad_sample_mode values: every one is served by the same per-layer rules
GRAD_SAMPLE_MODES = ("hooks", "functorch", "ew", "ghost", "ghost_fsdp")
#: clipping= values: "flat" (one norm over every parameter), "per_layer" (one bound per trained parameter)
CLIPPINGS = ("flat", "per_layer")



class DPLoss:
    """The user's criterion, noting each batch's target for the private step (DP-SRM's gradient at
    the previous point needs the batch's loss).  Call it as the criterion itself.

    Args:
        criterion: the user's criterion, ``criterion(output, target, ...)``.
        module: the :class:`~.module.PrivateModule` whose last capture takes the target.
    """

    def __init__(self, criterion, module: PrivateModule):
        self.criterion, self.module = criterion, module

    @property
    def reduction(self):
        """The criterion's ``reduction`` (the module's ``loss_reduction`` when it has none)."""
        return getattr(self.criterion, "reduction", self.module.loss_reduction)

    def __call__(self, output, target, *args, **kwargs):
        caps = self.module.captures
        if caps and caps[-1].target is None:
            caps[-1].target = target.detach() if isinstance(target, torch.Tensor) else target
        return self.criterion(output, target, *args, **kwargs)


def _is_number(value) -> bool:
    """A real number (Python's or numpy's), not a bool, a string or None."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_number(name: str, value, allowed: str, *, optional: bool = True) -> None:
    """Refuse a non-number ``value`` of the numeric option ``name`` (None: allowed when ``optional``) in one
    line naming the option, the value and ``allowed``; its range is checked where it is used."""
    if not (_is_number(value) or (optional and value is None)):
        raise InputError(f"{name}={value!r} is not allowed: expected {allowed}.")


def _levels(mechanism, noise_multiplier, noise) -> dict:
    """The noise levels a run starts at, checked against the algorithm's names of them.

    Args:
        mechanism: the algorithm's mechanism class (its ``name`` and ``noise_names()``: the algorithm's, not
            the run's, which this check never reads).
        noise_multiplier: DP-SGD's level, or None.
        noise: a dict of levels or a ``CalibrationReport``, or None.

    Returns:
        ``{name: level}`` in the algorithm's order, each a finite float >= 0.

    Raises:
        InputError: both or neither of ``noise_multiplier`` and ``noise`` given, a level missing, unknown, not a
            finite number >= 0, or a calibration of another algorithm.
    """
    names = mechanism.noise_names()
    if noise is not None and noise_multiplier is not None:
        raise InputError("noise_multiplier and noise are not allowed together: give one.")
    if noise is None and noise_multiplier is None:
        raise InputError(f"noise_multiplier is required (or noise={{{', '.join(repr(n) + ': ...' for n in names)}}}).")
    if noise is None:
        if names != ("noise_multiplier",):
            raise InputError(f"noise_multiplier={noise_multiplier!r} is not allowed for {mechanism.name}: its noise "
                             f"levels are {', '.join(names)}; give noise={{...}}.")
        noise = {"noise_multiplier": noise_multiplier}
    if isinstance(noise, CalibrationReport):
        if noise.algorithm != mechanism.name:
            raise InputError(f"noise is not allowed: a calibration of {noise.algorithm!r} cannot drive {mechanism.name!r}.")
        noise = noise.noise
    if not isinstance(noise, dict):
        raise InputError(f"noise={noise!r} is not allowed: expected a dict of noise levels or a CalibrationReport.")
    out = {}
    for k in names:
        v = noise.get(k)
        f = float(v) if _is_number(v) else math.nan          # a str, bool or None is no level ('1.0' included)
        if not (f >= 0) or math.isinf(f):
            raise InputError(f"noise[{k!r}]={v!r} is not allowed: expected a finite number >= 0.")
        out[k] = f
    extra = sorted(set(noise) - set(names))
    if extra:
        raise InputError(f"noise[{extra[0]!r}] is not allowed for {mechanism.name}: its levels are {', '.join(names)}.")
    return out


class PrivacyEngine:
    """One private training run (or several loaders / optimizers charged to one ledger).

    ``accountant``: what :meth:`get_epsilon` reports -- ``"best"`` (default: the smallest certified
    eps of exact GDP, the PLD bracket's upper end and RDP), or ``"auto"``, ``"gdp"``, ``"rdp"``,
    ``"pld"``; Opacus's ``"prv"`` (an estimate, not a bound) is answered by ``"best"``.

    ``secure_mode`` (Opacus's name): every batch and every noise draw of the runs it makes private
    come from a ChaCha20 generator keyed by the operating system, and the noise is added on a fixed
    grid, exactly as a rounded Gaussian, so that the floating-point attacks of Mironov (CCS 2012)
    and Jin et al. (IEEE S&P 2022) learn nothing from its low bits; the eps is the Gaussian
    mechanism's, unchanged (:mod:`dpcalib.optim.randomness.secure`; docs/threat-model.md).  Without
    it the streams are torch.Generators seeded from fresh operating-system entropy (unless
    ``make_private`` is given a seed): unpredictable, but not hardened.

    Args:
        accountant: ``"best"``, ``"auto"``, ``"gdp"``, ``"rdp"`` or ``"pld"`` (``"prv"``: ``"best"``).
        secure_mode: draw batches and noise from the hardened generator (see above).

    Raises:
        InputError: if ``accountant`` is unknown or ``secure_mode`` is not a bool.
    """

    def __init__(self, accountant: str = "best", secure_mode: bool = False):
        if accountant == "prv":
            accountant = "best"
        if accountant not in ACCOUNTANTS:
            raise InputError(f"accountant={accountant!r} is not allowed: expected one of {', '.join(ACCOUNTANTS)}.")
        if not isinstance(secure_mode, bool):
            raise InputError(f"secure_mode={secure_mode!r} is not allowed: expected True or False.")
        self.secure_mode = secure_mode
        self.accountant_kind = accountant
        self.ledger = Ledger()
        #: Opacus's ``privacy_engine.accountant`` (``get_epsilon(delta)``, ``len()``): the ledger's answers
        self.accountant = _Accountant(self)
        self.budget = None

    # -- the run's shape ------------------------------------------------------------------------------
    def _plan(self, module, data_loader, algorithm, sampling, poisson_sampling, epochs, steps, max_grad_norm, C2, b0,
              momentum, clipping, dataset_size=None):
        entry = lookup(algorithm)
        if not entry.engine:
            raise InputError(f"algorithm={algorithm!r} is not allowed here: the engine runs one-dataset algorithms "
                             f"({', '.join(_engine_algorithms())}); {algorithm} has its own optimizer "
                             "(dpcalib.optim).")
        if not isinstance(poisson_sampling, bool):
            raise InputError(f"poisson_sampling={poisson_sampling!r} is not allowed: expected True or False.")
        keep = sampling is None and not poisson_sampling
        if sampling == BALLS_IN_BINS and not poisson_sampling:
            raise InputError("poisson_sampling=False is not allowed with sampling='balls-in-bins': it keeps the "
                             "loader's own batches, and balls-in-bins draws its own; give one of them.")
        if keep and SHUFFLE not in entry.engine:
            raise InputError(f"poisson_sampling=False is not allowed for {algorithm}: its accountant covers "
                             f"{', '.join(SAMPLINGS[k] for k in entry.engine)} batches only, not the loader's own.")
        if sampling is None:
            sampling = SHUFFLE if keep else entry.engine[0]
        if sampling not in entry.engine:
            known = sampling in SAMPLINGS
            raise InputError(f"sampling={sampling!r} is not allowed for {algorithm}: " + (
                f"its accountant covers {', '.join(entry.engine)} only ({SAMPLINGS[sampling]} batches would be "
                "accounted as something they are not)." if known else f"expected one of {', '.join(entry.engine)}."))
        check_loader(data_loader)
        if clipping == "per_layer":
            if not getattr(getattr(optimizer_class(algorithm), "kernel_class", None), "per_layer", False):
                raise InputError(f"clipping='per_layer' is not allowed for {algorithm}: per-layer bounds are accounted "
                                 "for DP-SGD's release only.")
            c = PerLayerClip(max_grad_norm if isinstance(max_grad_norm, (list, tuple)) else [max_grad_norm])
        else:
            if max_grad_norm is None or isinstance(max_grad_norm, bool) or isinstance(max_grad_norm, (list, tuple)):
                raise InputError(f"max_grad_norm={max_grad_norm!r} is not allowed: expected a number > 0 (a list of "
                                 "bounds is per-layer clipping: clipping='per_layer').")
            c = float(max_grad_norm)
            if not (c > 0) or math.isinf(c):
                raise InputError(f"max_grad_norm={max_grad_norm!r} is not allowed: expected a finite number > 0.")
        # the run's shape from public numbers: the batch size asked for and the stated (or accepted) dataset
        # size N -- never the sampler's length or, once N is stated, the private dataset's size
        n = len(data_loader.dataset)
        N = n if dataset_size is None else validation.records(dataset_size, "dataset_size")
        if N != n and sampling in (SHUFFLE, WOR):
            raise InputError(f"dataset_size={dataset_size!r} is not allowed with sampling={sampling!r} over {n} "
                             "records: its neighbouring datasets have the same size (a record replaced, not "
                             "removed), so the size is public; leave dataset_size unset.")
        bs = data_loader.batch_sampler
        batch_size = getattr(bs, "b", None) or data_loader.batch_size
        if batch_size is None and isinstance(bs, PoissonBatchSampler):
            # an Opacus-style DPDataLoader: Opacus's make_private re-draws its Poisson batches at 1 / len(loader),
            # n / len(loader) records expected; this engine's sampler and accountant both take that batch size
            batch_size = max(1, round(n / len(bs)))
        if batch_size is None:
            raise InputError("data_loader is not allowed: its batch size is not known.")
        drop_last = getattr(bs, "drop_last", False)
        # the run's shape, typed once here and handed to the mechanism (balls-in-bins: ceil(N / b) bins an
        # epoch, whatever the loader would drop)
        run = Run.of(Sampling(sampling, N, batch_size, drop_last), epochs=epochs, steps=steps, clip=float(c), clip2=C2,
                     b0=b0, momentum=momentum)
        mech = entry.mechanism.from_run(run)
        steps_per_pass = run.sampling.steps_per_epoch
        if sampling == BALLS_IN_BINS and steps_per_pass > n:
            raise InputError(f"dataset_size={dataset_size!r} is not allowed with sampling='balls-in-bins' over {n} "
                             f"records: its {steps_per_pass} steps an epoch (ceil(N/b)) exceed the records; "
                             "give a dataset size closer to the data's, or a larger batch_size.")
        law = uncovered_sampler(data_loader)
        # replaced (with poisson_sampling=False too: its law is not a partition); a DPDataLoader's Poisson batches
        # re-drawn as Poisson batches (Opacus's make_private does the same) need no notice
        if law is not None and not (sampling == POISSON and isinstance(bs, PoissonBatchSampler)):
            keep = False
            q = f"{batch_size}/{N}" if batch_size < N else "1"
            by = {POISSON: f"Poisson batches at q = {q}, {steps_per_pass} a pass",
                  WOR: f"{steps_per_pass} batches of {batch_size} without replacement a pass",
                  SHUFFLE: f"shuffled epochs of {steps_per_pass} batches of {batch_size}",
                  BALLS_IN_BINS: f"balls-in-bins epochs of {steps_per_pass} steps"}[sampling]
            notice_replaced(law, by, stacklevel=5)
        return run, mech, ("loader" if keep else sampling), n, batch_size, steps_per_pass, c

    # -- Opacus's entry points --------------------------------------------------------------------------
    def make_private(self, *, module, optimizer, data_loader, noise_multiplier=None, max_grad_norm, criterion=None,
                     algorithm: str = "dp-sgd", sampling: str | None = None, noise=None, loss_reduction: str = "mean",
                     seed: int | None = None, epochs: int | None = None, steps: int | None = None,
                     C2: float | None = None,
                     b0: int | None = None, momentum: float | None = None, poisson_sampling: bool = True,
                     allow_overspend: bool = False, distributed: bool = False, clipping: str = "flat",
                     grad_sample_mode: str = "hooks", noise_generator=None, regularizer=None, wrap_model: bool = True,
                     dataset_size: int | None = None, keep_summed_grad: bool = False, **kwargs):
        """Wrap ``module``, ``optimizer`` and ``data_loader`` for private training at the given noise.

        Returns ``(module, optimizer, data_loader)``, or ``(module, optimizer, criterion,
        data_loader)`` when ``criterion`` is given or ``grad_sample_mode="ghost"`` (Opacus's order;
        call the returned criterion in the loop; ghost mode's default is ``nn.CrossEntropyLoss()``).
        ``epochs`` / ``steps`` give the run's planned length (the calibration's; default one pass
        over the loader); the ledger charges what really runs.

        ``wrap_model=False``: the module returned is the one passed in, its ``forward`` hooked
        (:mod:`.hooks`): train it as before.  ``poisson_sampling=False`` (DP-SGD): the loader's own
        batches, in its own order (sequential, or shuffled by its sampler), accounted as a fixed
        partition -- each record in one batch per pass, so ``E`` passes are ``E`` Gaussian releases
        of sensitivity ``C``, exact GDP ``mu = sqrt(E) / z`` (zero-out relation), no amplification
        (the shuffle mechanism's certified upper end; docs/optimizers.md); a sampler whose law is not "each
        record once a pass" (a ``RandomSampler`` with replacement or ``num_samples``) is replaced by shuffled
        epochs, with a one-line notice, as it is by the batches of any other ``sampling``.  ``sampling="balls-in-bins"``
        (DP-SGD): each pass is an epoch of ``t = ceil(n / batch_size)`` steps, every record in one of them
        chosen uniformly from the secret data stream (:class:`~.samplers.BallsInBinsBatchSampler`: batches of
        ``Binomial(n, 1/t)`` records, empty ones included), the noisy sum divided by the expected batch
        ``n / t``, and each epoch charged as one ``BallsInBinsGaussianEvent`` -- ``get_epsilon`` is
        ``DPSGD(sampling="balls-in-bins", n=n, batch_size=batch_size, epochs=E).epsilon``.  ``clipping="per_layer"``
        with ``max_grad_norm`` a list (one bound per trained parameter): each parameter's part of
        a record's gradient clipped to its bound, sensitivity ``||max_grad_norm||_2``
        (:mod:`.perlayer`).

        ``seed``: None (the default) takes the batches and the noise from fresh operating-system
        entropy; an integer makes them reproducible -- for tests and research only: anyone who
        knows it can regenerate the batches and the noise, and the eps protects nobody from them.
        ``noise_generator``: a ``torch.Generator`` on the module's device that the noise is drawn
        from instead (Opacus's option), and a ``DataLoader(generator=...)``: the generator the
        batches are drawn from (Opacus's): the user then owns that secret -- a generator seeded
        with a known number makes the noise (the batches) known; both are refused / unused in
        ``secure_mode``.  ``distributed=True``: every process of an initialised ``torch.distributed``
        group runs this loop on its share of each batch (the clipped sums are reduced, the noise
        drawn once).  Opacus's ``grad_sample_mode`` and ``batch_first`` are accepted: every mode is
        served by the same per-layer rules.  ``regularizer``: ``r(params) -> scalar`` (params: the
        module's named parameters), a data-independent term of the objective; its gradient is
        public and is added to the private direction after the release.

        Args:
            module: the ``torch.nn.Module`` to train.
            optimizer: the ``torch.optim.Optimizer`` of the module's parameters (not one ``make_private``
                returned).
            data_loader: the user's ``DataLoader``: its batch size and the dataset size (``dataset_size``) give
                the run's shape, never its sampler's length.
            noise_multiplier: noise std / L2 sensitivity, a finite number >= 0, for an algorithm whose one
                noise level it is; None: give ``noise``.
            max_grad_norm: the clip norm C, a finite number > 0; with ``clipping="per_layer"`` a list of
                bounds, one per trained parameter.
            criterion: the loss to call in the loop (returned wrapped), or None.
            algorithm: a registered algorithm with an engine entry (``"dp-sgd"``, ``"dicesgd"``, ``"dp-srm"``).
            sampling: ``"poisson"``, ``"wor"``, ``"shuffle"`` or ``"balls-in-bins"``, as the algorithm's
                accountant covers; None: the algorithm's first (the loader's own batches with
                ``poisson_sampling=False``).
            noise: ``{noise name: level}`` (finite, >= 0) or a ``CalibrationReport`` of the same algorithm;
                None: give ``noise_multiplier``.
            loss_reduction: ``"mean"`` or ``"sum"``, the criterion's reduction.
            seed: None (fresh operating-system entropy) or an integer (reproducible; see above).
            epochs: the planned number of passes over the loader, an integer >= 1, or None.
            steps: the planned number of steps, an integer >= 1, or None (not with ``epochs``; with an
                epoch-wise sampling a whole number of epochs).
            C2: the algorithm's second bound where its shape has one (DiceSGD's ``C2``, DP-SRM's step
                bound), or None (the algorithm's default).
            b0: DP-SRM's first batch size, or None (the batch size).
            momentum: DP-SRM's momentum in (0, 1], or None (the algorithm's default).
            poisson_sampling: False keeps the loader's own batches (see above).
            allow_overspend: let steps past a calibrated budget run (``make_private_with_epsilon``; else a
                step past it raises).
            distributed: share each batch between the processes of an initialised ``torch.distributed`` group.
            clipping: ``"flat"`` or ``"per_layer"``.
            grad_sample_mode: one of Opacus's modes (``"hooks"``, ``"functorch"``, ``"ew"``, ``"ghost"``,
                ``"ghost_fsdp"``), all served by the same rules; a ghost mode without ``criterion`` gets
                ``nn.CrossEntropyLoss``.
            noise_generator: a ``torch.Generator`` on the module's device to draw the noise from, or None.
            regularizer: ``r(params) -> scalar`` (see above), or None.
            wrap_model: False: return the module passed in, its ``forward`` hooked.
            dataset_size: the public dataset size N, an integer >= 1, or None: ``len(data_loader.dataset)``,
                which is then taken as public (docs/threat-model.md).  The Poisson rate ``q = min(1, b / N)``,
                the ``ceil(N / b)`` batches a pass (``floor`` with ``drop_last``) and the noisy sum's divisor
                (``q N``; balls-in-bins: ``N / t``) come from N and the batch size ``b``, never from the data;
                the batches are still drawn from the records there are.  With ``"shuffle"``, ``"wor"`` or
                ``poisson_sampling=False`` it must be the data's size (their neighbours have the same size).
            keep_summed_grad: keep ``p.summed_grad`` (the un-noised clipped sum) after a release with noise,
                until the next ``zero_grad()``, as Opacus does; by default the release clears it
                (:mod:`.optimizer`, docs/threat-model.md).
            **kwargs: Opacus's ``batch_first`` (True: records on dimension 0 of the module's input; False:
                on dimension 1) and ``total_steps`` (accepted, unused); any other is refused.

        Returns:
            ``(module, optimizer, data_loader)``, or ``(module, optimizer, criterion, data_loader)`` when
            a criterion is given or made: the :class:`~.module.PrivateModule` (or the hooked module), the
            :class:`~.optimizer.DPOptimizer`, the wrapped criterion (:class:`DPLoss`) and the private loader.

        Raises:
            InputError: a bad option (one line); a module with a layer private training refuses
                raises :class:`dpcalib.optim.clipping.UnsupportedModuleError`, also Opacus's
                ``UnsupportedModuleError`` where Opacus is imported (:mod:`.errors`).
        """
        return self._make(module=module, optimizer=optimizer, data_loader=data_loader,
                          noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm, criterion=criterion,
                          algorithm=algorithm, sampling=sampling, noise=noise, loss_reduction=loss_reduction,
                          seed=seed, epochs=epochs, steps=steps, C2=C2, b0=b0, momentum=momentum,
                          poisson_sampling=poisson_sampling, allow_overspend=allow_overspend,
                          distributed=distributed, clipping=clipping, noise_generator=noise_generator,
                          regularizer=regularizer, grad_sample_mode=grad_sample_mode, wrap_model=wrap_model,
                          dataset_size=dataset_size, keep_summed_grad=keep_summed_grad, kwargs=kwargs, target=None)

    def make_private_with_epsilon(self, *, module, optimizer, data_loader, target_epsilon, target_delta, epochs=None,
                                  steps=None, max_grad_norm, **kwargs):
        """As :meth:`make_private`, with the noise calibrated to spend at most ``target_epsilon`` at ``target_delta``.

        The whole run (``epochs`` passes over the loader, or ``steps`` steps) is calibrated by the tight
        certified calibration of the algorithm's mechanism for the engine's accountant (:meth:`get_epsilon`'s:
        the best certified eps by default; :func:`.ledger.calibrate`), so that :meth:`get_epsilon` of the run
        never exceeds ``target_epsilon``.  A step past that run raises (unless ``allow_overspend``).

        Args:
            module: as for :meth:`make_private`.
            optimizer: as for :meth:`make_private`.
            data_loader: as for :meth:`make_private`.
            target_epsilon: the eps the whole run may spend, > 0.
            target_delta: the delta of that budget, in (0, 1).
            epochs: the run's passes over the loader (or give ``steps``).
            steps: the run's steps (or give ``epochs``).
            max_grad_norm: as for :meth:`make_private`.
            **kwargs: :meth:`make_private`'s other keywords (``dataset_size`` among them; not ``noise_multiplier``
                or ``noise``).

        Returns:
            As :meth:`make_private`.

        Raises:
            InputError: if ``target_epsilon`` / ``target_delta`` is not a number in range, neither ``epochs`` nor
                ``steps`` is given, the noise is given, the engine's accountant cannot account the run
                (``"gdp"`` of subsampled batches), or as :meth:`make_private`.
        """
        _check_number("target_epsilon", target_epsilon, "a number > 0", optional=False)
        _check_number("target_delta", target_delta, "a number in (0, 1)", optional=False)
        in_range(target_epsilon, "target_epsilon", 0.0, math.inf, low_open=True, high_open=True)  # its cap: calibrate
        in_range(target_delta, "target_delta", 0.0, 1.0, low_open=True, high_open=True)
        if epochs is None and steps is None:
            raise InputError("epochs or steps is required: the calibration is for a run of a known length.")
        if "noise_multiplier" in kwargs or "noise" in kwargs:
            raise InputError("noise_multiplier is not allowed here: make_private_with_epsilon calibrates it; use "
                             "make_private to give it.")
        # make_private's keywords with its own defaults (one copy: its signature)
        call = inspect.signature(self.make_private).bind(module=module, optimizer=optimizer, data_loader=data_loader,
                                                          max_grad_norm=max_grad_norm, epochs=epochs, steps=steps,
                                                          **kwargs)
        call.apply_defaults()
        return self._make(**call.arguments, target=(target_epsilon, target_delta))

    # -- Opacus's module checks (ModuleValidator's, dpcalib.optim.clipping.validator) ---------------------
    @classmethod
    def get_compatible_module(cls, module):
        """A copy of ``module`` with every layer private training refuses replaced (BatchNorm by
        GroupNorm, ...: ``ModuleValidator.fix``), then validated.

        Raises:
            UnsupportedModuleError: a layer no replacement fixes (also Opacus's class, :mod:`.errors`).

        Args:
            module: the model (left unchanged).

        Returns:
            The fixed copy.
        """
        fixed = ModuleValidator.fix(module)
        _check_module(fixed)
        return fixed

    def is_compatible(self, *, module, optimizer=None, data_loader=None) -> bool:
        """Whether ``make_private`` takes ``module`` (no layer it refuses).

        Args:
            module: the model.
            optimizer: unused (Opacus's signature).
            data_loader: unused (Opacus's signature).

        Returns:
            True when no layer is refused.
        """
        return ModuleValidator.is_valid(module)

    def validate(self, *, module, optimizer=None, data_loader=None) -> None:
        """As :meth:`is_compatible`, raising the first refusal (:meth:`get_compatible_module`'s error).

        Args:
            module, optimizer, data_loader: as :meth:`is_compatible`.

        Raises:
            UnsupportedModuleError: if the model has a layer private training refuses.
        """
        _check_module(module)

    def _make(self, *, module, optimizer, data_loader, noise_multiplier, max_grad_norm, criterion, algorithm, sampling,
              noise, loss_reduction, seed, epochs, steps, C2, b0, momentum, poisson_sampling, allow_overspend,
              distributed, clipping, noise_generator, regularizer, kwargs, target, grad_sample_mode="hooks",
              wrap_model=True, dataset_size=None, keep_summed_grad=False):
        unknown = sorted(set(kwargs) - {"batch_first", "total_steps"})
        if unknown:
            raise InputError(f"{unknown[0]}= is not allowed: make_private takes no such option.")
        if getattr(module, "shares_batches_across_ranks", False) is True:
            distributed = True           # Opacus's DPDDP wrapper: Opacus infers the data-parallel run from it
        for name, value, allowed in (("noise_multiplier", noise_multiplier, "a finite number >= 0, or None (give noise=)"),
                                     ("C2", C2, "a number > 0, or None (the algorithm's default)"),
                                     ("b0", b0, "an integer >= 1, or None (the batch size)"),
                                     ("momentum", momentum, "a number in (0, 1], or None (the algorithm's default)")):
            _check_number(name, value, allowed)
        bounds = max_grad_norm if isinstance(max_grad_norm, (list, tuple)) else [max_grad_norm]
        if not all(_is_number(c) for c in bounds):
            raise InputError(f"max_grad_norm={max_grad_norm!r} is not allowed: expected a finite number > 0 (clipping="
                             "'per_layer': a list of them, one per trained parameter).")
        if not isinstance(keep_summed_grad, bool):
            raise InputError(f"keep_summed_grad={keep_summed_grad!r} is not allowed: expected True or False.")
        if clipping == "adaptive":
            raise InputError("clipping='adaptive' is not allowed: adaptive clipping (Andrew et al. 2021) releases a "
                             "noisy quantile every step that dpcalib does not account; use 'flat' or 'per_layer'.")
        if clipping not in CLIPPINGS:
            raise InputError(f"clipping={clipping!r} is not allowed: expected one of {', '.join(CLIPPINGS)}.")
        if grad_sample_mode not in GRAD_SAMPLE_MODES:
            raise InputError(f"grad_sample_mode={grad_sample_mode!r} is not allowed: expected one of "
                             f"{', '.join(GRAD_SAMPLE_MODES)} (all served by the same per-layer rules).")
        if not isinstance(wrap_model, bool):
            raise InputError(f"wrap_model={wrap_model!r} is not allowed: expected True or False.")
        batch_first = kwargs.get("batch_first", True)
        if not isinstance(batch_first, bool):
            raise InputError(f"batch_first={batch_first!r} is not allowed: expected True (records on dimension 0 "
                             "of the module's input) or False (on dimension 1).")
        if grad_sample_mode in ("ghost", "ghost_fsdp") and criterion is None:
            criterion = torch.nn.CrossEntropyLoss(reduction=loss_reduction)
        if regularizer is not None and not callable(regularizer):
            raise InputError(f"regularizer={regularizer!r} is not allowed: expected a callable (parameters dict) -> "
                             "scalar tensor.")
        if noise_generator is not None and not isinstance(noise_generator, torch.Generator):
            raise InputError(f"noise_generator={type(noise_generator).__name__} is not allowed: expected a "
                             "torch.Generator.")
        if noise_generator is not None and self.secure_mode:
            raise InputError("noise_generator is not allowed with secure_mode=True: the secure noise is drawn from "
                             "its own ChaCha20 generator.")
        if loss_reduction not in REDUCTIONS:
            raise InputError(f"loss_reduction={loss_reduction!r} is not allowed: expected 'mean' or 'sum'.")
        if criterion is not None and getattr(criterion, "reduction", loss_reduction) != loss_reduction:
            raise InputError(f"criterion.reduction={criterion.reduction!r} is not allowed with loss_reduction="
                             f"{loss_reduction!r}: say the criterion's reduction (the per-record terms are scaled by it).")
        seed = check_seed(seed)
        if not isinstance(module, torch.nn.Module):
            raise InputError(f"module={module!r} is not allowed: expected a torch.nn.Module.")
        _check_module(module)
        if not isinstance(optimizer, torch.optim.Optimizer) or isinstance(optimizer, DPOptimizer):
            raise InputError(f"optimizer={type(optimizer).__name__} is not allowed: expected the torch.optim.Optimizer of "
                             "the module's parameters (not one make_private returned).")
        run, mech, sampling, n, b, per_pass, c = self._plan(module, data_loader, algorithm, sampling,
                                                                 poisson_sampling, epochs, steps, max_grad_norm, C2,
                                                                 b0, momentum, clipping, dataset_size)
        budget = None
        if target is not None:
            eps, delta = target
            rep = calibrate(mech, eps, delta, self.accountant_kind)     # get_epsilon's accountant meets the target
            levels = _levels(type(mech), None, rep.noise)
            budget = {"mechanism": mech, "levels": levels, "epsilon": float(eps), "delta": float(delta),
                      "calibration": rep, "accountant": self.accountant_kind}
            self.budget = budget
        else:
            levels = _levels(type(mech), noise_multiplier, noise)
        kernel_class = getattr(optimizer_class(algorithm), "kernel_class", None)
        if kernel_class is None:
            raise InputError(f"algorithm={algorithm!r} is not allowed here: its optimizer has no kernel that takes a "
                             "batch.")
        if clipping == "per_layer":
            private = _per_layer_module(module, c, loss_reduction, batch_first)
        else:
            private = PrivateModule(module, loss_reduction=loss_reduction, batch_first=batch_first)
        first = next(module.parameters())
        dim = sum(p.numel() for _, p in private.named)
        kernel = kernel_class.for_run(mech, levels, run=run, dim=dim, device=first.device,
                                      dtype=first.dtype)
        needs_prev = any(op == "clipped_diff_sum" for op, _ in kernel.asks(False))
        if needs_prev and criterion is None:
            raise InputError(f"criterion is required for {algorithm}: its step needs the batch's gradients at the "
                             "previous point (pass criterion=..., and call the criterion make_private returns).")
        transport, share = ONE_PROCESS, (0, 1)
        if distributed:
            from ..run.ranks import BatchOnRanks

            transport = BatchOnRanks(0)
            share = (transport.rank, transport.world)
        if noise_generator is not None and noise_generator.device != first.device:
            raise InputError(f"noise_generator is not allowed: it is on {noise_generator.device}, the module on "
                             f"{first.device}.")
        streams = RunStreams(seed, secure_mode=self.secure_mode, agree=transport.agree,
                             gather=transport.gather if distributed else None)
        gen, noise_gen, _ = streams.run(first.device, data_device="cpu")
        if seed is None and not self.secure_mode:
            gen = loader_generator(data_loader, gen)
        if distributed:                     # one logical batch and one noise stream for the whole group
            for name, g in (("data_loader.generator", gen if gen is getattr(data_loader, "generator", None) else None),
                            ("noise_generator", noise_generator)):
                if g is not None:
                    same_on_ranks(name, "state " + hashlib.sha256(g.get_state().numpy().tobytes()).hexdigest()[:16],
                                  transport.gather)
        # what a checkpoint may restore: a seeded stream, or the user's own generator (the user owns that secret);
        # a stream of fresh entropy is never restored, so no resume or fork replays it
        data_replayable = seed is not None or gen is getattr(data_loader, "generator", None)
        if sampling == "loader":
            if distributed:
                raise InputError("poisson_sampling=False is not allowed with distributed=True: the loader's own "
                                 "batches are not shared out between the processes; give sampling='shuffle'.")
            sampler = data_loader.batch_sampler
            if isinstance(getattr(sampler, "sampler", None), RandomSampler):
                # the same law (a uniform order of every record, cut into batches of b), drawn by the run's own
                # sampler: a resume mid-epoch then goes on with the records the epoch has not used, where the
                # user's RandomSampler would draw a new order and skip a count of batches (a record twice an epoch)
                sampler = ShuffleBatchSampler(n, b, gen, share, drop_last=sampler.drop_last,
                                              replayable=data_replayable)
        elif sampling == POISSON:
            sampler = PoissonBatchSampler(n, mech.sampling_rate, per_pass, gen, share, replayable=data_replayable)
        elif sampling == WOR:
            sampler = FixedSizeBatchSampler(n, b, per_pass, gen, share, b0=getattr(mech, "b0", None),
                                            replayable=data_replayable)
        elif sampling == BALLS_IN_BINS:
            sampler = BallsInBinsBatchSampler(n, mech.steps_per_epoch, gen, share, replayable=data_replayable)
        else:
            sampler = ShuffleBatchSampler(n, b, gen, share, drop_last=getattr(data_loader.batch_sampler, "drop_last",
                                                                              False), replayable=data_replayable)
        loader = private_loader(data_loader, sampler)
        privatizer = NoiseSource(noise_gen if noise_generator is None else noise_generator, first.device, first.dtype)
        privatizer.replayable = seed is not None or noise_generator is not None
        wrapped = DPLoss(criterion, private) if criterion is not None else None
        opt = DPOptimizer(optimizer, module=private, kernel=kernel, ledger=self.ledger,
                          privatizer=privatizer, transport=transport, budget=budget, allow_overspend=allow_overspend,
                          criterion=wrapped, regularizer=regularizer, loader=loader,
                          per_layer=c if clipping == "per_layer" else None, keep_summed_grad=keep_summed_grad)
        opt.expected_batch_size = kernel.normaliser if kernel.normaliser != 1.0 else b
        returned = private
        if not wrap_model:
            private.hooks = ModuleHooks(private)
            returned = module
        if wrapped is not None:
            return returned, opt, wrapped, loader
        return returned, opt, loader

    # -- privacy spent ----------------------------------------------------------------------------------
    def get_epsilon(self, delta: float) -> float:
        """eps spent so far at ``delta`` by every step charged to this engine (see :class:`PrivacyEngine`).

        Args:
            delta: the target delta.

        Returns:
            The eps spent (0 before any step, inf after a release without noise).
        """
        return self.ledger.epsilon(delta, self.accountant_kind)

    def epsilon_bracket(self, delta: float):
        """The certified upper end and a lower bound on the true eps of what ran (shuffled epochs:
        the shuffle bracket, whose upper end :meth:`get_epsilon` reports; balls-in-bins epochs: its
        PLD bracket).

        Args:
            delta: the target delta.

        Returns:
            The :class:`~dpcalib.accountant.EpsilonBracket`.

        Raises:
            InputError: if no step has run, or a release was made without noise.
        """
        return self.ledger.epsilon_bracket(delta)

    # -- checkpoints (read back with weights_only=True: nothing is unpickled; :mod:`.checkpoint`) ------
    def state_dict(self) -> dict:
        """The engine's plain data: its ledger and the accountant it reports.

        Returns:
            ``{"ledger": ..., "accountant": ...}``.
        """
        return {"ledger": self.ledger.state_dict(), "accountant": self.accountant_kind}

    def load_state_dict(self, state: dict) -> None:
        """Take back a :meth:`state_dict`.

        Args:
            state: what :meth:`state_dict` returned.
        """
        self.ledger.load_state_dict(state["ledger"])
        self.accountant_kind = state["accountant"]

    def save_checkpoint(self, *, path, module, optimizer=None, noise_scheduler=None, grad_clip_scheduler=None,
                        checkpoint_dict=None, module_state_dict_kwargs=None, torch_save_kwargs=None,
                        data_loader=None) -> None:
        """Opacus's ``save_checkpoint``: module, optimizer (the wrapped one, the kernel's state, the
        noise stream, the previous point, the noise levels and clip it runs at), the schedulers, the
        loader's position and the ledger, to ``path`` (a file name: written atomically; or a
        binary file object), with ``checkpoint_dict``'s entries beside them.

        Args:
            path: a file name (written to ``path.tmp`` and renamed: a crash leaves the old checkpoint whole) or a
                binary file object, as ``torch.save`` takes.
            module: the module trained (a wrapper's inner module is saved, with the user's ``state_dict`` keys).
            optimizer: the :class:`~.optimizer.DPOptimizer`, or None (not saved).
            noise_scheduler: a scheduler with ``state_dict()``, or None.
            grad_clip_scheduler: a scheduler with ``state_dict()``, or None.
            checkpoint_dict: further entries saved beside the checkpoint's own, or None; its keys must not be
                the checkpoint's.
            module_state_dict_kwargs: keywords for the module's ``state_dict``, or None.
            torch_save_kwargs: keywords for ``torch.save``, or None.
            data_loader: the private loader (its position mid-pass is saved when it has ``state_dict``), or None.

        Raises:
            InputError: if ``checkpoint_dict`` has a key of the checkpoint's own.
        """
        checkpoint.save(self, path=path, module=module, optimizer=optimizer, noise_scheduler=noise_scheduler,
                        grad_clip_scheduler=grad_clip_scheduler, checkpoint_dict=checkpoint_dict,
                        module_state_dict_kwargs=module_state_dict_kwargs, torch_save_kwargs=torch_save_kwargs,
                        data_loader=data_loader)

    def load_checkpoint(self, *, path, module, optimizer=None, noise_scheduler=None, grad_clip_scheduler=None,
                        module_load_dict_kwargs=None, torch_load_kwargs=None, data_loader=None,
                        resume_noise: bool = False) -> dict:
        """Resume from :meth:`save_checkpoint` (``torch.load(weights_only=True)``); returns the
        checkpoint's dict (``checkpoint_dict``'s entries among them).  ``resume_noise=True``: the
        optimizer takes back the noise levels and clip norm the run had when saved, so that a run
        resumed mid-schedule is the same run bit for bit; by default (Opacus's behaviour) they stay
        as this optimizer was built until a scheduler sets them.

        Args:
            path: a file name or a binary file object, as ``torch.load`` takes.
            module: the module to load the saved state into (a wrapper's inner module).
            optimizer: the :class:`~.optimizer.DPOptimizer` to load into, or None.
            noise_scheduler: a scheduler with ``load_state_dict``, or None.
            grad_clip_scheduler: a scheduler with ``load_state_dict``, or None.
            module_load_dict_kwargs: keywords for the module's ``load_state_dict``, or None.
            torch_load_kwargs: keywords for ``torch.load``, or None (``weights_only`` may only be True).
            data_loader: the private loader, to put back at its saved position, or None.
            resume_noise: take back the noise levels and clip norm the optimizer had when saved (else keep
                this optimizer's).

        Returns:
            The checkpoint's dict.

        Raises:
            InputError: if ``torch_load_kwargs`` asks for ``weights_only=False``, the file holds an object other
                than plain data and tensors, or it is not a checkpoint of ``save_checkpoint``.
        """
        return checkpoint.load(self, path=path, module=module, optimizer=optimizer, noise_scheduler=noise_scheduler,
                               grad_clip_scheduler=grad_clip_scheduler,
                               module_load_dict_kwargs=module_load_dict_kwargs, torch_load_kwargs=torch_load_kwargs,
                               data_loader=data_loader, resume_noise=resume_noise)


class _Accountant:
    """``privacy_engine.accountant`` as Opacus scripts use it: ``get_epsilon(delta)``, ``len()``,
    ``state_dict`` / ``load_state_dict`` (the ledger's plain data), ``mechanism()``."""

    def __init__(self, engine: "PrivacyEngine"):
        self.engine = engine

    def get_epsilon(self, delta: float, **kwargs) -> float:
        return self.engine.get_epsilon(delta)

    def __len__(self) -> int:
        return self.engine.ledger.steps

    def mechanism(self) -> str:
        return self.engine.accountant_kind

    def state_dict(self, destination=None) -> dict:
        out = self.engine.state_dict()
        if destination is not None:
            destination.update(out)
            return destination
        return out

    def load_state_dict(self, state_dict: dict) -> None:
        self.engine.load_state_dict(state_dict)


def _per_layer_module(module, bounds, loss_reduction, batch_first):
    """Per-layer clipping's module: the per-layer rules' :class:`PrivateModule` where they serve every trained
    parameter (each parameter's part measured by its layer's rule, as the flat path does), else the whole-model
    vmap of :class:`PerLayerModule`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippingFallbackWarning)      # the rules do not serve it: not taken
        private = PrivateModule(module, loss_reduction=loss_reduction, batch_first=batch_first, bounds=bounds)
    if not private.unsupported:
        return private
    private._rec.remove()
    return PerLayerModule(module, bounds, loss_reduction=loss_reduction, batch_first=batch_first)


def _check_module(module) -> None:
    """Refuse a module with a layer private training refuses (the validator's first error, carrying
    Opacus's meaning: :mod:`.errors`)."""
    errors = ModuleValidator.validate(module)
    if errors:
        raise opacus_flavoured(errors[0])


def _engine_algorithms() -> list:
    from ...mechanisms.registry import REGISTRY

    return [name for name, a in REGISTRY.items() if a.engine]
