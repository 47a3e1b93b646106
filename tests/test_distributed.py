"""Multi-process runs on torch.distributed (gloo, localhost): same iterates as the one-process
simulation, a dead worker stops the others with a clear error, distributed resume is exact."""

import multiprocessing as mp
import os
import socket
import time

import pytest
import torch

import dpcalib.optim as O
from tests import dist_workers as W

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed unavailable")


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(kind, world, outdir, opts=None, per_rank=None, wait=120):
    """Start ``world`` worker processes and return their exit codes.  A worker still alive after
    ``wait`` seconds (a hang) is killed and reads -9: hangs fail by a generous timeout, never by a
    wall-clock assertion."""
    ctx = mp.get_context("spawn")
    port = _port()
    procs = []
    for r in range(world):
        o = dict(opts or {})
        if per_rank:
            o.update(per_rank.get(r, {}))
        p = ctx.Process(target=W.run, args=(kind, r, world, port, str(outdir), o))
        p.start()
        procs.append(p)
    t0 = time.monotonic()
    for p in procs:
        p.join(max(1.0, wait - (time.monotonic() - t0)))
    for p in procs:
        if p.is_alive():
            p.kill()
    return [p.exitcode for p in procs]


def outputs(outdir, world):
    return [torch.load(os.path.join(outdir, f"out{r}.pt"), weights_only=True) for r in range(world)]


def errors(outdir, world):
    return {r: open(os.path.join(outdir, f"err{r}.txt")).read() for r in range(world)
            if os.path.exists(os.path.join(outdir, f"err{r}.txt"))}


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("algorithm", ["dp-sgd", "dp-srm"])      # (DiceSGD: the same transport, sums and release)
def test_the_engines_loop_on_two_processes_equals_the_one_process_loop(tmp_path, algorithm):
    """dpcalib.optim.PrivacyEngine(distributed=True) under gloo: each rank runs the user's loop on its share of
    every logical batch, the per-record terms are summed over the ranks, the noise is drawn once."""
    from tests import engine_setup as S

    codes = launch("engine-" + algorithm, 2, tmp_path)
    assert codes == [0, 0], errors(tmp_path, 2)
    x, y = S.data()
    net = S.model()
    engine, m, opt, crit, loader = S.private(algorithm, net, x, y)
    S.loop(m, opt, crit, loader)
    for out in outputs(tmp_path, 2):
        torch.testing.assert_close(out["x"], S.flat(net), rtol=1e-6, atol=1e-12)
        assert out["eps"] == engine.get_epsilon(1e-5)


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "secure"])
def test_the_engine_on_two_processes_without_a_seed_shares_fresh_streams_inside_the_group(tmp_path, secure):
    """No seed: rank 0 draws the root and broadcasts it, so both ranks draw the same batches (their data
    streams are in the same state) and hold the same iterate; a second run draws other batches and noise."""
    runs = []
    for k in range(2 if not secure else 1):
        d = tmp_path / f"run{k}"
        d.mkdir()
        codes = launch("engine-dp-sgd", 2, d, opts={"seed": None, "secure_mode": secure})
        assert codes == [0, 0], errors(d, 2)
        outs = outputs(d, 2)
        assert torch.equal(outs[0]["data_state"], outs[1]["data_state"])
        assert torch.equal(outs[0]["x"], outs[1]["x"])
        assert outs[0]["eps"] == outs[1]["eps"]
        runs.append(outs)
    if not secure:
        assert not torch.equal(runs[0][0]["data_state"], runs[1][0]["data_state"])
        assert not torch.equal(runs[0][0]["x"], runs[1][0]["x"])
    else:
        assert runs[0][0]["data_state"].numel() == 48          # the ChaCha20 generator's state


@pytest.mark.parametrize("kind,world", [("dpsgd", 2), ("dpsgd-shuffle", 3), ("dpsrm", 3), ("dicesgd", 2)])
def test_one_dataset_optimizers_data_parallel_match_the_one_process_run(tmp_path, kind, world):
    """DP-SGD (Poisson and shuffled), DP-SRM, DiceSGD: each batch's records split over the ranks, the clipped
    sums all-reduced, the noise added once -- the iterates of the one-process run (float64, 1e-6) and its eps."""
    codes = launch(kind, world, tmp_path)
    assert codes == [0] * world, errors(tmp_path, world)
    cls, data, mech, rep, kw = W.one_dataset_setup(kind)
    sim_model = W.model()
    sim = getattr(O, cls)(sim_model, O.squared_loss, data, mech, rep, seed=5, **kw)
    sim.run(progress=False)
    ref = _flat(sim_model)
    for out in outputs(tmp_path, world):
        torch.testing.assert_close(out["x"], ref, rtol=1e-6, atol=1e-12)
        assert out["eps"] == sim.epsilon_spent()
        assert out["metrics"]["loss"] == pytest.approx(sim.evaluate()["loss"], rel=1e-9)


