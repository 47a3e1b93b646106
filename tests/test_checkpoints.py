"""Checkpoints are plain data: readable with torch.load(weights_only=True), a file that would run
code on load is refused without running it, and a checkpoint of another run is refused."""

import os
import pickle

import pytest
import torch

import dpcalib.mechanisms as M
import dpcalib.optim as O

from tests.builders import NAMES, build, mlp, shards
from tests.test_kernels import same_iterates


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_is_plain_data(name, tmp_path):
    opt, _ = build(name, mlp(), seed=3)
    opt.run(4, progress=False)
    opt.save_checkpoint(tmp_path / "ck.pt")
    # torch's own restricted unpickler: tensors, numbers, strings, lists, dicts -- no classes
    state = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert state["algorithm"] == opt.name and state["round"] == 4
    assert len(state["noise"]["releases"]) == len(opt.privatizer.releases) > 0
    assert all(isinstance(r, dict) for r in state["noise"]["releases"])


class _Payload:
    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_a_checkpoint_that_would_run_code_is_refused_without_running_it(tmp_path):
    target = tmp_path / "pwned"
    payload = _Payload()
    payload.path = str(target)
    with open(tmp_path / "evil.pt", "wb") as f:
        pickle.dump({"algorithm": "dp-gd", "x": payload}, f, protocol=2)
    torch.save({"algorithm": "dp-gd", "x": payload}, tmp_path / "evil2.pt")
    opt, _ = build("dp-gd", mlp())
    for name in ("evil.pt", "evil2.pt"):
        with pytest.raises(ValueError, match="weights_only=True"):
            opt.load_checkpoint(tmp_path / name)
    assert not target.exists()                       # the payload never ran
    assert opt.round == 0


def test_a_missing_or_foreign_checkpoint_is_a_clear_error(tmp_path):
    opt, _ = build("dp-gd", mlp())
    with pytest.raises(ValueError, match="no such file"):
        opt.load_checkpoint(tmp_path / "missing.pt")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "foreign.pt")
    with pytest.raises(ValueError, match="not a dpcalib optimizer checkpoint"):
        opt.load_checkpoint(tmp_path / "foreign.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="checkpoint="):
        opt.load_checkpoint(tmp_path / "junk.pt")


def test_a_checkpoint_of_another_shape_noise_or_model_is_refused(tmp_path):
    mech = M.DPGD(12, 3, 40)
    rep = mech.calibrate(2.0, 1e-5)
    a = O.DPGD(mlp(), O.squared_loss, shards(3, 40), mech, rep, C1=1.0, lr=0.1)
    a.run(2, progress=False)
    a.save_checkpoint(tmp_path / "a.pt")
    # same algorithm and rounds, another run shape (n_min): its noise buys another epsilon
    mech2 = M.DPGD(12, 3, 41)
    b = O.DPGD(mlp(), O.squared_loss, shards(3, 41), mech2, mech2.calibrate(2.0, 1e-5), C1=1.0, lr=0.1)
    with pytest.raises(ValueError, match="run shape"):
        b.load_checkpoint(tmp_path / "a.pt")
    # same shape, other noise
    c = O.DPGD(mlp(), O.squared_loss, shards(3, 40), mech, mech.calibrate(3.0, 1e-5), C1=1.0, lr=0.1)
    with pytest.raises(ValueError, match="noise levels"):
        c.load_checkpoint(tmp_path / "a.pt")
    # same shape and noise, another model
    d = O.DPGD(torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1)),
               O.squared_loss, shards(3, 40), mech, rep, C1=1.0, lr=0.1)
    with pytest.raises(ValueError, match="model's parameters"):
        d.load_checkpoint(tmp_path / "a.pt")
    assert b.round == c.round == d.round == 0


def test_a_checkpoint_in_a_missing_folder_is_refused_before_the_first_round(tmp_path):
    opt, _ = build("dp-sgd", mlp(), seed=0)
    with pytest.raises(ValueError, match="does not exist"):
        opt.run(progress=False, checkpoint=tmp_path / "missing" / "ck.pt")
    assert opt.round == 0


PRE_MOVE = os.path.join(os.path.dirname(__file__), "data", "checkpoints_047569c")


@pytest.mark.parametrize("name", NAMES)
def test_a_checkpoint_written_before_the_move_to_sub_packages_resumes_bit_for_bit(name):
    """tests/data/checkpoints_047569c/make.py ran on 047569c (optim/ as 27 flat modules): a
    checkpoint after 4 rounds, and the parameters after 8 more rounds of the same run.  The current
    code loads that checkpoint and reaches the same parameters, bit for bit.  The run is built with
    the checkpoint's own noise levels: a calibration may since have moved them within its tolerance
    (DP-SGD's, 5.6e-7 relative, when the PLD bracket's lower end began to close on coarser grids),
    and a checkpoint of other noise is refused -- the test above.  Bit for bit on the CPUs that wrote
    the files; on another instruction set within 32 eps * max|parameter| (an AVX-512 machine's MKL
    rounds differently: 4.8 at most, DP-SRM, 2026-11-27; tests/test_kernels.py)."""
    path = os.path.join(PRE_MOVE, f"ck_{name}.pt")
    levels = torch.load(path, weights_only=True)["levels"]
    opt, _ = build(name, mlp(), seed=3, noise=dict(levels) if levels else None)
    opt.load_checkpoint(path)
    assert opt.round == 4
    opt.run(8, progress=False)
    want = torch.load(os.path.join(PRE_MOVE, "final_params.pt"), weights_only=True)[name]
    got = opt.params()
    assert list(got) == list(want)
    if name.startswith("clipd2p"):
        # ClipD2P's clip norms are taken in float64 since the commit after 047569c (they were the
        # float32 norm of the float32 gradient): the float32 iterates differ by rounding, no more
        assert all(torch.allclose(got[k], want[k], rtol=1e-6, atol=1e-7) for k in want), name
        assert not all(torch.equal(got[k], want[k]) for k in want), "the float64 norms changed nothing?"
    else:
        assert all(same_iterates(got[k], want[k]) for k in want), name
