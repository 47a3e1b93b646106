"""A privacy accountant that composes heterogeneous Gaussian events and reports eps(delta).

Composition is adaptive (DIFF2 Lemma B.3 / Mironov 2017 Prop. 1: RDP adds at every order).
``get_epsilon`` / ``epsilon_report`` answer with ``accountant="best"`` by default: the smallest
certified eps of

* exact GDP (Balle & Wang 2018) when every event is a full-batch Gaussian: ``mu = sqrt(sum 1/z_i^2)``;
* the upper end of the privacy-loss-distribution bracket (:mod:`.pld`);
* RDP: the total curve on a grid of orders, converted with the chosen conversion, and, when every
  event allows real orders (Gaussian, Poisson), refined over the real order around the best grid
  order;

and eps = 0 exactly where the two runs' total variation is at most delta.  ``accountant="pld"``,
``"rdp"`` or ``"gdp"`` asks one of them.  The second opinions (dp-accounting, Opacus's PRV) are
:mod:`.interop`'s.
"""

from __future__ import annotations


import math
from dataclasses import dataclass, field

import numpy as np

from .validation import InputError
from . import validation
from .caches import register
from .conversion import CONVERSIONS, best_epsilon, best_epsilon_linear, rdp_to_dp
from .events import (
    BallsInBinsGaussianEvent,
    GaussianEvent,
    PoissonSampledGaussianEvent,
    WORSampledGaussianEvent,
    full_batch_form,
    total_variation_bound,
)
from .gaussian import composed_mu, gaussian_rdp, inverse_noise
from .gdp import gdp_epsilon
from .kinds import ROUTES, event_types
from .pld import MIN_DELTA, RTOL, EpsilonBracket
from .pld.queries import checked_pairs_epsilon
from .roots import bounded_min
from .tree_events import flatten, tree_relation
from . import interop      # (after .tree_events: the kinds register in the order of every import of the package)

__all__ = ["PrivacyAccountant", "EpsilonReport", "ACCOUNTANTS"]

#: the accountants an eps query and a calibration name, each certified: ``"best"`` (the default) the
#: smallest certified eps of exact GDP, the PLD bracket's upper end and RDP; ``"pld"`` the PLD bracket's
#: upper end alone; ``"rdp"`` RDP alone; ``"gdp"`` exact GDP (full-batch Gaussian runs only).  An eps
#: query also takes ``"auto"`` (GDP where exact, else RDP: fast, :meth:`PrivacyAccountant.epsilon_report`)
ACCOUNTANTS = ("best", "pld", "rdp", "gdp")

#: Integer orders used by default (fractional orders are reached by refinement; a kind whose curve
#: needs more names them in ``grid_orders``, :meth:`PrivacyAccountant._grid_then_refine`).
DEFAULT_ORDERS = tuple(float(a) for a in
                       list(range(2, 65)) + [72, 80, 96, 112, 128, 160, 192, 224, 256,
                                             320, 384, 448, 512, 640, 768, 1024])
#: DEFAULT_ORDERS as the accountants' grid (sorted, unique), shared read-only: checked once, not per accountant
_DEFAULT_GRID = np.unique(validation.orders_array(DEFAULT_ORDERS, "orders"))
_DEFAULT_GRID.setflags(write=False)


@dataclass(frozen=True)
class EpsilonReport:
    """The answer to "what eps do these events spend at this delta", with how it was obtained.

    Attributes:
        epsilon: the certified eps (a float, >= 0, possibly inf).
        delta: the delta it is for, in (0, 1).
        method: ``"gdp"`` (exact), ``"rdp"``, ``"pld"`` (certified upper end of the bracket),
            ``"tv"`` (eps = 0 by the total-variation bound) or ``"none"`` (no events).
        conversion: the RDP -> DP conversion, or None (not an RDP answer).
        order: the optimal RDP order, or None (not an RDP answer).
        notes: a tuple of strings on how the answer was obtained.
    """

    epsilon: float
    delta: float
    method: str            # "gdp" (exact), "rdp" or "pld" (certified upper end of the bracket)
    conversion: str | None  # RDP -> DP conversion, None for gdp
    order: float | None     # optimal RDP order, None for gdp
    notes: tuple = field(default=())

    @classmethod
    def from_bracket(cls, b) -> "EpsilonReport":
        """The certified upper end of an :class:`~dpcalib.accountant.EpsilonBracket` as a report.

        Args:
            b: the bracket (its ``upper``, ``delta``, ``method``, ``lower`` and ``notes`` are read).

        Returns:
            The :class:`EpsilonReport` (no conversion, no order; the bracket in its notes).
        """
        return cls(b.upper, b.delta, b.method, None, None,
                   (f"bracket [{b.lower:.9g}, {b.upper:.9g}]",) + tuple(b.notes))


