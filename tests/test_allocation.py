"""Balls-in-bins accounting (accountant/pld/allocation*.py): the bracket against a Monte Carlo oracle written
from the dominating pair alone (benchmarks/mc_allocation.py), exact GDP at one step an epoch, the
one-step laws' convex-order bounds against closed forms, and the event's input checks."""

import json
import math
import pathlib

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from benchmarks.mc_allocation import epsilon_limits, losses
from dpcalib.accountant import (BallsInBinsGaussianEvent, GaussianEvent, PrivacyAccountant, clear_cache, full_batch_form,
                                gdp_epsilon, pld_epsilon)
from dpcalib.accountant.pld.allocation import epoch_step
from dpcalib.accountant.pld.allocation_terms import bulk_law, tail_laws
from dpcalib.accountant.pld.bracket import lower_one, upper_one
from dpcalib.accountant.validation import InputError

from . import oracles

DATA = pathlib.Path(__file__).parent / "data" / "allocation_mc.json"
CAP = 1 << 30

#: the settings sampled here, 10^6 samples each (t, noise multiplier, epochs, delta): t * epochs stays small
#: enough to draw in seconds; the larger ones are in tests/data/allocation_mc.json
LIVE = ((2, 0.5, 1, 1e-2), (2, 1.0, 5, 1e-3), (2, 2.0, 20, 1e-3), (3, 0.7, 1, 1e-3), (3, 5.0, 10, 1e-2),
        (5, 1.5, 10, 1e-3), (10, 0.5, 1, 1e-3), (10, 3.0, 8, 1e-2), (20, 1.0, 2, 1e-3), (50, 0.6, 1, 1e-3),
        (100, 1.2, 1, 1e-3), (30, 5.0, 3, 1e-2))


def _directions(t, z, epochs, delta):
    """Each direction's bracket on the grid the accountant's own bracket ends on: ``{direction: (lower,
    upper)}``, and that bracket."""
    b = pld_epsilon([(BallsInBinsGaussianEvent(t, z), epochs)], delta)
    h = b.discretization
    tau = 1e-8 * delta / epochs
    out = {}
    for d in ("remove", "add"):
        _, up = upper_one([epoch_step(z, t, epochs, h, tau, d, False, CAP, delta)], h, delta, CAP)
        low = epoch_step(z, t, epochs, h, tau, d, True, CAP, delta)
        out[d] = (lower_one([low], h, delta, CAP) if low is not None else 0.0, up)
    return out, b


def _check(t, z, epochs, delta, mc):
    ours, b = _directions(t, z, epochs, delta)
    for d in ("remove", "add"):
        lo, up = ours[d]
        mc_lo, mc_up = mc[d]
        # soundness, each direction: the certified upper end is not below the Monte Carlo lower limit,
        # the lower end not above its upper limit
        assert up >= mc_lo, (t, z, epochs, delta, d, ours[d], mc[d])
        assert lo <= mc_up, (t, z, epochs, delta, d, ours[d], mc[d])
    # the bracket the accountant reports: both directions' worse, and 1e-3 wide at most (wherever the
    # Monte Carlo interval is narrower, as everywhere else)
    assert b.upper >= max(mc["remove"][0], mc["add"][0])
    assert b.lower <= max(mc["remove"][1], mc["add"][1])
    assert b.converged and b.upper - b.lower <= 1e-3 * b.upper, b


@pytest.mark.parametrize("t,z,epochs,delta", LIVE)
def test_bracket_against_monte_carlo(t, z, epochs, delta):
    rem, add = losses(t, z, epochs, 1_000_000, seed=t * 1000 + epochs)
    _check(t, z, epochs, delta, {"remove": epsilon_limits(rem, delta), "add": epsilon_limits(add, delta)})


def _stored():
    return json.loads(DATA.read_text())["settings"] if DATA.exists() else []


@pytest.mark.parametrize("row", _stored(), ids=lambda r: f"t{r['t']}-z{r['z']}-E{r['epochs']}")
def test_bracket_against_stored_monte_carlo(row):
    """The settings too large to sample in a test (t up to 1000, 100 epochs), sampled once by
    ``python benchmarks/mc_allocation.py`` with the same oracle, 10^6 samples each."""
    assert row["samples"] >= 1_000_000
    _check(row["t"], row["z"], row["epochs"], row["delta"], {d: tuple(row[d]) for d in ("remove", "add")})


