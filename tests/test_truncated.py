"""The truncated Poisson-sampled Gaussian (accountant/truncated.py): its replace-one pair's inverse against
mpmath, one step's bracket against the closed form of its pair's delta (mpmath), compositions against
dp-accounting's PLD, and every route a kind gets (JSON, the CLI, to_dp_event, refusals)."""

from __future__ import annotations

import json
import math

import mpmath as mp
import numpy as np
import pytest

from dpcalib.accountant import PrivacyAccountant, from_dp_event
from dpcalib.accountant.events import PoissonSampledGaussianEvent
from dpcalib.accountant.truncated import ReplacePair, TruncatedPoissonGaussianEvent
from dpcalib.accountant.validation import InputError


def _true_loss(x, z, q, dps):
    with mp.workdps(dps):
        x, z, q = mp.mpf(x), mp.mpf(z), mp.mpf(q)
        a = (1 - q) + q * mp.e ** ((x - mp.mpf(1) / 2) / z ** 2)
        b = (1 - q) + q * mp.e ** ((-x - mp.mpf(1) / 2) / z ** 2)
        return mp.log(a) - mp.log(b)


@pytest.mark.parametrize("z", [0.01, 0.3, 1.0, 100.0])
@pytest.mark.parametrize("q", [1e-9, 0.01, 0.9, 1.0])
def test_the_replace_pairs_edges_round_no_loss_down(z, q):
    # every edge's x is at or below the true x(e): the true loss there (mpmath, enough digits for |e|) is <= e,
    # and within 1e-9 of e where |e| > 1e-6 (the margin is a few ulps); the edges are non-decreasing
    pr = ReplacePair(z, q)
    e = np.concatenate([-np.logspace(-300, 3, 9)[::-1], [0.0], np.logspace(-300, 3, 9)])
    x = pr._x_edges(e)
    assert np.all(np.diff(x) >= 0.0)
    for ei, xi in zip(e, x):
        dps = 80 + (int(-math.log10(abs(ei))) if 0 < abs(ei) < 1 else 0)
        lt = _true_loss(xi, z, q, dps)
        assert lt <= ei
        if abs(ei) > 1e-6:
            assert float((ei - lt) / abs(ei)) < 1e-9


def _tail(x, m, s):
    return mp.ncdf(-(x - m) / s)


def _delta_part(kind, z, q, eps):
    """delta(eps) of one part (mpmath): P(L > eps) - e^eps Q(L > eps), the loss monotone in x."""
    z, q, eps = mp.mpf(z), mp.mpf(q), mp.mpf(eps)
    if kind == "remove":
        P, Q, up = [(1 - q, 0), (q, 1)], [(1, 0)], True
    elif kind == "add":
        P, Q, up = [(1, 0)], [(1 - q, 0), (q, 1)], False
    else:
        P, Q, up = [(1 - q, 0), (q, 1)], [(1 - q, 0), (q, -1)], True

    def dens(comps, x):
        return mp.fsum(w * mp.e ** (-(x - m) ** 2 / (2 * z ** 2)) for w, m in comps)

    def loss(x):
        return mp.log(dens(P, x)) - mp.log(dens(Q, x))

    lo, hi = mp.mpf(-60) * (z + 1), mp.mpf(60) * (z + 1)
    if (loss(lo) > eps) if up else (loss(hi) > eps):
        return 1 - mp.e ** eps                        # every loss is above eps
    if (loss(hi) <= eps) if up else (loss(lo) <= eps):
        return mp.mpf(0)                              # none is
    for _ in range(200):                              # bisect L(x) = eps
        mid = (lo + hi) / 2
        if (loss(mid) > eps) == up:
            hi = mid
        else:
            lo = mid
    x = (lo + hi) / 2
    if up:                                            # {L > eps} = {x > x*}
        return mp.fsum(w * _tail(x, m, z) for w, m in P) - mp.e ** eps * mp.fsum(w * _tail(x, m, z) for w, m in Q)
    return (mp.fsum(w * (1 - _tail(x, m, z)) for w, m in P)
            - mp.e ** eps * mp.fsum(w * (1 - _tail(x, m, z)) for w, m in Q))


