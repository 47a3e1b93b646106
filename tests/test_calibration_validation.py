"""Invalid or infeasible calibration requests raise ValueError naming the argument and the reason."""

import pytest

from dpcalib.mechanisms import (
    DIFF2BVR, DIFF2GD, DPGD, DPSGD, DPSRM, AdaD2P, ClipD2P, ConstD2P, DiceSGD, NoPrivacyGuaranteeError,
    PaperConditionWarning,
)

GD = DIFF2GD(2000, 20, 10, 1651)


@pytest.mark.parametrize("call,pattern", [
    (lambda: GD.calibrate(0, 1e-5), r"epsilon=0 .*\(0, inf\)"),
    (lambda: GD.calibrate(-1, 1e-5), r"epsilon=-1"),
    (lambda: GD.calibrate(3, 1.0), r"delta=1\.0 .*\(0, 1\)"),
    (lambda: GD.calibrate(3, 0), r"delta=0 .*\(0, 1\)"),
    (lambda: GD.calibrate(3, 1e-5, method="exact"), r"method='exact'"),
    (lambda: DIFF2GD(20, 21, 10, 1651), r"restart_interval=21 .*T > R"),
    (lambda: DIFF2GD(2000, 20, 10, 1651).calibrate(3, 1e-5, u=1.0), r"u=1\.0 .*\(1, inf\)"),
    (lambda: DIFF2GD(2000, 20, 10, 1651).calibrate(3, 1e-5, u=0.5), r"u=0\.5"),
    (lambda: GD.calibrate(3, 1e-5, shares=(0.5, 0.6)), r"shares=\(0\.5, 0\.6\) .*summing to 1"),
    (lambda: DIFF2GD(2000.5, 20, 10, 1651), r"rounds=2000\.5 .*integer"),
    (lambda: DIFF2GD(2000, 20, -3, 1651), r"clients=-3 .*integer in \[1, inf\]"),
    (lambda: DIFF2GD(2000, 20, 10, 0), r"n_min=0"),
    (lambda: DPGD(2000, 10, "many"), r"n_min='many'"),
    (lambda: DIFF2BVR(2000, 20, 10, 1651, 5, 2000), r"batch_size=2000 .*b > n_min"),
    (lambda: DIFF2BVR(2000, 20, 10, 1651, 0, 13), r"local_steps=0"),
    (lambda: DIFF2BVR(2000, 20, 10, 1651, 5, 13).calibrate(3, 1e-5, "paper", u1=1.25, u2=1.25),
     r"u1=1\.25, u2=1\.25 .*1/u1 \+ 1/u2 < 1"),
    (lambda: DIFF2BVR(2000, 20, 10, 1651, 5, 13).calibrate(3, 1e-5, "tight", u1=2, u2=2), r"1/u1 \+ 1/u2 < 1"),
    (lambda: DIFF2BVR(2000, 20, 10, 1651, 5, 13).calibrate(3, 1e-5, u1=1.0), r"u1=1\.0"),
    (lambda: DPSGD(0.0, 100), r"sampling_rate=0\.0 .*\[1e-09, 1\]"),
    (lambda: DPSGD(1.5, 100), r"sampling_rate=1\.5"),
    (lambda: DPSGD(0.01, 0), r"steps=0"),
    (lambda: DPSRM(1000, 10, 2000, 10), r"b0=2000 .*\[1, n=1000\]"),
    (lambda: DPSRM(1000, 10, 100, 10, momentum=0.0), r"momentum=0\.0 .*\(0, 1\]"),
    (lambda: DPSRM(1000, 10, 100, 10).calibrate(1, 1e-5, "paper", beta=1.0), r"beta=1\.0 .*\(0, 1\)"),
    (lambda: DiceSGD(1000, 2000, 10), r"batch_size=2000 .*\[1, 1000\]"),
    (lambda: DiceSGD(1000, 10, 10, C1=0.0), r"C1=0\.0"),
    (lambda: ClipD2P(0, 100), r"samples_per_node=0"),
    (lambda: ClipD2P(100, 100, relation="swap"), r"relation='swap'"),
])
def test_invalid_requests(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_adad2p_is_refused_with_reason():
    for call in (lambda: AdaD2P().calibrate(1, 1e-5), lambda: AdaD2P().epsilon(1e-5, 0.1)):
        with pytest.raises(NoPrivacyGuaranteeError, match=r"no finite \(eps, delta\) guarantee.*AdaD2P-E1.*ClipD2P"):
            call()


def test_constd2p_warns_that_g_is_not_enforced():
    with pytest.warns(PaperConditionWarning, match="AdaD2P-E2"):
        rep = ConstD2P(2500, 3500).calibrate(1, 1e-5)
    assert any("AdaD2P-E2" in w for w in rep.warnings)
    assert rep["sigma"] == pytest.approx(ClipD2P(2500, 3500).calibrate(1, 1e-5)["sigma"], rel=1e-12)
