"""Shuffled batches: the certified upper end is the exact GDP eps of E Gaussian releases (mpmath), the
lower end is a lower bound (an independent quadrature of the max statistic's pair, Chua et al.'s
cube sets) below the upper end, and a documented setting where it exceeds Poisson's eps."""

import json
import math
import subprocess
import sys

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize, stats

from dpcalib.accountant import shuffle_lower_epsilon, shuffle_upper_epsilon
from dpcalib.mechanisms import DPSGD


def _mp_gdp_epsilon(mu, delta):
    """eps of mu-GDP at delta: root of Phi(-e/mu + mu/2) - e^e Phi(-e/mu - mu/2) = delta (50 digits)."""
    mpmath.mp.dps = 50
    mu = mpmath.mpf(mu)
    f = lambda e: mpmath.ncdf(-e / mu + mu / 2) - mpmath.exp(e) * mpmath.ncdf(-e / mu - mu / 2) - delta  # noqa: E731
    lo, hi = mpmath.mpf(0), mpmath.mpf(60)          # f decreasing: bisection to 2^-120 of hi
    while f(hi) > 0:
        hi *= 2
    for _ in range(120):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return float(hi)


@pytest.mark.parametrize("z,E,relation", [(0.8, 1, "zero-out"), (1.0, 5, "zero-out"), (2.0, 10, "replace-one"),
                                          (0.5, 3, "replace-one")])
def test_upper_end_is_the_exact_gdp_of_e_releases(z, E, relation):
    m = DPSGD(sampling="shuffle", n=6000, batch_size=60, epochs=E, relation=relation)
    shift = 1.0 if relation == "zero-out" else 2.0
    exact = _mp_gdp_epsilon(math.sqrt(E) * shift / z, 1e-5)
    assert m.epsilon(1e-5, z).epsilon == pytest.approx(exact, rel=1e-9)
    assert m.epsilon_bracket(1e-5, z).upper == pytest.approx(exact, rel=1e-9)
    assert m.report(1e-5, z).epsilon == pytest.approx(exact, rel=1e-9)


def _max_pair_delta(eps, z, T):
    """delta(eps) of the one-epoch max-statistic pair (MoG(2), MoG(1)) by quadrature of its densities."""
    def dens(x, m):
        a = stats.norm.pdf((x - m) / z) / z * stats.norm.cdf(x / z) ** (T - 1)
        b = (T - 1) * stats.norm.cdf((x - m) / z) * stats.norm.cdf(x / z) ** (T - 2) * stats.norm.pdf(x / z) / z
        return a + b
    f = lambda x: max(dens(x, 2.0) - math.exp(eps) * dens(x, 1.0), 0.0)  # noqa: E731
    return integrate.quad(f, -10 * z, 2 + 12 * z, limit=400, epsabs=1e-13, epsrel=1e-10)[0]


def _cube_epsilon(z, T, delta):
    """Chua et al.'s one-epoch cube-set bound: max over C of P(max > C) - e^eps Q(max > C)."""
    C = np.arange(-5.0, 40.0, 1e-3)
    lp = stats.norm.logcdf((C - 2) / z) + (T - 1) * stats.norm.logcdf(C / z)
    lq = stats.norm.logcdf((C - 1) / z) + (T - 1) * stats.norm.logcdf(C / z)
    g = lambda e: float(np.max(-np.expm1(lp) - math.exp(e) * -np.expm1(lq))) - delta  # noqa: E731
    return optimize.brentq(g, 0.0, 40.0)


@pytest.mark.parametrize("z,T", [(0.8, 100), (0.6, 100), (1.0, 20)])
def test_lower_end_is_below_the_max_statistics_true_eps_and_near_the_cube_bound(z, T):
    lo = shuffle_lower_epsilon(z, 600 * T, 600, 1, 1e-5)
    # the max statistic's own pair still has delta >= 1e-5 at our eps: ours is not above its eps
    assert _max_pair_delta(lo, z, T) >= 1e-5 * (1 - 1e-6)
    # and it is at least as strong as the cube sets (within the grid's rounding, h = 1e-3)
    assert lo >= _cube_epsilon(z, T, 1e-5) - 2e-3


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(2, 100000), st.integers(1, 5000), st.integers(1, 20), st.floats(0.3, 20.0),
       st.sampled_from(["zero-out", "replace-one"]), st.booleans())
def test_lower_never_exceeds_upper(n, b, E, z, relation, drop_last):
    b = min(b, n)
    if drop_last and n // b == 0:
        return
    m = DPSGD(sampling="shuffle", n=n, batch_size=b, epochs=E, relation=relation, drop_last=drop_last)
    br = m.epsilon_bracket(1e-5, z)
    assert 0.0 <= br.lower <= br.upper
    assert br.upper == pytest.approx(shuffle_upper_epsilon(z, E, 1e-5, relation), rel=1e-12)