def test_diff2_gd_on_three_processes_matches_the_simulation(tmp_path):
    codes = launch("diff2", 3, tmp_path)
    assert codes == [0, 0, 0], errors(tmp_path, 3)
    shards, mech, rep = W.diff2_setup(3)
    sim_model = W.model()
    sim = O.DIFF2GD(sim_model, O.squared_loss, shards, mech, rep, C1=1.0, C2=2.0, lr=0.2, seed=5)
    sim.run(progress=False)
    ref = _flat(sim_model)
    for out in outputs(tmp_path, 3):
        torch.testing.assert_close(out["x"], ref, rtol=1e-6, atol=1e-12)
        assert out["eps"] == pytest.approx(sim.epsilon_spent(), rel=1e-12)
        assert out["metrics"]["loss"] == pytest.approx(sim.evaluate()["loss"], rel=1e-6)


def test_dp_gd_on_two_processes_matches_the_simulation_and_spends_its_calibrated_epsilon(tmp_path):
    codes = launch("dpgd", 2, tmp_path)
    assert codes == [0, 0], errors(tmp_path, 2)
    shards, mech, rep = W.dpgd_setup(2)
    sim_model = W.model()
    sim = O.DPGD(sim_model, O.squared_loss, shards, mech, rep, C1=1.0, lr=0.2, seed=5)
    sim.run(progress=False)
    for out in outputs(tmp_path, 2):
        torch.testing.assert_close(out["x"], _flat(sim_model), rtol=1e-6, atol=1e-12)
        # the calibration's delta travels with the report: eps spent at the end is the target
        assert out["eps"] == pytest.approx(sim.epsilon_spent(), rel=1e-12)
        assert out["eps"] == pytest.approx(2.0, rel=1e-3)


def test_diff2_bvr_on_three_processes_matches_the_simulation(tmp_path):
    codes = launch("bvr", 3, tmp_path)
    assert codes == [0, 0, 0], errors(tmp_path, 3)
    shards, mech, rep = W.bvr_setup(3)
    sim_model = W.model()
    sim = O.DIFF2BVR(sim_model, O.squared_loss, shards, mech, rep, C1=1.0, C2=2.0, lr=0.2, seed=5)
    sim.run(progress=False)
    for out in outputs(tmp_path, 3):
        torch.testing.assert_close(out["x"], _flat(sim_model), rtol=1e-6, atol=1e-12)
        assert out["eps"] == pytest.approx(sim.epsilon_spent(), rel=1e-12)


@pytest.mark.parametrize("graph,relation,world", [("paper", "replace-one", 4), ("sgp", "add/remove", 3)])
def test_clipd2p_on_several_processes_matches_the_simulation(tmp_path, graph, relation, world):
    codes = launch("d2p", world, tmp_path, {"graph": graph, "relation": relation})
    assert codes == [0] * world, errors(tmp_path, world)
    nodes, mech, rep = W.d2p_setup(world, relation)
    sim = O.ClipD2P(W.model(), O.squared_loss, nodes, mech, rep, C=1.0, lr=0.2, seed=5, graph=graph)
    sim.run(progress=False)
    for r, out in enumerate(outputs(tmp_path, world)):
        torch.testing.assert_close(out["x"], sim.X[r], rtol=1e-6, atol=1e-12)
        assert float(out["w"]) == pytest.approx(float(sim.w[r]))


def test_adad2p_on_three_processes_matches_the_simulation(tmp_path):
    import dpcalib.mechanisms as M

    codes = launch("ada", 3, tmp_path)
    assert codes == [0, 0, 0], errors(tmp_path, 3)
    nodes, _, _ = W.d2p_setup(3)
    sim = O.AdaD2P(W.model(), O.squared_loss, nodes, M.AdaD2P(6, 7), {"sigma": 0.3}, lr=0.2, seed=5)
    sim.run(progress=False)
    for r, out in enumerate(outputs(tmp_path, 3)):
        torch.testing.assert_close(out["x"], sim.X[r], rtol=1e-6, atol=1e-12)
        assert out["eps"] == float("inf")


