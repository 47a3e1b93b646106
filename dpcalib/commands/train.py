"""``dpcalib train``: the reference optimizers on several local processes (torch.distributed).

Spawns ``--world-size`` processes on this machine (gloo on CPU).  DIFF2-GD / DP-GD: each process is
a client holding its shard of the data.  DP-SGD, DP-SRM, DiceSGD: data-parallel -- every process
holds the data, draws the same batch, computes the per-example terms of its share of it; the
clipped sums are all-reduced and rank 0 adds the noise once.  Data: synthetic data of a paper's
shape, or a local CSV prepared as in the DIFF2 paper; the calibration is the tight one for
(``--epsilon``, ``--delta``); rank 0 reports the metrics.  For several machines use ``torchrun``
(docs/how-to/distributed.md).
"""


from __future__ import annotations

from .algorithms import dumps
from .common import Parser, UsageError
from ..mechanisms.registry import lookup, names
from ..mechanisms.shape import POISSON

import argparse
import json
import os
import socket
import tempfile
import traceback


def _data_parallel() -> tuple:
    """The algorithms that run data-parallel on one dataset (the others: one client per process)."""
    from ..mechanisms.registry import names

    return names(train="data-parallel")


def _samplings() -> tuple:
    """The batch samplings of the data-parallel algorithms' mechanisms (``field_choices``), Poisson first."""
    out = {POISSON: None}
    for name in _data_parallel():
        out.update(dict.fromkeys(getattr(lookup(name).mechanism, "field_choices", {}).get("sampling", ())))
    return tuple(out)


def parser():
    """``dpcalib train``'s parser (a refusal is one line: :class:`~.common.UsageError`).

    Returns:
        The ``argparse`` parser.
    """
    p = Parser(prog="dpcalib train", description=__doc__.splitlines()[0].replace("``", ""),
               epilog="example:\n  dpcalib train diff2-gd --epsilon 3 --delta 1e-5 --rounds 200 --restart-interval 20 "
                      "--world-size 4", formatter_class=argparse.RawDescriptionHelpFormatter)
    from ..mechanisms.registry import names

    p.add_argument("algorithm", choices=names(train=True),
                   help="the algorithm (diff2-gd, dp-gd: one client per process; dp-sgd, dp-srm, dicesgd: data-parallel)")
    p.add_argument("--epsilon", type=float, required=True, help="target epsilon > 0")
    p.add_argument("--delta", type=float, required=True, help="target delta in (0, 1)")
    p.add_argument("--rounds", type=int, default=None,
                   help=f"rounds R (the steps of dp-sgd, dp-srm, dicesgd), an integer in [1, {MAX_TRAIN_ROUNDS:.0e}]; "
                        "required unless --sampling is shuffle or balls-in-bins")
    p.add_argument("--batch-size", type=int, default=None,
                   help="dp-sgd: expected Poisson batch B (q = B/N), the shuffled batch b, or the balls-in-bins "
                        "batch b (ceil(N/b) steps an epoch, N/(steps) records on average); dicesgd: B; dp-srm: b")
    p.add_argument("--b0", type=int, default=None, help="dp-srm: the first batch b0 (default 4 b)")
    p.add_argument("--sampling", choices=_samplings(), default=POISSON,
                   help="dp-sgd's batches: poisson (default), shuffle (each epoch a random permutation cut into "
                        "batches of --batch-size) or balls-in-bins (each epoch every record in one of ceil(N/b) steps, "
                        "chosen at random)")
    p.add_argument("--epochs", type=int, default=None,
                   help="dp-sgd --sampling shuffle or balls-in-bins: epochs E, an integer >= 1")
    p.add_argument("--restart-interval", type=int, default=1,
                   help="diff2-gd: rounds between restarts (the paper's T), an integer in [2, --rounds]; required "
                        "for diff2-gd (1 would make it dp-gd)")
    p.add_argument("--world-size", type=int, required=True,
                   help=f"local processes (clients of diff2-gd / dp-gd), an integer in [1, {max_world_size()}] "
                        "(4 per CPU core, at least 16; several machines: torchrun)")
    p.add_argument("--backend", choices=["gloo"], default="gloo", help="gloo (CPU); NCCL runs go through torchrun")
    p.add_argument("--data", default="california", help="a synthetic shape (california, gas_turbine, "
                   "blogfeedback) or the path of a numeric CSV whose last column is the target")
    p.add_argument("--hidden", type=int, default=10, help="hidden softplus units, an integer in [1, 4096] (default 10)")
    p.add_argument("--c1", type=float, default=1.0, help="clip norm C1 of the restart rounds (dp-sgd: C; dp-srm: the "
                   "Lipschitz clip; default 1)")
    p.add_argument("--c2", type=float, default=None, help="C2: the difference rounds clip at C2 ||x_r - x_(r-1)|| "
                   "(default 10); dp-srm: the step bound (default 1); dicesgd: the error clip (default 1)")
    p.add_argument("--lr", type=float, default=0.125, help="learning rate > 0 (default 0.125)")
    p.add_argument("--seed", type=int, default=None,
                   help="make the run reproducible: the seed of its data split, model, batches and noise, an "
                        "integer in [0, 4294967295]; anyone who knows it can regenerate the noise (default: fresh "
                        "operating-system entropy, shared only among the run's processes)")
    p.add_argument("--secure-mode", action="store_true",
                   help="draw the batches and the noise from a ChaCha20 generator, the noise on a fixed grid "
                        "(hardened against floating-point attacks; same eps)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds before a dead or hung peer stops the run, a number in (0, 86400] (default 60)")
    p.add_argument("--checkpoint", help="PATH: checkpoints PATH.rank<r> every --checkpoint-every rounds")
    p.add_argument("--checkpoint-every", type=int, default=50, help="rounds between checkpoints (default 50)")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--log-every", type=int, default=None, help="rounds between metrics rows (default R/100)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def _watch_parent(parent: int) -> None:
    """End this worker when the process that started it ends, however it ends (SIGKILL included):
    the kernel's parent-death signal where Linux offers it, and a thread that polls the parent."""
    import signal
    import threading
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)       # Ctrl-C is the parent's to handle (it ends us)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)    # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:                           # the parent ended before we got here
        os._exit(1)

    def watch():
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()


