"""Small configurations of every optimizer, shared by the optimizer and audit tests."""

import pytest
import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O

DELTA = 1e-5


def mlp(seed=0, d_in=4):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, 8), nn.Tanh(), nn.Linear(8, 1))


def data(n, seed=1, d_in=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    return x, torch.sin(x.sum(1)) + 0.1 * torch.randn(n, generator=g)


def shards(P, n):
    return [data(n, seed=20 + p) for p in range(P)]


def build(name, model, *, seed=0, record=True, rounds=None, noise=None, **extra):
    """(optimizer, calibration) for each algorithm at a small size (``noise``: noise levels to use
    instead of the calibration's, e.g. a checkpoint's own; ``extra``: more keywords of the optimizer,
    e.g. ``secure_mode=True``)."""
    if name == "dp-gd":
        mech = M.DPGD(rounds or 12, 3, 40)
        rep = mech.calibrate(2.0, DELTA)
        return O.DPGD(model, O.squared_loss, shards(3, 40), mech, noise or rep, C1=1.0, lr=0.1, seed=seed, record=record, **extra), rep
    if name == "diff2-gd":
        mech = M.DIFF2GD(rounds or 12, 4, 3, 40)
        rep = mech.calibrate(2.0, DELTA)
        return O.DIFF2GD(model, O.squared_loss, shards(3, 40), mech, noise or rep, C1=1.0, C2=3.0, lr=0.1, seed=seed,
                         record=record, **extra), rep
    if name == "diff2-bvr":
        mech = M.DIFF2BVR(rounds or 12, 4, 3, 40, 3, 8)
        rep = mech.calibrate(4.0, DELTA)
        return O.DIFF2BVR(model, O.squared_loss, shards(3, 40), mech, noise or rep, C1=1.0, C2=3.0, lr=0.05, seed=seed,
                          record=record, **extra), rep
    if name == "dp-sgd":
        mech = M.DPSGD(0.1, rounds or 12)
        rep = mech.calibrate(2.0, DELTA)
        return O.DPSGD(model, O.squared_loss, data(100), mech, noise or rep, C=1.0, lr=0.1, seed=seed, record=record, **extra), rep
    if name == "dp-srm":
        mech = M.DPSRM(100, rounds or 12, 20, 10, 1.0, 0.5, 0.2)
        rep = mech.calibrate(4.0, DELTA)
        return O.DPSRM(model, O.squared_loss, data(100), mech, noise or rep, lr=0.1, max_step=0.5, seed=seed,
                       record=record, **extra), rep
    if name in ("dicesgd", "dicesgd-adam"):
        mech = M.DiceSGD(100, 10, rounds or 12, C1=1.0, C2=0.1)
        rep = mech.calibrate(4.0, DELTA)
        opt = "adam" if name.endswith("adam") else "sgd"
        return O.DiceSGD(model, O.squared_loss, data(100), mech, noise or rep, lr=0.05, optimizer=opt, seed=seed,
                         record=record, **extra), rep
    if name == "dicesgd-auto":
        mech = M.DiceSGD(100, 10, rounds or 12, automatic=True)
        rep = mech.calibrate(4.0, DELTA)
        return O.DiceSGD(model, O.squared_loss, data(100), mech, noise or rep, lr=0.05, seed=seed, record=record, **extra), rep
    if name in ("clipd2p", "clipd2p-poisson"):
        rel = "add/remove" if name.endswith("poisson") else "replace-one"
        mech = M.ClipD2P(10, rounds or 12, rel)
        rep = mech.calibrate(8.0, DELTA)
        return O.ClipD2P(model, O.squared_loss, shards(5, 10), mech, noise or rep, C=1.0, lr=0.05, seed=seed,
                         record=record, graph="sgp", **extra), rep
    if name == "constd2p":
        mech = M.ConstD2P(10, rounds or 12, "replace-one")
        with pytest.warns(M.PaperConditionWarning):
            rep = mech.calibrate(8.0, DELTA)
        return O.ConstD2P(model, O.squared_loss, shards(5, 10), mech, noise or rep, G=1.0, lr=0.05, seed=seed,
                          record=record, **extra), rep
    if name == "adad2p":
        return O.AdaD2P(model, O.squared_loss, shards(5, 10), M.AdaD2P(10, rounds or 12), {"sigma": 0.5},
                        lr=0.05, seed=seed, record=record, **extra), None
    raise KeyError(name)


NAMES = ["dp-gd", "diff2-gd", "diff2-bvr", "dp-sgd", "dp-srm", "dicesgd", "dicesgd-adam", "dicesgd-auto",
         "clipd2p", "clipd2p-poisson", "constd2p", "adad2p"]
