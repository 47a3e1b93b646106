"""What every link of the PLD chain (:mod:`.pld`) shares: the constants of the method (the memory cap, the
smallest delta, the default tolerance, the tail and alias charges), the grid ladder, the discretised
:class:`Step` the links exchange, the :class:`EpsilonBracket` they answer with and :class:`OverCap`, the
signal that a composition would not fit.  The first link, :mod:`.pairs`, gives each event's dominating
pair; nothing here reads an event but :func:`aligned_grid` (its use probability).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["MEMORY_CAP", "TAIL", "Step"]

#: default memory cap of one composition (bytes)
MEMORY_CAP = 1 << 30
#: smallest delta the PLD answers (the tilted composition keeps every charge relative to
#: delta; below this, probabilities leave the double-precision range)
MIN_DELTA = 1e-300
#: default relative width of a bracket (``upper - lower <= max(RTOL * upper, atol)``)
RTOL = 3e-5
#: the automatic refinement's smallest step, a factor 2^(1/2) (two rungs of its ladder): a bracket
#: just short of the tolerance is not refined by 2 (a million steps at q = 1e-4: 3 s a composition)
LAST_STEP = 2.0 ** -0.5


def on_ladder(h: float) -> float:
    """The largest grid step ``0.05 * 2^(-k/4)`` (k integer) not above ``h``.

    The automatic grids are taken from this fixed ladder, so that nearby compositions (a
    calibration's noise levels) end on the *same* grid and their brackets vary continuously;
    a calibration can then solve on the very grid its report will use.

    Args:
        h: a grid step, > 0.

    Returns:
        The step on the ladder (a float); ``h`` itself when ``h >= 0.05``.
    """
    if h >= 0.05:
        return h
    k = math.ceil(-4.0 * math.log2(h / 0.05) - 1e-9)
    return 0.05 * 2.0 ** (-k / 4.0)


#: re-compose tilted toward the delta-quantile when the round-off charge above the lower end
#: exceeds this fraction of delta (the charge moves the upper end by about that much, relative)
RETILT = 1e-6
#: the same for the lower end (it needs far less accuracy than the upper end a calibration
#: solves on)
LOWER_RETILT = 1e-3
#: mass charged (as infinite loss) for the per-step tails beyond the grid, in all, and for the
#: wrapped-around mass of a composition, per side -- fractions of delta.  Each moves eps by
#: about that fraction of its own scale (~1e-8 relative); smaller costs grid points
TAIL = 1e-8
ALIAS = 1e-8


@dataclass(frozen=True)
class EpsilonBracket:
    """``eps(delta)`` of a composition: ``lower <= true eps <= upper`` (``upper`` is certified).

    Attributes:
        lower: a lower bound on eps (a float, >= 0).
        upper: the certified upper bound on eps (a float, possibly inf).
        delta: the target delta the bracket is for.
        discretization: the loss grid step of the final composition (0.0 where nothing was composed).
        converged: whether the width is within the requested tolerance.
        notes: a tuple of strings on how the bracket was obtained (a cap reached, a fallback).
        method: the sound method that gave ``upper``: ``"pld"``, ``"gdp"`` or ``"rdp"`` (``"tv"``:
        eps = 0 exactly by the total-variation bound; ``"none"``: no events composed).
    """

    lower: float
    upper: float
    delta: float
    discretization: float
    converged: bool
    notes: tuple = field(default=())
    #: the sound method that gave ``upper`` ("pld", or "gdp"/"rdp" when the accountant's
    #: :meth:`~dpcalib.accountant.PrivacyAccountant.epsilon_bracket` found them smaller)
    method: str = "pld"

    @property
    def width(self) -> float:
        """``upper - lower``, the bracket's width.

        """
        return self.upper - self.lower


@dataclass
class Step:
    """A discretised step: finite masses at (i0 + j) * h, an infinite-loss mass, tail masses.

    Attributes:
        i0: the grid index of the first atom.
        mass: the finite atoms' masses (a float array).
        inf: the mass at infinite loss.
        bad: the mass of the true loss outside the grid (rounded up or sent to infinity).
        count: how many times the step is composed, >= 1.
        lmgf: ``log E[e^(l L)]`` over the finite atoms at the tilts, or None (not yet computed).
        shift: the grid's anchor (atoms at ``shift + (i0 + j) * h``).
        charge: the profile slack of the step (a block's remainders), >= 0.
        block: the number of the pair's steps this step stands for, >= 1.
    """

    i0: int
    mass: np.ndarray
    inf: float
    bad: float     # mass of the true loss outside the grid (rounded up or sent to infinity)
    count: int
    # log E[e^(l L)] over the finite atoms at +-_LAMBDAS, computed once (a bracket needs them
    # for every composition and re-composition of the step)
    lmgf: tuple | None = field(default=None, repr=False, compare=False)
    #: the grid's anchor: the atoms sit at ``shift + (i0 + j) * h`` (0 but for the anchored lower
    #: steps of :mod:`.discretise`); a composition adds ``count * shift``
    shift: float = 0.0
    #: a bound on how far the step's measure may lie from a valid one, in profile: its profile
    #: (lower steps: the true one) may exceed the other by at most this constant -- a block's
    #: wrapped-around and round-off remainders (:mod:`.blocks`); a composition adds
    #: ``count * charge`` (times the other steps' largest total mass) to what it charges
    charge: float = 0.0
    #: the number of the pair's steps this step stands for (a block of :mod:`.blocks`: its
    #: atoms are not each within one grid step of the true loss, so no Hoeffding end is read)
    block: int = 1


class OverCap(Exception):
    """A composition or discretisation would exceed the memory cap (caught inside the accountant).

    """
    pass


def aligned_grid(events, h: float) -> float | None:
    """A grid step in ``(h/2, h]`` that puts the subsampled loss's atom on a grid point, or None.

    With small noise almost all of a Poisson step's mass sits just above ``log(1 - q)`` (remove
    direction; just below ``-log(1 - q)`` for add, and both for sampling without replacement):
    an atom.  Mid-way between two grid points its chord gap is ``~h/4`` of the whole mass, more
    than the thin tail above can repay, and :func:`~.discretise.lower_step` fails.  With ``h' = |log(1 - q)|
    / ceil(|log(1 - q)| / h)`` the atom sits at a grid point (the grid is symmetric about 0, so
    for both signs), its gap is ~0, and the lower step exists.  Any grid's lower end is valid;
    this one is used only where the grid ``h``'s lower steps fail.  The atom of the subsampled
    event with the most steps is aligned; None where no event is subsampled (0 < q < 1) or the
    atom is within ``h`` of 0 (then it sits near a grid point already).

    Args:
        events: checked ``(event, count)`` pairs.
        h: the grid step, > 0.

    Returns:
        The aligned grid step (a float), or None.
    """
    best = None
    for ev, k in events:
        q = ev.use_probability
        if 0.0 < q < 1.0 and (best is None or k > best[1]):
            best = (q, k)
    if best is None:
        return None
    a = -math.log1p(-best[0])
    if not a >= h:
        return None
    return a / math.ceil(a / h)


#: largest grid step accepted: the automatic refinement never goes above it; past ~88 the 8x
#: coarser hint grid overflowed e^h (1e3 and 1e300 raised OverflowError), and no loss needs such a grid
MAX_DISCRETIZATION = 64.0
