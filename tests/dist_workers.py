"""Worker processes for tests/test_distributed.py (module-level so that 'spawn' can import them)."""

import os
import traceback

import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O
from dpcalib.optim.algorithms import distributed as D


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)).double()


def diff2_setup(P, rounds=8):
    g = torch.Generator().manual_seed(1)
    shards = [(torch.randn(12 + p, 3, generator=g, dtype=torch.float64),
               torch.randn(12 + p, generator=g, dtype=torch.float64)) for p in range(P)]
    mech = M.DIFF2GD(rounds, 3, P, 12)
    return shards, mech, mech.calibrate(2.0, 1e-5)


def dpgd_setup(P, rounds=6):
    shards, _, _ = diff2_setup(P)
    mech = M.DPGD(rounds, P, 12)
    return shards, mech, mech.calibrate(2.0, 1e-5)


def bvr_setup(P, rounds=7):
    g = torch.Generator().manual_seed(3)
    shards = [(torch.randn(12, 3, generator=g, dtype=torch.float64), torch.randn(12, generator=g, dtype=torch.float64))
              for _ in range(P)]
    mech = M.DIFF2BVR(rounds, 3, P, 12, 3, 4)
    return shards, mech, mech.calibrate(4.0, 1e-5)


def d2p_setup(n, relation="replace-one", iterations=7):
    g = torch.Generator().manual_seed(2)
    nodes = [(torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64))
             for _ in range(n)]
    mech = M.ClipD2P(6, iterations, relation)
    return nodes, mech, mech.calibrate(8.0, 1e-5)


def one_dataset_setup(kind):
    """(optimizer class name, data, mechanism, calibration, options) of the data-parallel parity runs."""
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(60, 3, generator=g, dtype=torch.float64), torch.randn(60, generator=g, dtype=torch.float64)
    if kind == "dpsgd":
        mech = M.DPSGD(0.2, 8)
        return "DPSGD", (x, y), mech, mech.calibrate(2.0, 1e-5), {"C": 1.0, "lr": 0.2}
    if kind == "dpsgd-shuffle":
        mech = M.DPSGD(sampling="shuffle", n=60, batch_size=13, epochs=2)
        return "DPSGD", (x, y), mech, mech.calibrate(4.0, 1e-5), {"C": 1.0, "lr": 0.2}
    if kind == "dpsrm":
        mech = M.DPSRM(60, 7, 12, 7, 1.0, 0.5, 0.2)
        return "DPSRM", (x, y), mech, mech.calibrate(4.0, 1e-5), {"lr": 0.2, "max_step": 0.5}
    mech = M.DiceSGD(60, 9, 8, C1=1.0, C2=0.5)
    return "DiceSGD", (x, y), mech, mech.calibrate(4.0, 1e-5), {"lr": 0.1}


ONE_DATASET = ("dpsgd", "dpsgd-shuffle", "dpsrm", "dicesgd")


class _Watched:
    """A loader that notes the targets of every batch it yields (which records this rank saw)."""

    def __init__(self, loader, seen):
        self.loader, self.seen = loader, seen

    def __iter__(self):
        for xb, yb in self.loader:
            self.seen.append(yb.reshape(-1).clone())
            yield xb, yb


def engine_ckpt(rank, outdir, opts):
    """The engine on ranks with a zero-gradient loss (the direction is the noise / B): ``steps`` steps, a
    checkpoint per rank, ``more`` steps; or, with ``resume_from=r``, every rank loads rank r's checkpoint into a
    fresh engine and runs ``more`` steps.  Saves each step's direction (``out{rank}.pt``)."""
    from tests import engine_setup as S

    x, y = S.data()
    net = S.model()
    g = None if opts.get("loader_seed") is None else torch.Generator().manual_seed(opts["loader_seed"])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=S.B, generator=g)
    engine = O.PrivacyEngine(secure_mode=opts.get("secure_mode", False))
    m, opt, loader = engine.make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=1.0),
                                         data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0, epochs=2,
                                         distributed=True, seed=opts.get("seed"))
    directions = []
    opt.attach_step_hook(lambda o: directions.append(torch.cat([p.grad.reshape(-1).clone() for p in net.parameters()])))
    ck = os.path.join(outdir, "ck{}.pt")
    if opts.get("resume_from") is not None:
        engine.load_checkpoint(path=ck.format(opts["resume_from"]), module=m, optimizer=opt)
        todo = [opts["more"]]
    else:
        todo = [opts["steps"], opts["more"]]
    done = 0
    for i, count in enumerate(todo):
        k = 0
        while k < count:
            for xb, yb in loader:
                opt.zero_grad()
                (0.0 * nn.functional.mse_loss(m(xb), yb)).backward()
                opt.step()
                k += 1
                if k == count:
                    break
        done += k
        if i == 0 and len(todo) == 2:
            engine.save_checkpoint(path=ck.format(rank), module=m, optimizer=opt)
    torch.save({"directions": torch.stack(directions), "eps": engine.get_epsilon(1e-5),
                "noise_state": opt.privatizer.generator.get_state()}, os.path.join(outdir, f"out{rank}.pt"))