def _weights(n, q, B):
    """(t, q') by exact binomial sums (mpmath, 40 digits), independent of scipy."""
    with mp.workdps(40):
        q = mp.mpf(q)

        def sf(k, m):                                 # P(Binom(m, q) > k)
            return mp.fsum(mp.binomial(m, j) * q ** j * (1 - q) ** (m - j) for j in range(k + 1, m + 1))
        t = sf(B - 1, n - 1)
        return t, (sf(B, n) * B / t / n if t > 0 else mp.mpf(0))


def _delta_step(n, q, B, sigma, eps):
    t, q2 = _weights(n, q, B)
    with mp.workdps(40):
        second = _delta_part("replace", sigma / 2, q2, eps) if t > 0 else 0
        return max((1 - t) * _delta_part(d, sigma, q, eps) + t * second for d in ("remove", "add"))


@pytest.mark.parametrize("n,q,B,sigma,delta", [
    (1000, 0.1, 120, 1.0, 1e-5), (1000, 0.1, 100, 0.8, 1e-3), (200, 0.3, 50, 2.0, 1e-6),
    (500, 0.02, 8, 1.2, 1e-4), (1000, 0.1, 2000, 1.0, 1e-5), (64, 0.5, 1, 3.0, 1e-4)])
def test_one_steps_bracket_holds_the_closed_form_of_its_pair(n, q, B, sigma, delta):
    # the closed form: delta(eps) of the disjoint union, (1 - t) delta_Poisson + t delta_replace, in both directions,
    # from Gaussian tails at the root of L(x) = eps (mpmath), the weights from exact binomial sums
    br = PrivacyAccountant().compose(TruncatedPoissonGaussianEvent(n, q, B, sigma)).epsilon_bracket(delta, rtol=1e-6)
    assert 0.0 < br.lower <= br.upper
    assert _delta_step(n, q, B, sigma, br.upper) <= delta * (1 + 1e-9)
    assert _delta_step(n, q, B, sigma, br.lower) >= delta * (1 - 1e-9)


def test_no_truncation_is_the_poisson_sampled_gaussian():
    # B >= n: t = 0, the pair is the Poisson pair itself (the Poisson event's route may take other grids:
    # the two brackets agree to their width)
    ev = TruncatedPoissonGaussianEvent(1000, 0.05, 1000, 1.1)
    assert ev.weights == (0.0, 0.0)
    a = PrivacyAccountant().compose(ev, 40).epsilon_bracket(1e-5)
    b = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.05, 1.1), 40).epsilon_bracket(1e-5)
    assert a.lower <= b.upper and b.lower <= a.upper
    assert abs(a.upper - b.upper) <= 3e-5 * b.upper


# dp-accounting 0.6's PLD (value discretization 1e-4, pessimistic), measured once (its PLD of these takes
# 1-6 s each): eps at delta = 1e-5 of the tree SelfComposed(TruncatedSubsampledGaussian(n, q, B, sigma), k)
DPA = [
    ((1000, 0.1, 120, 1.0, 1), 4.319618177357094),
    ((1000, 0.1, 120, 1.0, 100), 10.58767852279361),
    ((1000, 0.1, 105, 0.8, 50), 25.02264774507025),
    ((10000, 0.01, 100, 1.1, 1000), 8.07023910428127),
    ((1000, 0.1, 2000, 1.0, 10), 2.8545189665865034),
    ((500, 0.5, 200, 2.0, 20), 19.317402010482102),
]


@pytest.mark.parametrize("args,theirs", DPA)
def test_compositions_are_within_dp_accountings_pld(args, theirs):
    dpa = pytest.importorskip("dp_accounting")
    *shape, k = args
    tree = dpa.SelfComposedDpEvent(dpa.TruncatedSubsampledGaussianDpEvent(*shape), k)
    br = PrivacyAccountant.from_dp_event(tree).epsilon_bracket(1e-5, rtol=1e-4, atol=0.0)
    assert br.upper <= theirs * (1 + 1e-4)
    assert br.lower <= theirs <= br.upper * (1 + 1e-4)


def test_a_tree_with_other_events_and_dp_accountings_own_answer():
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import pld_privacy_accountant

    tree = dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(dpa.TruncatedSubsampledGaussianDpEvent(5000, 0.02, 110, 1.5), 30),
                                dpa.GaussianDpEvent(4.0),
                                dpa.PoissonSampledDpEvent(0.05, dpa.GaussianDpEvent(2.0))])
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(tree)
    theirs = acc.get_epsilon(1e-6)
    br = PrivacyAccountant.from_dp_event(tree).epsilon_bracket(1e-6, rtol=1e-4, atol=0.0)
    assert br.upper <= theirs * (1 + 1e-4) and br.lower <= theirs


