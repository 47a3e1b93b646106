"""What a mechanism releases and what each release costs: the one owner of sensitivities, noise
multipliers and events.

Each mechanism declares its releases (:class:`ReleaseSpec`: name, the noise level that drives
it, neighbouring relation, sampling scheme, how the std follows from the level) and the L2
sensitivity rule of each (``sensitivity``).  From these two facts alone it derives the injected
std, the noise multiplier ``std / sensitivity`` and the privacy events of a run that made a given
number of each release.  The calibrations (``accountant``/``epsilon``/``calibrate``) and the
reference optimizers (the std they inject, the sensitivity they claim, the epsilon they report as
spent) all go through these methods, so that changing a sensitivity rule in one place changes all
of them (tests/test_releases.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from ..accountant.validation import InputError
from ..accountant import ACCOUNTANTS, PrivacyAccountant

from .search import smallest_scale

__all__ = []



class PerLayerClip(tuple):
    """Per-layer clip bounds ``(C_1, ..., C_K)``: each record's gradient of parameter ``k`` is clipped to
    ``C_k`` on its own (Opacus's ``clipping="per_layer"``, McMahan et al., ICLR 2018, Sec. 3).  The record's
    whole vector then has norm at most ``||(C_1, ..., C_K)||_2``, so that norm is the sum's L2 sensitivity
    under add/remove: ``float(clip)`` is it (rounded up by one ulp, never below the true norm), and every
    ``sensitivity`` / ``std`` rule that takes a clip takes a :class:`PerLayerClip` as that number.

    Args:
        bounds: finite numbers > 0, one per trained parameter, in the module's order.

    Raises:
        InputError: an empty list, or a bound that is not a finite number > 0.
    """

    def __new__(cls, bounds):
        try:
            vals = [float(b) for b in bounds]
        except (TypeError, ValueError):
            raise InputError(f"max_grad_norm={bounds!r} is not allowed: expected a list of finite numbers > 0, one "
                             "per trained parameter.") from None
        bad = [b for b in vals if not (b > 0) or math.isinf(b)]
        if not vals or bad:
            raise InputError(f"max_grad_norm={list(bounds)!r} is not allowed: expected a non-empty list of finite "
                             "numbers > 0, one per trained parameter.")
        return super().__new__(cls, vals)

    @property
    def norm(self) -> float:
        """``||(C_k)||_2``, one ulp above the rounded value (an upper bound on the exact norm)."""
        return math.nextafter(math.hypot(*self), math.inf)

    def __float__(self) -> float:
        return self.norm

    def scaled(self, factor: float) -> "PerLayerClip":
        """Every bound times ``factor`` (a grad-clip scheduler moving the whole vector).

        Args:
            factor: the multiplier of every bound, > 0.

        Returns:
            A new :class:`PerLayerClip` with the scaled bounds.
        """
        return PerLayerClip(b * float(factor) for b in self)


@dataclass(frozen=True)
class ReleaseSpec:
    """One kind of noisy release of a mechanism.

    Attributes:
        name: the release's name (and the key under which runs count it).
        noise: the key of the noise level in a calibration (``sigma1``, ``noise_multiplier``...).
        relation: the neighbouring relation of its sensitivity.
        sampling: ``"full batch"``, ``"Poisson"`` or ``"fixed size without replacement"``.
        scale: ``"clip"`` if the injected std is ``level * clip`` (the level is a multiplier of
            the clip norm), ``"absolute"`` if the std is the level itself.
        per_run: how many of them a full run makes, in words (for the docs and ``describe``).
    """

    name: str
    noise: str
    relation: str
    sampling: str
    scale: str
    per_run: str


def check_accountant(accountant: str) -> str:
    """The route a calibration takes internally: ``"pld"`` (the best certified eps) or ``"rdp"``; a
    calibration on ``"pld"`` or ``"gdp"`` alone takes the best route and is then met by
    :func:`meets_accountant`.

    Args:
        accountant: one of :data:`~dpcalib.accountant.ACCOUNTANTS`.

    Returns:
        ``"pld"`` for ``"best"``, ``"pld"`` and ``"gdp"``; ``"rdp"`` for ``"rdp"``.

    Raises:
      InputError: ``accountant`` is not one of :data:`~dpcalib.accountant.ACCOUNTANTS`.
    """
    if accountant in ("best", "pld", "gdp"):
        return "pld"
    if accountant != "rdp":
        raise InputError(f"accountant={accountant!r} is not allowed: expected one of 'best' (the best certified "
                         "eps: exact GDP, the privacy-loss-distribution upper bound or RDP), 'pld' (the PLD upper "
                         "bound alone), 'rdp' (RDP alone) or 'gdp' (exact GDP, full-batch runs).")
    return accountant


def meets_accountant(calibrate):
    """Wrap a mechanism's ``calibrate`` so that ``accountant=X`` means what it means in every eps query:
    the smallest noise (same split) whose eps under ``X`` alone meets the target.

    ``"best"`` is the calibration itself.  For ``"pld"``, ``"rdp"`` and ``"gdp"`` the calibration's noise
    (``"best"``'s or RDP's route) is kept when ``X``'s eps of it meets the target, else every noise level
    is scaled up by the smallest common factor that makes it so (eps is non-increasing in each level, so
    the split keeps its shares and the answer stays on the feasible side).  ``"gdp"`` on a run that is not
    full-batch Gaussians is refused by the accountant in one line.  ``method="paper"`` is the paper's
    calibration and ignores ``accountant``.

    Args:
        calibrate: the mechanism's ``calibrate`` method (returns a :class:`CalibrationReport`).

    Returns:
        The wrapped method; it raises ``InputError`` for an ``accountant`` not in
        :data:`~dpcalib.accountant.ACCOUNTANTS`.
    """
    import dataclasses
    import functools

    @functools.wraps(calibrate)
    def wrapper(self, epsilon, delta, method="tight", accountant="best", *args, **kwargs):
        if accountant not in ACCOUNTANTS:
            check_accountant(accountant)
        rep = calibrate(self, epsilon, delta, method, accountant, *args, **kwargs)
        if accountant == "best" or rep.method != "tight":
            return rep
        names = [k for k, v in rep.noise.items() if v is not None]

        def eps_of(scale):
            return self.epsilon(delta, **{k: scale * rep.noise[k] for k in names}, accountant=accountant).epsilon

        own = eps_of(1.0)
        scale = 1.0 if own <= rep.epsilon else smallest_scale(eps_of, rep.epsilon, start=1.0, rtol=1e-9)
        noise = {k: (scale * v if v is not None else None) for k, v in rep.noise.items()}
        named = {k: noise[k] for k in names}
        best = self.epsilon(delta, **named, accountant="best").epsilon
        accounting = rep.accounting if scale == 1.0 else \
            f"{accountant} alone: the noise of {rep.accounting} raised x{scale:.9g} until {accountant} alone meets it"
        lower = rep.epsilon_lower
        if scale != 1.0 and lower is not None:
            lower = self.epsilon_bracket(delta, *[named[k] for k in names]).lower
        return dataclasses.replace(rep, noise=noise, achieved_epsilon=eps_of(scale), certified_epsilon=best,
                                   accounting=accounting, order=None if accountant != "rdp" else rep.order,
                                   epsilon_lower=lower)

    return wrapper



class Mechanism:
    """Base of the mechanism dataclasses: one run's shape, and the same API for every algorithm.

    * ``accountant(*noise)`` -- the events of the whole run at these noise levels (positional,
      in the order the algorithm names them: ``noise_multiplier``; ``sigma0, sigma``; ...);
    * ``epsilon(delta, *noise, accountant="best", conversion="improved")`` -- eps spent, by default
      the best certified (:meth:`~dpcalib.accountant.PrivacyAccountant.epsilon_report`);
    * ``calibrate(epsilon, delta, method="tight", accountant="best", **options)`` -- the noise
      levels for a target: ``method`` is ``"paper"`` (the paper's formula, labelled) or
      ``"tight"``; ``accountant`` what tight mode solves on (``"pld"``: the best certified eps,
      the default; ``"rdp"``: RDP alone); ``options`` the algorithm's own (a budget split).

    A subclass defines ``releases`` (a tuple of :class:`ReleaseSpec`), ``sensitivity(release,
    clip=None)``, ``_event(release, z)``, ``accountant`` and ``calibrate``; one that ``dpcalib train``
    or the engine builds from a run's shape also ``from_run(run)`` (:class:`~dpcalib.mechanisms.shape.Run`)."""

    releases: tuple = ()
    #: what one record is (the report's assumptions)
    record = "one training example"
    #: how the accounting reads a run given by its shape, in one sentence (the ``run`` line of the command line);
    #: None where the run is given by the numbers its accounting takes
    shape_note: str | None = None

    @classmethod
    def noise_names(cls) -> tuple:
        """The names of the noise levels, in the order :meth:`accountant` takes them.

        Returns:
            A tuple of noise-level names (``noise_levels`` where the class declares it, else the
            positional parameters of :meth:`accountant`).
        """
        import inspect

        names = getattr(cls, "noise_levels", None)
        if isinstance(names, tuple):
            return names
        return tuple(p.name for p in list(inspect.signature(cls.accountant).parameters.values())[1:]
                     if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD)

    def noise_values(self, noise: tuple, named: Mapping) -> tuple:
        """The noise levels in :meth:`noise_names` order from positional values and/or names
        (``mech.epsilon(delta, **report.noise)``): a name the algorithm does not use is refused
        unless its value is None (a calibration's report lists e.g. ``sigma4: None``).

        Args:
            noise: noise levels given by position, in :meth:`noise_names` order.
            named: noise levels given by name (name -> value; None means not given).

        Returns:
            The tuple of noise levels in :meth:`noise_names` order (None where not given and optional).

        Raises:
            InputError: if a name is not one of the algorithm's noise levels (with a value not None),
                a level is given both by position and by name, or a required level is missing.
        """
        names = self.noise_names()
        if not named:
            return tuple(noise)
        extra = [k for k, val in named.items() if k not in names and val is not None]
        if extra:
            raise InputError(f"{extra[0]}={named[extra[0]]!r} is not allowed for {self.name}: expected its noise "
                             f"levels {', '.join(names)}.")
        values = list(noise) + [named.get(n) for n in names[len(noise):]]
        twice = [n for n in names[:len(noise)] if named.get(n) is not None]
        if twice:
            raise InputError(f"{twice[0]} is given twice (by position and by name).")
        required = self.required_noise()
        missing = [n for n, val in zip(names, values) if val is None and n in required]
        if missing:
            raise InputError(f"{missing[0]} is required for {self.name} (its noise levels: {', '.join(names)}).")
        return tuple(values)

    def required_noise(self) -> tuple:
        """The noise levels that must be given (those without a default in :meth:`accountant`).

        Returns:
            A tuple of noise-level names, in :meth:`noise_names` order.
        """
        import inspect

        params = inspect.signature(self.accountant).parameters
        return tuple(n for n in self.noise_names() if n in params and params[n].default is inspect.Parameter.empty)

    @property
    def sensitivities(self) -> tuple:
        """The L2 sensitivities of the releases, in :attr:`releases` order (``(Delta_0, Delta)`` for
        a first release and the later ones: DiceSGD, DP-SRM)."""
        return tuple(self.sensitivity(s.name) for s in self.releases)

    def participations(self, release: str, count: int) -> int:
        """How many of ``count`` releases one record can take part in (all of them, unless the
        sampling bounds it: shuffled batches put a record in one batch per epoch).

        Args:
            release: the release's name.
            count: how many releases of that kind the run made, >= 0.

        Returns:
            The number of those releases one record takes part in (here ``count``).
        """
        return count

    def epsilon_lower(self, delta, *noise):
        """A lower bound on the true eps of this mechanism where the accountant's bracket does not
        give one (shuffled batches); None: the bracket's lower end applies.

        Args:
            delta: the delta at which eps is bounded, in (0, 1).
            *noise: the noise levels, in :meth:`noise_names` order.

        Returns:
            A lower bound on eps, or None (the base class: the accountant's bracket applies).
        """
        return None

    def epsilon_bracket(self, delta, *noise):
        """``EpsilonBracket`` of eps spent at ``delta``: the certified upper end of the accountant
        (best of GDP / PLD / RDP) and a lower bound on the truth.

        Args:
            delta: the delta at which eps is bracketed, in (0, 1).
            *noise: the noise levels, in :meth:`noise_names` order.

        Returns:
            An ``EpsilonBracket`` (lower and certified upper end of eps).
        """
        return self.accountant(*noise).epsilon_bracket(delta)

    def assumptions(self, delta) -> dict:
        """The conditions of this mechanism's guarantee, in words (the report's ``assumptions``).

        Args:
            delta: the delta of the guarantee, in (0, 1).

        Returns:
            A dict of condition name (``neighbouring_relation``, ``sampling``, ``record``, ``steps``,
            ``delta``, ``attacker``) -> text.
        """
        from ..accountant.report import delta_text, relation_text

        rels = list(dict.fromkeys(s.relation for s in self.releases))
        made = self.release_counts()
        runs = {s.name: f"{s.per_run} = {made.get(s.name, 0)} here" for s in self.releases}
        return {"neighbouring_relation": "; ".join(relation_text(r) for r in rels),
                "sampling": "; ".join(f"{s.name}: {s.sampling}" for s in self.releases),
                "record": self.record,
                "steps": ", ".join(f"{s.name}: {runs[s.name]}" for s in self.releases) + " (this run's shape: "
                         + ", ".join(f"{k}={_shown(v)}" for k, v in self.shape().items()) + ")",
                "delta": delta_text(delta),
                "attacker": "sees every released value (or anything computed from them) and knows every other "
                            "record: the worst case, so real attacks usually do worse"}

    def shape(self) -> dict:
        """The run's shape: every dataclass field of the mechanism that is not None.

        Returns:
            A dict field name -> value.
        """
        import dataclasses

        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}

    def report(self, delta, *noise, deltas=None, fprs=None, progress=None, **named):
        """The :class:`~dpcalib.accountant.PrivacyReport` of a run at these noise levels (positional
        or by name, or a :class:`CalibrationReport`'s levels, passed as the one argument after
        ``delta``).  ``progress``: None or ``progress(done, total, part)``, told after each part
        (:func:`~dpcalib.accountant.report.privacy_report`).

        Args:
            delta: the headline delta, in (0, 1).
            *noise: the noise levels in :meth:`noise_names` order, or a single
                :class:`CalibrationReport`.
            deltas: further deltas to report eps at (None: the report's default).
            fprs: false-positive rates of the trade-off table (None: ``DEFAULT_FPRS``).
            progress: None or ``progress(done, total, part)``.
            **named: noise levels by name.

        Returns:
            A :class:`~dpcalib.accountant.PrivacyReport`.
        """
        from ..accountant.report import DEFAULT_FPRS, privacy_report

        if len(noise) == 1 and hasattr(noise[0], "noise") and isinstance(noise[0].noise, dict):
            noise = tuple(noise[0].noise[n] for n in self.noise_names())
        noise = self.noise_values(noise, named)
        return privacy_report(self.accountant(*noise), delta, deltas, DEFAULT_FPRS if fprs is None else fprs,
                              self.assumptions(delta), lambda d: self.epsilon_bracket(d, *noise),
                              self.report_notes(delta, *noise), progress=progress)

    def report_notes(self, delta, *noise) -> tuple:
        """Notes added to the report for these noise levels (none in the base class).

        Args:
            delta: the headline delta, in (0, 1).
            *noise: the noise levels, in :meth:`noise_names` order.

        Returns:
            A tuple of note lines (empty here).
        """
        return ()

    def epsilon(self, delta, *noise, accountant: str = "best", conversion: str = "improved", **named):
        """eps spent at ``delta`` by these noise levels, positional or by name (an ``EpsilonReport``
        naming the method that certified it); ``accountant``: as
        ``PrivacyAccountant.epsilon_report``.

        Args:
            delta: the delta at which eps is computed, in (0, 1).
            *noise: the noise levels, in :meth:`noise_names` order.
            accountant: ``"best"``, ``"auto"``, ``"gdp"``, ``"pld"`` or ``"rdp"``, as
                ``PrivacyAccountant.epsilon_report`` takes it.
            conversion: the RDP-to-(eps, delta) conversion (``"improved"`` by default).
            **named: noise levels by name.

        Returns:
            An ``EpsilonReport`` (eps and the method that certified it).
        """
        noise = self.noise_values(noise, named)
        rep = self.accountant(*noise).epsilon_report(delta, accountant, conversion)
        if rep.method == "gdp" and self.epsilon_lower(delta, *noise) is not None:
            # the GDP pair's eps is this mechanism's certified upper end, not its exact eps (shuffled
            # batches): the report carries the mechanism's own bracket
            from ..accountant import EpsilonReport

            return EpsilonReport.from_bracket(self.epsilon_bracket(delta, *noise))
        return rep

    def release(self, name: str) -> ReleaseSpec:
        """The :class:`ReleaseSpec` named ``name``.

        Args:
            name: a release name of :attr:`releases`.

        Returns:
            The matching :class:`ReleaseSpec`.

        Raises:
            InputError: if the mechanism has no release of that name.
        """
        for spec in self.releases:
            if spec.name == name:
                return spec
        raise InputError(f"release={name!r} is not allowed for {self.name}: expected one of "
                         f"{[s.name for s in self.releases]}.")

    def sensitivity(self, release: str, clip=None) -> float:    # pragma: no cover - abstract
        """The L2 sensitivity of one ``release`` (abstract: each mechanism defines its rule).

        Args:
            release: the release's name.
            clip: the clip norm (a number or a :class:`PerLayerClip`); None where the rule needs none.

        Returns:
            The L2 sensitivity, > 0.
        """
        raise NotImplementedError

    def _event(self, release: str, z: float):                  # pragma: no cover - abstract
        raise NotImplementedError

    def std(self, release: str, level: float, clip=None) -> float:
        """The per-coordinate std injected for ``release`` at noise level ``level`` (``clip`` may be
        an array of clips, one per batched audit run: the result is then an array too).

        Args:
            release: the release's name.
            level: the noise level (a multiplier of the clip for ``scale="clip"``, else the std).
            clip: the clip norm, an array of clips, or None (taken as 1).

        Returns:
            The std (an array where ``clip`` is an array).
        """
        if self.release(release).scale == "clip":
            return level * (1.0 if clip is None else (clip if hasattr(clip, "shape") else float(clip)))
        return float(level)

    def noise_multiplier(self, release: str, level: float, clip=None) -> float:
        """``std / sensitivity``: what the accountant sees (for ``scale="clip"`` the clip cancels).

        Args:
            release: the release's name.
            level: the noise level.
            clip: the clip norm, or None.

        Returns:
            The noise multiplier, std / L2 sensitivity.
        """
        return self.std(release, level, clip) / self.sensitivity(release, clip)

    def level(self, release: str, multiplier: float, clip=None) -> float:
        """The noise level whose multiplier is ``multiplier`` (the inverse of :meth:`noise_multiplier`).

        Args:
            release: the release's name.
            multiplier: the noise multiplier, std / L2 sensitivity.
            clip: the clip norm, or None.

        Returns:
            The noise level that gives ``multiplier``.
        """
        return multiplier * self.sensitivity(release, clip) / self.std(release, 1.0, clip)

    def events(self, noise: Mapping, counts: Mapping, clip=None) -> list:
        """``[(event, count), ...]`` of a run that made ``counts[name]`` releases of each kind at the
        noise levels ``noise`` (a mapping level key -> value).  Releases not made are skipped.

        Args:
            noise: noise-level key -> value.
            counts: release name -> number of releases made.
            clip: the clip norm, or None.

        Returns:
            A list of ``(event, count)`` pairs, one per release kind made, the count reduced to the
            record's participations.

        Raises:
            InputError: if a release was made but ``noise`` has no finite level for it.
        """
        out = []
        for spec in self.releases:
            k = int(counts.get(spec.name, 0))
            if k:
                level = noise.get(spec.noise)
                if level is None or not (isinstance(level, (int, float)) and math.isfinite(level)):
                    raise InputError(f"noise is not allowed: it has no finite {spec.noise!r} for the release "
                                     f"{spec.name!r} (got {dict(noise)}).")
                k = self.participations(spec.name, k)
                out.append((self._event(spec.name, self.noise_multiplier(spec.name, float(level), clip)), k))
        return out

    def release_counts(self) -> dict:
        """``name -> count``: how many of each release a whole run makes (0 for a release the run
        does not make), declared by each mechanism.  :meth:`accountant`, the engine's ledger and the
        report's assumptions read it; nothing else counts releases.

        Returns:
          A dict from each release name of :attr:`releases` to its count in a whole run.
        """
        raise NotImplementedError(f"{type(self).__name__} declares no release_counts()")

    def _accountant_of(self, noise: Mapping, clip=None, **kwargs) -> PrivacyAccountant:
        """The accountant of a whole run (:meth:`release_counts`) at the noise levels ``noise``."""
        acc = PrivacyAccountant(**kwargs)
        for ev, k in self.events(noise, self.release_counts(), clip):
            acc.compose(ev, k)
        return acc


def _shown(value) -> str:
    """A shape value in words: an unbounded parameter (an infinite default) is 'unbounded'."""
    return "unbounded" if isinstance(value, float) and math.isinf(value) else str(value)