def run(kind, rank, world, port, outdir, opts):
    """kind: 'diff2' | 'd2p'.  opts: rounds (how many to run now), resume, checkpoint, die_at, graph, relation."""
    try:
        D.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                             timeout_s=opts.get("timeout", 20))
        if kind == "engine-ckpt":
            engine_ckpt(rank, outdir, opts)
            D.shutdown()
            return
        if kind.startswith("engine-"):
            from tests import engine_setup as S

            algorithm = kind[len("engine-"):]
            x, y = S.data()
            net = S.model()
            engine = O.PrivacyEngine(secure_mode=opts.get("secure_mode", False))
            engine, m, opt, crit, loader = S.private(algorithm, net, x, y, distributed=True, engine=engine,
                                                     **({"seed": opts["seed"]} if "seed" in opts else {}))
            batches = []
            S.loop(m, opt, crit, _Watched(loader, batches))
            torch.save({"x": S.flat(net), "eps": engine.get_epsilon(1e-5), "batches": batches,
                        "data_state": loader.batch_sampler.generator.get_state()},
                       os.path.join(outdir, f"out{rank}.pt"))
            D.shutdown()
            return
        if kind in ONE_DATASET:
            cls, data, mech, rep, kw = one_dataset_setup(kind)
            opt = getattr(D, "Distributed" + cls)(model(), O.squared_loss, data, mech, rep, seed=5, **kw)
        elif kind == "diff2":
            shards, mech, rep = diff2_setup(world)
            opt = D.DistributedDIFF2GD(model(), O.squared_loss, shards[rank], mech, rep, C1=1.0, C2=2.0, lr=0.2,
                                       seed=5)
        elif kind == "dpgd":
            shards, mech, rep = dpgd_setup(world)
            opt = D.DistributedDIFF2GD(model(), O.squared_loss, shards[rank], mech, rep, C1=1.0, lr=0.2, seed=5)
        elif kind == "bvr":
            shards, mech, rep = bvr_setup(world)
            opt = D.DistributedDIFF2BVR(model(), O.squared_loss, shards[rank], mech, rep, C1=1.0, C2=2.0, lr=0.2,
                                        seed=5)
        elif kind == "ada":
            nodes, _, _ = d2p_setup(world)
            opt = D.DistributedAdaD2P(model(), O.squared_loss, nodes[rank], M.AdaD2P(6, 7), {"sigma": 0.3}, lr=0.2,
                                      seed=5, graph=opts.get("graph", "paper"))
        else:
            nodes, mech, rep = d2p_setup(world, opts.get("relation", "replace-one"))
            opt = D.DistributedClipD2P(model(), O.squared_loss, nodes[rank], mech, rep, C=1.0, lr=0.2, seed=5,
                                       graph=opts.get("graph", "paper"))
        if opts.get("resume"):
            opt.load_checkpoint(os.path.join(outdir, "ck"))
        n = opts.get("rounds")
        for _ in range(opt.total_rounds - opt.round if n is None else n):
            opt.step()
            if opts.get("die_at") == (rank, opt.round):
                os._exit(3)                      # a worker crashes mid-run
        if opts.get("checkpoint"):
            opt.save_checkpoint(os.path.join(outdir, "ck"))
        state = opt.x_local if kind in ("d2p", "ada") else torch.cat([p.detach().reshape(-1) for p in opt.model.parameters()])
        torch.save({"x": state, "w": getattr(opt, "w_local", None), "eps": opt.epsilon_spent(),
                    "metrics": opt.evaluate()}, os.path.join(outdir, f"out{rank}.pt"))
        D.shutdown()                             # barrier, then destroy_process_group
    except D.DistributedRunError as exc:
        with open(os.path.join(outdir, f"err{rank}.txt"), "w") as f:
            f.write(str(exc))
        D.abandon(1)                             # the group cannot be torn down: a peer is gone
    except Exception:
        with open(os.path.join(outdir, f"err{rank}.txt"), "w") as f:
            f.write(traceback.format_exc())
        # not sys.exit: a refusal raised on every rank leaves the group up, and an interpreter exit that tears it
        # down while the peer's is going away can abort inside gloo (exit -6, "terminate called without an active
        # exception") instead of exiting 2 -- seen once in CI on the per-rank seed refusal
        D.abandon(2)
