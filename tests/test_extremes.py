"""The accounting at the extremes of the noise: eps = 0 exactly where the total variation between the
two runs is at most delta (an upper bound on delta(0), checked against exact GDP), eps = inf (never a
crash) where the noise underflows, and every accountant defined from 1e-320 to 1e300."""

import dataclasses
import math

import mpmath
import numpy as np
import pytest

from dpcalib.accountant import (GaussianEvent, PoissonSampledGaussianEvent, PrivacyAccountant,
                                WORSampledGaussianEvent, gdp_epsilon)
from dpcalib.accountant.events import total_variation_bound


@pytest.mark.parametrize("z,k", [(1.0, 1), (10.0, 100), (1e3, 10), (1e6, 1000), (0.3, 3)])
def test_total_variation_bound_is_at_least_the_exact_gdp_delta_at_zero(z, k):
    mu = math.sqrt(k) / z
    with mpmath.workdps(40):
        exact = float(2 * mpmath.ncdf(mpmath.mpf(mu) / 2) - 1)     # delta(0) of mu-GDP (Balle & Wang)
    tv = total_variation_bound([(GaussianEvent(z), k)])
    assert tv >= exact * (1 - 1e-12)
    assert tv <= k * exact * 1.0001 + 1e-300                      # and not far above (a union bound's worth)


@pytest.mark.parametrize("event", [PoissonSampledGaussianEvent(0.01, 2.0), WORSampledGaussianEvent(0.01, 2.0)])
def test_one_sampled_step_total_variation_is_the_mixtures(event):
    # (q N(1) + (1 - q) N(0), N(0)) has total variation q (2 Phi(1/(2z)) - 1)
    with mpmath.workdps(40):
        exact = float(mpmath.mpf(0.01) * (2 * mpmath.ncdf(1 / (2 * mpmath.mpf(2))) - 1))
    assert total_variation_bound([(event, 1)]) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("make", [lambda z: GaussianEvent(z), lambda z: PoissonSampledGaussianEvent(0.01, z),
                                  lambda z: WORSampledGaussianEvent(0.01, z)])
def test_huge_noise_is_exactly_zero_and_tiny_noise_is_inf(make):
    for z in (1e300, 1e100, 1e20):
        acc = PrivacyAccountant().compose(make(z), 1000)
        for accountant in ("best", "pld", "auto"):
            rep = acc.epsilon_report(1e-5, accountant)
            assert rep.epsilon == 0.0 and rep.method == "tv"
        assert acc.epsilon_bracket(1e-5).upper == 0.0
        assert math.isfinite(acc.get_epsilon(1e-5, "rdp"))        # RDP asked for answers as RDP
    for z in (1e-320, 1e-300, 1e-200):
        acc = PrivacyAccountant().compose(make(z), 1000)
        for accountant in ("best", "rdp"):
            assert acc.get_epsilon(1e-5, accountant) == math.inf


def test_moderate_noise_below_the_total_variation_still_answers_zero_consistently():
    # z = 50, q = 0.01, 10 steps: total variation ~8e-4 <= delta = 1e-3, so eps = 0; RDP agrees it is small
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 50.0), 10)
    assert acc.total_variation_bound() <= 1e-3
    assert acc.get_epsilon(1e-3) == 0.0
    assert 0.0 <= acc.get_epsilon(1e-3, "rdp") < 0.05
    assert acc.get_epsilon(1e-4) > 0.0                              # below the total variation: not zero


def test_gdp_epsilon_takes_mu_zero_and_inf():
    assert gdp_epsilon(0.0, 1e-5) == 0.0 and gdp_epsilon(math.inf, 1e-5) == math.inf


