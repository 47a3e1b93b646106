"""The loss cut (accountant/pld/pairs.py ``LOSS_CUT``).

A subsampled step with a tiny noise multiplier puts the sampled record's mass at losses near
``1/(2 z^2)`` (5e5 at z = 1e-3).  Where that mass is small against delta, the grid ends at the cut:
the upper steps send the mass beyond to +infinity (pessimistic), the lower steps to an atom at the
cut (every loss moved down: a pointwise-lower coupling).  Checked against the closed-form profile
(mpmath), against the same bracket without the cut, and on the DP-SRM calibration the soundness
fuzz found at 111 s (seed 51, #189) with its own oracle.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcalib.accountant import PoissonSampledGaussianEvent, WORSampledGaussianEvent, clear_cache
from dpcalib.accountant.pld import discretise as PS
from dpcalib.accountant.pld import pairs as PP
from dpcalib.accountant import pld as P
from dpcalib.accountant.pld import grid as G
from dpcalib.accountant.pld import pld_epsilon_at
from tests import oracles


@pytest.mark.parametrize("q, z", [(1e-4, 0.02), (3e-3, 0.015), (0.2, 0.01)])
def test_a_cut_step_brackets_the_closed_form_profile(q, z):
    h = 0.05
    pair = PP.pair("remove", z, q)
    b = PS.bins_of(pair, h, 1e-18, 1 << 30, cut_mass=1.0)
    # cut: the grid ends at the cut, the sampled record's mass (its loss ~1/(2 z^2) >= 1250) beyond it
    assert (b.i0 + b.P.size) * h <= PP.LOSS_CUT + 2 * h and b.p_above > 0.99 * q
    up, lo = PS.upper_step(b, h, 1), PS.lower_step(b, h, 1)
    assert up.inf == b.p_above and lo.mass[b.P.size] >= b.p_above       # +inf above; an atom at the cut below
    pu, pl = PS._profile(up.mass, h) + up.inf, PS._profile(lo.mass, h)
    for eps in (0.0, 0.5, 3.0, 50.0, 500.0, 990.0):
        truth = float(oracles.wor_profile(q, z, eps, "remove", dps=40))
        ju, jl = round(eps / h) - up.i0, round(eps / h) - lo.i0
        assert pu[ju] >= truth * (1 - 1e-9), eps
        assert pl[jl] <= truth * (1 + 1e-9), eps
    # no cut where the mass beyond exceeds what the caller allows, nor for a full-batch Gaussian
    assert pair.loss_range(1e-18, q / 2)[1] > PP.LOSS_CUT
    assert pair.loss_range(1e-18)[1] > PP.LOSS_CUT
    assert PP.pair("remove", z).loss_range(1e-18, 1.0)[1] > PP.LOSS_CUT


@pytest.mark.parametrize("events, delta", [
    ([(PoissonSampledGaussianEvent(1e-4, 0.02), 5), (PoissonSampledGaussianEvent(0.02, 0.8), 100)], 1e-3),
    ([(WORSampledGaussianEvent.from_sizes(1, 5000, 0.02), 4), (WORSampledGaussianEvent.from_sizes(100, 5000, 0.9), 50)],
     2e-3),
])
def test_the_cut_bracket_agrees_with_the_uncut_one(events, delta, monkeypatch):
    """Losses ~1250 (z = 0.02) still fit a grid: the bracket with the cut and without it (the cut moved
    past every loss) are both valid, so they overlap; the cut's upper end is within 1e-6 of the
    uncut one (it can cost at most ~q e^(eps - LOSS_CUT) in delta) and its lower end no worse."""
    h = 0.01
    clear_cache()
    lo_c, up_c = pld_epsilon_at(events, delta, h)
    monkeypatch.setattr(PP, "LOSS_CUT", 1e9)
    monkeypatch.setattr(G, "CUT_MARGIN", math.inf)         # nor the cut that follows eps
    clear_cache()
    lo_u, up_u = pld_epsilon_at(events, delta, h)
    clear_cache()
    assert 0.0 < lo_c <= up_c < math.inf and 0.0 < lo_u <= up_u < math.inf
    assert lo_c <= up_u and lo_u <= up_c
    assert abs(up_c / up_u - 1.0) <= 1e-6
    assert lo_c >= lo_u - 1e-9


def test_the_batch_of_one_dp_srm_calibration_is_tight_and_sound():
    """Soundness fuzz seed 51, #189: DP-SRM with a batch of one after a first batch of 200.  Before the
    cut its noise multipliers of ~4e-3 put the record's losses near 3e4: every composition ran into
    the memory cap and the calibration stopped at certified eps 0.2309 for a target of 0.316 (111 s).
    Now it reaches the target with a bracket of the usual width, and the fuzz's independent oracle
    (a lower-bound PLD of its own) finds delta within the target at the returned noise."""
    from benchmarks.fuzz_soundness import ATOL, RTOL, config

    i = 189                   # the fuzz's configuration #189 (a DP-SRM one: its kind pinned by name)
    mech, eps, delta, oracle = config("dp-srm", np.random.default_rng([51, i]))
    assert type(mech).__name__ == "DPSRM" and mech.b == 1
    rep = mech.calibrate(eps, delta, method="tight")
    assert "memory cap" not in rep.accounting
    assert eps * (1 - 1e-4) <= rep.certified_epsilon <= eps
    assert rep.epsilon_lower >= eps * (1 - 1e-4)
    assert rep.noise["sigma0"] < 0.0031                   # 0.003341 at the cap before
    assert oracle(dict(rep.noise)) <= delta * (1 + RTOL) + ATOL


def _seed52_case19():
    """Soundness fuzz seed 52, #19: DP-SRM whose first batch is one record of 727 at noise 0.027."""
    import dpcalib.mechanisms as M
    return M.DPSRM(n=727, steps=2, b0=1, b=182, lipschitz=0.06514347312356511, step_bound=0.001975406423548696,
                   momentum=0.009562580386868632), 0.11407997629400174, 0.002013011256320166


