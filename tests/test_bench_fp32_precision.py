"""benchmarks/probe_fp32_precision.py and bench_cuda_clipping's ``--level``: the probe reports each model's
worst move with the releases' guard off and on and leaves the guard and the user's settings as they
were; bad options exit 2 in one line."""

import pytest
import torch

from benchmarks import bench_cuda_clipping as BC
from benchmarks import probe_fp32_precision as P
from dpcalib.optim.clipping import precision

B = torch.backends


@pytest.fixture
def keep_settings():
    leaves = [B.cuda.matmul, B.cudnn.conv, B.mkldnn.matmul, B.mkldnn.conv]
    keep = [leaf.fp32_precision for leaf in leaves]
    yield
    for leaf, v in zip(leaves, keep):
        leaf.fp32_precision = v


def test_the_probe_prints_every_model_guard_off_and_on(capsys, keep_settings):
    assert P.main(["--n", "6", "--level", "medium"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.split()[:1] in (["mlp"], ["cnn"],
                                                                                                   ["transformer"])]
    assert [r[0] for r in rows] == ["mlp", "cnn", "transformer"]
    for _, off, on in rows:
        assert 0.99 < float(on) <= 1 + 1e-5 and float(off) > 0.99       # guarded: within the sensitivity
    assert precision.EXACT_FLOAT32 is True
    assert B.mkldnn.matmul.fp32_precision == "bf16"                       # the level it was asked to set


@pytest.mark.parametrize("argv, name", [(["--n", "2"], "--n 2"), (["--device", "cuda"], "--device cuda")])
def test_the_probe_refuses_in_one_line(capsys, argv, name):
    if argv[:2] == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert P.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0], err


def test_bench_cuda_clipping_times_the_unguarded_path_at_a_reduced_level(capsys, keep_settings):
    assert BC.main(["--device", "cpu", "--small", "--steps", "1", "--rounds", "1", "--models", "mlp",
                    "--level", "high"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "unguarded" in out[1]
    row = out[2].split()
    assert row[0] == "mlp" and row[2] == "ghost" and float(row[-1].rstrip("x")) > 0
    assert precision.EXACT_FLOAT32 is True