def test_a_dead_worker_stops_the_others_with_a_clear_error(tmp_path):
    # the survivors notice within the process group's 10 s timeout; 90 s bounds a silent hang
    codes = launch("diff2", 3, tmp_path, {"timeout": 10}, per_rank={2: {"die_at": (2, 3)}}, wait=90)
    assert codes[2] == 3
    assert codes[0] == 1 and codes[1] == 1
    errs = errors(tmp_path, 3)
    for r in (0, 1):
        assert "peer process died" in errs[r] and f"rank {r}" in errs[r]


@pytest.mark.slow
def test_distributed_resume_equals_an_uninterrupted_run(tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    full.mkdir()
    part.mkdir()
    codes = launch("diff2", 2, full)
    assert codes == [0, 0], errors(full, 2)
    codes = launch("diff2", 2, part, {"rounds": 3, "checkpoint": True})
    assert codes == [0, 0], errors(part, 2)
    codes = launch("diff2", 2, part, {"resume": True})
    assert codes == [0, 0], errors(part, 2)
    for a, b in zip(outputs(full, 2), outputs(part, 2)):
        assert torch.equal(a["x"], b["x"])


def test_dpcalib_train_spawns_the_clients_and_matches_the_simulation(capsys):
    import json

    import dpcalib.mechanisms as M
    from dpcalib.cli import main
    from torch import nn

    rc = main(["train", "diff2-gd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "12", "--restart-interval", "4",
               "--world-size", "2", "--log-every", "12", "--json", "--seed", "0"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["epsilon_spent"] <= 3.0 + 1e-9
    # the same run in one process
    data = O.data.prepare(*O.data.synthetic("california", seed=0), seed=0)
    mech = M.DIFF2GD(12, 4, 2, data.n_min(2))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 10), nn.Softplus(), nn.Linear(10, 1))
    sim = O.DIFF2GD(model, O.squared_loss, data.shards(2), mech, mech.calibrate(3.0, 1e-5), C1=1.0, C2=10.0,
                    lr=0.125, seed=0)
    sim.run(progress=False, log_every=12)
    assert res["metrics"][-1]["loss"] == pytest.approx(sim.metrics[-1]["loss"], rel=1e-4)
    assert res["metrics"][-1]["grad_norm"] == pytest.approx(sim.metrics[-1]["grad_norm"], rel=1e-3)


def test_dpcalib_train_runs_dp_sgd_data_parallel_as_one_process_would(capsys):
    import json

    import dpcalib.mechanisms as M
    from dpcalib.cli import main
    from torch import nn

    rc = main(["train", "dp-sgd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "8", "--batch-size", "256",
               "--world-size", "2", "--log-every", "8", "--json", "--seed", "0"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["epsilon_spent"] <= 3.0 + 1e-9
    data = O.data.prepare(*O.data.synthetic("california", seed=0), seed=0)
    x, y = data.train
    mech = M.DPSGD(256 / x.shape[0], 8)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 10), nn.Softplus(), nn.Linear(10, 1))
    sim = O.DPSGD(model, O.squared_loss, (x, y), mech, mech.calibrate(3.0, 1e-5), C=1.0, lr=0.125, seed=0)
    sim.run(progress=False, log_every=8)
    assert res["epsilon_spent"] == sim.epsilon_spent()
    assert res["metrics"][-1]["loss"] == pytest.approx(sim.metrics[-1]["loss"], rel=1e-4)


@pytest.mark.parametrize("argv, needle", [
    (["train", "dp-sgd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "5", "--world-size", "2"], "--batch-size"),
    (["train", "dp-sgd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "5", "--batch-size", "9", "--sampling",
      "shuffle", "--world-size", "2"], "--epochs"),
    (["train", "dp-srm", "--epsilon", "3", "--delta", "1e-5", "--rounds", "5", "--batch-size", "9", "--sampling",
      "shuffle", "--world-size", "2"], "--sampling shuffle is not allowed"),
    (["train", "diff2-gd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "5", "--batch-size", "9",
      "--world-size", "2"], "--batch-size is not allowed"),
    (["train", "diff2-gd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "5", "--world-size", "0"], "--world-size=0"),
    (["train", "sgd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "5", "--world-size", "2"], "invalid choice"),
    (["train", "dp-gd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "5", "--world-size", "2", "--resume"],
     "--resume"),
])
def test_dpcalib_train_errors_are_one_line(argv, needle, capsys):
    from dpcalib.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