def _worker(rank: int, world: int, port: int, cfg: dict, out: str, parent: int | None = None) -> None:
    if parent is not None:
        _watch_parent(parent)
    from .. import optim as O
    from ..optim.algorithms import distributed as D

    try:
        D.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                             timeout_s=cfg["timeout"])
        data = _load(cfg)
        if cfg["algorithm"] in _data_parallel():
            opt, rep = _one_dataset(cfg, data, D, O)
        else:
            opt, rep = _clients(cfg, data, world, rank, O, D)
        if cfg["resume"]:
            opt.load_checkpoint(cfg["checkpoint"])
        opt.run(log_every=cfg["log_every"], progress=False, checkpoint=cfg["checkpoint"],
                checkpoint_every=cfg["checkpoint_every"] if cfg["checkpoint"] else None)
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"algorithm": cfg["algorithm"], "noise": {k: v for k, v in rep.noise.items() if v is not None},
                           "epsilon_spent": opt.epsilon_spent(), "delta": cfg["delta"], "metrics": opt.metrics}, f)
        D.shutdown()
    except D.DistributedRunError as exc:
        with open(f"{out}.err{rank}", "w") as f:
            f.write(str(exc))
        D.abandon(1)                             # the group cannot be torn down: a peer is gone
    except Exception as exc:  # noqa: BLE001 -- reported to the parent as one line
        with open(f"{out}.err{rank}", "w") as f:
            f.write(" ".join(str(exc).split()) or traceback.format_exc().splitlines()[-1])
        # the group is up (a refusal raises on every rank): an interpreter exit could abort inside gloo and
        # print "terminate called without an active exception" beside the one-line error
        D.abandon(2)


def _load(cfg):
    from .. import optim as O

    if os.path.exists(cfg["data"]):
        return O.data.load_csv(cfg["data"], skip_header=cfg["skip_header"], seed=cfg["init_seed"])
    return O.data.prepare(*O.data.synthetic(cfg["data"], seed=cfg["init_seed"]), seed=cfg["init_seed"])


def _model(cfg, d_in):
    import torch
    from torch import nn

    torch.manual_seed(cfg["init_seed"])
    return nn.Sequential(nn.Linear(d_in, cfg["hidden"]), nn.Softplus(), nn.Linear(cfg["hidden"], 1))


