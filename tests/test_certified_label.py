"""'certified' means certified: the certified eps of a calibration -- API ``certified_epsilon``, the CLI's
``certified`` line and JSON key -- is the best certified eps of the returned noise, the number ``dpcalib
epsilon`` prints for it, whatever accountant the calibration solved on (``--accountant rdp`` printed the RDP
solver's own eps as "certified": 2 where the noise's best certified eps is 1.747)."""

import json

import pytest

from dpcalib.commands.algorithms import SPECS
from dpcalib.cli import main
from dpcalib.mechanisms import ALGORITHMS

from .test_cli import SHAPES

CASES = dict(SHAPES)
CASES["clipd2p replace-one"] = (SHAPES["clipd2p"][0] + ["--relation", "replace-one"],
                                dict(SHAPES["clipd2p"][1], relation="replace-one"), {})
CASES["dp-sgd shuffle"] = (["--sampling", "shuffle", "--n", "60000", "--batch-size", "600", "--epochs", "2"],
                           dict(sampling="shuffle", n=60000, batch_size=600, epochs=2), {})


def _run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def _noise_flags(algo, noise):
    return [f for n in SPECS[algo].noise for f in ("--" + n.replace("_", "-"), repr(float(noise[n])))]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("method", ["paper", "tight"])
def test_certified_equals_dpcalib_epsilon_of_the_returned_noise(capsys, case, accountant, method):
    algo = case.split()[0]
    flags, shape, split = CASES[case]
    if method == "paper" and "shuffle" in case:
        pytest.skip("no paper calibration for shuffled batches (refused, tested in test_shuffle)")
    cal = ["calibrate", algo, "--epsilon", "2", "--delta", "1e-5", "--method", method, "--accountant", accountant,
           *flags, *[f for k, v in split.items() for f in ("--" + k, str(v))]]
    rep = json.loads(_run(capsys, cal + ["--json"]))
    eps = json.loads(_run(capsys, ["epsilon", algo, "--delta", "1e-5", *flags, *_noise_flags(algo, rep["noise"]),
                                   "--json"]))
    assert rep["certified_epsilon"] == pytest.approx(eps["epsilon"], rel=1e-9)
    assert rep["certified_epsilon"] <= 2.0 * (1 + 1e-9) or method == "paper"
    # the text lines print the same number
    text = _run(capsys, cal)
    etext = _run(capsys, ["epsilon", algo, "--delta", "1e-5", *flags, *_noise_flags(algo, rep["noise"])])
    certified = next(l for l in text.splitlines() if l.startswith("certified")).split()[1]
    assert certified == "epsilon=" + next(l for l in etext.splitlines() if l.startswith("epsilon")).split()[1]
    # the API: the same report, and Mechanism.epsilon takes the report's noise by name
    mech = ALGORITHMS[algo][0](**shape)
    api = mech.calibrate(2, 1e-5, method=method, accountant=accountant, **split)
    assert api.certified_epsilon == pytest.approx(rep["certified_epsilon"], rel=1e-12)
    named = {k: v for k, v in api.noise.items() if k in SPECS[algo].noise}
    assert mech.epsilon(1e-5, **named).epsilon == pytest.approx(api.certified_epsilon, rel=1e-9)
    assert mech.epsilon(1e-5, *named.values()).epsilon == pytest.approx(api.certified_epsilon, rel=1e-9)


def test_adad2p_has_no_certified_eps_to_print(capsys):
    assert main(["calibrate", "adad2p", "--epsilon", "1", "--delta", "1e-5"]) == 2
    assert "no finite" in capsys.readouterr().err
