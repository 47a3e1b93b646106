"""Small sampling rates: the lower steps anchored at the edge atom, the split composition, and the
lower steps' mass (accountant/pld/discretise.py, accountant/pld/compose.py, accountant/pld/bracket.py).

Oracles: the closed-form profile of one Poisson step (mpmath, tests/oracles.py), dp-accounting's
pessimistic PLD (an upper bound on delta(eps): a true lower end eps_lo has delta(eps_lo) >= delta,
so the pessimistic delta there is >= delta too), and our own brackets on other grids (every
grid's bracket holds the truth, so any two overlap).
"""

import math
import random

import numpy as np
import pytest

from benchmarks import fuzz_soundness as F
from dpcalib.accountant import PoissonSampledGaussianEvent, pld_epsilon
from dpcalib.accountant.pld import pld_epsilon_at
from dpcalib.accountant import pld
from dpcalib.accountant.pld import bracket as pld_bracket, discretise as D
from dpcalib.accountant.pld.pairs import AddPair, RemovePair
from dpcalib.accountant.pld.shared import MEMORY_CAP
from tests import oracles


def _profile(step, h, eps):
    L = step.shift + (step.i0 + np.arange(step.mass.size)) * h
    return float(np.sum(step.mass * np.maximum(0.0, -np.expm1(eps - L))))


@pytest.mark.parametrize("q,z", [(2.8e-4, 0.216), (1e-4, 0.588), (0.00137, 0.182), (0.01, 1.0), (0.3, 0.7)])
@pytest.mark.parametrize("pair", [RemovePair, AddPair])
@pytest.mark.parametrize("h", [2e-3, 1.6e-4])
def test_the_anchored_lower_step_is_below_the_exact_profile(q, z, pair, h):
    # the profile of the anchored step (the edge cell merged into one atom at its Q/P-mean point,
    # the grid anchored there) lies below the closed form at grid points, between them and at the
    # edge, and it keeps its mass (the old scaling for round-off lost n u of it per step)
    pr = pair(z, q)
    step = D._anchored_lower_step(pr, h, 1e-20, 100, MEMORY_CAP)
    assert step is not None and step.shift != 0.0
    direction = "remove" if pair is RemovePair else "add"
    edge = pr.edge
    eps_grid = step.shift + h * np.array([0, 1, 2, 3, 7, 40, 400])
    eps_mid = eps_grid + 0.37 * h
    pts = [e for e in np.concatenate((eps_grid, eps_mid, [edge, 0.0, 0.5, 1.0, 2.0])) if e > -2.0 * q]
    for e in pts:
        exact = float(oracles.wor_profile(q, z, e, direction))
        assert _profile(step, h, e) <= exact * (1 + 1e-9) + 1e-300, e
    assert 1.0 - float(np.sum(step.mass)) < 1e-9


def test_the_lower_steps_lose_no_mass_that_many_steps_would_add_up():
    # 1.6e6 grid points (q = 1e-4, z = 0.69, h = 2.2e-6, the grid of a million steps; 2.4e6 before
    # the per-component tail cut): the step
    # used to be scaled down by (n + 16) 2^-52 = 5e-10, and a million of them lost 5e-4 of the
    # composed mass -- the lower end stalled 5e-5 below the upper one at any grid
    pr = RemovePair(0.694519, 1e-4)
    step = D._anchored_lower_step(pr, 2.16e-6, 1e-19, 10 ** 6, MEMORY_CAP)
    assert step.mass.size > 1_500_000
    assert 10 ** 6 * (1.0 - float(np.sum(step.mass))) < 1e-4


def test_the_edge_atom_closes_the_bracket_on_a_coarse_grid():
    # q = 2.8e-4, 181 steps, z = 0.2164, delta = 0.0098 (a calibration issue's setting): the lower
    # end stayed ~1e-3 below the upper one down to h = 1.6e-4 (the edge atom mid-bin); anchored,
    # the bracket is within 2e-5 (relative) from h = 2e-3 on, and the automatic refinement stops
    # on a grid ~100x coarser than the 4e-6 it needed
    ev = [(PoissonSampledGaussianEvent(2.8e-4, 0.2164259), 181)]
    lo, up = pld_epsilon_at(ev, 0.0098, 2e-3)
    assert up - lo <= 2e-5 * up
    b = pld_epsilon(ev, 0.0098)
    assert b.converged and b.discretization > 1e-4
    fine = pld_epsilon_at(ev, 0.0098, 1.64e-4)                    # any two grids' brackets overlap
    assert b.lower <= fine[1] and fine[0] <= b.upper
    # the lower end is a lower bound: dp-accounting's pessimistic delta there is at least delta
    assert F.poisson_delta_dp_accounting(2.8e-4, 0.2164259, 181, b.lower, pessimistic=True, h=1e-3) >= 0.0098