def train_run(cfg, *, n=None, world=None, n_min=None):
    """The run's shape (:class:`~dpcalib.mechanisms.shape.Run`), typed once from the command line --
    ``n`` records (data-parallel) or ``world`` processes of ``n_min`` records each (one client per
    process) -- and its mechanism, built from it (which validates the shape).

    Args:
        cfg: the run's configuration (``algorithm`` and the shape options).
        n: the records of a data-parallel run, or None.
        world: the clients (processes) of a one-client-per-process run, or None.
        n_min: the smallest client's records, or None.

    Returns:
        ``(mechanism, run)``.

    Raises:
        InputError: if the algorithm is unknown or the run's shape is out of range.
    """
    from ..mechanisms.shape import Run, Sampling

    entry = lookup(cfg["algorithm"])
    b = cfg["batch_size"]
    shape = dict(clip=cfg["c1"], clip2=cfg["c2"])
    if n is None:
        run = Run(None, cfg["rounds"], clients=world, n_min=n_min, restart_interval=cfg["restart_interval"], **shape)
    else:
        # the algorithm's own batches where the command line left Poisson, the default (dp-srm's: without
        # replacement)
        kind = cfg["sampling"] if cfg["sampling"] != POISSON else (entry.engine or (POISSON,))[0]
        run = Run.of(Sampling(kind, n, b), steps=cfg["rounds"], epochs=cfg["epochs"],
                     b0=cfg["b0"] if cfg["b0"] is not None else min(n, 4 * b), **shape)
    return entry.mechanism.from_run(run), run


def _optimizer(cfg, model, data, mech, rep, run, O, D):
    from ..optim.algorithms.registry import optimizer_class
    from ..optim.audit.probe import probe_defaults

    entry = lookup(cfg["algorithm"])
    # the run's clip norms by the optimizer's keywords; a second clip not given is the paper's (the probe's)
    clips = {"c1": run.clip, "clip": run.clip,
             "c2": run.clip2 if run.clip2 is not None else (probe_defaults(cfg["algorithm"]) or {}).get("c2")}
    kw = {keyword: clips[option] for option, keyword in entry.clips.items()}
    return D.on_ranks(optimizer_class(cfg["algorithm"]))(model, O.squared_loss, data, mech, rep, lr=cfg["lr"],
                                                         seed=cfg["seed"], secure_mode=cfg["secure_mode"], **kw)


def _one_dataset(cfg, data, D, O):
    x, y = data.train
    mech, run = train_run(cfg, n=x.shape[0])
    rep = mech.calibrate(cfg["epsilon"], cfg["delta"], method="tight")
    return _optimizer(cfg, _model(cfg, x.shape[1]), (x, y), mech, rep, run, O, D), rep


def _clients(cfg, data, world, rank, O, D):
    shard = data.shards(world)[rank]
    mech, run = train_run(cfg, world=world, n_min=data.n_min(world))
    rep = mech.calibrate(cfg["epsilon"], cfg["delta"], method="tight")
    return _optimizer(cfg, _model(cfg, shard[0].shape[1]), shard, mech, rep, run, O, D), rep


