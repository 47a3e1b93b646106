"""The ledger of what really ran: every release a private step made, charged as it ran.

Each step charges one release of its mechanism (the run's shape: sampling rate or batch size and
dataset size, steps planned) at the noise levels it really used.  Steps are grouped by
``(mechanism, noise levels)``: a noise changed mid-run, or a new data loader (another sampling
rate), opens a new group, so the privacy spent is that of the run as it happened, never as
planned.  :meth:`Ledger.epsilon` composes every group's events (the mechanism's own events: Poisson
subsampled Gaussians, fixed-size without replacement, shuffled epochs through their
participations) in one accountant; for a ledger that holds exactly one whole calibrated run it is
the mechanism's own eps -- the number ``dpcalib epsilon`` prints for that run.

A ledger is plain data (``state_dict``: algorithm names, shapes, levels, counts), so a checkpoint
reads it back with ``torch.load(weights_only=True)``.

:func:`calibrate` is the noise of a whole run calibrated for one accountant, as :meth:`Ledger.epsilon`
asks it: the eps the engine reports for that run under that accountant is at most the target.
"""

from __future__ import annotations

import math
from collections import Counter

from ...accountant import PrivacyAccountant
from ...accountant.validation import InputError
from ...mechanisms.registry import lookup

__all__ = []


