"""Shuffled batches: each epoch a random permutation of the ``n`` records is cut into batches of
``b`` and every batch's clipped sum is released with Gaussian noise -- what
``DataLoader(shuffle=True)`` does.  No published theorem amplifies this by the sampling, so
dpcalib reports a bracket, never Poisson's eps.

Neighbouring relations (``C`` the clip norm, ``z`` the noise multiplier: noise std ``z C`` on the
sum of a batch):

* ``"zero-out"`` (the default): one record is replaced by a record that contributes nothing (a
  zero gradient).  Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha & Zhang, "How Private are
  DP-SGD Implementations?" (ICML 2024) and "Scalable DP-SGD: Shuffling vs. Poisson
  Subsampling" (NeurIPS 2024) analyse this relation.  The batch sum moves by at most ``C``.
* ``"replace-one"``: one record replaced by any other: the sum moves by at most ``2 C``.
* add/remove does not apply: removing a record shifts every later record of the permutation into
  another batch (and changes the number of batches), so the released sequences are not
  comparable step by step; it is refused.

**Upper end (certified).**  The permutation does not depend on the data.  Given it, the
differing record sits in exactly one batch of each epoch (in none when ``drop_last`` drops it),
the other steps' outputs have the same law under both datasets given the past, so the run is an
adaptive composition of at most ``E`` Gaussian releases with sensitivity ``Delta`` (``C`` or
``2 C``): exactly ``mu``-GDP with ``mu = sqrt(E) Delta / (z C)`` (Dong, Roth & Su 2022, Cor. 3.3).
Mixing over permutations, which have the same law under both datasets, keeps the bound (joint
convexity of the hockey-stick divergence).  So the upper end is the exact GDP eps of ``E``
releases -- no amplification is claimed.

**Lower end.**  Chua et al.'s construction, computed deterministically: under zero-out, every other
record contributes ``-C`` in one coordinate and the differing record ``+C`` (neighbour: ``0``), so
with a fixed batch size the batch holding it is shifted, in units of ``z C``, by ``2/z`` under one
dataset and ``1/z`` under the other: per epoch the pair is ``(MoG(2), MoG(1))`` with
``MoG(m) = (1/T) sum_t N(m e_t, z^2 I_T)`` (``T`` batches per epoch, a uniform position).  Under
replace-one the neighbour contributes ``-C``: ``(MoG(2), MoG(0))``.  Any test of these pairs is a
test of the mechanism, so their hockey-stick divergence bounds the true ``delta(eps)`` from
below.  We keep only the statistic ``max_t x_t`` (post-processing: still a lower bound), cut
its range into slices whose ``P`` and ``Q`` masses are differences of ``Phi((c - m)/z)
Phi(c/z)^(T-1)`` (closed form; a coarsening is post-processing too), give each slice its
privacy loss ``log(P/Q)`` rounded *down* to the grid (which lowers the profile pointwise), and
compose the ``E`` independent epochs with the same FFT as the PLD accountant, its round-off
bound taken off (:mod:`.pld`).  The eps read from that profile is a lower bound on the true eps
of shuffled DP-SGD for the worst-case model -- never a Monte-Carlo estimate, and never Chua et
al.'s "pessimistic" number, which is not a proven upper bound.

Batches: ``T = ceil(n / b)`` per epoch (the last one smaller when ``b`` does not divide ``n``),
``floor(n / b)`` with ``drop_last``.  The noise is added to each batch's sum whatever its size,
so a partial last batch does not change the upper end.  The lower bound looks only at the
``F = floor(n / b)`` full batches (dropping the short batch's output is post-processing): the
record is in one of them, uniformly, with probability ``F b / n`` and in none otherwise (in the
short batch, or dropped by ``drop_last``), so each epoch's pair is the mixture
``(F b/n) MoG_F(m) + (1 - F b/n) N(0, z^2 I_F)`` -- the same for both ways of handling the rest.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from . import validation
from .validation import InputError
from .caches import cached
from .gdp import gdp_epsilon

__all__ = ["check_relation"]

ZERO_OUT = "zero-out"
#: the relations shuffled batches are analysed under (add/remove is refused: see the module text)
SHUFFLE_RELATIONS = (ZERO_OUT, "replace-one")


def check_relation(relation) -> str:
    """The neighbouring relation of shuffled batches, checked (``SHUFFLE_RELATIONS``).

    Args:
        relation: ``"zero-out"`` or ``"replace-one"``.

    Returns:
        ``relation``, unchanged.

    Raises:
        InputError: if ``relation`` is add/remove (no step-by-step analysis applies) or unknown.
    """
    if relation in ("add/remove", "add-remove", "add_remove"):
        raise InputError(f"relation={relation!r} is not allowed for shuffled batches: removing a record moves "
                         "every later record of the permutation into another batch (and changes the number of "
                         "batches), so no step-by-step analysis applies; use 'zero-out' (the record replaced by one "
                         "that contributes nothing, Chua et al.'s relation) or 'replace-one'.")
    if relation not in SHUFFLE_RELATIONS:
        raise InputError(f"relation={relation!r} is not allowed for shuffled batches: expected one of "
                         f"{', '.join(SHUFFLE_RELATIONS)}.")
    return relation


def steps_per_epoch(n, batch_size, drop_last: bool = False) -> int:
    """Batches per epoch: ``ceil(n / b)``, or ``floor(n / b)`` with ``drop_last``.

    Args:
        n: the number of records, an integer >= 1.
        batch_size: the batch size ``b``, an integer in [1, n].
        drop_last: drop the last, partial batch.

    Returns:
        The number of batches (an int).

    Raises:
        InputError: if ``n`` or ``batch_size`` is not an integer >= 1, or ``batch_size > n``.
    """
    n = validation.integer(n, "n", low=1)
    b = validation.integer(batch_size, "batch_size", low=1)
    if b > n:
        raise InputError(f"batch_size={batch_size!r} is not allowed: expected an integer in [1, n={n}].")
    return n // b if drop_last else -(-n // b)


def _shift(relation: str) -> float:
    """Sensitivity of a batch sum in units of the clip norm."""
    return 1.0 if check_relation(relation) == ZERO_OUT else 2.0


def shuffle_mu(noise_multiplier, epochs, relation: str = ZERO_OUT) -> float:
    """``mu`` of the certified GDP bound: ``sqrt(E) Delta / (z C)`` (``Delta/C`` = 1 or 2).

    Args:
        noise_multiplier: ``z``, noise std / clip norm, in (0, inf).
        epochs: the number of epochs ``E``, an integer >= 1.
        relation: ``"zero-out"`` (``Delta/C = 1``) or ``"replace-one"`` (``Delta/C = 2``).

    Returns:
        ``mu`` (a float, > 0).

    Raises:
        InputError: if an argument is out of range or ``relation`` is not allowed.
    """
    z = validation.positive(noise_multiplier, "noise_multiplier")
    e = validation.integer(epochs, "epochs", low=1)
    return math.sqrt(e) * _shift(relation) / z


def shuffle_upper_epsilon(noise_multiplier, epochs, delta, relation: str = ZERO_OUT) -> float:
    """The certified upper end: exact GDP eps of ``E`` Gaussian releases (see the module text).

    Args:
        noise_multiplier: ``z``, noise std / clip norm, in (0, inf).
        epochs: the number of epochs, an integer >= 1.
        delta: the target delta, in (0, 1).
        relation: ``"zero-out"`` or ``"replace-one"``.

    Returns:
        The upper end of eps (a float).

    Raises:
        InputError: if an argument is out of range or ``relation`` is not allowed.
    """
    return gdp_epsilon(shuffle_mu(noise_multiplier, epochs, relation), validation.delta(delta))


# -- the lower end ------------------------------------------------------------------------------

def _log_cdf_and_sf_max(c: np.ndarray, z: float, T: int, m: float, pi: float):
    """``(log F, log S)`` of ``max_t x_t`` over the ``T`` full batches when the record is in one of
    them (uniformly) with probability ``1 - pi`` and in none of them otherwise:
    ``F = (1 - pi) A + pi B`` with ``A = Phi((c - m)/z) Phi(c/z)^(T-1)``, ``B = Phi(c/z)^T``, and
    ``S = 1 - F = (1 - pi)(1 - A) + pi (1 - B)``.

    Each part's tail ``1 - A`` is ``-expm1(log A)`` (``log A <= 0`` exactly, as a sum of
    ``log_ndtr`` values), so ``S`` never rounds through ``1 - F``: where ``F`` is within an ulp of
    1 the mixture ``log F`` combined by ``logaddexp`` may round to a tiny positive number, and a
    tail computed from it would take the log of a negative value."""
    base = (T - 1) * special.log_ndtr(c / z)
    la = special.log_ndtr((c - m) / z) + base
    with np.errstate(divide="ignore"):
        sa = np.log(-np.expm1(np.minimum(la, 0.0)))
        if pi <= 0.0:
            return np.minimum(la, 0.0), sa
        lb = special.log_ndtr(c / z) + base
        sb = np.log(-np.expm1(np.minimum(lb, 0.0)))
    lf = np.minimum(np.logaddexp(math.log1p(-pi) + la, math.log(pi) + lb), 0.0)
    ls = np.logaddexp(math.log1p(-pi) + sa, math.log(pi) + sb)
    return lf, ls


def _log_slices(lf: np.ndarray, ls: np.ndarray) -> np.ndarray:
    """``log`` of the masses of the slices ``(-inf, c_0], (c_0, c_1], ..., (c_n, inf)`` from
    ``log F`` and ``log S`` at the edges.  A slice's mass is ``F(c2) - F(c1)`` where ``F(c1) <=
    1/2`` and ``S(c1) - S(c2)`` above, so that the difference never cancels to rounding noise.
    Rounding can still make a difference non-positive (two edges closer than the functions'
    resolution): that slice gets mass 0 (log -inf), see :func:`_epoch_step` for why this keeps
    the bound."""
    with np.errstate(divide="ignore", invalid="ignore"):
        by_f = lf[1:] + np.log(-np.expm1(lf[:-1] - lf[1:]))      # F(c2) - F(c1)
        by_s = ls[:-1] + np.log(-np.expm1(ls[1:] - ls[:-1]))     # S(c1) - S(c2)
    mid = np.where(lf[:-1] <= math.log(0.5), by_f, by_s)
    mid = np.where(np.isnan(mid), -np.inf, mid)
    return np.concatenate(([lf[0]], mid, [ls[-1]]))


#: a slice's loss and mass are computed to ~1e-13 relative; these margins put the rounding on the
#: low side (loss lowered by LOSS_MARGIN before rounding down, masses scaled by 1 - MASS_MARGIN)
LOSS_MARGIN = 1e-9
MASS_MARGIN = 1e-9
#: the most slices of the max statistic's range (memory ~ 100 bytes each)
MAX_SLICES = 4_000_000


def _epoch_step(z: float, T: int, pi: float, hi_mean: float, lo_mean: float, h: float, E: int,
                log_tail: float):
    """One epoch of the max statistic as a lower PLD step (grid ``h``; masses under ``P``)."""
    from .pld.shared import Step

    # the cube range: below lo_c, P(max <= lo_c) <= e^log_tail; above hi_c, P(max > hi_c) <= e^log_tail
    lo_c = z * float(special.ndtri(math.exp(log_tail / T))) + min(lo_mean, 0.0)
    p_top = -math.expm1(math.log1p(-math.exp(log_tail)) / T)
    hi_c = hi_mean + z * float(-special.ndtri(p_top))
    gap = h * z * z / max(hi_mean - lo_mean, 1e-12)       # the loss moves by ~h between slices
    # any slicing is a coarsening (post-processing), so wider slices keep the bound, only less
    # tight: at small noise (z below ~0.05) at most MAX_SLICES of them
    n = int(math.ceil((hi_c - lo_c) / gap))
    if n > MAX_SLICES:
        n, gap = MAX_SLICES, (hi_c - lo_c) / MAX_SLICES
    edges = lo_c + gap * np.arange(n + 1)
    # slices, plus the two tails as slices of their own (each a coarsening: post-processing)
    log_p = _log_slices(*_log_cdf_and_sf_max(edges, z, T, hi_mean, pi))
    log_q = _log_slices(*_log_cdf_and_sf_max(edges, z, T, lo_mean, pi))
    # A slice with no P-mass contributes nothing.  A slice with P-mass but no representable
    # Q-mass (infinite loss), or with a mass that rounding made non-positive, is dropped: the
    # hockey-stick divergence is a sum over slices of (P_i - e^eps Q_i)_+ >= 0, and over the
    # composed epochs a sum over products of slices, so leaving terms out only lowers the profile
    # -- the eps read from it stays a lower bound.
    ok = np.isfinite(log_p) & np.isfinite(log_q)
    if not ok.any():
        raise InputError(f"noise_multiplier={z!r} is not allowed for the shuffle lower bound: no slice of the "
                         "max statistic has a representable mass at this noise.")
    loss = (log_p[ok] - log_q[ok]) - LOSS_MARGIN * (1.0 + np.abs(log_p[ok] - log_q[ok]))
    idx = np.floor(loss / h).astype(np.int64)               # rounded down: the profile only drops
    mass_p = np.exp(log_p[ok]) * (1.0 - MASS_MARGIN)
    i0 = int(idx.min())
    mass = np.bincount(idx - i0, weights=mass_p)
    return Step(i0, mass, 0.0, 0.0, E)


@cached(64)
def _lower_cached(z: float, T: int, pi: float, E: int, d: float, relation: str, h: float) -> float:
    from .pld.bracket import lower_one
    from .pld.shared import MEMORY_CAP

    hi_mean, lo_mean = (2.0, 1.0) if relation == ZERO_OUT else (2.0, 0.0)
    log_tail = math.log(1e-6 * d / E)
    step = _epoch_step(z, T, pi, hi_mean, lo_mean, h, E, log_tail)
    eps = lower_one([step], h, d, MEMORY_CAP)
    if eps is None:
        raise InputError(f"epochs={E!r} is not allowed for the shuffle lower bound at discretization {h:g}: the "
                         "composition does not fit the memory cap; use a coarser discretization.")
    return max(float(eps), 0.0)


def shuffle_lower_epsilon(noise_multiplier, n, batch_size, epochs, delta, relation: str = ZERO_OUT,
                          discretization: float = 1e-3) -> float:
    """A lower bound on the true eps(delta) of ``epochs`` epochs of shuffled batches of ``batch_size``
    out of ``n`` records (see the module text): no accountant may report less for shuffled DP-SGD
    in general.  The same with or without ``drop_last``.

    Args:
        noise_multiplier: ``z``, noise std / clip norm, in (0, inf).
        n: the number of records, an integer >= 1.
        batch_size: the batch size, an integer in [1, n].
        epochs: the number of epochs, an integer >= 1.
        delta: the target delta, in (0, 1).
        relation: ``"zero-out"`` or ``"replace-one"``.
        discretization: the loss grid step, in (0, inf).

    Returns:
        The lower bound on eps (a float, >= 0).

    Raises:
        InputError: if an argument is out of range or ``relation`` is not allowed, no slice of the
            max statistic has a representable mass at this noise, or the composition exceeds the
            memory cap.
    """
    z = validation.positive(noise_multiplier, "noise_multiplier")
    steps_per_epoch(n, batch_size)                          # validates n, batch_size
    F, r = divmod(int(n), int(batch_size))
    E = validation.integer(epochs, "epochs", low=1)
    d = validation.delta(delta)
    h = validation.positive(discretization, "discretization")
    return _lower_cached(z, F, r / int(n), E, d, check_relation(relation), h)


def shuffle_epsilon_bracket(noise_multiplier, n, batch_size, epochs, delta, relation: str = ZERO_OUT,
                            drop_last: bool = False):
    """``EpsilonBracket`` of shuffled batches: the lower bound above and the certified GDP upper end.

    Args:
        noise_multiplier, n, batch_size, epochs, delta, relation: as :func:`shuffle_lower_epsilon`.
        drop_last: drop the last, partial batch of each epoch (only the notes' step count changes).

    Returns:
        The :class:`~.pld.shared.EpsilonBracket` (``method="gdp"``, grid 1e-3, ``converged=True``).

    Raises:
        InputError: as :func:`shuffle_lower_epsilon` and :func:`shuffle_upper_epsilon`.
    """
    from .pld.shared import EpsilonBracket

    T = steps_per_epoch(n, batch_size, drop_last)
    up = shuffle_upper_epsilon(noise_multiplier, epochs, delta, relation)
    lo = shuffle_lower_epsilon(noise_multiplier, n, batch_size, epochs, delta, relation)
    mu = shuffle_mu(noise_multiplier, epochs, relation)
    notes = (f"upper: exact GDP of {epochs} Gaussian release(s), mu={mu:.12g} (no amplification by shuffling)",
             f"lower: Chua et al.'s max-statistic bound over {int(n) // int(batch_size)} full batches per epoch, "
             f"composed over {epochs} epoch(s) ({T} steps per epoch)")
    return EpsilonBracket(min(lo, up), up, validation.delta(delta), 1e-3, True, notes, "gdp")