def run(a) -> int:
    """``dpcalib train ALGORITHM ...``: check the options and data, run ``--world-size`` local
    processes, print (or ``--json``) the noise, metrics and eps spent.

    Args:
        a: the parsed command line (:func:`parser`'s).

    Returns:
        The exit status, 0.

    Raises:
        UsageError: if an option, the data or the run's shape is not allowed, or a worker process
            failed (the message names each rank's error).
    """
    if a.world_size < 1:
        raise UsageError(f"--world-size={a.world_size} is not allowed: expected an integer >= 1")
    if a.resume and not a.checkpoint:
        raise UsageError("--resume is not allowed without --checkpoint PATH")
    entry = lookup(a.algorithm)
    if entry.train == "clients" and not _has(entry, "restart_interval") and a.restart_interval != 1:
        raise UsageError(f"--restart-interval={a.restart_interval} is not allowed for {a.algorithm}: expected 1")
    _check_shape_options(a)
    if _has(entry, "restart_interval") and a.restart_interval == 1:
        raise UsageError(f"--restart-interval=1 is not allowed for {a.algorithm}: every round would be a restart, "
                        "i.e. the run would be dp-gd (dpcalib train dp-gd), so give an interval >= 2 (the paper: "
                        "0.01 R)")
    import multiprocessing as mp

    from ..optim.data.datasets import SHAPES

    _check_before_spawning(a)
    if not os.path.exists(a.data) and a.data not in SHAPES:
        raise UsageError(f"--data={a.data!r} is not allowed: expected an existing CSV file or one of "
                         f"{sorted(SHAPES)}")
    if os.path.isdir(a.data):
        raise UsageError(f"--data={a.data!r} is not allowed: it is a folder; expected a CSV file")

    cfg = {k: getattr(a, k) for k in ("algorithm", "epsilon", "delta", "rounds", "restart_interval", "data", "hidden",
                                      "c1", "c2", "lr", "seed", "timeout", "checkpoint", "checkpoint_every",
                                      "resume", "log_every", "batch_size", "b0", "sampling", "epochs",
                                      "secure_mode")}
    # the train/test split and the initial model are data-independent and public in the analysis: the seed, or
    # 0 (so that --resume finds the same split); the batches and the noise are secret, the optimizer's own
    # streams (no --seed: fresh entropy drawn by rank 0 and shared inside the process group)
    cfg["init_seed"] = a.seed if a.seed is not None else 0
    cfg["skip_header"] = 0
    if os.path.exists(a.data):
        try:
            with open(a.data) as f:
                first = f.readline()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--data={a.data!r} is not allowed: it cannot be read as text ({exc})") from None
        cfg["skip_header"] = 0 if all(_is_number(t) for t in first.strip().split(",")) else 1
    # the data and the run's shape, checked here before spawning (the workers would refuse them
    # later, one per process, after seconds of start-up)
    data = _load_checked(cfg)
    n_records = data.train[0].shape[0]
    if a.algorithm in _data_parallel():
        if a.batch_size is not None and a.batch_size > n_records:
            raise UsageError(f"--batch-size={a.batch_size} is not allowed: expected an integer in [1, {n_records}] "
                            f"(the training split of --data={a.data!r} holds {n_records} records)")
        train_run(cfg, n=n_records)
    else:
        if n_records < a.world_size:
            raise UsageError(f"--world-size={a.world_size} is not allowed: expected at most {n_records} (one shard "
                            f"of --data={a.data!r} per client, {n_records} training records)")
        train_run(cfg, world=a.world_size, n_min=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        # a run stopped by Ctrl-C leaves the workers' semaphores to multiprocessing's resource tracker,
        # which would print a warning about them at exit: it is told not to (the run was stopped)
        os.environ.setdefault("PYTHONWARNINGS", "ignore::UserWarning:multiprocessing.resource_tracker")
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_worker, args=(r, a.world_size, port, cfg, out, os.getpid()), daemon=True)
                 for r in range(a.world_size)]
        try:
            for p in procs:
                p.start()
            for p in procs:
                p.join()
        finally:                 # Ctrl-C or any error here: no worker outlives the run
            for p in procs:
                if p.is_alive():
                    p.terminate()
            for p in procs:
                if p.pid is not None:
                    p.join(5)
                    if p.is_alive():
                        p.kill()
        errs = []
        for r in range(a.world_size):
            path = f"{out}.err{r}"
            if os.path.exists(path):
                with open(path) as f:
                    msg = f.read()
                msg = msg if msg.startswith("rank") else f"rank {r}: {msg}"
                if msg.split(": ", 1)[-1] not in [e.split(": ", 1)[-1] for e in errs]:
                    errs.append(msg)
        if errs or not os.path.exists(out):
            raise UsageError("the run stopped: " + ("; ".join(errs) if errs else
                                                   f"exit codes {[p.exitcode for p in procs]}"))
        with open(out) as f:
            res = json.load(f)
    if a.json:
        print(dumps(res))
        return 0
    print(f"algorithm   {res['algorithm']} on {a.world_size} process{'es' if a.world_size != 1 else ''} ({a.backend})")
    print("noise       " + ", ".join(f"{k}={v:.6g}" for k, v in res["noise"].items()))
    for m in res["metrics"]:
        print(f"round {m['round']:6d}  loss {m['loss']:.6g}  grad norm {m['grad_norm']:.6g}  eps {m['epsilon']:.6g}")
    print(f"spent       epsilon={res['epsilon_spent']:.6g} delta={res['delta']:g}")
    return 0


#: the most local processes (4 per core, at least 16): each is a Python process with torch (~300 MB)
def max_world_size() -> int:
    """The most local processes ``dpcalib train`` starts: 4 per core, at least 16.

    Returns:
        The largest allowed ``--world-size``.
    """
    return max(16, 4 * (os.cpu_count() or 1))


#: the most rounds a local run trains (each round runs the model on every process's share)
MAX_TRAIN_ROUNDS = 10 ** 7


