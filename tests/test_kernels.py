"""The one-dataset reference optimizers run as drivers over the kernels of
dpcalib.optim.algorithms.kernels: their iterates are bit for bit those of the code before the
change (tests/data/trajectories_093f4a2, written by its make.py on 093f4a2, run with the noise levels
it computed there: NOISE in make.py)."""

import importlib.util
import os

import pytest
import torch

HERE = os.path.join(os.path.dirname(__file__), "data", "trajectories_093f4a2")
_spec = importlib.util.spec_from_file_location("traj_make", os.path.join(HERE, "make.py"))
make = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make)
SAVED = torch.load(os.path.join(HERE, "trajectories.pt"), weights_only=True)


@pytest.mark.parametrize("case", make.CASES, ids=make.key)
def test_trajectory_bit_for_bit(case):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # as make.py: a convolution's reduction order depends on the threads
    try:
        got = make.trajectory(case)
    finally:
        torch.set_num_threads(threads)
    want = SAVED[make.key(case)]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want), float((got - want).abs().max())
