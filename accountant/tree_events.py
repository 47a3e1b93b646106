"""Events as trees: sampling, composition, self-composition, repeat-and-select and tree aggregation
around the mechanism kinds (:mod:`.events`, :mod:`.mechanism_events`).

A tree is flattened (:func:`flatten`) into the ``(leaf, count)`` pairs a
:class:`~.accountant.PrivacyAccountant` composes: composition and self-composition expand in place
(adaptive composition commutes); a sampling node around full-batch Gaussians becomes the Gaussian
sampled event of :mod:`.events` (a composition of Gaussians is one Gaussian of noise multiplier
``(sum k / z^2)^(-1/2)``, exactly), around one other mechanism it stays a leaf of its own whose pairs
are the mechanism's pair under sampling (:class:`~.pld.lossdist.SampledPair`).  Every node states its
neighbouring relation: Poisson sampling add/remove, sampling without replacement replace-one, tree
aggregation replace-special, the rest their children's.  A node no route can take (sampling with
replacement, shuffling, a sampled composition of non-Gaussians) is refused by :func:`flatten` in one
line naming it.  :func:`event_from_json` reads a tree from the JSON of ``dpcalib account --events``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass

import numpy as np

from . import validation
from .events import ADD_REMOVE, REPLACE_ONE, GaussianEvent, PoissonSampledGaussianEvent, WORSampledGaussianEvent
from .gaussian import gaussian_rdp, inverse_noise
from .kinds import REPLACE_SPECIAL, EventKind, event_types, json_kinds, kind_named, register_kind
from .repeat_select import grid_of, repeat_and_select_rdp
from .subsampling import subsampled_rdp_wor
from .validation import InputError

__all__ = []


def flatten(event, count: int = 1) -> list:
    """The ``(leaf, count)`` pairs of a tree (see the module).

    Args:
        event: a leaf of a registered kind, or a tree node.
        count: the multiplicity of ``event``, an integer >= 0.

    Returns:
        A list of ``(leaf, count)`` pairs.

    Raises:
        InputError: if a node is not an event, or no route can take it.
    """
    if hasattr(event, "leaves"):
        return event.leaves(count)
    if not isinstance(event, event_types()):
        raise InputError(f"event={event!r} is not allowed: expected an event of a registered kind or a tree node.")
    return [(event, count)]


def tree_relation(pairs):
    """The one neighbouring relation of ``(leaf, count)`` pairs (None: none stated).

    Args:
        pairs: ``(leaf, count)`` pairs.

    Returns:
        The relation (a str) or None.

    Raises:
        InputError: if the leaves state two relations.
    """
    rels = {e.neighboring_relation for e, _ in pairs} - {None}
    if len(rels) > 1:
        raise InputError(f"events mix neighbouring relations ({', '.join(sorted(rels))}); guarantees under "
                         f"different relations do not compose.")
    return rels.pop() if rels else None


@dataclass(frozen=True)
class ComposedEvent:
    """Adaptive composition of events, in order.

    Attributes:
        events: the composed events (a tuple).
    """

    events: tuple
    JSON_NAME = "composed"

    def __post_init__(self):
        object.__setattr__(self, "events", tuple(self.events))

    def leaves(self, count: int = 1) -> list:
        """The flattened leaves, each ``count`` times (:func:`flatten`).

        Args:
            count: the multiplicity, an integer >= 0.

        Returns:
            A list of ``(leaf, count)`` pairs.
        """
        return [p for e in self.events for p in flatten(e, count)]

    def to_dp_event(self):
        """``ComposedDpEvent`` of the children's events (imports dp_accounting).

        Returns:
            A ``dp_accounting`` event.
        """
        import dp_accounting

        return dp_accounting.ComposedDpEvent([e.to_dp_event() for e in self.events])


@dataclass(frozen=True)
class SelfComposedEvent:
    """``count`` adaptive repetitions of an event.

    Attributes:
        event: the repeated event.
        count: an integer >= 0.
    """

    event: object
    count: int
    JSON_NAME = "self_composed"

    def __post_init__(self):
        object.__setattr__(self, "count", validation.integer(self.count, "count", low=0))

    def leaves(self, count: int = 1) -> list:
        """The child's leaves, ``count * self.count`` times.

        Args:
            count: the multiplicity, an integer >= 0.

        Returns:
            A list of ``(leaf, count)`` pairs.
        """
        return flatten(self.event, count * self.count)

    def to_dp_event(self):
        """``SelfComposedDpEvent`` (imports dp_accounting).

        Returns:
            A ``dp_accounting`` event.
        """
        import dp_accounting

        return dp_accounting.SelfComposedDpEvent(self.event.to_dp_event(), self.count)


def _gaussian_z(leaves):
    """The noise multiplier of a composition of full-batch Gaussians (None if a leaf is another kind)."""
    if not leaves or not all(type(e) is GaussianEvent for e, _ in leaves):
        return None
    if len(leaves) == 1 and leaves[0][1] == 1:
        return leaves[0][0].noise_multiplier              # (exactly: no round trip through 1/z^2)
    # ((1/z)^2 as it always was, else 1/z floored twice: never a subnormal below the truth, never an OverflowError; the sum is at least the true
    # one, so the noise multiplier returned is at most the true one)
    s = sum(k * ((1.0 / z) ** 2 if 1e-150 <= z <= 1e150 else inverse_noise(z) * inverse_noise(z))
            for z, k in ((e.noise_multiplier, k) for e, k in leaves))
    if s == 0:
        return math.inf
    z = 1.0 / math.sqrt(s)
    return z if z > 0.0 else sys.float_info.min * sys.float_info.epsilon      # (s = inf: no noise to speak of)


class _SampledKind(EventKind):
    """A mechanism under sampling: pairs are the mechanism's under :class:`~.pld.lossdist.SampledPair`."""

    def _base_pair(self):
        from .pld.lossdist import LossPair

        ev = self.event
        pairs = ev.pld_pairs("remove") if hasattr(ev, "refuses") and not ev.refuses("pld") else None
        return pairs[0] if pairs and len(pairs) == 1 and isinstance(pairs[0], LossPair) else None

    def refuses(self, route):
        """PLD where the mechanism has one exact pair; RDP as the subclass says; never GDP.

        Args:
            route: ``"rdp"``, ``"pld"`` or ``"gdp"``.

        Returns:
            None, or the one-line refusal.
        """
        if route == "pld" and self._base_pair() is None:
            return f"{self!r}: its mechanism has no exact dominating pair to sample"
        return super().refuses(route)

    def full_batch(self):
        """The mechanism itself when every record is used (rate 1), else the event.

        Returns:
            An event.
        """
        return self.event if self.use_probability >= 1.0 else self

    def leaves(self, count: int = 1) -> list:
        """``[(self, count)]``, or the Gaussian sampled event where the child is full-batch Gaussian.

        Args:
            count: the multiplicity, an integer >= 0.

        Returns:
            A list of ``(leaf, count)`` pairs.

        Raises:
            InputError: if the child is not one mechanism or a composition of full-batch Gaussians,
                or states another relation.
        """
        inner = flatten(self.event, 1)
        z = _gaussian_z(inner)
        if z is not None:
            return [(self._gaussian(z), count)]
        if len(inner) != 1 or inner[0][1] != 1:
            raise InputError(f"event={self!r} is not allowed: sampling wraps one mechanism or a composition of "
                             f"full-batch Gaussians (dp-accounting's accountants take no more).")
        leaf = inner[0][0]
        if leaf.neighboring_relation not in (None, self.neighboring_relation):
            raise InputError(f"event={self!r} is not allowed: its mechanism is stated under "
                             f"{leaf.neighboring_relation}, the sampling under {self.neighboring_relation}.")
        return [(self if leaf is self.event else type(self)(*self._args(leaf)), count)]


