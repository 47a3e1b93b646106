"""dp-accounting interop: turn a dp-accounting ``DpEvent`` tree into dpcalib events, and back.

:func:`tree_from_dp_event` reads every tree dp-accounting 0.6's own PLD or RDP accountant takes --
Gaussian, Laplace, discrete Laplace, randomized response, zCDP, mixture of Gaussians, Poisson and
without-replacement sampling, the truncated subsampled Gaussian, composition, self-composition,
repeat-and-select, single-epoch tree aggregation, non-private and no-op -- node for node
(:mod:`.tree_events`); ``from_dp_event(event)`` flattens it into the ``(event, count)`` pairs a
:class:`~dpcalib.accountant.PrivacyAccountant` composes, so that a dp-accounting user gets dpcalib's
certified bracket for their own mechanism:

    acc = PrivacyAccountant.from_dp_event(my_event)
    acc.epsilon_bracket(1e-5)

:func:`to_dp_event` is its inverse, and :func:`cross_check` puts an accountant's eps beside
dp-accounting's RDP and PLD accountants and Opacus's PRV accountant (the second opinions of
``PrivacyAccountant.cross_check`` and ``dpcalib compare``).  dp-accounting and Opacus are imported
only inside those two (lazily): reading a tree needs neither, it goes by class name and attributes.
"""

from __future__ import annotations

import logging

from .validation import InputError
from . import validation
from .events import ADD_REMOVE, REPLACE_ONE, GaussianEvent
from .mechanism_events import (DiscreteLaplaceEvent, LaplaceEvent, MixtureOfGaussiansEvent, NonPrivateEvent,
                               RandomizedResponseEvent, ZCDPEvent)
from .truncated import TruncatedPoissonGaussianEvent
from .tree_events import (ComposedEvent, PoissonSampledEvent, RepeatAndSelectEvent, SelfComposedEvent,
                          TreeAggregationEvent, WORSampledEvent, flatten)

__all__ = ["tree_from_dp_event", "to_dp_event"]

#: cross_check runs the PLD / PRV anchors only up to this eps and this many compositions
ANCHOR_MAX_EPSILON = 64.0
ANCHOR_MAX_COUNT = 10 ** 6


def _count(event) -> int:
    if not isinstance(event.count, int) or isinstance(event.count, bool) or event.count < 0:
        raise InputError(f"count={event.count!r} is not allowed: expected an integer >= 0.")
    return event.count


def _truncated(e):
    """dp-accounting's truncated subsampled Gaussian as its PLD accountant reads it: nothing where ``q``,
    ``B`` or ``n`` is 0, a non-private release at noise 0, else :class:`~.truncated.TruncatedPoissonGaussianEvent`."""
    if e.sampling_probability == 0 or e.truncated_batch_size == 0 or e.dataset_size == 0:
        return ComposedEvent(())
    if e.noise_multiplier == 0:
        return NonPrivateEvent()
    return TruncatedPoissonGaussianEvent(e.dataset_size, e.sampling_probability, e.truncated_batch_size,
                                         e.noise_multiplier)


#: dp-accounting event name -> its dpcalib tree (the children read by ``walk``); every tree dp-accounting
#: 0.6's PLD or RDP accountant accepts is read
_READERS = {
    "NoOpDpEvent": lambda e, walk: ComposedEvent(()),
    "NonPrivateDpEvent": lambda e, walk: NonPrivateEvent(),
    "GaussianDpEvent": lambda e, walk: GaussianEvent(e.noise_multiplier),
    "LaplaceDpEvent": lambda e, walk: LaplaceEvent(e.noise_multiplier),
    "DiscreteLaplaceDpEvent": lambda e, walk: DiscreteLaplaceEvent(e.noise_parameter, e.sensitivity),
    "RandomizedResponseDpEvent": lambda e, walk: RandomizedResponseEvent(e.noise_parameter, e.num_buckets),
    "ZCDpEvent": lambda e, walk: ZCDPEvent(e.rho, e.xi),
    "MixtureOfGaussiansDpEvent": lambda e, walk: MixtureOfGaussiansEvent(
        e.standard_deviation, tuple(e.sensitivities), tuple(e.sampling_probs)),
    "SingleEpochTreeAggregationDpEvent": lambda e, walk: TreeAggregationEvent(e.noise_multiplier, e.step_counts),
    "SelfComposedDpEvent": lambda e, walk: SelfComposedEvent(walk(e.event), _count(e)),
    "ComposedDpEvent": lambda e, walk: ComposedEvent(tuple(walk(c) for c in e.events)),
    "PoissonSampledDpEvent": lambda e, walk: PoissonSampledEvent(e.sampling_probability, walk(e.event)),
    "SampledWithoutReplacementDpEvent": lambda e, walk: WORSampledEvent(e.sample_size, e.source_dataset_size,
                                                                        walk(e.event)),
    "RepeatAndSelectDpEvent": lambda e, walk: RepeatAndSelectEvent(walk(e.event), e.mean, e.shape),
    "TruncatedSubsampledGaussianDpEvent": lambda e, walk: _truncated(e),
}