def test_the_split_composition_lifts_the_round_off_floor():
    # q = 1e-4, 378 steps, z = 0.5876, delta = 1e-8: the atom keeps every Fourier coefficient near
    # 1, and the FFT's round-off charge (relative to the whole mass) was 1e-3 of delta, tilted or
    # not: the bracket stopped at a width of 7.6e-4 ("a floating-point floor").  Composed without
    # the part that cannot reach eps, it closes to RTOL -- and its upper end is 2e-4 LOWER than
    # the floor's (less noise for the same guarantee)
    ev = [(PoissonSampledGaussianEvent(1e-4, 0.5876267), 378)]
    b = pld_epsilon(ev, 1e-8)
    assert b.converged and b.width <= 3e-5 * b.upper
    pld.clear_cache()
    old = pld_bracket.SPLIT
    try:
        pld_bracket.SPLIT = False
        floor = pld_epsilon(ev, 1e-8)
    finally:
        pld_bracket.SPLIT = old
        pld.clear_cache()
    assert not floor.converged and floor.width > 10 * b.width
    assert floor.lower <= b.upper and b.lower <= floor.upper
    assert b.upper < floor.upper - 1e-4
    assert F.poisson_delta_dp_accounting(1e-4, 0.5876267, 378, b.lower, pessimistic=True, h=1e-3) >= 1e-8


def _configs(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        q = 10 ** rng.uniform(-4, -1)
        z = 10 ** rng.uniform(math.log10(0.2), math.log10(2.0))
        k = int(10 ** rng.uniform(0, 3.3))
        d = 10 ** rng.uniform(-9, -2)
        out.append((q, z, k, d))
    return out


@pytest.mark.parametrize("q,z,k,delta", _configs(10, 44))
def test_lower_ends_are_lower_bounds_at_small_sampling_rates(q, z, k, delta):
    # ten random small-q settings (q 1e-4..0.1, z 0.2..2, 1..2000 steps, delta 1e-9..1e-2): the
    # bracket's lower end is below the truth -- dp-accounting's pessimistic delta at it is at
    # least delta -- and its upper end above a coarser grid's lower end
    ev = [(PoissonSampledGaussianEvent(q, z), k)]
    b = pld_epsilon(ev, delta)
    assert 0.0 <= b.lower <= b.upper
    if b.lower > 0.0:
        d_pess = F.poisson_delta_dp_accounting(q, z, k, b.lower, pessimistic=True, h=1e-3)
        assert d_pess >= delta * (1 - 1e-9)
    coarse = pld_epsilon_at(ev, delta, 8 * b.discretization)
    if coarse[0] is not None:
        assert coarse[0] <= b.upper and b.lower <= coarse[1]


def _split_point_reference(step, h, log_alpha, r_min):
    """The split point by the running log-sum over every (pooled) atom: the definition, no chunks."""
    from dpcalib.accountant.pld import binomial as PB
    from dpcalib.accountant.pld.compose import LAMBDAS

    n = step.mass.size
    lm, xb, B = PB._pooled(step, h)
    nb = lm.size
    S = np.logaddexp.accumulate(lm[None, :] + LAMBDAS[:, None] * xb[None, :], axis=1)
    with np.errstate(invalid="ignore"):
        w_hi = np.min((step.count * (S + 1e-8) - log_alpha) / LAMBDAS[:, None], axis=0)
    bad = np.nonzero(np.ceil(w_hi / h) + 1 >= r_min)[0]
    return min(n, (int(bad[0]) if bad.size else nb) * B)


@pytest.mark.parametrize("seed", range(12))
def test_the_split_point_is_the_first_prefix_whose_bound_fails(seed):
    # the chunked scan (one exp per atom, the running log-sum inside one chunk) against the
    # running log-sum over every atom: the same split on steps with gaps of no mass, pooled atoms
    # (more than 65 536), every chunk boundary and no failing prefix at all
    from dpcalib.accountant.pld import binomial as PB
    from dpcalib.accountant.pld.shared import Step

    rng = np.random.default_rng(seed)
    n = int(rng.choice([1, 255, 256, 257, 3000, 70_001]))
    h = float(rng.choice([1e-4, 1e-3, 1e-2]))
    mass = rng.random(n) * np.exp(-np.linspace(0, float(rng.uniform(1, 60)), n))
    mass[rng.random(n) < 0.3] = 0.0
    mass /= max(mass.sum(), 1e-300)
    i0 = int(rng.integers(-n, 10))
    step = Step(i0, mass, 0.0, 0.0, int(rng.choice([2, 181, 10_000])), None, 0.0, 0.0, 1)
    got = []
    for log_alpha in (math.log(1e-12), math.log(1e-3)):
        for r_min in (i0 * step.count, (i0 + n // 3) * 2, (i0 + n) * step.count + 5, 10 ** 9,
                      *((i0 + int(f * n)) * step.count for f in (0.1, 0.5, 0.9, 1.0))):
            got.append(PB._split_point(step, h, log_alpha, r_min))
            assert got[-1] == _split_point_reference(step, h, log_alpha, r_min)
    assert len(set(got)) > 1 or n == 1      # (splits that differ: the scan is exercised)