@register_kind
@dataclass(frozen=True)
class PoissonSampledEvent(_SampledKind):
    """A mechanism on a Poisson sample (each record in with probability ``q``; add/remove).

    Attributes:
        sampling_probability: ``q``, in [0, 1].
        event: the mechanism.
    """

    sampling_probability: float
    event: object

    CHECKED = (("sampling_probability", validation.probability),)
    JSON_NAME = "poisson"
    neighboring_relation = ADD_REMOVE
    both_directions = True
    WORDS = "{count} Poisson-sampled release(s) (probability {e.sampling_probability:g}) of {e.event!r}"

    @property
    def use_probability(self) -> float:
        """``q``."""
        return self.sampling_probability

    def _gaussian(self, z):
        return PoissonSampledGaussianEvent(self.sampling_probability, z)

    def _args(self, leaf):
        return self.sampling_probability, leaf

    def pld_pairs(self, direction):
        """``SampledPair(mechanism's pair, q, direction)`` (ZDW22 Thm 11); ``()`` at ``q = 0``.

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            A tuple of pairs.
        """
        from .pld.lossdist import SampledPair

        b = self._base_pair()
        if b is None:
            return None
        q = self.sampling_probability
        return () if q == 0.0 else (b,) if q >= 1.0 else (SampledPair(b, q, direction),)

    @property
    def _rdp(self):
        """Exact Rényi divergence of the two sampled pairs where the mechanism's pair is finite: remove
        ``((1 - q) Q + q P, Q)`` and add ``(Q, (1 - q) Q + q P)``, whose divergences both ways are the same two
        (:func:`~.pld.lossdist.renyi_of`); the mixture is made at each call, not kept with the event (a discrete
        Laplace's pair may have a million atoms, and the caches keyed by events keep them)."""
        from .pld.lossdist import FinitePair, renyi_of

        b = self._base_pair()
        q = self.sampling_probability
        if q == 0.0:
            return lambda a: np.zeros(np.shape(a))
        if not isinstance(b, FinitePair) or q >= 1.0:
            return None

        # at most the sampled pure-DP level log(1 + q (e^eps0 - 1)) both ways (D_alpha <= D_inf; the divergence
        # reads inf where a mass underflows), raised for its rounding and eps0's (log-sum-exp past e^700, where
        # q e^eps0 may still be small: eps0 + log q alone is below the level)
        e0 = getattr(self.event, "rdp_inf", math.inf)
        top = math.inf
        if e0 < math.inf:
            level = math.log1p(q * math.expm1(e0)) if e0 < 700.0 else \
                float(np.logaddexp(math.log1p(-q), math.log(q) + e0))
            top = max(0.0, level) * (1.0 + 2.0 ** -50) + 4.0 * math.ulp(e0)

        def rdp(a):
            _, p, qq = b.arrays
            return np.minimum(renyi_of((1 - q) * qq + q * p, qq, a), top)
        return rdp

    def _dp_event(self, dpa):
        return dpa.PoissonSampledDpEvent(self.sampling_probability, self.event.to_dp_event())


