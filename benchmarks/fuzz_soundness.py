"""Soundness fuzz of every tight calibration.

Random valid configurations of every accountable mechanism (wide ranges of eps, delta, sizes,
rates, steps) are calibrated with ``method="tight"``; the epsilon that the returned noise really
buys is then recomputed by a path that shares no code with ``accountant/``:

* full-batch Gaussian compositions (DP-GD, DIFF2-GD, DiceSGD's assumption-free accountant):
  the exact GDP curve of Balle & Wang (2018, Thm 8) in mpmath, with mu written here from each
  paper's sensitivities (Dong, Roth & Su 2019, Cor. 2);
* balls-in-bins DP-SGD (each record in one step of each epoch, at random): a hand-written LOWER bound
  from the largest coordinate of the epoch's dominating pair (Chua et al. 2025: ``(1/t) sum_i N(e_i /
  z, I)`` against ``N(0, I)``), a post-processing whose law is closed form -- ``Phi(c - 1/z) Phi(c)^(t-1)``
  against ``Phi(c)^t`` -- composed numerically as below, both directions (:func:`allocation_delta_lower`);
* subsampled releases -- Poisson under add/remove (DP-SGD, ClipD2P/ConstD2P add/remove) and
  fixed-size sampling without replacement under replace-one (DIFF2-BVR-L-SGD, DP-SRM,
  ClipD2P/ConstD2P replace-one): a hand-written LOWER bound, the privacy loss of an actual pair of
  neighbouring one-dimensional datasets (the differing record contributes +c, or -c / nothing,
  every other record 0; see :func:`_pair_pmf`), composed numerically.  The loss is rounded DOWN
  to a grid and mass is only ever dropped, so the delta it gives is below the true delta of that
  pair, which is below the worst case.  (Checked against mpmath GDP and dp-accounting's
  optimistic PLD in tests/test_fuzz_soundness.py.)

An UNDER-REPORT is a configuration whose recomputed delta at the target eps exceeds the target
delta (beyond 1e-6 relative + 1e-12 absolute, the oracles' own arithmetic): the tool would have
claimed an eps smaller than the truth.  There must be none.

    python benchmarks/fuzz_soundness.py --configs 10000 [--seed 0] [--workers 2] [--accountant pld]
                                        [--block-min 256]

prints the counts (under-reports, errors = exceptions other than a clear ``ValueError``,
refused = clear ``ValueError`` from a constructor or a calibration) per mechanism.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from collections import Counter

import numpy as np

import dpcalib.mechanisms as M

RTOL, ATOL = 1e-6, 1e-12      # ATOL only for the numerical (FFT) oracle; GDP's is exact (mpmath)
EXACT = ("dp-gd", "diff2-gd", "dicesgd")

# ---------------------------------------------------------------------------------------------
# independent oracles
# ---------------------------------------------------------------------------------------------


def gdp_delta_exact(eps: float, mu: float, dps: int = 50) -> float:
    """Balle & Wang (2018): delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2), mpmath."""
    import mpmath as mp

    with mp.workdps(dps):
        e, m = mp.mpf(eps), mp.mpf(mu)
        return float(mp.ncdf(-e / m + m / 2) - mp.e ** e * mp.ncdf(-e / m - m / 2))


def poisson_delta_dp_accounting(q: float, z: float, steps: int, eps: float, pessimistic: bool,
                                h: float = 1e-4) -> float:
    """dp-accounting's PLD of ``steps`` Poisson-subsampled Gaussians (add/remove, both
    directions): optimistic rounding gives a value from below of the true delta(eps),
    pessimistic one from above.  Used to check :func:`poisson_delta_lower` in the tests."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    one = pld.from_gaussian_mechanism(z, sensitivity=1.0, pessimistic_estimate=pessimistic,
                                      value_discretization_interval=h, sampling_prob=q, use_connect_dots=False)
    return float(one.self_compose(steps).get_delta_for_epsilon(eps))