class Ledger:
    """The releases of a run, grouped by ``(mechanism, noise levels)``.

    Attributes:
        groups: ``[(mechanism, levels, Counter of release kinds)]`` in the order they began.
    """

    def __init__(self):
        self.groups: list = []

    # -- charging ----------------------------------------------------------------------------------
    def charge(self, mechanism, levels: dict, kind: str, count: int = 1) -> None:
        """One (or ``count``) release ``kind`` of ``mechanism`` at ``levels``.

        Args:
            mechanism: the run's mechanism (its ``release(kind)`` must know ``kind``).
            levels: ``{noise name: level}`` the step used.
            kind: the release kind.
            count: how many releases.
        """
        mechanism.release(kind)                       # an unknown kind is refused here, not at accounting time
        levels = {k: float(v) for k, v in levels.items()}
        for m, lv, counts in self.groups:
            if m == mechanism and lv == levels:
                counts[kind] += int(count)
                return
        self.groups.append((mechanism, levels, Counter({kind: int(count)})))

    def with_step(self, mechanism, levels: dict, kind: str, count: int = 1) -> "Ledger":
        """A copy of this ledger with ``count`` more releases charged (what a step would spend).

        Args:
            mechanism: the run's mechanism.
            levels: ``{noise name: level}``.
            kind: the release kind.
            count: how many releases.

        Returns:
            A new :class:`Ledger` (this one unchanged).
        """
        out = Ledger()
        out.groups = [(m, dict(lv), Counter(c)) for m, lv, c in self.groups]
        out.charge(mechanism, levels, kind, count)
        return out

    @property
    def steps(self) -> int:
        """The number of releases charged, over every group."""
        return sum(sum(c.values()) for _, _, c in self.groups)

    def counts(self, mechanism, levels: dict) -> Counter:
        """The release counts of one group.

        Args:
            mechanism: the group's mechanism.
            levels: its noise levels.

        Returns:
            A copy of the group's ``Counter`` of release kinds (empty when there is no such group).
        """
        levels = {k: float(v) for k, v in levels.items()}
        return next((Counter(c) for m, lv, c in self.groups if m == mechanism and lv == levels), Counter())

    # -- accounting --------------------------------------------------------------------------------
    def _unprotected(self) -> bool:
        """A release made at noise level 0 (no privacy: eps is infinite)."""
        return any(lv.get(m.release(kind).noise) == 0.0 for m, lv, c in self.groups for kind, k in c.items() if k)

    def _whole_run(self):
        """``(mechanism, levels)`` when the ledger is exactly one whole run of one mechanism."""
        if len(self.groups) != 1:
            return None
        m, lv, c = self.groups[0]
        return (m, lv) if dict(c) == {k: v for k, v in m.release_counts().items() if v} else None

    def accountant(self) -> PrivacyAccountant:
        """A :class:`~dpcalib.accountant.PrivacyAccountant` with every group's events composed.

        Returns:
            The accountant.
        """
        acc = PrivacyAccountant()
        for m, lv, c in self.groups:
            for ev, k in m.events(lv, c):
                acc.compose(ev, k)
        return acc

    def epsilon(self, delta: float, accountant: str = "best") -> float:
        """eps spent at ``delta``: 0 before any step, inf after a release without noise; else the
        best certified eps (``accountant="best"``; ``"auto"`` the fast GDP/RDP bound).

        Args:
            delta: the target delta.
            accountant: ``"best"``, or one accountant's name (``"auto"``, ``"gdp"``, ``"rdp"``, ``"pld"``).

        Returns:
            The eps spent.
        """
        if not self.steps:
            return 0.0
        if self._unprotected():
            return math.inf
        whole = self._whole_run()
        if whole is not None:
            m, lv = whole
            return float(m.epsilon(delta, accountant=accountant, **{k: lv[k] for k in m.noise_names()}).epsilon)
        return float(self.accountant().get_epsilon(delta, accountant))

    def epsilon_bracket(self, delta: float):
        """:class:`~dpcalib.accountant.EpsilonBracket`: the certified upper end and a lower bound on
        the truth (shuffled epochs: the mechanism's own bracket, whose lower end is Chua et al.'s).

        Args:
            delta: the target delta.

        Returns:
            The bracket.

        Raises:
            InputError: if no step has run, or a release was made without noise.
        """
        if not self.steps or self._unprotected():
            raise InputError("the ledger has no bracket: " + ("no step has run." if not self.steps else
                             "a release was made without noise (eps is infinite)."))
        whole = self._whole_run()
        if whole is not None:
            m, lv = whole
            return m.epsilon_bracket(delta, *[lv[k] for k in m.noise_names()])
        return self.accountant().epsilon_bracket(delta)

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The ledger as plain data (read back with ``torch.load(weights_only=True)``).

        Returns:
            ``{"groups": [{"algorithm", "shape", "levels", "counts"}]}``.
        """
        return {"groups": [{"algorithm": m.name, "shape": m.shape(), "levels": dict(lv), "counts": dict(c)}
                           for m, lv, c in self.groups]}

    def load_state_dict(self, state: dict) -> None:
        """Replace the groups by those of a :meth:`state_dict`.

        Args:
            state: what :meth:`state_dict` returned (the mechanisms rebuilt from the registry by name and shape).
        """
        groups = []
        for g in state["groups"]:
            m = lookup(g["algorithm"]).mechanism(**g["shape"])
            groups.append((m, {k: float(v) for k, v in g["levels"].items()}, Counter(g["counts"])))
        self.groups = groups


def calibrate(mechanism, epsilon, delta, accountant: str = "best"):
    """The noise of ``mechanism``'s whole run whose eps at ``delta`` under ``accountant`` -- the number
    :meth:`Ledger.epsilon` reports for that run -- is at most ``epsilon``.

    ``"best"``, ``"pld"``, ``"rdp"`` and ``"gdp"`` are the mechanism's own calibrations for that accountant
    (its smallest noise that accountant certifies).  ``"auto"`` (exact GDP where the run is full-batch
    Gaussians, else RDP) is calibrated as ``"gdp"`` where the run is full-batch Gaussians and as ``"rdp"``
    elsewhere (never below the auto bound: exact GDP is the true eps, and RDP is what ``"auto"`` reports
    otherwise, or 0 when the outputs are within total variation ``delta``).

    Args:
        mechanism: the run's mechanism (a registered algorithm's, with ``calibrate``).
        epsilon: the target eps (as the mechanism's ``calibrate`` takes it).
        delta: the target delta, in (0, 1).
        accountant: ``"best"``, ``"auto"``, ``"gdp"``, ``"rdp"`` or ``"pld"``.

    Returns:
        The mechanism's :class:`~dpcalib.mechanisms.CalibrationReport`.

    Raises:
        InputError: if the target is not allowed, or the accountant cannot account the run (``"gdp"``
            of a run that is not full-batch Gaussians).
    """
    route = accountant
    if accountant == "auto":
        ones = mechanism.accountant(*[1.0] * len(mechanism.noise_names()))
        route = "gdp" if ones.is_full_batch_gaussian else "rdp"
    return mechanism.calibrate(epsilon, delta, accountant=route)
