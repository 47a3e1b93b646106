"""Trade-off curves (f-DP, Dong, Roth & Su 2022): the whole claim of a calibration, not one (eps, delta).

For neighbouring datasets D, D' and a test that rejects "the output came from D'", the type I error
is ``alpha`` and the type II error ``beta``; a mechanism is f-DP when every test has
``beta >= f(alpha)``.  An audit measures (alpha, beta) points; a point whose confidence region lies
entirely below ``f`` refutes the claim.

* Full-batch Gaussian compositions are exactly ``mu``-GDP:
  ``f(alpha) = Phi(Phi^{-1}(1 - alpha) - mu)`` (Dong, Roth & Su 2022, Def. 2.7 and Cor. 3.3).
* Any other claim: the accountant's certified privacy profile ``delta(eps)`` (PLD upper bounds,
  :func:`.pld.pld_profile`) on a grid of eps.  A mechanism that is ``(eps, delta(eps))``-DP for every
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

__all__ = ["TradeOffCurve", "gdp_tradeoff", "profile_tradeoff", "claimed_tradeoff"]


def gdp_tradeoff(mu: float, alpha) -> np.ndarray:
    """``Phi(Phi^{-1}(1 - alpha) - mu)``: the trade-off curve of ``mu``-GDP."""
    m = validation.in_range(mu, "mu", 0.0, math.inf)
    a = np.clip(np.asarray(alpha, dtype=float), 0.0, 1.0)
    return special.ndtr(-special.ndtri(a) - m)     # Phi(Phi^-1(1 - a) - m); scipy.stats is slow to import


def profile_tradeoff(epsilons, deltas, alpha) -> np.ndarray:
    """The upper envelope over the grid of the (eps, delta(eps))-DP trade-off curves."""
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
    """A claimed trade-off curve: ``kind`` "gdp" (``mu``) or "profile" (``epsilons``, ``deltas``)."""

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
        return cls("gdp", mu=float(validation.in_range(mu, "mu", 0.0, math.inf)))

    @classmethod
    def from_profile(cls, epsilons, deltas) -> "TradeOffCurve":
        profile_tradeoff(epsilons, deltas, 0.5)            # validates
        return cls("profile", epsilons=tuple(float(x) for x in np.ravel(epsilons)),
                   deltas=tuple(float(x) for x in np.ravel(deltas)))

    @classmethod
    def epsilon_delta(cls, epsilon: float, delta: float) -> "TradeOffCurve":
        """The curve of one (eps, delta)-DP claim (all an (eps, delta) pair says)."""
        return cls.from_profile([validation.in_range(epsilon, "epsilon", 0.0, math.inf)], [validation.delta(delta)])

    def label(self) -> str:
        if self.kind == "gdp":
            return f"{self.mu:.4g}-GDP"
        if len(self.epsilons) == 1:
            return f"({self.epsilons[0]:.4g}, {self.deltas[0]:.3g})-DP"
        return f"certified profile at {len(self.epsilons)} eps"


def claimed_tradeoff(accountant, discretization: float = 1e-3, points: int = 256) -> TradeOffCurve:
    """The trade-off curve a composition certifies: exact GDP for full-batch Gaussian compositions,
    else the envelope of the PLD's certified profile on ``points`` values of eps in
    ``[0, eps(1e-12)]`` (eps(1e-12) from the accountant's own certified bound)."""
    if not accountant.events:
        return TradeOffCurve.gdp(0.0)
    if accountant.is_full_batch_gaussian:
        return TradeOffCurve.gdp(accountant.gdp_mu())
    from .pld import pld_profile

    n = validation.integer(points, "points", low=2)
    top = float(accountant.get_epsilon(1e-12, accountant="auto"))
    eps = np.linspace(0.0, max(top, 1e-6), n)
    return TradeOffCurve.from_profile(eps, pld_profile(accountant.events, eps, discretization))