def test_dp_accountings_degenerate_steps_read_as_its_pld_reads_them():
    dpa = pytest.importorskip("dp_accounting")
    assert from_dp_event(dpa.TruncatedSubsampledGaussianDpEvent(1000, 0.0, 10, 1.0)) == []
    assert from_dp_event(dpa.TruncatedSubsampledGaussianDpEvent(1000, 0.1, 0, 1.0)) == []
    assert from_dp_event(dpa.TruncatedSubsampledGaussianDpEvent(0, 0.1, 10, 1.0)) == []
    acc = PrivacyAccountant.from_dp_event(dpa.TruncatedSubsampledGaussianDpEvent(1000, 0.1, 10, 0.0))
    assert acc.get_epsilon(1e-5) == math.inf


def test_to_dp_event_inverts_and_the_routes_say_what_they_refuse():
    pytest.importorskip("dp_accounting")
    ev = TruncatedPoissonGaussianEvent(1000, 0.1, 120, 1.0)
    assert from_dp_event(ev.to_dp_event()) == [(ev, 1)]
    acc = PrivacyAccountant().compose(ev, 3)
    assert acc.supports("pld") and not acc.supports("rdp")
    assert "TruncatedPoissonGaussianEvent" in acc.refusal("rdp")
    assert acc.get_epsilon(1e-5) == acc.epsilon_bracket(1e-5).upper
    with pytest.raises(InputError, match="accountant='rdp'"):
        acc.epsilon_bracket(1e-5, methods=("rdp",))


@pytest.mark.parametrize("field,value", [("dataset_size", 0), ("sampling_probability", 1.5),
                                         ("truncated_batch_size", 0), ("noise_multiplier", 0.0),
                                         ("noise_multiplier", float("nan"))])
def test_bad_fields_are_one_clear_error(field, value):
    kw = dict(dataset_size=1000, sampling_probability=0.1, truncated_batch_size=120, noise_multiplier=1.0)
    kw[field] = value
    with pytest.raises(InputError, match=field):
        TruncatedPoissonGaussianEvent(**kw)


def test_extremes_give_a_finite_ordered_bracket():
    # 10^4 steps at a rate of 1e-4 of a million records, little noise, every record drawn (q = 1: the batch is
    # 10 random records of 50, the record in it with chance 1/5): finite, ordered, positive, converged
    for n, q, B, sigma, k in [(10 ** 6, 1e-4, 100, 1.0, 10 ** 4), (10 ** 5, 0.001, 90, 0.6, 1000), (50, 1.0, 10, 5.0, 3)]:
        br = PrivacyAccountant().compose(TruncatedPoissonGaussianEvent(n, q, B, sigma), k).epsilon_bracket(1e-6)
        assert 0.0 < br.lower <= br.upper < math.inf
        assert br.upper - br.lower <= 1e-4 * br.upper


