"""secure_mode's sampler: the rounded Gaussian drawn exactly (float64 fast path and arbitrary-precision
slow path agree; scipy's inverse normal CDF stays far inside the margin the fast path assumes), its
statistics at a million draws, a support attack in the style of Jin et al. (IEEE S&P 2022) against
it and against torch's plain sampler, and the pooled noise test that sees the noise's shape."""

import math

import mpmath
import numpy as np
import pytest
import torch

import dpcalib.optim as O
from dpcalib.optim.audit import FunctionStep, StepClaim, noise_pooled_test, noise_test_step
from dpcalib.optim.randomness import SecureGenerator, gaussian_release
from dpcalib.optim.randomness import secure as S


# -- the sampler is exact ------------------------------------------------------------------------------
def test_scipys_inverse_normal_cdf_is_far_inside_the_fast_paths_margin():
    """The fast path decides a cell when U's interval maps inside it with a margin of 2^-40 (t + 1)
    (t = |z|, in units of the std); scipy's ndtri must be 1000 times closer than that to the truth,
    from U = 2^-64 (t = 9.1) to U = 1/2 (t = 0)."""
    from scipy.special import ndtri

    rng = np.random.default_rng(0)
    u = np.concatenate([np.exp2(-rng.uniform(1, 64, 800)), 0.5 - np.exp2(-rng.uniform(2, 50, 300)),
                        [2.0 ** -64, 2.0 ** -63, 0.25, 0.5 - 2.0 ** -53]])
    got = -ndtri(u)
    worst = 0.0
    with mpmath.workprec(120):
        for ui, ti in zip(u, got):
            t = -mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(float(ui)) - 1)
            worst = max(worst, float(abs(mpmath.mpf(float(ti)) - t) / (t + 1)))
    assert worst <= 2.0 ** -50, worst


@pytest.mark.parametrize("std, shift", [(1.0, 0.0), (0.37, 123.456), (3e-7, -2e-5), (5e4, 1e9)])
def test_the_fast_and_the_exact_path_draw_the_same_cells(monkeypatch, std, shift):
    """Every coordinate forced through the arbitrary-precision path gives the cell the float64 path
    gave for the same 64 bits (the two are written independently: ndtri in float64 against erfinv
    and ncdf in mpmath)."""
    x = torch.linspace(-3, 3, 300, dtype=torch.float64) * std + shift
    fast = gaussian_release(SecureGenerator.from_seed(4), x, std)
    monkeypatch.setattr(S, "_cells", lambda f, neg, k, s: np.full(f.shape, np.nan))
    slow = gaussian_release(SecureGenerator.from_seed(4), x, std)
    assert torch.equal(fast, slow)


def test_an_undecided_tail_draw_is_resolved_with_more_bits():
    """k = 0 (U below 2^-64): the float64 path cannot decide; the exact path draws more bits and lands
    in the far tail, on the grid."""
    g = SecureGenerator.from_seed(9)
    s = 6000.0
    assert np.isnan(S._cells(np.array([0.25]), np.array([False]), np.array([0], dtype=np.uint64), s))[0]
    c = S._exact_cell(g, 0.25, False, 0, s)
    assert c == math.floor(c) and c > 9.0 * s           # beyond 9.1 std: the tail U < 2^-64 holds


def test_the_release_is_on_the_noise_grid_whatever_the_value():
    g = SecureGenerator.from_seed(1)
    for std in (1.0, 0.01, 7.5, 1e-12, 1e12):
        e = S.grid_exponent(std)
        x = torch.randn(1000, dtype=torch.float64) * 100
        out = gaussian_release(g, x, std).numpy()
        assert np.array_equal(np.ldexp(out, -e), np.round(np.ldexp(out, -e)))
        assert 2.0 ** -13 < 2.0 ** e / std <= 2.0 ** -12


def test_a_std_too_small_for_the_values_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^std=1e-300 is not allowed in secure mode"):
        gaussian_release(SecureGenerator.from_seed(1), torch.tensor([1e30], dtype=torch.float64), 1e-300)