def _load_checked(cfg):
    """The run's data, loaded in the parent: a file that is not a numeric table is refused naming
    --data, before any process starts."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # numpy's "empty input file" is said below, once
        try:
            return _load(cfg)
        except (ValueError, OSError, IndexError) as exc:
            msg = " ".join(str(exc).split())
            raise UsageError(f"--data={cfg['data']!r} is not allowed: expected a numeric CSV with at least two rows "
                            f"and two columns, the last one the target ({msg})") from None


def _check_before_spawning(a) -> None:
    """Every option a worker would refuse, refused here -- one line, exit 2, before any process
    starts (the workers' own checks stay: they guard the Python API)."""
    import math

    from ..accountant import validation as v

    v.positive(a.epsilon, "epsilon")
    v.delta(a.delta)
    for name, low, high in (("world_size", 1, max_world_size()), ("rounds", 1, MAX_TRAIN_ROUNDS),
                            ("epochs", 1, v.MAX_RUN_LENGTH), ("batch_size", 1, v.MAX_RECORDS),
                            ("b0", 1, v.MAX_RECORDS), ("hidden", 1, 4096), ("seed", 0, 2 ** 32 - 1),
                            ("restart_interval", 1, MAX_TRAIN_ROUNDS)):
        x = getattr(a, name)
        if x is not None and not low <= x <= high:
            raise UsageError(f"--{name.replace('_', '-')}={x!r} is not allowed: expected an integer in [{low}, {high}]"
                            + (" (local processes: 4 per CPU core, at least 16; several machines: torchrun)"
                               if name == "world_size" else ""))
    if a.timeout is not None and not (0 < a.timeout <= 86400):
        raise UsageError(f"--timeout={a.timeout!r} is not allowed: expected a number of seconds in (0, 86400]")
    for name in ("lr", "c1", "c2", "timeout"):
        x = getattr(a, name)
        if x is None:
            continue
        if not (x > 0) or math.isinf(x):
            raise UsageError(f"--{name.replace('_', '-')}={x!r} is not allowed: expected a finite number > 0")
    for name, low in (("hidden", 1), ("checkpoint_every", 1), ("log_every", 1)):
        x = getattr(a, name)
        if x is not None and x < low:
            raise UsageError(f"--{name.replace('_', '-')}={x!r} is not allowed: expected an integer >= {low}")
    if a.checkpoint:
        for r in range(a.world_size):           # what the workers write: PATH.rank<r>
            v.writable_file(f"{a.checkpoint}.rank{r}", "--checkpoint")
        if a.resume:
            missing = [f"{a.checkpoint}.rank{r}" for r in range(a.world_size)
                       if not os.path.exists(f"{a.checkpoint}.rank{r}")]
            if missing:
                raise UsageError(f"--resume is not allowed: no checkpoint {missing[0]!r}")


def _check_shape_options(a) -> None:
    """The options each kind of run takes (one line, before any process starts)."""
    if a.algorithm in _data_parallel():
        if a.batch_size is None:
            raise UsageError(f"--batch-size is required for {a.algorithm}")
        entry = lookup(a.algorithm)
        shuffles = _has(entry, "sampling")      # its mechanism accounts other samplings than Poisson
        accounted = getattr(entry.mechanism, "field_choices", {}).get("sampling", ())
        if a.sampling != POISSON and a.sampling not in accounted:
            raise UsageError(f"--sampling {a.sampling} is not allowed for {a.algorithm}: only "
                            f"{', '.join(n for n in names(train=True) if _has(lookup(n), 'sampling'))} "
                            f"has a {a.sampling} accountant")
        if shuffles and a.sampling != POISSON:
            if a.epochs is None or a.rounds is not None:
                raise UsageError(f"--sampling {a.sampling} takes --epochs E and not --rounds (the steps follow from N, "
                                "b, E)")
        elif a.rounds is None:
            raise UsageError(f"--rounds is required for {a.algorithm}")
        if a.restart_interval != 1:
            raise UsageError(f"--restart-interval is not allowed for {a.algorithm} (a DIFF2 option)")
        return
    if a.rounds is None:
        raise UsageError(f"--rounds is required for {a.algorithm}")
    for name in ("batch_size", "b0", "epochs"):
        if getattr(a, name) is not None:
            raise UsageError(f"--{name.replace('_', '-')} is not allowed for {a.algorithm}: one client per process, "
                            "full batch")
    if a.sampling != POISSON:
        raise UsageError(f"--sampling is not allowed for {a.algorithm}")


def _has(entry, field: str) -> bool:
    """Whether the algorithm's mechanism has the shape field ``field``."""
    import dataclasses

    return field in {f.name for f in dataclasses.fields(entry.mechanism)}


def _is_number(t: str) -> bool:
    try:
        float(t)
        return True
    except ValueError:
        return False