def _grid_settings(count=250, seed=41):
    """A fixed grid of shuffled-batch settings: n not divisible by b in at least half of them, E in
    1..10, z in 0.3..5 (log-uniform), both relations, drop_last both ways."""
    import random

    rng = random.Random(seed)
    out = []
    for i in range(count):
        n = rng.choice([100, 999, 1000, 4096, 10007, 50000, 60000, 123457, 1_000_000])
        b = min(rng.choice([1, 7, 32, 100, 256, 600, 1000, 4096]), n)
        if i % 2 == 0 and n % b == 0 and b > 1:
            b -= 1                                 # every other setting has a partial last batch
        out.append((n, b, rng.randint(1, 10), math.exp(rng.uniform(math.log(0.3), math.log(5.0))),
                    rng.choice(["zero-out", "replace-one"]), rng.random() < 0.5))
    return out


GRID = _grid_settings()


def test_grid_covers_what_it_claims():
    assert len(GRID) >= 250
    assert sum(n % b != 0 for n, b, *_ in GRID) >= len(GRID) / 2
    assert {E for _, _, E, *_ in GRID} == set(range(1, 11))
    assert min(z for *_, z, _, _ in GRID) < 0.35 and max(z for *_, z, _, _ in GRID) > 4.5
    assert {(rel, dl) for *_, rel, dl in GRID} == {(r, d) for r in ("zero-out", "replace-one") for d in (True, False)}


def test_bracket_over_a_grid_of_250_settings():
    """No exception anywhere (156 of these settings ended in 'math domain error' before the tail of
    the max statistic was computed part by part), lower <= upper, upper = the exact GDP of E
    releases (mpmath)."""
    gdp = {}
    for n, b, E, z, relation, drop_last in GRID:
        m = DPSGD(sampling="shuffle", n=n, batch_size=b, epochs=E, relation=relation, drop_last=drop_last)
        br = m.epsilon_bracket(1e-5, z)
        mu = math.sqrt(E) * (1.0 if relation == "zero-out" else 2.0) / z
        if mu not in gdp:
            gdp[mu] = _mp_gdp_epsilon(mu, 1e-5)
        assert 0.0 <= br.lower <= br.upper, (n, b, E, z, relation, drop_last)
        assert br.upper == pytest.approx(gdp[mu], rel=1e-9), (n, b, E, z, relation, drop_last)


def _mixture_max_pair_epsilon(z, F, pi, hi_mean, lo_mean, delta):
    """eps(delta) of one epoch's max-statistic pair with a partial batch: the record is in one of the
    F full batches (uniformly) with probability 1 - pi, else in none, by quadrature of the densities
    of max_t x_t and a root in eps (written from the definition, not from the code under test)."""
    def dens(x, m):
        cdf, pdf = stats.norm.cdf(x / z), stats.norm.pdf(x / z) / z
        cm, pm = stats.norm.cdf((x - m) / z), stats.norm.pdf((x - m) / z) / z
        inside = pm * cdf ** (F - 1) + (F - 1) * cm * cdf ** (F - 2) * pdf
        return (1 - pi) * inside + pi * F * cdf ** (F - 1) * pdf

    lo_x, hi_x = -12 * z, hi_mean + 14 * z
    grid = np.linspace(lo_x, hi_x, 4001)

    def delta_of(eps):
        g = dens(grid, hi_mean) - math.exp(eps) * dens(grid, lo_mean)
        cuts = [lo_x] + [float(grid[i]) for i in np.nonzero(np.diff(np.sign(g)))[0]] + [hi_x]
        f = lambda x: max(dens(x, hi_mean) - math.exp(eps) * dens(x, lo_mean), 0.0)  # noqa: E731
        return sum(integrate.quad(f, a, c, limit=400, epsabs=1e-14, epsrel=1e-11)[0]
                   for a, c in zip(cuts[:-1], cuts[1:]))

    return optimize.brentq(lambda e: delta_of(e) - delta, 0.0, 60.0, xtol=1e-10)


@pytest.mark.parametrize("n,b,z,relation", [
    (60000, 600, 0.8, "zero-out"),       # T = 100 full batches, no partial one
    (10007, 100, 1.0, "replace-one"),    # 100 full batches and a partial one of 7 records
    (5050, 100, 0.6, "zero-out"),        # 50 full batches and a partial one of 50
])
def test_lower_end_within_1e_2_of_the_quadrature_of_the_max_statistic(n, b, z, relation):
    F, r = divmod(n, b)
    hi_mean, lo_mean = (2.0, 1.0) if relation == "zero-out" else (2.0, 0.0)
    exact = _mixture_max_pair_epsilon(z, F, r / n, hi_mean, lo_mean, 1e-5)
    for drop_last in (False, True):
        lo = DPSGD(sampling="shuffle", n=n, batch_size=b, epochs=1, relation=relation,
                   drop_last=drop_last).epsilon_bracket(1e-5, z).lower
        assert lo <= exact * (1 + 1e-6)                        # a lower bound on the pair's eps
        assert lo == pytest.approx(exact, rel=1e-2)            # and close to it


