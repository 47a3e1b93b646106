"""Privacy events: small frozen descriptions of what a mechanism releases.

Events only describe; :class:`accountant.PrivacyAccountant` analyses.  Every event validates
itself at construction, so an accountant never holds an invalid event.

Noise multipliers are always ``noise std / L2-sensitivity`` of the released vector under the
event's neighbouring relation (replace-one for sampling without replacement, add/remove for
Poisson sampling; a full-batch Gaussian only needs its sensitivity to be the one of the
relation the user reports under).

:class:`Release` (what every event shares: its construction checks and words) is here; the registry of
kinds (:mod:`.kinds`) imports this module, subclasses it and registers the Gaussian kinds first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import special

from .validation import InputError
from . import validation
from .gaussian import gaussian_rdp
from .poisson import poisson_gaussian_rdp
from .subsampling import subsampled_gaussian_rdp_wor

__all__ = ["PoissonSampledGaussianEvent", "never_used_probability", "total_variation_bound"]

REPLACE_ONE = "replace-one"
ADD_REMOVE = "add/remove"


class Release:
    """What every event shares, Gaussian (this module's) or not (:class:`~.kinds.EventKind`): its ``CHECKED``
    fields validated at construction (each replaced by its checked value) and its sentence in the
    privacy report (``WORDS``, formatted with ``count`` and the event ``e``)."""

    #: ``(field, check)`` run at construction, each field replaced by its checked value
    CHECKED = ()
    #: the report's sentence (``str.format`` fields ``count`` and ``e``)
    WORDS = "{count} release(s) of {e!r}"
    #: one of this module's Gaussian kinds (full batch, Poisson, without replacement, balls-in-bins):
    #: the PLD's smooth-loss grid rule and Opacus's PRV column take these only
    gaussian = False

    def __post_init__(self):
        for name, check in self.CHECKED:
            object.__setattr__(self, name, check(getattr(self, name), name))

    def describe(self, count: int) -> str:
        """``count`` of these releases (steps, epochs) in words (the privacy report's assumptions).

        Args:
            count: the number of releases, >= 1.

        Returns:
            The sentence (a str).
        """
        return self.WORDS.format(count=count, e=self)


class _GaussianRelease(Release):
    """What every Gaussian kind shares (beside :class:`Release`'s checks and words): its RDP as
    a float array and its dp-accounting event.  A kind states its own RDP bound (``_rdp``: the
    un-amplified Gaussian one here), its sentence (``WORDS``, formatted with ``count`` and the event
    ``e``), its dp-accounting event (``_dp_event``) and its PLD pairs (``pld_pairs``, named: a kind
    without them is refused by the PLD) with their directions (``both_directions``)."""

    #: the report's sentence for ``count`` releases of the event ``e`` (``str.format`` fields)
    WORDS = ""
    #: the relation the event is analysed under (None: a full-batch Gaussian composes under either)
    neighboring_relation = None
    #: whether the RDP bound holds at integer orders only (the Gaussian's is linear in alpha)
    integer_orders_only = False
    #: the chance that the differing record takes part in the release (:func:`never_used_probability`)
    use_probability = 1.0

    #: ``(field, check)`` in the order they are checked at construction (each field becomes its checked value)
    CHECKED = (("noise_multiplier", validation.positive),)
    #: eps(alpha -> inf): a Gaussian release is not pure DP
    rdp_inf = math.inf
    #: the name of the kind in a ``--events`` JSON file (:mod:`.tree_events`)
    JSON_NAME = None
    #: compose both the add and the remove direction in the PLD (the add/remove sampled kinds)
    both_directions = False
    #: one of this module's Gaussian kinds (:attr:`Release.gaussian`)
    gaussian = True

    def refuses(self, route: str):
        """Why ``route`` cannot certify this release, in one line, or None: RDP and the PLD take every
        Gaussian kind; exact GDP only the full-batch one (:mod:`.kinds`).

        Args:
            route: ``"rdp"``, ``"pld"`` or ``"gdp"``.

        Returns:
            None, or the one-line refusal naming the event (a str).
        """
        if route == "gdp" and type(self) is not GaussianEvent:
            return f"{self!r}: exact Gaussian DP holds only for full-batch Gaussian releases (this one is sampled)"
        return None

    def _rdp(self, orders):
        return gaussian_rdp(orders, self.noise_multiplier)

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        """The release's RDP at ``orders`` (the kind's bound: see the class).

        Args:
            orders: the Rényi order(s), each in (1, inf).

        Returns:
            The RDP value(s) as a float array, shaped like ``orders``.
        """
        return np.asarray(self._rdp(orders), dtype=float)

    def to_dp_event(self):
        """The dp-accounting event of this release (imports dp_accounting; the kind's own, see the class).

        Returns:
            A ``dp_accounting`` event (a ``GaussianDpEvent``, alone or inside the kind's sampling event).

        Raises:
            ImportError: if dp-accounting is not installed.
        """
        import dp_accounting

        return self._dp_event(dp_accounting)


@dataclass(frozen=True)
class GaussianEvent(_GaussianRelease):
    """One full-batch Gaussian release, noise multiplier ``z`` (DIFF2 Lemma B.6).

    Attributes:
        noise_multiplier: ``z``, noise std / L2 sensitivity, in (0, inf).

    Raises:
        InputError: if ``noise_multiplier`` is out of range.
    """

    noise_multiplier: float

    # either relation, real orders, always used, RDP alpha / (2 z^2) (DIFF2 Lemma B.6): the base class's
    WORDS = "{count} full-batch Gaussian release(s), noise multiplier {e.noise_multiplier:g}"

    def pld_pairs(self, direction: str) -> tuple:
        """The release's dominating pair for the PLD, named (this module sits below the PLD chain, which
        builds it: :func:`~.pld.pairs.dominating_pairs`): the full-batch Gaussian pair ``(N(1, z^2),
        N(0, z^2))`` (DIFF2 Lemma B.6's release).

        Args:
            direction: ``"remove"`` or ``"add"`` (one pair serves both here).

        Returns:
            A tuple of ``(name, z, q)``, each a pair of :data:`~.pld.pairs.PAIRS`.
        """
        return (("gauss", self.noise_multiplier, 1.0),)

    def _dp_event(self, dp_accounting):
        return dp_accounting.GaussianDpEvent(self.noise_multiplier)


@dataclass(frozen=True)
class WORSampledGaussianEvent(_GaussianRelease):
    """Gaussian release on a subsample of fixed size drawn WITHOUT replacement (replace-one).

    ``sampling_ratio = b / n``.  ``bound`` selects WBK19 Thm 27 (default, Gaussian-specific) or
    Thm 9 (= DIFF2 Lemma B.7).  The accountant also caps the result by the un-subsampled
    Gaussian RDP ``alpha / (2 z^2)`` (subsampling never hurts: joint convexity of
    ``exp((alpha-1) D_alpha)`` over the coupling of the two subsamples).
    Only integer orders are used (Thm 9 and Thm 27 are stated for integer alpha).

    Attributes:
        sampling_ratio: ``gamma = b / n``, in [0, 1].
        noise_multiplier: ``z``, noise std / L2 sensitivity (replace-one), in (0, inf).
        bound: ``"thm27"`` or ``"thm9"``.
        sample_size: ``b``, an integer in [0, n], or None (given together with ``dataset_size``).
        dataset_size: ``n``, an integer >= 1, or None.

    Raises:
        InputError: if an argument is out of range, ``bound`` is unknown, only one of the sizes is
            given, or ``sample_size / dataset_size`` differs from ``sampling_ratio``.
    """

    sampling_ratio: float
    noise_multiplier: float
    bound: str = "thm27"
    sample_size: int | None = None
    dataset_size: int | None = None

    neighboring_relation = REPLACE_ONE
    integer_orders_only = True

    def __post_init__(self):
        g = validation.probability(self.sampling_ratio, "sampling_ratio")
        z = validation.positive(self.noise_multiplier, "noise_multiplier")
        if self.bound not in ("thm27", "thm9"):
            raise InputError(f"bound={self.bound!r} is not allowed: expected 'thm27' or 'thm9'.")
        if (self.sample_size is None) != (self.dataset_size is None):
            raise InputError("sample_size and dataset_size must be given together (or neither).")
        if self.sample_size is not None:
            n = validation.integer(self.dataset_size, "dataset_size", low=1)
            b = validation.integer(self.sample_size, "sample_size", low=0, high=n)
            if not math.isclose(b / n, g, rel_tol=1e-12, abs_tol=0.0) and not (b == 0 and g == 0):
                raise InputError(f"sampling_ratio={g!r} is not allowed: expected sample_size/dataset_size="
                                 f"{b}/{n}={b / n!r}.")
            object.__setattr__(self, "sample_size", b)
            object.__setattr__(self, "dataset_size", n)
        object.__setattr__(self, "sampling_ratio", g)
        object.__setattr__(self, "noise_multiplier", z)

    @classmethod
    def from_sizes(cls, sample_size: int, dataset_size: int, noise_multiplier: float,
                   bound: str = "thm27") -> "WORSampledGaussianEvent":
        """The event of samples of ``sample_size`` out of ``dataset_size`` records.

        Args:
            sample_size: ``b``, an integer in [0, n].
            dataset_size: ``n``, an integer >= 1.
            noise_multiplier: ``z``, noise std / L2 sensitivity (replace-one), in (0, inf).
            bound: ``"thm27"`` or ``"thm9"``.

        Returns:
            The :class:`WORSampledGaussianEvent` with ``sampling_ratio = b / n``.

        Raises:
            InputError: if an argument is out of range.
        """
        n = validation.integer(dataset_size, "dataset_size", low=1)
        b = validation.integer(sample_size, "sample_size", low=0, high=n)
        return cls(b / n, noise_multiplier, bound, b, n)

    @property
    def use_probability(self) -> float:
        """The chance that the replaced record is in the subsample, ``b / n``
        (:func:`never_used_probability`)."""
        return self.sampling_ratio

    def _rdp(self, orders):
        """WBK19 Thm 27 or Thm 9 (:func:`~.subsampling.subsampled_gaussian_rdp_wor`; real orders are
        interpolated, WBK19 Cor. 10)."""
        return subsampled_gaussian_rdp_wor(orders, self.sampling_ratio, self.noise_multiplier, self.bound)

    def pld_pairs(self, direction: str) -> tuple:
        """The remove and the add pair at ratio ``gamma`` (replace-one: the discretiser symmetrises them; Zhu,
        Dong & Wang 2022, Sec. 5, sampling without replacement); ``()`` at ``gamma = 0`` (never used).

        Args:
            direction: ``"remove"`` or ``"add"`` (both pairs serve either).

        Returns:
            A tuple of zero or two ``(name, z, gamma)``.
        """
        g = self.sampling_ratio
        return () if g == 0.0 else (("remove", self.noise_multiplier, g), ("add", self.noise_multiplier, g))

    WORDS = ("{count} Gaussian step(s) on a fixed-size sample drawn without replacement "
             "(fraction {e.sampling_ratio:g}), noise multiplier {e.noise_multiplier:g}")

    def _dp_event(self, dp_accounting):
        """A ``SampledWithoutReplacementDpEvent`` around a ``GaussianDpEvent`` (sizes from
        ``sample_size`` / ``dataset_size``, else the ratio as a fraction with denominator at most 1e9)."""
        if self.sample_size is not None:
            b, n = self.sample_size, self.dataset_size
        else:
            fr = Fraction(self.sampling_ratio).limit_denominator(10 ** 9)
            b, n = fr.numerator, fr.denominator
        return dp_accounting.SampledWithoutReplacementDpEvent(
            n, b, dp_accounting.GaussianDpEvent(self.noise_multiplier))


class _AddRemoveRelease(_GaussianRelease):
    """A sampled release analysed under add/remove (the differing record is in the dataset or not).
    Building one checks its fields (``CHECKED``): :class:`~.validation.InputError` names the first
    one out of its range."""

    neighboring_relation = ADD_REMOVE
    both_directions = True


@dataclass(frozen=True)
class PoissonSampledGaussianEvent(_AddRemoveRelease):
    """Gaussian release on a Poisson subsample (each record kept with probability ``q``; add/remove).

    Attributes:
        sampling_probability: ``q``, in [0, 1].
        noise_multiplier: ``z``, noise std / L2 sensitivity (add/remove), in (0, inf).
    """

    sampling_probability: float
    noise_multiplier: float

    CHECKED = (("sampling_probability", validation.probability), ("noise_multiplier", validation.positive))

    @property
    def use_probability(self) -> float:
        """The chance that the differing record is sampled (:func:`never_used_probability`)."""
        return self.sampling_probability

    def _rdp(self, orders):
        """Mironov, Talwar & Zhang 2019 (:func:`~.poisson.poisson_gaussian_rdp`)."""
        return poisson_gaussian_rdp(orders, self.sampling_probability, self.noise_multiplier)

    WORDS = ("{count} Poisson-subsampled Gaussian step(s) (each record in with probability "
             "{e.sampling_probability:g}, independently), noise multiplier {e.noise_multiplier:g}")

    def pld_pairs(self, direction: str) -> tuple:
        """The pair of ``direction`` at rate ``q``: removing ``((1-q) N(0, z^2) + q N(1, z^2), N(0, z^2))``, adding
        its mirror (Zhu, Dong & Wang 2022, Sec. 5, Poisson subsampling); ``()`` at ``q = 0`` (never used).

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            A tuple of zero or one ``(name, z, q)``.
        """
        q = self.sampling_probability
        return () if q == 0.0 else ((direction, self.noise_multiplier, q),)

    def _dp_event(self, dp_accounting):
        """A ``PoissonSampledDpEvent`` around a ``GaussianDpEvent``."""
        return dp_accounting.PoissonSampledDpEvent(
            self.sampling_probability, dp_accounting.GaussianDpEvent(self.noise_multiplier))


@dataclass(frozen=True)
class BallsInBinsGaussianEvent(_AddRemoveRelease):
    """One epoch of balls-in-bins batches (add/remove): each record is put in one of ``steps`` steps,
    chosen uniformly and independently of every other record and of the data, and each step releases its
    batch's sum with Gaussian noise of multiplier ``noise_multiplier`` (noise std / the sum's
    sensitivity).  Compose ``epochs`` of them.

    Its dominating pair is ``(1/t) sum_i N(e_i, z^2 I_t)`` against ``N(0, z^2 I_t)`` (Chua, Ghazi,
    Harrison, Leeman, Kamath, Kumar, Manurangsi, Sinha & Zhang, "Balls-and-Bins Sampling for DP-SGD",
    AISTATS 2025, Sec. 3); the PLD accountant brackets it (:mod:`.pld.allocation`).  RDP and the total
    variation bound are the Gaussian release's (the record is in one release an epoch: sound, no
    amplification).  ``steps = 1`` is the full-batch Gaussian (:func:`full_batch_form`).  Random
    allocation of ``k > 1`` of the steps is not this event (see docs/accounting.md).

    Attributes:
        steps: the steps of an epoch, an integer in [1, ``MAX_RUN_LENGTH``].
        noise_multiplier: ``z``, noise std / the sum's sensitivity, in (0, inf).
    """

    steps: int
    noise_multiplier: float

    # use_probability 1: the record is in one step of every epoch (the base class's)
    CHECKED = (("steps", validation.run_length), ("noise_multiplier", validation.positive))

    # RDP: the Gaussian release's, alpha / (2 z^2) (the base class's): the epoch's pair is a
    # post-processing of (N(1, z^2), N(0, z^2)) (the step and the other coordinates are drawn
    # independently of the record), so this bounds it -- with no amplification
    WORDS = ("{count} epoch(s) of balls-in-bins batches (each record in one of {e.steps} steps, "
             "chosen uniformly at random and independently), noise multiplier {e.noise_multiplier:g}")

    def pld_pairs(self, direction: str) -> tuple:
        """``()``: an epoch's pair is not one-dimensional; :mod:`.pld.allocation` discretises it.

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            The empty tuple.
        """
        return ()

    def to_dp_event(self):
        """Refused: dp-accounting has no balls-in-bins accountant.

        Raises:
            InputError: always (dp-accounting has no balls-in-bins event).
        """
        raise InputError("BallsInBinsGaussianEvent has no dp-accounting event (dp-accounting 0.6 has no "
                         "balls-in-bins accountant); compare it with dpcalib's own brackets.")


def full_batch_form(event):
    """``event`` itself, or -- when its sampling uses every record (Poisson ``q = 1``, without
    replacement ``b = n``, balls-in-bins with one step an epoch) -- the full-batch :class:`GaussianEvent`
    it is.

    Every record is then in every release, so the release is the Gaussian mechanism whose noise
    multiplier is the event's (the noise std over the sensitivity under the event's relation):
    its privacy loss is exactly Gaussian, and exact Gaussian DP (:mod:`accountant.gdp`) and the
    Gaussian PLD answer it instead of a subsampled bound.  The caller keeps the event's
    neighbouring relation (the Gaussian event carries none).

    Args:
        event: an event.

    Returns:
        A :class:`GaussianEvent`, or ``event`` unchanged.
    """
    if hasattr(event, "full_batch"):             # a kind of its own (:mod:`.tree_events`)
        return event.full_batch()
    if isinstance(event, (PoissonSampledGaussianEvent, WORSampledGaussianEvent)) and event.use_probability >= 1.0:
        return GaussianEvent(event.noise_multiplier)
    if isinstance(event, BallsInBinsGaussianEvent) and event.steps == 1:
        return GaussianEvent(event.noise_multiplier)
    return event


def never_used_probability(events) -> float:
    """The chance that the differing record takes part in none of the releases of a
    composition of ``(event, count)`` pairs: ``prod (1 - p_i)^(k_i)`` over the events' use
    probabilities (1 for a full-batch Gaussian).

    Run the two neighbouring mechanisms with the same coins (samples and noise): their outputs
    coincide whenever the record is never used, so the total variation distance -- ``delta`` at
    ``eps = 0`` -- is at most ``1 - never_used_probability``, at every noise level.  For any
    ``delta`` at or above that, ``(0, delta)``-DP holds with no noise at all, and no noise level
    is the smallest meeting a target; noise searches check this first.

    Args:
        events: an iterable of ``(event, count)`` pairs.

    Returns:
        The probability (a float in [0, 1]).
    """
    return math.exp(_log_none(events, lambda ev: float(ev.use_probability)))


def total_variation_bound(events) -> float:
    """An upper bound on the total variation distance between the outputs of two neighbouring runs
    of a composition of ``(event, count)`` pairs -- ``delta(0)`` of its privacy profile:
    ``1 - prod (1 - p_i tv(z_i))^(k_i)``.

    ``tv(z) = 2 Phi(1/(2 z)) - 1 = erf(1 / (2 sqrt(2) z))`` is the total variation of the Gaussian
    pair ``(N(1, z^2), N(0, z^2))``; each event's dominating pair is that pair mixed with weight
    ``p`` (its use probability: ``q``, ``b/n``, or 1) into ``N(0, z^2)``, whose total variation is
    ``p tv(z)``.  The composition's profile is at most that of the product of the dominating pairs
    (the argument of the PLD accountant), and the total variation of a product of pairs is at most
    ``1 - prod (1 - TV_i)`` (couple the factors one by one).  Every record that is never used, and
    every noise so large that the release barely moves, makes this small: where it is at most
    ``delta``, eps = 0 exactly.

    Args:
        events: an iterable of ``(event, count)`` pairs.

    Returns:
        The bound (a float in [0, 1]).
    """
    def tv(ev):
        if hasattr(ev, "total_variation"):      # a non-Gaussian kind: its own bound (:mod:`.kinds`)
            return ev.total_variation()
        return min(1.0, float(ev.use_probability)
                   * float(special.erf(1.0 / (2.0 * math.sqrt(2.0) * float(ev.noise_multiplier)))))

    return -math.expm1(_log_none(events, tv))


def _log_none(events, chance) -> float:
    """``log prod (1 - chance(ev))^k`` over ``(event, count)`` pairs: the log-chance that none of
    the releases does what ``chance`` gives the chance of (``-inf`` as soon as one chance is 1)."""
    log_none = 0.0
    for ev, k in events:
        c = chance(ev)
        if c >= 1.0:
            return -math.inf
        log_none += k * math.log1p(-c)
    return log_none