def _trim(pmf: np.ndarray, off: int, drop: float = 1e-30):
    """Drop (never add) mass at both ends, at most ``drop`` at each: keeps a lower bound.  Mass
    dropped anywhere in the composition lowers the final delta by at most that mass (the rest
    of the composition is a probability distribution and each term is at most 1)."""
    c = np.cumsum(pmf)
    lo = int(np.searchsorted(c, drop, side="right"))
    r = np.cumsum(pmf[::-1])
    hi = len(pmf) - int(np.searchsorted(r, drop, side="right"))
    hi = max(hi, lo + 1)
    return pmf[lo:hi], off + lo


MAX_POINTS = 2_000_000          # grid points of one release's loss pmf (about 16 MB per array)
MAX_CONV = 8_000_000            # points of a composed pmf (an FFT convolution of ~1 GB at most)


class _TooBig(Exception):
    """A composed pmf would exceed MAX_CONV points: retry on a coarser grid."""


def _conv(a, oa, b, ob, drop):
    from scipy.signal import fftconvolve

    if len(a) + len(b) > MAX_CONV:
        raise _TooBig
    out = fftconvolve(a, b) if min(len(a), len(b)) > 64 else np.convolve(a, b)
    # FFT round-off can leave values of order 1e-17 * max; negative ones are set to zero and
    # the positive ones are at most ATOL in total over the range that matters (see ATOL).
    return _trim(np.clip(out, 0.0, None), oa + ob, drop)


def _pair_pmf(kind: str, gamma: float, z: float, h: float, drop: float):
    """Loss pmf (under P; index k means loss k*h, rounded DOWN) of one release on an actual pair
    of neighbouring one-dimensional datasets, in units of the noise std:

    * ``"replace"``: P = (1-g) N(0,1) + g N(a,1), Q = (1-g) N(0,1) + g N(-a,1), a = 1/(2z)
      (the differing record is +c or -c, replace-one sensitivity 2c; g = 1: full batch);
    * ``"remove"``: P = (1-g) N(0,1) + g N(s,1), Q = N(0,1), s = 1/z (Poisson rate g, add/remove);
    * ``"add"``: the same pair the other way round.

    The loss is monotone in x (increasing, decreasing for "add"), so its value at one end of a
    bin is the bin's minimum."""
    from scipy.stats import norm

    tail = 13.0
    lg1 = math.log1p(-gamma) if gamma < 1 else -math.inf
    lg = math.log(gamma)
    if kind == "replace":
        a = 1.0 / (2.0 * z)
        lo, hi = -a - tail, a + tail
        slope = 2.0 * a
    else:
        a = 1.0 / z
        lo, hi = -tail, a + tail
        slope = a
    dx = min(0.01, h / max(slope, 1e-300))
    x = np.linspace(lo, hi, int(math.ceil((hi - lo) / dx)) + 1)
    if kind == "replace":
        lp = np.logaddexp(lg1 + norm.logpdf(x), lg + norm.logpdf(x - a))
        lq = np.logaddexp(lg1 + norm.logpdf(x), lg + norm.logpdf(x + a))
        cdf = (1 - gamma) * norm.cdf(x) + gamma * norm.cdf(x - a)
    else:
        mix = np.logaddexp(lg1 + norm.logpdf(x), lg + norm.logpdf(x - a))
        if kind == "remove":
            lp, lq = mix, norm.logpdf(x)
            cdf = (1 - gamma) * norm.cdf(x) + gamma * norm.cdf(x - a)
        else:
            lp, lq = norm.logpdf(x), mix
            cdf = norm.cdf(x)
    mass = np.clip(np.diff(cdf), 0.0, None)
    loss = lp - lq
    edge = loss[1:] if kind == "add" else loss[:-1]          # the smaller end of each bin
    k = np.floor(edge / h).astype(np.int64)
    off = int(k.min())
    return _trim(np.bincount(k - off, weights=mass), off, drop)


