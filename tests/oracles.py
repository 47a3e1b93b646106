"""Independent reference implementations (mpmath, arbitrary precision) used only by the tests.

They are written from the papers' formulas, not from the code under test.
"""

import mpmath as mp


def wbk_thm9_gaussian(alpha: int, gamma, z, dps: int = 60):
    """DIFF2 Lemma B.7 / WBK19 Thm 9 with a Gaussian base eps(j) = j / (2 z^2), eps(inf) = inf."""
    with mp.workdps(dps):
        g = mp.mpf(gamma)
        z = mp.mpf(z)
        eps = lambda j: mp.mpf(j) / (2 * z * z)  # noqa: E731
        s = g ** 2 * mp.binomial(alpha, 2) * min(4 * (mp.e ** eps(2) - 1), mp.e ** eps(2) * 2)
        for j in range(3, alpha + 1):
            s += g ** j * mp.binomial(alpha, j) * mp.e ** ((j - 1) * eps(j)) * 2
        return mp.log(1 + s) / (alpha - 1)


def wbk_thm9_general(alpha: int, gamma, eps, eps_inf, dps: int = 60):
    """Lemma B.7 for an arbitrary base curve ``eps(j)`` and ``eps(inf)`` (mpmath)."""
    with mp.workdps(dps):
        g = mp.mpf(gamma)
        cap = lambda j: 2 if eps_inf == mp.inf else min(2, (mp.e ** mp.mpf(eps_inf) - 1) ** j)  # noqa: E731
        e2 = mp.mpf(eps(2))
        s = g ** 2 * mp.binomial(alpha, 2) * min(4 * (mp.e ** e2 - 1), mp.e ** e2 * cap(2))
        for j in range(3, alpha + 1):
            s += g ** j * mp.binomial(alpha, j) * mp.e ** ((j - 1) * mp.mpf(eps(j))) * cap(j)
        return mp.log(1 + s) / (alpha - 1)


def poisson_sgm_rdp(alpha, q, z, dps: int = 40):
    """Exact Poisson-subsampled Gaussian RDP by mpmath quadrature (Mironov et al. 2019, Sec. 3).

    A_alpha - 1 = E_{N(0,z^2)}[(1 + q w)^alpha - 1 - alpha q w],  w = exp((2x - 1)/(2 z^2)) - 1.
    """
    with mp.workdps(dps):
        a, q, z = mp.mpf(alpha), mp.mpf(q), mp.mpf(z)

        def f(x):
            t = q * mp.expm1((2 * x - 1) / (2 * z * z))
            return mp.npdf(x, 0, z) * ((1 + t) ** a - 1 - a * t)

        pts = sorted({-mp.inf, -30 * z, mp.mpf(0), 30 * z, a, a + 40 * z, mp.inf})
        return mp.log1p(mp.quad(f, pts)) / (a - 1)


def gdp_delta(eps, mu, dps: int = 60):
    """Balle & Wang 2018: delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)."""
    with mp.workdps(dps):
        e, m = mp.mpf(eps), mp.mpf(mu)
        return mp.ncdf(-e / m + m / 2) - mp.e ** e * mp.ncdf(-e / m - m / 2)


def gdp_epsilon(mu, delta, dps: int = 60):
    """The eps with delta(eps) = delta for mu-GDP: a bracketed root of :func:`gdp_delta` (mpmath)."""
    with mp.workdps(dps):
        d = mp.mpf(delta)
        if gdp_delta(0, mu, dps) <= d:
            return mp.mpf(0)
        lo, hi = mp.mpf(0), mp.mpf(1)
        while gdp_delta(hi, mu, dps) > d:
            lo, hi = hi, 2 * hi
        for _ in range(200):                       # bisection: delta(eps) is decreasing
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if gdp_delta(mid, mu, dps) > d else (lo, mid)
            if hi - lo < mp.mpf(10) ** (-dps // 2) * hi:
                break
        return hi


def _gauss_hockey(s, mu, dps: int = 60):
    """H_s(N(mu, 1) || N(0, 1)) for s > 0 (closed form, mpmath)."""
    with mp.workdps(dps):
        s, mu = mp.mpf(s), mp.mpf(mu)
        ls = mp.log(s)
        return mp.ncdf(-ls / mu + mu / 2) - s * mp.ncdf(-ls / mu - mu / 2)


def wor_profile(gamma, z, eps, direction, dps: int = 60):
    """delta(eps) of the remove pair (gamma N(1) + (1-gamma) N(0) || N(0)) or of its reverse
    (direction "add"), std z, from the two-point decomposition of the hockey-stick divergence
    (Balle, Barthe & Gaboardi 2018, Thm 2 / Thm 10) and the Gaussian closed form (mpmath)."""
    with mp.workdps(dps):
        g, t, mu = mp.mpf(gamma), mp.e ** mp.mpf(eps), 1 / mp.mpf(z)
        if direction == "remove":
            if t <= 1 - g:
                return 1 - t
            return g * _gauss_hockey((t - 1 + g) / g, mu, dps)
        c = 1 - t * (1 - g)
        if c <= 0:
            return mp.mpf(0)
        return c * _gauss_hockey(t * g / c, mu, dps)
