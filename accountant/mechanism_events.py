"""The non-Gaussian mechanism kinds: Laplace, discrete Laplace, discrete Gaussian, randomized response,
(eps, delta)-DP, zCDP, mixture of Gaussians and a non-private release.

Each is a frozen event of :mod:`.kinds` with its RDP curve where one is known and its exact dominating
pair (:mod:`.pld.lossdist`) where one is known; :meth:`~.kinds.EventKind.refuses` says which routes
certify it.  Every kind but randomized response holds under whatever neighbouring relation its
sensitivity (or guarantee) is stated for (``neighboring_relation = None``); randomized response
changes one record's bucket (replace-one), as dp-accounting's does.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import validation
from .events import REPLACE_ONE
from .kinds import EventKind, register_kind
from .pld.lossdist import FEW_ATOMS, FinitePair, LaplacePair, MadePair, eps_delta_pair, rr_pair
from .validation import InputError

__all__ = []


def laplace_rdp(orders, scale: float) -> np.ndarray:
    """RDP of the Laplace mechanism of scale ``b`` (over the L1 sensitivity): Mironov 2017, Prop. 6,
    ``1/(a-1) log(a/(2a-1) e^((a-1)/b) + (a-1)/(2a-1) e^(-a/b))`` (exact: the Laplace pair's Rényi divergence).

    Args:
        orders: orders > 1 (an array).
        scale: ``b``, > 0.

    Returns:
        A float array shaped like ``orders``.
    """
    a = np.asarray(orders, dtype=float)
    lam = 1.0 / scale
    t = np.logaddexp(np.log(a / (2 * a - 1)) + (a - 1) * lam, np.log((a - 1) / (2 * a - 1)) - a * lam)
    return np.clip(t / (a - 1), 0.0, lam)          # (<= eps(inf) = 1/b: round-off only)


@register_kind
@dataclass(frozen=True)
class LaplaceEvent(EventKind):
    """The Laplace mechanism: noise ``Lap(0, b C)`` on a query of L1 sensitivity ``C``.

    Attributes:
        noise_multiplier: ``b``, the noise scale over the L1 sensitivity, in (0, inf).
    """

    noise_multiplier: float

    CHECKED = (("noise_multiplier", validation.positive),)
    JSON_NAME = "laplace"
    DPA = ("LaplaceDpEvent", ("noise_multiplier",))
    WORDS = "{count} Laplace release(s), scale / L1 sensitivity {e.noise_multiplier:g}"

    @property
    def rdp_inf(self) -> float:
        """``1 / b``: the mechanism is (1/b)-DP."""
        return 1.0 / self.noise_multiplier

    def _rdp(self, orders):
        return laplace_rdp(orders, self.noise_multiplier)

    def pld_pairs(self, direction):
        """``(LaplacePair(b),)``: exact, symmetric (both directions).

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            A tuple of pairs.
        """
        return (LaplacePair(self.noise_multiplier),)



class _FiniteKind(EventKind):
    """A kind whose pair is a :class:`~.pld.lossdist.FinitePair`: its RDP is the pair's Rényi divergence.
    The pair is built once per event (the events are frozen; the routes, the total variation and the
    refusals each ask for it)."""

    def _pair(self):
        raise NotImplementedError

    @cached_property
    def _pairs(self) -> tuple:
        return (self._pair(),)

    def pld_pairs(self, direction):
        """``(the finite pair,)``: exact, symmetric.

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            A tuple of pairs.
        """
        return self._pairs

    def _rdp(self, orders):
        # (at most the pure-DP level, D_alpha <= D_inf: where a side's mass underflows -- a discrete Laplace of
        # eps 1e7 -- the divergence reads inf; raised by a few ulps for the level's own rounding)
        return np.minimum(self._pairs[0].renyi(orders), self.rdp_inf * (1.0 + 2.0 ** -50))

    def total_variation(self) -> float:
        """The pair's total variation (:meth:`~.kinds.EventKind.total_variation`, of its one pair).

        Returns:
            A float in [0, 1].
        """
        return min(1.0, self._pairs[0].total_variation())


@register_kind
@dataclass(frozen=True)
class DiscreteLaplaceEvent(_FiniteKind):
    """The discrete Laplace mechanism: integer noise with mass ``∝ e^(-a|x|)``, integer sensitivity ``s``.

    Attributes:
        noise_parameter: ``a``, in (0, inf).
        sensitivity: ``s``, an integer >= 1.
    """

    noise_parameter: float
    sensitivity: int = 1

    CHECKED = (("noise_parameter", validation.positive),
               ("sensitivity", lambda v, n: validation.integer(v, n, low=1, high=10 ** 6)))
    JSON_NAME = "discrete_laplace"
    DPA = ("DiscreteLaplaceDpEvent", ("noise_parameter", "sensitivity"))
    WORDS = "{count} discrete Laplace release(s), parameter {e.noise_parameter:g}, sensitivity {e.sensitivity}"

    @property
    def rdp_inf(self) -> float:
        """``a s``: the mechanism is (a s)-DP."""
        return self.noise_parameter * self.sensitivity

    def _pair(self):
        """:func:`_discrete_laplace_atoms`' pair (a :class:`~.pld.lossdist.MadePair` past a few atoms)."""
        args = (self.noise_parameter, self.sensitivity)
        if self.sensitivity + 1 > FEW_ATOMS:
            return MadePair(_discrete_laplace_atoms, args)
        return FinitePair(*(tuple(v) for v in _discrete_laplace_atoms(*args)))


def _discrete_laplace_atoms(a: float, s: int) -> tuple:
    """Atoms ``a(2x - s)``, x = 0..s: P = DLap(s), Q = DLap(0) (the end atoms hold the tails)."""
    x = np.arange(s + 1, dtype=float)
    c = math.tanh(a / 2.0)
    p = c * np.exp(-a * (s - x))
    q = c * np.exp(-a * x)
    tail = math.exp(-a * s) / (1.0 + math.exp(-a))
    p[0], q[0] = tail, 1.0 / (1.0 + math.exp(-a))
    p[-1], q[-1] = q[0], tail
    if s == 0:
        p[:], q[:] = 1.0, 1.0
    return a * (2 * x - s), p, q



@register_kind
@dataclass(frozen=True)
class DiscreteGaussianEvent(EventKind):
    """The discrete Gaussian mechanism: integer noise with mass ``∝ e^(-x^2 / (2 sigma^2))``, integer
    sensitivity ``s`` (Canonne, Kamath & Steinke 2020).

    Attributes:
        sigma: in (0, 1e4].
        sensitivity: ``s``, an integer in [1, 1e4].
    """

    sigma: float
    sensitivity: int = 1

    CHECKED = (("sigma", lambda v, n: validation.in_range(v, n, 0.0, 1e4, low_open=True)),
               ("sensitivity", lambda v, n: validation.integer(v, n, low=1, high=10 ** 4)))
    JSON_NAME = "discrete_gaussian"
    WORDS = "{count} discrete Gaussian release(s), sigma {e.sigma:g}, sensitivity {e.sensitivity}"

    @property
    def _point_mass(self) -> bool:
        """``2 sigma^2`` below the normal doubles (sigma under about 1e-154): the noise is 0 at every integer
        but 0 to double precision, the release is the query itself, and eps is inf on every route."""
        return 2.0 * self.sigma * self.sigma < sys.float_info.min

    def _rdp(self, orders):
        """``alpha s^2 / (2 sigma^2)``: CKS20 Prop. 5 (the discrete Gaussian is (s^2 / 2 sigma^2)-zCDP)."""
        if self._point_mass:
            return orders * math.inf
        return orders * self.sensitivity ** 2 / (2.0 * self.sigma ** 2)

    @property
    def rdp_linear(self) -> tuple:
        """``(s^2 / (2 sigma^2), 0)``: the RDP is linear in the order."""
        return (math.inf if self._point_mass else self.sensitivity ** 2 / (2.0 * self.sigma ** 2)), 0.0

    def pld_pairs(self, direction):
        """The pair on the integers within ``40 sigma + s`` of 0 (beyond: mass below 1e-300, charged
        at +inf under P).

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            A tuple of pairs.
        """
        if self._point_mass:             # P all at +inf loss (x = s), Q all at -inf (x = 0): total variation 1
            return (FinitePair((-math.inf, math.inf), (0.0, 1.0), (1.0, 0.0)),)
        return (MadePair(_discrete_gaussian_atoms, (self.sigma, self.sensitivity)),)

    def _dp_event(self, dpa):
        raise InputError(f"event={self!r} is not allowed: dp-accounting 0.6 has no discrete Gaussian event.")


def _discrete_gaussian_atoms(sigma: float, s: int) -> tuple:
    """The pair of :meth:`DiscreteGaussianEvent.pld_pairs`: the integers ``x`` within ``40 sigma + s`` of 0,
    loss ``(2 x s - s^2) / (2 sigma^2)``, P = N_Z(s, sigma^2), Q = N_Z(0, sigma^2), and P's mass beyond
    (below 1e-300) charged at loss +inf."""
    T = int(math.ceil(40.0 * sigma)) + s + 1
    x = np.arange(-T, T + s + 1, dtype=float)
    logw = -x * x / (2 * sigma * sigma)
    logz = float(np.logaddexp.reduce(logw))
    q = np.exp(logw - logz)
    p = np.exp(-(x - s) ** 2 / (2 * sigma * sigma) - logz)
    L = (2 * x * s - s * s) / (2 * sigma * sigma)
    return np.append(L, math.inf), np.append(p, 1e-300), np.append(q, 0.0)


@register_kind
@dataclass(frozen=True)
class RandomizedResponseEvent(_FiniteKind):
    """Randomized response on ``k`` buckets: the true bucket with probability ``1 - p``, else a uniform one
    (dp-accounting's ``RandomizedResponseDpEvent``); one record's bucket changes (replace-one).

    Attributes:
        noise_parameter: ``p``, in [0, 1] (0: non-private).
        num_buckets: ``k``, an integer >= 1.
    """

    noise_parameter: float
    num_buckets: int = 2

    CHECKED = (("noise_parameter", validation.probability),
               ("num_buckets", lambda v, n: validation.integer(v, n, low=1, high=10 ** 12)))
    JSON_NAME = "randomized_response"
    DPA = ("RandomizedResponseDpEvent", ("noise_parameter", "num_buckets"))
    neighboring_relation = REPLACE_ONE
    WORDS = "{count} randomized-response release(s), noise {e.noise_parameter:g}, {e.num_buckets} buckets"

    @cached_property
    def epsilon(self) -> float:
        """``log((1 - p + p/k) / (p/k))``: the pure-DP level (0 for one bucket, inf for ``p = 0``; computed
        once: the pair, the non-private check and the RDP each ask for it)."""
        p, k = self.noise_parameter, self.num_buckets
        if k == 1 or p == 1.0:
            return 0.0
        return math.inf if p == 0.0 else math.log1p(k * (1.0 - p) / p)

    @property
    def non_private(self) -> bool:
        """``p = 0`` with two or more buckets."""
        return self.epsilon == math.inf

    @property
    def rdp_inf(self) -> float:
        """:attr:`epsilon`."""
        return self.epsilon

    def _pair(self):
        if self.non_private:
            return FinitePair((math.inf,), (1.0,), (0.0,))
        p, k = self.noise_parameter, self.num_buckets
        return rr_pair(self.epsilon, (k - 2) * p / k if k > 1 else 1.0)



@register_kind
@dataclass(frozen=True)
class EpsilonDeltaEvent(_FiniteKind):
    """A mechanism known only to be ``(eps, delta)``-DP: its dominating pair is KOV15 Thm 2.1's.

    Attributes:
        epsilon: in [0, inf).
        delta: in [0, 1).
    """

    epsilon: float
    delta: float = 0.0

    CHECKED = (("epsilon", lambda v, n: validation.in_range(v, n, 0.0, math.inf, high_open=True)),
               ("delta", lambda v, n: validation.in_range(v, n, 0.0, 1.0, high_open=True)))
    JSON_NAME = "epsilon_delta"
    WORDS = "{count} ({e.epsilon:g}, {e.delta:g})-DP release(s)"

    @property
    def rdp_inf(self) -> float:
        """eps for pure DP, else inf."""
        return self.epsilon if self.delta == 0.0 else math.inf

    def _pair(self):
        return eps_delta_pair(self.epsilon, self.delta)

    def refuses(self, route):
        """RDP only for ``delta = 0`` (a positive delta has no Rényi bound); see :meth:`~.kinds.EventKind.refuses`.

        Args:
            route: ``"rdp"``, ``"pld"`` or ``"gdp"``.

        Returns:
            None, or the one-line refusal.
        """
        if route == "rdp" and self.delta > 0.0:
            return f"{self!r}: (eps, delta)-DP with delta > 0 has no RDP bound"
        return super().refuses(route)


@register_kind
@dataclass(frozen=True)
class ZCDPEvent(EventKind):
    """A ``(xi, rho)``-zCDP mechanism: RDP ``xi + rho alpha`` at every order (Bun & Steinke 2016, Def. 1.1).

    Attributes:
        rho: in [0, inf).
        xi: in [0, inf).
    """

    rho: float
    xi: float = 0.0

    CHECKED = (("rho", lambda v, n: validation.in_range(v, n, 0.0, math.inf, high_open=True)),
               ("xi", lambda v, n: validation.in_range(v, n, 0.0, math.inf, high_open=True)))
    JSON_NAME = "zcdp"
    DPA = ("ZCDpEvent", ("rho", "xi"))
    WORDS = "{count} ({e.xi:g}, {e.rho:g})-zCDP release(s)"

    def _rdp(self, orders):
        return self.xi + self.rho * orders

    @property
    def rdp_linear(self) -> tuple:
        """``(rho, xi)``: the RDP is linear in the order (the accountant optimises it over real orders)."""
        return self.rho, self.xi

    def total_variation(self) -> float:
        """Pinsker: ``sqrt(KL / 2)`` with ``KL <= xi + rho``.

        Returns:
            A float in [0, 1].
        """
        return min(1.0, math.sqrt((self.xi + self.rho) / 2.0))



@register_kind
@dataclass(frozen=True)
class MixtureOfGaussiansEvent(EventKind):
    """``N(0, sigma^2)`` against ``sum_i p_i N(c_i, sigma^2)`` (dp-accounting's mixture of Gaussians).

    Attributes:
        standard_deviation: ``sigma``, in [1e-150, 1e150].
        sensitivities: the ``c_i`` (a tuple of finite numbers).
        sampling_probs: the ``p_i`` (a tuple of probabilities summing to 1).
    """

    standard_deviation: float
    sensitivities: tuple
    sampling_probs: tuple

    JSON_NAME = "mixture_of_gaussians"
    WORDS = "{count} mixture-of-Gaussians release(s), sigma {e.standard_deviation:g}"
    NO_PLD = ("the PLD needs sensitivities of one sign (with mixed signs the mixture's privacy loss is not "
              "monotone; dp-accounting's PLD refuses them too)")
    #: add-or-remove: the mixture against N(0, sigma^2) and N(0, sigma^2) against the mixture differ
    both_directions = True

    def __post_init__(self):
        # (beyond [1e-150, 1e150] sigma^2 leaves the doubles: its RDP overflowed and its pair divided by 0)
        validation.in_range(self.standard_deviation, "standard_deviation", 1e-150, 1e150)
        c = tuple(validation.real(v, "sensitivities") for v in self.sensitivities)
        p = tuple(validation.probability(v, "sampling_probs") for v in self.sampling_probs)
        if len(c) != len(p) or not c or abs(sum(p) - 1.0) > 1e-9:
            raise InputError(f"sampling_probs={p!r} is not allowed: expected one probability per sensitivity, "
                             f"summing to 1.")
        object.__setattr__(self, "sensitivities", c)
        object.__setattr__(self, "sampling_probs", p)

    def _rdp(self, orders):
        """``1/(a-1) log sum_i p_i e^((a-1) a c_i^2 / (2 sigma^2))``: joint convexity of
        ``e^((a-1) D_a)`` over the mixture, in either argument (van Erven & Harremoës 2014, Thm 13)."""
        a = np.asarray(orders, dtype=float)[..., None]
        c2 = np.asarray(self.sensitivities) ** 2 / (2 * self.standard_deviation ** 2)
        with np.errstate(divide="ignore"):                  # (a probability of 0: log 0 = -inf, no term)
            t = np.log(np.asarray(self.sampling_probs)) + (a - 1) * a * c2
        return np.logaddexp.reduce(t, axis=-1) / (a[..., 0] - 1)

    def _one_sign(self):
        """The ``|c_i|`` with ``p_i > 0`` where those ``c_i`` share a sign (mirroring x changes no
        divergence), else None."""
        c = [v for v, p in zip(self.sensitivities, self.sampling_probs) if p > 0.0]
        if any(v > 0.0 for v in c) and any(v < 0.0 for v in c):
            return None
        return tuple(abs(v) for v in self.sensitivities)

    @property
    def use_probability(self) -> float:
        """The chance of a nonzero sensitivity: with the rest the two outputs coincide."""
        return min(1.0, math.fsum(p for c, p in zip(self.sensitivities, self.sampling_probs) if c != 0.0))

    def pld_pairs(self, direction):
        """``(MixturePair(sigma, |c|, p, direction),)``: the remove pair ``(sum_i p_i N(c_i, sigma^2),
        N(0, sigma^2))`` or the add pair (the two swapped) of dp-accounting's ``MixtureGaussianPrivacyLoss``
        (``privacy_loss_mechanism.py``, REMOVE / ADD; both directions are composed, as its PLD accountant
        does under add-or-remove); ``()`` where every sensitivity with positive probability is 0; None
        (refused, :attr:`NO_PLD`) for sensitivities of mixed signs.

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            A tuple of pairs, or None.
        """
        from .pld.mixture import MixturePair

        c = self._one_sign()
        if c is None:
            return None
        if not any(v > 0.0 and p > 0.0 for v, p in zip(c, self.sampling_probs)):
            return ()
        return (MixturePair.of(self.standard_deviation, c, self.sampling_probs, direction),)

    def total_variation(self) -> float:
        """``sum_i p_i erf(|c_i| / (2 sqrt(2) sigma))``: each component's Gaussian total variation, mixed
        (the total variation is jointly convex; exact for one nonzero sensitivity, the Poisson case).

        Returns:
            A float in [0, 1].
        """
        from scipy import special

        t = math.fsum(p * float(special.erf(abs(c) / (2.0 * math.sqrt(2.0) * self.standard_deviation)))
                      for c, p in zip(self.sensitivities, self.sampling_probs))
        return min(1.0, t)

    def _dp_event(self, dpa):
        return dpa.MixtureOfGaussiansDpEvent(self.standard_deviation, list(self.sensitivities),
                                             list(self.sampling_probs))


@register_kind
@dataclass(frozen=True)
class NonPrivateEvent(EventKind):
    """A release with no privacy guarantee: eps = inf on every route."""

    JSON_NAME = "non_private"
    DPA = ("NonPrivateDpEvent", ())
    WORDS = "{count} non-private release(s)"
    non_private = True
    rdp_inf = math.inf

    def _rdp(self, orders):
        return np.full(np.shape(orders), np.inf)

    def pld_pairs(self, direction):
        """All of P's mass at loss +inf.

        Args:
            direction: ``"remove"`` or ``"add"``.

        Returns:
            A tuple of pairs.
        """
        return (FinitePair((math.inf,), (1.0,), (0.0,)),)

    def total_variation(self) -> float:
        """No bound.

        Returns:
            1.0.
        """
        return 1.0

