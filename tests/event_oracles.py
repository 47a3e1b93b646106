"""Closed forms for the non-Gaussian kinds (issue 74, acceptance 2): the oracles dpcalib's brackets are
held to.  Every one is delta(eps) of the k-fold composition, computed exactly (mpmath at high precision,
or sums of non-negative terms), so that ``lower <= eps <= upper`` reads as
``delta(upper) <= target <= delta(lower)``.

k-fold Laplace (scale b, sensitivity 1, ``lam = 1/b``) has three oracles.  Under P each step's loss is
``lam U``, U in [-1, 1] with atoms 1/2 at +1 and ``e^-lam / 2`` at -1 and density
``(lam/4) e^(-lam (1-u)/2)`` on (-1, 1): that is ``e^(lam u/2)`` times the symmetric measure
``mu = e^(-lam/2) (Rad + (lam/2) Unif(-1, 1))`` (Rad: +-1 with probability 1/2 each; Unif(-1, 1): density
1/2).  So the sum S of k steps has P-law ``e^(lam s/2) mu^{*k}(ds)``, Q-law ``e^(-lam s/2) mu^{*k}(ds)``, and

    delta(eps) = integral over s > eps/lam of (e^(lam s/2) - e^eps e^(-lam s/2)) mu^{*k}(ds),

whose Laplace transform in eps gives the Bromwich integral of :func:`laplace_delta_fourier`.

* :func:`laplace_delta_cubic`: the closed form per (coins up, steps past 1), O(k^3) mpmath terms with
  cancellation; k <= ~10 (the cross-check of the other two).
* :func:`laplace_profile`: mu^{*k} itself, its density as polynomials on unit intervals in the Bernstein
  basis (no cancellation), O(k^3) float operations; k <= ~300.
* :func:`laplace_delta_fourier`: the Bromwich integral at the saddle point, by the trapezoid rule with
  rigorous bounds on both errors, mpmath at 30 digits; k >= ~1000 (its tail bound needs k large).
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
from scipy import special, stats


def _lower_gamma(r: int, z):
    """gamma(r, z) = (r-1)! (1 - e^-z sum_{i<r} z^i / i!) for integer r (entire in z)."""
    s, term = mp.mpf(0), mp.mpf(1)
    for i in range(r):
        s += term
        term = term * z / (i + 1)
    return mp.factorial(r - 1) * (1 - mp.exp(-z) * s)


def _int_power_exp(a, X, r: int):
    """int_0^X s^(r-1) e^(a s) ds."""
    return (-a) ** (-r) * _lower_gamma(r, -a * X)


def laplace_delta_cubic(k: int, b: float, eps: float, dps: int = 80) -> float:
    """delta(eps) of k Laplace releases of scale b (sensitivity 1), exactly: O(k^3) mpmath terms whose
    alternating sums cancel (``dps`` must exceed the digits lost, about k), so for small k only.

    Under P each step's loss is ``lam V`` (``lam = 1/b``), ``V = 1 - 2 B min(E, 1)`` with ``B`` a fair
    coin and ``E ~ Exp(lam)``; so ``S = sum V = k - 2 (m + t)``: ``n`` coins up, ``m`` of their ``E``
    past 1, the other ``r = n - m`` summing to ``t`` with density ``lam^r e^(-lam t) IH_r(t)`` (IH_r:
    the Irwin-Hall density of r uniforms on [0, 1]).  ``delta = E_P[(1 - e^(eps - lam S))_+]``, each
    piece integrated in closed form.
    """
    with mp.workdps(dps):
        lam, e = mp.mpf(1) / mp.mpf(b), mp.mpf(eps)
        c = (k - e / lam) / 2                      # lam S > eps  <=>  m + t < c
        total = mp.mpf(0)
        for n in range(k + 1):
            wn = mp.binomial(k, n) / mp.mpf(2) ** k
            for m in range(n + 1):
                if m >= c:
                    break
                r = n - m
                w = wn * mp.binomial(n, m) * mp.exp(-lam * m)
                A = mp.exp(e - lam * k + 2 * lam * m)
                if r == 0:
                    total += w * (1 - A)
                    continue
                U = min(c - m, r)
                s = mp.mpf(0)
                for j in range(r + 1):
                    if j >= U:
                        break
                    X = U - j
                    coef = (-1) ** j * mp.binomial(r, j) / mp.factorial(r - 1)
                    s += coef * (mp.exp(-lam * j) * _int_power_exp(-lam, X, r)
                                 - A * mp.exp(lam * j) * _int_power_exp(lam, X, r))
                total += w * lam ** r * s
        return float(total)


def laplace_profile(k: int, b: float, eps_min: float = 0.0):
    """delta(eps) of k Laplace releases of scale b (sensitivity 1), from the exact law of their sum.

    The absolutely continuous part of ``nu^{*k}`` (nu = mu normalised: ``Rad`` with probability
    ``pa = 1/(1 + lam/2)``, ``Unif(-1, 1)`` with ``pc = 1 - pa``) is a polynomial of degree k - 1 on each unit
    interval [l, l+1], l = -k .. k-1, kept in the Bernstein basis; its atoms are ``pa^k Binomial(k, 1/2)`` at
    ``-k, -k+2, ..., k``.  One step ``nu * D`` is a shift by +-1 (degree elevation: a positive map), the
    uniform's window integral (cumulative sums of the coefficients: positive) and the uniform spread of the
    atoms (constants).  Every coefficient is therefore a sum of nonnegative terms: no cancellation, and each
    one carries a relative rounding error below about ``4 k u`` (u = 2^-53; 1.3e-13 at k = 300).  delta is
    then the integral of the nonnegative ``W (e^(lam s/2) - e^(eps - lam s/2))``, ``W = (e^(-lam/2) (1 +
    lam/2))^k``, over s > eps/lam: the atoms exactly, each unit interval by Gauss-Legendre with ``d/2 + 30``
    nodes, exact for the polynomial times the Taylor polynomial of degree 59 of the exponential (the
    remainder is below ``(lam/2)^60 e^lam / 60!`` relative, 1e-65 for lam <= 3.4).  Values below float64's
    range (far tails, < 1e-300) are dropped, and so are the intervals that cannot reach above
    ``eps_min/lam`` in the steps left (each step moves mass by at most 1: they add nothing to delta(eps) for
    eps >= eps_min).  O(k^3) operations: about 1 s at k = 300.

    Args:
        k: the number of releases, >= 1.
        b: the scale, > 0.
        eps_min: the smallest eps asked, >= 0.

    Returns:
        ``delta(eps)``: a function of eps >= eps_min, the float delta of the composition (the law is computed
        once); it raises ValueError below eps_min.
    """
    lam = 1.0 / b
    pa, pc = 1.0 / (1.0 + lam / 2), (lam / 2) / (1.0 + lam / 2)
    log_binom = lambda n, i: (special.gammaln(n + 1) - special.gammaln(i + 1)  # noqa: E731
                              - special.gammaln(n - i + 1) - n * math.log(2))
    D, base = np.full((2, 1), pc / 2), -1     # k = 1: row r is the density on [base + r, base + r + 1]
    for n in range(1, k):
        pieces, d = D.shape[0], D.shape[1] - 1
        up = np.arange(d + 2) / (d + 1)
        elevated = np.zeros((pieces, d + 2))
        elevated[:, 1:] += up[1:] * D
        elevated[:, :-1] += (1 - up[:-1]) * D
        head = np.zeros((pieces, d + 2))      # integral of the row from the interval's start, degree d + 1
        head[:, 1:] = np.cumsum(D, axis=1) / (d + 1)
        whole = head[:, -1:]
        new = np.zeros((pieces + 2, d + 2))   # one more row at each end: base - 1 .. base + pieces + 1
        new[:-2] += pa / 2 * elevated + pc / 2 * head          # D(s + 1), and the window's end in row L
        new[2:] += pa / 2 * elevated + pc / 2 * (whole - head)  # D(s - 1), and the window's start in row L - 2
        new[1:-1] += pc / 2 * whole                             # the window's middle: row L - 1 whole
        i = np.arange(n + 1)
        atoms = np.exp(n * math.log(pa) + log_binom(n, i))[:, None] * (pc / 2)   # at s = 2i - n: on (s-1, s+1)
        base -= 1
        for row in (2 * i - n - 1 - base, 2 * i - n - base):
            inside = row >= 0
            new[row[inside]] += atoms[inside]
        gone = int(np.sum(base + np.arange(pieces + 2) + 1 + k - (n + 1) <= eps_min / lam))   # reach <= eps_min/lam
        D, base = new[gone:], base + gone
    d = D.shape[1] - 1
    nodes, weights = np.polynomial.legendre.leggauss(d // 2 + 30)
    log_w = k * (math.log1p(lam / 2) - lam / 2)
    start = base + np.arange(D.shape[0])          # row r is the density on [start, start + 1]
    i = np.arange(k + 1)
    atom_s, atom_log = 2 * i - k, k * math.log(pa) + log_binom(k, i)

    def on_rows(rows, y0: float, eps: float) -> float:
        y = y0 + (1 - y0) * (nodes + 1) / 2
        density = D[rows] @ stats.binom.pmf(np.arange(d + 1)[None, :], d, y[:, None]).T
        s = start[rows][:, None] + y[None, :]
        gain = np.exp(log_w + lam * s / 2) * -np.expm1(eps - lam * s)
        return float(np.sum(density * gain * (weights * (1 - y0) / 2)[None, :]))

    def delta(eps: float) -> float:
        if eps < eps_min:
            raise ValueError(f"eps={eps} is not allowed: the law was cut for eps >= {eps_min}.")
        cut = eps / lam
        keep = atom_s > cut
        total = float(np.sum(np.exp(atom_log[keep] + log_w + lam * atom_s[keep] / 2)
                             * -np.expm1(eps - lam * atom_s[keep])))
        above = np.flatnonzero(start >= cut)
        if above.size:
            total += on_rows(above, 0.0, eps)
        for r in np.flatnonzero((start < cut) & (start + 1 > cut)):
            total += on_rows(np.array([r]), cut - start[r], eps)
        return total

    return delta


def laplace_delta_fourier(k: int, b: float, eps: float, dps: int = 30, max_terms: int = 200_000) -> float:
    """delta(eps) of k Laplace releases of scale b (sensitivity 1), by the Bromwich integral; for large k.

    With ``m(z) = E_P[e^(z lam U)] = e^(-lam/2) (cosh(lam w) + sinh(lam w) / (2 w))``, ``w = z + 1/2``, and
    ``(1 - e^-x)_+ = (1/2 pi i) int e^(z x) / (z (z+1)) dz`` on Re z = c > 0,

        delta(eps) = (1/2 pi) int_R G(t) dt,   G(t) = m(z)^k e^(-z eps) / (z (z+1)),  z = c + i t,

    exactly; c is the saddle point (``k m'(c)/m(c) = eps``).  The integral is the trapezoid sum
    ``(h/2 pi) sum_n G(n h)`` for |n h| <= T, with two rigorous error bounds, both asserted below 1e-15 of the
    result:

    * discretisation: G is analytic in the strip |Im t| < d (d < c) with ``int |G| <= max_(c' = c +- d)
      m(c')^k e^(-c' eps) pi/(c - d)`` on every line of it (``|m(c'+it)| <= m(c')``, ``int dt/|z (z+1)| <=
      pi/c'``), so the error is at most ``2 M / (e^(2 pi d/h) - 1)`` (Trefethen & Weideman, SIAM Review 2014,
      Thm 5.1);
    * truncation: for |t| >= T - h, ``|m(c+it)| <= e^(-lam/2) cosh(lam a) (1 + 1/(2 |w|))`` (a = c + 1/2;
      ``|cosh|, |sinh| <= cosh(lam a)`` on the line) and ``|z (z+1)| >= t^2``, so the terms past T sum to at
      most ``M_T^k e^(-c eps) / (pi (T - h))``; the terms below T are bounded one by one with the exact
      moduli of cosh and sinh (float64, doubled for rounding) and only those whose bounds do not sum below
      1e-20 of the saddle estimate of delta are computed in mpmath (some tens near t = 0 at large k).

    The truncation bound falls only when ``(1 + 1/(2T)) / (1 + tanh(lam a)/(2a))`` to the power k is tiny: k
    of about 1000 and more for lam >= 0.1.  The sum is taken at ``dps`` digits (its terms are at most
    ``sqrt(2 pi k)`` times the result: a few digits lost).

    Args:
        k: the number of releases, >= 1.
        b: the scale, > 0.
        eps: the epsilon, >= 0.
        dps: mpmath's working digits.
        max_terms: the most terms computed in mpmath.

    Returns:
        delta(eps), a float.

    Raises:
        ValueError: if eps is not above the mean loss (no saddle point c > 0), or the bounds cannot be brought
            below 1e-15 of the result with ``max_terms`` terms in mpmath and 2e5 bounded ones (k too small for
            the tail bounds).
    """
    with mp.workdps(dps):
        lam, eps = mp.mpf(1) / mp.mpf(b), mp.mpf(eps)
        if eps >= k * lam:
            return 0.0                       # the loss never exceeds k lam
        shrink, half = mp.exp(-lam / 2), mp.mpf(1) / 2

        def log_m(z):
            w = z + half
            e = mp.exp(lam * w)
            return mp.log(shrink * ((e + 1 / e) / 2 + (e - 1 / e) / (4 * w)))

        def slope(c):                        # k m'(c)/m(c) - eps
            w = c + half
            ch, sh = mp.cosh(lam * w), mp.sinh(lam * w)
            return k * (lam * sh + (lam * w * ch - sh) / (2 * w * w)) / (ch + sh / (2 * w)) - eps

        if slope(mp.mpf(0)) >= 0:
            raise ValueError(f"eps={eps} is not above the mean loss of k={k} releases: no saddle point c > 0.")
        lo, hi = mp.mpf(0), mp.mpf(1)
        while slope(hi) < 0:
            hi *= 2
        for _ in range(60):                 # any c > 0 is exact; near the saddle is cheap
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if slope(mid) < 0 else (lo, mid)
        c = hi
        level = lambda x: k * log_m(x) - x * eps    # noqa: E731  -- log of m(x)^k e^(-x eps), x real
        step = c * mp.mpf(10) ** -8
        spread = (slope(c + step) - slope(c - step)) / (2 * step)   # k times the tilted variance
        tol = mp.exp(level(c)) / (c * (1 + c) * mp.sqrt(2 * mp.pi * spread)) * mp.mpf(10) ** -20
        h, disc, d = max((2 * mp.pi * d / mp.log(1 + M / (mp.pi * tol)), M / mp.pi, d) for d, M in
                         ((f * c, max(mp.exp(level(c - f * c)), mp.exp(level(c + f * c))) * mp.pi / (c - f * c))
                          for f in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)))
        disc = disc / (mp.exp(2 * mp.pi * d / h) - 1)
        a, T = c + half, mp.mpf(1)
        while True:                          # T: the terms past it are bounded as a whole
            t0 = T - h
            trunc = (mp.exp(k * mp.log(shrink * mp.cosh(lam * a) * (1 + 1 / (2 * mp.sqrt(a * a + t0 * t0))))
                            - c * eps) / (mp.pi * t0)) if t0 > 0 else mp.inf
            if trunc <= tol:
                break
            T *= mp.mpf(5) / 4
            if T / h > 2e5:
                raise ValueError(f"k={k}, b={b}: the Fourier tail bound needs more than 2e5 terms (k too small).")
        # the terms n h < T: each bounded by |m(c+it)| <= e^(-lam/2) (|cosh(lam w)| + |sinh(lam w)| / (2|w|)),
        # |cosh(x+iy)|^2 = sinh(x)^2 + cos(y)^2, |sinh(x+iy)|^2 = sinh(x)^2 + sin(y)^2; only those whose
        # bounds do not sum below tol are computed
        fa, fl, fc = float(a), float(lam), float(c)
        t = float(h) * np.arange(1, int(mp.ceil(T / h)) + 1)
        sh2 = math.sinh(fl * fa) ** 2
        bound = -fl / 2 + np.log(np.sqrt(sh2 + np.cos(fl * t) ** 2)
                                 + np.sqrt(sh2 + np.sin(fl * t) ** 2) / (2 * np.sqrt(fa * fa + t * t)))
        log_term = (k * bound - fc * float(eps) + math.log(float(h) / math.pi)
                    - 0.5 * np.log((fc * fc + t * t) * ((fc + 1) ** 2 + t * t)))
        past = np.append(np.logaddexp.accumulate(log_term[::-1])[::-1], -np.inf)   # past[n]: the terms > n
        n = int(np.argmax(past <= math.log(float(tol))))
        if n > max_terms:
            raise ValueError(f"k={k}, b={b}: the Fourier sum needs more than {max_terms} terms (k too small).")
        left = 2 * math.exp(past[n])          # twice: a margin over float64's rounding of the bounds

        def G(t):
            z = mp.mpc(c, t)
            return mp.exp(k * log_m(z) - z * eps) / (z * (z + 1))

        value = (mp.re(G(0)) + 2 * mp.fsum(mp.re(G(j * h)) for j in range(1, n + 1))) * h / (2 * mp.pi)
        if not disc + trunc + left <= mp.mpf(10) ** -15 * abs(value):
            raise ValueError(f"k={k}, b={b}, eps={eps}: error bound {disc + trunc + left} not below 1e-15 of "
                             f"{value}.")
        return float(value)


def pure_delta(k: int, eps0: float, eps: float, delta0: float = 0.0) -> float:
    """delta(eps) of k (eps0, delta0)-DP releases composed: Kairouz, Oh & Viswanath 2015, Thm 3.3 (the
    optimal composition; for delta0 = 0 it is k-fold binary randomized response).  Log-space sums of
    non-negative terms: exact to double rounding at any k (1e6 included)."""
    i = np.arange(k + 1, dtype=float)
    loss = eps0 * (k - 2 * i)
    keep = loss > eps
    if not keep.any():
        pure = 0.0
    else:
        i = i[keep]
        lp, lq = -np.logaddexp(0.0, -eps0), -np.logaddexp(0.0, eps0)      # log p_hi, log p_lo
        lb = special.gammaln(k + 1) - special.gammaln(i + 1) - special.gammaln(k - i + 1)
        logP = lb + (k - i) * lp + i * lq
        # term = P_i (1 - e^(eps - loss_i)) >= 0
        pure = float(np.sum(np.exp(logP) * -np.expm1(eps - eps0 * (k - 2 * i))))
    return float(-np.expm1(k * np.log1p(-delta0) + np.log1p(-pure)))     # 1 - (1 - d0)^k (1 - pure)


def rr_delta(k: int, p: float, buckets: int, eps: float) -> float:
    """delta(eps) of k releases of randomized response (noise p, buckets): the trinomial of the pair
    (loss eps0 with mass 1 - p + p/B, -eps0 with p/B, 0 with the rest), exactly."""
    hi, lo = 1 - p + p / buckets, p / buckets
    mid = 1.0 - hi - lo
    e0 = math.log(hi / lo)
    tot = 0.0
    lf = special.gammaln
    for a in range(k + 1):
        c = np.arange(0, k - a + 1)
        loss = e0 * (a - c)
        keep = loss > eps
        if not keep.any():
            continue
        c = c[keep]
        lw = lf(k + 1) - lf(a + 1) - lf(c + 1) - lf(k - a - c + 1)
        rest = k - a - c
        with np.errstate(divide="ignore", invalid="ignore"):
            logP = lw + a * math.log(hi) + c * math.log(lo) + np.where(
                rest == 0, 0.0, rest * (math.log(mid) if mid > 0 else -np.inf))
        tot += float(np.sum(np.exp(logP) * -np.expm1(eps - e0 * (a - c))))
    return tot