# -- its statistics ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("x0", [0.0, 0.37])
def test_a_million_draws_have_the_claimed_mean_variance_and_distribution(x0):
    from scipy import stats

    n, std = 1_000_000, 1.3
    out = gaussian_release(SecureGenerator.from_seed(2024), torch.full((n,), x0, dtype=torch.float64), std)
    z = (out.numpy() - x0) / std
    assert abs(z.mean()) < 5 / math.sqrt(n)
    lo, hi = stats.chi2.ppf(1e-6, n) / n, stats.chi2.isf(1e-6, n) / n
    assert lo < float(np.mean(z * z)) < hi
    assert stats.kstest(z, "norm").pvalue > 1e-3
    # the rounding's share of the variance: at most gamma^2 / 12 (gamma <= std / 4096)
    assert abs(float(np.var(z)) - 1.0) < 1e-2


def test_the_bits_are_uniform_and_their_streams_independent():
    """64-bit words: each bit's frequency, and two child streams uncorrelated (the generator is
    ChaCha20: these are sanity checks of how it is called, not of the cipher)."""
    root = SecureGenerator.from_seed(3)
    a, b = root.child("data").words(100_000), root.child("noise").words(100_000)
    bits = np.unpackbits(a.view(np.uint8)).reshape(-1, 64)
    assert np.all(np.abs(bits.mean(0) - 0.5) < 5 * 0.5 / math.sqrt(100_000))
    ua, ub = (a >> np.uint64(11)).astype(float) / 2 ** 53, (b >> np.uint64(11)).astype(float) / 2 ** 53
    assert abs(np.corrcoef(ua, ub)[0, 1]) < 5 / math.sqrt(100_000)


def test_the_state_round_trips_and_the_keystream_crosses_the_block_counter():
    g = SecureGenerator.from_seed(5)
    g.words(10)
    st = g.get_state()
    a = g.words(1000)
    g.set_state(st)
    assert np.array_equal(g.words(1000), a)
    # one read across the 32-bit block counter's wrap equals two reads on either side of it
    h = SecureGenerator.from_seed(6)
    h._block = 2 ** 32 - 2
    both = h.bytes(256)
    h._block = 2 ** 32 - 2
    assert h.bytes(128) + h.bytes(128) == both
    with pytest.raises(ValueError, match="secure generator's state is 48 bytes"):
        g.set_state(torch.Generator().get_state())


def test_permutations_and_integers_are_uniform():
    from scipy import stats

    g = SecureGenerator.from_seed(8)
    firsts = np.array([int(S.permutation(g, 5)[0]) for _ in range(5000)])
    assert stats.chisquare(np.bincount(firsts, minlength=5)).pvalue > 1e-4
    ints = S.randint(g, 7, 70_000).numpy()
    assert stats.chisquare(np.bincount(ints, minlength=7)).pvalue > 1e-4
    perm = S.permutation(g, 1000)
    assert sorted(perm.tolist()) == list(range(1000))


# -- the support attack ---------------------------------------------------------------------------------
def _attack_advantage(release, in_support, draws=100_000) -> float:
    """Jin et al.'s support attack on "was the mean 0 or 1?": an output only the support of one mean
    holds names that mean; otherwise guess 1.  Advantage = P(guess 0 | mean 0) - P(guess 0 | mean 1)
    = 2 P(correct) - 1 over equally likely means."""
    guessed_0 = {}
    for mean in (0.0, 1.0):
        y = release(mean, draws)
        s0, s1 = in_support(y, 0.0), in_support(y, 1.0)
        guessed_0[mean] = float(np.mean(s0 & ~s1))
    return guessed_0[0.0] - guessed_0[1.0]


def test_the_support_attack_learns_nothing_from_the_secure_sampler():
    """Its outputs lie on the grid gamma Z whatever the mean: both supports hold every output."""
    g = SecureGenerator.from_seed(11)
    gamma = 2.0 ** S.grid_exponent(1.0)

    def release(mean, n):
        return gaussian_release(g, torch.full((n,), mean, dtype=torch.float32), 1.0).double().numpy()

    def in_support(y, mean):
        k = y / gamma
        return (k == np.round(k)) & (np.abs(y - mean) < 80.0)

    adv = _attack_advantage(release, in_support)
    assert abs(adv) <= 0.01, adv