def tree_from_dp_event(event):
    """The dpcalib tree of a dp-accounting ``DpEvent`` tree, node for node (read by class name and
    attributes: dp-accounting need not be installed); :func:`to_dp_event` inverts it.

    Args:
        event: a dp-accounting ``DpEvent``.

    Returns:
        A dpcalib event or tree node (:mod:`.tree_events`).

    Raises:
        InputError: if the tree holds an event dpcalib does not read (sampling with replacement, an
            unsupported event), or a bad count.
    """
    name = type(event).__name__
    reader = _READERS.get(name)
    if reader is None:
        raise InputError(f"event={name} is not allowed: expected one of {', '.join(sorted(_READERS))} "
                         f"(dpcalib reads every tree dp-accounting 0.6's PLD or RDP accountant takes).")
    return reader(event, tree_from_dp_event)


def from_dp_event(event) -> list:
    """``[(event, count), ...]`` of a dp-accounting ``DpEvent`` tree (consecutive equal events merged).

    A ``SelfComposedDpEvent`` of a composition repeats each part ``count`` times in place
    (``(A, B) x 3`` becomes ``A x 3, B x 3``): composition commutes, so every eps is unchanged.

    Args:
        event: a dp-accounting ``DpEvent`` (read by class name and attributes; dp-accounting need
            not be installed).

    Returns:
        A list of ``(event, count)`` pairs of dpcalib events, zero counts dropped.

    Raises:
        InputError: if the tree holds an unsupported event, a sampled event that does not wrap a
            ``GaussianDpEvent``, or a ``SelfComposedDpEvent`` whose count is not an integer >= 0.
    """
    out = flatten(tree_from_dp_event(event), 1)
    merged: list = []
    for ev, k in out:
        if k == 0:
            continue
        if merged and merged[-1][0] == ev:
            merged[-1] = (ev, merged[-1][1] + k)
        else:
            merged.append((ev, k))
    return merged


# ---- dpcalib -> dp-accounting, and the second opinions ------------------------------------------
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


def to_dp_event(accountant):
    """The composition held by ``accountant`` as a dp-accounting ``ComposedDpEvent`` (imports
    dp_accounting lazily).

    Args:
        accountant: a :class:`~dpcalib.accountant.PrivacyAccountant` (anything with ``events``,
            a sequence of ``(event, count)`` pairs).

    Returns:
        A ``dp_accounting.ComposedDpEvent`` of one ``SelfComposedDpEvent`` per ``(event, count)``.

    Raises:
        InputError: if an event has no dp-accounting equivalent (balls-in-bins sampling).
        ImportError: if dp-accounting is not installed.
    """
    import dp_accounting

    if not hasattr(accountant, "epsilon_bracket"):   # a dpcalib event or tree: node for node
        return accountant.to_dp_event()
    return dp_accounting.ComposedDpEvent(
        [dp_accounting.SelfComposedDpEvent(e.to_dp_event(), k) for e, k in accountant.events])