@register_kind
@dataclass(frozen=True)
class WORSampledEvent(_SampledKind):
    """A mechanism on a sample of ``b`` of ``n`` records drawn without replacement (replace-one).

    Attributes:
        sample_size: ``b``, an integer in [0, n].
        dataset_size: ``n``, an integer >= 1.
        event: the mechanism (its sensitivity stated for replace-one).
    """

    sample_size: int
    dataset_size: int
    event: object

    JSON_NAME = "without_replacement"
    neighboring_relation = REPLACE_ONE
    integer_orders_only = True
    WORDS = "{count} release(s) on {e.sample_size} of {e.dataset_size} records (without replacement) of {e.event!r}"

    def __post_init__(self):
        n = validation.integer(self.dataset_size, "dataset_size", low=1)
        object.__setattr__(self, "dataset_size", n)
        object.__setattr__(self, "sample_size", validation.integer(self.sample_size, "sample_size", high=n))

    @property
    def use_probability(self) -> float:
        """``b / n``."""
        return self.sample_size / self.dataset_size

    def _gaussian(self, z):
        return WORSampledGaussianEvent.from_sizes(self.sample_size, self.dataset_size, z)

    def _args(self, leaf):
        return self.sample_size, self.dataset_size, leaf

    def pld_pairs(self, direction):
        """The remove and add sampled pairs, symmetrised by the discretiser (ZDW22, as for the Gaussian).

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            A tuple of pairs.
        """
        from .pld.lossdist import SampledPair

        b, g = self._base_pair(), self.use_probability
        if b is None:
            return None
        return () if g == 0.0 else (b,) if g >= 1.0 else (SampledPair(b, g, "remove"), SampledPair(b, g, "add"))

    @property
    def _rdp(self):
        """WBK19 Thm 9 over the mechanism's RDP (:func:`~.subsampling.subsampled_rdp_wor`), integer orders."""
        if not hasattr(self.event, "refuses") or self.event.refuses("rdp"):
            return None
        ev = self.event
        return lambda a: subsampled_rdp_wor(np.maximum(np.ceil(a), 2), self.use_probability, ev.rdp, ev.rdp_inf)

    def _dp_event(self, dpa):
        return dpa.SampledWithoutReplacementDpEvent(self.dataset_size, self.sample_size, self.event.to_dp_event())


