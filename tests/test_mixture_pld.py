"""The mixture of Gaussians' PLD pair (:class:`~dpcalib.accountant.pld.mixture.MixturePair`): its bracket
against dpcalib's Poisson-sampled Gaussian (the mixture ``((0, 1), (1 - q, q))`` is that event), against
dp-accounting's PLD accountant (value_discretization_interval 1e-4, pessimistic; its mixture accounting
takes minutes a tree, so the references are recorded below and one cheap tree is checked live), and
against delta(eps) of one release integrated numerically (the hockey-stick divergence, both directions).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from dpcalib.accountant import (
    GaussianEvent,
    MixtureOfGaussiansEvent,
    PoissonSampledGaussianEvent,
    PrivacyAccountant,
)
from dpcalib.accountant.pld import pld_delta
from dpcalib.accountant.pld.mixture import MixturePair
from dpcalib.accountant.pld.pairs import dominating_pairs
from dpcalib.accountant.validation import InputError

#: the acceptance of benchmarks/event_trees.py: upper <= dp-accounting's pessimistic eps * (1 + 1e-4)
SLACK = 1e-4


@pytest.mark.parametrize("q, z, count, delta", [
    (1e-4, 0.5, 1000, 1e-8), (0.01, 1.0, 100, 1e-5), (0.5, 2.0, 10, 1e-6), (1.0, 2.0, 1, 1e-5),
    (1e-3, 20.0, 1000, 1e-5), (0.2, 0.5, 1, 1e-3), (1.0, 0.5, 3, 1e-6)])
def test_the_poisson_mixture_is_the_poisson_sampled_gaussian(q, z, count, delta):
    mix = PrivacyAccountant().compose(MixtureOfGaussiansEvent(z, (0.0, 1.0), (1.0 - q, q)), count)
    poi = PrivacyAccountant().compose(PoissonSampledGaussianEvent(q, z), count)
    a, b = mix.epsilon_bracket(delta), poi.epsilon_bracket(delta)
    assert a.method == "pld"
    tiny = 1e-12 * b.upper
    assert max(a.lower, b.lower) <= min(a.upper, b.upper) + tiny            # the brackets meet
    assert abs(a.upper - b.upper) <= max(a.width, b.width) + tiny


#: (sigma, sensitivities, probs, self-compositions, a Gaussian composed after (noise multiplier) or
#: None, delta) -> dp-accounting 0.6's PLDAccountant(ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
#: eps of the tree, recorded to 6 decimals (each took 40 to 200 s)
RECORDED = {
    "3 components, with a Gaussian": (
        (2.0, (0.0, 2.372, 2.376), (0.1606019123236171, 0.05056220852076873, 0.7888358791556142), 1, 3.0, 1e-05),
        5.368699),
    "3 nonzero components": (
        (2.0, (0.069, 1.345, 1.884), (0.10895783912696766, 0.7924722769853914, 0.09856988388764099), 1, None, 1e-05),
        2.873939),
    "4 components, small noise": (
        (0.7, (0.0, 0.656, 1.008, 1.876),
         (0.16189643599393932, 0.13055904566197243, 0.41253899126531424, 0.29500552707877403), 1, None, 1e-07),
        15.122293),
    "2 components x 5, with a Gaussian": (
        (2.0, (0.402, 0.692), (0.9727514642869698, 0.02724853571303021), 5, 3.0, 1e-07), 2.859163),
    "3 components x 5": (
        (5.0, (0.0, 1.533, 2.293), (0.5191163258730964, 0.4582044897015989, 0.0226791844253047), 5, None, 1e-07),
        1.943433),
    "3 components, large noise": ((10.0, (0.0, 1.0, 2.0), (0.6, 0.3, 0.1), 1, None, 1e-05), 0.18723815345434527),
}


def _tree(dpa, sigma, c, p, k, g):
    m = dpa.SelfComposedDpEvent(dpa.MixtureOfGaussiansDpEvent(sigma, list(c), list(p)), k)
    return m if g is None else dpa.ComposedDpEvent([m, dpa.GaussianDpEvent(g)])


def _check_against(tree, delta, theirs):
    b = PrivacyAccountant.from_dp_event(tree).epsilon_bracket(delta, rtol=1e-4, atol=0.0)
    assert b.method == "pld", b
    assert b.upper <= theirs * (1.0 + SLACK), (b, theirs)
    assert b.lower <= theirs, (b, theirs)
    return b


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_the_upper_end_is_within_dp_accountings_pld_recorded(case):
    dpa = pytest.importorskip("dp_accounting.dp_event")
    (sigma, c, p, k, g, delta), theirs = RECORDED[case]
    _check_against(_tree(dpa, sigma, c, p, k, g), delta, theirs)


def test_the_upper_end_is_within_dp_accountings_pld_live():
    # (on dp-accounting's grid 3e-3, a few seconds: its pessimistic eps there is above its eps on 1e-4)
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import dp_event as dpa
    from dp_accounting.pld import pld_privacy_accountant

    tree = _tree(dpa, 4.0, (0.0, 1.0, 2.0), (0.6, 0.3, 0.1), 2, None)
    acc = pld_privacy_accountant.PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                               value_discretization_interval=3e-3)
    acc.compose(tree)
    _check_against(tree, 1e-5, acc.get_epsilon(1e-5))


def _hockey_stick(c, p, sigma, eps, remove):
    """H_{e^eps} of (mixture, N(0, sigma^2)) (remove) or (N(0, sigma^2), mixture) (add), by quadrature."""
    comps = [(float(w), float(m)) for w, m in zip(p, c)]
    k = 1.0 / (sigma * math.sqrt(2.0 * math.pi))
    t = math.exp(eps)

    def f(x):
        mix = k * math.fsum(w * math.exp(-0.5 * ((x - m) / sigma) ** 2) for w, m in comps)
        one = k * math.exp(-0.5 * (x / sigma) ** 2)
        a, b = (mix, one) if remove else (one, mix)
        return max(a - t * b, 0.0)

    pts = sorted({m for _, m in comps} | {0.0})
    lo, hi = min(pts) - 40 * sigma, max(pts) + 40 * sigma
    return integrate.quad(f, lo, hi, points=pts, limit=800, epsabs=1e-14, epsrel=1e-11)[0]


@pytest.mark.parametrize("sigma, c, p, eps", [
    (1.0, (0.0, 1.0, 2.0), (0.5, 0.3, 0.2), 0.5), (1.0, (0.0, 1.0, 2.0), (0.5, 0.3, 0.2), 2.0),
    (0.8, (0.3, 1.2), (0.6, 0.4), 1.0), (2.0, (0.0, 0.5, 1.0, 1.5), (0.4, 0.3, 0.2, 0.1), 0.1),
    (0.6, (0.0, 0.9, 1.0), (0.9, 0.05, 0.05), 0.0), (1.0, (-1.0, -2.5), (0.5, 0.5), 1.5)])
def test_the_delta_bracket_holds_the_integrated_hockey_stick(sigma, c, p, eps):
    truth = max(_hockey_stick(c, p, sigma, eps, True), _hockey_stick(c, p, sigma, eps, False))
    lo, up = pld_delta([MixtureOfGaussiansEvent(sigma, c, p)], eps, discretization=1e-4)
    assert lo * (1 - 1e-9) - 1e-13 <= truth <= up * (1 + 1e-9) + 1e-13, (lo, truth, up)
    assert up - lo <= 1e-3 * up + 1e-12


@pytest.mark.parametrize("direction", ["remove", "add"])
@pytest.mark.parametrize("sigma, c, p", [(1.0, (0.0, 1.0, 2.0), (0.5, 0.3, 0.2)),
                                         (5.0, (0.05, 0.12, 0.81, 1.9), (0.15, 0.45, 0.19, 0.21)),
                                         (0.5, (0.0, 0.01, 1.0, 3.0), (0.4, 0.3, 0.2, 0.1))])
def test_the_inverse_never_rounds_a_loss_down(direction, sigma, c, p):
    # remove: {L <= e} is x <= x(e), so x(e) must be at or below the truth (L(x(e)) <= e); add: the
    # loss decreases and the edges of e run backwards: L at the i-th x is at most the i-th edge from the top
    pr = MixturePair.of(sigma, c, p, direction)
    lo, hi = pr.loss_range(1e-15)
    e = np.linspace(lo, hi, 20001)
    x = pr._x_edges(e)
    assert np.all(np.diff(x) >= 0.0)
    fin = np.isfinite(x)
    want = e if direction == "remove" else e[::-1]
    L = pr.loss(x[fin])
    assert np.all(L <= want[fin])
    assert np.max(want[fin] - L) <= 1e-9 * (1.0 + np.max(np.abs(want)))    # and close


def test_sensitivities_of_one_sign_mirror_and_mixed_signs_are_refused_in_one_line():
    pos = PrivacyAccountant().compose(MixtureOfGaussiansEvent(1.0, (0.0, 1.0, 2.0), (0.5, 0.3, 0.2)), 3)
    neg = PrivacyAccountant().compose(MixtureOfGaussiansEvent(1.0, (0.0, -1.0, -2.0), (0.5, 0.3, 0.2)), 3)
    assert neg.epsilon_bracket(1e-6).upper == pos.epsilon_bracket(1e-6).upper
    mixed = MixtureOfGaussiansEvent(1.0, (-1.0, 1.0), (0.5, 0.5))
    acc = PrivacyAccountant().compose(mixed)
    why = acc.refusal("pld")
    assert why is not None and "mixed signs" in why and "\n" not in why
    assert acc.epsilon_bracket(1e-6).method == "rdp"
    with pytest.raises(InputError, match="mixed signs"):
        dominating_pairs(mixed, "remove")


def test_a_mixture_of_zero_sensitivities_is_no_release_and_the_total_variation_is_sound():
    zero = MixtureOfGaussiansEvent(1.0, (0.0,), (1.0,))
    assert dominating_pairs(zero, "remove") == () and zero.total_variation() == 0.0
    with_zero = PrivacyAccountant().compose(zero, 5).compose(GaussianEvent(2.0)).epsilon_bracket(1e-5)
    alone = PrivacyAccountant().compose(GaussianEvent(2.0)).epsilon_bracket(1e-5)        # (exact: GDP)
    assert with_zero.lower <= alone.upper <= with_zero.upper <= alone.upper * (1 + 1e-4)
    ev = MixtureOfGaussiansEvent(1.0, (0.0, 1.0, 2.0), (0.5, 0.3, 0.2))
    tv = max(_hockey_stick(ev.sensitivities, ev.sampling_probs, 1.0, 0.0, r) for r in (True, False))
    assert tv <= ev.total_variation() <= 1.0
    assert ev.use_probability == pytest.approx(0.5)
