"""`dpcalib account` run as a subprocess."""

import json
import subprocess
import sys

import pytest

from dpcalib.accountant import PoissonSampledGaussianEvent, PrivacyAccountant


def run(*args):
    return subprocess.run([sys.executable, "-m", "dpcalib", *args], capture_output=True, text=True)


def test_account_json_equals_api():
    r = run("account", "--poisson", "0.01:1.0:1000", "--delta", "1e-5", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(0.01, 1.0), 1000)
    b = acc.epsilon_bracket(1e-5)                       # the default: --accountant best
    assert out["epsilon"] == pytest.approx(b.upper, rel=1e-12) and out["method"] == "pld"
    assert out["epsilon_lower"] == pytest.approx(b.lower, rel=1e-12)
    assert out["epsilon"] == acc.get_epsilon(1e-5)      # the API's default: the same best certified eps
    assert out["epsilon"] < acc.get_epsilon(1e-5, "rdp")  # tighter than RDP
    rdp = json.loads(run("account", "--poisson", "0.01:1.0:1000", "--delta", "1e-5", "--json",
                         "--accountant", "rdp").stdout)
    assert rdp["epsilon"] == pytest.approx(acc.get_epsilon(1e-5, "rdp"), rel=1e-12) and rdp["method"] == "rdp"


def test_account_gaussian_is_exact():
    r = run("account", "--gaussian", "10:100", "--delta", "1e-5", "--json")
    assert json.loads(r.stdout)["epsilon"] == pytest.approx(4.3771781, abs=1e-6)   # 1-GDP at 1e-5 (published)


@pytest.mark.parametrize("args,fragment", [
    (["account", "--poisson", "1.5:1:3", "--delta", "1e-5"], "sampling_probability=1.5"),
    (["account", "--poisson", "a:1:3", "--delta", "1e-5"], "--poisson='a:1:3'"),
    (["account", "--gaussian", "1:10", "--delta", "1"], "delta=1.0"),
    (["account", "--delta", "1e-5"], "at least one of"),
    (["account", "--gaussian", "1:10"], "--delta"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["account", "--poisson", "0.01:1:3", "--delta", "1e-5", "--accountant", "gdp"], "--accountant gdp is not allowed"),
    (["account", "--wor", "0.01:1:3", "--delta", "1e-5", "--accountant", "gdp"], "--accountant gdp is not allowed"),
    (["epsilon", "dp-sgd", "--noise-multiplier", "1e-9", "--delta", "1e-5", "--sampling-rate", "0.5",
      "--steps", "10", "--accountant", "pld"], "--accountant='pld' is not allowed for these events"),
])
def test_bad_input_one_line_exit_2(args, fragment):
    r = run(*args)
    assert r.returncode == 2
    assert fragment in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