@register_kind
@dataclass(frozen=True)
class RepeatAndSelectEvent(EventKind):
    """Run ``event`` (a tree) a random number of times with mean ``mean``, release the best run only
    (Papernot & Steinke 2022; :mod:`.repeat_select`).  RDP only: the PLD refuses it.

    Attributes:
        event: the repeated tree.
        mean: ``E[K]``, in [1, inf).
        shape: ``eta`` in [0, inf]: 0 logarithmic, 1 geometric, inf Poisson.
    """

    event: object
    mean: float
    shape: float

    JSON_NAME = "repeat_and_select"
    #: dp-accounting 0.6's default fractional orders (``1 + x / 10``): the curve of a selection is not
    #: unimodal within a grid cell (refined to a local minimum 1.5e-5 above dp-accounting's value at 5.6
    #: once), so its eps is also taken at every order dp-accounting's grid holds
    grid_orders = tuple(1 + x / 10.0 for x in range(1, 100))
    NO_PLD = "repeat-and-select has an RDP bound only (Papernot-Steinke 2022)"
    WORDS = "{count} best-of-K selection(s) (E[K] = {e.mean:g}, shape {e.shape:g}) over {e.event!r}"

    def __post_init__(self):
        object.__setattr__(self, "mean", validation.in_range(self.mean, "mean", 1.0, math.inf, high_open=True))
        object.__setattr__(self, "shape", validation.in_range(self.shape, "shape", 0.0, math.inf))
        object.__setattr__(self, "_inner", tuple(flatten(self.event, 1)))

    @property
    def neighboring_relation(self):
        """The repeated tree's relation."""
        return tree_relation(self._inner)

    @property
    def integer_orders_only(self) -> bool:
        """As the repeated tree's."""
        return any(e.integer_orders_only for e, _ in self._inner)

    def refuses(self, route):
        """RDP where every leaf of the tree has RDP; no PLD, no GDP.

        Args:
            route: ``"rdp"``, ``"pld"`` or ``"gdp"``.

        Returns:
            None, or the one-line refusal.
        """
        if route == "rdp":
            return next((e.refuses("rdp") for e, _ in self._inner if e.refuses("rdp")), None)
        return super().refuses(route)

    def _rdp(self, orders):
        inner = lambda a: sum(k * e.rdp(a) for e, k in self._inner)
        if "_grid_values" not in self.__dict__:          # the inner curve on the bound's grid, once
            g = grid_of(self.integer_orders_only)
            object.__setattr__(self, "_grid_values", (g, np.asarray(inner(g), dtype=float)))
        return repeat_and_select_rdp(orders, inner, self.mean, self.shape, self.integer_orders_only,
                                     self._grid_values)

    def _dp_event(self, dpa):
        return dpa.RepeatAndSelectDpEvent(self.event.to_dp_event(), self.mean, self.shape)


