"""Issue 74, build 2 and acceptance 5: a kind is one module.  This module adds a toy mechanism kind --
a coin that tells the truth with probability ``e^eps / (1 + e^eps)``, given as its exact loss
distribution -- and gets every accountant route (PLD bracket, RDP, best, GDP's one-line refusal),
Poisson sampling around it, calibration and ``dpcalib account --events`` without touching the package.
Also: each route's ``supports`` and one-line refusals for the new kinds, JSON and dp-accounting round
trips, and the non-private release.
"""

import json
import math
from dataclasses import dataclass

import pytest

from dpcalib.accountant import (ComposedEvent, EventKind, GaussianEvent, LaplaceEvent, MixtureOfGaussiansEvent,
                                NonPrivateEvent, PoissonSampledEvent, PrivacyAccountant, RandomizedResponseEvent,
                                RepeatAndSelectEvent, SelfComposedEvent, ZCDPEvent, calibrate_parameter,
                                event_from_json, event_to_json, register_kind)
from dpcalib.accountant.validation import InputError
from tests.event_oracles import pure_delta


@register_kind
@dataclass(frozen=True)
class ToyCoinEvent(EventKind):
    """A coin: the true bit with probability ``e^eps / (1 + e^eps)`` (its pair is randomized response's).

    Attributes:
        eps: the coin's level, > 0.
    """

    eps: float
    JSON_NAME = "toy_coin"

    def _pair(self):
        from dpcalib.accountant.pld.lossdist import rr_pair

        return rr_pair(self.eps)

    def pld_pairs(self, direction):
        return (self._pair(),)

    def _rdp(self, orders):
        return self._pair().renyi(orders)


def test_a_kind_from_a_test_module_gets_every_route():
    acc = PrivacyAccountant().compose(ToyCoinEvent(0.5), 40)
    d = 1e-6
    br = acc.epsilon_bracket(d)
    truth = lambda e: pure_delta(40, 0.5, e)       # noqa: E731 (the coin is the pure-DP pair)
    assert truth(br.upper) <= d * (1 + 1e-9) and truth(br.lower) >= d * (1 - 1e-6)
    assert br.method == "pld" and br.upper - br.lower <= 3e-5 * br.upper
    rdp = acc.epsilon_report(d, accountant="rdp")
    assert rdp.method == "rdp" and rdp.epsilon >= br.lower
    assert acc.supports("pld") and acc.supports("rdp") and not acc.supports("gdp")
    with pytest.raises(InputError, match="ToyCoinEvent.*full-batch Gaussian"):
        acc.epsilon_report(d, accountant="gdp")
    # composed with a Gaussian, and Poisson-sampled (its pair under sampling; RDP exact for a finite pair)
    mixed = PrivacyAccountant().compose(ComposedEvent((ToyCoinEvent(0.5), GaussianEvent(4.0))), 20)
    assert mixed.epsilon_bracket(d).upper <= mixed.epsilon_report(d, "rdp").epsilon
    sampled = PrivacyAccountant().compose(PoissonSampledEvent(0.1, ToyCoinEvent(1.0)), 100)
    sb = sampled.epsilon_bracket(d, rtol=1e-3)      # (off-grid atoms narrow only linearly in the grid)
    assert 0 < sb.lower <= sb.upper <= PrivacyAccountant().compose(ToyCoinEvent(1.0), 100).epsilon_bracket(d).lower
    assert sampled.neighboring_relation == "add/remove"


