"""A toy algorithm added from outside the package, as a user would: a mechanism, a kernel and a
registry entry, nothing else (tests/test_toy_algorithm.py checks that it gets every command, the
reference optimizer, the engine and a two-process run).

The toy is DP-SGD with a damped step: the same releases (so the same privacy), halved after the
release (post-processing), so that both drivers step half as far."""

from __future__ import annotations

import dataclasses

import dpcalib.mechanisms as M
from dpcalib.mechanisms import REGISTRY, Algorithm, register

NAME = "toy-sgd"


@dataclasses.dataclass(frozen=True)
class ToyMechanism(M.DPSGD):
    """DP-SGD's run and releases under the toy's name."""

    name = NAME


def _classes():
    """The torch side (kernel, optimizer), built on first use so that the mechanism needs no torch."""
    import dpcalib.optim as O
    from dpcalib.optim.algorithms.kernels import DPSGDKernel

    class ToyKernel(DPSGDKernel):
        """DP-SGD's release, halved once released."""

        name = NAME

        def step(self, queries, release, round, first=False):
            noisy, kind = super().step(queries, release, round, first)
            return 0.5 * noisy, kind

    class ToySGD(O.DPSGD):
        """The reference optimizer: DP-SGD's driver running the toy kernel."""

        name = NAME
        kernel_class = ToyKernel

    return ToyKernel, ToySGD


def register_toy():
    """Register the toy (its algorithm, then its optimizer); returns the optimizer class."""
    from dpcalib.optim import register_optimizer

    register(Algorithm(
        NAME, ToyMechanism, "a test: DP-SGD with a damped step", ("one-run",), train="data-parallel",
        clips={"clip": "C"}, engine=("poisson",)))
    _, cls = _classes()
    return register_optimizer(NAME, cls)


def unregister_toy():
    REGISTRY.pop(NAME, None)


def run_rank(rank, world, port, out):
    """One process of a two-process data-parallel run of the toy (spawned: registers it itself)."""
    import torch

    import dpcalib.optim as O
    from dpcalib.optim.algorithms import distributed as D
    from dpcalib.optim.algorithms.registry import optimizer_class

    register_toy()
    D.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout_s=30)
    x, y, mech, rep = setup()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).double()
    opt = D.on_ranks(optimizer_class(NAME))(model, O.squared_loss, (x, y), mech, rep, C=1.0, lr=0.2, seed=5)
    opt.run(progress=False)
    torch.save({"x": torch.cat([p.detach().reshape(-1) for p in model.parameters()]),
                "eps": opt.epsilon_spent()}, out)
    D.shutdown()


def setup():
    """The toy run's data, mechanism and calibration (float64)."""
    import torch

    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 4, generator=g, dtype=torch.float64)
    y = torch.sin(x.sum(1))
    mech = ToyMechanism(0.25, 6)
    return x, y, mech, mech.calibrate(2.0, 1e-5)