@pytest.mark.parametrize("n_min", [1, 2, 13, 100, 1651, 20000])
@pytest.mark.parametrize("eps", [0.5, 3.0, 30.0])
def test_diff2_bvr_largest_feasible_batch_equals_the_scan_of_every_batch(n_min, eps):
    """Lemma B.8's largest feasible b in closed form equals the scan over every b (the scan took minutes
    at n_min = 1e9)."""
    from dpcalib.mechanisms import DIFF2BVR
    from dpcalib.mechanisms.diff2 import _paper_alpha

    m = DIFF2BVR(200, 20, 10, n_min, 5, 1)
    a = _paper_alpha(eps, 1e-5)
    _, term1, _, _, best = m.simple_sigma3(eps, 1e-5)
    scan = max((b for b in range(1, n_min + 1) if m._b_conditions(b, a, max(term1, 6.0 * a / b ** 2))), default=None)
    assert best == scan


def test_diff2_bvr_paper_calibration_at_a_billion_records_is_quick():
    from dpcalib.mechanisms import DIFF2BVR

    rep = DIFF2BVR(2000, 20, 10, 10 ** 9, 5, 13).calibrate(3, 1e-5, method="paper")
    assert 0 < rep.certified_epsilon < 3


@pytest.mark.parametrize("z", [1e-300, 5e-324, 1e300, 1.7e308])
def test_a_gaussian_event_beside_a_linear_rdp_kind_is_defined_at_the_noise_extremes(z):
    """A full-batch Gaussian beside a zCDP release takes the linear-RDP route, whose slope was
    1 / (2 z^2): a division by zero below z = 1e-162 and an OverflowError above 1e154 (dpcalib epsilon
    diff2-bvr --sigma1 1e-300 stopped on an internal error; found by the CLI fuzz).  Now inf below, and
    above an answer no smaller than the Gaussian's own (never below the truth)."""
    from dpcalib.accountant.gaussian import gaussian_rdp, inverse_noise
    from dpcalib.accountant.mechanism_events import ZCDPEvent

    acc = PrivacyAccountant().compose(GaussianEvent(z), 10).compose(ZCDPEvent(0.01), 1)
    eps = acc.get_epsilon(1e-5, "rdp")
    alone = PrivacyAccountant().compose(ZCDPEvent(0.01), 1).get_epsilon(1e-5, "rdp")
    assert (eps == math.inf) if z < 1.0 else (alone <= eps < alone * (1 + 1e-12))
    with mpmath.workdps(40):                    # (compared in mpmath: the truth at 1e300 is below every double)
        truth = 1 / mpmath.mpf(z) ** 2
        assert z < 1e-154 or mpmath.mpf(inverse_noise(z)) * mpmath.mpf(inverse_noise(z)) >= truth * (1 - 1e-15)
        assert z < 1e-154 or mpmath.mpf(gaussian_rdp(2.0, z)) >= truth * (1 - 1e-15)


def test_the_linear_rdp_route_at_a_billion_steps_of_huge_noise_is_never_below_the_truth():
    """Where 1 / z^2 is below the smallest normal double (z = 1e300), the route takes that smallest double
    instead of 0 or a subnormal: at delta = 1e-300 and 1e9 steps eps is positive, as the truth is
    (delta(0) = erf(mu / (2 sqrt 2)) > delta for mu = sqrt(1e9) / 1e300)."""
    acc = PrivacyAccountant().compose(GaussianEvent(1e300), 10 ** 9)
    assert acc.get_epsilon(1e-300, "rdp") > 0.0
    with mpmath.workdps(60):
        mu = mpmath.sqrt(mpmath.mpf(10) ** 9) / mpmath.mpf(10) ** 300
        assert mpmath.erf(mu / (2 * mpmath.sqrt(2))) > mpmath.mpf(10) ** -300


@pytest.mark.parametrize("sigma", [1e-300, 1e-170, 1e-155])
def test_a_discrete_gaussian_of_vanishing_noise_is_inf_on_every_route_never_zero(sigma):
    """sigma^2 below the doubles made the discrete Gaussian's pair NaN, read as a total variation of 0:
    auto answered eps = 0 for a release with no noise, and RDP stopped on a ZeroDivisionError."""
    from dpcalib.accountant.mechanism_events import DiscreteGaussianEvent

    ev = DiscreteGaussianEvent(sigma, 1)
    assert ev.total_variation() == 1.0
    acc = PrivacyAccountant().compose(ev, 3)
    for accountant in ("best", "auto", "rdp", "pld"):
        assert acc.get_epsilon(1e-5, accountant) == math.inf, accountant