def _opacus_prv(accountant, d, notes):
    """Opacus's PRV accountant on the same Poisson/full-batch events (None if it cannot)."""
    if accountant.neighboring_relation == REPLACE_ONE:
        notes.append("Opacus's PRV accountant does not support sampling without replacement")
        return None
    try:
        from opacus.accountants import PRVAccountant
    except ImportError:
        notes.append("Opacus is not installed (pip install opacus) -- no PRV column")
        return None
    acc = PRVAccountant()
    if not all(getattr(e, "gaussian", False) for e, _ in accountant.events):
        notes.append("Opacus's PRV accountant takes Gaussian events only")
        return None
    for e, k in accountant.events:
        q = getattr(e, "sampling_probability", 1.0)
        acc.history.append((e.noise_multiplier, q, k))
    try:
        return float(acc.get_epsilon(delta=d))
    except Exception as exc:  # a second opinion's failure is a note, never our error
        notes.append(f"Opacus PRV failed: {type(exc).__name__}: {exc}")
        return None

def cross_check(accountant, delta) -> dict:
    """``accountant``'s eps beside dp-accounting's (RDP, and PLD where it supports the events).

    Returns a dict with keys ``ours`` (the ``epsilon_report(accountant="best")`` value),
    ``ours_method``, ``ours_rdp`` (our RDP answer with the improved conversion; None, with a note, where
    RDP refuses an event),
    ``ours_pld_lower``/``ours_pld_upper`` (our PLD bracket), ``dp_accounting_rdp``,
    ``dp_accounting_pld``, ``opacus_prv`` (Opacus's PRV accountant, Poisson/full-batch
    add/remove only, None where unsupported or not installed) and ``notes``.

    Args:
        accountant: the :class:`~dpcalib.accountant.PrivacyAccountant` to check.
        delta: the target delta, in (0, 1).

    Returns:
        A dict with the keys above, plus ``delta`` (the checked delta) and ``neighboring_relation``;
        ``notes`` is a tuple of strings.  A value is None where that accountant was not run or failed.

    Raises:
        InputError: if ``delta`` is out of range.
        ImportError: if dp-accounting is not installed.
    """
    import dp_accounting

    d = validation.delta(delta)
    ours = accountant.epsilon_report(d, accountant="best")
    notes = []
    if accountant.supports("rdp"):
        ours_rdp = accountant.epsilon_report(d, accountant="rdp").epsilon
    else:
        ours_rdp = None
        notes.append(f"no RDP answer of ours: {accountant.refusal('rdp')}")
    try:
        pld = accountant.epsilon_bracket(d, methods=("pld",))
        pld_lower, pld_upper = pld.lower, pld.upper
    except InputError as exc:           # no grid holds the loss (tiny noise): no PLD column
        pld_lower = pld_upper = None
        notes.append(f"our PLD bracket alone: {exc}")
    rel = accountant.neighboring_relation
    nr = dp_accounting.NeighboringRelation
    relation = nr.REPLACE_ONE if rel == REPLACE_ONE else nr.ADD_OR_REMOVE_ONE
    try:
        event = to_dp_event(accountant)
    except InputError as exc:           # balls-in-bins: no anchor accounts for it
        notes.append(f"no second opinion: {exc} (neither dp-accounting's accountants nor Opacus's PRV "
                     "accountant take this sampling)")
        return {"ours": ours.epsilon, "ours_method": ours.method, "ours_rdp": ours_rdp,
                "ours_pld_lower": pld_lower, "ours_pld_upper": pld_upper, "dp_accounting_rdp": None,
                "dp_accounting_pld": None, "opacus_prv": None, "delta": d,
                "neighboring_relation": rel or ADD_REMOVE, "notes": tuple(notes)}
    # dp-accounting is a second opinion: its numerical warnings (absl logging, stderr) and its
    # failures become notes and a None value, never an error of ours.
    absl = logging.getLogger("absl")
    caught = _Collect()
    absl.addHandler(caught)
    old_propagate, absl.propagate = absl.propagate, False
    count = sum(k for _, k in accountant.events)
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
            z_min = min(getattr(e, "noise_multiplier", 1.0) for e, _ in accountant.events)
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
    prv = _opacus_prv(accountant, d, notes) if heavy is None else None
    return {"ours": ours.epsilon, "ours_method": ours.method, "ours_rdp": ours_rdp,
            "ours_pld_lower": pld_lower, "ours_pld_upper": pld_upper,
            "dp_accounting_rdp": dpa_rdp, "dp_accounting_pld": dpa_pld, "opacus_prv": prv,
            "delta": d, "neighboring_relation": rel or ADD_REMOVE, "notes": tuple(notes)}
