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
from ..accountant import PrivacyAccountant

__all__ = ["ReleaseSpec", "Mechanism", "Releases"]


@dataclass(frozen=True)
class ReleaseSpec:
    """One kind of noisy release of a mechanism.

    ``name``: the release's name (and the key under which runs count it); ``noise``: the key of
    the noise level in a calibration (``sigma1``, ``noise_multiplier``...); ``relation``: the
    neighbouring relation of its sensitivity; ``sampling``: ``"full batch"``, ``"Poisson"`` or
    ``"fixed size without replacement"``; ``scale``: ``"clip"`` if the injected std is
    ``level * clip`` (the level is a multiplier of the clip norm), ``"absolute"`` if the std is the
    level itself; ``per_run``: how many of them a full run makes (for the docs and ``describe``)."""

    name: str
    noise: str
    relation: str
    sampling: str
    scale: str
    per_run: str


class Mechanism:
    """Base of the mechanism dataclasses: one run's shape, and the same API for every algorithm.

    * ``accountant(*noise)`` -- the events of the whole run at these noise levels (positional,
      in the order the algorithm names them: ``noise_multiplier``; ``sigma0, sigma``; ...);
    * ``epsilon(delta, *noise, accountant="best", conversion="improved")`` -- eps spent, by default
      the best certified (:meth:`~dpcalib.accountant.PrivacyAccountant.epsilon_report`);
    * ``calibrate(epsilon, delta, method="tight", accountant="pld", **options)`` -- the noise
      levels for a target: ``method`` is ``"paper"`` (the paper's formula, labelled) or
      ``"tight"``; ``accountant`` what tight mode solves on (``"pld"``: the best certified eps,
      the default; ``"rdp"``: RDP alone); ``options`` the algorithm's own (a budget split).

    A subclass defines ``releases`` (a tuple of :class:`ReleaseSpec`), ``sensitivity(release,
    clip=None)``, ``_event(release, z)``, ``accountant`` and ``calibrate``."""

    releases: tuple = ()

    def epsilon(self, delta, *noise, accountant: str = "best", conversion: str = "improved",
                method: str | None = None):
        """eps spent at ``delta`` by these noise levels (an ``EpsilonReport`` naming the method that
        certified it); ``accountant``: as ``PrivacyAccountant.epsilon_report`` (``method=``: its old
        name, deprecated)."""
        return self.accountant(*noise).epsilon_report(delta, accountant, conversion, method=method)

    def release(self, name: str) -> ReleaseSpec:
        for spec in self.releases:
            if spec.name == name:
                return spec
        raise InputError(f"release={name!r} is not allowed for {self.name}: expected one of "
                         f"{[s.name for s in self.releases]}.")

    def sensitivity(self, release: str, clip=None) -> float:    # pragma: no cover - abstract
        raise NotImplementedError

    def _event(self, release: str, z: float):                  # pragma: no cover - abstract
        raise NotImplementedError

    def std(self, release: str, level: float, clip=None) -> float:
        """The per-coordinate std injected for ``release`` at noise level ``level`` (``clip`` may be
        an array of clips, one per batched audit run: the result is then an array too)."""
        if self.release(release).scale == "clip":
            return level * (1.0 if clip is None else (clip if hasattr(clip, "shape") else float(clip)))
        return float(level)

    def noise_multiplier(self, release: str, level: float, clip=None) -> float:
        """``std / sensitivity``: what the accountant sees (for ``scale="clip"`` the clip cancels)."""
        return self.std(release, level, clip) / self.sensitivity(release, clip)

    def level(self, release: str, multiplier: float, clip=None) -> float:
        """The noise level whose multiplier is ``multiplier`` (the inverse of :meth:`noise_multiplier`)."""
        return multiplier * self.sensitivity(release, clip) / self.std(release, 1.0, clip)

    def events(self, noise: Mapping, counts: Mapping, clip=None) -> list:
        """``[(event, count), ...]`` of a run that made ``counts[name]`` releases of each kind at the
        noise levels ``noise`` (a mapping level key -> value).  Releases not made are skipped."""
        out = []
        for spec in self.releases:
            k = int(counts.get(spec.name, 0))
            if k:
                level = noise.get(spec.noise)
                if level is None or not (isinstance(level, (int, float)) and math.isfinite(level)):
                    raise InputError(f"noise is not allowed: it has no finite {spec.noise!r} for the release "
                                     f"{spec.name!r} (got {dict(noise)}).")
                out.append((self._event(spec.name, self.noise_multiplier(spec.name, float(level), clip)), k))
        return out

    def _accountant_of(self, noise: Mapping, counts: Mapping, clip=None, **kwargs) -> PrivacyAccountant:
        acc = PrivacyAccountant(**kwargs)
        for ev, k in self.events(noise, counts, clip):
            acc.compose(ev, k)
        return acc


#: the earlier name of :class:`Mechanism`
Releases = Mechanism
