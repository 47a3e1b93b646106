"""The one-dataset reference optimizers run as drivers over the kernels of
dpcalib.optim.algorithms.kernels: their iterates are bit for bit those of the code before the
change (tests/data/trajectories_093f4a2, written by its make.py on 093f4a2, run with the noise levels
it computed there: NOISE in make.py).

Bit for bit on the CPUs that wrote them; on another instruction set the float kernels (MKL's GEMV and
GEMM, torch's vectorised functions) round differently: an AVX-512 machine (2026-11-27) reproduced
every trajectory within 1.9 eps * max|iterate| (float64) and 1.1 (float32), not bit for bit.  So the
check is: equal, or within ITERATE_ULPS eps * max|iterate| -- a changed update, step or noise moves
the iterates by orders of magnitude more."""

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
    assert same_iterates(got, want), float((got - want).abs().max())


#: how far (in eps of the dtype, times the largest iterate) a trajectory may be from its file on a
#: CPU whose float kernels round differently from the one that wrote it
ITERATE_ULPS = 32


def same_iterates(got, want) -> bool:
    """Bit for bit, or within :data:`ITERATE_ULPS` eps * max|want| (another CPU's rounding)."""
    if torch.equal(got, want):
        return True
    tol = ITERATE_ULPS * torch.finfo(want.dtype).eps * float(want.abs().max())
    return bool(torch.isfinite(got).all()) and float((got - want).abs().max()) <= tol