def test_the_settings_span_the_acceptance_ranges():
    rows = [(r["t"], r["z"], r["epochs"]) for r in _stored()] + [s[:3] for s in LIVE]
    assert len(rows) >= 20
    assert min(r[0] for r in rows) == 2 and max(r[0] for r in rows) == 1000
    assert min(r[1] for r in rows) == 0.5 and max(r[1] for r in rows) == 5.0
    assert min(r[2] for r in rows) == 1 and max(r[2] for r in rows) == 100


def test_the_oracle_can_fail():
    """A planted under-report (the Gaussian pair's eps shrunk) falls below the Monte Carlo lower limit,
    and the oracle agrees with exact GDP at one step an epoch."""
    rem, add = losses(1, 1.0, 3, 1_000_000, seed=7)
    lo, up = epsilon_limits(rem, 1e-3)
    exact = gdp_epsilon(math.sqrt(3.0), 1e-3)
    assert lo <= exact <= up and up - lo < 0.05 * exact
    assert 0.97 * exact < lo


@pytest.mark.parametrize("z,epochs,delta", [(0.5, 1, 1e-5), (1.0, 50, 1e-5), (3.0, 7, 1e-10), (0.9, 1000, 1e-3)])
def test_one_step_an_epoch_is_exact_gdp(z, epochs, delta):
    assert full_batch_form(BallsInBinsGaussianEvent(1, z)) == GaussianEvent(z)
    b = PrivacyAccountant().compose(BallsInBinsGaussianEvent(1, z), epochs).epsilon_bracket(delta)
    exact = float(oracles.gdp_epsilon(math.sqrt(epochs) / z, delta))
    assert abs(b.upper - exact) <= 1e-9 * exact and abs(b.lower - exact) <= 1e-9 * exact


def _calls(y, q, u):
    return np.array([float(np.sum(q * np.maximum(y - x, 0.0))) for x in u])


def _puts(y, q, u):
    return np.array([float(np.sum(q * np.maximum(x - y, 0.0))) for x in u])


def _mass(a, b):
    """P(a < X <= b), X ~ N(0, 1), from the smaller tail (scipy)."""
    from scipy.special import ndtr

    return np.where(a >= 0, ndtr(-a) - ndtr(-b), ndtr(b) - ndtr(a))


def _exact(z, hi, u, kind):
    """E(Y - u)_+ (calls) or E(u - Y)_+ (puts) over ``0 < Y <= hi`` at the points ``u``, Y = e^((X - 1/2) /
    z^2), X ~ N(0, z^2): the Q-mass and first moment of an interval of Y are normal masses at x / z and
    (x - 1) / z, x = z^2 log y + 1/2 -- the Gaussian pair's closed forms."""
    def x(y):
        with np.errstate(divide="ignore"):
            return z * z * np.log(y) + 0.5

    xu, xh = x(np.asarray(u, dtype=float)), x(hi)
    if kind == "calls":
        q, m = _mass(xu / z, xh / z), _mass((xu - 1) / z, (xh - 1) / z)
        return np.where(u < hi, m - u * q, 0.0)
    xu = np.minimum(xu, xh)
    q, m = _mass(-np.inf, xu / z), _mass(-np.inf, (xu - 1) / z)
    return u * q - m


