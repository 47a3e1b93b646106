"""The PLD accountant at the corners of its range: a finite bracket or a clear ValueError.

Range: delta from 1e-300 to 0.1, q from 1e-7 to 1, noise multiplier from 0.1 to 1e4, up to 1e7
steps, eps targets from 0.01 to 100.  Oracles: the exact GDP epsilon (a Poisson event with q = 1
is the Gaussian mechanism) and the RDP accountant (the certified upper end is never above it).
The full 36-corner sweep takes minutes and lives in benchmarks/pld_corners.py; here the corners
that answer in about a second each.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcalib.accountant import GaussianEvent, PoissonSampledGaussianEvent, PrivacyAccountant
from dpcalib.accountant.pld import pld_epsilon
from dpcalib.mechanisms import DPSGD

from tests import oracles


@pytest.mark.parametrize("q, z, k, delta", [
    (1e-7, 0.1, 1, 1e-300), (1e-7, 0.1, 1, 0.1), (1e-7, 1e4, 1, 1e-300), (1e-7, 1.0, 10**7, 0.1),
    (1e-3, 1.0, 1, 1e-300), (1e-3, 0.1, 1, 1e-300), (1e-3, 1e4, 10**7, 0.1),
    (1.0, 1.0, 1, 1e-300), (1.0, 1.0, 1, 0.1), (1.0, 1e4, 10**7, 0.1), (1.0, 0.1, 1, 0.1),
])
def test_corner_brackets_are_finite_and_below_rdp(q, z, k, delta):
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(q, z), k)
    b = acc.epsilon_bracket(delta)
    assert math.isfinite(b.upper) and 0.0 <= b.lower <= b.upper
    assert b.upper <= acc.get_epsilon(delta, "rdp") * (1 + 1e-12)
    if q == 1.0:    # Poisson with q = 1 is the Gaussian mechanism: the exact answer is known
        exact = float(oracles.gdp_epsilon(math.sqrt(k) / z, delta))
        assert b.lower <= exact * (1 + 1e-9) and exact <= b.upper * (1 + 1e-9)


def test_full_batch_ten_million_steps_contains_the_exact_epsilon():
    b = pld_epsilon([(GaussianEvent(1e4), 10**7)], 1e-12)
    exact = float(oracles.gdp_epsilon(math.sqrt(1e7) / 1e4, 1e-12))
    assert b.lower <= exact <= b.upper and b.converged


@pytest.mark.parametrize("z, k, delta", [(498.0, 3, 1.5e-19), (100.0, 10, 1e-120), (3000.0, 10, 1e-50),
                                        (100.0, 2, 1e-250)])
def test_narrow_loss_at_tiny_delta_converges_around_the_exact_epsilon(z, k, delta):
    """Large noise: the loss spreads ~1/z per step, and eps(delta) sits tens of spreads out.
    The tilt toward the delta-quantile must reach ~eps / variance (thousands); with tilts up to
    64 the first case ended at the memory cap, 11 s, with [0.027, 0.065] around 0.0281."""
    b = pld_epsilon([(GaussianEvent(z), k)], delta)
    exact = float(oracles.gdp_epsilon(math.sqrt(k) / z, delta))
    assert b.converged and b.lower <= exact <= b.upper
    assert b.upper - b.lower <= max(1e-3 * exact, 2e-5)


def test_a_bracket_that_stops_narrowing_stops_refining():
    """z = 3000, 2 steps, delta = 1e-120: below h ~ 1e-5 the width stays ~1e-5 (round-off), just
    above atol; refining went on to the memory cap (17 s).  It must stop, say why, and still
    hold the exact value."""
    b = pld_epsilon([(GaussianEvent(3000.0), 2)], 1e-120)
    exact = float(oracles.gdp_epsilon(math.sqrt(2) / 3000.0, 1e-120))
    assert b.lower <= exact <= b.upper and b.upper - b.lower <= 2e-3 * exact
    assert not b.converged and any("stopped narrowing" in n for n in b.notes)


def test_narrow_poisson_loss_at_tiny_delta_converges_below_rdp():
    ev = PoissonSampledGaussianEvent(9.01e-5, 30.1)
    b = pld_epsilon([(ev, 1000)], 1e-20)      # was [0.00067, 0.0427], memory cap, not converged
    rdp = PrivacyAccountant().compose(ev, 1000).get_epsilon(1e-20, "rdp")
    assert b.converged and 0.0 < b.lower <= b.upper <= rdp
    assert b.upper - b.lower <= 1e-5


@pytest.mark.parametrize("kwargs, name", [
    (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"), (dict(delta=1e-301), "delta"),
    (dict(rtol=0.0), "rtol"), (dict(memory_cap=10), "memory_cap"),
])
def test_bad_arguments_name_the_argument(kwargs, name):
    args = dict(events=[(PoissonSampledGaussianEvent(0.01, 1.0), 10)], delta=1e-5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        pld_epsilon(**args)


_EV = [(PoissonSampledGaussianEvent(0.01, 1.0), 10)]


@pytest.mark.parametrize("call, message", [
    (lambda P: P.pld_delta(_EV, -0.5), "epsilon=-0.5 is not allowed: expected a number in [0, inf)."),
    (lambda P: P.pld_delta(_EV, math.inf), "epsilon=inf is not allowed: expected a number in [0, inf)."),
    (lambda P: P.pld_delta(_EV, 1.0, memory_cap=-1), "memory_cap=-1 is not allowed: expected an integer in [1048576, inf]."),
    (lambda P: P.pld_profile(_EV, [-1.0, 0.5]), "epsilons=[-1.0, 0.5] is not allowed: expected finite numbers >= 0."),
    (lambda P: P.pld_profile(_EV, [0.5], memory_cap=2.5), "memory_cap=2.5 is not allowed"),
    (lambda P: P.pld_upper_profiles(_EV, memory_cap=10), "memory_cap=10 is not allowed"),
    (lambda P: P.report_grid(_EV, 1e-5, rtol=0.0), "rtol=0.0 is not allowed: expected a number in (0, 1]."),
    (lambda P: P.report_grid(_EV, 1e-5, atol=-1.0), "atol=-1.0 is not allowed: expected a number in [0, inf)."),
    (lambda P: P.report_grid(_EV, 1e-5, memory_cap=10), "memory_cap=10 is not allowed"),
    (lambda P: P.pld_epsilon_at(_EV, 1e-5, 1e-3, memory_cap=math.inf), "memory_cap=inf is not allowed"),
    (lambda P: P.pld_epsilon(_EV, 1e-5, discretization=-1.0), "discretization=-1.0 is not allowed"),
    (lambda P: P.pld_epsilon([], 1e-5, discretization=100.0), "discretization=100.0 is not allowed"),
], ids=["delta-neg-eps", "delta-inf-eps", "delta-cap", "profile-neg-eps", "profile-cap", "upper-profiles-cap",
        "grid-rtol", "grid-atol", "grid-cap", "at-cap", "epsilon-grid", "epsilon-grid-no-events"])
def test_every_pld_query_checks_its_inputs_in_one_line(call, message):
    """The entrance (accountant/pld/queries.py) checks every input before anything is composed:
    epsilon, the tolerances, the grid and the memory cap of every query, in the one-line InputError."""
    from dpcalib.accountant import pld
    from dpcalib.accountant.validation import InputError

    with pytest.raises(InputError) as exc:
        call(pld)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value), str(exc.value)


def test_a_loss_too_wide_for_any_grid_says_why_and_what_to_do():
    # noise 1e-9: the privacy loss spans ~1e17; no grid fits the default cap.  The error names
    # the cap (its value) and the way out, also for a user who never passed memory_cap
    with pytest.raises(ValueError, match=r"accountant='pld' is not allowed.*noise.*memory_cap=1073741824 .*'rdp'"):
        pld_epsilon([(PoissonSampledGaussianEvent(0.5, 1e-9), 10)], 1e-5)
    # the best-of accountant falls back to RDP (a finite, certified eps) instead of failing
    b = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.5, 1e-9), 10).epsilon_bracket(1e-5)
    assert b.method == "rdp" and 0.0 < b.upper < math.inf and b.lower == 0.0


@pytest.mark.parametrize("bad", [dict(q=1.5), dict(q=-0.1), dict(z=0.0), dict(z=math.nan)])
def test_bad_events_are_refused_by_their_constructor(bad):
    q, z = bad.get("q", 0.01), bad.get("z", 1.0)
    with pytest.raises(ValueError):
        PoissonSampledGaussianEvent(q, z)


@pytest.mark.parametrize("q, steps, eps, delta", [
    (0.01, 1000, 0.01, 1e-5),      # smallest target: noise ~77
    (0.01, 100, 100.0, 1e-5),      # largest target: noise ~0.18
    (1.0, 10, 100.0, 0.1),         # largest delta, full batch under add/remove
    (0.001, 100, 100.0, 1e-5),     # small q and noise ~0.12: an atom mid-bin (22 s before the aligned grid)
])
def test_pld_calibration_at_the_target_corners(q, steps, eps, delta):
    rep = DPSGD(q, steps).calibrate(eps, delta, accountant="best")
    z = rep.noise["noise_multiplier"]
    assert math.isfinite(z) and z > 0
    assert rep.certified_epsilon <= eps                          # never overshoots
    assert rep.epsilon_lower <= rep.certified_epsilon
    if q == 1.0:        # full batch: exact GDP in closed form, no search (no floor, no RDP start)
        assert rep.accounting.startswith("gdp (exact") and rep.lower_bound_noise is None
        assert float(oracles.gdp_delta(eps, math.sqrt(steps) / z)) <= delta
    else:
        assert rep.lower_bound_noise["noise_multiplier"] <= z <= rep.notes["rdp_tight_noise"]["noise_multiplier"]
    # the certified value is the accountant's own: recompute it independently of the solver
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(q, z), steps)
    assert acc.epsilon_bracket(delta).upper == pytest.approx(rep.certified_epsilon, rel=1e-12)


def test_a_target_below_the_rdp_floor_at_tiny_delta_is_an_rdp_error_and_a_pld_answer():
    # at delta = 8.5e-170 the RDP eps (orders up to 1024) cannot go below ~0.37 at any noise: the
    # RDP calibration says so; the PLD one finds its own start and calibrates
    ev = lambda z: PoissonSampledGaussianEvent(9.01e-5, z)  # noqa: E731
    assert PrivacyAccountant().compose(ev(1e4), 1).get_epsilon(8.48e-170, "rdp") > 0.3
    with pytest.raises(ValueError, match=r"floor of about log\(1/delta\)"):
        DPSGD(9.01e-5, 1).calibrate(0.077, 8.48e-170, accountant="rdp")
    rep = DPSGD(9.01e-5, 1).calibrate(0.077, 8.48e-170, accountant="pld")
    z = rep.noise["noise_multiplier"]
    assert rep.certified_epsilon <= 0.077 and rep.notes["rdp_tight_noise"] is None
    assert "RDP cannot certify" in rep.accounting
    # one Poisson step: the closed-form profile (mpmath) at the target must be within delta
    prof = max(float(oracles.wor_profile(9.01e-5, z, 0.077, d, dps=60)) for d in ("remove", "add"))
    assert prof <= 8.48e-170
    # and 0.1 % less noise must not be certifiable by the same oracle (the answer is tight)
    prof = max(float(oracles.wor_profile(9.01e-5, z * 0.999, 0.077, d, dps=60)) for d in ("remove", "add"))
    assert prof > 8.48e-170


def test_a_pld_calibration_of_many_steps_below_the_rdp_floor():
    rep = DPSGD(0.01, 1000).calibrate(0.3, 1e-170, accountant="pld")
    z = rep.noise["noise_multiplier"]
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, z), 1000)
    b = acc.epsilon_bracket(1e-170)
    assert b.upper == pytest.approx(rep.certified_epsilon, rel=1e-12) and b.upper <= 0.3
    assert 0.29 < b.lower <= b.upper
    assert acc.get_epsilon(1e-170, "rdp") > 0.3


def test_a_refinement_step_over_the_cap_retries_half_as_fine():
    # 1000 Poisson steps under a 2 MiB cap: the refinement's step from 4.65e-4 to 1.16e-4 does
    # not fit; 2.32e-4 does, and its bracket is 4x narrower (it used to stop at 4.65e-4, width
    # 4.6e-4).  Both contain the truth, so the capped bracket meets the uncapped one.
    ev = [(PoissonSampledGaussianEvent(0.01, 1.0), 1000)]
    capped = pld_epsilon(ev, 1e-5, memory_cap=1 << 21)
    fine = pld_epsilon(ev, 1e-5)
    assert not capped.converged and any("memory cap" in n for n in capped.notes)
    assert capped.discretization < 3e-4 and capped.width <= 1.5e-4
    assert capped.lower <= fine.upper and fine.lower <= capped.upper


def test_an_atom_between_grid_points_gets_lower_steps_without_the_anchor(monkeypatch):
    # One Poisson step, q = 0.00137, z = 0.182: almost all the mass sits just above log(1 - q),
    # mid-way between grid points; its chord gap broke the lower steps, and the lower end was
    # Hoeffding's (0.025 wide on the 0.025 grid).  Single Poisson pairs now take their lower steps
    # on the grid anchored at the atom (tests/test_pld_small_q.py); without that, the plain grid's
    # lower step still exists -- the weighted bottom rule closed it at J = 1 (every loss above
    # the atom dropped), and the plain rule is now taken where it closes twice as high -- and so
    # does the aligned grid's, the fallback.  Oracle: the closed-form profile (mpmath):
    # delta(lower) >= delta >= delta(upper), both directions.
    from dpcalib.accountant import pld
    from dpcalib.accountant.pld import discretise as pld_discretise, grid as pld_grid

    q, z, delta = 0.00137, 0.182, 8.8e-6

    def prof(e):
        return max(float(oracles.wor_profile(q, z, e, d)) for d in ("remove", "add"))

    monkeypatch.setattr(pld_discretise, "ANCHORED", False)
    for aligned in (True, False):
        if not aligned:
            monkeypatch.setattr(pld_grid, "aligned_grid", lambda events, h: None)
        pld.clear_cache()
        b = pld_epsilon([(PoissonSampledGaussianEvent(q, z), 1)], delta)
        assert prof(b.lower) >= delta * (1 - 1e-9) and prof(b.upper) <= delta * (1 + 1e-9)
        assert b.converged and b.width <= 3e-5 * b.upper and b.width < 0.01 * b.discretization
    pld.clear_cache()


def test_convexify_gives_up_at_once_on_a_kink_no_block_can_absorb():
    # a concave kink of a whole unit at the bottom with only 1e-9 above (the mid-bin atom): the
    # block would have to span the whole step; it gives up at that kink's vertex
    from dpcalib.accountant.pld.convex import _MAX_BLOCK, convexify

    m = np.concatenate(([0.0, 2.0, -1.0], np.full(4 * _MAX_BLOCK, 1e-9)))
    assert convexify(m.copy(), 1e-4) == 2
    ok = np.array([0.0, 1.0, -0.5, 0.6, 0.1])             # absorbed by the next atom
    assert convexify(ok, 1e-4) is None and np.all(ok[1:] >= 0.0)


def test_refinement_stops_where_a_floor_shows(monkeypatch):
    # q = 1.05e-4, z = 0.599, 37 steps, delta = 1.15e-10 (a fuzz configuration): the own widths
    # are 0.328 at h = 0.0125, 0.0522 at 1.9e-3, 0.0133 at 2.8e-4 -- a 6.7x finer grid narrowed
    # it 3.9x, less than 3/4 of 6.7 (an O(h) or O(h^2) width narrows >= 6.7x): the round-off
    # charge, growing with the grid points, has taken over (the next grids' own widths were
    # 0.0115 at 4.1e-5 and 0.0153 at 6.1e-6; a calibration there took 70 s).  The refinement
    # stopped at 2.8e-4 instead of composing 4.1e-5 (7x the cost, 7 % narrower).  Since the
    # per-component tail cut (Pair._tails: the sampled record's component, weight q, is cut
    # closer) the steps hold fewer grid points and the floor is lower: the own widths are now
    # 0.327, 0.0489, 0.00284 and 0.00148 at 4.1e-5 -- there a 6.7x finer grid narrowed it 1.9x,
    # and the refinement stops instead of composing 6.1e-6.  The bracket
    # (the intersection) must hold the truth: RDP is above it.  (That floor was the edge atom's
    # and the FFT's round-off against it; the anchored lower steps and the split composition
    # remove it -- the same configuration now converges on a 1.6e-3 grid, last assertion -- so
    # the stop rule is exercised here with both switched off.)
    from dpcalib.accountant import pld
    from dpcalib.accountant.pld import bracket as pld_bracket, discretise as pld_discretise, refine

    monkeypatch.setattr(pld_discretise, "ANCHORED", False)
    monkeypatch.setattr(pld_bracket, "SPLIT", False)
    pld.clear_cache()
    grids = []
    real = refine.epsilon_at
    monkeypatch.setattr(refine, "epsilon_at", lambda *a, **k: grids.append(a[2]) or real(*a, **k))
    ev = PoissonSampledGaussianEvent(1.0505419129998906e-4, 0.5989082694417645)
    b = pld_epsilon([(ev, 37)], 1.1545065346121449e-10)
    assert len(grids) == 4 and min(grids) > 4e-5 and not b.converged
    assert any("stopped narrowing" in n for n in b.notes)
    rdp = PrivacyAccountant().compose(ev, 37).get_epsilon(1.1545065346121449e-10, "rdp")
    assert 0.0 < b.lower <= b.upper <= rdp and b.width <= 0.0125
    monkeypatch.undo()
    pld.clear_cache()
    now = pld_epsilon([(ev, 37)], 1.1545065346121449e-10)
    assert now.converged and now.discretization > 1e-3 and now.width <= 3e-5 * now.upper
    assert b.lower <= now.upper and now.lower <= b.upper



@pytest.mark.parametrize("z", [2e154, 1e300])
def test_a_poisson_step_whose_noise_squared_overflows_never_hides_the_gaussian_beside_it(z):
    # the remove pair's inverse overflows past z ~ 1.3e154: its NaN masses were read as no mass (eps = 0 for
    # the whole composition); now that pair is over the cap and RDP answers, at or above the Gaussian's eps
    from dpcalib.accountant import GaussianEvent, PoissonSampledGaussianEvent, PrivacyAccountant, gdp_epsilon

    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.1, z), 10).compose(GaussianEvent(1.0))
    br = acc.epsilon_bracket(1e-5)
    assert br.upper >= gdp_epsilon(1.0, 1e-5) * (1 - 1e-9)
    assert acc.get_epsilon(1e-5) >= gdp_epsilon(1.0, 1e-5) * (1 - 1e-9)
