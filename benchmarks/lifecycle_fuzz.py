"""Lifecycle fuzz of the private runs: random programs of steps, checkpoints and resumes.

Issue 72 (build item 7).  A *program* is one run configuration and a list of operations on it:

* ``("step", k)``: ``k`` private steps of the live session (the user's loop: a batch of the loader,
  ``zero_grad``, the loss's backward, ``optimizer.step()``; or ``k`` rounds of a reference optimizer);
* ``("save", name, with_loader)``: ``save_checkpoint`` of the live session to the file ``name``
  (``data_loader=`` passed or not);
* ``("load", name, with_loader)``: a FRESH engine (``make_private`` with the same configuration) or a
  fresh reference optimizer, ``load_checkpoint`` of ``name`` (``data_loader=`` passed or not); it
  becomes the live session.  Loading a file a second time is a *fork*.

The configurations: the engine (:class:`dpcalib.optim.PrivacyEngine`: DP-SGD on Poisson, shuffled,
balls-in-bins or the loader's own batches -- the user's ``DataLoader(shuffle=..., generator=...)``,
DiceSGD, DP-SRM) on 1 rank or 2 (gloo, ``distributed=True``; rank 0 writing one file or every rank its
own), and every reference-optimizer family (DP-SGD Poisson / shuffled / balls-in-bins, DP-GD,
DIFF2-GD, DIFF2-BVR, DP-SRM, DiceSGD SGD / Adam / automatic, ClipD2P replace-one / add-remove,
ConstD2P, AdaD2P) driven by :class:`dpcalib.optim.run.runner.Runner`, each with a recording user
:class:`~dpcalib.optim.data.sampling.Sampler` (the one-dataset families also data-parallel on 2 ranks,
``Distributed*``, each rank its own checkpoint); ``secure_mode`` on and off; seeded and unseeded.

Every program is checked (the *checks*, each counted by name):

``shared-noise``
    No two releases of all the sessions of a program -- one lineage, its resumes, the forks of one
    file, the original continuation after a save -- share a noise draw: equal, or ``|cos| > 0.99``
    (every release has 19 to 32 coordinates; two independent Gaussians in 16 or more dimensions come
    so close with probability below 1e-13).  A seeded program's
    releases of the same round in two sessions are exempt (they are meant to be equal).  The engine's
    noise is recovered exactly: the model's loss is ``0 * output.sum()``, so every clipped sum is 0 and
    the step hook's direction is noise / normaliser (DP-SRM: minus the public momentum
    ``(1 - gamma) v^{t-1}``); a reference optimizer records its draws (``record=True``).
``record-twice-step`` / ``record-twice-epoch`` / ``batch-size``
    The dataset carries each record's index: a record enters a step's release at most once, summed
    over the ranks; with an epoch-wise sampler (shuffled, balls-in-bins, the loader's own) at most once
    per pass along the lineage (a pass is the loader's length in batches, or ends earlier where the loop
    begins a new iteration of the loader; it continues through a load only when both the save and the
    load passed ``data_loader=``); a fixed-size sample (DP-SRM) holds ``b0`` records at round 1 and
    ``b`` after, resumed or not.
``epsilon-resume``
    ``get_epsilon`` at the end of each session equals that of an UNINTERRUPTED run of the same
    configuration and the same steps (one engine, no checkpoint; its loader restarted where a load
    started a new pass).  Reference optimizers: ``epsilon_spent``.
``seeded-bit-exact``
    A seeded session's releases (directions) and parameters equal the uninterrupted seeded run's, bit
    for bit; its batches too where every load of its lineage continued the loader's pass (a loader
    restarted without ``data_loader=`` starts from the seed's first pass: not the uninterrupted one).
    The uninterrupted run is one process: a 2-rank run's noise must be its noise (a secure release to
    rounding: its recorded noise is the release minus a sum added in another order), its batches its
    batches; a data-parallel reference optimizer's parameters are not compared (rounding).
``fork-warning``
    Loading one seeded checkpoint a second time in a process warns (a ``UserWarning``: the
    continuations share their noise).
``ranks-disagree`` / ``seed-refusal``
    On 2 ranks both hold the same releases and epsilon, and their shares form one logical batch
    (disjoint, sizes differing by at most one; Poisson and balls-in-bins shares interleave in ascending
    order); a data-parallel reference optimizer's ranks draw the same batches and hold the same
    parameters.  Per-rank different seeds are refused (``InputError``) on every rank.
``error``
    Any other exception.

    python -m benchmarks.lifecycle_fuzz --programs 5000 [--seed 0] [--ranks 1|2|both] [--show 5] [--shrink 3]

prints ``N programs, K failures``, the failures by check and the first failing programs (configuration
and op list; the first ``--shrink`` of them also shrunk to a minimal op list failing the same check).
The CI slice is tests/test_lifecycle_fuzz.py; figures in benchmarks/results/lifecycle_fuzz.md.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter

import torch
from torch import nn

DELTA = 1e-5
COS = 0.99                      # |cos| above this: one noise draw shared ...
COS_DIM = 16                    # ... in this many dimensions or more (a false alarm: < 1e-13 a pair)
MAX_ROUNDS = 8
CHECKS = ("shared-noise", "record-twice-step", "record-twice-epoch", "batch-size", "epsilon-resume",
          "seeded-bit-exact", "fork-warning", "ranks-disagree", "seed-refusal", "error")
ENGINE_SAMPLINGS = {"dp-sgd": ("poisson", "shuffle", "balls-in-bins", "loader"), "dicesgd": ("poisson",),
                    "dp-srm": ("wor",)}
EPOCH_WISE = ("shuffle", "balls-in-bins", "loader")
REFERENCE = ("dp-sgd", "dp-sgd-shuffle", "dp-sgd-bins", "dp-gd", "diff2-gd", "diff2-bvr", "dp-srm", "dicesgd",
             "dicesgd-adam", "dicesgd-auto", "clipd2p", "clipd2p-poisson", "constd2p", "adad2p")
#: the reference families run data-parallel on two ranks (``Distributed*``: one dataset, the batch shared out)
DATA_PARALLEL = ("dp-sgd", "dp-sgd-shuffle", "dp-sgd-bins", "dp-srm", "dicesgd", "dicesgd-adam", "dicesgd-auto")


# ---------------------------------------------------------------------------------------------
# programs
# ---------------------------------------------------------------------------------------------


def make_program(i: int, seed: int, ranks: str = "both") -> dict:
    """Program ``i`` of the fuzz seeded by ``seed`` (the same program every time).

    Args:
        i: the program's index, >= 0.
        seed: the fuzz seed.
        ranks: ``"1"`` (one process), ``"2"`` (two gloo ranks) or ``"both"`` (programs 10, 25, 40, ... on two
            ranks: one in 15; of those, every third -- 40, 85, ... -- a reference optimizer, and 10, 70, 190,
            ... (every fourth of the others) gives each rank its own seed).

    Returns:
        The program: a dict of its configuration and its ``ops``.
    """
    rng = random.Random(f"lifecycle:{seed}:{i}")
    world = 2 if ranks == "2" else 1 if ranks == "1" else (2 if i % 15 == 10 else 1)
    j = i // 15
    p = {"i": i, "fuzz_seed": seed, "world": world, "secure": rng.random() < 0.3,
         "seed": None if rng.random() < 0.5 else rng.randrange(2 ** 31), "data_seed": rng.randrange(2 ** 31)}
    p["accountant"] = rng.choice(("rdp",) * 7 + ("best",))
    p["rounds"] = rng.randint(4, MAX_ROUNDS)
    if world == 2:
        engine = j % 3 != 2 if ranks == "both" else rng.random() < 0.7
    else:
        engine = rng.random() < 0.6
    if engine:
        p["driver"] = "engine"
        p["algorithm"] = rng.choice(("dp-sgd", "dp-sgd", "dicesgd", "dp-srm"))
        samplings = ENGINE_SAMPLINGS[p["algorithm"]]
        if world == 2:
            samplings = tuple(s for s in samplings if s != "loader")   # the loader's own: one process only
        p["sampling"] = rng.choice(samplings)
        p["n"] = rng.randint(16, 64)
        p["batch"] = rng.randint(3, max(3, p["n"] // 3))
        p["b0"] = rng.choice((p["batch"], rng.randint(2, p["batch"] + 4)))
        p["d_in"] = rng.randint(4, 7)
        p["optimizer"] = rng.choice(("sgd", "momentum", "adam"))
        p["level"] = rng.uniform(0.5, 2.0)
        p["momentum"] = rng.choice((0.2, 0.5))
        p["loader_shuffle"] = rng.random() < 0.7
        p["loader_generator"] = rng.randrange(2 ** 31) if rng.random() < 0.25 else None
        if world == 2:
            p["shared_file"] = rng.random() < 0.5
            # another seed on each rank: refused
            p["rank_seeds"] = j % 4 == 0 if ranks == "both" else rng.random() < 0.1
            if p["rank_seeds"] and p["seed"] is None:
                p["seed"] = rng.randrange(2 ** 31)
    else:
        p["driver"] = "reference"
        p["family"] = rng.choice(REFERENCE if world == 1 else DATA_PARALLEL)
    p["ops"] = _ops(rng, p["rounds"], engine=p["driver"] == "engine")
    return p


def _ops(rng: random.Random, rounds: int, engine: bool) -> list:
    """A random op list whose every lineage has at most ``rounds`` steps, with at least one save and one
    load (most programs load some file twice)."""
    ops, at, files, k = [], 0, {}, 0

    def step():
        nonlocal at
        s = rng.randint(1, min(4, rounds - at))
        ops.append(("step", s))
        at += s

    def save():
        nonlocal k
        name = f"c{k}"
        k += 1
        files[name] = at
        ops.append(("save", name, engine and rng.random() < 0.7))

    def load(name=None):
        nonlocal at
        name = name or rng.choice(sorted(f for f in files if files[f] < rounds) or sorted(files))
        ops.append(("load", name, engine and rng.random() < 0.7))
        at = files[name]
        if at < rounds and rng.random() < 0.7:          # the resumed session steps (mostly)
            step()

    step()
    for _ in range(rng.randint(3, 7)):
        u = rng.random()
        if u < 0.4 and at < rounds:
            step()
        elif u < 0.65:
            save()
        elif files:
            load()
    if not files:
        save()
    if not any(o[0] == "load" for o in ops):
        if at < rounds:
            step()
        load()
    if rng.random() < 0.6:                      # a fork: the first saved file loaded once more
        first = sorted(files)[0]
        if sum(o[0] == "load" and o[1] == first for o in ops) < 2:
            load(first)
    if ops[-1][0] == "load" and at < rounds:
        step()
    return ops


def describe(p: dict) -> str:
    """One line: the program's configuration and its op list (what a failure report shows).

    Args:
        p: a program of :func:`make_program`.

    Returns:
        The line.
    """
    keys = (("algorithm", "sampling", "n", "batch", "b0", "optimizer", "loader_shuffle", "loader_generator",
             "shared_file", "rank_seeds") if p["driver"] == "engine" else ("family",))
    conf = ", ".join(f"{k}={p[k]}" for k in ("world", "secure", "seed", "accountant") + keys if k in p)
    ops = " ".join(o[0] + (f"({o[1]})" if o[0] == "step" else f"({o[1]}{', loader' if o[2] else ''})")
                   for o in p["ops"])
    return f"#{p['i']} (fuzz seed {p['fuzz_seed']}) {p['driver']}: {conf}; ops: {ops}"


# ---------------------------------------------------------------------------------------------
# the engine
# ---------------------------------------------------------------------------------------------


class ZeroLoss(nn.Module):
    """``0 * output.sum()``: every record's gradient is exactly zero, so the release is the noise alone."""

    reduction = "mean"

    def forward(self, output, target):
        return output.sum() * 0.0