@register_kind
@dataclass(frozen=True)
class TreeAggregationEvent(EventKind):
    """One epoch of tree aggregation (Kairouz et al. 2021, App. D; each record in at most one leaf of
    all the trees; replace-special): a Gaussian release of noise multiplier ``z / sqrt(depth)``, depth
    ``ceil(log2(max steps + 1))`` -- held as that :class:`~.events.GaussianEvent`.

    Attributes:
        noise_multiplier: ``z``, per node, in (0, inf).
        step_counts: the steps of each tree (a tuple of integers >= 0, not all 0).
    """

    noise_multiplier: float
    step_counts: tuple

    JSON_NAME = "tree_aggregation"
    neighboring_relation = REPLACE_SPECIAL

    def __post_init__(self):
        z = validation.positive(self.noise_multiplier, "noise_multiplier")
        s = self.step_counts
        s = tuple(validation.integer(v, "step_counts", low=0) for v in (s if np.ndim(s) else [s]))
        if not s or max(s) == 0:
            raise InputError(f"step_counts={s!r} is not allowed: expected integers >= 0, not all 0.")
        object.__setattr__(self, "noise_multiplier", z)
        object.__setattr__(self, "step_counts", s)

    def full_batch(self):
        """The Gaussian release it is.

        Returns:
            A :class:`~.events.GaussianEvent`.
        """
        depth = math.ceil(math.log2(max(self.step_counts) + 1))
        return GaussianEvent(self.noise_multiplier / math.sqrt(depth))

    def _rdp(self, orders):
        return gaussian_rdp(orders, self.full_batch().noise_multiplier)

    def pld_pairs(self, direction):
        """The Gaussian pair of :meth:`full_batch`.

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            A tuple of pairs.
        """
        from .pld.pairs import GaussianPair

        return (GaussianPair(self.full_batch().noise_multiplier),)

    def _dp_event(self, dpa):
        return dpa.SingleEpochTreeAggregationDpEvent(self.noise_multiplier, list(self.step_counts))


# ---- JSON ----------------------------------------------------------------------------------------
_NODES = {"composed": ComposedEvent, "self_composed": SelfComposedEvent}
_GAUSSIAN = {"gaussian": GaussianEvent, "poisson_gaussian": PoissonSampledGaussianEvent,
             "wor_gaussian": WORSampledGaussianEvent}


def event_from_json(obj):
    """A tree from its JSON form: ``{"kind": NAME, field: value, ...}``, children under ``"event"`` or
    ``"events"`` (names: ``composed``, ``self_composed``, ``gaussian`` and every kind's ``JSON_NAME``).

    Args:
        obj: the parsed JSON (a dict; a list is a composition).

    Returns:
        The event or node.

    Raises:
        InputError: if a node has no ``kind``, an unknown kind, or bad fields.
    """
    if isinstance(obj, list):
        return ComposedEvent(tuple(event_from_json(o) for o in obj))
    if not isinstance(obj, dict) or "kind" not in obj:
        raise InputError(f"events: {obj!r} is not allowed: expected an object with a 'kind'.")
    name = obj["kind"]
    cls = _NODES.get(name) or _GAUSSIAN.get(name) or kind_named(name)
    names = {f.name for f in dataclasses.fields(cls)}
    kw = {}
    for k, v in obj.items():
        if k == "kind":
            continue
        if k not in names:
            raise InputError(f"events: {name}.{k}={v!r} is not allowed: expected fields {', '.join(sorted(names))}.")
        if k == "event":
            v = event_from_json(v)
        elif k == "events":
            v = tuple(event_from_json(o) for o in v)
        elif isinstance(v, list):
            v = tuple(v)
        kw[k] = v
    try:
        return cls(**kw)
    except TypeError as exc:
        raise InputError(f"events: {name} {obj!r} is not allowed: {exc}.") from None


def event_to_json(event) -> dict:
    """The JSON form of a tree (:func:`event_from_json` inverts it).

    Args:
        event: an event or node.

    Returns:
        A dict.

    Raises:
        InputError: if the event's kind has no JSON name.
    """
    rev = {c: n for n, c in {**_NODES, **_GAUSSIAN, **json_kinds()}.items()}
    name = rev.get(type(event))
    if name is None:
        raise InputError(f"event={event!r} is not allowed: its kind has no JSON name.")
    out = {"kind": name}
    for f in dataclasses.fields(event):
        v = getattr(event, f.name)
        out[f.name] = event_to_json(v) if f.name == "event" else (
            [event_to_json(e) for e in v] if f.name == "events" else (list(v) if isinstance(v, tuple) else v))
    return out
