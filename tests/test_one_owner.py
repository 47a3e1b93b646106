"""One owner per answer: the default calibration is the best certified one, and every command that
prints eps for one setting prints the same number (the calibration's certified eps, `epsilon`'s
headline, the last point of its curve)."""

import json

import pytest

from dpcalib.commands.algorithms import SPECS
from dpcalib.cli import main
from dpcalib.mechanisms import DIFF2BVR, DPSGD, DPSRM, ClipD2P
from tests.test_cli import SHAPES

#: the six DP-SGD settings of benchmarks/bench_pld.py (q, steps, eps) at delta = 1e-5
BENCH_PLD = [(0.01, 10_000, 3.0), (256 / 60000, 14_062, 3.0), (4096 / 50000, 2_500, 1.0),
             (1e-3, 100_000, 1.0), (1e-3, 1_000, 1.0), (0.01, 100, 2.0)]


def _json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("q,steps,eps", BENCH_PLD)
def test_the_default_dp_sgd_calibration_is_the_pld_one(q, steps, eps):
    default = DPSGD(q, steps).calibrate(eps, 1e-5)
    pld = DPSGD(q, steps).calibrate(eps, 1e-5, accountant="pld")
    rdp = DPSGD(q, steps).calibrate(eps, 1e-5, accountant="rdp")
    assert default["noise_multiplier"] == pytest.approx(pld["noise_multiplier"], rel=1e-12)
    assert default.certified_epsilon <= eps and default["noise_multiplier"] <= rdp["noise_multiplier"]


@pytest.mark.parametrize("mech", [DPSRM(49990, 50, 256, 64), ClipD2P(2500, 350), DIFF2BVR(100, 10, 10, 1651, 5, 13)],
                         ids=["dp-srm", "clipd2p", "diff2-bvr"])
def test_the_other_defaults_are_their_pld_answers(mech):
    default, pld = mech.calibrate(2.0, 1e-5), mech.calibrate(2.0, 1e-5, accountant="pld")
    assert default.noise.keys() == pld.noise.keys()
    for k, v in default.noise.items():
        assert v == (None if pld.noise[k] is None else pytest.approx(pld.noise[k], rel=1e-12))
    assert default.certified_epsilon <= 2.0
    assert "pld" in default.accounting or "gdp" in default.accounting


@pytest.mark.parametrize("algo", list(SHAPES))
def test_paper_mode_certified_epsilon_is_what_epsilon_prints(algo, capsys):
    flags = SHAPES[algo][0]
    cal = _json(capsys, "calibrate", algo, "--epsilon", "2", "--delta", "1e-5", "--method", "paper", "--json", *flags)
    noise = []
    for name in SPECS[algo].noise:
        noise += ["--" + name.replace("_", "-"), repr(cal["noise"][name])]
    eps = _json(capsys, "epsilon", algo, "--delta", "1e-5", "--json", *flags, *noise)
    assert eps["epsilon"] == pytest.approx(cal["certified_epsilon"], rel=1e-9)


def _noise_flags(algo, capsys):
    flags = SHAPES[algo][0]
    cal = _json(capsys, "calibrate", algo, "--epsilon", "2", "--delta", "1e-5", "--json", *flags)
    out = []
    for name in SPECS[algo].noise:
        out += ["--" + name.replace("_", "-"), repr(cal["noise"][name])]
    return flags, out


def _accountants(algo):
    full_batch = algo in ("dp-gd", "diff2-gd", "dicesgd")
    return ["best", "pld", "rdp"] + (["gdp"] if full_batch else [])


@pytest.mark.parametrize("algo", list(SHAPES))
def test_the_curve_ends_at_the_headline_in_json_and_text(algo, capsys):
    flags, noise = _noise_flags(algo, capsys)
    for acc in _accountants(algo):
        out = _json(capsys, "epsilon", algo, "--delta", "1e-5", "--json", "--curve", "--accountant", acc, *flags, *noise)
        assert out["curve"][-1]["epsilon"] == pytest.approx(out["epsilon"], rel=1e-9), (acc, out["curve"][-1])
        assert main(["epsilon", algo, "--delta", "1e-5", "--curve", "--accountant", acc, *flags, *noise]) == 0
        text = capsys.readouterr().out.splitlines()
        head = next(ln.split()[1] for ln in text if ln.startswith("epsilon "))
        last = [ln for ln in text if ln.startswith("curve ")][-1].split()[-1]
        assert last == head, (acc, head, last)          # the same number, printed the same way