def test_a_finite_pair_refuses_a_nan_rather_than_reading_it_as_no_mass():
    from dpcalib.accountant.pld.lossdist import FinitePair

    assert FinitePair((0.0, 1.0), (0.5, 0.5), (0.5, 0.5)).total_variation() == 0.0
    for bad in (((math.nan, 1.0), (0.5, 0.5), (0.5, 0.5)), ((0.0, 1.0), (math.nan, 1.0), (0.5, 0.5)),
                ((0.0, 1.0), (0.5, 0.5), (-0.5, 1.5))):
        with pytest.raises(ArithmeticError):
            FinitePair(*bad)


def _gdp_delta_mp(eps, mu):
    eps, mu = mpmath.mpf(eps), mpmath.mpf(mu)
    return mpmath.ncdf(-eps / mu + mu / 2) - mpmath.exp(eps) * mpmath.ncdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("mu,delta", [(1e-17, 1e-20), (1e-14, 1e-300), (1e-12, 1e-300), (1e-10, 1e-300),
                                      (1e-8, 1e-100), (1e-6, 1e-10), (1e-4, 1e-12), (5e-3, 1e-5)])
def test_gdp_epsilon_of_a_tiny_mu_is_the_exact_root_never_below_it(mu, delta):
    """Below mu = 0.01 the profile's two log-tails cancel: the answer was 0 at mu = 1e-17 (delta(0) =
    4e-18 > 1e-20), 69 % short at mu = 1e-14 and 2e-5 short at 1e-10 (delta 1e-300).  Now their difference
    is integrated; mpmath's exact profile at the answer is at most delta, and the answer is the root."""
    eps = gdp_epsilon(mu, delta)
    with mpmath.workdps(80):
        assert _gdp_delta_mp(0, mu) > delta and eps > 0.0
        assert _gdp_delta_mp(eps, mu) <= mpmath.mpf(delta) * (1 + 1e-12)
        assert _gdp_delta_mp(eps * (1 - 1e-9), mu) > delta          # (and no more than 1e-9 above the root)


def test_the_gdp_route_of_huge_noise_answers_a_positive_eps_where_the_truth_is_positive():
    for z, k, delta in ((1e17, 1, 1e-20), (1e300, 10 ** 9, 1e-300)):
        acc = PrivacyAccountant().compose(GaussianEvent(z), k)
        for accountant in ("best", "gdp", "auto", "rdp"):
            assert acc.get_epsilon(delta, accountant) > 0.0, (z, accountant)


@pytest.mark.parametrize("z", [1e-200, 1e-155, 3e161, 1e200])
def test_sampling_around_composed_gaussians_is_defined_at_the_noise_extremes(z):
    """The tree's composed noise multiplier took (1/z)^2: an OverflowError below z = 7.5e-155, inf (a
    refusal) above 1.3e154, and in between a subnormal that overstated the noise (3e161 twice gave
    2.249e161 for 2.121e161).  Now never above the true multiplier."""
    from dpcalib.accountant.tree_events import PoissonSampledEvent, SelfComposedEvent

    ev = PoissonSampledEvent(0.01, SelfComposedEvent(GaussianEvent(z), 2))
    (leaf, _), = ev.leaves()
    assert leaf.noise_multiplier <= z / math.sqrt(2) * (1 + 1e-15)
    acc = PrivacyAccountant().compose(ev, 10)
    for accountant in ("best", "rdp", "auto"):
        eps = acc.get_epsilon(1e-5, accountant)
        assert eps == math.inf if z < 1.0 else eps >= 0.0