def test_the_support_attack_tells_the_means_apart_from_torchs_plain_sampler():
    """torch.randn in float32, then ``mean + noise``: a release of mean 1 that lands in (-1/2, 1/2)
    is 1 + w with w in [-3/2, -1/2], exactly representable and a multiple of 2^-24; one of mean 0 is
    fl(z), mostly not.  So 'not on 2^-24 Z' proves mean 0.  Measured advantage: docs/threat-model.md."""
    gen = torch.Generator().manual_seed(0)

    def release(mean, n):
        return (mean + torch.randn(n, generator=gen, dtype=torch.float32)).double().numpy()

    def in_support(y, mean):
        if mean == 0.0:
            return np.ones(y.shape, dtype=bool)
        k = y * 2.0 ** 24
        return k == np.round(k)

    adv = _attack_advantage(release, in_support)
    assert 0.2 < adv < 0.35, adv


# -- the pooled noise test sees the noise's shape ------------------------------------------------------
CLAIM = StepClaim(sensitivity=1.0, noise_std=0.5)
SHAPES = {
    "laplace": lambda g, n: torch.distributions.Laplace(0.0, 0.5 / math.sqrt(2)).sample((n,)),
    "uniform": lambda g, n: (torch.rand(n, generator=g, dtype=torch.float64) - 0.5) * (0.5 * math.sqrt(12)),
    "mixture": lambda g, n: 0.5 * (torch.where(torch.rand(n, generator=g) < 0.5, -0.8, 0.8)
                                   + 0.6 * torch.randn(n, generator=g, dtype=torch.float64)),
    "gaussian": lambda g, n: 0.5 * torch.randn(n, generator=g, dtype=torch.float64),
    "secure": lambda g, n: gaussian_release(SecureGenerator.from_seed(g.initial_seed()),
                                            torch.zeros(n, dtype=torch.float64), 0.5),
}


def _step(shape):
    base = torch.linspace(-1, 1, 200, dtype=torch.float64)

    def fn(batch, noise, generator):
        if not noise:
            return base
        torch.manual_seed(generator.initial_seed())        # the Laplace sampler draws from the global one
        return base + SHAPES[shape](generator, 200)
    return FunctionStep(fn, CLAIM)


@pytest.mark.parametrize("shape", ["laplace", "uniform", "mixture"])
def test_the_pooled_test_flags_noise_of_another_shape_at_the_claimed_std(shape):
    std, ks, _ = noise_test_step(_step(shape), None, draws=200, seed=1)
    assert std.passed                                   # the std is right: the chi-square test cannot see it
    assert not ks.pooled.passed and not ks.passed
    assert ks.pooled.draws == 40_000 and ks.pooled.detectable < 0.021


@pytest.mark.parametrize("shape", ["gaussian", "secure"])
def test_the_pooled_test_passes_the_right_noise(shape):
    std, ks, _ = noise_test_step(_step(shape), None, draws=200, seed=1)
    assert std.passed and ks.pooled.passed and ks.passed


def test_the_pooled_test_reads_a_runs_recorded_releases():
    """A secure noise source's recorded releases (200 of 200 coordinates; noise = release - value, on
    the grid) pass; the same releases with Laplace noise at the same std fail."""
    src = O.NoiseSource(SecureGenerator.from_seed(3), "cpu", torch.float32, record=True)
    for r in range(200):
        src.privatize(torch.linspace(-5, 5, 200), 0.8, round=r, name="sum", sensitivity=1.0, relation="add/remove")
    rel = src.releases
    assert noise_pooled_test(rel).passed and noise_pooled_test(rel).draws == 40_000
    lap = torch.distributions.Laplace(0.0, 1.0 / math.sqrt(2))
    torch.manual_seed(0)
    bad = [O.Release(r.round, r.name, r.std, r.sensitivity, r.relation, lap.sample(r.noise.shape) * r.std) for r in rel]
    assert not noise_pooled_test(bad).passed
