"""A privacy accountant that composes heterogeneous Gaussian events and reports eps(delta).

Composition is adaptive (DIFF2 Lemma B.3 / Mironov 2017 Prop. 1: RDP adds at every order).
``get_epsilon`` answers with the tightest sound method available:

* every event a full-batch Gaussian -> exact GDP (Balle & Wang 2018): ``mu = sqrt(sum 1/z_i^2)``;
* otherwise RDP: the total curve on a grid of orders, converted with the chosen conversion, and,
  when every event allows real orders (Gaussian, Poisson), refined over the real order around
  the best grid order.
"""

from __future__ import annotations

import logging

import math
from dataclasses import dataclass, field

import numpy as np

from .validation import InputError
from . import validation
from .caches import register
from .conversion import CONVERSIONS, best_epsilon, best_epsilon_linear, rdp_to_dp
from .events import (
    ADD_REMOVE,
    REPLACE_ONE,
    GaussianEvent,
    PoissonSampledGaussianEvent,
    WORSampledGaussianEvent,
    full_batch_form,
    total_variation_bound,
)
from .gdp import gdp_epsilon

__all__ = ["PrivacyAccountant", "EpsilonReport", "DEFAULT_ORDERS"]

#: Integer orders used by default (fractional orders are reached by refinement).
DEFAULT_ORDERS = tuple(float(a) for a in
                       list(range(2, 65)) + [72, 80, 96, 112, 128, 160, 192, 224, 256,
                                             320, 384, 448, 512, 640, 768, 1024])

_EVENT_TYPES = (GaussianEvent, WORSampledGaussianEvent, PoissonSampledGaussianEvent)

#: cross_check runs the PLD / PRV anchors only up to this eps and this many compositions
ANCHOR_MAX_EPSILON = 64.0
ANCHOR_MAX_COUNT = 10 ** 6


@dataclass(frozen=True)
class EpsilonReport:
    """The answer to "what eps do these events spend at this delta", with how it was obtained."""

    epsilon: float
    delta: float
    method: str            # "gdp" (exact), "rdp" or "pld" (certified upper end of the bracket)
    conversion: str | None  # RDP -> DP conversion, None for gdp
    order: float | None     # optimal RDP order, None for gdp
    notes: tuple = field(default=())

    @classmethod
    def from_bracket(cls, b) -> "EpsilonReport":
        """The certified upper end of an :class:`~dpcalib.accountant.EpsilonBracket` as a report."""
        return cls(b.upper, b.delta, b.method, None, None,
                   (f"bracket [{b.lower:.9g}, {b.upper:.9g}]",) + tuple(b.notes))


def _chosen(accountant: str, method: str | None) -> str:
    """The ``accountant=`` of an eps query; ``method=`` is its old name (deprecated)."""
    if method is None:
        return accountant
    import warnings

    warnings.warn("method= of an eps query is now accountant= ('method' is paper|tight, the calibration's)",
                  DeprecationWarning, stacklevel=3)
    return method