def test_documented_setting_lower_end_exceeds_poissons_certified_eps():
    """docs/accounting.md: N = 60000, b = 600 (q = 0.01), one epoch (100 steps), noise multiplier 0.8."""
    m = DPSGD(sampling="shuffle", n=60000, batch_size=600, epochs=1)
    lo = m.epsilon_lower(1e-5, 0.8)
    poisson = DPSGD(0.01, 100).epsilon(1e-5, 0.8).epsilon         # certified upper end, best accountant
    assert poisson == m.poisson_epsilon(1e-5, 0.8)
    assert lo > 3.0 * poisson                                     # 5.62 > 3 x 1.51
    assert lo == pytest.approx(5.6235, abs=2e-3) and poisson == pytest.approx(1.5108, abs=2e-3)


def test_calibration_solves_on_the_certified_side():
    m = DPSGD(sampling="shuffle", n=50000, batch_size=500, epochs=3)
    rep = m.calibrate(2.0, 1e-5)
    z = rep.noise["noise_multiplier"]
    assert rep.certified_epsilon <= 2.0 and m.epsilon(1e-5, z).epsilon <= 2.0
    assert m.epsilon(1e-5, z * (1 - 1e-6)).epsilon > 2.0            # the smallest such noise
    assert rep.epsilon_lower <= rep.certified_epsilon
    with pytest.raises(ValueError, match="method='paper' is not allowed"):
        m.calibrate(2.0, 1e-5, method="paper")


@pytest.mark.parametrize("kw,fragment", [
    (dict(sampling="shuffle", n=100, batch_size=10, epochs=1, relation="add/remove"), "removing a record"),
    (dict(sampling="shuffle", n=100, batch_size=10, epochs=1, steps=10), "steps=10 is not allowed"),
    (dict(sampling="shuffle", n=100, batch_size=10, epochs=1, sampling_rate=0.1), "sampling_rate=0.1 is not allowed"),
    (dict(sampling="shuffle", n=100, batch_size=200, epochs=1), "batch_size=200"),
    (dict(sampling="shuffle", n=100, batch_size=10), "epochs is required"),
    (dict(sampling_rate=0.1, steps=10, n=100, batch_size=10, epochs=1), "sampling_rate=0.1 is not allowed with n, batch_size"),
    (dict(n=100, batch_size=10), "epochs is required with n, batch_size"),
    (dict(n=100, batch_size=10, epochs=1, relation="zero-out"), "relation='zero-out' is not allowed with sampling='poisson'"),
    (dict(n=100, batch_size=200, epochs=1), "batch_size=200"),
    (dict(n=10 ** 6, batch_size=1, epochs=10 ** 6), "exceeds the largest run"),
    (dict(sampling="random", sampling_rate=0.1, steps=10), "sampling='random'"),
])
def test_bad_shapes_are_refused_with_the_reason(kw, fragment):
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        DPSGD(**kw)