def test_a_calibration_tells_its_progress_and_only_the_command_line_draws_it(monkeypatch, capsys):
    import tqdm.auto

    from dpcalib.accountant import clear_cache, watching
    from dpcalib.commands import common

    bars = []

    class Bar:
        def __init__(self, **kw):
            self.kw, self.parts, self.closed = kw, [], False
            bars.append(self)

        def set_postfix_str(self, part, refresh=True):
            self.parts.append(part)

        def refresh(self):
            pass

        def update(self, n):
            pass

        def close(self):
            self.closed = True
    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    # the math layer draws nothing: a calibration in Python makes no bar, and tells whoever watches
    # each accountant it builds and each grid a bracket composes (10^8 steps: seconds without an accountant)
    told = []
    clear_cache()
    with watching(told.append):
        z = DPSGD(0.01, 1000).calibrate(2.0, 1e-5)["noise_multiplier"]
    assert bars == []
    built = [p for p in told if p.startswith("calibrating: accountant ")]
    assert len(built) > 1 and built[0] == "calibrating: accountant 1"
    assert any(p.startswith(("upper end on grid ", "lower end on grid ")) for p in told)
    # the command line shows them: a bar on terminals only, after PROGRESS_DELAY seconds, closed at the end
    assert common.PROGRESS_DELAY == 1.0
    clear_cache()
    assert main(["calibrate", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", "--sampling-rate", "0.01",
                 "--steps", "1000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["noise"]["noise_multiplier"] == z
    (bar,) = bars
    assert bar.kw["disable"] is None and bar.kw["leave"] is False and bar.kw["delay"] == 1.0 and bar.closed
    assert any(p.startswith("calibrating: accountant ") for p in bar.parts)


def test_every_mechanism_has_the_same_api():
    import inspect

    from dpcalib.mechanisms import ALGORITHMS, AdaD2P, Mechanism

    for name, (cls, _) in ALGORITHMS.items():
        if cls is AdaD2P:          # no guarantee: every call raises (AdaD2P-E1)
            continue
        assert issubclass(cls, Mechanism), name
        assert cls.epsilon is Mechanism.epsilon, name          # one owner of "eps of this run"
        params = list(inspect.signature(cls.calibrate).parameters.values())
        assert [p.name for p in params[:5]] == ["self", "epsilon", "delta", "method", "accountant"], name
        assert params[3].default == "tight" and params[4].default == "best", name


@pytest.mark.parametrize("algo", ["dp-gd", "diff2-gd", "dicesgd"])
def test_full_batch_rdp_calibration_is_for_comparison_and_needs_more_noise(algo):
    from dpcalib.mechanisms import ALGORITHMS

    _, shape, split = SHAPES[algo]
    mech = ALGORITHMS[algo][0](**shape)
    best, rdp = mech.calibrate(2.0, 1e-5, **split), mech.calibrate(2.0, 1e-5, accountant="rdp", **split)
    name = next(iter(best.noise))
    assert rdp.noise[name] > best.noise[name]
    assert rdp.achieved_epsilon == pytest.approx(2.0, rel=1e-6) and rdp.certified_epsilon < 2.0


def test_eps_queries_choose_their_bound_with_accountant():
    from dpcalib.accountant import PoissonSampledGaussianEvent, PrivacyAccountant

    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 100)
    rdp = acc.epsilon_report(1e-5, accountant="rdp")
    assert rdp.method == "rdp" and acc.get_epsilon(1e-5, "rdp") == rdp.epsilon
    with pytest.raises(TypeError):
        acc.epsilon_report(1e-5, method="rdp")        # the old name is gone (0.1.0 keeps no aliases)
    m = DPSGD(0.01, 100)
    assert m.epsilon(1e-5, 1.0, accountant="rdp").epsilon == rdp.epsilon
    assert m.epsilon(1e-5, 1.0).epsilon == acc.get_epsilon(1e-5) < rdp.epsilon      # best by default


def test_every_route_takes_the_accountant_names_from_their_owner(monkeypatch):
    """dpcalib.accountant.ACCOUNTANTS is the one list: the command line builds its --accountant choices from it
    (a name added there is offered), each name is answered by an eps query and by a calibration, and an
    unknown one is refused in one line naming the list."""
    import re

    import dpcalib.accountant as accountant
    from dpcalib import cli
    from dpcalib.accountant import ACCOUNTANTS, GaussianEvent, PrivacyAccountant
    from dpcalib.accountant.validation import InputError
    from dpcalib.mechanisms import DPGD

    assert ACCOUNTANTS == ("best", "pld", "rdp", "gdp")
    with monkeypatch.context() as m:
        m.setattr(accountant, "ACCOUNTANTS", (*ACCOUNTANTS, "toy"))
        for command in ("epsilon", "calibrate"):
            parser = cli._algo_parser(command, "dp-gd")
            offered = next(a.choices for a in parser._actions if "--accountant" in a.option_strings)
            assert list(offered) == [*ACCOUNTANTS, "toy"], command
    acc = PrivacyAccountant().compose(GaussianEvent(2.0), 3)
    eps = {name: acc.get_epsilon(1e-5, name) for name in ACCOUNTANTS}
    assert eps["best"] == pytest.approx(eps["gdp"], rel=1e-9) and eps["best"] <= min(eps.values()) + 1e-12
    expected = "accountant='exact' is not allowed: expected one of " + ", ".join(map(repr, ("auto", *ACCOUNTANTS)))
    with pytest.raises(InputError, match="^" + re.escape(expected + ".") + "$"):
        acc.get_epsilon(1e-5, "exact")
    mech = DPGD(20, 2, 50)                                # full batch: every name applies, "gdp" included
    for name in ACCOUNTANTS:
        assert mech.calibrate(2.0, 1e-5, accountant=name).certified_epsilon <= 2.0
    with pytest.raises(InputError, match="^accountant='exact' is not allowed: expected one of 'best'"):
        mech.calibrate(2.0, 1e-5, accountant="exact")


def test_the_engine_takes_the_accountant_names_and_auto():
    import re

    pytest.importorskip("torch")
    from dpcalib.accountant import ACCOUNTANTS
    from dpcalib.accountant.validation import InputError
    from dpcalib.optim import PrivacyEngine

    for name in (*ACCOUNTANTS, "auto"):
        assert PrivacyEngine(accountant=name).accountant.mechanism() == name
    expected = "accountant='exact' is not allowed: expected one of " + ", ".join((*ACCOUNTANTS, "auto")) + "."
    with pytest.raises(InputError, match="^" + re.escape(expected) + "$"):
        PrivacyEngine(accountant="exact")


@pytest.mark.parametrize("mech, noise", [
    (DPSGD(0.01, 100), (1.0,)),
    (DPSGD(sampling="shuffle", n=1000, batch_size=100, epochs=3), (2.0,)),
    (DPSGD(sampling="balls-in-bins", n=1000, batch_size=100, epochs=3), (2.0,)),
    (DPSRM(1000, 7, 64, 16), (1.0, 1.0)),
    (ClipD2P(50, 30), (1.0,)),
    (DIFF2BVR(100, 10, 10, 1651, 5, 13), (1.0, 1.0, 1.0)),
])
def test_release_counts_are_declared_and_are_what_the_accountant_composes(mech, noise):
    counts = mech.release_counts()
    assert set(counts) == {s.name for s in mech.releases}       # every release declared, none invented
    composed = sum(k for _, k in mech.accountant(*noise).events)
    assert composed == sum(mech.participations(name, k) for name, k in counts.items() if k)
