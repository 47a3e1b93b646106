"""Adding an algorithm is a mechanism, a kernel and a registry entry (issue 67, acceptance 2): the
toy of tests/toy_algorithm.py, written from outside the package and touching no file of it, gets
calibrate / epsilon / report / probe / audit on the command line, the reference optimizer, the
engine (``make_private(algorithm=...)``) and a two-process data-parallel run."""

from __future__ import annotations

import json
import multiprocessing as mp
import socket

import pytest

torch = pytest.importorskip("torch")

from dpcalib.cli import main  # noqa: E402
from tests import toy_algorithm as T  # noqa: E402


@pytest.fixture
def toy():
    cls = T.register_toy()
    try:
        yield cls
    finally:
        T.unregister_toy()


def _run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 0, (argv, out.err)
    return out.out


def test_every_command_knows_the_toy(toy, capsys):
    shape = ["--sampling-rate", "0.25", "--steps", "6"]
    assert T.NAME in _run(["list"], capsys)
    cal = json.loads(_run(["calibrate", T.NAME, "--epsilon", "2", "--delta", "1e-5", *shape, "--json"], capsys))
    ref = json.loads(_run(["calibrate", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", *shape, "--json"], capsys))
    z = cal["noise"]["noise_multiplier"]
    assert cal["algorithm"] == T.NAME and z == ref["noise"]["noise_multiplier"]     # DP-SGD's releases
    eps = json.loads(_run(["epsilon", T.NAME, "--delta", "1e-5", *shape, "--noise-multiplier", repr(z), "--json"],
                          capsys))
    assert eps["epsilon"] == pytest.approx(cal["certified_epsilon"], rel=1e-9)
    assert "advantage" in _run(["report", T.NAME, "--delta", "1e-5", *shape, "--noise-multiplier", repr(z)], capsys)
    probe = json.loads(_run(["probe", T.NAME, "--epsilon", "2", "--delta", "1e-5", *shape, "--n", "200",
                             "--hidden", "4", "--seed", "0", "--no-progress", "--json"], capsys))
    assert 0.5 < probe["worst_ratio"] <= 1.0 + probe["tol"] and probe["exceeded"] == 0   # float32 rounding: tol
    audit = json.loads(_run(["audit", T.NAME, "--epsilon", "2", "--delta", "1e-5", *shape, "--one-run",
                             "--canaries", "200", "--seed", "0", "--no-progress", "--json"], capsys))
    assert audit["verdict"] == "consistent"


def test_the_reference_optimizer_runs_the_toy_kernel(toy):
    import dpcalib.optim as O

    x, y, mech, rep = T.setup()
    runs = {}
    for name, cls in (("toy", toy), ("dp-sgd", O.DPSGD)):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1).double()
        x0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        opt = cls(model, O.squared_loss, (x, y), mech, rep, C=1.0, lr=0.2, seed=5)
        opt.step()
        runs[name] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]) - x0
    # the same batch and noise (same seed), half the step
    torch.testing.assert_close(runs["toy"], 0.5 * runs["dp-sgd"], rtol=1e-12, atol=1e-15)


def test_the_engine_runs_the_toy(toy):
    from dpcalib.optim import PrivacyEngine

    x, y, mech, _ = T.setup()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).double()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=10)
    engine = PrivacyEngine()
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.2), data_loader=loader,
        noise_multiplier=1.3, max_grad_norm=1.0, epochs=1, algorithm=T.NAME)
    steps = 0
    for xb, yb in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
        steps += 1
    assert steps == 4 and type(optimizer.kernel).__name__ == "ToyKernel"
    assert engine.get_epsilon(1e-5) == pytest.approx(
        T.ToyMechanism(0.25, 4).epsilon(1e-5, 1.3).epsilon, rel=1e-9)


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_run_the_toy_as_one(toy, tmp_path):
    import dpcalib.optim as O

    ctx, port = mp.get_context("spawn"), _port()
    procs = [ctx.Process(target=T.run_rank, args=(r, 2, port, str(tmp_path / f"out{r}.pt"))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    x, y, mech, rep = T.setup()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).double()
    sim = toy(model, O.squared_loss, (x, y), mech, rep, C=1.0, lr=0.2, seed=5)
    sim.run(progress=False)
    ref = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    for r in range(2):
        out = torch.load(tmp_path / f"out{r}.pt", weights_only=True)
        torch.testing.assert_close(out["x"], ref, rtol=1e-6, atol=1e-12)
        assert out["eps"] == sim.epsilon_spent()
