"""benchmarks/bench_difference_precision.py: both computations are timed, round by round, on the path
the model takes, the release's dtype is restored after the float32 turns, and bad options exit 2 in
one line before anything runs."""

import pytest
import torch

from benchmarks import bench_difference_precision as B
from dpcalib.optim.clipping import precision


def test_it_times_both_computations_and_leaves_the_release_as_it_was():
    r = B.measure("mlp", rounds=2, n=4)
    assert r["path"] == "ghost" and len(r["wide"]) == len(r["narrow"]) == 2
    assert all(t > 0.0 for t in r["wide"] + r["narrow"])
    assert precision.DIFFERENCE_DTYPE == torch.float64         # restored after the float32 turns


@pytest.mark.parametrize("argv, name", [(["--models", "resnet"], "--models='resnet'"), (["--rounds", "0"], "--rounds='0'"),
                                        (["--n", "1e300"], "--n='1e300'"), (["--rounds", "-3"], "--rounds='-3'")])
def test_bad_options_exit_2_in_one_line(capsys, argv, name):
    with pytest.raises(SystemExit) as e:
        B.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0] and "is not allowed: expected" in err[0], err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_device_exits_2_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        B.main(["--device", "cuda"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--device=cuda" in err[0] and "no CUDA device" in err[0], err
