"""The noise of every release and its record: :class:`NoiseSource` adds Gaussian noise to an update's
queries from the run's dedicated noise stream (the run draws nothing else from it), and keeps a
:class:`Release` for each release when asked.  The stream is a secret: fresh entropy unless the run is
seeded or given its own generator, a ChaCha20 generator and a floating-point-safe sampler in secure
mode (:func:`~dpcalib.optim.randomness.gaussian_release`); its state travels in a checkpoint only where
a resume may replay it (:attr:`NoiseSource.replayable`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch

from ...accountant.validation import InputError
from ..randomness import gaussian_release, is_secure, note_restored, standard_normal

__all__ = ["Release", "NoiseSource", "split_public"]


@dataclass
class Release:
    """One noisy release as the algorithm performs it.

    ``std`` is the per-coordinate noise std actually requested, ``sensitivity`` the L2
    sensitivity the algorithm claims for the noiseless query (``None``: no claim, e.g. AdaD2P),
    ``relation`` the neighbouring relation of that claim, ``noise`` the added noise (float64, CPU)
    when noise recording is on.  ``std / sensitivity`` is the noise multiplier.  With
    ``record_values`` (audits) also ``value``, the noiseless query (float64, CPU), and
    ``released`` = value + noise exactly as returned to the algorithm.  A query of the form
    "fresh data-dependent term + public state" (DIFF2's ``+ v~_{r-1}``, DP-SRM's ``(1 - gamma) v^{t-1}``)
    also records ``fresh``, the term before the public state was added: the claimed sensitivity
    bounds its move, and a check can measure that move without the rounding of the public part.

    Attributes:
        round: the round (1-based) in which the release was made.
        name: the release's name within the algorithm (e.g. ``"clipped gradient sum"``).
        std: per-coordinate noise std requested, >= 0.
        sensitivity: claimed L2 sensitivity of the noiseless query, or None (no claim).
        relation: the neighbouring relation of the claim (the mechanism's ``release``).
        noise: the added noise (float64, CPU), or None when noise recording is off.
        value: the noiseless query (float64, CPU), or None without ``record_values``.
        released: value + noise as returned to the algorithm, or None without ``record_values``.
        fresh: the data-dependent term before a public term was added (float64, CPU), or None.
    """

    round: int
    name: str
    std: float
    sensitivity: float | None
    relation: str
    noise: torch.Tensor | None = None
    value: torch.Tensor | None = None
    released: torch.Tensor | None = None
    fresh: torch.Tensor | None = None


def split_public(value, public):
    """``(fresh term or None, the whole query)`` of a query ``value + public``.

    Args:
        value: the data-dependent term of the query (a tensor).
        public: a data-independent term added to it, or None.

    Returns:
        ``(None, value)`` without ``public``; otherwise ``(value, value + public)``.
    """
    return (None, value) if public is None else (value, value + public)


def _checked(value, std, public):
    """:func:`split_public` of a release whose ``std`` is refused unless a number >= 0."""
    if std < 0 or math.isnan(std):
        raise InputError(f"std={std!r} is not allowed: expected a number >= 0.")
    return split_public(value, public)


class NoiseSource:
    """Adds Gaussian noise to the algorithm's queries from a dedicated generator, and optionally
    records every release (see :class:`Release`).

    ``source``: the generator (a ``torch.Generator``, or the :class:`~dpcalib.optim.randomness.SecureGenerator`
    of a secure run, whose noise :func:`~dpcalib.optim.randomness.gaussian_release` draws) or an
    integer seed of a new ``torch.Generator`` on ``device``.

    Args:
        source: a ``torch.Generator``, a ``SecureGenerator``, or an integer seed of a new
            ``torch.Generator`` on ``device``.
        device: the device of the noise (and of a generator built from a seed).
        dtype: the floating dtype of the noise.
        record: keep a :class:`Release` for every release in ``releases``.
        record_noise: with recording on, also keep each release's noise.
        record_values: keep the noiseless query and the released value too (implies ``record``).
    """

    def __init__(self, source, device, dtype, record: bool = False, record_noise: bool = True,
                 record_values: bool = False):
        self.generator = _generator(source, device)
        self.device, self.dtype = device, dtype
        self.record = bool(record) or bool(record_values)
        self.record_noise = bool(record_noise)
        self.record_values = bool(record_values)
        self.releases: list[Release] = []
        self.row_generators: list | None = None
        #: a checkpoint keeps the generators' states (True: a seeded run or the user's generator; the run sets
        #: False for fresh entropy, which a resume never replays)
        self.replayable = True

    def use_rows(self, sources) -> None:
        """One generator per row of :meth:`privatize_rows` (per D2P node), so that node i's noise is
        the same stream whether the nodes are simulated together or run as separate processes
        (``sources``: generators, or integer seeds of new ``torch.Generator`` s).

        Args:
            sources: one generator or integer seed per row (node).
        """
        self.row_generators = [_generator(s, self.device) for s in sources]

    def standard(self, shape, generator=None) -> torch.Tensor:
        """Standard normal draws (every noise draw of a torch.Generator goes through here; a check
        that plants mis-scaled noise overrides this).

        Args:
            shape: the shape of the draw.
            generator: the generator to draw from; None for the source's own generator.

        Returns:
            A tensor of i.i.d. N(0, 1) draws on the source's device and dtype.
        """
        g = self.generator if generator is None else generator
        return standard_normal(g, shape, device=self.device, dtype=self.dtype)

    def _noisy(self, value: torch.Tensor, std: float, generator) -> tuple:
        """``(value + noise, noise or None)`` from ``generator``: a secure generator's release is drawn
        with the value (on the noise grid, see :mod:`dpcalib.optim.randomness.secure`)."""
        if is_secure(generator):
            out = gaussian_release(generator, value, std)
            return out, (out.to(torch.float64) - value.to(torch.float64) if self.record else None)
        z = self.standard(value.shape, generator)
        if not self.record:     # nothing keeps the noise: value + std z into its buffer, in one pass
            return torch.add(value, z, alpha=std, out=z), None
        noise = z.mul_(std)
        return value + noise, noise

    def privatize(self, value: torch.Tensor, std: float, *, round: int, name: str, sensitivity, relation: str,
                  public: torch.Tensor | None = None):
        """``value (+ public) + N(0, std^2 I)`` (no draw when std = 0): one release.  ``public``: a
        data-independent term of the query (see :class:`Release`).

        Args:
            value: the noiseless query.
            std: per-coordinate noise std, >= 0.
            round: the round of the release (for the record).
            name: the release's name (for the record).
            sensitivity: the claimed L2 sensitivity, or None (for the record).
            relation: the neighbouring relation of the claim (for the record).
            public: a data-independent term added to ``value`` before the noise, or None.

        Returns:
            The released tensor ``value (+ public) + noise``.

        Raises:
            InputError: if ``std`` is negative or NaN.
        """
        fresh, value = _checked(value, std, public)
        if std == 0:
            out, noise = value + torch.zeros_like(value), torch.zeros_like(value)
        else:
            out, noise = self._noisy(value, std, self.generator)
        if self.record:
            self._log(round, name, std, sensitivity, relation, noise, value, out, fresh)
        return out

    def privatize_row(self, i: int, value: torch.Tensor, std: float, *, round: int, name: str, sensitivity,
                      relation: str, public: torch.Tensor | None = None):
        """``value (+ public) + N(0, std^2 I)`` from row i's generator (a DIFF2-BVR client's local noise).

        Args:
            i: the row (node / client) whose generator draws the noise; :meth:`use_rows` must have been called.
            value, std, round, name, sensitivity, relation, public: as :meth:`privatize`.

        Returns:
            The released tensor ``value (+ public) + noise``.

        Raises:
            InputError: if ``std`` is negative or NaN.
        """
        fresh, value = _checked(value, std, public)
        g = self.row_generators[i]
        if std == 0:
            noise = torch.zeros_like(value)
            out = value + noise
        elif is_secure(g):
            out = gaussian_release(g, value, std)
            noise = out.to(torch.float64) - value.to(torch.float64)
        else:
            noise = std * self.standard(value.shape, g)
            out = value + noise
        self._log(round, name, std, sensitivity, relation, noise, value, out, fresh)
        return out

    def privatize_rows(self, values: torch.Tensor, stds: torch.Tensor, *, round: int, names, sensitivity,
                       relation: str):
        """Row i of ``values`` plus N(0, stds[i]^2 I), independently (one release per row: D2P nodes).

        Args:
            values: the noiseless queries, one per row, shape (rows, ...).
            stds: per-row noise std, shape (rows,), each >= 0 (a zero std adds no noise).
            round: the round of the releases (for the records).
            names: one release name per row (for the records).
            sensitivity: the claimed L2 sensitivity of each row, or None (for the records).
            relation: the neighbouring relation of the claim (for the records).

        Returns:
            The released rows, same shape as ``values``.

        Raises:
            InputError: if row generators are set and their number is not the number of rows.
        """
        rows = values.shape[0]
        gens = self.row_generators
        if gens is not None and len(gens) != rows:
            raise InputError(f"values has {rows} rows, which is not allowed: {len(gens)} row generators were set.")
        if is_secure(self.generator if gens is None else gens[0]):
            out = torch.stack([values[i] if float(stds[i]) == 0.0 else gaussian_release(
                self.generator if gens is None else gens[i], values[i], float(stds[i])) for i in range(rows)])
            noise = out.to(torch.float64) - values.to(torch.float64)
        else:
            z = self.standard(values.shape) if gens is None else torch.stack(
                [self.standard(values.shape[1:], g) for g in gens])
            noise = stds.reshape(rows, 1).to(self.dtype) * z
            out = values + noise
        for i in range(rows):
            self._log(round, names[i], float(stds[i]), sensitivity, relation, noise[i], values[i], out[i])
        return out

    def _log(self, round, name, std, sensitivity, relation, noise, value, out, fresh=None):
        if self.record:
            cpu = lambda t: t.detach().to("cpu", torch.float64).clone()  # noqa: E731
            self.releases.append(Release(
                round, name, float(std), sensitivity, relation, cpu(noise) if self.record_noise else None,
                cpu(value) if self.record_values else None,
                out.detach().clone() if self.record_values else None,
                cpu(fresh) if self.record_values and fresh is not None else None))

    def state_dict(self) -> dict:
        """Plain tensors, numbers, strings, lists and dicts only (``torch.load(weights_only=True)``).

        The generators' states are kept only when :attr:`replayable` (a seeded run, or the user's own
        generator): a run of fresh entropy resumes with fresh entropy, so that no continuation of a
        checkpoint -- a resume, or two forks of one file -- repeats a noise draw of another.

        Returns:
            A dict with the generator state (None when not replayable), whether it is a secure generator,
            the recorded releases and the row generators' states (or None).
        """
        keep = self.replayable
        rows = None if self.row_generators is None or not keep else [g.get_state() for g in self.row_generators]
        return {"generator": self.generator.get_state() if keep else None, "secure": is_secure(self.generator),
                "releases": [{f.name: getattr(r, f.name) for f in fields(Release)} for r in self.releases],
                "rows": rows}

    def load_state_dict(self, state: dict) -> None:
        """Restore the recorded releases from :meth:`state_dict`'s output, and the generators' states when
        the saved run kept them (a replayable run; a second load of one state warns: the two continuations
        share their noise, :func:`~dpcalib.optim.randomness.note_restored`).

        Args:
            state: a dict as returned by :meth:`state_dict`.

        Raises:
            InputError: if the state was saved in the other mode (secure / plain), or by a replayable run into
                one of fresh entropy or the reverse.
        """
        secure = bool(state.get("secure", False))
        if state.get("generator") is not None and "secure" not in state:
            secure = state["generator"].numel() < 200          # written before the mode was saved: by its size
        if secure != is_secure(self.generator):
            raise InputError(f"checkpoint is not allowed: its noise was drawn with secure_mode={secure} and this run "
                             f"has secure_mode={not secure}; resume with the mode the run was saved with.")
        saved = state.get("generator")
        if (saved is not None) != self.replayable:
            raise InputError("checkpoint is not allowed: it was saved by a run " + (
                "with a seed (or its own noise generator) and this run has none" if saved is not None else
                "without a seed, whose noise stream is never restored, and this run has one") +
                "; resume with the same seed= (or none) as the saved run.")
        self.releases = [Release(**r) for r in state["releases"]]
        if saved is None:
            return
        self.generator.set_state(saved)
        restored = [saved]
        if state.get("rows") is not None:
            for g, st in zip(self.row_generators, state["rows"]):
                g.set_state(st)
                restored.append(st)
        note_restored(restored)


def _generator(source, device):
    """A generator as given, or a new torch.Generator on ``device`` seeded with the integer ``source``."""
    if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
        return torch.Generator(device=device).manual_seed(int(source))
    return source
