"""The registry of event kinds: one list of every kind an accountant composes, in place of the
``isinstance`` tuples each accountant used to keep.

A *kind* is a frozen event class registered with :func:`register_kind`.  Every accountant route
(``"rdp"``, ``"pld"``, ``"gdp"``) asks the event itself through :meth:`EventKind.refuses`: None where
the route certifies it, else one line naming the event and why not.  Adding a kind is one module:
subclass :class:`EventKind`, give it ``_rdp`` (an RDP curve) and/or ``pld_pairs`` (dominating pairs
of :mod:`.pld.lossdist`), decorate it with :func:`register_kind`, and every route, the JSON reader
of ``dpcalib account --events`` and the calibration of :mod:`.tune` take it (tests/test_event_kinds.py
adds a toy kind from a test module).

This module imports :mod:`.validation` and :mod:`.events` (the base :class:`~.events.Release` of every
kind, and the Gaussian kinds, registered here first); the other event modules import it.
"""

from __future__ import annotations

import math

import numpy as np

from .events import (BallsInBinsGaussianEvent, GaussianEvent, PoissonSampledGaussianEvent, Release,
                     WORSampledGaussianEvent)
from .validation import InputError

__all__ = []

#: the accountant routes every kind answers :meth:`EventKind.refuses` for
ROUTES = ("rdp", "pld", "gdp")
#: dp-accounting's "replace special" relation (a record replaced by a fixed special one: tree aggregation)
REPLACE_SPECIAL = "replace-special"

#: the registry, name -> class; the Gaussian kinds of :mod:`.events` come first (that module cannot import
#: this one: its :class:`~.events.Release` is :class:`EventKind`'s base)
_KINDS: dict = {cls.__name__: cls for cls in (GaussianEvent, WORSampledGaussianEvent, PoissonSampledGaussianEvent,
                                              BallsInBinsGaussianEvent)}
#: ``tuple(_KINDS.values())``, kept by :func:`register_kind` (every compose and flatten asks for it)
_TYPES: tuple = tuple(_KINDS.values())


def register_kind(cls):
    """Register an event class as a kind (a class decorator; registering a name again replaces it).

    Args:
        cls: the event class (a frozen dataclass; :class:`EventKind` or one of the Gaussian events).

    Returns:
        ``cls`` itself.

    Raises:
        InputError: if ``cls`` is not a class.
    """
    if not isinstance(cls, type):
        raise InputError(f"cls={cls!r} is not allowed: expected an event class.")
    global _TYPES
    _KINDS[cls.__name__] = cls
    _TYPES = tuple(_KINDS.values())
    return cls


def event_types() -> tuple:
    """Every registered kind, in registration order.

    Returns:
        A tuple of classes.
    """
    return _TYPES


def kind_named(name: str):
    """The registered kind called ``name`` (its class name or its ``JSON_NAME``).

    Args:
        name: a class name (``"LaplaceEvent"``) or a JSON name (``"laplace"``).

    Returns:
        The class.

    Raises:
        InputError: if no kind has that name.
    """
    for cls in _KINDS.values():
        if name in (cls.__name__, getattr(cls, "JSON_NAME", None)):
            return cls
    raise InputError(f"kind={name!r} is not allowed: expected one of {', '.join(sorted(json_kinds()))}.")


def json_kinds() -> dict:
    """JSON name -> class of every registered kind that has one.

    Returns:
        A dict.
    """
    return {c.JSON_NAME: c for c in _KINDS.values() if getattr(c, "JSON_NAME", None)}


class EventKind(Release):
    """What every non-Gaussian kind shares (the Gaussian events of :mod:`.events` answer the same
    questions their own way): validation of ``CHECKED`` fields at construction, an RDP curve,
    dominating pairs, the route refusals, words and the dp-accounting event.

    A subclass sets ``_rdp(orders)`` (None: RDP refused), ``pld_pairs(direction)`` (None: PLD
    refused), ``neighboring_relation`` (None: the guarantee holds under whatever relation the
    sensitivity is stated for), ``WORDS`` and ``_dp_event(dp_accounting)``.
    """

    #: the relation the event is analysed under (None: any; see the class)
    neighboring_relation = None
    #: the RDP bound holds at integer orders only
    integer_orders_only = False
    #: the chance the differing record takes part (:func:`~.events.never_used_probability`)
    use_probability = 1.0
    #: the name in a ``--events`` JSON file (None: not readable from JSON)
    JSON_NAME = None
    #: eps(alpha -> inf), the pure-DP level (inf: none)
    rdp_inf = math.inf
    #: a non-private release (eps = inf on every route)
    non_private = False
    #: compose both add and remove directions in the PLD (a Poisson-sampled kind)
    both_directions = False
    _rdp = None
    #: the dp-accounting event as ``(class name, fields passed in order)``, or None: the kind's own
    #: ``_dp_event(dp_event)`` (a tree's), or none in dp-accounting
    DPA = None
    #: why the PLD refuses a kind with no pairs (``pld_pairs`` None), in words after the event
    NO_PLD = "no certified dominating pair is known for this kind"

    def pld_pairs(self, direction: str):
        """The event's dominating pairs for the PLD, or None where the PLD refuses the kind.

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            A tuple of :class:`~.pld.pairs.Pair`, or None.
        """
        return None

    def refuses(self, route: str):
        """Why ``route`` cannot certify this event, in one line -- or None where it can.

        Args:
            route: ``"rdp"``, ``"pld"`` or ``"gdp"``.

        Returns:
            None, or the one-line refusal naming the event (a str).
        """
        if route == "rdp" and self._rdp is None:
            return f"{self!r}: no RDP bound is known for this kind"
        if route == "pld" and self.pld_pairs("remove") is None:
            return f"{self!r}: {self.NO_PLD}"
        if route == "gdp":
            return f"{self!r}: exact Gaussian DP holds only for full-batch Gaussian releases"
        return None

    def rdp(self, orders) -> np.ndarray:
        """The event's RDP at ``orders`` (the kind's bound).

        Args:
            orders: the Rényi order(s), each in (1, inf).

        Returns:
            A float array shaped like ``orders``.

        Raises:
            InputError: if the kind has no RDP bound (:meth:`refuses`).
        """
        why = self.refuses("rdp")
        if why is not None:
            raise InputError(f"accountant='rdp' is not allowed: {why}.")
        return np.asarray(self._rdp(np.asarray(orders, dtype=float)), dtype=float)

    def total_variation(self) -> float:
        """A bound on the total variation between the two neighbouring outputs (1.0: none known).

        Returns:
            A float in [0, 1].
        """
        pairs = self.pld_pairs("remove")
        if not pairs:
            return 1.0 if pairs is None else 0.0
        return min(1.0, max(p.total_variation() for p in pairs))

    def to_dp_event(self):
        """The dp-accounting event of this release (imports dp_accounting).

        Returns:
            A ``dp_accounting`` event.

        Raises:
            InputError: if dp-accounting has no such event.
            ImportError: if dp-accounting is not installed.
        """
        maker = getattr(self, "_dp_event", None)
        if maker is None and self.DPA is None:
            raise InputError(f"event={self!r} is not allowed: dp-accounting 0.6 has no event of this kind.")
        from dp_accounting import dp_event          # (every event class, DiscreteLaplace and RepeatAndSelect too)

        if maker is None:
            name, fields = self.DPA
            return getattr(dp_event, name)(*(getattr(self, f) for f in fields))
        return maker(dp_event)
