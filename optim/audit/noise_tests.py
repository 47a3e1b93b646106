"""Checks of the injected noise against the claimed std (from recorded releases).

If every recorded coordinate ``n_j`` of a release with claimed std ``s`` is N(0, s^2), then
``S = sum_j (n_j / s)^2`` is chi-square with k = (number of coordinates) degrees of freedom.
The test is two-sided: noise too small (privacy lost) and too large (utility lost) both fail.
The ratio ``rho = actual std / claimed std`` has the exact confidence interval
``[sqrt(S / q_hi), sqrt(S / q_lo)]`` with ``q`` the chi-square(k) quantiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from ...accountant.validation import InputError

__all__ = ["NoiseStdTest", "noise_std_test", "NoiseKSTest", "noise_ks_test"]


@dataclass(frozen=True)
class NoiseStdTest:
    statistic: float      # S
    dof: int              # k
    p_value: float        # two-sided
    ratio: float          # sqrt(S / k): estimated actual std / claimed std
    ratio_interval: tuple  # (low, high) at the confidence level
    level: float
    releases: int

    @property
    def passed(self) -> bool:
        return self.p_value >= self.level


def noise_std_test(releases, level: float = 1e-3) -> NoiseStdTest:
    """Chi-square test that the recorded noise has the claimed std (releases with std 0 skipped).

    ``level``: significance (default 1e-3: a correct implementation fails 1 run in 1000);
    the interval on the ratio is at confidence ``1 - level``.
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
class NoiseKSTest:
    p_values: tuple       # one per release (KS of noise/std against N(0, 1))
    level: float

    @property
    def min_p(self) -> float:
        return min(self.p_values)

    @property
    def passed(self) -> bool:
        """Bonferroni over the releases: every p-value >= level / (number of releases)."""
        return self.min_p >= self.level / len(self.p_values)


def noise_ks_test(releases, level: float = 1e-3) -> NoiseKSTest:
    """Per-release Kolmogorov-Smirnov tests of ``noise / std`` against N(0, 1) (std 0 skipped):
    catches a wrong noise SHAPE or a std that is right on average but wrong in some steps."""
    from scipy import stats        # imported on first use: ~0.6 s that every import of dpcalib.optim paid
    if not 0.0 < float(level) < 1.0:
        raise InputError(f"level={level!r} is not allowed: expected a number in (0, 1).")
    ps = []
    for r in releases:
        if r.std == 0.0:
            continue
        if r.noise is None:
            raise InputError("releases are not allowed: they were recorded without the noise (record_noise=False).")
        ps.append(float(stats.kstest((r.noise / r.std).numpy(), "norm").pvalue))
    if not ps:
        raise InputError("releases are not allowed: no release with a non-zero std was recorded.")
    return NoiseKSTest(tuple(ps), float(level))