def _max_pair_pmf(t: int, z: float, h: float, drop: float, direction: str):
    """Loss pmf (under P; index k means loss k*h, rounded DOWN) of the largest coordinate ``c`` of one
    balls-in-bins epoch's pair, in units of the noise std: ``P(c <= x) = Phi(x - a) Phi(x)^(t-1)`` (the
    record's step shifted by ``a = 1/z``) against ``Phi(x)^t``; "add": the pair the other way round.  The
    density ratio ``(e^(a x - a^2/2) + (t - 1) Phi(x - a) / Phi(x)) / t`` increases in ``x``, so a bin's
    loss at one end is its minimum; the masses are differences of log-CDFs (``expm1``: no cancellation)."""
    from scipy.special import log_ndtr

    a = 1.0 / z
    lo, hi = -13.0, a + math.sqrt(2.0 * math.log(max(t, 2))) + 13.0
    dx = min(0.01, h / max(a, 1e-300))
    x = np.linspace(lo, hi, int(math.ceil((hi - lo) / dx)) + 1)
    lp = log_ndtr(x - a) + (t - 1) * log_ndtr(x)               # log P(c <= x)
    lq = t * log_ndtr(x)
    ratio = np.logaddexp(a * x - 0.5 * a * a, math.log(max(t - 1, 1e-300)) + log_ndtr(x - a) - log_ndtr(x)) \
        - math.log(t) if t > 1 else a * x - 0.5 * a * a
    if direction == "remove":
        lc, loss = lp, ratio
    else:
        lc, loss = lq, -ratio
    mass = np.exp(lc[1:]) * -np.expm1(np.minimum(lc[:-1] - lc[1:], 0.0))
    edge = loss[1:] if direction == "add" else loss[:-1]         # the smaller end of each bin
    k = np.floor(edge / h).astype(np.int64)
    off = int(k.min())
    return _trim(np.bincount(k - off, weights=mass), off, drop)


def allocation_delta_lower(t: int, z: float, epochs: int, eps: float, delta: float) -> float:
    """Lower bound on delta(eps) of ``epochs`` epochs of balls-in-bins (``t`` steps an epoch, multiplier
    ``z``, add/remove): the worse direction of the largest coordinate's pair (:func:`_max_pair_pmf`),
    composed, losses rounded down and mass only dropped (as :func:`_delta_lower`)."""
    h = min(2e-3, max(2e-5, 0.05 / max(1, epochs)))
    h = max(h, (1.0 / z) * (1.0 / z + 26.0) / MAX_POINTS)
    drop = 1e-3 * delta / (8 * (2 * max(1, epochs).bit_length() + 2))
    out = 0.0
    for direction in ("remove", "add"):
        base, boff = _max_pair_pmf(t, z, h, drop, direction)
        acc, aoff = np.ones(1), 0
        k = int(epochs)
        while k:
            if k & 1:
                acc, aoff = _conv(acc, aoff, base, boff, drop)
            k >>= 1
            if k:
                base, boff = _conv(base, boff, base, boff, drop)
        losses = (aoff + np.arange(len(acc))) * h
        keep = losses > eps
        out = max(out, float(np.sum(acc[keep] * -np.expm1(eps - losses[keep]))))
    return out


def delta_lower(groups, eps: float, delta: float, h: float | None = None) -> float:
    """See :func:`_delta_lower`; on a grid too fine for memory, retried on a 4x coarser one (a
    coarser grid only loosens this lower bound)."""
    while True:
        try:
            return _delta_lower(groups, eps, delta, h)
        except _TooBig as exc:
            h = 4.0 * exc.args[0]


