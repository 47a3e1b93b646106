"""The privacy-loss-distribution accountant: its bracket against independent oracles.

Oracles: the exact GDP profile in mpmath (tests/oracles.py), a brute-force integration of the
actual without-replacement mechanism on a worst-case one-dimensional dataset, the RDP bounds
(Mironov et al. 2019 for Poisson, WBK19 Thm 27 for sampling without replacement) and
dp-accounting's PLD accountant.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from dpcalib.accountant import (
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyAccountant,
    WORSampledGaussianEvent,
)
from dpcalib.accountant.pld import bracket as PB
from dpcalib.accountant.pld import compose as PC
from dpcalib.accountant.pld import discretise as PS
from dpcalib.accountant.pld import pairs as PP
from dpcalib.accountant.pld import pld_epsilon
from dpcalib.accountant.pld import pld_delta

from tests import oracles

log_uniform = lambda lo, hi: st.floats(math.log(lo), math.log(hi)).map(math.exp)  # noqa: E731


# -- full batch: the exact answer is known -------------------------------------------------

@settings(max_examples=100, derandomize=True, deadline=None)
@given(zs=st.lists(st.tuples(log_uniform(0.8, 30.0), st.integers(1, 300)), min_size=1, max_size=3),
       delta=log_uniform(1e-30, 1e-2))
def test_full_batch_gaussian_bracket_contains_the_exact_gdp_epsilon(zs, delta):
    mu = math.sqrt(sum(k / (z * z) for z, k in zs))
    exact = float(oracles.gdp_epsilon(mu, delta))
    b = pld_epsilon([(GaussianEvent(z), k) for z, k in zs], delta, rtol=1e-3)
    assert b.converged
    assert b.lower <= exact * (1 + 1e-12) + 1e-12
    assert exact <= b.upper * (1 + 1e-12) + 1e-12
    assert b.upper - b.lower <= 1e-3 * b.upper + 1e-12


@pytest.mark.parametrize("z, k, delta", [(1.0, 10, 1e-100), (5.0, 1000, 1e-30), (0.5, 3, 1e-200),
                                         (20.0, 10000, 1e-12)])
def test_small_delta_bracket_contains_the_exact_gdp_epsilon(z, k, delta):
    """The tilted composition keeps the round-off relative to delta."""
    exact = float(oracles.gdp_epsilon(math.sqrt(k) / z, delta))
    b = pld_epsilon([(GaussianEvent(z), k)], delta)
    assert b.converged
    assert b.lower <= exact <= b.upper
    assert b.upper - b.lower <= 1e-3 * b.upper


@pytest.mark.parametrize("z, k, delta", [(1000.0, 1, 1e-20), (1000.0, 1, 1e-250), (100.0, 1, 1e-250),
                                         (3000.0, 1, 1e-120), (300.0, 1, 1e-280)])
def test_delta_beyond_the_last_atom_keeps_the_upper_end_above_the_exact_gdp_epsilon(z, k, delta):
    # large noise, tiny delta: the crossing lies just above the last grid point that carries mass;
    # the read-off once returned -inf there (an upper end of 0, or below the truth) for a single step
    exact = float(oracles.gdp_epsilon(math.sqrt(k) / z, delta))
    b = pld_epsilon([(GaussianEvent(z), k)], delta)
    assert b.lower <= exact <= b.upper


@pytest.mark.parametrize("q, z", [(9.01e-5, 30.1), (1e-3, 50.0), (0.01, 200.0), (1e-6, 3.0)])
@pytest.mark.parametrize("delta", [1e-20, 1e-200])
def test_one_poisson_step_at_tiny_delta_is_bracketed_by_the_closed_form_profile(q, z, delta):
    # one step's delta(eps) in closed form (mpmath): delta(upper) <= delta, and delta(lower) >= delta
    b = pld_epsilon([(PoissonSampledGaussianEvent(q, z), 1)], delta)
    assert max(float(oracles.wor_profile(q, z, b.upper, d)) for d in ("remove", "add")) <= delta
    assert b.lower == 0.0 or max(float(oracles.wor_profile(q, z, b.lower, d)) for d in ("remove", "add")) >= delta
    assert b.upper > 0.0


@pytest.mark.parametrize("kind", ["poisson", "wor"])
@pytest.mark.parametrize("q, z", [(0.5, 0.01), (0.9, 0.02), (0.999, 0.01), (0.01, 0.01), (0.999, 2e-4)])
def test_one_step_at_tiny_noise_is_bracketed_by_the_closed_form_profile(kind, q, z):
    # losses past log(DBL_MAX) ~ 709.8: the bins once mapped them to x = +inf and rounded them down
    # to ~710 (eps 709.8 where the truth is 5425), and at q = 0.999, z = 2e-4 the lower bins of
    # sampling without replacement crashed; the remove pair at rate q is one instance of both events
    ev = PoissonSampledGaussianEvent(q, z) if kind == "poisson" else WORSampledGaussianEvent(q, z)
    b = pld_epsilon([(ev, 1)], 1e-5)
    prof = lambda e: max(float(oracles.wor_profile(q, z, e, d, dps=40)) for d in ("remove", "add"))  # noqa: E731
    assert prof(b.upper) <= 1e-5
    assert prof(b.lower) >= 1e-5
    assert b.upper > 709.8


@settings(max_examples=100, derandomize=True, deadline=None)
@given(kind=st.sampled_from(["poisson", "wor"]), q=log_uniform(1e-3, 1.0), z=log_uniform(0.005, 20.0),
       delta=log_uniform(1e-12, 0.1))
def test_every_accountant_of_one_step_is_at_least_the_closed_form_epsilon(kind, q, z, delta):
    # the remove pair at rate q (and its reverse) is attained by a pair of datasets under both
    # samplings, so its closed-form eps (mpmath) is a floor for the truth: no accountant may go below
    ev = PoissonSampledGaussianEvent(q, z) if kind == "poisson" else WORSampledGaussianEvent(q, z)
    acc = PrivacyAccountant().compose(ev, 1)
    prof = lambda e: max(float(oracles.wor_profile(q, z, e, d, dps=40)) for d in ("remove", "add"))  # noqa: E731
    for name in ("best", "rdp"):
        assert prof(acc.get_epsilon(delta, name)) <= delta * (1 + 1e-9), name
    b = acc.epsilon_bracket(delta, methods=("pld",))
    assert prof(b.upper) <= delta * (1 + 1e-9) and (b.lower == 0.0 or prof(b.lower) >= delta * (1 - 1e-9))


def test_wor_symmetrised_step_keeps_mass_and_dominates_both_directions():
    """The envelope step: total mass 1 on every grid, and its profile is max of the two."""
    from dpcalib.accountant import pld as P

    for h in (1e-2, 1e-4, 1e-6):
        pair = [PS._rounded_step(PP.pair(d, 0.9, 0.02), h, 1e-18, 1, P.MEMORY_CAP)
                for d in ("remove", "add")]
        sym = PS._symmetrised(*pair, h)
        assert abs(sym.mass.sum() + sym.inf - 1.0) <= 1e-12
        for eps in (-0.3, -0.01, 0.0, 0.02, 0.5, 2.0):
            j = round(eps / h) - sym.i0
            got = PS._profile(sym.mass, h)[j] + sym.inf
            want = max(float(oracles.wor_profile(0.02, 0.9, eps, d)) for d in ("remove", "add"))
            assert got == pytest.approx(want, rel=1e-7, abs=1e-13)


@pytest.mark.parametrize("z, eps", [(0.5, 0.0), (1.0, 1.0), (3.0, 0.2), (0.8, 4.0)])
def test_one_gaussian_step_delta_bracket_contains_the_closed_form(z, eps):
    exact = float(oracles.gdp_delta(eps, 1.0 / z))
    lo, up = pld_delta([GaussianEvent(z)], eps, discretization=1e-4)
    assert lo <= exact <= up
    assert up - exact <= 1e-7 * max(exact, 1e-3)


# -- Poisson: never above RDP, and agrees with dp-accounting ------------------------------

@settings(max_examples=30, derandomize=True, deadline=None)
@given(q=log_uniform(1e-3, 0.5), z=st.floats(0.6, 5.0), k=st.integers(1, 300),
       delta=log_uniform(1e-9, 1e-3))
def test_poisson_upper_is_never_above_the_rdp_epsilon(q, z, k, delta):
    ev = PoissonSampledGaussianEvent(q, z)
    b = pld_epsilon([(ev, k)], delta)
    rdp = PrivacyAccountant().compose(ev, k).get_epsilon(delta, accountant="rdp")
    assert b.upper <= rdp
    assert b.lower <= b.upper


def test_poisson_bracket_is_the_worse_direction():
    """add/remove: the composition of each direction, then the larger eps (not one direction only)."""
    from dpcalib.accountant import pld as P

    ev = [(PoissonSampledGaussianEvent(0.2, 0.7), 3)]
    h = 1e-4
    d = 1e-6
    per_direction = []
    for direction in ("remove", "add"):
        steps = PS.discretised_steps(ev, h, 1e-15, direction, P.MEMORY_CAP)
        per_direction.append(PB.upper_one(steps, h, d, P.MEMORY_CAP)[1])
    lo, up = P.pld_epsilon_at(ev, d, h)
    assert up == pytest.approx(max(per_direction), rel=1e-6)
    assert per_direction[0] != per_direction[1]


@pytest.mark.parametrize("q, z, k", [(0.05, 1.2, 50), (0.01, 0.9, 200), (0.3, 2.0, 20)])
def test_poisson_bracket_is_consistent_with_dp_accounting_pld(q, z, k):
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pld_mod

    delta = 1e-5
    anchors = {}
    for pessimistic in (True, False):
        pld = pld_mod.from_gaussian_mechanism(z, value_discretization_interval=1e-4,
                                              pessimistic_estimate=pessimistic, sampling_prob=q)
        anchors[pessimistic] = pld.self_compose(k).get_epsilon_for_delta(delta)
    b = pld_epsilon([(PoissonSampledGaussianEvent(q, z), k)], delta)
    # the true eps lies in both brackets, so they overlap; our certified side is no worse
    assert b.lower <= anchors[True] + 1e-9
    assert anchors[False] <= b.upper + 1e-9
    # on the same grid our certified side is as tight as dp-accounting's pessimistic one (which
    # drops its truncated tails and FFT round-off; ours charges them, ~1e-7 of eps)
    same_grid = pld_epsilon([(PoissonSampledGaussianEvent(q, z), k)], delta, discretization=1e-4)
    assert same_grid.upper <= anchors[True] * (1 + 1e-6)


# -- sampling without replacement, replace-one ---------------------------------------------

def _hockey_stick(means_a, means_b, sigma, eps):
    """H_{e^eps}(mix_a || mix_b) of equal-weight Gaussian mixtures, by adaptive quadrature."""
    ma, mb = np.asarray(means_a), np.asarray(means_b)

    def f(x):
        pa = np.mean(stats.norm.pdf(x, loc=ma, scale=sigma))
        pb = np.mean(stats.norm.pdf(x, loc=mb, scale=sigma))
        return max(pa - math.exp(eps) * pb, 0.0)

    pts = sorted(set(np.concatenate([ma, mb]).tolist()))
    lo, hi = min(pts) - 40 * sigma, max(pts) + 40 * sigma
    return integrate.quad(f, lo, hi, points=pts, limit=800, epsabs=1e-13, epsrel=1e-12)[0]


def _wor_release_means(values, b):
    """Mean of the released sum for every batch of size b (all batches equally likely)."""
    return [sum(values[i] for i in batch) for batch in itertools.combinations(range(len(values)), b)]


@pytest.mark.parametrize("n, b, z, eps", [(6, 2, 0.8, 0.0), (6, 2, 0.8, 1.0), (5, 1, 1.5, 0.5),
                                          (7, 3, 0.6, 2.0), (8, 2, 2.0, 0.1)])
def test_wor_one_step_matches_the_mechanism_integrated_over_every_batch(n, b, z, eps):
    # records contribute values clipped to [-C, C]; replace-one sensitivity 2C = 1, sigma = z
    C = 0.5
    D = [-C] * (n - 1) + [C]
    D_prime = [-C] * n
    mD, mDp = _wor_release_means(D, b), _wor_release_means(D_prime, b)
    brute = max(_hockey_stick(mD, mDp, z, eps), _hockey_stick(mDp, mD, z, eps))
    lo, up = pld_delta([WORSampledGaussianEvent.from_sizes(b, n, z)], eps, discretization=1e-4)
    assert abs(up - brute) <= 1e-6
    assert lo <= brute <= up + 1e-12


@settings(max_examples=30, derandomize=True, deadline=None)
@given(gamma=log_uniform(1e-3, 0.5), z=st.floats(0.7, 5.0), k=st.integers(1, 300),
       delta=log_uniform(1e-9, 1e-3))
def test_wor_upper_is_never_above_wbk_thm27(gamma, z, k, delta):
    ev = WORSampledGaussianEvent(gamma, z)
    b = pld_epsilon([(ev, k)], delta)
    rdp = PrivacyAccountant().compose(ev, k).get_epsilon(delta, accountant="rdp")
    assert b.upper <= rdp
    assert b.lower <= b.upper


def test_heterogeneous_composition_is_bracketed_between_its_parts():
    a, b_ = (GaussianEvent(2.0), 20), (PoissonSampledGaussianEvent(0.05, 1.0), 100)
    both = pld_epsilon([a, b_], 1e-5)
    alone = [pld_epsilon([x], 1e-5) for x in (a, b_)]
    assert both.lower >= max(x.lower for x in alone) - 1e-9
    rdp = PrivacyAccountant().compose(*a).compose(*b_).get_epsilon(1e-5, accountant="rdp")
    assert both.upper <= rdp


# -- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, name", [({"delta": 0.0}, "delta"), ({"delta": 1.5}, "delta"),
                                           ({"delta": 1e-5, "rtol": 0.0}, "rtol"),
                                           ({"delta": 1e-5, "discretization": -1.0}, "discretization"),
                                           ({"delta": float("nan")}, "delta")])
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        pld_epsilon([GaussianEvent(1.0)], **kwargs)


@pytest.mark.parametrize("h", [1e3, 1e300, math.inf, 0.0, -1e-300])
def test_a_grid_step_out_of_range_is_refused_by_every_entry(h):
    # above 64 (MAX_DISCRETIZATION) a grid used to raise OverflowError (an 8x coarser hint grid
    # past ~88 overflowed e^h); now every entry that takes a grid names the option and the range
    from dpcalib.accountant.pld import pld_epsilon_at, window_points
    from dpcalib.accountant.pld import pld_delta

    ev = [(PoissonSampledGaussianEvent(0.01, 1.0), 10)]
    for call in (lambda: pld_epsilon(ev, 1e-5, discretization=h), lambda: pld_epsilon_at(ev, 1e-5, h),
                 lambda: window_points(ev, 1e-5, h), lambda: pld_delta(ev, 1.0, h)):
        with pytest.raises(ValueError, match=r"discretization=.*\(0, 64\]"):
            call()


def test_the_largest_grid_step_answers():
    from dpcalib.accountant.pld import MAX_DISCRETIZATION, pld_epsilon_at

    lo, up = pld_epsilon_at([(PoissonSampledGaussianEvent(0.01, 1.0), 10)], 1e-5, MAX_DISCRETIZATION)
    rdp = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 10).get_epsilon(1e-5, "rdp")
    assert 0.0 <= lo <= rdp and lo <= up and math.isfinite(up)      # a valid, if useless, bracket


def test_events_of_two_relations_are_refused():
    with pytest.raises(ValueError, match="neighbouring relations"):
        pld_epsilon([PoissonSampledGaussianEvent(0.1, 1.0), WORSampledGaussianEvent(0.1, 1.0)], 1e-5)
    with pytest.raises(ValueError, match="event="):
        pld_epsilon([("not an event", 3)], 1e-5)


@pytest.mark.parametrize("q, z, k", [(0.01, 1.0, 1000), (0.05, 1.5, 200), (0.2, 3.0, 50)])
def test_poisson_bracket_overlaps_prv_accountants_bracket(q, z, k):
    """prv_accountant (Gopi, Lee & Wutschitz 2021) gives its own [eps_lower, eps_upper] of the
    same Poisson-subsampled Gaussian composition: the two brackets must intersect."""
    prv = pytest.importorskip("prv_accountant")
    acc = prv.Accountant(noise_multiplier=z, sampling_probability=q, delta=1e-5, eps_error=0.01,
                         max_compositions=k)
    lo, _, up = acc.compute_epsilon(num_compositions=k)
    b = pld_epsilon([(PoissonSampledGaussianEvent(q, z), k)], 1e-5)
    assert b.lower <= up and lo <= b.upper
    assert b.upper - b.lower < up - lo      # and ours is the narrower one


# -- the lower steps: a profile below the true one, O(h^2) away ---------------------------

@settings(max_examples=40, derandomize=True, deadline=None)
@given(kind=st.sampled_from(["remove", "add", "both"]), q=log_uniform(1e-3, 0.9), z=st.floats(0.3, 4.0),
       h=log_uniform(1e-4, 0.05))
def test_lower_step_profile_is_below_the_true_profile(kind, q, z, h):
    """Checked at 40 points, on and off the grid, against the closed form in mpmath."""
    from dpcalib.accountant import pld as P

    if kind == "both":      # the replace-one envelope of sampling without replacement
        bins = PS._symmetrised_bins(*(PS.bins_of(PP.pair(d, z, q), h, 1e-14, P.MEMORY_CAP)
                                     for d in ("remove", "add")))
        true = lambda e: max(oracles.wor_profile(q, z, e, d, dps=30) for d in ("remove", "add"))  # noqa: E731
    else:
        bins = PS.bins_of(PP.pair(kind, z, q), h, 1e-14, P.MEMORY_CAP)
        true = lambda e: oracles.wor_profile(q, z, e, kind, dps=30)  # noqa: E731
    low = PS.lower_step(bins, h, 1)
    if low is None:     # allowed only when the grid does not resolve the loss's range (~q wide)
        assert h > 0.2 * q
        return
    losses = (low.i0 + np.arange(low.mass.size)) * h
    assert np.all(low.mass >= 0.0)
    lo_e, hi_e = (bins.i0 * h, (bins.i0 + bins.P.size) * h)
    for e in np.linspace(lo_e, hi_e, 40):
        got = float(np.sum(low.mass * np.maximum(0.0, -np.expm1(e - losses))))
        assert got <= float(true(e)) + 1e-15


@pytest.mark.parametrize("q, z", [(1e-3, 0.641), (1e-2, 1.0), (256 / 60000, 0.9684)])
def test_lower_step_is_the_true_line_below_the_losss_hard_edge(q, z):
    """Remove direction: L >= log(1 - q), with much mass in its first bins.  Below the lowest
    atom a measure's profile is the line mass - t Q; the lower step must not tilt it (a deficit
    there shifts a whole composition: the old rule lowered it by ~6e-6 at (1e-3, 0.641), which
    put the lower end of 1000 steps 6e-3 below the truth on a 1e-4 grid)."""
    from dpcalib.accountant import pld as P

    h = 1e-4
    low = PS.lower_step(PS.bins_of(PP.pair("remove", z, q), h, 1e-14, P.MEMORY_CAP), h, 1)
    losses = (low.i0 + np.arange(low.mass.size)) * h
    for e in (math.log1p(-q) - 3 * h, math.log1p(-q) - 50 * h):
        got = float(np.sum(low.mass * -np.expm1(e - losses)))
        true = float(oracles.wor_profile(q, z, e, "remove", dps=30))
        assert true * (1 - 1e-9) <= got <= true


def test_small_q_lower_end_converges_like_the_upper_end():
    """On one grid the lower end is about as far below the truth as the upper end is above it
    (both O(h^2) per step): reference = the bracket on a 16x finer grid."""
    ev = [(PoissonSampledGaussianEvent(1e-3, 0.641), 1000)]
    ref = pld_epsilon(ev, 1e-5, discretization=6.25e-6)
    b = pld_epsilon(ev, 1e-5, discretization=1e-4)
    assert b.lower <= ref.upper and ref.lower <= b.upper
    assert ref.upper - ref.lower < 1e-5
    assert ref.lower - b.lower <= 4.0 * (b.upper - ref.lower) + 1e-6
    assert b.upper - b.lower <= 3e-5          # was 6e-3 with every bottom vertex lowered


def test_bracket_width_shrinks_like_h_squared():
    """Both ends are O(h^2) per step: a 4x finer grid narrows the bracket about 16x (>= 8x)."""
    ev = [(PoissonSampledGaussianEvent(0.01, 1.2), 1000)]
    w = [pld_epsilon(ev, 1e-6, discretization=h) for h in (2e-3, 5e-4)]
    assert all(b.lower <= b.upper for b in w)
    assert (w[1].upper - w[1].lower) * 8 <= w[0].upper - w[0].lower
    assert w[1].lower >= w[0].lower - 1e-12 or w[1].upper <= w[0].upper


# -- the fast paths of the composition and of a calibration's search ------------------------

def test_polar_power_matches_the_complex_power_and_is_zero_only_where_it_underflows():
    rng = np.random.default_rng(3)
    r = np.concatenate([1.0 - np.logspace(-12, -0.01, 4000), rng.uniform(0.0, 1.0, 4000)])
    t = r * np.exp(1j * rng.uniform(-math.pi, math.pi, r.size))
    for c in (1, 2, 7, 100, 1000, 123457):
        got = PC.power(t, np.log(np.abs(t)), c)
        ref = np.exp(c * np.log(r)) * np.exp(1j * c * np.angle(t).astype(np.longdouble)).astype(complex)
        tiny = c * np.log(r) < -745.0
        assert np.all(got[tiny] == 0.0)
        ok = ~tiny & (np.abs(ref) > 1e-290)
        assert np.max(np.abs(got[ok] - ref[ok]) / np.abs(ref[ok])) < 1e-9 * max(1.0, c / 1000)


@pytest.mark.parametrize("n, h", [(1, 0.1), (7, 1e-3), (5000, 1e-4), (40000, 3e-3), (150000, 1e-6), (300, 40.0),
                                  (200000, 0.01), (5000, 3.0)])
def test_decayed_suffix_is_the_recursion_in_extended_precision(n, h):
    # B_j = x_j + e^-h B_(j+1), summed in long double by a plain loop; one block (n h < 32) and
    # several (n h > 32, or n > 2^16), within the rounding bound the eps read-off charges

    rng = np.random.default_rng(n)
    x = rng.random(n) ** 8 * np.exp(-50.0 * rng.random(n))
    r = np.exp(-np.longdouble(h))
    ref = np.empty(n, dtype=np.longdouble)
    acc = np.longdouble(0.0)
    for i in range(n - 1, -1, -1):
        acc = np.longdouble(x[i]) + r * acc
        ref[i] = acc
    got = PS.decayed_suffix(x, h)
    rel = float(np.max(np.abs(got - ref) / ref))
    assert rel <= PB.suffix_rounding(n, h) and rel < 1e-12


@pytest.mark.parametrize("q, z, h", [(1e-3, 0.64, 2e-5), (0.5, 0.3, 1e-3), (0.01, 5.0, 1e-4)])
def test_log_mgf_by_squaring_bounds_the_direct_sum_from_above(q, z, h):
    from dpcalib.accountant import pld as P

    step = PS.discretised_steps([(PoissonSampledGaussianEvent(q, z), 10)], h, 1e-20, "remove", P.MEMORY_CAP)[0]
    keep = step.mass > 0
    x = ((step.i0 + np.arange(step.mass.size)) * h)[keep]
    lm = np.log(step.mass[keep])
    for lam in (PC.LAMBDAS, -PC.LAMBDAS):
        direct = np.array([np.logaddexp.reduce(lm + t * x) for t in lam])
        got = PC._log_mgf(step, h, lam)
        assert np.all(got >= direct)
        # pooling blocks of B = floor(0.01 n / count) grid points costs at most |lam| B h
        pooled = np.abs(lam) * math.floor(0.01 * step.mass.size / step.count) * h
        # plus the margin for the squarings' round-off, 4 * 2^k u at level k (<= 5e-7)
        assert np.all(got - direct <= pooled + 1e-7 + 4.0 * 2.0 ** np.arange(lam.size) * 2.0 ** -53)


@settings(max_examples=30, derandomize=True, deadline=None)
@given(z=log_uniform(0.7, 5.0), k=st.integers(2, 400), delta=log_uniform(1e-12, 1e-3))
def test_one_sided_evaluations_bracket_the_exact_gdp_epsilon(z, k, delta):
    """side="upper" is the full upper end; side="lower" a valid lower end (not above the full one);
    both around the exact GDP eps."""
    from dpcalib.accountant import pld as P

    ev = [(GaussianEvent(z), k)]
    h = 1e-3
    lo, up = P.pld_epsilon_at(ev, delta, h)
    _, up_only = P.pld_epsilon_at(ev, delta, h, side="upper")
    lo_only, inf = P.pld_epsilon_at(ev, delta, h, side="lower")
    exact = oracles.gdp_epsilon(math.sqrt(k) / z, delta)
    assert up_only == pytest.approx(up, rel=1e-6)   # the same composition, re-tilted from another lower end
    assert inf == math.inf
    assert lo_only <= lo + 1e-12
    assert lo_only <= exact <= up_only


@pytest.mark.parametrize("q, z, k", [(0.01, 1.56, 10_000), (1e-3, 0.64, 1000), (0.01, 0.74, 100),
                                     (0.08192, 15.3, 2500)])
def test_report_grid_predicts_the_grid_the_refinement_ends_on(q, z, k):
    from dpcalib.accountant import pld as P

    ev = [(PoissonSampledGaussianEvent(q, z), k)]
    assert P.report_grid(ev, 1e-5) == P.pld_epsilon(ev, 1e-5).discretization


@pytest.mark.parametrize("ev", [[(PoissonSampledGaussianEvent(0.05, 0.9), 200)],
                                [(WORSampledGaussianEvent.from_sizes(10, 1000, noise_multiplier=1.0), 300)]])
def test_brackets_do_not_depend_on_what_was_computed_before(ev):
    """The two ends are remembered separately; the answers must be the same whatever was asked first."""
    from dpcalib.accountant import pld as P

    h, d = 2e-4, 1e-5
    P.clear_cache()
    fresh = (P.pld_epsilon_at(ev, d, h), P.pld_epsilon_at(ev, d, h, side="lower"), P.pld_epsilon(ev, d))
    P.clear_cache()
    P.pld_epsilon_at(ev, d, h, side="upper")
    lower_first = P.pld_epsilon_at(ev, d, h, side="lower")
    both = P.pld_epsilon_at(ev, d, h)
    P.clear_cache()
    P.pld_epsilon_at(ev, d, h, side="lower")
    assert (both, lower_first, P.pld_epsilon(ev, d)) == fresh


def test_report_grid_with_uppers_lists_the_coarse_grids_upper_ends():
    """The prediction's coarse grids are coarser than the one it predicts, and their upper ends are
    the ones pld_epsilon_at composes there (a calibration extrapolates them)."""
    from dpcalib.accountant import pld as P

    ev = [(PoissonSampledGaussianEvent(0.01, 1.56), 10_000)]
    P.clear_cache()
    h, ups = P.report_grid(ev, 1e-5, with_uppers=True)
    assert h == P.report_grid(ev, 1e-5) and len(ups) >= 2
    P.clear_cache()
    for g, u in ups:
        assert g > h and u == P.pld_epsilon_at(ev, 1e-5, g)[1]


def test_tilted_window_starting_higher_changes_nothing_but_its_size(monkeypatch):
    """The tilted window starts where the wrapped-in mass is damped below alpha; composing on the
    window that starts at the untilted Chernoff end instead gives the same upper end (1e-9)."""
    from dpcalib.accountant.pld import bracket as B
    from dpcalib.accountant.pld import compose as C
    from dpcalib.accountant import pld as P

    ev = [(PoissonSampledGaussianEvent(0.01, 1.56), 10_000)]
    h, d = 1e-4, 1e-5
    sizes = []
    orig_compose = C.compose_steps       # the tilted compositions are asked for in pld_bracket

    def compose(steps, h, alpha, cap, lam=0.0, r_min=None):
        out = orig_compose(steps, h, alpha, cap, lam, r_min)
        if lam > 0 and out[0] is not None:
            sizes.append(out[0].mass.size)
        return out

    monkeypatch.setattr(B, "compose_steps", compose)
    P.clear_cache()
    raised = P.pld_epsilon_at(ev, d, h, side="upper")[1]
    orig_window = C.loss_window

    def window(steps, h, log_alpha, lam=0.0, logm=None, r_min=None):
        lo, hi = orig_window(steps, h, log_alpha, lam, logm, r_min)
        return min(lo, orig_window(steps, h, log_alpha, 0.0, logm)[0]), hi

    monkeypatch.setattr(C, "loss_window", window)      # compose_steps' own window
    monkeypatch.setattr(B, "loss_window", window)      # the choice of the tilt
    P.clear_cache()
    full = P.pld_epsilon_at(ev, d, h, side="upper")[1]
    P.clear_cache()
    n = len(sizes) // 2            # the same tilted compositions, raised first (an 8x coarser hint, then h)
    assert n >= 1 and len(sizes) == 2 * n and all(a < 0.8 * b for a, b in zip(sizes[:n], sizes[n:]))
    assert raised == pytest.approx(full, rel=1e-9)


# -- the bracket skips RDP's refinement over real orders only where RDP cannot be smaller ------

@settings(max_examples=40, derandomize=True, deadline=None)
@given(q=log_uniform(1e-4, 0.5), z=log_uniform(0.5, 15.0), k=st.integers(1, 5000),
       delta=log_uniform(1e-10, 1e-2))
def test_skipping_the_rdp_refinement_never_hides_a_smaller_rdp_epsilon(q, z, k, delta):
    from dpcalib.accountant import accountant as acc_mod

    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(q, z), k)
    acc_mod._RDP_REPORTS.clear()
    grid_eps = acc.epsilon_report(delta, "rdp", refine=False).epsilon
    refined = acc.epsilon_report(delta, "rdp").epsilon

    def skip(upper):
        acc_mod._RDP_REPORTS.clear()           # (a remembered report is never skipped)
        return acc._rdp_cannot_beat(upper, delta)

    # a PLD upper end above the refined RDP eps: RDP is smaller, so it must not be skipped
    for upper in (refined * (1 + 1e-9), 0.5 * (refined + grid_eps), grid_eps * 1.001):
        if upper > refined:
            assert not skip(upper)
    if 0 < refined < 5.0:
        assert skip(0.5 * refined)             # far below: the bound proves it


def test_the_skip_applies_where_pld_is_far_below_rdp_and_leaves_the_bracket_unchanged(monkeypatch):
    from dpcalib.accountant import accountant as acc_mod
    from dpcalib.accountant import pld

    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 0.7369), 100)
    acc_mod._RDP_REPORTS.clear()
    pld.clear_cache()
    b = acc.epsilon_bracket(1e-5)
    key = (tuple(acc._events), acc._orders.tobytes(), 1e-5, "improved", True)
    assert key not in acc_mod._RDP_REPORTS                   # RDP's refinement was skipped
    assert b.method == "pld" and b.upper < 2.0 < acc.epsilon_report(1e-5, "rdp").epsilon
    pld.clear_cache()
    monkeypatch.setattr(PrivacyAccountant, "_rdp_cannot_beat", lambda self, u, d: False)
    b2 = acc.epsilon_bracket(1e-5)
    assert (b2.lower, b2.upper, b2.method) == (b.lower, b.upper, b.method)


def test_a_lower_end_alone_skips_a_direction_whose_coarse_upper_end_is_below_it(monkeypatch):
    from dpcalib.accountant import clear_cache
    from dpcalib.accountant.pld import grid as pld
    from dpcalib.accountant.pld import pld_epsilon_at

    for q, z, k, h in [(0.01, 0.7364, 100, 4.6e-4), (256 / 60000, 0.9684, 14062, 2.3e-4)]:
        ev = [(PoissonSampledGaussianEvent(q, z), k)]
        tau = pld.TAIL * 1e-5 / k
        # oracle: the lower end of each direction, both composed
        each = [pld.lower_one(pld.discretised_steps(ev, h, tau, d, pld.MEMORY_CAP, lower=True)[1], h, 1e-5,
                               pld.MEMORY_CAP) for d in ("remove", "add")]
        calls = []
        real = pld.lower_one
        monkeypatch.setattr(pld, "lower_one", lambda *a: calls.append(1) or real(*a))
        clear_cache()
        lo, up = pld_epsilon_at(ev, 1e-5, h, side="lower")
        assert lo == max(each) and up == math.inf
        assert each[1] < each[0] and len(calls) == 1      # the add direction was not composed
        monkeypatch.setattr(pld, "lower_one", real)


def test_a_refinement_follows_the_order_the_width_narrowed_at(monkeypatch):
    """Small q, 10 000 steps, delta = 1e-8: from 7.8e-4 to 1.2e-4 the width narrowed at order ~1.5
    in h (the lower end's error dominates), not 2: the next grid is picked by that order and the
    bracket converges on it -- 2.05e-5 -- where the square-root rule took 3.45e-5 (too wide) and
    then 1.73e-5.  The bracket there holds the target's width and is the intersection of valid ones."""
    from dpcalib.accountant import pld as P
    from dpcalib.accountant.pld import refine as R

    ev = [(PoissonSampledGaussianEvent(1e-4, 0.6431224), 10_000)]
    grids = []
    at = R.epsilon_at

    def spy(events, delta, h, *a, **k):
        grids.append(h)
        return at(events, delta, h, *a, **k)
    monkeypatch.setattr(R, "epsilon_at", spy)
    P.clear_cache()
    b = P.pld_epsilon(ev, 1e-8)
    assert [round(g, 8) for g in grids] == [round(0.05 * 2.0 ** (-k / 4.0), 8) for k in (24, 35, 45)]
    assert b.converged and b.upper - b.lower <= 3e-5 * b.upper
    assert b.lower <= 0.86 <= b.upper + 1e-4
    # (the square-root rule's own prediction from the same two grids would have been 3.45e-5)
    assert R.on_ladder(grids[1] * math.sqrt(0.7 * 3e-5 * 0.86 / 1.97e-4)) > 3e-5


def test_a_bracket_just_short_of_the_tolerance_is_refined_by_a_square_root_of_two(monkeypatch):
    """The refinement's next grid is aimed at 0.7 of the tolerance; where the width misses it by
    little (here 1.2x, both ends O(h^2)), the step is 2^(1/2) -- two rungs of the ladder, still
    converging -- not the factor 2 it was clamped to (a million steps at q = 1e-4: 3 s a bracket
    on the halved grid beside ~1.3 s).  Synthetic brackets: only the grid choice is under test."""
    from dpcalib.accountant import pld as P
    from dpcalib.accountant.pld import refine as R

    ev = [(PoissonSampledGaussianEvent(0.01, 1.0), 1000)]
    h0 = P.first_grid(ev, 1e-6)
    c = 0.5 * 1.2 * P.RTOL / h0 ** 2                # width 1.2 x the tolerance on the first grid
    grids = []

    def fake(events, delta, h, *a, **k):
        grids.append(h)
        return 1.0 - c * h * h, 1.0 + c * h * h
    monkeypatch.setattr(R, "epsilon_at", fake)
    P.clear_cache()
    b = P.pld_epsilon(ev, 1e-6)
    P.clear_cache()
    assert grids[0] == h0 and len(grids) == 2
    assert grids[1] == pytest.approx(h0 * 2.0 ** -0.5, rel=1e-12)
    assert b.converged and b.discretization == grids[1]
    # (the factor-2 clamp would have taken h0 / 2, twice the grid points of the answer's grid)
    assert R.on_ladder(h0 * min(0.5, (0.7 / 1.2) ** 0.5)) == pytest.approx(h0 / 2, rel=1e-12)


@pytest.mark.parametrize("window,wide,aim", [(1 << 20, 12.0, 0.4), (1 << 20, 3.0, 0.7), (1000, 12.0, 0.7)])
def test_a_long_step_to_a_large_window_aims_lower(monkeypatch, window, wide, aim):
    """A long step (the next grid more than 3x finer) to a composition predicted at >= 2^20 points
    aims at 0.4 of the tolerance, not 0.7: on fine grids the width narrows slower than the coarse
    grids' order (a million steps at q = 1e-4, eps 5.6: 1.45e-5 was too coarse, then 1.03e-5 -- two
    compositions of seconds).  A shorter step, or a small window, keeps 0.7.  Synthetic brackets and
    windows: only the grid choice is under test."""
    from dpcalib.accountant import pld as P
    from dpcalib.accountant.pld import refine as R

    ev = [(PoissonSampledGaussianEvent(0.01, 1.0), 1000)]
    h0 = P.first_grid(ev, 1e-6)
    c = 0.5 * wide * P.RTOL / h0 ** 2               # width `wide` x the tolerance on the first grid
    grids = []

    def fake(events, delta, h, *a, **k):
        grids.append(h)
        return 1.0 - c * h * h, 1.0 + c * h * h
    monkeypatch.setattr(R, "epsilon_at", fake)
    monkeypatch.setattr(R, "window_points_of", lambda ev, d, h: int(window * h0 / h))   # ~1/h, as a window
    P.clear_cache()
    b = P.pld_epsilon(ev, 1e-6)
    P.clear_cache()
    assert grids[0] == h0 and b.converged
    assert grids[1] == pytest.approx(R.on_ladder(h0 * min(R.LAST_STEP, max(1.0 / 6, (aim / wide) ** 0.5))), rel=1e-12)
    if aim == 0.4:                                  # (a rung finer than the usual aim's)
        assert grids[1] < R.on_ladder(h0 * (0.7 / wide) ** 0.5)


@pytest.mark.parametrize("points", [1 << 28, 1 << 16])
def test_a_first_grid_predicted_over_the_cap_is_not_composed(monkeypatch, points):
    """Where the first grid's window (predicted from the coarse grid's, as 1/h) is over the memory cap,
    the refinement starts on the finest ladder grid predicted to fit instead of composing the first
    grid's steps to find out (seconds each at 10^9 steps: ClipD2P's report rows lost 12 of 46 s on two
    such grids).  A window that fits starts on the first grid.  Synthetic windows and brackets."""
    from dpcalib.accountant import pld as P
    from dpcalib.accountant.pld import refine as R

    ev = [(PoissonSampledGaussianEvent(0.01, 1.0), 1000)]
    h0 = P.first_grid(ev, 1e-6)
    grids = []

    def fake(events, delta, h, *a, **k):
        grids.append(h)
        return 1.0 - 1e-6, 1.0 + 1e-6               # converged on any grid
    monkeypatch.setattr(R, "epsilon_at", fake)
    monkeypatch.setattr(R, "window_points_of", lambda ev, d, h: int(points * h0 / h))
    P.clear_cache()
    b = P.pld_epsilon(ev, 1e-6)
    from dpcalib.accountant.pld.queries import checked_events
    ev_key = tuple(checked_events(ev))
    fit = R._finest_fitting(ev_key, 1e-6, 0.05, P.MEMORY_CAP)
    P.clear_cache()
    if points * 48 > 1.1 * P.MEMORY_CAP:
        assert h0 not in grids and b.discretization == fit == grids[-1] and h0 < fit
        assert 48 * points * h0 / fit <= 1.1 * P.MEMORY_CAP          # predicted to fit
    else:
        assert grids == [h0] and b.discretization == h0


def test_the_lower_end_is_re_tilted_where_its_round_off_decides_the_bracket():
    """q = 2.8e-4, 100 000 steps, delta = 1e-5 at the noise its calibration to eps 5.6 returns: on
    the 4.9e-5 grid the untilted lower composition's round-off charge (below LOWER_RETILT * delta)
    moves the lower end by ~2e-4 -- wider than the rest of the bracket.  With the upper end known
    the lower composition is re-tilted and the bracket closes there (it went on to a 2.4x finer
    grid); alone (``side="lower"``, no upper end to judge by) it is not.  Both lower ends are
    certified: the re-tilted one is the larger, and below the upper end."""
    from dpcalib.accountant import pld as P

    ev = [(PoissonSampledGaussianEvent(2.8e-4, 0.4687348), 100_000)]
    h = 0.05 * 2.0 ** (-10.0)                    # 4.88e-5, on the ladder
    P.clear_cache()
    alone, _ = P.pld_epsilon_at(ev, 1e-5, h, side="lower")
    lo, up = P.pld_epsilon_at(ev, 1e-5, h)
    assert alone < lo <= up
    assert lo - alone > 1e-4                       # the charge's effect, taken back by the re-tilt
    assert up - alone > P.RTOL * up >= up - lo     # converged only with it
    b = P.pld_epsilon(ev, 1e-5)
    assert b.converged and b.discretization == h and (b.lower, b.upper) == (lo, up)
    assert b.lower <= 5.6 <= b.upper + 1e-4


@pytest.mark.parametrize("z, steps, delta", [(0.4519564, 378, 1e-5), (0.5875902, 378, 1e-8),
                                             (0.491344, 378, 1e-6), (0.27651385, 10_000, 0.0098)])
def test_the_predicted_report_grid_at_small_q_is_the_reports(z, steps, delta):
    """At q = 1e-4 the width narrows at order ~1.1 in the grid, so the prediction's test "the next
    grid is the last" with exponent 2 missed the report's grid (it predicted 6.6e-4 where the
    report refined on to 2.8e-4 or 2.0e-4, and a calibration solved on both).  The prediction
    now measures the order on the first grid against the grid 2x coarser and, below 1.5, goes on:
    it returns the grid the report ends on, and the report is unchanged (certified, converged)."""
    from dpcalib.accountant import pld as P

    ev = [(PoissonSampledGaussianEvent(1e-4, z), steps)]
    P.clear_cache()
    g, trace = P.report_grid(ev, delta, with_uppers=True)
    P.clear_cache()
    b = P.pld_epsilon(ev, delta)
    assert g == b.discretization and b.converged and len(trace) >= 2
    h0 = trace[0][0]
    lo, up = P.pld_epsilon_at(ev, delta, h0)
    lo2, up2 = P.pld_epsilon_at(ev, delta, 2.0 * h0)
    assert math.log((up2 - lo2) / (up - lo)) / math.log(2.0) < 1.5      # the order measured


def _aligned_step_naive(events, h, direction="remove"):
    """The grid step's anchor as it was first written: a dict over every atom in Python."""
    from dpcalib.accountant.pld.lossdist import LossPair

    weight = {}
    for ev, k in events:
        for pr in ev.pld_pairs(direction) or ():
            if isinstance(pr, LossPair):
                for l, p in pr.atoms():
                    if 0.0 < abs(l) < math.inf:
                        key = round(abs(l), 12)
                        w, _ = weight.get(key, (0.0, abs(l)))
                        weight[key] = (w + k * p * abs(l), abs(l))
    if not weight:
        return h
    a = weight[max(weight, key=lambda x: weight[x][0])][1]
    u = min(v for _, v in weight.values())
    if math.isfinite(a / u) and abs(a / u - round(a / u)) <= 1e-9 * (a / u) and all(
            abs(v / u - round(v / u)) <= 1e-9 * (v / u) for _, v in weight.values()):
        a = u
    if a < h / 8.0 or not math.isfinite(a / h):
        return h
    n0 = math.ceil(a / h - 1e-9)
    for n in range(n0, n0 + 16):
        for cand in (a / n, math.nextafter(a / n, 0.0), math.nextafter(a / n, math.inf)):
            if cand * n == a:
                return cand
    return a / n0


def test_the_grid_step_is_anchored_as_a_naive_loop_over_the_atoms_anchors_it():
    """:func:`aligned_step` groups the atoms with numpy (a discrete Gaussian's pair has 80 sigma of them); on
    400 random compositions of atom kinds, sampled or not, and where numpy's rounding to 12 decimals is not Python's,
    it picks the step a dict over every atom picks."""
    from dpcalib.accountant import (DiscreteGaussianEvent, DiscreteLaplaceEvent, EpsilonDeltaEvent, LaplaceEvent,
                                    PoissonSampledEvent, RandomizedResponseEvent)
    from dpcalib.accountant.pld.lossdist import aligned_step

    rng = np.random.default_rng(7)
    kinds = (lambda: LaplaceEvent(float(rng.choice([0.3, 1.0, 2.0, 1e-3]))),
             lambda: DiscreteLaplaceEvent(float(rng.choice([0.2, 0.5, 1.3])), int(rng.integers(1, 4))),
             lambda: RandomizedResponseEvent(float(rng.uniform(0.05, 0.95)), int(rng.choice([2, 3, 5]))),
             lambda: EpsilonDeltaEvent(float(rng.choice([0.5, 1.0, 0.5 * 3])), 1e-6),
             lambda: DiscreteGaussianEvent(float(rng.choice([0.7, 3.0])), 1))
    # near a half-way point of the 12th decimal Python's round and numpy's differ: the first two are one group
    near = [(EpsilonDeltaEvent(5.5645432265245, 1e-6), 1), (EpsilonDeltaEvent(5.5645432265249, 1e-6), 1),
            (EpsilonDeltaEvent(7.3, 1e-6), 1)]
    for h in (1e-3, 0.05):
        step = aligned_step(near, h)
        assert step == _aligned_step_naive(near, h) and round(5.5645432265249 / step) * step == 5.5645432265249
    for _ in range(400):
        events = []
        for _ in range(int(rng.integers(1, 4))):
            ev = kinds[int(rng.integers(len(kinds)))]()
            if rng.random() < 0.3:
                ev = PoissonSampledEvent(float(rng.choice([0.01, 0.3])), ev)
            events.append((ev, int(rng.choice([1, 2, 7]))))
        for h in (1e-4, 3e-3, 0.05):
            for direction in ("remove", "add"):
                assert aligned_step(events, h, direction) == _aligned_step_naive(events, h, direction), (events, h)