def test_the_cli_reads_the_kind_from_an_events_file(tmp_path, capsys):
    from dpcalib.cli import main

    path = tmp_path / "events.json"
    path.write_text(json.dumps({"kind": "self_composed", "count": 100, "event": {
        "kind": "truncated_subsampled_gaussian", "dataset_size": 1000, "sampling_probability": 0.1,
        "truncated_batch_size": 120, "noise_multiplier": 1.0}}))
    assert main(["account", "--events", str(path), "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out
    want = PrivacyAccountant().compose(TruncatedPoissonGaussianEvent(1000, 0.1, 120, 1.0), 100).get_epsilon(1e-5)
    assert f"{want:.6g}" in out


def test_the_flag_and_a_calibration_of_the_noise(capsys):
    from dpcalib.accountant import SelfComposedEvent, calibrate_parameter
    from dpcalib.cli import main

    assert main(["account", "--truncated-subsampled-gaussian", "1000:0.1:120:1.0:100", "--delta", "1e-5"]) == 0
    want = PrivacyAccountant().compose(TruncatedPoissonGaussianEvent(1000, 0.1, 120, 1.0), 100).get_epsilon(1e-5)
    assert f"{want:.6g}" in capsys.readouterr().out
    cal = calibrate_parameter(lambda z: SelfComposedEvent(TruncatedPoissonGaussianEvent(1000, 0.1, 120, z), 100),
                              8.0, 1e-5, 0.5, 20.0)
    z = cal.parameter
    eps = PrivacyAccountant().compose(TruncatedPoissonGaussianEvent(1000, 0.1, 120, z), 100).get_epsilon(1e-5)
    assert eps <= 8.0
    assert PrivacyAccountant().compose(TruncatedPoissonGaussianEvent(1000, 0.1, 120, z * (1 - 1e-3)), 100) \
        .get_epsilon(1e-5) > 8.0 * (1 - 1e-3)


def test_cross_check_gives_no_rdp_answer_where_rdp_refuses():
    pytest.importorskip("dp_accounting")
    cc = PrivacyAccountant().compose(TruncatedPoissonGaussianEvent(1000, 0.1, 120, 1.0), 10).cross_check(1e-5)
    assert cc["ours_rdp"] is None and cc["dp_accounting_rdp"] is None
    assert any("no RDP answer of ours" in n for n in cc["notes"])
    assert cc["ours_pld_lower"] <= cc["dp_accounting_pld"] <= cc["ours_pld_upper"] * (1 + 1e-4)



@pytest.mark.parametrize("n,q,B,sigma", [(1000, 0.1, 120, 1.0), (200, 0.3, 50, 2.0), (64, 0.5, 1, 3.0)])
def test_one_step_against_dp_accountings_analytic_parts(n, q, B, sigma):
    # dp-accounting's own analytic delta of each part (its GaussianPrivacyLoss, REMOVE / ADD at sigma and
    # rate q, REPLACE at sigma / 2 and rate q'), mixed with the weights: an oracle of the pair's definition
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss

    ev = TruncatedPoissonGaussianEvent(n, q, B, sigma)
    t, q2 = ev.weights

    def delta(eps):
        rep = GaussianPrivacyLoss(sigma / 2, sampling_prob=q2, adjacency_type=AdjacencyType.REPLACE)
        return max((1 - t) * GaussianPrivacyLoss(sigma, sampling_prob=q, adjacency_type=adj).get_delta_for_epsilon(eps)
                   + t * rep.get_delta_for_epsilon(eps) for adj in (AdjacencyType.REMOVE, AdjacencyType.ADD))
    br = PrivacyAccountant().compose(ev).epsilon_bracket(1e-5, rtol=1e-6)
    assert delta(br.upper) <= 1e-5 * (1 + 1e-6)
    assert delta(br.lower) >= 1e-5 * (1 - 1e-6)


def test_total_variation_bounds_delta_at_zero_and_answers_eps_zero():
    # the total variation is delta(0) of the step's pair (the closed form, mpmath); where it is at most delta
    # the answer is eps = 0 exactly
    for n, q, B, sigma in [(1000, 0.1, 120, 1.0), (64, 0.5, 1, 3.0), (500, 0.02, 8, 1.2)]:
        tv = TruncatedPoissonGaussianEvent(n, q, B, sigma).total_variation()
        assert tv >= float(_delta_step(n, q, B, sigma, 0.0)) * (1 - 1e-12)
    ev = TruncatedPoissonGaussianEvent(1000, 1e-9, 5, 1.0)
    br = PrivacyAccountant().compose(ev, 10).epsilon_bracket(1e-5)
    assert (br.lower, br.upper, br.method) == (0.0, 0.0, "tv")


@pytest.mark.parametrize("sigma", [1e-300, 1e-120, 1e120, 3e154, 1e300])
def test_extreme_noise_is_never_below_the_gaussian_beside_it(sigma):
    # z^2 leaves the double range near 1e154 and 1e-162: the (0, TV) pair takes over, so a Gaussian composed
    # beside the step is never reported below its own exact eps (NaN masses once read as eps = 0)
    from dpcalib.accountant import GaussianEvent, gdp_epsilon

    acc = PrivacyAccountant().compose(TruncatedPoissonGaussianEvent(1000, 0.1, 50, sigma), 10).compose(GaussianEvent(1.0))
    br = acc.epsilon_bracket(1e-5)
    assert br.upper >= gdp_epsilon(1.0, 1e-5) * (1 - 1e-9) and br.lower <= br.upper
    if sigma > 1.0:
        assert br.upper <= gdp_epsilon(1.0, 1e-5) * (1 + 1e-4)