@pytest.mark.parametrize("sd", [1e-200, 1e-151, 1e151, 1e200])
def test_a_mixture_of_gaussians_past_the_doubles_is_refused_in_one_line(sd):
    from dpcalib.accountant.mechanism_events import MixtureOfGaussiansEvent
    from dpcalib.accountant.validation import InputError

    with pytest.raises(InputError) as exc:
        MixtureOfGaussiansEvent(sd, (1.0,), (1.0,))
    assert str(exc.value).startswith("standard_deviation=") and "[1e-150, 1e+150]" in str(exc.value)


@pytest.mark.parametrize("mu", [0.01, 0.03125, 0.1, 0.5, 1.0, 5.0, 30.0])
def test_exact_gdp_is_never_below_the_exact_profile_at_any_delta(mu):
    """The profile's log-space evaluation rounds by a few units of its largest term: uncounted, the answer
    sat up to 3e-13 (relative) below the root at delta = 1e-100 (mpmath's profile at it exceeded delta by
    1e-10).  Counted now, in eps and in gdp_mu's inverse."""
    from dpcalib.accountant.gdp import gdp_mu

    with mpmath.workdps(80):
        for delta in (1e-300, 1e-100, 1e-10, 1e-5, 0.3):
            eps = gdp_epsilon(mu, delta)
            assert eps == 0.0 and _gdp_delta_mp(0, mu) <= delta or _gdp_delta_mp(eps, mu) <= delta, (mu, delta)
            m = gdp_mu(mu, delta)                   # (mu read as an eps here: the largest mu it allows)
            assert _gdp_delta_mp(mu, m) <= delta, (mu, delta)


@pytest.mark.parametrize("b", [1e-300, 1e-20, 1e-3, 1.4e-3])
def test_a_laplace_release_of_tiny_scale_answers_alone_and_sampled(b):
    """An atom of the Laplace pair sits at loss -1/b; its Q-mass p e^(1/b) overflowed below b = 1.4e-3 (an
    internal error on every route), and an atom at an infinite loss broke the grid's alignment.  Alone, 10
    releases are 10/b-DP: the answer is that (up to the grid), never less."""
    from dpcalib.accountant.mechanism_events import LaplaceEvent
    from dpcalib.accountant.tree_events import PoissonSampledEvent

    for d in (1e-5, 1e-300):
        eps = PrivacyAccountant().compose(LaplaceEvent(b), 10).get_epsilon(d)
        assert 10 / b * (1 - 1e-5) <= eps <= 10 / b * (1 + 1e-3), (b, d, eps)
        for q in (0.01, 1e-12):
            sampled = PrivacyAccountant().compose(PoissonSampledEvent(q, LaplaceEvent(b)), 10).get_epsilon(d)
            # (below b = 1e-10 a sampled loss of 1/b is past every grid and past RDP's reach: inf, sound and
            # loose -- sampling never costs more than the release alone)
            assert 0.0 <= sampled <= eps * (1 + 1e-9) or (b < 1e-10 and sampled == math.inf), (b, q, d, sampled)


def test_the_pld_never_answers_zero_where_the_total_variation_exceeds_a_tiny_delta():
    """At noise 1e20 the grid's masses near loss 0 fall below double precision: the PLD answered eps = 0
    at delta = 1e-300 though delta(0) = 4e-21 (for one release, exactly the total variation).  For the
    Gaussian kinds its upper end is now exact GDP of the dominating full-batch releases; another kind
    (Laplace, whose total variation also read -0 there) is refused and the best route answers by RDP."""
    from dpcalib.accountant import pld_epsilon
    from dpcalib.accountant.mechanism_events import LaplaceEvent
    from dpcalib.accountant.validation import InputError

    b = pld_epsilon([(GaussianEvent(1e20), 1)], 1e-300)
    assert b.upper == gdp_epsilon(1e-20, 1e-300) > 0.0 and b.lower == 0.0
    with pytest.raises(InputError, match="delta=1e-300"):
        pld_epsilon([(LaplaceEvent(1e20), 1)], 1e-300)
    with mpmath.workdps(40):
        assert PrivacyAccountant().compose(LaplaceEvent(1e20), 1).total_variation_bound() == pytest.approx(
            float(1 - mpmath.exp(-1 / (2 * mpmath.mpf(1e20)))), rel=1e-12)
    for ev in (GaussianEvent(1e20), PoissonSampledGaussianEvent(1e-12, 1e20), WORSampledGaussianEvent(0.01, 1e20),
               LaplaceEvent(1e20)):
        acc = PrivacyAccountant().compose(ev, 1)
        assert acc.total_variation_bound() > 1e-300
        assert acc.get_epsilon(1e-300) > 0.0 and acc.get_epsilon(1e-300, "auto") > 0.0
        assert acc.get_epsilon(1e-5) == 0.0                 # (total variation <= delta: exactly 0)