@pytest.mark.parametrize("n, b, epochs", [(50000, 256, 50), (60000, 600, 3), (101, 10, 7), (10, 10, 1), (7, 1, 2)])
def test_poisson_from_the_runs_shape_is_q_b_over_n_and_e_ceil_n_over_b_steps(n, b, epochs):
    m = DPSGD(n=n, batch_size=b, epochs=epochs)
    t = -(-n // b)
    assert (m.sampling_rate, m.steps) == (b / n, epochs * t)
    assert m.epsilon(1e-5, 1.1).epsilon == DPSGD(b / n, epochs * t).epsilon(1e-5, 1.1).epsilon
    assert f"q = b/N = {b}/{n}" in m.shape_note and f"{epochs} * {t} = {epochs * t} steps" in m.shape_note


def test_cli_poisson_from_the_runs_shape_states_q_and_t_and_calibrates_as_q_and_t():
    shape = ["--n", "50000", "--batch-size", "256", "--epochs", "5"]
    a = run("calibrate", "dp-sgd", "--epsilon", "4", "--delta", "1e-5", *shape)
    assert a.returncode == 0, a.stderr
    assert "q = b/N = 256/50000 = 0.00512, T = E * ceil(N/b) = 5 * 196 = 980 steps" in a.stdout
    b = json.loads(run("calibrate", "dp-sgd", "--epsilon", "4", "--delta", "1e-5", "--sampling-rate", "256/50000",
                       "--steps", "980", "--json").stdout)
    z = next(line for line in a.stdout.splitlines() if line.startswith("noise_multiplier")).split()[1]
    assert float(z) == pytest.approx(b["noise"]["noise_multiplier"], rel=1e-5)
    e = run("epsilon", "dp-sgd", "--delta", "1e-5", "--noise-multiplier", "1.0", *shape, "--json")
    assert "980 steps" in json.loads(e.stdout)["run_shape"]


def run(*args):
    return subprocess.run([sys.executable, "-m", "dpcalib", *args], capture_output=True, text=True)


SHAPE = ["--sampling", "shuffle", "--n", "60000", "--batch-size", "600", "--epochs", "1"]


def test_cli_epsilon_calibrate_report_print_the_same_bracket():
    e = json.loads(run("epsilon", "dp-sgd", "--delta", "1e-5", *SHAPE, "--noise-multiplier", "0.8", "--json").stdout)
    r = json.loads(run("report", "dp-sgd", "--delta", "1e-5", *SHAPE, "--noise-multiplier", "0.8", "--json").stdout)
    m = DPSGD(sampling="shuffle", n=60000, batch_size=600, epochs=1)
    br = m.epsilon_bracket(1e-5, 0.8)
    for out in (e, r):
        assert out["epsilon"] == br.upper and out["epsilon_lower"] == br.lower
        assert out["poisson_epsilon"] == m.poisson_epsilon(1e-5, 0.8)
    c = json.loads(run("calibrate", "dp-sgd", "--epsilon", str(br.upper), "--delta", "1e-5", *SHAPE, "--json").stdout)
    assert c["noise"]["noise_multiplier"] == pytest.approx(0.8, rel=1e-6)


@pytest.mark.parametrize("extra,fragment", [
    (["--steps", "10"], "--steps=10 is not allowed"),
    (["--sampling-rate", "0.01"], "--sampling-rate=0.01 is not allowed"),
    (["--relation", "add/remove"], "relation='add/remove'"),
])
def test_cli_shuffle_refuses_poisson_options(extra, fragment):
    r = run("epsilon", "dp-sgd", "--delta", "1e-5", *SHAPE, *extra, "--noise-multiplier", "1")
    assert r.returncode == 2 and fragment in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def _shuffled_run(seed=1, n=100, b=30, E=2):
    torch = pytest.importorskip("torch")
    from dpcalib.optim import DPSGD as Opt

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 5, generator=g, dtype=torch.float64), torch.randint(0, 2, (n,), generator=g)
    model = torch.nn.Linear(5, 2).double()
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    mech = DPSGD(sampling="shuffle", n=n, batch_size=b, epochs=E)
    return Opt(model, torch.nn.functional.cross_entropy, (x, y), mech, {"noise_multiplier": 2.0}, C=1.0, lr=0.1,
               seed=seed)


def test_optimizer_draws_each_record_once_per_epoch_and_spends_the_shuffle_eps():
    opt = _shuffled_run()
    seen = []
    plain = opt.per_example.clipped_sum

    def spy(model, loss_fn, cur, x, y, c, ids, stabilizer=None):
        seen.append(ids[1].clone())
        return plain(model, loss_fn, cur, x, y, c, ids=ids, stabilizer=stabilizer)

    opt.per_example.clipped_sum = spy
    eps = []
    for _ in range(8):
        opt.step()
        eps.append(opt.epsilon_spent(1e-5))
    assert [len(s) for s in seen] == [30, 30, 30, 10] * 2
    for epoch in (seen[:4], seen[4:]):
        assert sorted(int(i) for s in epoch for i in s) == list(range(100))
    one, two = (shuffle_upper_epsilon(2.0, k, 1e-5) for k in (1, 2))
    assert eps == pytest.approx([one] * 4 + [two] * 4, rel=1e-12)
    with pytest.raises(RuntimeError, match="complete"):
        opt.step()


def test_optimizer_resumes_mid_epoch_with_the_same_permutation():
    torch = pytest.importorskip("torch")
    full = _shuffled_run()
    for _ in range(6):
        full.step()
    part = _shuffled_run()
    for _ in range(2):
        part.step()
    state = part.state_dict()
    resumed = _shuffled_run(seed=99)
    resumed.load_state_dict(state)
    for _ in range(4):
        resumed.step()
    a, b = full.params(), resumed.params()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.epsilon_spent(1e-5) == full.epsilon_spent(1e-5)
    # and the permutation matters: a resume that forgot it draws another batch order
    forgot = _shuffled_run(seed=99)
    state["optimizer"] = dict(state.get("optimizer", {}))
    forgot.load_state_dict(state)
    forgot.perm = None
    for _ in range(4):
        forgot.step()
    c = forgot.params()
    assert not all(torch.equal(a[k], c[k]) for k in a)