@settings(max_examples=60, deadline=None, derandomize=True)
@given(z=st.floats(0.4, 8.0), step=st.floats(1e-3, 1.5), n=st.integers(2, 3000))
def test_one_step_laws_bound_the_log_normal_in_convex_order(z, step, n):
    """The upper law has the restricted law's mass and mean and larger calls; the two lower laws have no
    more mass and lower calls, resp. puts, than the exact closed forms at every point checked."""
    up = bulk_law(z, step, n, "upper")
    calls = bulk_law(z, step, n, "calls")
    puts = bulk_law(z, step, n, "puts")
    y = step * np.arange(n + 1)
    c1 = n * step
    u = np.unique(np.concatenate((np.linspace(0.0, c1, 40), y[:: max(1, n // 40)] + 0.37 * step)))
    u = u[u <= c1]
    true_calls = _exact(z, c1, u, "calls")
    true_puts = _exact(z, c1, u, "puts")
    tot = float(np.sum(up))
    scale = max(1e-300, tot)
    assert np.all(_calls(y, up, u) >= true_calls * (1 - 1e-9) - 1e-15 * scale)
    assert np.all(_puts(y, up, u) >= true_puts * (1 - 1e-9) - 1e-15 * scale)
    assert calls is not None and puts is not None
    assert np.sum(calls) <= tot * (1 + 1e-12) and np.sum(puts) <= tot * (1 + 1e-12)
    assert np.all(_calls(y, calls, u) <= true_calls * (1 + 1e-9) + 1e-15 * scale)
    assert np.all(_puts(y, puts, u) <= true_puts * (1 + 1e-9) + 1e-15 * scale)


@pytest.mark.parametrize("z", [0.5, 1.0, 3.0])
def test_tail_laws_spread_and_merge(z):
    """The tail's upper atoms keep each cell's mass and mean (the rest's P-excess at infinity); the lower
    atoms are the cells' means."""
    (uy, uq, p_inf), (ly, lq) = tail_laws(z, 5.0, 1.05, 1e4)
    with mp.workdps(30):
        x = z * z * mp.log(5.0) + mp.mpf(1) / 2
        q_tail = float(mp.ncdf(-x / z))
        m_tail = float(mp.ncdf(-(x - 1) / z))
    assert math.isclose(float(np.sum(uq)), q_tail, rel_tol=1e-9)
    assert math.isclose(float(np.sum(uq * uy)) + p_inf, m_tail, rel_tol=1e-9)
    assert math.isclose(float(np.sum(lq)), q_tail, rel_tol=1e-9)
    assert math.isclose(float(np.sum(lq * ly)), m_tail, rel_tol=1e-9)
    assert np.all(ly >= 5.0) and np.all(uy >= 5.0) and 1e4 <= uy.max() <= 1.05e4


def test_pld_is_never_above_no_amplification_and_is_monotone():
    """eps falls with the noise and grows with the epochs and the steps' fewer records (t smaller), and the
    certified end is never above the Gaussian release's (one per epoch: no amplification)."""
    clear_cache()
    prev = None
    for z in (0.6, 0.8, 1.2):
        b = PrivacyAccountant().compose(BallsInBinsGaussianEvent(100, z), 5).epsilon_bracket(1e-5)
        assert b.upper <= gdp_epsilon(math.sqrt(5) / z, 1e-5) * (1 + 1e-12)
        if prev is not None:
            assert b.upper < prev
        prev = b.lower
    e = [PrivacyAccountant().compose(BallsInBinsGaussianEvent(t, 1.0), k).epsilon_bracket(1e-5)
         for t, k in ((50, 3), (50, 6), (200, 6))]
    assert e[0].upper < e[1].lower and e[2].upper < e[1].lower


@pytest.mark.parametrize("kwargs,message", [
    ({"steps": 0, "noise_multiplier": 1.0}, "steps=0 is not allowed"),
    ({"steps": 2.5, "noise_multiplier": 1.0}, "steps=2.5 is not allowed"),
    ({"steps": 10, "noise_multiplier": 0.0}, "noise_multiplier=0.0 is not allowed"),
    ({"steps": 10, "noise_multiplier": float("nan")}, "noise_multiplier=nan is not allowed"),
    ({"steps": 10 ** 10, "noise_multiplier": 1.0}, "steps=10000000000 is not allowed"),
])
def test_the_event_refuses_bad_input_in_one_line(kwargs, message):
    with pytest.raises(InputError, match=message) as exc:
        BallsInBinsGaussianEvent(**kwargs)
    assert "\n" not in str(exc.value)


def test_the_event_composes_only_with_add_remove_events():
    from dpcalib.accountant import WORSampledGaussianEvent

    acc = PrivacyAccountant().compose(BallsInBinsGaussianEvent(10, 1.0), 2)
    assert acc.neighboring_relation == "add/remove"
    with pytest.raises(InputError, match="neighbouring relation"):
        acc.compose(WORSampledGaussianEvent(0.1, 1.0))
    with pytest.raises(InputError, match="no dp-accounting event"):
        BallsInBinsGaussianEvent(10, 1.0).to_dp_event()