@pytest.mark.parametrize("eps,dlt", [(1e300, 0.0), (1e300, 0.1), (800.0, 0.0)])
def test_an_epsilon_delta_release_past_e_to_the_709_answers(eps, dlt):
    """Its pair's mass at -eps, (1 - delta) / (1 + e^eps), overflowed past eps = 709 (found by the grid over
    every kind's extremes): an internal error on every route.  Pure DP composes to k eps; with delta > 0
    three releases already exceed delta = 1e-5 in total variation, so eps = inf."""
    from dpcalib.accountant.mechanism_events import EpsilonDeltaEvent

    got = PrivacyAccountant().compose(EpsilonDeltaEvent(eps, dlt), 3).get_epsilon(1e-5)
    assert got == (math.inf if dlt > 0 else pytest.approx(3 * eps, rel=1e-12)) and got >= (3 * eps if dlt == 0 else 0)


@pytest.mark.parametrize("sigma", [1e3, 1e4])
def test_a_discrete_gaussian_at_the_top_of_its_range_is_bracketed_around_the_direct_sum(sigma):
    """sigma up to 1e4 is allowed: its pair has 80 sigma atoms, which the grid's step choice, the lattice test
    and the lower step each read in a Python loop (101 s for ten releases at 1e4; now the pair is made once and
    read as arrays).  The oracle sums delta(eps) over the integers directly (CKS20: the loss of x is
    (2x - 1) / (2 sigma^2)), with no grid."""
    from dpcalib.accountant.mechanism_events import DiscreteGaussianEvent
    from scipy.optimize import brentq

    x = np.arange(-int(40 * sigma) - 2, int(40 * sigma) + 3, dtype=float)
    s2 = 2.0 * sigma * sigma
    logz = np.logaddexp.reduce(-x * x / s2)

    def delta(eps):
        xs = x[(2.0 * x - 1.0) / s2 > eps]
        return float(np.sum(np.exp(-(xs - 1.0) ** 2 / s2 - logz) - np.exp(eps - xs * xs / s2 - logz)))

    truth = brentq(lambda e: delta(e) - 1e-5, 0.0, 1.0, xtol=1e-15, rtol=1e-13)
    b = PrivacyAccountant().compose(DiscreteGaussianEvent(sigma, 1), 1).epsilon_bracket(1e-5, rtol=1e-4, atol=0.0,
                                                                                         methods=("pld",))
    assert b.lower <= truth * (1 + 1e-9) and truth * (1 - 1e-9) <= b.upper, (b, truth)
    assert b.upper <= truth * (1 + 2e-4)