def _engine_data(p):
    g = torch.Generator().manual_seed(p["data_seed"])
    return torch.randn(p["n"], p["d_in"], generator=g), torch.arange(p["n"])


def _engine_session(p, rank=0, world=1, seed="program"):
    """A fresh engine of the program's configuration: ``(engine, module, optimizer, criterion, loader, net,
    directions)``; ``directions`` receives each release's direction (the step hook)."""
    import dpcalib.optim as O

    x, idx = _engine_data(p)
    torch.manual_seed(p["data_seed"] % 1000)
    net = nn.Linear(p["d_in"], 4)           # 20 to 32 parameters: independent draws never align
    gen = None if p["loader_generator"] is None else torch.Generator().manual_seed(p["loader_generator"])
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, idx), batch_size=p["batch"],
                                     shuffle=p["loader_shuffle"], generator=gen)
    lr = 1.0
    torch_opt = {"sgd": lambda: torch.optim.SGD(net.parameters(), lr=lr),
                 "momentum": lambda: torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9),
                 "adam": lambda: torch.optim.Adam(net.parameters(), lr=0.1)}[p["optimizer"]]()
    engine = O.PrivacyEngine(secure_mode=p["secure"], accountant=p["accountant"])
    s = p["seed"] if seed == "program" else seed
    kw = dict(module=net, optimizer=torch_opt, data_loader=dl, max_grad_norm=1.0, seed=s, distributed=world > 1)
    alg, sampling = p["algorithm"], p["sampling"]
    T = math.ceil(p["n"] / p["batch"])
    if alg == "dp-sgd":
        kw.update(noise_multiplier=p["level"])
        if sampling == "loader":
            kw.update(poisson_sampling=False, epochs=p["rounds"] // T + 2)
        elif sampling == "poisson":
            kw.update(sampling="poisson", steps=p["rounds"])
        else:
            kw.update(sampling=sampling, epochs=p["rounds"] // T + 2)
    elif alg == "dicesgd":
        kw.update(algorithm="dicesgd", noise={"sigma1": p["level"]}, C2=0.5, steps=p["rounds"])
    else:
        kw.update(algorithm="dp-srm", noise={"sigma0": p["level"], "sigma": p["level"] / 2}, C2=0.5, b0=p["b0"],
                  momentum=p["momentum"], steps=p["rounds"] + 1, criterion=ZeroLoss())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # the loader's own generator: Opacus's warning
        out = engine.make_private(**kw)
    if len(out) == 4:
        module, opt, crit, loader = out
    else:
        (module, opt, loader), crit = out, ZeroLoss()
    directions = []
    opt.attach_step_hook(lambda o: directions.append(
        torch.cat([q.grad.detach().reshape(-1).clone() for q in net.parameters()])))
    return {"engine": engine, "module": module, "opt": opt, "crit": crit, "loader": loader, "net": net,
            "directions": directions, "it": None, "pass": 0}


def _engine_step(s):
    """One step of the user's loop; returns ``(pass, this rank's record indices)``."""
    batch = None
    if s["it"] is not None:
        batch = next(s["it"], None)
    for _ in range(3):                  # a resumed pass may be spent already: then a new one
        if batch is not None:
            break
        s["it"] = iter(s["loader"])
        s["pass"] += 1
        batch = next(s["it"], None)
    xb, ib = batch
    opt = s["opt"]
    opt.zero_grad()
    s["crit"](s["module"](xb), ib).backward()
    opt.step()
    return s["pass"], ib.reshape(-1).tolist()


def _flat(net):
    return torch.cat([q.detach().reshape(-1).clone() for q in net.parameters()])


def _open_session(sessions, live=None, parent=None, start=0, history=(), structure=((False, 0),), warned=None,
                  fork=False) -> dict:
    """A new session of a program (the first, or one loaded from a checkpoint), appended to ``sessions``.

    Args:
        sessions: the program's sessions so far.
        live: an engine session's objects (:func:`_engine_session`); None for a reference optimizer's.
        parent: the checkpoint it was loaded from (None: the first session).
        start: the virtual round it resumes at.
        history: the entries of its lineage before ``start``.
        structure: its lineage's segments ``[[restart, steps], ...]`` (copied).
        warned: the warnings its load raised.
        fork: whether its checkpoint was loaded before (a second branch from one file).

    Returns:
        The session: the trace's keys (:func:`_traces`), ``entries`` still empty and ``epsilon`` None, and
        the engine's working keys (``live``, ``sid``: its index, ``pass``: the pass of its last step).
    """
    sess = {"parent": parent, "start": start, "history": list(history), "entries": [],
            "structure": [list(x) for x in structure], "warned": warned, "epsilon": None, "fork": fork,
            "live": live, "sid": len(sessions), "pass": None}
    sessions.append(sess)
    return sess


def _traces(sessions) -> list:
    """The sessions as a program's trace: each one's ``parent``, ``start``, ``history``, ``entries``,
    ``structure``, ``warned``, ``epsilon`` and ``fork`` (what the checks compare).

    Args:
        sessions: the sessions of :func:`_open_session`.

    Returns:
        One dict per session.
    """
    return [{k: sess[k] for k in ("parent", "start", "history", "entries", "structure", "warned", "epsilon", "fork")}
            for sess in sessions]


def _path(workdir, name, rank, world, shared):
    base = os.path.join(workdir, name)
    return base if world == 1 or shared else f"{base}.rank{rank}"


def run_engine_program(p: dict, workdir: str, rank: int = 0, world: int = 1) -> dict:
    """Run an engine program on this rank: the trace of every session.

    Args:
        p: an engine program of :func:`make_program`.
        workdir: an empty folder for its checkpoints.
        rank: this process's rank.
        world: the number of ranks (2: torch.distributed is initialised).

    Returns:
        ``{"sessions": [...], "refused": ...}``: per session its start (``parent``: the file it was loaded
        from, ``start``: the virtual round it resumed at, ``structure``: its lineage's segments) and its
        entries (one per step: ``round``, ``pass``, ``records``, ``direction``, ``params``), its final
        ``epsilon`` and the warnings its load raised.
    """
    import torch.distributed as dist

    from dpcalib.accountant.validation import InputError

    shared = p.get("shared_file", False)
    if p.get("rank_seeds"):
        try:
            _engine_session(p, rank, world, seed=p["seed"] + rank)
        except InputError as exc:
            return {"sessions": [], "refused": str(exc)[:200]}
        return {"sessions": [], "refused": None}
    sessions, meta = [], {}
    cur = _open_session(sessions, _engine_session(p, rank, world))
    for op in p["ops"]:
        s = cur["live"]
        if op[0] == "step":
            for _ in range(op[1]):
                n_dir = len(s["directions"])
                pid, recs = _engine_step(s)
                direction = s["directions"][-1] if len(s["directions"]) > n_dir else None
                rnd = cur["start"] + len(cur["entries"]) + 1
                cur["pass"] = _pass_of(cur, pid, len(s["loader"]))
                cur["entries"].append({"round": rnd, "pass": cur["pass"][0], "records": recs, "direction": direction,
                                       "params": _flat(s["net"])})
                cur["structure"][-1][1] += 1
        elif op[0] == "save":
            name, with_loader = op[1], op[2]
            path = _path(workdir, name, rank, world, shared)
            if world == 1 or not shared or rank == 0:
                s["engine"].save_checkpoint(path=path, module=s["module"], optimizer=s["opt"],
                                            data_loader=s["loader"] if with_loader else None)
            if world > 1:
                dist.barrier()
            meta[name] = {"round": cur["start"] + len(cur["entries"]), "with_loader": with_loader,
                          "history": cur["history"] + cur["entries"], "structure": copy.deepcopy(cur["structure"]),
                          "pass": cur["pass"], "loaded": 0}
        else:
            name, with_loader = op[1], op[2]
            m = meta[name]
            cur["epsilon"] = cur["live"]["engine"].get_epsilon(DELTA)
            cur["live"] = None
            fresh = _engine_session(p, rank, world)
            path = _path(workdir, name, rank, world, shared)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fresh["engine"].load_checkpoint(path=path, module=fresh["module"], optimizer=fresh["opt"],
                                                data_loader=fresh["loader"] if with_loader else None)
            m["loaded"] += 1
            cont = True         # the optimizer's state carries its loader's position, with or without data_loader=
            structure = copy.deepcopy(m["structure"]) + [[not cont, 0]]
            cur = _open_session(sessions, fresh, parent=name, start=m["round"], history=m["history"],
                                structure=structure, warned=[f"{w.category.__name__}: {w.message}" for w in caught
                                                             if issubclass(w.category, UserWarning)],
                                fork=m["loaded"] > 1)
            # the saved pass goes on (its key, and the batches it has had), else a new pass begins
            cur["pass"] = (m["pass"][0], m["pass"][1], None) if cont and m["pass"] is not None else None
    cur["epsilon"] = cur["live"]["engine"].get_epsilon(DELTA)
    cur["live"] = None
    return {"sessions": _traces(sessions), "refused": None}


def _pass_of(sess, pid, length):
    """``(key, batches so far, the loop's iteration)`` of the pass a step belongs to: a new pass where the
    loop began a new iteration of the loader (a resumed session's first iteration continues a saved pass)
    or the pass already had its ``length`` batches (a loader that goes on into the next pass within one
    iteration)."""
    cur = sess["pass"]
    if cur is None or (cur[2] is not None and pid != cur[2]) or cur[1] >= length:
        sess["passes"] = sess.get("passes", 0) + 1
        return ((sess["sid"], sess["passes"]), 1, pid)
    return (cur[0], cur[1] + 1, pid)


def engine_reference(p: dict, structure) -> list:
    """The uninterrupted run of an engine program's configuration along ``structure`` (one engine, one
    process, no checkpoint; its loader restarted where a segment starts a new pass).

    Args:
        p: an engine program.
        structure: ``[[restart, steps], ...]``: the lineage's segments.

    Returns:
        One entry per step: ``round``, ``records``, ``direction``, ``params`` and ``ledger`` (the engine's
        ``state_dict`` after the step).
    """
    s = _engine_session(p, 0, 1)
    out = []
    for restart, steps in structure:
        if restart:
            s["it"] = None
        for _ in range(steps):
            n_dir = len(s["directions"])
            _, recs = _engine_step(s)
            out.append({"round": len(out) + 1, "records": recs,
                        "direction": s["directions"][-1] if len(s["directions"]) > n_dir else None,
                        "params": _flat(s["net"]), "ledger": copy.deepcopy(s["engine"].state_dict())})
    return out


def _epsilon_of(state, accountant):
    import dpcalib.optim as O

    e = O.PrivacyEngine(accountant=accountant)
    e.load_state_dict(state)
    return e.get_epsilon(DELTA)


# ---------------------------------------------------------------------------------------------
# the reference optimizers
# ---------------------------------------------------------------------------------------------


def _recording_sampler():
    from dpcalib.optim.data.sampling import Sampler

    class Recording(Sampler):
        """The user's sampler: the plain draws, each noted ``(round, holder, is a set, indices)``."""

        def __init__(self):
            self.log, self.opt = [], None

        def _note(self, idx, holder, is_set=True):
            self.log.append((self.opt.round if self.opt is not None else 0, int(holder), is_set,
                             idx.reshape(-1).tolist()))
            return idx

        def poisson(self, n, q, generator, *, holder=0):
            return self._note(super().poisson(n, q, generator, holder=holder), holder)

        def without_replacement(self, n, size, generator, *, holder=0):
            return self._note(super().without_replacement(n, size, generator, holder=holder), holder)

        def one(self, n, generator, *, holder=0):
            return self._note(super().one(n, generator, holder=holder), holder, is_set=False)

        def shuffled(self, perm, j, size, *, holder=0):
            return self._note(super().shuffled(perm, j, size, holder=holder), holder)

        def binned(self, batches, j, *, holder=0):
            return self._note(super().binned(batches, j, holder=holder), holder)

    return Recording()


def _reference_optimizer(p, seed="program", world=1):
    """A fresh reference optimizer of the program's family: ``(optimizer, its recording sampler)``; on
    ``world`` > 1 ranks its data-parallel ``Distributed*`` class (torch.distributed is initialised)."""
    import dpcalib.mechanisms as M
    import dpcalib.optim as O

    if world > 1:
        from dpcalib.optim.algorithms import distributed as D

        O = _Namespace(O, DPSGD=D.DistributedDPSGD, DPSRM=D.DistributedDPSRM, DiceSGD=D.DistributedDiceSGD)

    fam, R = p["family"], p["rounds"]
    rng = random.Random(p["data_seed"])
    g = torch.Generator().manual_seed(p["data_seed"])

    def data(n, d=4):
        x = torch.randn(n, d, generator=g)
        return x, torch.sin(x.sum(1)) + 0.1 * torch.randn(n, generator=g)

    torch.manual_seed(p["data_seed"] % 1000)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))
    sampler = _recording_sampler()
    kw = dict(seed=p["seed"] if seed == "program" else seed, secure_mode=p["secure"], record=True, sampler=sampler)
    n = 16 + p["data_seed"] % 49
    if fam.startswith("dp-sgd"):
        if fam == "dp-sgd":
            mech = M.DPSGD(rng.choice((0.1, 0.2, 0.3)), R)
        else:
            b = rng.randint(3, n // 3)
            T = math.ceil(n / b)
            mech = M.DPSGD(sampling="shuffle" if fam.endswith("shuffle") else "balls-in-bins", n=n, batch_size=b,
                           epochs=-(-R // T))
        opt = O.DPSGD(model, O.squared_loss, data(n), mech, {"noise_multiplier": 1.0}, C=1.0, lr=0.1, **kw)
    elif fam == "dp-gd":
        opt = O.DPGD(model, O.squared_loss, [data(8) for _ in range(3)], M.DPGD(R, 3, 8), {"sigma1": 0.5},
                     C1=1.0, lr=0.1, **kw)
    elif fam == "diff2-gd":
        opt = O.DIFF2GD(model, O.squared_loss, [data(8) for _ in range(3)], M.DIFF2GD(R, 3, 3, 8),
                        {"sigma1": 0.5, "sigma2": 0.5}, C1=1.0, C2=3.0, lr=0.1, **kw)
    elif fam == "diff2-bvr":
        opt = O.DIFF2BVR(model, O.squared_loss, [data(8) for _ in range(3)], M.DIFF2BVR(R, 3, 3, 8, 2, 4),
                         {"sigma1": 0.5, "sigma2": 0.5, "sigma3": 0.5}, C1=1.0, C2=3.0, lr=0.05, **kw)
    elif fam == "dp-srm":
        opt = O.DPSRM(model, O.squared_loss, data(n), M.DPSRM(n, R, 8, 5, 1.0, 0.5, 0.2),
                      {"sigma0": 0.5, "sigma": 0.5}, lr=0.1, max_step=0.5, **kw)
    elif fam.startswith("dicesgd"):
        auto = fam.endswith("auto")
        mech = M.DiceSGD(n, 5, R, automatic=True) if auto else M.DiceSGD(n, 5, R, C1=1.0, C2=0.1)
        opt = O.DiceSGD(model, O.squared_loss, data(n), mech, {"sigma1": 0.5}, lr=0.05,
                        optimizer="adam" if fam.endswith("adam") else "sgd", **kw)
    elif fam in ("clipd2p", "clipd2p-poisson"):
        rel = "add/remove" if fam.endswith("poisson") else "replace-one"
        opt = O.ClipD2P(model, O.squared_loss, [data(8) for _ in range(4)], M.ClipD2P(8, R, rel), {"sigma": 1.0},
                        C=1.0, lr=0.05, graph="sgp", **kw)
    elif fam == "constd2p":
        opt = O.ConstD2P(model, O.squared_loss, [data(8) for _ in range(4)], M.ConstD2P(8, R, "replace-one"),
                         {"sigma": 1.0}, G=10.0, lr=0.05, **kw)
    else:
        opt = O.AdaD2P(model, O.squared_loss, [data(8) for _ in range(4)], M.AdaD2P(8, R), {"sigma": 0.5},
                       lr=0.05, **kw)
    sampler.opt = opt
    return opt, sampler


class _Namespace:
    """``module`` with some of its names replaced."""

    def __init__(self, module, **names):
        self.module, self.names = module, names

    def __getattr__(self, name):
        return self.names[name] if name in self.names else getattr(self.module, name)


def _ref_epsilon(opt, accountant):
    try:
        return opt.epsilon_spent(DELTA, accountant)
    except Exception as exc:  # noqa: BLE001 - AdaD2P claims no sensitivity: the same refusal both ways
        return f"{type(exc).__name__}: {exc}"[:120]


def _ref_entries(opt, sampler, start_round, n_log):
    """The entries of the rounds ``> start_round`` of a reference optimizer."""
    by_round = {}
    for r in opt.privatizer.releases:
        if r.round > start_round and r.std > 0 and r.noise is not None:
            by_round.setdefault(r.round, []).append(r.noise.reshape(-1).clone())
    recs = {}
    for rnd, holder, is_set, idx in sampler.log[n_log:]:
        recs.setdefault(rnd, []).append((holder, is_set, idx))
    return by_round, recs


def run_reference_program(p: dict, workdir: str, rank: int = 0, world: int = 1) -> dict:
    """Run a reference-optimizer program on this rank: the trace of every session (as
    :func:`run_engine_program`; on 2 ranks each rank writes and reads its own checkpoint, ``PATH.rank<r>``).

    Args:
        p: a reference program of :func:`make_program`.
        workdir: an empty folder for its checkpoints.
        rank: this process's rank.
        world: the number of ranks (2: torch.distributed is initialised).

    Returns:
        ``{"sessions": [...], "refused": None}``.
    """
    from dpcalib.optim.run.runner import Runner

    sessions, meta = [], {}
    opt, sampler = _reference_optimizer(p, world=world)
    cur = _open_session(sessions)

    def close():
        cur["epsilon"] = _ref_epsilon(opt, p["accountant"])

    for op in p["ops"]:
        if op[0] == "step":
            r0, n_log = opt.round, len(sampler.log)
            Runner(opt).run(op[1], progress=False, log_every=10 ** 6)
            noise, recs = _ref_entries(opt, sampler, r0, n_log)
            params = _flat(opt.model)
            for rnd in range(r0 + 1, opt.round + 1):
                cur["entries"].append({"round": rnd, "noise": noise.get(rnd, []), "draws": recs.get(rnd, []),
                                       "params": params if rnd == opt.round else None})
            cur["structure"][-1][1] += op[1]
        elif op[0] == "save":
            opt.save_checkpoint(os.path.join(workdir, op[1]))
            meta[op[1]] = {"round": opt.round, "history": cur["history"] + cur["entries"],
                           "structure": copy.deepcopy(cur["structure"]), "loaded": 0}
        else:
            close()
            m = meta[op[1]]
            opt, sampler = _reference_optimizer(p, world=world)
            opt.load_checkpoint(os.path.join(workdir, op[1]))
            m["loaded"] += 1
            cur = _open_session(sessions, parent=op[1], start=m["round"], history=m["history"],
                                structure=m["structure"] + [[False, 0]], fork=m["loaded"] > 1)
    close()
    return {"sessions": _traces(sessions), "refused": None}


def reference_reference(p: dict, rounds: int, ends=()) -> list:
    """The uninterrupted reference optimizer of the program's configuration: one entry per round
    (``noise``, ``draws``, ``params``, and ``epsilon`` after the rounds in ``ends``).

    Args:
        p: a reference program.
        rounds: how many rounds.
        ends: the rounds after which the epsilon spent is asked.

    Returns:
        The entries.
    """
    opt, sampler = _reference_optimizer(p)
    out = []
    for _ in range(rounds):
        r0, n_log = opt.round, len(sampler.log)
        opt.step()
        noise, recs = _ref_entries(opt, sampler, r0, n_log)
        out.append({"round": opt.round, "noise": noise.get(opt.round, []), "draws": recs.get(opt.round, []),
                    "params": _flat(opt.model),
                    "epsilon": _ref_epsilon(opt, p["accountant"]) if opt.round in ends else None})
    return out


# ---------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------


def shared_draws(vectors: list, exempt=None) -> list:
    """Pairs of noise vectors that share a draw: bitwise equal, or ``|cos| > COS`` (dimension >= ``COS_DIM``).

    Args:
        vectors: ``[(label, key, tensor)]``; ``key`` groups the vectors a seeded program may repeat.
        exempt: ``exempt(key_a, key_b) -> bool``: the pair may be equal (None: none may).

    Returns:
        ``[(label_a, label_b, cos)]`` of the offending pairs.
    """
    if len(vectors) < 2:
        return []
    out = []
    dims = {}
    for j, (_, _, v) in enumerate(vectors):
        dims.setdefault(v.numel(), []).append(j)
    for dim, idx in dims.items():
        if len(idx) < 2:
            continue
        m = torch.stack([vectors[j][2].reshape(-1).to(torch.float64) for j in idx])
        unit = m / m.norm(dim=1, keepdim=True).clamp_min(1e-300)
        cos = unit @ unit.T
        equal = (m[:, None, :] == m[None, :, :]).all(dim=2) & (m.abs().sum(1) > 0)[:, None]
        hit = equal | ((cos.abs() > COS) if dim >= COS_DIM else torch.zeros_like(equal))
        for a, b in torch.triu(hit, diagonal=1).nonzero().tolist():
            va, vb = vectors[idx[a]], vectors[idx[b]]
            if not (exempt is not None and exempt(va[1], vb[1])):
                out.append((va[0], vb[0], float(cos[a, b])))
    return out


def _fail(fails, check, detail):
    fails.append((check, detail))


def check_engine(p: dict, traces: list) -> list:
    """The checks of an engine program (one trace per rank).

    Args:
        p: the program.
        traces: :func:`run_engine_program`'s result on each rank.

    Returns:
        ``[(check, detail)]``: the failures (empty: the program passed).
    """
    fails = []
    if p.get("rank_seeds"):
        for r, t in enumerate(traces):
            if not t["refused"]:
                _fail(fails, "seed-refusal", f"rank {r}: make_private with seed {p['seed'] + r} (rank 0: "
                      f"{p['seed']}) was not refused")
        return fails
    world = len(traces)
    t0 = traces[0]
    sessions = t0["sessions"]
    gamma = 1.0 - p["momentum"] if p["algorithm"] == "dp-srm" else 0.0
    # -- ranks agree ------------------------------------------------------------------------------
    for r in range(1, world):
        for k, (a, b) in enumerate(zip(sessions, traces[r]["sessions"])):
            if a["epsilon"] != b["epsilon"]:
                _fail(fails, "ranks-disagree", f"session {k}: epsilon {a['epsilon']} on rank 0, {b['epsilon']} "
                      f"on rank {r}")
            for ea, eb in zip(a["entries"], b["entries"]):
                if not _same(ea["direction"], eb["direction"]):
                    _fail(fails, "ranks-disagree", f"session {k} round {ea['round']}: the ranks hold other releases")
                    break
                if abs(len(ea["records"]) - len(eb["records"])) > 1 or not _one_batch(p, ea["records"],
                                                                                     eb["records"]):
                    _fail(fails, "ranks-disagree", f"session {k} round {ea['round']}: shares {ea['records']} and "
                          f"{eb['records']} are not one logical batch")
                    break

    def records(k, j, hist):
        """The step's records over the ranks."""
        out = []
        for t in traces:
            s = t["sessions"][k]
            e = (s["history"] + s["entries"])[j] if hist else s["entries"][j]
            out.extend(e["records"])
        return out

    # -- noise -------------------------------------------------------------------------------------
    vecs = []
    for k, s in enumerate(sessions):
        lineage = s["history"] + s["entries"]
        base = len(s["history"])
        for j, e in enumerate(s["entries"]):
            d = e["direction"]
            if d is None:
                _fail(fails, "error", f"session {k} round {e['round']}: the step hook saw no release")
                continue
            prev = lineage[base + j - 1]["direction"] if base + j > 0 else None
            noise = d - gamma * prev if (gamma and prev is not None) else d
            vecs.append((f"session {k} (from {s['parent'] or 'start'}) round {e['round']}", e["round"], noise))
    for a, b, c in shared_draws(vecs, (lambda x, y: x == y) if p["seed"] is not None else None)[:3]:
        _fail(fails, "shared-noise", f"{a} and {b} share a noise draw (cos {c:.6f})")
    # -- records -----------------------------------------------------------------------------------
    for k, s in enumerate(sessions):
        lineage = s["history"] + s["entries"]
        used: dict = {}
        for j, e in enumerate(lineage):
            recs = records(k, j, True)
            if len(set(recs)) != len(recs) and j >= len(s["history"]):
                dup = sorted(x for x in set(recs) if recs.count(x) > 1)
                _fail(fails, "record-twice-step", f"session {k} round {e['round']}: records {dup[:5]} twice in one "
                      "step")
            if p["sampling"] in EPOCH_WISE:
                seen = used.setdefault(e["pass"], set())
                again = seen & set(recs)
                if again and j >= len(s["history"]):
                    _fail(fails, "record-twice-epoch", f"session {k} round {e['round']}: records "
                          f"{sorted(again)[:5]} already in this pass")
                seen |= set(recs)
            if p["sampling"] == "wor" and j >= len(s["history"]):
                want = p["b0"] if e["round"] == 1 else p["batch"]
                if len(recs) != want:
                    _fail(fails, "batch-size", f"session {k} round {e['round']}: {len(recs)} records, the "
                          f"accountant's fixed size is {want}")
    # -- warnings ------------------------------------------------------------------------------------
    if p["seed"] is not None:
        for k, s in enumerate(sessions):
            if s.get("fork") and not s["warned"]:
                _fail(fails, "fork-warning", f"session {k}: {s['parent']} loaded a second time (seeded) without a "
                      "UserWarning that the continuations share their noise")
    # -- against the uninterrupted run ---------------------------------------------------------------
    refs: list = []
    for k, s in enumerate(sessions):
        ref = _reference_for(p, s["structure"], refs)
        end = s["start"] + len(s["entries"])
        if end:
            want = _epsilon_of(ref[end - 1]["ledger"], p["accountant"])
            if not _close(s["epsilon"], want):
                _fail(fails, "epsilon-resume", f"session {k} (from {s['parent'] or 'start'}) after {end} steps: "
                      f"epsilon {s['epsilon']!r}, uninterrupted {want!r}")
        if p["seed"] is None or not s["entries"]:
            continue
        continued = not any(seg[0] for seg in s["structure"])
        exact_batches = continued and not (p["sampling"] == "loader" and p["loader_shuffle"]
                                           and p["loader_generator"] is None)
        for j, e in enumerate(s["entries"]):
            r = ref[e["round"] - 1]
            what = []
            if not _same(e["direction"], r["direction"]):
                what.append("release")
            if not _same(e["params"], r["params"]):
                what.append("parameters")
            if exact_batches and sorted(records(k, j, False)) != sorted(r["records"]):
                what.append("batch")
            if what:
                _fail(fails, "seeded-bit-exact", f"session {k} (from {s['parent'] or 'start'}) round {e['round']}: "
                      f"{', '.join(what)} differ from the uninterrupted seeded run")
                break
    return fails


def _reference_for(p, structure, refs):
    """The uninterrupted run along ``structure`` (a run along a longer structure with the same prefix is
    reused).  Poisson and fixed-size batches are drawn from one stream whatever the passes: a restart
    changes nothing there, so one run of the longest lineage serves every session."""
    if p["sampling"] not in EPOCH_WISE:
        structure = [[False, sum(x[1] for x in structure)]]
    segs, pending = [], False
    for restart, steps in structure:        # an empty segment's restart falls to the next one
        restart = bool(restart) or pending
        if steps == 0:
            pending = restart
            continue
        segs.append((restart, steps))
        pending = False
    if not segs:
        return []

    def covers(have):
        if len(have) < len(segs):
            return False
        for a, b in zip(segs[:-1], have):
            if a != b:
                return False
        a, b = segs[-1], have[len(segs) - 1]
        return a[0] == b[0] and a[1] <= b[1]

    for have, run in refs:
        if covers(have):
            return run
    run = engine_reference(p, segs)
    refs.append((segs, run))
    return run


def check_reference(p: dict, traces: list) -> list:
    """The checks of a reference-optimizer program (one trace per rank: on 2 ranks the server rank 0 draws
    and records the noise, and every rank draws the whole logical batch).

    Args:
        p: the program.
        traces: :func:`run_reference_program`'s result on each rank.

    Returns:
        ``[(check, detail)]``: the failures.
    """
    fails = []
    sessions = traces[0]["sessions"]
    for r in range(1, len(traces)):
        for k, (a, b) in enumerate(zip(sessions, traces[r]["sessions"])):
            if a["epsilon"] != b["epsilon"]:
                _fail(fails, "ranks-disagree", f"session {k}: epsilon {a['epsilon']} on rank 0, {b['epsilon']} "
                      f"on rank {r}")
            for ea, eb in zip(a["entries"], b["entries"]):
                if ea["draws"] != eb["draws"] or not _same(ea["params"], eb["params"]):
                    _fail(fails, "ranks-disagree", f"session {k} round {ea['round']}: the ranks drew other batches "
                          "or hold other parameters")
                    break
    vecs = []
    for k, s in enumerate(sessions):
        for e in s["entries"]:
            for q, v in enumerate(e["noise"]):
                vecs.append((f"session {k} (from {s['parent'] or 'start'}) round {e['round']} release {q}",
                             (e["round"], q), v))
    for a, b, c in shared_draws(vecs, (lambda x, y: x == y) if p["seed"] is not None else None)[:3]:
        _fail(fails, "shared-noise", f"{a} and {b} share a noise draw (cos {c:.6f})")
    T = None
    if p["family"] in ("dp-sgd-shuffle", "dp-sgd-bins"):
        opt, _ = _reference_optimizer(p, seed=0)
        T = opt.mechanism.steps_per_epoch
    for k, s in enumerate(sessions):
        used: dict = {}
        lineage = s["history"] + s["entries"]
        for j, e in enumerate(lineage):
            for holder, is_set, idx in e["draws"]:
                if is_set and len(set(idx)) != len(idx) and j >= len(s["history"]):
                    _fail(fails, "record-twice-step", f"session {k} round {e['round']}: a record twice in one draw")
                if T is not None:
                    seen = used.setdefault(((e["round"] - 1) // T, holder), set())
                    if seen & set(idx) and j >= len(s["history"]):
                        _fail(fails, "record-twice-epoch", f"session {k} round {e['round']}: records "
                              f"{sorted(seen & set(idx))[:5]} already in this epoch")
                    seen |= set(idx)
    ends = {s["start"] + len(s["entries"]) for s in sessions} - {0}
    ref = reference_reference(p, max(ends), ends) if ends else []
    for k, s in enumerate(sessions):
        end = s["start"] + len(s["entries"])
        if end and not _close(s["epsilon"], ref[end - 1]["epsilon"]):
            _fail(fails, "epsilon-resume", f"session {k} (from {s['parent'] or 'start'}) after {end} rounds: "
                  f"epsilon {s['epsilon']!r}, uninterrupted {ref[end - 1]['epsilon']!r}")
        if p["seed"] is None:
            continue
        for e in s["entries"]:
            r = ref[e["round"] - 1]
            what = []
            if len(e["noise"]) != len(r["noise"]) or not all(_same_noise(a, b, len(traces))
                                                             for a, b in zip(e["noise"], r["noise"])):
                what.append("noise")
            # on 2 ranks the sums are added in another order: the parameters agree to rounding only
            if e["params"] is not None and len(traces) == 1 and not torch.equal(e["params"], r["params"]):
                what.append("parameters")
            if [d[2] for d in e["draws"]] != [d[2] for d in r["draws"]]:
                what.append("batch")
            if what:
                _fail(fails, "seeded-bit-exact", f"session {k} (from {s['parent'] or 'start'}) round {e['round']}: "
                      f"{', '.join(what)} differ from the uninterrupted seeded run")
                break
    return fails


def _one_batch(p, r0, r1) -> bool:
    """Two ranks' shares ``idx[0::2]``, ``idx[1::2]`` of one logical batch: disjoint, and -- Poisson and
    balls-in-bins batches list their records in ascending order -- interleaving to an ascending list."""
    if set(r0) & set(r1):
        return False
    if p["sampling"] not in ("poisson", "balls-in-bins"):
        return True
    merged = [x for pair in zip(r0, r1) for x in pair] + r0[len(r1):]
    return all(a < b for a, b in zip(merged, merged[1:]))


def _same_noise(a, b, world) -> bool:
    """The same draw: bit for bit on one process; on 2 ranks the noise a secure release records is the
    released value minus the sum, which another order of summation moves by rounding."""
    if world == 1:
        return torch.equal(a, b)
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-6, atol=1e-6 * float(b.abs().max())))


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and torch.equal(a, b)


def _close(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


# ---------------------------------------------------------------------------------------------
# driving
# ---------------------------------------------------------------------------------------------


def check_one(p: dict, workdir: str | None = None) -> dict:
    """Run and check one 1-rank program.

    Args:
        p: a program of :func:`make_program` with ``world == 1``.
        workdir: a folder for its checkpoints (None: a temporary one).

    Returns:
        ``{"program": p, "failures": [(check, detail)]}``.
    """
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="lifecycle-")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if p["driver"] == "engine":
                fails = check_engine(p, [run_engine_program(p, workdir)])
            else:
                fails = check_reference(p, [run_reference_program(p, workdir)])
    except Exception as exc:  # noqa: BLE001 - every exception is a failure to report
        fails = [("error", _short(exc))]
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    return {"program": p, "failures": fails}


def _short(exc) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f"{os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else "?"
    return f"{type(exc).__name__} at {where}: {' '.join(str(exc).split())[:300]}"


def _rank_worker(programs, rank, world, port, outdir):
    """One rank of the 2-rank programs (module level: 'spawn' imports it); its traces go to
    ``outdir/trace<rank>.pt`` (a rank that cannot go on leaves with ``abandon``)."""
    import torch.distributed as dist

    from dpcalib.optim.algorithms import distributed as D

    torch.set_num_threads(1)
    traces = {}
    try:
        D.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                             timeout_s=120)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for p in programs:
                work = os.path.join(outdir, f"p{p['i']}")
                if rank == 0:
                    os.makedirs(work, exist_ok=True)
                dist.barrier()
                try:
                    run = run_engine_program if p["driver"] == "engine" else run_reference_program
                    traces[p["i"]] = run(p, work, rank, world)
                except Exception as exc:  # noqa: BLE001
                    traces[p["i"]] = {"error": _short(exc)}
                    break                      # the group may be out of step: leave the rest unrun
                dist.barrier()
        D.shutdown()
    except Exception as exc:  # noqa: BLE001
        traces["fatal"] = _short(exc)
    torch.save(traces, os.path.join(outdir, f"trace{rank}.pt"))
    if "fatal" in traces:
        D.abandon(1)


class TwoRanks:
    """The 2-rank programs in one spawned pair of gloo processes: :meth:`start` launches them (the
    1-rank programs run here meanwhile), :meth:`results` waits and checks them here.

    Args:
        programs: programs with ``world == 2``.
        wait: seconds before a hung pair is killed (None: 120 s and 20 s a program).
    """

    def __init__(self, programs: list, wait: float | None = None):
        self.programs = list(programs)
        self.wait = 120.0 + 20.0 * len(self.programs) if wait is None else float(wait)
        self.procs, self.outdir = [], None

    def start(self) -> "TwoRanks":
        """Launch the pair (nothing when there are no programs).

        Returns:
            self.
        """
        import multiprocessing as mp
        import socket

        if not self.programs:
            return self
        self.outdir = tempfile.mkdtemp(prefix="lifecycle2-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        from benchmarks import lifecycle_fuzz as me       # 'spawn' pickles the function by module name

        ctx = mp.get_context("spawn")
        self.procs = [ctx.Process(target=me._rank_worker, args=(self.programs, r, 2, port, self.outdir))
                      for r in range(2)]
        for q in self.procs:
            q.start()
        self.t0 = time.monotonic()
        return self

    def results(self) -> list:
        """Wait for the pair and check its traces.

        Returns:
            The results, as :func:`check_one`'s.
        """
        if not self.programs:
            return []
        try:
            for q in self.procs:
                q.join(max(1.0, self.wait - (time.monotonic() - self.t0)))
            for q in self.procs:
                if q.is_alive():
                    q.kill()
            traces = []
            for r in range(2):
                f = os.path.join(self.outdir, f"trace{r}.pt")
                traces.append(torch.load(f, weights_only=False) if os.path.exists(f)
                              else {"fatal": "no trace (killed or crashed)"})
            return [self._check(p, traces) for p in self.programs]
        finally:
            shutil.rmtree(self.outdir, ignore_errors=True)

    @staticmethod
    def _check(p, traces):
        per = [t.get(p["i"]) for t in traces]
        if any(x is None or "error" in x for x in per):
            why = [x["error"] if x is not None and "error" in x else t.get("fatal", "not run")
                   for x, t in zip(per, traces)]
            return {"program": p, "failures": [("error", f"rank {r}: {w}") for r, w in enumerate(why)]}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check = check_engine if p["driver"] == "engine" else check_reference
                return {"program": p, "failures": check(p, per)}
        except Exception as exc:  # noqa: BLE001
            return {"program": p, "failures": [("error", _short(exc))]}


def fuzz(programs: int, seed: int = 0, ranks: str = "both", progress: bool = False) -> list:
    """Run and check ``programs`` programs of the fuzz seeded by ``seed``.

    Args:
        programs: how many (program ``i`` is :func:`make_program` ``(i, seed, ranks)``).
        seed: the fuzz seed.
        ranks: ``"1"``, ``"2"`` or ``"both"``.
        progress: show a tqdm bar.

    Returns:
        One result per program, in order: ``{"program", "failures"}``.
    """
    progs = [make_program(i, seed, ranks) for i in range(programs)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)            # tiny models: one thread is fastest, and the ranks share the cores
    try:
        return _fuzz(progs, progress)
    finally:
        torch.set_num_threads(threads)


def _fuzz(progs, progress):
    programs = len(progs)
    pair = TwoRanks([p for p in progs if p["world"] == 2]).start()      # runs while the others run here
    results = {}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=programs, desc="lifecycle fuzz")
    for p in progs:
        if p["world"] == 1:
            results[p["i"]] = check_one(p)
            if bar is not None:
                bar.update(1)
    for r in pair.results():
        results[r["program"]["i"]] = r
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return [results[i] for i in range(programs)]


def _well_formed(ops) -> bool:
    saved = set()
    for o in ops:
        if o[0] == "save":
            saved.add(o[1])
        elif o[0] == "load" and o[1] not in saved:
            return False
    return any(o[0] == "step" for o in ops)


def shrink(p: dict, check: str, tries: int = 40) -> dict:
    """A smaller program that still fails ``check``: ops removed, then steps cut to one, greedily, while the
    check keeps failing (1-rank programs; a 2-rank program is returned as it is).

    Args:
        p: a failing program.
        check: the check it fails.
        tries: at most this many programs run.

    Returns:
        The smallest failing program found (``p`` itself if nothing smaller fails).
    """
    if p["world"] != 1:
        return p
    best, n = p, 0

    def fails(ops):
        nonlocal n
        n += 1
        q = dict(best, ops=ops)
        return any(c == check for c, _ in check_one(q)["failures"])

    changed = True
    while changed and n < tries:
        changed = False
        ops = best["ops"]
        for j in range(len(ops)):
            cands = [ops[:j] + ops[j + 1:]]
            if ops[j][0] == "step" and ops[j][1] > 1:
                cands.append(ops[:j] + [("step", 1)] + ops[j + 1:])
            for c in cands:
                if n < tries and _well_formed(c) and fails(c):
                    best, changed = dict(best, ops=c), True
                    break
            if changed:
                break
    return best


def report(results: list, first: int = 5, minimal: int = 0) -> str:
    """The summary: ``N programs, K failures``, the failures by check, the first failing programs (the
    first ``minimal`` of them also shrunk to a smaller program failing the same check: :func:`shrink`).

    Args:
        results: :func:`fuzz`'s results.
        first: how many failing programs to show.
        minimal: how many of them to shrink.

    Returns:
        The text.
    """
    bad = [r for r in results if r["failures"]]
    lines = [f"{len(results)} programs, {len(bad)} failures"]
    by = Counter(c for r in bad for c in {c for c, _ in r["failures"]})
    kinds = Counter(("engine" if r["program"]["driver"] == "engine" else "reference") + f"/{r['program']['world']}"
                    for r in results)
    lines.append("programs: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    if by:
        lines.append("failing programs by check: " + ", ".join(f"{c} {by[c]}" for c in CHECKS if by[c]))
    for j, r in enumerate(bad[:first]):
        lines.append(describe(r["program"]))
        for c, d in r["failures"][:4]:
            lines.append(f"    {c}: {d}")
        if j < minimal and r["program"]["world"] == 1:
            small = shrink(r["program"], r["failures"][0][0])
            if small["ops"] != r["program"]["ops"]:
                lines.append(f"    minimal for {r['failures'][0][0]}: {describe(small).split('; ')[-1]}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """The command line (see the module text).

    Args:
        argv: the arguments (None: ``sys.argv``).

    Returns:
        0 when no program failed, 1 otherwise.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ranks", choices=("1", "2", "both"), default="both")
    ap.add_argument("--show", type=int, default=5, help="how many failing programs to print")
    ap.add_argument("--shrink", type=int, default=3, help="how many of them to shrink to a minimal op list")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = fuzz(a.programs, a.seed, a.ranks, progress=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        print(report(res, a.show, a.shrink))
    print(f"(seed {a.seed}, ranks {a.ranks}, {time.perf_counter() - t0:.0f} s)")
    return 1 if any(r["failures"] for r in res) else 0


if __name__ == "__main__":
    sys.exit(main())