def _dpa_rdp(event, relation, delta) -> float:
    from dp_accounting.rdp import rdp_privacy_accountant

    acc = rdp_privacy_accountant.RdpAccountant(neighboring_relation=relation)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def _dpa_pld(event, interval, delta) -> float:
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                               value_discretization_interval=interval)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def _second_opinion(notes: list, what: str, fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - an anchor's failure is reported, not raised
        notes.append(f"dp-accounting's {what} accountant failed here ({type(exc).__name__}: "
                     f"{' '.join(str(exc).split())[:160]})")
        return None


class _Collect(logging.Handler):
    """Keeps the messages of a logger (dp-accounting's absl warnings) instead of printing them."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(" ".join(record.getMessage().split())[:200])


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
    """

    def __init__(self, orders=None):
        if orders is None:
            orders = DEFAULT_ORDERS
        self._orders = np.unique(validation.orders_array(orders, "orders").ravel())
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
        """
        if not isinstance(event, _EVENT_TYPES):
            raise InputError(f"event={event!r} is not allowed: expected one of "
                             f"{', '.join(t.__name__ for t in _EVENT_TYPES)}.")
        k = validation.integer(count, "count", low=0)
        current = self.neighboring_relation
        if event.neighboring_relation is not None and current is not None \
                and event.neighboring_relation != current:
            raise InputError(f"event={event!r} is not allowed: its neighbouring relation "
                             f"({event.neighboring_relation}) differs from the composed events' "
                             f"({current}); guarantees under different relations do not compose.")
        if k:
            # a sampled event that uses every record is stored as the full-batch Gaussian it is
            # (exact GDP then answers); its relation is kept here
            self._events.append((full_batch_form(event), k))
            self._relation = event.neighboring_relation or current
        return self

    # -- analysis -----------------------------------------------------------------------------
    def rdp(self, orders=None) -> np.ndarray:
        """Total RDP at ``orders`` (default: the accountant's orders)."""
        a = self._orders if orders is None else np.atleast_1d(validation.orders_array(orders, "orders"))
        total = np.zeros(a.shape, dtype=float)
        for ev, k in self._events:
            total = total + k * ev.rdp(a)
        return total

    def gdp_mu(self) -> float:
        """``mu`` of the exact GDP guarantee (only for full-batch Gaussian compositions)."""
        if not self.is_full_batch_gaussian:
            raise InputError("gdp_mu is only defined when every event is a full-batch GaussianEvent.")
        # (1/z) * (1/z) rather than 1/z^2: z^2 underflows to 0 for z below 1e-162 (mu is then inf,
        # eps inf) and 1/z^2 to 0 above 1e154 (mu 0, eps 0) -- never a division by zero
        return math.sqrt(sum(k * (1.0 / e.noise_multiplier) * (1.0 / e.noise_multiplier) for e, k in self._events))

    def _linear_slope(self) -> float:
        return sum(0.5 * k * (1.0 / e.noise_multiplier) * (1.0 / e.noise_multiplier) for e, k in self._events)

    def total_variation_bound(self) -> float:
        """An upper bound on ``delta(0)``, the total variation distance between the outputs of two
        neighbouring runs: :func:`~dpcalib.accountant.events.total_variation_bound` of the events."""
        return total_variation_bound(self._events)

    def _tv_bracket(self, d: float):
        """The exact answer eps = 0 when the total variation is at most ``d`` (very large noise, or a
        record that is almost never sampled), else None.  ``delta(eps)`` is non-increasing in eps and
        ``delta(0) <= d``, so no eps is smaller -- exact, and no grid or order search is needed (for
        noise near 1e300 the privacy loss is below every grid and the search cannot start)."""
        tv = self.total_variation_bound()
        if tv > d:
            return None
        from .pld import EpsilonBracket

        return EpsilonBracket(0.0, 0.0, d, 0.0, True, (f"exact: the two runs' outputs are within total variation "
                                                        f"{tv:.3g} <= delta, so (0, delta)-DP holds",), "tv")

    def get_epsilon(self, delta, accountant: str = "best", conversion: str = "improved",
                    refine: bool = True, *, method: str | None = None) -> float:
        """``eps`` spent at ``delta``: by default the best certified one (see :meth:`epsilon_report`)."""
        return self.epsilon_report(delta, _chosen(accountant, method), conversion, refine).epsilon

    def epsilon_report(self, delta, accountant: str = "best", conversion: str = "improved",
                       refine: bool = True, *, method: str | None = None) -> EpsilonReport:
        """``eps(delta)`` with the method, order and conversion that produced it.

        Args:
          delta: target delta in (0, 1).
          accountant: which bound answers -- ``"best"`` (the default: the smallest certified eps
            of exact GDP, the PLD bracket's upper end and RDP, :meth:`epsilon_bracket`; the
            report's ``method`` names the one that certified it), ``"auto"`` (GDP when exact,
            else RDP: fast), ``"gdp"``, ``"rdp"`` or ``"pld"``.  (``method=`` is its old name:
            accepted with a DeprecationWarning.)
          conversion: RDP -> DP conversion, ``"improved"`` or ``"mironov"`` (DIFF2 Lemma B.4).
          refine: refine the optimal order over real values when every event allows it
            (``False`` keeps the grid's answer: a valid, slightly larger eps, computed faster).
        """
        method = _chosen(accountant, method)
        d = validation.delta(delta)
        if method not in ("auto", "gdp", "rdp", "pld", "best"):
            raise InputError(f"method={method!r} is not allowed: expected 'auto', 'gdp', 'rdp', "
                             f"'pld' or 'best'.")
        if conversion not in CONVERSIONS:
            raise InputError(f"conversion={conversion!r} is not allowed: expected one of {CONVERSIONS}.")
        if not self._events:
            return EpsilonReport(0.0, d, "none", None, None, ("no events composed",))
        if method == "auto":                   # (pld and best: epsilon_bracket checks it)
            tv = self._tv_bracket(d)
            if tv is not None:
                return EpsilonReport.from_bracket(tv)
        if method in ("pld", "best"):
            b = self.epsilon_bracket(d, methods=("pld",) if method == "pld" else ("gdp", "pld", "rdp"))
            return EpsilonReport.from_bracket(b)
        if method == "gdp" and not self.is_full_batch_gaussian:
            raise InputError("method='gdp' is not allowed for these events: exact Gaussian DP holds only "
                             "for compositions of full-batch GaussianEvents (these include subsampled "
                             "ones); use 'auto', 'rdp', 'pld' or 'best'.")
        if method == "gdp" or (method == "auto" and self.is_full_batch_gaussian):
            mu = self.gdp_mu()
            return EpsilonReport(gdp_epsilon(mu, d), d, "gdp", None, None, (f"mu={mu:.12g}",))
        if self.is_full_batch_gaussian:
            eps, order = best_epsilon_linear(self._linear_slope(), d, conversion)
            return EpsilonReport(eps, d, "rdp", conversion, order,
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

    def epsilon_bracket(self, delta, rtol: float | None = None, methods=("gdp", "pld", "rdp")):
        """``eps(delta)`` as a bracket: ``lower <= true eps <= upper``, ``upper`` certified.

        ``upper`` is the smallest of the sound answers in ``methods``: the exact GDP value (full
        batch only; then ``lower = upper``), the privacy-loss-distribution upper bound
        (:mod:`dpcalib.accountant.pld`) and the RDP value, so the bracket is never worse than
        :meth:`epsilon_report`.  ``lower`` is the PLD lower bound for the same dominating pairs.
        """
        from .pld import RTOL, EpsilonBracket, pld_epsilon

        d = validation.delta(delta)
        rtol = RTOL if rtol is None else rtol
        bad = set(methods) - {"gdp", "pld", "rdp"}
        if not methods or bad:
            raise InputError(f"methods={methods!r} is not allowed: expected a non-empty subset of "
                             f"('gdp', 'pld', 'rdp').")
        if not self._events:
            return EpsilonBracket(0.0, 0.0, d, 0.0, True, ("no events composed",), "none")
        if methods != ("rdp",):
            tv = self._tv_bracket(d)
            if tv is not None:
                return tv
        if "gdp" in methods and self.is_full_batch_gaussian:
            e = gdp_epsilon(self.gdp_mu(), d)
            # the root is solved to ~1e-15 and its upper end returned: widen the lower end by 1e-12
            return EpsilonBracket(e * (1.0 - 1e-12), e, d, 0.0, True, ("exact: Gaussian DP",), "gdp")
        from .pld import MIN_DELTA

        if "pld" in methods and d < MIN_DELTA and methods != ("pld",):
            methods = tuple(m for m in methods if m != "pld")
            skipped = (f"PLD skipped: delta below {MIN_DELTA:g}",)
        else:
            skipped = ()
        b = None
        if "pld" in methods:
            try:
                b = pld_epsilon(self._events, d, rtol=rtol)
            except ValueError as exc:          # no grid fits the memory cap: RDP answers
                if methods == ("pld",):
                    raise
                skipped = (f"PLD skipped: {exc}",)
        if b is not None:
            lower, upper, method, notes = b.lower, b.upper, "pld", b.notes
            h, conv = b.discretization, b.converged
        else:
            lower, upper, method, notes, h, conv = 0.0, math.inf, "rdp", skipped, 0.0, False
        if "rdp" in methods and not self._rdp_cannot_beat(upper, d):
            r = self.epsilon_report(d, accountant="rdp").epsilon
            if r < upper:
                upper, method = r, "rdp"
                notes = notes + ("RDP gave the smaller certified eps",)
        return EpsilonBracket(lower, upper, d, h, conv, notes, method)

    def _rdp_cannot_beat(self, upper: float, d: float) -> bool:
        """True when the refined RDP eps (:meth:`epsilon_report`) is certainly not below ``upper``,
        so the refinement over real orders can be skipped.  It returns the grid's minimum or a
        smaller value found in the cell ``[lo, hi]`` of grid orders around the grid's optimum;
        on each grid interval ``[a_k, a_(k+1)]`` of that cell ``eps(a) >= rdp(a_k) + c(a_(k+1))``, since the RDP of every event is
        non-decreasing in the order and the conversion term ``c`` is decreasing in it for
        ``a < 1/delta`` (its derivative is ``log(delta a) / (a - 1)^2`` for the improved
        conversion, ``-log(1/delta) / (a - 1)^2`` for Mironov's).  Skipping never changes the
        bracket: the smaller of the two ends is ``upper`` either way."""
        if not math.isfinite(upper) or self.is_full_batch_gaussian:
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
        of it, and in the grid cell as usual where the answer lands on that window's edge."""
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

        from scipy import optimize  # imported here: it costs ~0.4 s and only this path needs it

        def f(a):
            return float(rdp_to_dp(a, self.rdp([a])[0], d, conversion))

        res = optimize.minimize_scalar(f, bounds=(lo, hi), method="bounded",
                                       options={"xatol": rtol * max(1.0, order0)})
        if res.success and res.fun < eps0:
            return float(res.fun), float(res.x)
        return eps0, order0

    def report(self, delta, deltas=None, fprs=None, assumptions=None):
        """A :class:`~dpcalib.accountant.report.PrivacyReport`: eps brackets at several delta, GDP
        ``mu`` where exact, and the attack-risk terms (largest membership-inference TPR at each
        FPR, largest advantage), all from the certified side, with the assumptions in words."""
        from .report import DEFAULT_FPRS, privacy_report

        return privacy_report(self, delta, deltas, DEFAULT_FPRS if fprs is None else fprs, assumptions)

    # -- interoperability ---------------------------------------------------------------------
    @classmethod
    def from_dp_event(cls, event, orders=None) -> "PrivacyAccountant":
        """An accountant holding a dp-accounting ``DpEvent`` tree (see :mod:`.interop`)."""
        from .interop import from_dp_event

        acc = cls(orders)
        for ev, k in from_dp_event(event):
            acc.compose(ev, k)
        return acc

    def to_dp_event(self):
        """The composition as a dp-accounting ``ComposedDpEvent`` (imports dp_accounting lazily)."""
        import dp_accounting

        return dp_accounting.ComposedDpEvent(
            [dp_accounting.SelfComposedDpEvent(e.to_dp_event(), k) for e, k in self._events])

    def _opacus_prv(self, d, notes):
        """Opacus's PRV accountant on the same Poisson/full-batch events (None if it cannot)."""
        if self.neighboring_relation == REPLACE_ONE:
            notes.append("Opacus's PRV accountant does not support sampling without replacement")
            return None
        try:
            from opacus.accountants import PRVAccountant
        except ImportError:
            notes.append("Opacus is not installed (pip install opacus) -- no PRV column")
            return None
        acc = PRVAccountant()
        for e, k in self._events:
            q = getattr(e, "sampling_probability", 1.0)
            acc.history.append((e.noise_multiplier, q, k))
        try:
            return float(acc.get_epsilon(delta=d))
        except Exception as exc:  # a second opinion's failure is a note, never our error
            notes.append(f"Opacus PRV failed: {type(exc).__name__}: {exc}")
            return None

    def cross_check(self, delta) -> dict:
        """Our eps beside dp-accounting's (RDP, and PLD where it supports the events).

        Returns a dict with keys ``ours`` (the ``epsilon_report(accountant="best")`` value),
        ``ours_method``, ``ours_rdp`` (our RDP answer with the improved conversion),
        ``ours_pld_lower``/``ours_pld_upper`` (our PLD bracket), ``dp_accounting_rdp``,
        ``dp_accounting_pld``, ``opacus_prv`` (Opacus's PRV accountant, Poisson/full-batch
        add/remove only, None where unsupported or not installed) and ``notes``.
        """
        import dp_accounting

        d = validation.delta(delta)
        ours = self.epsilon_report(d, accountant="best")
        ours_rdp = self.epsilon_report(d, accountant="rdp")
        notes = []
        try:
            pld = self.epsilon_bracket(d, methods=("pld",))
            pld_lower, pld_upper = pld.lower, pld.upper
        except InputError as exc:           # no grid holds the loss (tiny noise): no PLD column
            pld_lower = pld_upper = None
            notes.append(f"our PLD bracket alone: {exc}")
        rel = self.neighboring_relation
        nr = dp_accounting.NeighboringRelation
        relation = nr.REPLACE_ONE if rel == REPLACE_ONE else nr.ADD_OR_REMOVE_ONE
        event = self.to_dp_event()
        # dp-accounting is a second opinion: its numerical warnings (absl logging, stderr) and its
        # failures become notes and a None value, never an error of ours.
        absl = logging.getLogger("absl")
        caught = _Collect()
        absl.addHandler(caught)
        old_propagate, absl.propagate = absl.propagate, False
        count = sum(k for _, k in self._events)
        # the anchors' grids grow with eps and their run time with the count: past these they take
        # many GB (Opacus PRV asked 1.1 TiB at eps 1.8e7) or minutes, and are not run
        heavy = None
        if not ours.epsilon <= ANCHOR_MAX_EPSILON:
            heavy = f"eps {ours.epsilon:.6g} > {ANCHOR_MAX_EPSILON:g}"
        elif count > ANCHOR_MAX_COUNT:
            heavy = f"{count} compositions > {ANCHOR_MAX_COUNT:.0e}"
        try:
            dpa_rdp = _second_opinion(notes, "RDP", lambda: _dpa_rdp(event, relation, d))
            dpa_pld = None
            if heavy is not None:
                notes.append(f"dp-accounting's PLD and Opacus's PRV accountants not run: {heavy} (their grids "
                             "would need many GB or minutes)")
            elif rel == REPLACE_ONE:
                notes.append("dp-accounting's PLD accountant does not support sampling without replacement")
            else:
                # dp-accounting discretises each event's loss over about 20 / z in steps of the
                # interval (1e-4 by default), in Python: a small noise multiplier z would take
                # minutes, so the interval is widened to keep about 2e5 points per event.
                z_min = min(e.noise_multiplier for e, _ in self._events)
                interval = max(1e-4, 20.0 / (z_min * 2e5))
                if interval > 1e-4:
                    notes.append(f"dp-accounting's PLD at value_discretization_interval={interval:.3g} (noise "
                                 f"multiplier {z_min:.3g} < 1; 1e-4 would need over 2e5 points per event)")
                dpa_pld = _second_opinion(notes, "PLD", lambda: _dpa_pld(event, interval, d))
        finally:
            absl.removeHandler(caught)
            absl.propagate = old_propagate
        if caught.messages:
            notes.append(f"dp-accounting warned {len(caught.messages)} time(s), e.g.: {caught.messages[0]}")
        prv = self._opacus_prv(d, notes) if heavy is None else None
        return {"ours": ours.epsilon, "ours_method": ours.method, "ours_rdp": ours_rdp.epsilon,
                "ours_pld_lower": pld_lower, "ours_pld_upper": pld_upper,
                "dp_accounting_rdp": dpa_rdp, "dp_accounting_pld": dpa_pld, "opacus_prv": prv,
                "delta": d, "neighboring_relation": rel or ADD_REMOVE, "notes": tuple(notes)}
