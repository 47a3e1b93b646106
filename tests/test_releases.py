"""One owner per fact: a mechanism's sensitivity rule drives the calibration, the sensitivity
each optimizer claims, the std it injects and the epsilon it reports as spent.  Doubling the rule
in the mechanism (and nowhere else) doubles all that should double and leaves the rest."""

import pytest

import dpcalib.mechanisms as M

from tests.builders import build, mlp

# (builder name, mechanism class, the first release's sensitivity written from the paper, target eps)
CASES = [
    ("diff2-gd", M.DIFF2GD, 2.0 * 1.0 / (40 * 3), 2.0),     # Lemma C.1: 2 C1 / (n_min P), C1 = 1
    ("dp-sgd", M.DPSGD, 1.0, 2.0),                          # add/remove, sum clipped to C = 1
    ("dp-srm", M.DPSRM, 2.0 * 1.0 / 20, 4.0),               # 2 L / b0, L = 1, b0 = 20
    ("dicesgd", M.DiceSGD, 1.0 / 10, 4.0),                  # C1 / B at t = 0, C1 = 1, B = 10
    ("clipd2p", M.ClipD2P, 2.0 * 1.0, 8.0),                 # replace-one, 2 C, C = 1
]


@pytest.mark.parametrize("name,cls,first_sensitivity,target", CASES, ids=[c[0] for c in CASES])
def test_the_mechanisms_sensitivity_rule_is_the_only_source(monkeypatch, name, cls, first_sensitivity, target):
    base, rep0 = build(name, mlp(), seed=4, rounds=4)
    base.run(progress=False)
    eps0 = base.epsilon_spent()
    r0 = base.privatizer.releases
    assert r0[0].sensitivity == pytest.approx(first_sensitivity, rel=1e-12)

    original = cls.sensitivity
    monkeypatch.setattr(cls, "sensitivity", lambda self, release, clip=None: 2.0 * original(self, release, clip))
    opt, rep1 = build(name, mlp(), seed=4, rounds=4)
    opt.run(progress=False)
    r1 = opt.privatizer.releases
    assert len(r1) == len(r0)
    # the claimed sensitivity doubles ...
    assert r1[0].sensitivity == pytest.approx(2.0 * first_sensitivity, rel=1e-12)
    # ... the calibration answers with twice the std (the same target needs the same multiplier) ...
    assert r1[0].std == pytest.approx(2.0 * r0[0].std, rel=1e-6)
    for a, b in zip(r0, r1):
        assert b.std / b.sensitivity == pytest.approx(a.std / a.sensitivity, rel=1e-6)
    # ... and the epsilon spent is still the calibrated one, not above the target
    assert opt.epsilon_spent() == pytest.approx(rep1.certified_epsilon, rel=1e-6)
    assert opt.epsilon_spent() == pytest.approx(eps0, rel=1e-6)
    assert opt.epsilon_spent() <= target * (1 + 1e-9)
    # the same run accounted under the original rule: the noise is now twice what is needed
    monkeypatch.undo()
    assert opt.epsilon_spent() < 0.75 * eps0


def test_every_mechanism_declares_its_releases():
    shapes = {"dp-gd": M.DPGD(5, 2, 10), "diff2-gd": M.DIFF2GD(5, 2, 2, 10), "diff2-bvr": M.DIFF2BVR(5, 2, 2, 10, 3, 4),
              "dp-sgd": M.DPSGD(0.1, 5), "dp-srm": M.DPSRM(100, 5, 20, 10, 1.0, 0.5, 0.2),
              "dicesgd": M.DiceSGD(100, 10, 5), "clipd2p": M.ClipD2P(10, 5), "constd2p": M.ConstD2P(10, 5)}
    expected = {"dp-gd": {"restart"}, "diff2-gd": {"restart", "difference"},
                "diff2-bvr": {"restart", "difference", "local"}, "dp-sgd": {"step"}, "dp-srm": {"v^0", "v^t"},
                "dicesgd": {"first", "later"}, "clipd2p": {"iteration"}, "constd2p": {"iteration"}}
    for name, mech in shapes.items():
        assert {r.name for r in mech.releases} == expected[name]
        for r in mech.releases:
            assert r.relation in ("replace-one", "add/remove")
            assert mech.sensitivity(r.name) > 0
    with pytest.raises(ValueError, match="release='nope'"):
        M.DIFF2GD(5, 2, 2, 10).sensitivity("nope")
    with pytest.raises(ValueError, match="sigma2"):
        M.DIFF2GD(5, 2, 2, 10).events({"sigma1": 1.0}, {"restart": 3, "difference": 2})