def test_a_discrete_gaussian_pair_is_named_by_its_parameters_and_its_atoms_are_kept_apart():
    """The pair (80 sigma atoms) is a MadePair: equal and hashed by (sigma, s), so equal events hit the same
    cache entries, pickled as its two numbers; its atoms sit in a small cache of their own.  Held as tuples
    by the caches keyed by pairs and events, a sweep over sigma near 1e4 grew by ~120 MB a query."""
    import pickle

    from dpcalib.accountant.mechanism_events import DiscreteGaussianEvent
    from dpcalib.accountant.pld import lossdist

    a, b = DiscreteGaussianEvent(300.0, 1), DiscreteGaussianEvent(200.0, 2)
    acc = PrivacyAccountant().compose(a, 2).compose(b, 3)
    eps = acc.get_epsilon(1e-5)
    pa = a.pld_pairs("remove")[0]
    assert pa == a.pld_pairs("add")[0] == DiscreteGaussianEvent(300.0, 1).pld_pairs("remove")[0] != b.pld_pairs("add")[0]
    assert hash(pa) == hash(DiscreteGaussianEvent(300.0, 1).pld_pairs("add")[0])
    assert pa.atom_count == len(pa.losses) > 24000 and len(pickle.dumps(a)) < 1000 and len(pickle.dumps(pa)) < 1000
    assert pickle.loads(pickle.dumps(pa)) == pa
    with pytest.raises(dataclasses.FrozenInstanceError):
        pa.args = (1.0, 1)                                           # (a cache key)
    again = pickle.loads(pickle.dumps(acc))
    assert again.get_epsilon(1e-5) == eps and 0.0 < eps < math.inf
    for sigma in range(9000, 9020):          # a sweep of 20 (17 MB of atoms each): the atoms' cache stays bounded
        DiscreteGaussianEvent(float(sigma), 1).pld_pairs("remove")[0].support()
    assert 8 <= len(lossdist._MADE) < 20
    assert sum(lossdist._MADE.size(v) for v in lossdist._MADE.values()) <= lossdist._MADE.budget


def test_a_sized_memo_keeps_the_most_recently_used_answers_within_its_budget():
    """SizedMemo (the bins' and the made pairs' caches): least recently used out first, a recall counts as a
    use, an answer over half the budget is returned but not kept."""
    from dpcalib.accountant.caches import SizedMemo

    memo = SizedMemo(100, len)
    for key in "abc":
        memo.remember(key, "x" * 30)
    assert memo.recall("a") == "x" * 30 and memo.recall("z") is None
    memo.remember("d", "y" * 30)                 # 120 > 100: b, the least recently used, goes
    assert sorted(memo) == ["a", "c", "d"]
    assert memo.remember("e", "z" * 51) == "z" * 51 and "e" not in memo


def test_a_made_pair_reads_as_the_finite_pair_of_its_atoms():
    """Every reading of a MadePair (masses, support, atoms, total variation, Renyi, bins) is the tuple pair's
    of the same atoms, bit for bit -- the total variation's running sum included (a discrete Laplace of
    sensitivity 500 and a discrete Gaussian: many atoms; one of sensitivity 3: few)."""
    from dpcalib.accountant.mechanism_events import _discrete_gaussian_atoms, _discrete_laplace_atoms
    from dpcalib.accountant.pld.lossdist import FinitePair, MadePair

    for make, args in ((_discrete_laplace_atoms, (0.01, 500)), (_discrete_laplace_atoms, (0.7, 3)),
                       (_discrete_gaussian_atoms, (7.5, 2)), (_discrete_gaussian_atoms, (0.3, 1))):
        made = MadePair(make, args)
        plain = FinitePair(*(tuple(v.tolist()) for v in make(*args)))
        assert made.atom_count == plain.atom_count and made.losses == plain.losses and made.qm == plain.qm
        p_gt = q_gt = 0.0                       # the sum from the largest loss down, in Python
        for l, p, q in zip(reversed(plain.losses), reversed(plain.p), reversed(plain.qm)):
            if not l > 0.0:
                break
            p_gt, q_gt = p_gt + p, q_gt + q
        tv = min(1.0, max(0.0, p_gt - q_gt))
        assert made.total_variation() == plain.total_variation() == tv and made.support() == plain.support()
        assert made.atoms() == plain.atoms()
        ls = np.array([-np.inf, -1.0, -1e-3, 0.0, 1e-3, 0.5, 2.0, np.inf])
        for side in ("P", "Q"):
            for how in ("le", "lt", "ge", "gt"):
                assert np.array_equal(made.mass(side, ls, how), plain.mass(side, ls, how))
        orders = np.array([1.5, 2.0, 32.0])
        assert np.array_equal(made.renyi(orders), plain.renyi(orders))
        edges = np.linspace(-1.0, 1.0, 101)
        assert all(np.array_equal(x, y) for x, y in zip(made.bins(edges), plain.bins(edges)))