def _delta_lower(groups, eps: float, delta: float, h: float | None = None) -> float:
    """Lower bound on delta(eps) of the composition of ``groups`` = [(kind, gamma, z, count)]
    (kinds of :func:`_pair_pmf`) on one pair of neighbouring datasets.  For add/remove pass
    every group twice, once "remove" and once "add": see :func:`poisson_delta_lower`.

    Rounding each release's loss down costs at most ``h`` per release, so the grid is chosen
    with ``h * (number of releases) <= 0.05`` (h between 2e-5 and 2e-3).  At most ``1e-3 delta``
    of mass is dropped in all (array ends), so the bound is within that of the undropped one."""
    n = sum(c for *_, c in groups)
    if h is None:
        h = min(2e-3, max(2e-5, 0.05 / max(1, n)))
    # Memory cap: one release's loss spans about slope * span; with little noise (z << 1) that is
    # huge, and a grid of spacing h would not fit in memory.  A coarser grid only loosens this
    # lower bound (rounding down costs at most h per release), it never makes it unsound.
    for kind, _, z, count in groups:
        if count:
            a = 1.0 / (2.0 * z) if kind == "replace" else 1.0 / z
            slope, span = (2.0 * a, 2.0 * a + 26.0) if kind == "replace" else (a, a + 26.0)
            h = max(h, slope * span / MAX_POINTS)
    drop = 1e-3 * delta / (4 * (len(groups) + 1) * (2 * max(1, n).bit_length() + 2))
    try:
        return _compose_delta(groups, eps, h, drop)
    except _TooBig:
        raise _TooBig(h) from None


def _compose_delta(groups, eps, h, drop) -> float:
    total, off = np.ones(1), 0
    for kind, gamma, z, count in groups:
        if count == 0:
            continue
        base, boff = _pair_pmf(kind, gamma, z, h, drop)
        acc, aoff = np.ones(1), 0
        k = int(count)
        while k:                                         # binary exponentiation
            if k & 1:
                acc, aoff = _conv(acc, aoff, base, boff, drop)
            k >>= 1
            if k:
                base, boff = _conv(base, boff, base, boff, drop)
        total, off = _conv(total, off, acc, aoff, drop)
    losses = (off + np.arange(len(total))) * h
    keep = losses > eps
    return float(np.sum(total[keep] * -np.expm1(eps - losses[keep])))


def wor_delta_lower(groups, eps: float, delta: float) -> float:
    """``groups`` = [(gamma, z, count)] of replace-one releases (gamma = 1: full batch)."""
    return delta_lower([("replace", g, z, c) for g, z, c in groups], eps, delta)


def poisson_delta_lower(q: float, z: float, steps: int, eps: float, delta: float) -> float:
    """Poisson rate q, multiplier z, add/remove: the worse of the remove and the add pair."""
    return max(delta_lower([(kind, q, z, steps)], eps, delta) for kind in ("remove", "add"))


# ---------------------------------------------------------------------------------------------
# random configurations (each paper's sensitivities written here, not taken from mechanisms/)
# ---------------------------------------------------------------------------------------------


def _logu(rng, lo, hi):
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _int(rng, lo, hi):
    return int(round(_logu(rng, lo, hi)))


