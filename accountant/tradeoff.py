"""Trade-off curves (f-DP, Dong, Roth & Su 2022): the whole claim of a calibration, not one (eps, delta).

For neighbouring datasets D, D' and a test that rejects "the output came from D'", the type I error
is ``alpha`` and the type II error ``beta``; a mechanism is f-DP when every test has
``beta >= f(alpha)``.  An audit measures (alpha, beta) points; a point whose confidence region lies
entirely below ``f`` refutes the claim.

* Full-batch Gaussian compositions are exactly ``mu``-GDP:
  ``f(alpha) = Phi(Phi^{-1}(1 - alpha) - mu)`` (Dong, Roth & Su 2022, Def. 2.7 and Cor. 3.3).
* Any other claim: the accountant's certified privacy profile ``delta(eps)`` (PLD upper bounds,
  :func:`.pld.queries.pld_profile`) on a grid of eps.  A mechanism that is ``(eps, delta(eps))``-DP for every
  eps of the grid is f-DP for the upper envelope
  ``f(alpha) = max_eps max{0, 1 - delta(eps) - e^eps alpha, e^-eps (1 - delta(eps) - alpha)}``
  (Dong, Roth & Su 2022, Prop. 2.12 and 2.4 -- each (eps, delta)-DP guarantee is f_{eps,delta}-DP,
  and f-DP for several f is f-DP for their maximum).  Upper bounds on delta and a finite grid
  both make this curve *lower* than the exact one: it is implied by the certified claim, so a
  measured point below it refutes what the calibration certified.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from .validation import InputError
from . import validation

__all__ = ["profile_tradeoff", "tpr_from_profiles"]


def gdp_tradeoff(mu: float, alpha) -> np.ndarray:
    """``Phi(Phi^{-1}(1 - alpha) - mu)``: the trade-off curve of ``mu``-GDP.

    Args:
        mu: the GDP parameter, in [0, inf].
        alpha: the type I error(s) (FPR), clipped to [0, 1].

    Returns:
        The type II error(s) ``f(alpha)``, shaped like ``alpha``.

    Raises:
        InputError: if ``mu`` is out of range.
    """
    m = validation.in_range(mu, "mu", 0.0, math.inf)
    a = np.clip(np.asarray(alpha, dtype=float), 0.0, 1.0)
    return special.ndtr(-special.ndtri(a) - m)     # Phi(Phi^-1(1 - a) - m); scipy.stats is slow to import


def profile_tradeoff(epsilons, deltas, alpha) -> np.ndarray:
    """The upper envelope over the grid of the (eps, delta(eps))-DP trade-off curves.

    Args:
        epsilons: the eps of the profile, each >= 0.
        deltas: ``delta(eps)`` at each eps, in [0, 1] (as many as ``epsilons``).
        alpha: the type I error(s) (FPR), clipped to [0, 1].

    Returns:
        The type II error(s), shaped like ``alpha``.

    Raises:
        InputError: if the arrays are empty, of different sizes, or hold a negative eps or a delta
            outside [0, 1].
    """
    e = np.asarray(epsilons, dtype=float).reshape(-1, 1)
    d = np.asarray(deltas, dtype=float).reshape(-1, 1)
    if e.shape != d.shape or e.size == 0 or np.any(e < 0) or np.any((d < 0) | (d > 1)):
        raise InputError("epsilons, deltas are not allowed: expected equally long, non-empty arrays with "
                         "eps >= 0 and delta in [0, 1].")
    a = np.clip(np.asarray(alpha, dtype=float), 0.0, 1.0)
    flat = a.reshape(1, -1)
    with np.errstate(over="ignore"):
        f = np.maximum(np.maximum(0.0, 1.0 - d - np.exp(e) * flat), np.exp(-e) * (1.0 - d - flat))
    return f.max(axis=0).reshape(a.shape)


@dataclass(frozen=True)
class TradeOffCurve:
    """A claimed trade-off curve: ``kind`` "gdp" (``mu``) or "profile" (``epsilons``, ``deltas``).

    Calling the curve on type I errors ``alpha`` returns its type II errors.

    Attributes:
        kind: ``"gdp"`` or ``"profile"``.
        mu: the GDP parameter (``kind="gdp"``), else None.
        epsilons: the profile's eps (``kind="profile"``).
        deltas: the profile's deltas at ``epsilons`` (``kind="profile"``).
    """

    kind: str
    mu: float | None = None
    epsilons: tuple = ()
    deltas: tuple = ()

    def __call__(self, alpha) -> np.ndarray:
        if self.kind == "gdp":
            return gdp_tradeoff(self.mu, alpha)
        return profile_tradeoff(self.epsilons, self.deltas, alpha)

    @classmethod
    def gdp(cls, mu: float) -> "TradeOffCurve":
        """The curve of ``mu``-GDP.

        Args:
            mu: the GDP parameter, in [0, inf].

        Returns:
            The :class:`TradeOffCurve`.

        Raises:
            InputError: if ``mu`` is out of range.
        """
        return cls("gdp", mu=float(validation.in_range(mu, "mu", 0.0, math.inf)))

    @classmethod
    def from_profile(cls, epsilons, deltas) -> "TradeOffCurve":
        """The envelope curve of a privacy profile ``(eps_i, delta_i)``.

        Args:
            epsilons: the eps of the profile, each >= 0.
            deltas: ``delta(eps)`` at each eps, in [0, 1].

        Returns:
            The :class:`TradeOffCurve`.

        Raises:
            InputError: as :func:`profile_tradeoff`.
        """
        profile_tradeoff(epsilons, deltas, 0.5)            # validates
        return cls("profile", epsilons=tuple(float(x) for x in np.ravel(epsilons)),
                   deltas=tuple(float(x) for x in np.ravel(deltas)))

    @classmethod
    def epsilon_delta(cls, epsilon: float, delta: float) -> "TradeOffCurve":
        """The curve of one (eps, delta)-DP claim (all an (eps, delta) pair says).

        Args:
            epsilon: the claim's eps, in [0, inf].
            delta: the claim's delta, in (0, 1).

        Returns:
            The :class:`TradeOffCurve`.

        Raises:
            InputError: if ``epsilon`` or ``delta`` is out of range.
        """
        return cls.from_profile([validation.in_range(epsilon, "epsilon", 0.0, math.inf)], [validation.delta(delta)])

    def label(self) -> str:
        """A short name of the curve, for plots and tables.

        Returns:
            The label (a str), e.g. ``"1.2-GDP"`` or ``"(1, 1e-05)-DP"``.
        """
        if self.kind == "gdp":
            return f"{self.mu:.4g}-GDP"
        if len(self.epsilons) == 1:
            return f"({self.epsilons[0]:.4g}, {self.deltas[0]:.3g})-DP"
        return f"certified profile at {len(self.epsilons)} eps"


def claimed_tradeoff(accountant, discretization: float = 1e-3, points: int = 256) -> TradeOffCurve:
    """The trade-off curve a composition certifies: exact GDP for full-batch Gaussian compositions,
    else the envelope of the PLD's certified profile on ``points`` values of eps in
    ``[0, eps(1e-12)]`` (eps(1e-12) from the accountant's own certified bound).

    Args:
        accountant: the :class:`~dpcalib.accountant.PrivacyAccountant` of the composition.
        discretization: the PLD grid step of the profile.
        points: the number of eps values, an integer >= 2.

    Returns:
        The :class:`TradeOffCurve` (``0``-GDP for no events).

    Raises:
        InputError: if ``points`` or ``discretization`` is out of range, or the profile's
            composition exceeds the memory cap.
    """
    if not accountant.events:
        return TradeOffCurve.gdp(0.0)
    if accountant.is_full_batch_gaussian:
        return TradeOffCurve.gdp(accountant.gdp_mu())
    from .pld import pld_profile

    n = validation.integer(points, "points", low=2)
    top = float(accountant.get_epsilon(1e-12, accountant="auto"))
    eps = np.linspace(0.0, max(top, 1e-6), n)
    return TradeOffCurve.from_profile(eps, pld_profile(accountant.events, eps, discretization))


# -- attack risk: the largest true-positive rate of a membership test at a false-positive rate ----
#
# For a dominating pair (P, Q) -- P the outputs with the record, Q without -- any test that says
# "member" on a set S has TPR = P(S) and FPR = Q(S), and P(S) <= e^eps Q(S) + delta(eps) for EVERY
# real eps.  So TPR(a) <= inf_eps e^eps a + delta(eps) = 1 - f(a), f the pair's trade-off curve
# (the infimum is attained: Neyman-Pearson; Dong, Roth & Su 2022, Prop. 2.12).  Negative eps
# matter (they give the bound at large a): delta_PQ(-e) = 1 - e^-e + e^-e delta_QP(e), the
# reverse direction's profile at e >= 0.  Upper bounds on delta at a subset of eps only make the
# infimum larger: the TPR reported is never below the truth.

def gdp_tpr(mu: float, fpr) -> np.ndarray:
    """``Phi(Phi^-1(a) + mu)``: the largest TPR at FPR ``a`` under ``mu``-GDP (exact).

    Args:
        mu: the GDP parameter, in [0, inf].
        fpr: the false-positive rate(s), in [0, 1].

    Returns:
        The TPR(s), shaped like ``fpr``.
    """
    return 1.0 - gdp_tradeoff(mu, fpr)


def gdp_advantage(mu: float) -> float:
    """``2 Phi(mu/2) - 1``: the largest TPR - FPR under ``mu``-GDP (= delta(0)).

    Args:
        mu: the GDP parameter, in [0, inf].

    Returns:
        The advantage (a float in [0, 1]).
    """
    m = validation.in_range(mu, "mu", 0.0, math.inf)
    return float(2.0 * special.ndtr(m / 2.0) - 1.0)


def _fprs(fprs) -> np.ndarray:
    a = np.atleast_1d(np.asarray(fprs, dtype=float))
    if a.ndim != 1 or a.size == 0 or not np.all((a >= 0.0) & (a <= 1.0)):
        raise InputError(f"fprs={fprs!r} is not allowed: expected false-positive rates in [0, 1].")
    return a


def tpr_from_profiles(profiles, fprs) -> np.ndarray:
    """Upper bounds on the TPR at each FPR from certified upper profiles on ``eps >= 0``:
    ``profiles`` is ``[(eps, delta), ...]``, one pair per direction; with two directions the
    second is the first's reverse (Poisson: remove, add), with one the pair is symmetric.
    Clipped to ``[a, 1]`` (a test that ignores the output reaches TPR = FPR).

    Args:
        profiles: a list of one or two ``(eps, delta)`` pairs of arrays (eps increasing from 0).
        fprs: the false-positive rates, in [0, 1].

    Returns:
        A float array of TPR bounds, one per FPR.

    Raises:
        InputError: if ``fprs`` is not a non-empty 1-d array of rates in [0, 1].
    """
    a = _fprs(fprs)
    out = np.zeros(a.size)
    for i, (e, d) in enumerate(profiles):
        er, dr = profiles[1 - i] if len(profiles) == 2 else (e, d)
        e, d, er, dr = (np.asarray(x, dtype=float) for x in (e, d, er, dr))
        # each eps of a profile gives a bound by itself, so the minimum over the eps <= E only is
        # a bound too, and loses nothing: beyond -log(a), e^eps a + delta > 1 (the TPR is clipped
        # to 1); beyond PROFILE_EPS_MAX, 1 - e^-eps (...) rounds to 1 (a profile at eps ~ 6e4 has
        # millions of points: the report's attack risk took 70 s over them)
        jr = int(np.searchsorted(er, PROFILE_EPS_MAX, side="right"))
        er, dr = er[:jr], dr[:jr]
        for k, ak in enumerate(a):
            if ak <= 0.0:
                t1 = float(d[-1])                   # eps -> infinity: the mass that no test can hide
            else:
                j = int(np.searchsorted(e, max(-math.log(ak), 0.0), side="right")) + 1
                t1 = float(np.min(np.exp(np.minimum(e[:j] + math.log(ak), 700.0)) + d[:j]))
            # eps = -e < 0 through the reverse direction: 1 - e^-e (1 - a - delta_rev(e))
            t2 = float(np.min(1.0 - np.exp(-er) * (1.0 - ak - dr))) if er.size else 1.0
            out[k] = max(out[k], min(t1, t2))
    return np.clip(np.maximum(out, a), 0.0, 1.0)


#: the largest eps of a profile :func:`tpr_from_profiles` reads for the reverse term
#: ``1 - e^-eps (1 - a - delta)``: beyond it ``e^-eps`` is below 2^-60 and the term rounds to 1
PROFILE_EPS_MAX = 42.0


#: grid of the attack-risk profiles: finer than dp-accounting's default (1e-4), so that the certified
#: TPR is at or below the one its pessimistic PLD implies (tests/test_report.py); coarsened 4x at a
#: time when a composition does not fit the memory cap
RISK_DISCRETIZATION = 5e-5


def _tradeoff_source(accountant, discretization):
    if accountant.is_full_batch_gaussian:
        return ("gdp", accountant.gdp_mu()) if accountant.events else ("gdp", 0.0)
    from .pld import pld_upper_profiles

    h = validation.positive(discretization, "discretization")
    while True:
        try:
            return "profiles", pld_upper_profiles(accountant.events, h)
        except InputError:
            if h >= 0.05:
                raise
            h *= 4.0


def certified_tpr(accountant, fprs, discretization: float = RISK_DISCRETIZATION) -> np.ndarray:
    """The largest membership-inference TPR at each FPR that the accountant's events allow,
    from the certified side (never below the truth for these dominating pairs): exact for
    full-batch Gaussian compositions (``Phi(Phi^-1(a) + mu)``), else from the PLD's certified
    upper profiles of both directions, over all real eps (:func:`tpr_from_profiles`).

    Args:
        accountant: the :class:`~dpcalib.accountant.PrivacyAccountant` of the composition.
        fprs: the false-positive rates, in [0, 1].
        discretization: the PLD grid step (coarsened 4x at a time up to 0.05 when over the memory cap).

    Returns:
        A float array of TPR bounds, one per FPR.

    Raises:
        InputError: if ``fprs`` or ``discretization`` is out of range, or no grid fits the memory cap.
    """
    a = _fprs(fprs)
    kind, src = _tradeoff_source(accountant, discretization)
    return gdp_tpr(src, a) if kind == "gdp" else tpr_from_profiles(src, a)


def certified_advantage(accountant, discretization: float = RISK_DISCRETIZATION) -> float:
    """The largest TPR - FPR of any membership test: ``delta(0)`` of the worse direction (the
    total-variation distance of the pair), from the certified side.

    Args:
        accountant: the :class:`~dpcalib.accountant.PrivacyAccountant` of the composition.
        discretization: the PLD grid step, as for :func:`certified_tpr`.

    Returns:
        The advantage (a float in [0, 1]).

    Raises:
        InputError: if ``discretization`` is out of range, or no grid fits the memory cap.
    """
    kind, src = _tradeoff_source(accountant, discretization)
    if kind == "gdp":
        return gdp_advantage(src)
    return float(max(d[0] for e, d in src))


def attack_risk(accountant, fprs, discretization: float = RISK_DISCRETIZATION):
    """``(tpr, advantage, mu)`` from ONE composition: the certified TPR at each FPR (as
    :func:`certified_tpr`), the advantage (as :func:`certified_advantage`) and the GDP ``mu``
    where the composition is exactly GDP (else None).

    Args:
        accountant: the :class:`~dpcalib.accountant.PrivacyAccountant` of the composition.
        fprs: the false-positive rates, in [0, 1].
        discretization: the PLD grid step, as for :func:`certified_tpr`.

    Returns:
        A tuple ``(tpr, advantage, mu)``: the TPR array, a float, and a float or None.

    Raises:
        InputError: if ``fprs`` or ``discretization`` is out of range, or no grid fits the memory cap.
    """
    a = _fprs(fprs)
    kind, src = _tradeoff_source(accountant, discretization)
    if kind == "gdp":
        return gdp_tpr(src, a), gdp_advantage(src), float(src)
    return tpr_from_profiles(src, a), float(max(d[0] for e, d in src)), None
