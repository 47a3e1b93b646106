"""Many steps composed in blocks (accountant/pld/blocks.py): each piece keeps the profile on its
side (connect-the-dots split up, pooled lower step down), and the bracket of a blocked composition
intersects the plain composition's tight bracket and prv_accountant's -- on settings small enough
to refine the plain one (blocks forced from a few hundred steps) and at a million steps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcalib.accountant import pld as P
from dpcalib.accountant.pld import blocks as PB
from dpcalib.accountant.pld import binomial as PB_
from dpcalib.accountant.pld import compose as PC
from dpcalib.accountant.caches import clear_cache
from dpcalib.accountant.events import PoissonSampledGaussianEvent
from dpcalib.accountant.pld.shared import Step


@pytest.fixture
def blocks_from(monkeypatch):
    """Blocks from ``n`` steps on (the default starts at 16 384)."""
    def set_(n):
        monkeypatch.setattr(PB, "BLOCK_MIN", n)
        clear_cache()
    yield set_
    clear_cache()


def _plain(events, delta, monkeypatch, rtol=1e-5):
    monkeypatch.setattr(PB, "BLOCKS", False)
    clear_cache()
    b = P.pld_epsilon(events, delta, rtol=rtol)
    monkeypatch.setattr(PB, "BLOCKS", True)
    clear_cache()
    return b


def test_block_plan_covers_every_step():
    for K in (16_384, 16_385, 99_999, 100_000, 999_999, 1_000_000, 7_777_777, 10**9):
        nb, m, M, rest = PB.block_plan(K)
        assert nb * m + rest == K and 0 <= rest < nb and M * M >= m / 4 and m >= 16
    assert PB.block_plan(PB.BLOCK_MIN - 1) is None


def test_connect_the_dots_regrid_keeps_both_masses_and_raises_the_profile():
    rng = np.random.default_rng(3)
    M, hf = 8, 1e-3
    h = M * hf
    lo = -37
    mass = rng.random(203) * np.exp(-np.linspace(0, 30, 203))
    J0, up = PB._ctd(lo, mass, M, hf, h)
    l_f = (lo + np.arange(mass.size)) * hf
    l_c = (J0 + np.arange(up.size)) * h
    assert math.isclose(up.sum(), mass.sum(), rel_tol=1e-13)
    assert math.isclose((up * np.exp(-l_c)).sum(), (mass * np.exp(-l_f)).sum(), rel_tol=1e-13)
    for eps in np.linspace(-0.3, 0.3, 61):
        f = lambda m, l: float(np.sum(m * np.clip(1 - np.exp(eps - l), 0, None)))  # noqa: E731
        assert f(up, l_c) >= f(mass, l_f) * (1 - 1e-12) - 1e-16


def test_pooled_bins_hold_each_atom_once():
    M, hf = 4, 0.01
    mass = np.arange(1.0, 11.0)
    b = PB._pool(-3, mass, M, hf)
    l_f = (-3 + np.arange(mass.size)) * hf
    # bin (J h, (J+1) h] holds the atoms i with J M < i <= (J+1) M
    for j in range(b.P.size):
        J = b.i0 + j
        sel = (np.arange(-3, 7) > J * M) & (np.arange(-3, 7) <= (J + 1) * M)
        assert math.isclose(b.P[j], mass[sel].sum()) and math.isclose(b.Q[j], (mass[sel] * np.exp(-l_f[sel])).sum())


def test_compose_powers_matches_compose_steps():
    rng = np.random.default_rng(0)
    s = Step(-40, rng.random(97) * np.exp(-np.linspace(0, 8, 97)), 0.0, 0.0, 1)
    h = 0.01
    for lam in (0.0, 3.0):
        got = PC.compose_powers(s, [50, 49, 48], h, 1e-20, 1 << 30, lam)
        for c, g in zip([50, 49, 48], got):
            ref, _ = PC.compose_steps([Step(s.i0, s.mass, 0.0, 0.0, c)], h, 1e-20, 1 << 30, lam)
            off = g.lo - ref.lo
            a, b = (g.mass, ref.mass[off:off + g.mass.size]) if off >= 0 else (g.mass[-off:], ref.mass)
            n = min(a.size, b.size)
            tol = g.err[:n] + ref.err[-off if off < 0 else 0:][:n] + 1e-300
            assert np.all(np.abs(a[:n] - b[:n]) <= 4 * tol)


def test_binomial_composition_matches_direct_convolution():
    """sum_(j<=J) C(K, j) a^(n-j) b^j, against np.convolve term by term (exact to rounding)."""
    from scipy import special

    rng = np.random.default_rng(5)
    a = Step(-6, 0.97 * rng.dirichlet(np.ones(13)), 0.0, 0.0, 1)
    b = Step(9, 0.03 * rng.dirichlet(np.ones(7)), 0.0, 0.0, 1)
    n, K, J, h = 6, 40, 4, 0.05
    lo = n * a.i0 + 0
    ref = np.zeros(n * 30)
    for j in range(J + 1):
        term = np.ones(1)
        for _ in range(n - j):
            term = np.convolve(term, a.mass)
        for _ in range(j):
            term = np.convolve(term, b.mass)
        start = (n - j) * a.i0 + j * b.i0 - lo
        ref[start:start + term.size] += special.comb(K, j) * term
    for lam in (0.0, 2.0):
        c = PB_.binomial_composition(a, b, n, K, J, h, 1e-30, 1 << 30, lam)
        got = np.zeros_like(ref)
        got[c.lo - lo:c.lo - lo + c.mass.size] = c.mass
        err = np.zeros_like(ref)
        err[c.lo - lo:c.lo - lo + c.mass.size] = c.err
        assert np.all(np.abs(got - ref) <= err + 1e-15 * ref.max()), lam
        assert math.isclose(got.sum(), ref.sum(), rel_tol=1e-12)


def test_a_step_charge_is_charged_by_every_composition():
    s = Step(0, np.array([0.5, 0.5]), 0.0, 0.0, 10, charge=1e-9, block=4)
    comp, _ = PC.compose_steps([s], 0.1, 1e-20, 1 << 30)
    assert comp.alias >= 10 * 1e-9 and comp.blocked


# (q, z, K, delta): q from 1e-4 to 0.5, the noise piling up at the loss's edge (small z) and not
# (large z: the anchor-free lower parts), three deltas -- settings where blocks do apply
SMALL = [(1e-4, 0.6, 4096, 1e-5), (1e-3, 1.0, 2048, 1e-6), (0.02, 3.0, 2048, 1e-8), (0.2, 20.0, 1024, 1e-6),
         (0.5, 200.0, 2048, 1e-5), (1e-4, 20.0, 4096, 1e-6), (0.004, 8.0, 4096, 1e-6)]


@pytest.mark.parametrize("q, z, K, delta", SMALL)
def test_blocked_bracket_intersects_the_tight_plain_bracket(q, z, K, delta, blocks_from, monkeypatch):
    """Blocks forced from 256 steps; the plain composition refined to 1e-5.  Both brackets are
    certified: the blocked one must reach the plain one from each side."""
    from dpcalib.accountant.pld.pairs import RemovePair
    from dpcalib.accountant.pld.shared import TAIL

    ev = [(PoissonSampledGaussianEvent(q, z), K)]
    plain = _plain(ev, delta, monkeypatch)
    blocks_from(256)
    for lower in (False, True):
        assert PB.blocked_steps(RemovePair(z, q), 5e-5, TAIL * delta / K, K, delta, 1 << 30, lower) is not None
    tol = 1e-12 * plain.upper
    for h in (2e-4, 5e-5):
        lo, up = P.pld_epsilon_at(ev, delta, h)
        assert lo <= plain.upper + tol and up >= plain.lower - tol, (h, lo, up, plain)
        assert up - lo < 2e-3 * plain.upper + 3e-3          # narrow (a tiny eps: absolutely)


def test_a_million_steps_bracket_intersects_prv_accountants():
    """The issue's million-step setting: blocks at their default, against prv_accountant's own
    [eps_lower, eps_upper] (an independent method; eps_error 0.05 keeps it to a few seconds) and
    against the plain composition's certified bracket on a grid 20x finer (measured on eb58be6,
    ``pld_epsilon_at`` with blocks off at h = 2.158e-6, 8 s: [0.9999598520800645,
    0.9999810929725276]) -- and as narrow as a calibration asks."""
    prv = pytest.importorskip("prv_accountant")
    q, z, K, delta = 1e-4, 0.6945241030691184, 10**6, 1e-5
    from dpcalib.accountant.pld.pairs import RemovePair
    from dpcalib.accountant.pld.shared import TAIL

    ev = [(PoissonSampledGaussianEvent(q, z), K)]
    h = 4.8828125e-05
    assert PB.blocked_steps(RemovePair(z, q), h, TAIL * delta / K, K, delta, 1 << 30, True) is not None
    lo, up = P.pld_epsilon_at(ev, delta, h)
    acc = prv.Accountant(noise_multiplier=z, sampling_probability=q, delta=delta, eps_error=0.05,
                         max_compositions=K)
    plo, _, pup = acc.compute_epsilon(num_compositions=K)
    assert lo <= pup and plo <= up
    assert lo <= 0.9999810929725276 and up >= 0.9999598520800645
    assert up - lo < 3e-5 * up


def test_heavy_tails_fall_back_to_the_plain_steps():
    """z = 0.4 at q = 1e-4: the loss reaches 15, no cut up to 0.1 leaves few terms -- plain steps."""
    from dpcalib.accountant.pld.pairs import RemovePair
    from dpcalib.accountant.pld.shared import TAIL
    K, d = 10**6, 1e-6
    assert PB.blocked_steps(RemovePair(0.3957, 1e-4), 1e-4, TAIL * d / K, K, d, 1 << 30, False) is None


def test_blocked_upper_composition_reads_no_hoeffding_end():
    from dpcalib.accountant.pld.pairs import RemovePair
    from dpcalib.accountant.pld.shared import TAIL
    ev = [(PoissonSampledGaussianEvent(1e-4, 0.7), 20_000)]
    d = 1e-5
    assert PB.blocked_steps(RemovePair(0.7, 1e-4), 1e-4, TAIL * d / 20_000, 20_000, d, 1 << 30, False) is not None
    lo, up = P.pld_epsilon_at(ev, d, 1e-4, side="upper")
    assert lo == 0.0 and up > 0.0


def test_compositions_keep_within_their_memory_cap():
    """The powers of one step (balls-in-bins' epoch counts: up to 17) sized its transforms for six arrays and then
    kept two per count: 17 counts at the smallest cap that admitted them peaked at 6.4 times it (the binomial
    and split compositions did the same per binomial term).  It now counts what it keeps: at every cap, the
    peak stays within the cap (a fifth over for the transforms' scratch), or the answer is None."""
    import dataclasses
    import tracemalloc

    from scipy import fft as sfft

    from dpcalib.accountant.pld.shared import Step

    rng = np.random.default_rng(0)
    m = rng.random(4000)
    one = Step(-2000, m / m.sum(), 0.0, 0.0, 1)
    h, counts = 1e-3, [200 - j for j in range(17)]
    lm = PC.log_mgfs([one], h)
    wins = [PC.loss_window([dataclasses.replace(one, count=c)], h, math.log(1e-12), 0.0, (c * lm[0], c * lm[1]))
            for c in counts]
    N = sfft.next_fast_len(max(hi - lo + 1 for lo, hi in wins), real=True)
    answered = 0
    for cap in (6 * 8 * N + 8, 20 * 8 * N, 40 * 8 * N + 8, 80 * 8 * N):
        tracemalloc.start()
        try:
            out = PC.compose_powers(one, counts, h, 1e-12, cap)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert out is None or (len(out) == len(counts) and peak <= 1.2 * cap), (cap, peak / cap)
        answered += out is not None
        del out
    assert answered >= 2