def config(kind: str, rng):
    """``(mechanism, eps, delta, oracle)`` where ``oracle(noise) -> delta at eps`` (independent)."""
    if kind in ("dp-gd", "diff2-gd"):
        eps, delta = _logu(rng, 0.01, 100), _logu(rng, 1e-300, 0.1)
        R, P, n = _int(rng, 1, 5000), _int(rng, 1, 50), _int(rng, 1, 100_000)
        T = 1 if kind == "dp-gd" else _int(rng, 1, R)
        mech = M.DPGD(R, P, n) if kind == "dp-gd" else M.DIFF2GD(R, T, P, n)
        restarts = -(-R // T)

        def oracle(noise):
            # replace-one sensitivity 2C/(n P) of the clipped mean, std sigma C (DIFF2 Lemma C.1)
            inv = restarts * (2.0 / (noise["sigma1"] * n * P)) ** 2
            if R - restarts:
                inv += (R - restarts) * (2.0 / (noise["sigma2"] * n * P)) ** 2
            return gdp_delta_exact(eps, math.sqrt(inv))
        return mech, eps, delta, oracle
    if kind == "dicesgd":
        eps, delta = _logu(rng, 0.01, 100), _logu(rng, 1e-300, 0.1)
        N = _int(rng, 1, 100_000)
        B, T = _int(rng, 1, N), _int(rng, 1, 5000)
        auto = bool(rng.integers(2))
        C1, C2 = _logu(rng, 0.01, 10), _logu(rng, 0.01, 10)
        mech = M.DiceSGD(N, B, T, C1=C1, C2=C2, automatic=auto)
        c1, c2 = (1.0, 1.0) if auto else (C1, C2)

        def oracle(noise):
            # DiceSGD, no amplification: Delta_0 = C1/B, Delta = 2 C2 + C1/B, std sigma1
            d0, dt = c1 / B, 2 * c2 + c1 / B
            return gdp_delta_exact(eps, math.sqrt(d0 ** 2 + (T - 1) * dt ** 2) / noise["sigma1"])
        return mech, eps, delta, oracle
    if kind in ("dp-sgd", "clipd2p-add/remove", "constd2p-add/remove"):
        eps, delta = _logu(rng, 0.05, 30), _logu(rng, 1e-10, 1e-2)
        if kind == "dp-sgd":
            q, steps = _logu(rng, 1e-4, 1.0), _int(rng, 1, 10_000)
            mech = M.DPSGD(q, steps)
            key = "noise_multiplier"
        else:
            J, steps = _int(rng, 1, 1000), _int(rng, 1, 5000)
            q = 1.0 / J
            mech = (M.ClipD2P if kind.startswith("clip") else M.ConstD2P)(J, steps, "add/remove")
            key = "sigma"

        def oracle(noise):
            # Poisson rate q, std = multiplier x sensitivity (add/remove)
            return poisson_delta_lower(q, noise[key], steps, eps, delta)
        return mech, eps, delta, oracle
    if kind in ("clipd2p-replace-one", "constd2p-replace-one"):
        eps, delta = _logu(rng, 0.05, 30), _logu(rng, 1e-9, 1e-2)
        J, steps = _int(rng, 1, 1000), _int(rng, 1, 1000)
        mech = (M.ClipD2P if kind.startswith("clip") else M.ConstD2P)(J, steps, "replace-one")

        def oracle(noise):
            # one example of J per iteration, std sigma C, replace-one sensitivity 2C: z = sigma/2
            return wor_delta_lower([(1.0 / J, noise["sigma"] / 2.0, steps)], eps, delta)
        return mech, eps, delta, oracle
    if kind == "diff2-bvr":
        eps, delta = _logu(rng, 0.05, 30), _logu(rng, 1e-9, 1e-2)
        R, P = _int(rng, 1, 100), _int(rng, 1, 10)
        T, n = _int(rng, 1, R), _int(rng, 2, 2000)
        K, b = _int(rng, 1, 10), _int(rng, 1, n)
        mech = M.DIFF2BVR(R, T, P, n, K, b)
        restarts, local_rounds = -(-R // T), -(-R // P)

        def oracle(noise):
            # DIFF2 rounds: sensitivity 2C/(n P); local steps (K - 1 noisy ones per local round):
            # batch b of n without replacement, sensitivity 2C/b, std sigma3 C (Lemma E.1)
            g = [(1.0, noise["sigma1"] * n * P / 2.0, restarts)]
            if R - restarts:
                g.append((1.0, noise["sigma2"] * n * P / 2.0, R - restarts))
            g.append((b / n, noise["sigma3"] * b / 2.0, (K - 1) * local_rounds))
            return wor_delta_lower(g, eps, delta)
        return mech, eps, delta, oracle
    if kind == "dp-srm":
        eps, delta = _logu(rng, 0.05, 30), _logu(rng, 1e-9, 1e-2)
        n = _int(rng, 2, 10_000)
        T, b0, b = _int(rng, 1, 300), _int(rng, 1, n), _int(rng, 1, n)
        G, zeta, gam = _logu(rng, 0.01, 10), _logu(rng, 1e-4, 10), float(rng.uniform(0.001, 1.0))
        mech = M.DPSRM(n, T, b0, b, G, zeta, gam)

        def oracle(noise):
            # absolute stds; replace-one sensitivities 2G/b0 and 2((1-gamma) zeta + gamma G)/b
            d0, dt = 2 * G / b0, 2 * ((1 - gam) * zeta + gam * G) / b
            g = [(b0 / n, noise["sigma0"] / d0, 1)]
            if T > 1:
                g.append((b / n, noise["sigma"] / dt, T - 1))
            return wor_delta_lower(g, eps, delta)
        return mech, eps, delta, oracle
    if kind == "dp-sgd-balls-in-bins":
        eps, delta = _logu(rng, 0.05, 30), _logu(rng, 1e-10, 1e-2)
        n = _int(rng, 1, 1_000_000)
        b, epochs = _int(rng, 1, n), _int(rng, 1, 100)
        mech = M.DPSGD(sampling="balls-in-bins", n=n, batch_size=b, epochs=epochs)
        t = -(-n // b)                          # steps an epoch: every record in one of ceil(n / b)

        def oracle(noise):
            # the noise on each batch's sum, sensitivity C (add/remove): the multiplier itself
            return allocation_delta_lower(t, noise["noise_multiplier"], epochs, eps, delta)
        return mech, eps, delta, oracle
    raise ValueError(f"kind={kind!r} is not allowed: expected one of {KINDS}.")


KINDS = ("dp-gd", "diff2-gd", "dicesgd", "dp-sgd", "clipd2p-add/remove", "constd2p-add/remove",
         "clipd2p-replace-one", "constd2p-replace-one", "diff2-bvr", "dp-srm", "dp-sgd-balls-in-bins")


def check_one(i: int, seed: int, noise_scale: float = 1.0, accountant: str = "rdp") -> dict:
    """Configuration ``i`` of the stream ``seed``: its outcome as a small dict.  ``noise_scale``
    != 1 plants a bug (the calibrated noise is scaled before the oracle sees it) to show that
    the check can fail.  ``accountant="pld"``: the tight calibrations that take an accountant
    solve on the PLD's certified upper end (the others are full batch: exact GDP either way)."""
    rng = np.random.default_rng([seed, i])
    kind = KINDS[i % len(KINDS)]
    out = {"i": i, "kind": kind}
    try:
        mech, eps, delta, oracle = config(kind, rng)
    except ValueError as exc:
        return {**out, "outcome": "invalid", "detail": str(exc)[:200]}
    out.update(eps=eps, delta=delta, mechanism=repr(mech))
    blocked0 = _BLOCKED[0]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kw = {"accountant": accountant} if accountant != "rdp" and _takes_accountant(mech) else {}
            t0 = time.perf_counter()
            rep = mech.calibrate(eps, delta, method="tight", **kw)
            out["seconds"] = time.perf_counter() - t0
    except ValueError as exc:
        return {**out, "outcome": "refused", "detail": str(exc)[:200]}
    except Exception as exc:  # noqa: BLE001 - every other exception is a bug to count
        return {**out, "outcome": "error", "detail": f"{type(exc).__name__}: {exc}"[:300]}
    noise = {k: v for k, v in rep.noise.items() if v is not None}
    if not all(math.isfinite(v) and v > 0 for v in noise.values()) or not rep.certified_epsilon <= eps * (1 + 1e-9):
        return {**out, "outcome": "error", "detail": f"bad report: noise={noise}, certified={rep.certified_epsilon}"}
    try:
        d = oracle({k: (None if v is None else v * noise_scale) for k, v in rep.noise.items()})
    except Exception as exc:  # noqa: BLE001 - the oracle failing is not the tool's fault; say so
        return {**out, "outcome": "oracle-failed", "detail": f"{type(exc).__name__}: {exc}"[:300]}
    out.update(noise=noise, oracle_delta=d)
    if not math.isfinite(d):
        return {**out, "outcome": "oracle-failed", "detail": f"oracle delta {d}"}
    atol = 0.0 if kind in EXACT else ATOL
    out["blocked"] = _BLOCKED[0] > blocked0       # (counted where --block-min is given)
    return {**out, "outcome": "under-report" if d > delta * (1 + RTOL) + atol else "ok"}


def _takes_accountant(mech) -> bool:
    import inspect

    return "accountant" in inspect.signature(mech.calibrate).parameters


def fuzz(configs: int, seed: int = 0, workers: int = 1, progress: bool = False,
         noise_scale: float = 1.0, accountant: str = "rdp", block_min: int | None = None) -> list[dict]:
    """``block_min``: compose every ``block_min`` or more steps of one Poisson pair in blocks
    (``dpcalib.accountant.pld.blocks.BLOCK_MIN``, 16 384 by default; the configurations here have
    at most 10 000 steps, so a smaller value is what puts the block composition under the oracles)."""
    idx = range(configs)
    if workers > 1:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(workers) as pool:
            it = pool.imap_unordered(_star, [(i, seed, noise_scale, accountant, block_min) for i in idx],
                                     chunksize=4)
            return sorted(_bar(it, configs, progress), key=lambda r: r["i"])
    _set_block_min(block_min)
    return list(_bar((check_one(i, seed, noise_scale, accountant) for i in idx), configs, progress))


_BLOCKED = [0]          # block compositions built in this process (the calibrations' own calls)


def _set_block_min(block_min):
    from dpcalib.accountant.pld import blocks as pld_blocks

    pld_blocks.BLOCK_MIN = pld_blocks.DEFAULT_BLOCK_MIN if block_min is None else int(block_min)
    if not getattr(pld_blocks.blocked_steps, "counted", False):
        inner = pld_blocks.blocked_steps

        def counted(*args, **kwargs):
            out = inner(*args, **kwargs)
            _BLOCKED[0] += out is not None
            return out
        counted.counted = True
        pld_blocks.blocked_steps = counted


def _star(args):
    *rest, block_min = args
    _set_block_min(block_min)
    return check_one(*rest)


def _bar(it, total, progress):
    if not progress:
        return it
    from tqdm import tqdm

    return tqdm(it, total=total, desc="fuzz")


def summary(results: list[dict]) -> dict:
    by = {}
    for r in results:
        by.setdefault(r["kind"], Counter())[r["outcome"]] += 1
    return {k: dict(v) for k, v in by.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--accountant", choices=("rdp", "pld"), default="rdp",
                    help="what the tight calibrations solve on where they take an accountant")
    ap.add_argument("--block-min", type=int, default=None,
                    help="compose this many or more steps of one Poisson pair in blocks (default 16384: "
                         "never here; e.g. 256 puts the block composition under the oracles)")
    a = ap.parse_args(argv)
    if a.block_min is not None and not 16 <= a.block_min:
        ap.error(f"--block-min={a.block_min} is not allowed: expected an integer >= 16 (a block holds at least 16 steps)")
    t0 = time.perf_counter()
    res = fuzz(a.configs, a.seed, a.workers, progress=sys.stderr.isatty(), accountant=a.accountant,
               block_min=a.block_min)
    dt = time.perf_counter() - t0
    total = Counter(r["outcome"] for r in res)
    blocks = f", blocks from {a.block_min} steps" if a.block_min else ""
    print(f"{a.configs} configurations (seed {a.seed}{blocks}) in {dt:.0f} s")
    print(f"{'mechanism':24s} " + " ".join(f"{k:>13s}" for k in
                                             ("ok", "under-report", "error", "refused", "invalid", "oracle-failed")))
    for kind, c in summary(res).items():
        print(f"{kind:24s} " + " ".join(f"{c.get(k, 0):13d}" for k in
                                         ("ok", "under-report", "error", "refused", "invalid", "oracle-failed")))
    print("total", dict(total))
    if a.block_min:
        nb = sum(bool(r.get("blocked")) for r in res)
        print(f"configurations whose calibration composed blocks: {nb} "
              f"({sum(bool(r.get('blocked')) and r['outcome'] == 'ok' for r in res)} ok)")
    slow = sorted((r for r in res if "seconds" in r), key=lambda r: -r["seconds"])[:5]
    print("slowest calibrations:", ", ".join(f"#{r['i']} {r['kind']} {r['seconds']:.1f} s" for r in slow))
    for r in res:
        if r["outcome"] in ("under-report", "error", "oracle-failed"):
            print(r)
    return 1 if total.get("under-report") or total.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