def test_the_cut_follows_eps_and_gives_the_bracket_of_the_cut_at_1000(monkeypatch):
    """The record's losses ~690 sit inside LOSS_CUT; eps ~0.11: the level falls to eps_up + 64 (cut_level)
    and the bracket on a fixed grid overlaps the one cut at 1000, its upper end no higher."""
    mech, eps, delta = _seed52_case19()
    ev = tuple(mech.accountant(0.0035, 1.4e-4).events)
    clear_cache()
    level = G.cut_level(ev, delta, P.MEMORY_CAP)
    assert level is not None and G.CUT_MARGIN < level < G.CUT_MARGIN + 1.0
    lo_a, up_a = pld_epsilon_at(ev, delta, 1e-3)
    monkeypatch.setattr(G, "CUT_MARGIN", math.inf)
    clear_cache()
    assert G.cut_level(ev, delta, P.MEMORY_CAP) is None
    lo_f, up_f = pld_epsilon_at(ev, delta, 1e-3)
    clear_cache()
    assert 0.0 < lo_a <= up_a < 1.0 and 0.0 < lo_f <= up_f < 1.0
    assert lo_a <= up_f and lo_f <= up_a
    # no worse: the record's mass at +inf is exact (its true place, ~690 above eps, gives up ~e^-580 of
    # it), where on the grid it carried its discretisation (0.112598 beside 0.112676 here)
    assert up_a <= up_f * (1 + 1e-9)


def test_a_level_is_none_where_no_loss_reaches_far():
    """Typical DP-SGD (losses below ADAPT_FROM) and a tiny-noise run whose far mass exceeds delta / k
    (eps huge: the cut cannot apply) compose nothing for the level."""
    clear_cache()
    assert G.cut_level(((PoissonSampledGaussianEvent(0.01, 0.8), 1000),), 1e-5, P.MEMORY_CAP) is None
    assert G.cut_level(((PoissonSampledGaussianEvent(0.02, 0.01), 150),), 1e-5, P.MEMORY_CAP) is None


def test_the_one_record_first_batch_calibration_is_fast_tight_and_sound():
    """Seed 52, #19 took 327 s (the bracket's windows spanned the losses up to ~1000 at a grid of
    ~1e-4); with the level following eps it takes about a second, at the target, with a bracket of
    the usual width, and the fuzz's own oracle agrees."""
    from benchmarks.fuzz_soundness import ATOL, RTOL, config

    i = 19                    # the fuzz's configuration #19 (a DP-SRM one: its kind pinned by name)
    mech, eps, delta, oracle = config("dp-srm", np.random.default_rng([52, i]))
    ref, eps_r, delta_r = _seed52_case19()
    assert (mech.n, mech.b0, mech.b, eps, delta) == (ref.n, ref.b0, ref.b, eps_r, delta_r)
    clear_cache()
    rep = mech.calibrate(eps, delta, method="tight")
    assert "memory cap" not in rep.accounting
    assert eps * (1 - 1e-4) <= rep.certified_epsilon <= eps
    assert rep.epsilon_lower >= eps * (1 - 1e-4)
    assert oracle(dict(rep.noise)) <= delta * (1 + RTOL) + ATOL


def test_the_room_search_starts_from_its_own_grids_lower_end(monkeypatch):
    """tighten.lower_scale with ``lower=None`` (a bracket that stopped before converging: the room is
    searched on the grid 2x coarser) evaluates its start on its own grid; from another grid's lower
    end its first secant pointed the wrong way and crawled (40 compositions).  The scale it returns
    has a lower end at or above the target on that grid, in a few evaluations."""
    import dpcalib.mechanisms as M
    from dpcalib.mechanisms import tighten

    mech = M.DPSGD(0.01, 200)
    target, delta, h = 1.0, 1e-6, 4e-3
    t = mech.calibrate(target, delta)["noise_multiplier"]

    def build(s):
        return mech.accountant(s)
    calls = []
    orig = P.pld_epsilon_at

    def spy(*a, **k):
        calls.append(a[2])
        return orig(*a, **k)
    monkeypatch.setattr(P, "pld_epsilon_at", spy)
    clear_cache()
    s = tighten.lower_scale(build, target, delta, t, h, None, 1e-4)
    assert s is not None and s < t and len(calls) <= 12
    assert orig(build(s).events, delta, h, side="lower")[0] >= target
    # given that same grid's lower end at the start, the search is the same
    calls.clear()
    s2 = tighten.lower_scale(build, target, delta, t, h, orig(build(t).events, delta, h, side="lower")[0], 1e-4)
    assert s2 == s
