"""Checks of the injected noise against the claimed std (from recorded releases).

If every recorded coordinate ``n_j`` of a release with claimed std ``s`` is N(0, s^2), then
``S = sum_j (n_j / s)^2`` is chi-square with k = (number of coordinates) degrees of freedom.
The test is two-sided: noise too small (privacy lost) and too large (utility lost) both fail.
The ratio ``rho = actual std / claimed std`` has the exact confidence interval
``[sqrt(S / q_hi), sqrt(S / q_lo)]`` with ``q`` the chi-square(k) quantiles.

The std test sees the second moment only, and a per-release Kolmogorov-Smirnov test sees one
release's few coordinates: Laplace noise at the claimed std passes both.  :func:`noise_pooled_test`
pools every recorded coordinate of every release (``n / s`` is N(0, 1) for all of them) into one
Kolmogorov-Smirnov test, whose power follows from the Dvoretzky-Kiefer-Wolfowitz inequality with
Massart's constant, ``P(sup |F_N - F| > e) <= 2 exp(-2 N e^2)``: at level ``alpha`` it rejects when
``D_N > e_alpha = sqrt(ln(2 / alpha) / (2 N))``, and any noise whose distribution is at
Kolmogorov distance ``D >= e_alpha + e_beta`` from N(0, 1) is flagged with probability at least
``1 - beta``.  :func:`noise_ks_test` runs it at half its level: with 200 draws of 200 coordinates,
alpha = 5e-4 and beta = 1e-3, that is ``D >= 0.020``:
Laplace (0.062), uniform (0.057) and the mixture 0.5 N(-0.8 s, (0.6 s)^2) + 0.5 N(0.8 s, (0.6 s)^2)
(0.046), all at the claimed std s, are caught.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from ...accountant.validation import InputError

__all__ = []


@dataclass(frozen=True)
class NoiseStdTest:
    """The chi-square test of the recorded noise against the claimed std (:func:`noise_std_test`).

    Attributes:
        statistic: ``S = sum_j (n_j / s)^2`` over every recorded coordinate.
        dof: k, the number of coordinates (the degrees of freedom).
        p_value: the two-sided p-value, in [0, 1].
        ratio: ``sqrt(S / k)``, the estimated actual std / claimed std.
        ratio_interval: ``(low, high)`` on the ratio at confidence ``1 - level``.
        level: the test's level: flagged below it.
        releases: the number of releases tested (std 0 skipped).
    """
    statistic: float      # S
    dof: int              # k
    p_value: float        # two-sided
    ratio: float          # sqrt(S / k): estimated actual std / claimed std
    ratio_interval: tuple  # (low, high) at the confidence level
    level: float
    releases: int

    @property
    def passed(self) -> bool:
        """Is ``p_value >= level``?"""
        return self.p_value >= self.level


def noise_std_test(releases, level: float = 1e-3) -> NoiseStdTest:
    """Chi-square test that the recorded noise has the claimed std (releases with std 0 skipped).

    ``level``: significance (default 1e-3: a correct implementation fails 1 run in 1000);
    the interval on the ratio is at confidence ``1 - level``.

    Args:
        releases: recorded :class:`~dpcalib.optim.algorithms.noise.Release` objects, with their noise.
        level: the significance, in (0, 1).

    Returns:
        A :class:`NoiseStdTest`.

    Raises:
        InputError: if ``level`` is outside (0, 1), a release with nonzero std was recorded without
            its noise, or no release has a nonzero std.
    """
    from scipy import stats        # imported on first use: ~0.6 s that every import of dpcalib.optim paid
    if not 0.0 < float(level) < 1.0:
        raise InputError(f"level={level!r} is not allowed: expected a number in (0, 1).")
    S, k, m = 0.0, 0, 0
    for r in releases:
        if r.std == 0.0:
            continue
        if r.noise is None:
            raise InputError("releases are not allowed: they were recorded without the noise (record_noise=False).")
        S += float(torch.sum((r.noise / r.std) ** 2))
        k += r.noise.numel()
        m += 1
    if k == 0:
        raise InputError("releases are not allowed: no release with a non-zero std was recorded.")
    cdf = float(stats.chi2.cdf(S, k))
    p = min(1.0, 2.0 * min(cdf, float(stats.chi2.sf(S, k))))
    lo, hi = stats.chi2.ppf(level / 2, k), stats.chi2.isf(level / 2, k)
    return NoiseStdTest(S, k, p, math.sqrt(S / k), (math.sqrt(S / hi), math.sqrt(S / lo)), float(level), m)


@dataclass(frozen=True)
class NoisePooledTest:
    """One Kolmogorov-Smirnov test of every recorded coordinate (``noise / std``) against N(0, 1).

    Attributes:
        statistic: D_N, the largest distance between the pooled empirical CDF and the normal CDF.
        draws: N, the number of coordinates pooled.
        p_value: the KS p-value, in [0, 1].
        level: the test's level: flagged below it.
        power: the probability of flagging noise at distance ``detectable`` or more.
        detectable: ``e_alpha + e_beta`` (see the module text).
        releases: the number of releases pooled.
    """

    statistic: float      # D_N, the largest distance between the pooled empirical CDF and Phi
    draws: int            # N, the coordinates pooled
    p_value: float
    level: float
    power: float          # the probability of flagging noise at distance `detectable` or more
    detectable: float     # e_alpha + e_beta (module text)
    releases: int

    @property
    def passed(self) -> bool:
        """Is ``p_value >= level``?"""
        return self.p_value >= self.level


def _pooled(releases) -> list:
    """``noise / std`` of every release with a non-zero std (float64 numpy arrays, one per release)."""
    parts = []
    for r in releases:
        if r.std == 0.0:
            continue
        if r.noise is None:
            raise InputError("releases are not allowed: they were recorded without the noise (record_noise=False).")
        parts.append((r.noise.reshape(-1).to(torch.float64) / r.std).numpy())
    if not parts:
        raise InputError("releases are not allowed: no release with a non-zero std was recorded.")
    return parts


def noise_pooled_test(releases, level: float = 1e-3, power: float = 0.999) -> NoisePooledTest:
    """Kolmogorov-Smirnov test of all recorded noise coordinates, pooled, against N(0, 1).

    Args:
        releases: recorded :class:`~dpcalib.optim.algorithms.noise.Release` objects (std 0 skipped).
        level: significance alpha, in (0, 1) (a correct sampler fails one run in 1/alpha).
        power: 1 - beta, in (0, 1), for the ``detectable`` distance (see the module text).

    Returns:
        :class:`NoisePooledTest`: the statistic, its p-value and the smallest Kolmogorov distance
        from N(0, 1) that the test catches with probability ``power``.

    Raises:
        InputError: if a level or power is outside (0, 1), a release with nonzero std was recorded
            without its noise, or no release has a nonzero std.
    """
    import numpy as np
    from scipy import stats

    for name, v in (("level", level), ("power", power)):
        if not 0.0 < float(v) < 1.0:
            raise InputError(f"{name}={v!r} is not allowed: expected a number in (0, 1).")
    parts = _pooled(releases)
    z = np.concatenate(parts)
    res = stats.kstest(z, "norm")
    n = z.size
    detect = math.sqrt(math.log(2.0 / level) / (2 * n)) + math.sqrt(math.log(2.0 / (1.0 - power)) / (2 * n))
    return NoisePooledTest(float(res.statistic), int(n), float(res.pvalue), float(level), float(power), detect,
                           len(parts))


@dataclass(frozen=True)
class NoiseKSTest:
    """Per-release Kolmogorov-Smirnov tests of the noise and their pooled test (:func:`noise_ks_test`).

    Attributes:
        p_values: one KS p-value per release (``noise / std`` against N(0, 1)).
        level: the family's significance.
        pooled: the :class:`NoisePooledTest` of every coordinate of every release, or None.
    """
    p_values: tuple       # one per release (KS of noise/std against N(0, 1))
    level: float
    pooled: NoisePooledTest | None = None    # every coordinate of every release in one test

    @property
    def min_p(self) -> float:
        """The smallest per-release p-value."""
        return min(self.p_values)

    @property
    def passed(self) -> bool:
        """Bonferroni: the pooled test at level / 2 (its own ``level``) and every per-release p-value >=
        level / (2 x number of releases) -- level / releases without a pooled test."""
        if self.pooled is None:
            return self.min_p >= self.level / len(self.p_values)
        return self.min_p >= self.level / (2 * len(self.p_values)) and self.pooled.passed


def noise_ks_test(releases, level: float = 1e-3) -> NoiseKSTest:
    """Per-release Kolmogorov-Smirnov tests of ``noise / std`` against N(0, 1), and their pooled test.

    Std 0 releases are skipped; the pooled test is :func:`noise_pooled_test`.  Together they catch a
    wrong noise SHAPE or a std that is right on average but wrong in some steps.

    Args:
        releases: recorded releases (with their noise).
        level: the family's significance, in (0, 1) (Bonferroni over the releases and the pooled test).

    Returns:
        :class:`NoiseKSTest`.

    Raises:
        InputError: if ``level`` is outside (0, 1), a release with nonzero std was recorded without
            its noise, or no release has a nonzero std.
    """
    from scipy import stats        # imported on first use: ~0.6 s that every import of dpcalib.optim paid
    if not 0.0 < float(level) < 1.0:
        raise InputError(f"level={level!r} is not allowed: expected a number in (0, 1).")
    ps = [float(stats.kstest(z, "norm").pvalue) for z in _pooled(releases)]
    return NoiseKSTest(tuple(ps), float(level), noise_pooled_test(releases, level / 2))