def test_renyi_of_a_block_of_orders_at_a_time_is_the_one_block_answer():
    """renyi_of works through the orders a block at a time (79 orders of a million atoms took 2 GB at once): the
    same numbers bit for bit, whatever the block (1, 7 or all orders), on random pairs with atoms one side lacks;
    and a Poisson-sampled finite pair's RDP is the two sampled pairs' of the former construction."""
    from dpcalib.accountant import DiscreteLaplaceEvent, RandomizedResponseEvent
    from dpcalib.accountant.pld import lossdist
    from dpcalib.accountant.pld.lossdist import FinitePair, renyi_of
    from dpcalib.accountant.tree_events import PoissonSampledEvent

    def one_block(p, q, alpha):
        a = np.asarray(alpha, dtype=float)[..., None]
        out = []
        for x, y in ((p, q), (q, p)):
            k = x > 0
            if np.any(k & (y <= 0)):
                out.append(np.full(a.shape[:-1], np.inf))
                continue
            t = a * np.log(x[k]) + (1.0 - a) * np.log(y[k])
            mx = t.max(axis=-1, keepdims=True)
            out.append(np.maximum((mx + np.log(np.exp(t - mx).sum(axis=-1, keepdims=True)))[..., 0], 0.0)
                       / (a[..., 0] - 1.0))
        return np.maximum(*out)

    rng = np.random.default_rng(7)
    orders = (np.array(2.0), np.array([1.5, 2.0, 3.7, 64.0, 1024.0]), np.linspace(1.01, 500, 79),
              np.linspace(1.1, 9.0, 12).reshape(3, 4))
    saved = lossdist._BLOCK
    try:
        for trial in range(120):
            n = int(rng.choice([2, 5, 100, 3000]))
            p, q = rng.random(n) ** 3, rng.random(n) ** 3
            if trial % 7 == 0:
                p[0] = 0.0
            if trial % 11 == 0:
                q[-1] = 0.0
            p, q = p / p.sum(), q / q.sum()
            lossdist._BLOCK = int(rng.choice([1, 7, 1 << 22]))
            alpha = orders[trial % 4]
            got = renyi_of(p, q, alpha)
            assert got.shape == np.shape(alpha) and np.array_equal(got, one_block(p, q, alpha)), trial
    finally:
        lossdist._BLOCK = saved
    for ev in (DiscreteLaplaceEvent(0.05, 300), RandomizedResponseEvent(0.3, 5)):
        L, p, qq = ev.pld_pairs("remove")[0].arrays
        f = np.logaddexp(math.log1p(-0.01), math.log(0.01) + L)
        mix = tuple((1 - 0.01) * qq + 0.01 * p)
        rem, add = FinitePair(tuple(f), mix, tuple(qq)), FinitePair(tuple(-f), tuple(qq), mix)
        alpha = np.array([1.5, 2.0, 8.0, 256.0])
        assert np.array_equal(PoissonSampledEvent(0.01, ev).rdp(alpha), np.maximum(rem.renyi(alpha), add.renyi(alpha)))