#: RDP reports of recent compositions, keyed by (events, orders, delta, conversion, refine): the
#: events are frozen, so a report is a pure function of the key
_RDP_REPORTS: dict = {}
register(_RDP_REPORTS.clear)


class PrivacyAccountant:
    """Compose privacy events; report ``eps(delta)``.

    >>> acc = PrivacyAccountant()
    >>> acc.compose(GaussianEvent(10.0), count=100)  # doctest: +ELLIPSIS
    <...PrivacyAccountant object at ...>
    >>> round(acc.get_epsilon(1e-5), 6)   # exact: 1-GDP
    4.377178

    Args:
        orders: the Rényi orders of the RDP grid, each in (1, inf) (default ``DEFAULT_ORDERS``;
            duplicates dropped, sorted).

    Raises:
        InputError: if an order is out of range.
    """

    def __init__(self, orders=None):
        self._orders = _DEFAULT_GRID if orders is None else \
            np.unique(validation.orders_array(orders, "orders").ravel())
        self._events: list[tuple[object, int]] = []
        self._relation: str | None = None

    # -- state --------------------------------------------------------------------------------
    @property
    def events(self) -> tuple:
        """The composed ``(event, count)`` pairs, in order (a sampled event that uses every record
        is held as the full-batch :class:`GaussianEvent` it is: :func:`full_batch_form`)."""
        return tuple(self._events)

    @property
    def neighboring_relation(self) -> str | None:
        """The relation of the composed sampled events (None: full-batch Gaussians only)."""
        return self._relation

    @property
    def is_full_batch_gaussian(self) -> bool:
        """True when every event is a full-batch Gaussian (then GDP is exact)."""
        return all(isinstance(e, GaussianEvent) for e, _ in self._events)

    def compose(self, event, count: int = 1) -> "PrivacyAccountant":
        """Add ``count`` adaptive repetitions of ``event``.

        The whole request is validated before any state changes: an invalid event or count, or an
        event whose neighbouring relation differs from the events already composed (Poisson
        sampling is analysed under add/remove, sampling without replacement under replace-one),
        raises ``ValueError`` and leaves the accountant as it was.

        Args:
            event: an event of a registered kind (:class:`GaussianEvent`, :class:`LaplaceEvent`, ...;
                :func:`~.kinds.event_types`) or a tree node (:class:`ComposedEvent`, ...).
            count: the number of repetitions, an integer >= 0 (0 composes nothing).

        Returns:
            The accountant itself (so calls chain).

        Raises:
            InputError: if ``event`` is of another type, ``count`` is not an integer >= 0, or the
                event's neighbouring relation differs from the composed events'.
        """
        if hasattr(event, "leaves"):                     # a tree node: its (leaf, count) pairs
            leaves = event.leaves(1)
        elif isinstance(event, event_types()):
            leaves = [(event, 1)]
        else:
            raise InputError(f"event={event!r} is not allowed: expected one of "
                             f"{', '.join(t.__name__ for t in event_types())} or a tree node (ComposedEvent, ...).")
        return self._add(event, leaves, validation.integer(count, "count", low=0))

    def _add(self, event, leaves, k: int) -> "PrivacyAccountant":
        """:meth:`compose` of ``k`` times ``event``'s checked ``(leaf, count)`` pairs: only their relation is checked."""
        leaves = [(e, m) for e, m in leaves if m]
        rel = tree_relation(leaves)
        current = self._relation
        if rel is not None and current is not None and rel != current:
            raise InputError(f"event={event!r} is not allowed: its neighbouring relation "
                             f"({rel}) differs from the composed events' "
                             f"({current}); guarantees under different relations do not compose.")
        if k and leaves:
            # a sampled event that uses every record is stored as the full-batch Gaussian it is
            # (exact GDP then answers); its relation is kept here
            self._events += [(full_batch_form(e), m * k) for e, m in leaves]
            self._relation = rel or current
        return self

    def refusal(self, route: str, event=None):
        """Why ``route`` cannot certify the composed events (or ``event``'s tree), in one line naming
        the first event it refuses -- or None where it certifies them all (:meth:`~.kinds.EventKind.refuses`).

        Args:
            route: ``"rdp"``, ``"pld"`` or ``"gdp"``.
            event: an event or tree, or None (the composed events).

        Returns:
            None, or the one-line refusal (a str).

        Raises:
            InputError: if ``route`` is unknown or ``event`` is not an event.
        """
        if route not in ROUTES:
            raise InputError(f"route={route!r} is not allowed: expected one of {ROUTES}.")
        pairs = self._events if event is None else [(full_batch_form(e), m) for e, m in flatten(event, 1)]
        for e, _ in pairs:
            why = e.refuses(route)
            if why is not None:
                return why
        return None

    def supports(self, route: str, event=None) -> bool:
        """Whether ``route`` certifies every event composed (or every leaf of ``event``): :meth:`refusal` is None.

        Args:
            route: ``"rdp"``, ``"pld"`` or ``"gdp"``.
            event: an event or tree, or None (the composed events).

        Returns:
            A bool.

        Raises:
            InputError: as :meth:`refusal`.
        """
        return self.refusal(route, event) is None

    @property
    def non_private(self) -> bool:
        """True when a composed release is non-private (eps = inf on every route)."""
        return any(getattr(e, "non_private", False) for e, _ in self._events)

    # -- analysis -----------------------------------------------------------------------------
    def rdp(self, orders=None) -> np.ndarray:
        """Total RDP at ``orders`` (default: the accountant's orders).

        Args:
            orders: the Rényi orders, each in (1, inf), or None (the accountant's orders).

        Returns:
            The composition's RDP at each order (a 1-d float array).

        Raises:
            InputError: if an order is out of range.
        """
        a = self._orders if orders is None else np.atleast_1d(validation.orders_array(orders, "orders"))
        total = np.zeros(a.shape, dtype=float)
        for ev, k in self._events:
            total = total + k * ev.rdp(a)
        return total

    def gdp_mu(self) -> float:
        """``mu`` of the exact GDP guarantee (only for full-batch Gaussian compositions).

        Returns:
            ``mu = sqrt(sum_i k_i / z_i^2)`` (a float, 0.0 for no events, possibly inf).

        Raises:
            InputError: if an event is not a full-batch Gaussian.
        """
        if not self.is_full_batch_gaussian:
            raise InputError("gdp_mu is only defined when every event is a full-batch GaussianEvent.")
        return composed_mu((e.noise_multiplier, k) for e, k in self._events)

    def _linear_rdp(self):
        """``(slope, intercept)`` where every event's RDP is ``xi + rho alpha`` (``rdp_linear``), else None."""
        # (a Gaussian's RDP is alpha / (2 z^2): its slope is its value at order 2, halved -- one owner of
        # the extremes, gaussian_rdp)
        parts = [(gaussian_rdp(2.0, e.noise_multiplier) / 2.0, 0.0) if type(e) is GaussianEvent
                 else getattr(e, "rdp_linear", None) for e, _ in self._events]
        if not parts or any(p is None for p in parts):
            return None
        return (sum(k * p[0] for (_, k), p in zip(self._events, parts)),
                sum(k * p[1] for (_, k), p in zip(self._events, parts)))

    def _linear_slope(self) -> float:
        return sum(0.5 * k * inverse_noise(e.noise_multiplier) * inverse_noise(e.noise_multiplier)
                   for e, k in self._events)

    def total_variation_bound(self) -> float:
        """An upper bound on ``delta(0)``, the total variation distance between the outputs of two
        neighbouring runs: :func:`~dpcalib.accountant.events.total_variation_bound` of the events.

        Returns:
            The bound (a float in [0, 1]).
        """
        return total_variation_bound(self._events)

    def _tv_bracket(self, d: float):
        """The exact answer eps = 0 when the total variation is at most ``d`` (very large noise, or a
        record that is almost never sampled), else None.  ``delta(eps)`` is non-increasing in eps and
        ``delta(0) <= d``, so no eps is smaller -- exact, and no grid or order search is needed (for
        noise near 1e300 the privacy loss is below every grid and the search cannot start)."""
        tv = self.total_variation_bound()
        if tv > d:
            return None
        return EpsilonBracket(0.0, 0.0, d, 0.0, True, (f"exact: the two runs' outputs are within total variation "
                                                        f"{tv:.3g} <= delta, so (0, delta)-DP holds",), "tv")

    def get_epsilon(self, delta, accountant: str = "best", conversion: str = "improved",
                    refine: bool = True) -> float:
        """``eps`` spent at ``delta``: by default the best certified one (see :meth:`epsilon_report`).

        Args:
            delta: the target delta, in (0, 1).
            accountant: ``"best"``, ``"auto"``, ``"gdp"``, ``"rdp"`` or ``"pld"`` (as
                :meth:`epsilon_report`).
            conversion: the RDP -> DP conversion, ``"improved"`` or ``"mironov"``.
            refine: refine the optimal RDP order over real values.

        Returns:
            The certified eps (a float, >= 0, possibly inf).

        Raises:
            InputError: as :meth:`epsilon_report`.
        """
        return self.epsilon_report(delta, accountant, conversion, refine).epsilon

    def epsilon_report(self, delta, accountant: str = "best", conversion: str = "improved",
                       refine: bool = True) -> EpsilonReport:
        """``eps(delta)`` with the method, order and conversion that produced it.

        Args:
            delta: target delta in (0, 1).
            accountant: which bound answers -- ``"best"`` (the default: the smallest certified eps
                of exact GDP, the PLD bracket's upper end and RDP, :meth:`epsilon_bracket`; the
                report's ``method`` names the one that certified it), ``"auto"`` (GDP when exact,
                else RDP: fast), ``"gdp"``, ``"rdp"`` or ``"pld"``.
            conversion: RDP -> DP conversion, ``"improved"`` or ``"mironov"`` (DIFF2 Lemma B.4).
            refine: refine the optimal order over real values when every event allows it
                (``False`` keeps the grid's answer: a valid, slightly larger eps, computed faster).

        Returns:
            The :class:`EpsilonReport` (``method="none"`` and eps 0 for no events).

        Raises:
            InputError: if ``delta`` is out of range, ``accountant`` or ``conversion`` is unknown,
                ``accountant="gdp"`` is asked of a composition that is not full-batch Gaussian, or
                (``"pld"``) the PLD cannot answer (delta below ``MIN_DELTA``, memory cap).
        """
        method = accountant
        d = validation.delta(delta)
        if method not in ("auto", *ACCOUNTANTS):
            raise InputError(f"accountant={method!r} is not allowed: expected one of "
                             f"{', '.join(map(repr, ('auto', *ACCOUNTANTS)))}.")
        if conversion not in CONVERSIONS:
            raise InputError(f"conversion={conversion!r} is not allowed: expected one of {CONVERSIONS}.")
        if not self._events:
            return EpsilonReport(0.0, d, "none", None, None, ("no events composed",))
        if self.non_private:
            return EpsilonReport(math.inf, d, "non-private", None, None, ("a non-private release is composed",))
        if method == "auto" and not self.is_full_batch_gaussian and not self.supports("rdp"):
            method = "best"                   # RDP refuses a kind: the PLD (or nothing) answers
        if method in ("rdp", "pld") and not self.supports(method):
            raise InputError(f"accountant={method!r} is not allowed: {self.refusal(method)}.")
        if method == "auto":                   # (pld and best: epsilon_bracket checks it)
            tv = self._tv_bracket(d)
            if tv is not None:
                return EpsilonReport.from_bracket(tv)
        if method in ("pld", "best"):
            b = self.epsilon_bracket(d, methods=("pld",) if method == "pld" else ("gdp", "pld", "rdp"))
            return EpsilonReport.from_bracket(b)
        if method == "gdp" and not self.is_full_batch_gaussian and not all(
                isinstance(e, (PoissonSampledGaussianEvent, WORSampledGaussianEvent, BallsInBinsGaussianEvent))
                for e, _ in self._events):
            raise InputError(f"accountant='gdp' is not allowed: {self.refusal('gdp')}.")
        if method == "gdp" and not self.is_full_batch_gaussian:
            raise InputError("accountant='gdp' is not allowed for these events: exact Gaussian DP holds only "
                             "for compositions of full-batch GaussianEvents (these include subsampled "
                             "ones); use 'auto', 'rdp', 'pld' or 'best'.")
        if method == "gdp" or (method == "auto" and self.is_full_batch_gaussian):
            mu = self.gdp_mu()
            return EpsilonReport(gdp_epsilon(mu, d), d, "gdp", None, None, (f"mu={mu:.12g}",))
        if self.is_full_batch_gaussian:
            eps, order = best_epsilon_linear(self._linear_slope(), d, conversion)
            return EpsilonReport(eps, d, "rdp", conversion, order,
                                 ("linear RDP curve: optimum over real orders",))
        lin = self._linear_rdp()
        if lin is not None:              # xi + rho alpha (zCDP, discrete Gaussian): the same optimum, shifted by xi
            eps, order = best_epsilon_linear(lin[0], d, conversion)
            return EpsilonReport(eps + lin[1], d, "rdp", conversion, order,
                                 ("linear RDP curve: optimum over real orders",))
        key = (tuple(self._events), self._orders.tobytes(), d, conversion, refine)
        if key in _RDP_REPORTS:           # the same composition asked again (a calibration's checks)
            return _RDP_REPORTS[key]
        eps, order, notes = self._grid_then_refine(d, conversion, 1e-6 if refine else None)
        rep = EpsilonReport(eps, d, "rdp", conversion, order, notes)
        if len(_RDP_REPORTS) >= 256:
            _RDP_REPORTS.pop(next(iter(_RDP_REPORTS)))
        _RDP_REPORTS[key] = rep
        return rep

    def epsilon_bracket(self, delta, rtol: float | None = None, methods=("gdp", "pld", "rdp"),
                        atol: float | None = None):
        """``eps(delta)`` as a bracket: ``lower <= true eps <= upper``, ``upper`` certified.

        ``upper`` is the smallest of the sound answers in ``methods``: the exact GDP value (full
        batch only; then ``lower = upper``), the privacy-loss-distribution upper bound
        (:mod:`dpcalib.accountant.pld`) and the RDP value, so the bracket is never worse than
        :meth:`epsilon_report`.  ``lower`` is the PLD lower bound for the same dominating pairs.

        Args:
            delta: the target delta, in (0, 1).
            rtol: the PLD bracket's relative tolerance, in (0, 1], or None (``RTOL``).
            methods: a non-empty subset of ``("gdp", "pld", "rdp")``.
            atol: the PLD bracket's absolute tolerance on the width, in [0, inf), or None (1e-5,
                :func:`~.pld.queries.pld_epsilon`'s).

        Returns:
            The :class:`~.pld.shared.EpsilonBracket`.

        Raises:
            InputError: if ``delta`` or ``rtol`` is out of range, ``methods`` is empty or holds an
                unknown name, or ``methods == ("pld",)`` and the PLD cannot answer.
        """
        d = delta if type(delta) is float and 0.0 < delta < 1.0 else validation.delta(delta)   # (a float in range: as is)
        rtol = RTOL if rtol is None else rtol
        bad = () if methods == ("gdp", "pld", "rdp") else set(methods) - {"gdp", "pld", "rdp"}
        if not methods or bad:
            raise InputError(f"methods={methods!r} is not allowed: expected a non-empty subset of "
                             f"('gdp', 'pld', 'rdp').")
        if not self._events:
            return EpsilonBracket(0.0, 0.0, d, 0.0, True, ("no events composed",), "none")
        if self.non_private:
            return EpsilonBracket(math.inf, math.inf, d, 0.0, True, ("a non-private release is composed",),
                                  "non-private")
        if "pld" in methods and d >= MIN_DELTA and self.supports("pld"):
            # finite pairs on one lattice: their exact bracket, the answer of the routes below
            # wherever eps > 0 (no total-variation answer) and RDP is not asked or has no room
            b = checked_pairs_epsilon(tuple(self._events), d, rtol, atol, exact_only=True)
            if b is not None and b.lower > 0.0 and ("rdp" not in methods or b.upper <= b.lower * (1.0 + 1e-9)):
                return b
        kept = tuple(m for m in methods if m == "gdp" or self.supports(m))
        if not kept:
            route = next(m for m in methods if m != "gdp") if set(methods) - {"gdp"} else "gdp"
            raise InputError(f"accountant={'/'.join(methods)!r} is not allowed: {self.refusal(route)}.")
        asked, methods = methods, kept
        if methods != ("rdp",):
            tv = self._tv_bracket(d)
            if tv is not None:
                return tv
        if "gdp" in methods and self.is_full_batch_gaussian:
            e = gdp_epsilon(self.gdp_mu(), d)
            # the root is solved to ~1e-15 and its upper end returned, the profile raised by its rounding (up to
            # ~1e-11 of eps at delta = 1e-300, gdp.gdp_log_delta): the lower end is 1e-10 below
            return EpsilonBracket(e * (1.0 - 1e-10), e, d, 0.0, True, ("exact: Gaussian DP",), "gdp")
        if not any(m != "gdp" for m in methods):           # (methods: the kept ones, each supported)
            # exact GDP did not answer and no other route certifies the events: refuse, never a silent inf
            route = next((m for m in asked if m != "gdp"), "gdp")
            raise InputError(f"accountant={'/'.join(asked)!r} is not allowed: {self.refusal(route)}.")
        if "pld" in methods and d < MIN_DELTA and methods != ("pld",):
            methods = tuple(m for m in methods if m != "pld")
            skipped = (f"PLD skipped: delta below {MIN_DELTA:g}",)
        else:
            skipped = ()
        b = None
        if "pld" in methods:
            try:
                # (the events were checked as they were composed: only the numbers are checked again)
                b = checked_pairs_epsilon(tuple(self._events), d, rtol, atol)
            except ValueError as exc:          # no grid fits the memory cap: RDP answers
                if methods == ("pld",):
                    raise
                skipped = (f"PLD skipped: {exc}",)
        if b is not None:
            lower, upper, method, notes = b.lower, b.upper, "pld", b.notes
            h, conv = b.discretization, b.converged
        else:
            lower, upper, method, notes, h, conv = 0.0, math.inf, "rdp", skipped, 0.0, False
        # (RDP is at least the true eps, so at least ``lower``: a bracket within 1e-9 -- exact, from
        # finite pairs on one lattice -- leaves it nothing to gain)
        if "rdp" in methods and upper > lower * (1.0 + 1e-9) and not self._rdp_cannot_beat(upper, d):
            r = self.epsilon_report(d, accountant="rdp").epsilon
            if r < upper:
                upper, method = r, "rdp"
                notes = notes + ("RDP gave the smaller certified eps",)
        return b if method == "pld" else EpsilonBracket(lower, upper, d, h, conv, notes, method)

    def _rdp_cannot_beat(self, upper: float, d: float) -> bool:
        """True when the refined RDP eps (:meth:`epsilon_report`) is certainly not below ``upper``,
        so the refinement over real orders can be skipped.  It returns the grid's minimum or a
        smaller value found in the cell ``[lo, hi]`` of grid orders around the grid's optimum;
        on each grid interval ``[a_k, a_(k+1)]`` of that cell ``eps(a) >= rdp(a_k) + c(a_(k+1))``, since the RDP of every event is
        non-decreasing in the order and the conversion term ``c`` is decreasing in it for
        ``a < 1/delta`` (its derivative is ``log(delta a) / (a - 1)^2`` for the improved
        conversion, ``-log(1/delta) / (a - 1)^2`` for Mironov's).  Skipping never changes the
        bracket: the smaller of the two ends is ``upper`` either way."""
        if not math.isfinite(upper) or self.is_full_batch_gaussian or self._linear_rdp() is not None:
            return False
        if any(e.integer_orders_only for e, _ in self._events):
            return False
        key = (tuple(self._events), self._orders.tobytes(), d, "improved", True)
        if key in _RDP_REPORTS:          # known already: nothing to save
            return False
        grid = self._orders
        rdp = self.rdp()
        eps = rdp_to_dp(grid, rdp, d, "improved")
        i = int(np.argmin(eps))
        if not eps[i] >= upper or i == 0:
            return False
        j = min(i + 1, grid.size - 1)
        if not grid[j] < 1.0 / d:
            return False
        # on each grid interval [grid[k], grid[k + 1]] of the cell: eps >= rdp(grid[k]) + c(grid[k + 1])
        a, r = grid[i - 1:j + 1], rdp[i - 1:j + 1]
        target = upper * (1.0 + 1e-8)          # (the quadrature at real orders errs by <= 1e-10)
        if float(np.min(rdp_to_dp(a[1:], r[:-1], d, "improved"))) >= target:
            return True
        # not proven on the grid's intervals: halve them (the RDP at their midpoints, two
        # real orders -- a fraction of the refinement's cost)
        mid = 0.5 * (a[1:] + a[:-1])
        a2 = np.empty(2 * a.size - 1)
        r2 = np.empty_like(a2)
        a2[::2], a2[1::2] = a, mid
        r2[::2], r2[1::2] = r, self.rdp(mid)
        return float(np.min(rdp_to_dp(a2[1:], r2[:-1], d, "improved"))) >= target

    def optimal_order(self, delta, conversion: str = "improved", rtol: float = 1e-6,
                      near: float | None = None):
        """``(eps, order)``: the RDP answer of :meth:`epsilon_report` with the real order found to
        relative tolerance ``rtol`` instead of 1e-6 (not remembered).  A coarser ``rtol`` costs
        fewer fractional-order evaluations; eps is stationary in the order at the optimum, so it
        moves by O(rtol^2) only -- and any order gives a valid eps.  ``near``: an order expected
        close to the optimum (the optimum at a nearby noise level): the search runs within 3 %
        of it, and in the grid cell as usual where the answer lands on that window's edge.

        Args:
            delta: the target delta, in (0, 1).
            conversion: the RDP -> DP conversion, ``"improved"`` or ``"mironov"``.
            rtol: the relative tolerance on the order, in (0, 1].
            near: an order expected close to the optimum, or None.

        Returns:
            A tuple ``(eps, order)``; ``(0.0, None)`` for no events.

        Raises:
            InputError: if ``delta``, ``rtol`` or ``near`` is out of range, or ``conversion`` is unknown.
        """
        d = validation.delta(delta)
        r = validation.in_range(rtol, "rtol", 0.0, 1.0, low_open=True)
        if conversion not in CONVERSIONS:
            raise InputError(f"conversion={conversion!r} is not allowed: expected one of {CONVERSIONS}.")
        if not self._events:
            return 0.0, None
        if self.is_full_batch_gaussian:
            return best_epsilon_linear(self._linear_slope(), d, conversion)
        if near is not None and near > 1.0 and not any(e.integer_orders_only for e, _ in self._events):
            a = float(validation.orders_array(near, "near"))
            lo, hi = 1.0 + (a - 1.0) / 1.03, 1.0 + (a - 1.0) * 1.03
            eps = float(rdp_to_dp(a, self.rdp([a])[0], d, conversion))
            if math.isfinite(eps):
                eps, order = self._refine(eps, a, d, conversion, r, (lo, hi))
                if min(order - lo, hi - order) > 2.0 * r * order:    # inside: a local optimum
                    return eps, order
        eps, order, _ = self._grid_then_refine(d, conversion, r)
        return eps, order

    def _grid_then_refine(self, d: float, conversion: str, rtol: float | None):
        """``(eps, order, notes)``: the best order of the grid, then (``rtol`` not None, and every
        event defined at real orders) the best real order in its grid cell, to ``rtol``."""
        eps, order = best_epsilon(self._orders, self.rdp(), d, conversion)
        notes = []
        if order == self._orders.max():
            notes.append("optimal order at the top of the grid: pass larger orders for a tighter eps")
        integer_only = any(e.integer_orders_only for e, _ in self._events)
        if rtol is not None and not integer_only and math.isfinite(eps):
            eps, order = self._refine(eps, order, d, conversion, rtol)
            notes.append("order refined over real values")
        # a curve that is not unimodal within a grid cell (repeat-and-select's) names the orders it needs;
        # any order gives a valid eps, so the smallest is kept
        extra = sorted({a for e, _ in self._events for a in getattr(e, "grid_orders", ())
                        if not integer_only or float(a).is_integer()})
        if extra:
            a = np.asarray(extra, dtype=float)
            e2, o2 = best_epsilon(a, self.rdp(a), d, conversion)
            if e2 < eps:
                eps, order = e2, o2
        return eps, order, tuple(notes)

    def _refine(self, eps0: float, order0: float, d: float, conversion: str, rtol: float = 1e-6,
                bounds=None):
        """Minimise eps over real orders in the grid cell around ``order0`` (or within ``bounds``;
        bounded Brent, order to ``rtol`` relative)."""
        grid = self._orders
        i = int(np.searchsorted(grid, order0))
        lo = grid[i - 1] if i > 0 else 1.0 + (order0 - 1.0) * 1e-3
        hi = grid[i + 1] if i + 1 < grid.size else order0
        if bounds is not None:
            lo, hi = bounds
        if hi <= lo:
            return eps0, order0

        def f(a):
            return float(rdp_to_dp(a, self.rdp([a])[0], d, conversion))

        x, fx, ok = bounded_min(f, lo, hi, xatol=rtol * max(1.0, order0))
        if ok and fx < eps0:
            return float(fx), float(x)
        return eps0, order0

    def report(self, delta, deltas=None, fprs=None, assumptions=None, progress=None):
        """A :class:`~dpcalib.accountant.report.PrivacyReport`: eps brackets at several delta, GDP
        ``mu`` where exact, and the attack-risk terms (largest membership-inference TPR at each
        FPR, largest advantage), all from the certified side, with the assumptions in words.
        ``progress``: None or ``progress(done, total, part)``, told after each part
        (:func:`~dpcalib.accountant.report.privacy_report`).

        Args:
            delta: the report's delta, in (0, 1).
            deltas: the eps table's deltas, or None (``DEFAULT_DELTAS``).
            fprs: the attack-risk false-positive rates, each in (0, 1), or None (``DEFAULT_FPRS``).
            assumptions: a dict of words, or None (read from the events).
            progress: None, or a callable ``progress(done, total, part)``.

        Returns:
            The :class:`~dpcalib.accountant.report.PrivacyReport`.

        Raises:
            InputError: as :func:`~dpcalib.accountant.report.privacy_report`.
        """
        from .report import DEFAULT_FPRS, privacy_report

        return privacy_report(self, delta, deltas, DEFAULT_FPRS if fprs is None else fprs, assumptions,
                              progress=progress)

    # -- interoperability ---------------------------------------------------------------------
    @classmethod
    def from_dp_event(cls, event, orders=None) -> "PrivacyAccountant":
        """An accountant holding a dp-accounting ``DpEvent`` tree (see :mod:`.interop`).

        Args:
            event: a dp-accounting ``DpEvent``.
            orders: the Rényi orders of the RDP grid, or None (``DEFAULT_ORDERS``).

        Returns:
            The :class:`PrivacyAccountant`.

        Raises:
            InputError: as :func:`~.interop.from_dp_event`, or if the tree mixes neighbouring relations.
        """
        # (leaves of registered kinds, checked as built, and checked counts: only the relation is left)
        return cls(orders)._add(event, interop.from_dp_event(event), 1)

    def to_dp_event(self):
        """The composition as a dp-accounting ``ComposedDpEvent`` (:func:`.interop.to_dp_event`).

        Returns:
            A ``dp_accounting.ComposedDpEvent``.

        Raises:
            InputError: if an event has no dp-accounting equivalent (balls-in-bins).
            ImportError: if dp-accounting is not installed.
        """
        return interop.to_dp_event(self)

    def cross_check(self, delta) -> dict:
        """Our eps beside dp-accounting's (RDP, and PLD where it supports the events) and Opacus's PRV
        accountant (:func:`.interop.cross_check`, which documents the keys).

        Args:
            delta: the target delta, in (0, 1).

        Returns:
            The dict of :func:`~.interop.cross_check`.

        Raises:
            InputError: if ``delta`` is out of range.
            ImportError: if dp-accounting is not installed.
        """
        return interop.cross_check(self, delta)