def test_a_new_kind_calibrates_and_reads_from_the_cli(tmp_path, capsys):
    cal = calibrate_parameter(lambda e: SelfComposedEvent(ToyCoinEvent(1.0 / e), 50), 2.0, 1e-6, 0.1, 1000.0)
    got = PrivacyAccountant().compose(SelfComposedEvent(ToyCoinEvent(1.0 / cal.parameter), 50)).get_epsilon(1e-6)
    assert got <= 2.0 and cal.epsilon == pytest.approx(got, rel=1e-12)
    just_under = PrivacyAccountant().compose(SelfComposedEvent(ToyCoinEvent(1.0 / (cal.parameter * 0.999)), 50))
    assert just_under.get_epsilon(1e-6) > 2.0 * (1 - 1e-3)          # the smallest noise, to the tolerance
    tree = {"kind": "self_composed", "count": 40, "event": {"kind": "toy_coin", "eps": 0.5}}
    assert event_to_json(event_from_json(tree)) == tree
    f = tmp_path / "tree.json"
    f.write_text(json.dumps([tree, {"kind": "gaussian", "noise_multiplier": 8.0}]))
    from tests.cli_runner import alarms, call

    with alarms():
        assert call(["account", "--events", str(f), "--delta", "1e-6", "--json"], 60) == 0
    out = json.loads(capsys.readouterr().out)
    want = PrivacyAccountant().compose(ToyCoinEvent(0.5), 40).compose(GaussianEvent(8.0)).epsilon_bracket(1e-6)
    assert out["epsilon"] == pytest.approx(want.upper, rel=1e-9) and out["method"] == "pld"


def test_each_route_refuses_an_unsupported_node_in_one_line():
    cases = [(ZCDPEvent(0.1), "pld", "ZCDPEvent"),
             (MixtureOfGaussiansEvent(1.0, (1.0, -1.0), (0.5, 0.5)), "pld", "mixed signs"),
             (RepeatAndSelectEvent(GaussianEvent(2.0), 5.0, 1.0), "pld", "repeat-and-select"),
             (PoissonSampledEvent(0.1, LaplaceEvent(1.0)), "rdp", "LaplaceEvent"),
             (LaplaceEvent(1.0), "gdp", "LaplaceEvent")]
    for ev, route, name in cases:
        acc = PrivacyAccountant().compose(ev)
        why = acc.refusal(route)
        assert why is not None and name in why and "\n" not in why, (ev, route, why)
        assert not acc.supports(route)
        with pytest.raises(InputError, match=name):
            acc.epsilon_report(1e-5, accountant=route)
        assert math.isfinite(acc.epsilon_report(1e-5).epsilon)          # "best" takes the route that supports it
    with pytest.raises(InputError, match="replace-one.*add/remove|add/remove.*replace-one"):
        PrivacyAccountant().compose(ComposedEvent((RandomizedResponseEvent(0.5), PoissonSampledEvent(0.1, GaussianEvent(1.0)))))
    assert PrivacyAccountant().compose(NonPrivateEvent()).compose(GaussianEvent(1.0)).get_epsilon(1e-5) == math.inf


def test_dp_accounting_round_trip_of_every_kind_it_has():
    dpa = pytest.importorskip("dp_accounting.dp_event")
    from dpcalib.accountant.interop import to_dp_event, tree_from_dp_event

    tree = dpa.ComposedDpEvent([
        dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(2.0), 3), dpa.DiscreteLaplaceDpEvent(0.5, 2),
        dpa.PoissonSampledDpEvent(0.1, dpa.LaplaceDpEvent(1.0)), dpa.ZCDpEvent(0.01),
        dpa.MixtureOfGaussiansDpEvent(2.0, [0.0, 1.0], [0.5, 0.5]), dpa.NonPrivateDpEvent(),
        dpa.RepeatAndSelectDpEvent(dpa.GaussianDpEvent(3.0), 4.0, 1.0),
        dpa.SingleEpochTreeAggregationDpEvent(2.0, [7, 3]),
        dpa.SampledWithoutReplacementDpEvent(100, 10, dpa.LaplaceDpEvent(1.0))])
    ours = tree_from_dp_event(tree)
    assert to_dp_event(ours) == tree
    rr = dpa.SelfComposedDpEvent(dpa.RandomizedResponseDpEvent(0.8055, 2), 2)
    assert to_dp_event(tree_from_dp_event(rr)) == rr