def test_a_sampled_pair_of_losses_millions_apart_gets_a_bracket_not_an_overflow():
    """A discrete Laplace of parameter 10 and sensitivity 1e6 (pure eps0 = 1e7) or a discrete Gaussian of
    sigma 1 and sensitivity 1e4, sampled 10 of 1000 without replacement: the lower step's chord spanned more
    than e^709 in t = e^eps and raised OverflowError through epsilon_bracket and get_epsilon.  Now the lower
    step gives up there (the other lower bound answers).  Oracles: sampling never costs more than the mechanism
    alone; and the sampled pair's top atom, at L* = log(1 - q + q e^eps0) = eps0 + log q, holds P-mass ~q, so
    delta(eps) ~ q (1 - e^(eps - L*)) puts the truth within 0.01 below L*."""
    from dpcalib.accountant import DiscreteGaussianEvent, DiscreteLaplaceEvent
    from dpcalib.accountant.tree_events import WORSampledEvent

    b = PrivacyAccountant().compose(WORSampledEvent(10, 1000, DiscreteLaplaceEvent(10.0, 10 ** 6)), 1) \
        .epsilon_bracket(1e-5)
    top = 1e7 + math.log(0.01)
    assert 1e7 - 100.0 <= b.lower <= top and top - 0.01 <= b.upper <= 1e7
    alone = PrivacyAccountant().compose(DiscreteGaussianEvent(1.0, 10 ** 4), 1).get_epsilon(1e-5)
    b = PrivacyAccountant().compose(WORSampledEvent(10, 1000, DiscreteGaussianEvent(1.0, 10 ** 4)), 1) \
        .epsilon_bracket(1e-5)
    assert 0.0 < b.lower <= b.upper <= alone < math.inf


def test_a_pure_dp_kind_whose_masses_underflow_keeps_a_finite_rdp():
    """A discrete Laplace of eps0 = a s = 1e7: its Q-mass at the top atom underflows, so the exact Rényi
    divergence read inf and the RDP route answered inf (and, sampled k = 1000 times, where the PLD is over its
    memory cap, so did best).  D_alpha <= D_inf = eps0, and Poisson-sampled log(1 + q (e^eps0 - 1)), cap it.
    Oracles: pure composition (k eps0, and k times the sampled level) bounds every answer; unsampled, the top
    atom has P-mass 1 - 5e-5 a step, so the truth is k eps0 within a part in 1e12."""
    from dpcalib.accountant import DiscreteLaplaceEvent
    from dpcalib.accountant.tree_events import PoissonSampledEvent

    k, e0, q = 1000, 1e7, 0.01
    acc = PrivacyAccountant().compose(DiscreteLaplaceEvent(10.0, 10 ** 6), k)
    assert k * e0 * (1 - 1e-12) <= acc.get_epsilon(1e-5) <= k * e0 <= acc.get_epsilon(1e-5, accountant="rdp") \
        <= k * e0 + 0.01
    top = e0 + math.log(q) + 1e-12                 # log(1 + q (e^eps0 - 1)): (1 - q) e^-eps0 / q is below 1e-12
    sampled = PrivacyAccountant().compose(PoissonSampledEvent(q, DiscreteLaplaceEvent(10.0, 10 ** 6)), k)
    assert 0.0 < sampled.get_epsilon(1e-5, accountant="rdp") <= k * top * (1 + 1e-12)
    # where q e^eps0 is small the level is not eps0 + log q: log(1 + q (e^eps0 - 1)) itself, never below it
    from dpcalib.accountant import EpsilonDeltaEvent

    mpmath.mp.dps = 60
    try:
        for q, e0 in ((5e-324, 746.0), (1e-305, 700.0), (1e-300, 720.0), (0.5, 800.0), (1e-3, 30.0)):
            level = mpmath.log(1 + mpmath.mpf(q) * mpmath.expm1(e0))
            orders = np.array([2.0, 64.0, 1e4])
            got = PoissonSampledEvent(q, EpsilonDeltaEvent(e0)).rdp(orders)
            hi, lo = 1 / (1 + mpmath.exp(-e0)), 1 / (1 + mpmath.exp(e0))   # the pure pair: P (lo, hi), Q (hi, lo)
            m = [(1 - q) * hi + q * lo, (1 - q) * lo + q * hi]
            for a, g in zip(orders, got):
                a = mpmath.mpf(a)
                truth = max(mpmath.log(sum(x ** a * y ** (1 - a) for x, y in zip(u, v))) / (a - 1)
                            for u, v in ((m, (hi, lo)), ((hi, lo), m)))
                assert truth * (1 - 1e-12) <= g <= level * (1 + 1e-12), (q, e0, float(a), g, truth, level)
    finally:
        mpmath.mp.dps = 15
