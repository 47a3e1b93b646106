"""Every event kind is dispatched explicitly: an accountant, the report and the PLD pairs refuse an event
kind they do not know in one line, never treat it as another kind, and every kind they know has its
words in the privacy report (a balls-in-bins epoch once fell through to the without-replacement wording
and crashed the report)."""

from dataclasses import dataclass

import numpy as np
import pytest

from dpcalib.accountant import (ADD_REMOVE, BallsInBinsGaussianEvent, GaussianEvent, PoissonSampledGaussianEvent,
                                PrivacyAccountant, WORSampledGaussianEvent, pld_delta, pld_epsilon, pld_profile)
from dpcalib.accountant.pld.pairs import dominating_pairs
from dpcalib.accountant.validation import InputError


@dataclass(frozen=True)
class ToyEvent:
    """An event kind no accountant supports: it looks like a Poisson step in every attribute a
    fall-through could read."""

    noise_multiplier: float = 1.0
    sampling_probability: float = 0.01
    sampling_ratio: float = 0.01
    steps: int = 10
    neighboring_relation = ADD_REMOVE
    integer_orders_only = False
    use_probability = 0.01

    def rdp(self, orders):
        return np.zeros_like(np.asarray(orders, dtype=float))

    def describe(self, count):
        return f"{count} toy step(s)"


def _one_line(exc):
    text = str(exc.value)
    assert "\n" not in text and "ToyEvent" in text, text
    return text


@pytest.mark.parametrize("route", [
    lambda: PrivacyAccountant().compose(ToyEvent(), 3),
    lambda: pld_epsilon([(ToyEvent(), 3)], 1e-5),
    lambda: pld_delta([(ToyEvent(), 3)], 1.0),
    lambda: pld_profile([(ToyEvent(), 3)], [0.5, 1.0]),
    lambda: dominating_pairs(ToyEvent(), "remove"),
    lambda: pld_epsilon([(PoissonSampledGaussianEvent(0.01, 1.0), 5), (ToyEvent(), 1)], 1e-5),
], ids=["accountant", "pld_epsilon", "pld_delta", "pld_profile", "dominating_pairs", "pld_mixed"])
def test_an_unknown_event_kind_is_refused_in_one_line(route):
    with pytest.raises(InputError) as exc:
        route()
    _one_line(exc)


def test_the_accountant_is_unchanged_after_refusing_an_unknown_kind():
    acc = PrivacyAccountant().compose(GaussianEvent(2.0), 3)
    with pytest.raises(InputError):
        acc.compose(ToyEvent())
    assert acc.events == ((GaussianEvent(2.0), 3),)
    assert acc.get_epsilon(1e-5) == PrivacyAccountant().compose(GaussianEvent(2.0), 3).get_epsilon(1e-5)


@pytest.mark.parametrize("event, words", [
    (GaussianEvent(2.0), "full-batch Gaussian"),
    (PoissonSampledGaussianEvent(0.01, 1.0), "Poisson-subsampled"),
    (WORSampledGaussianEvent(0.01, 1.0), "without replacement"),
    (BallsInBinsGaussianEvent(4, 2.0), "balls-in-bins"),
])
def test_every_known_kind_has_its_own_words_in_the_report(event, words):
    report = PrivacyAccountant().compose(event, 2).report(1e-5)
    sampling = report.assumptions["sampling"]
    assert sampling.startswith("2 ") and words in sampling, sampling
    assert np.isfinite(report.epsilon) and report.epsilon > 0


def test_each_gaussian_kind_states_its_own_pairs_and_directions():
    """The four Gaussian kinds name their dominating pairs as every other kind states its own (no dispatch on
    their classes in the PLD chain): the pair of each, its parameters and the directions composed."""
    from dpcalib.accountant.pld.pairs import AddPair, GaussianPair, RemovePair, directions

    z, q = 1.3, 0.02
    cases = [(GaussianEvent(z), {"remove": (GaussianPair(z),), "add": (GaussianPair(z),)}, ("remove",)),
             (PoissonSampledGaussianEvent(q, z), {"remove": (RemovePair(z, q),), "add": (AddPair(z, q),)},
              ("remove", "add")),
             (WORSampledGaussianEvent(q, z), {d: (RemovePair(z, q), AddPair(z, q)) for d in ("remove", "add")},
              ("remove",)),
             (BallsInBinsGaussianEvent(10, z), {"remove": (), "add": ()}, ("remove", "add")),
             (PoissonSampledGaussianEvent(0.0, z), {"remove": (), "add": ()}, ("remove", "add")),
             (WORSampledGaussianEvent(0.0, z), {"remove": (), "add": ()}, ("remove",))]
    for ev, pairs, dirs in cases:
        for d, want in pairs.items():
            got = dominating_pairs(ev, d)
            assert got == want and [type(p) for p in got] == [type(p) for p in want], (ev, d, got)
        assert directions([(ev, 3)]) == dirs, ev
        assert ev.gaussian


def test_a_tree_no_route_certifies_is_refused_in_one_line_never_a_silent_inf(capsys, tmp_path):
    """Poisson sampling around a Poisson-sampled Gaussian or around zCDP: no RDP bound, no exact pair to
    sample, not exact GDP.  The best route (and auto) refuse naming the node, where they returned eps = inf
    (the command line then spoke of a loss past the double range); a supported tree still answers."""
    import json

    from dpcalib.accountant.mechanism_events import ZCDPEvent
    from dpcalib.accountant.tree_events import PoissonSampledEvent
    from dpcalib.cli import main

    for inner in (PoissonSampledGaussianEvent(0.2, 1.0), ZCDPEvent(0.5)):
        acc = PrivacyAccountant().compose(PoissonSampledEvent(0.1, inner), 10)
        for method in ("best", "auto"):
            with pytest.raises(InputError) as exc:
                acc.get_epsilon(1e-5, method)
            text = str(exc.value)
            assert "\n" not in text and "PoissonSampledEvent" in text and "is not allowed" in text, text
    ok = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.1, 1.0), 10).get_epsilon(1e-5)
    assert 0.0 < ok < 10.0
    path = tmp_path / "nested.json"
    path.write_text(json.dumps({"kind": "poisson", "sampling_probability": 0.1,
                                "event": {"kind": "poisson_gaussian", "sampling_probability": 0.2,
                                          "noise_multiplier": 1.0}}))
    assert main(["account", "--events", str(path), "--delta", "1e-5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no exact dominating pair to sample" in err, err
