"""Record-level sensitivity probe: neighbouring datasets that differ in one real record.

The probe runs an optimizer on a dataset D (the **leader**, recording every release with its
noiseless value) and, in lockstep, on a neighbouring dataset D' (the **twin**), whose noise source
replays the leader's releases (:class:`~dpcalib.optim.audit.replay.ReplaySource`): the twin walks the same
public history -- the same iterates, the same minibatches -- while everything computed from its
data, hidden state included (DiceSGD's error feedback, DIFF2-BVR's local iterates, the D2P
nodes), is its own.  At every release both noiseless queries ``q_D``, ``q_D'`` come from the
per-example code that real records go through (forward, backward, clipping: the same calls as
any run); nothing is injected.

Neighbours (:func:`pairs`) are built in the data layer, at one slot of one holder's data:

* **replace-one**: the record against another real record of the data set (held out), against
  adversarial records (features x 1e3, label negated, label x 1e3, the all-zero record) and
  against a *canary record* (features x 1e2, label 1e6: a real input whose gradient and gradient
  difference are far above any clip norm at the states visited, so its clipped term sits at the
  claim), and the canary against the canary with its label negated (opposite clipped terms: the
  worst replace-one pair);
* **add/remove**: each of those records present in D and absent from D'.

For sampled releases the differing record is forced into every sample of the leader (the worst
case), through the sampler (:class:`~dpcalib.optim.data.sampling.ForcedRecord`): under replace-one the twin's
sample holds its own record at the same slot, under add/remove the twin's sample is the leader's
without it.  Each release's move ``||q_D - q_D'||`` is compared with the sensitivity the
algorithm claims for it; a move above ``claim + slack`` is an excess, ``slack`` being the float
rounding stated here: ``SLACK_ULPS * eps(dtype) * (||q_D|| + ||q_D'||)`` (relative to the queries'
magnitude, never to the claim).  The noise stds of D and D' must be equal too (the scale may not
depend on private data).  Algorithms that claim no sensitivity (AdaD2P) are refused.

Every probe here takes ``seed``, default None: a fresh seed drawn from the operating system's
entropy (:func:`~dpcalib.optim.randomness.choose_seed`), as ``dpcalib probe`` without ``--seed``
draws one.  The seed used is recorded (the report's ``seed``, ``as_dict()["seed"]``; the standard
harness's ``build.seed``): passed back as ``seed=``, it repeats the probe.  The probe plays the
adversary, who knows the seed: it is no secret; tests and recorded results give it.

This comparison (:func:`measure`) is the one every record-level probe makes:
:func:`record_probe` (real records, the reference optimizers), :func:`sensitivity_probe` (the same
lockstep with gradient canaries in place of real records: the noise and the accounting, not the
clipping) and :func:`~.steps.probe_step` (anyone's step, one release at a time: the engine's,
Opacus's, a user's function).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...accountant.validation import InputError
from ...mechanisms import REGISTRY, lookup
from .lockstep import alternating, constant, run_pair, zero
from .replay import ReplaySource
from ..algorithms.d2p import NoGuarantee
from ..data.sampling import ForcedRecord
from ..randomness import choose_seed

__all__ = ["record_probe", "SLACK_ULPS", "probe_defaults", "probe_harness"]

#: the float slack of a move, in units of eps(dtype) * (||q_D|| + ||q_D'||)
SLACK_ULPS = 64


@dataclass(frozen=True)
class Pair:
    """Two neighbouring datasets at one slot: ``record_d`` there in D, ``record_dprime`` in D'
    (``None``: the slot is empty in D', add/remove).

    Attributes:
        label: the pair's name in the report.
        relation: the neighbouring relation (``"replace-one"``, ``"add/remove"`` or ``"zero-out"``).
        record_d: ``(x, y)`` of the slot in D.
        record_dprime: ``(x, y)`` of the slot in D', or None (the slot is empty in D').
    """

    label: str
    relation: str
    record_d: tuple
    record_dprime: tuple | None


def _candidates(x, y, held_out) -> dict:
    hx, hy = held_out
    canary = (x * 1e2, torch.full_like(y, 1e6))
    return {"a record": (x, y), "another record": (hx, hy), "features x 1e3": (x * 1e3, y),
            "label negated": (x, -y), "label x 1e3": (x, y * 1e3),
            "all-zero record": (torch.zeros_like(x), torch.zeros_like(y)), "canary record": canary}


def pairs(x, y, held_out, relation: str) -> tuple:
    """The neighbouring pairs the probe runs for the record ``(x, y)`` at the probed slot, with
    ``held_out`` another real record of the same distribution (see the module docstring).

    Args:
        x: the probed record's features.
        y: the probed record's target.
        held_out: ``(x, y)`` of another real record, outside the data.
        relation: ``"add/remove"``, ``"zero-out"`` or ``"replace-one"``.

    Returns:
        A tuple of :class:`Pair`.

    Raises:
        InputError: if ``relation`` is none of those.
    """
    cand = _candidates(x, y, held_out)
    if relation in ("add/remove", "zero-out"):
        # zero-out (shuffled batches): the record replaced by one that contributes nothing -- in the
        # batch's sum, the record taken out (the batch size that divides it is fixed)
        return tuple(Pair(f"{k} / removed", relation, r, None) for k, r in cand.items())
    if relation != "replace-one":
        raise InputError(f"relation={relation!r} is not allowed: expected 'add/remove', 'zero-out' or 'replace-one'.")
    out = [Pair(f"a record -> {k}", relation, cand["a record"], r) for k, r in cand.items() if k != "a record"]
    cx, cy = cand["canary record"]
    out.append(Pair("canary record -> canary, label negated", relation, (cx, cy), (cx, -cy)))
    return tuple(out)


@dataclass(frozen=True)
class Move:
    """One comparison of the record-level probe: how far a release moved when one record changed,
    against the sensitivity claimed for it, with the float rounding the move may carry.

    Attributes:
        move: ``||q_D - q_D'||``, the move of the noiseless release.
        claim: the claimed sensitivity, >= 0.
        slack: ``SLACK_ULPS * eps(dtype) * (||q_D|| + ||q_D'||)``, the rounding allowed.
    """

    move: float
    claim: float
    slack: float

    @property
    def exceeded(self) -> bool:
        """Does the move exceed ``claim + slack``?"""
        return self.move > self.claim + self.slack

    @property
    def ratio(self) -> float:
        """``move / claim`` (a claim of 0: 0 within the slack, else inf)."""
        if self.claim > 0:
            return self.move / self.claim
        return 0.0 if self.move <= self.slack else math.inf

    @property
    def net_ratio(self) -> float:
        """``max(0, move - slack) / claim``: the move net of its rounding (a claim of 0: 0 or inf)."""
        if self.claim > 0:
            return max(0.0, self.move - self.slack) / self.claim
        return 0.0 if self.move <= self.slack else math.inf

    @property
    def tol(self) -> float:
        """``slack / claim`` (0 for a claim of 0)."""
        return self.slack / self.claim if self.claim > 0 else 0.0


def measure(q_d, q_dprime, claim: float, eps: float) -> Move:
    """The one comparison every record-level probe makes: the move of two neighbouring noiseless
    releases against ``claim``, up to :data:`SLACK_ULPS` ulps of their norms.

    Args:
        q_d: the noiseless release on D (a tensor).
        q_dprime: the noiseless release on D' (a tensor of the same shape).
        claim: the claimed sensitivity, >= 0.
        eps: the machine epsilon of the dtype the releases were computed in.

    Returns:
        A :class:`Move`.
    """
    move = float(torch.linalg.vector_norm(q_d - q_dprime))
    slack = SLACK_ULPS * eps * float(torch.linalg.vector_norm(q_d) + torch.linalg.vector_norm(q_dprime))
    return Move(move, float(claim), slack)


@dataclass(frozen=True)
class RecordProbeReport:
    """The result of a lockstep probe (:func:`record_probe`, :func:`sensitivity_probe`).

    Attributes:
        algorithm: the probed algorithm's name.
        rows: one dict per (release kind, pair): ``release``, ``pair``, ``relation``,
            ``worst_ratio`` (move / claim), ``releases``.
        worst_ratio: the largest move / claim over every release and pair.
        tol: the largest slack / claim over every release (every release satisfies
            ``move <= claim (1 + tol)`` when ``exceeded == 0``).
        exceeded: the number of releases whose move exceeds ``claim + slack``.
        std_mismatches: the number of releases whose noise std differs between D and D'.
        releases: the number of releases compared.
        slot: ``(holder, index)`` of the probed record.
        unclaimed: the number of releases without a claimed sensitivity (AdaD2P).
        seed: the seed of the probe's runs (passed back as ``seed=``, it repeats the probe), or None.
    """

    algorithm: str
    rows: tuple
    worst_ratio: float
    tol: float
    exceeded: int
    std_mismatches: int
    releases: int
    slot: tuple
    unclaimed: int = 0
    seed: int | None = None

    @property
    def passed(self) -> bool:
        """No release exceeded its claim, changed its std, or went without a claim."""
        return self.exceeded == 0 and self.std_mismatches == 0 and self.unclaimed == 0

    @property
    def max_ratio(self) -> float:
        """``worst_ratio`` (the name :func:`sensitivity_probe`'s report had)."""
        return self.worst_ratio

    def worst(self) -> dict | None:
        """The row with the largest ``worst_ratio``.

        Returns:
            That row's dict, or None when no release was compared (no rows).
        """
        return max(self.rows, key=lambda r: r["worst_ratio"]) if self.rows else None

    def as_dict(self) -> dict:
        """The report as plain data.

        Returns:
            A dict of the fields, ``slot`` as ``{"holder", "index"}`` and ``rows`` as a list of dicts
            (``unclaimed`` and ``seed`` only when set).
        """
        out = {"algorithm": self.algorithm, "worst_ratio": self.worst_ratio, "tol": self.tol,
               "exceeded": self.exceeded, "std_mismatches": self.std_mismatches, "releases": self.releases,
               "slot": {"holder": self.slot[0], "index": self.slot[1]}, "rows": [dict(r) for r in self.rows]}
        if self.unclaimed:
            out["unclaimed"] = self.unclaimed
        if self.seed is not None:
            out["seed"] = self.seed
        return out


#: :func:`sensitivity_probe`'s report: the same as :func:`record_probe`'s
ProbeReport = RecordProbeReport


class _Tally:
    """The lockstep probes' running totals: per (release kind, pair) the worst ratio and the count."""

    def __init__(self, eps: float):
        self.eps, self.stats = eps, {}
        self.worst, self.tol, self.exceeded, self.mismatches, self.unclaimed, self.count = 0.0, 0.0, 0, 0, 0, 0

    def compare(self, label: str, leader_releases, twin_releases, relation: str | None = None) -> None:
        for a, b in zip(leader_releases, twin_releases):
            self.count += 1
            self.mismatches += a.std != b.std
            if a.sensitivity is None:
                self.unclaimed += 1
                continue
            m = measure(*((a.value, b.value) if a.fresh is None else (a.fresh, b.fresh)), a.sensitivity, self.eps)
            self.exceeded += m.exceeded
            self.tol, self.worst = max(self.tol, m.tol), max(self.worst, m.ratio)
            key = (_release_kind(a.name), label, relation or a.relation)
            r0, c0 = self.stats.get(key, (0.0, 0))
            self.stats[key] = (max(r0, m.ratio), c0 + 1)

    def report(self, name: str, slot: tuple, seed: int | None = None) -> RecordProbeReport:
        rows = tuple({"release": k, "pair": p, "relation": rel, "worst_ratio": r, "releases": c}
                     for (k, p, rel), (r, c) in self.stats.items())
        return RecordProbeReport(name, rows, self.worst, self.tol, self.exceeded, self.mismatches, self.count,
                                 slot, self.unclaimed, seed)


def _lockstep(leader, twin, rounds: int, bar=None) -> None:
    for _ in range(rounds):
        leader.step()
        twin.step()
        if bar is not None:
            bar.update(1)


def _with_record(data: list, holder: int, index: int, record) -> list:
    """A copy of ``data`` (a list of (x, y) per holder) with ``record`` at the slot."""
    out = []
    for h, (x, y) in enumerate(data):
        if h == holder:
            x, y = x.clone(), y.clone()
            x[index], y[index] = record[0].to(x.dtype), record[1].to(y.dtype)
        out.append((x, y))
    return out


def _release_kind(name: str) -> str:
    """A release's name without what varies between releases of one kind (the client, the node, k)."""
    if "local" in name:
        return "v~ (local)"
    return "node i: g + N" if name.startswith("node ") else name


def record_probe(build, data: list, held_out: tuple, *, holder: int = 0, index: int = 0, rounds: int | None = None,
                 seed: int | None = None, pair_list=None, progress: bool | None = None) -> RecordProbeReport:
    """Probe every release of a run against its claimed sensitivity on real neighbouring records.

    ``build(data, seed, sampler)`` returns a fresh optimizer on ``data`` (a list of (x, y), one per
    holder: the clients or nodes; one entry for one dataset) drawing its minibatches through
    ``sampler``.  The slot ``data[holder][index]`` is the record that differs; ``held_out`` is a
    real record outside ``data``.  ``pair_list``: the neighbouring pairs (default :func:`pairs` of
    the slot's record under the run's neighbouring relation).  ``rounds``: default the whole run.

    Args:
        build: ``build(data, seed, sampler)`` -> a fresh optimizer (see above).
        data: a non-empty list of ``(x, y)``, one per holder.
        held_out: ``(x, y)`` of a real record outside ``data``.
        holder: the probed slot's holder, in [0, len(data)).
        index: the probed slot's index in the holder's data.
        rounds: the number of rounds, in [1, total rounds]; None for the whole run.
        seed: the seed of every run, an integer >= 0; None (the default): a fresh seed from the
            operating system's entropy, recorded in the report (``seed``).
        pair_list: the :class:`Pair` list to run, or None for :func:`pairs`.
        progress: show a progress bar (None: tqdm's default, shown on a terminal).

    Returns:
        A :class:`RecordProbeReport`, its ``seed`` the seed used.

    Raises:
        InputError: if ``data`` is empty, ``pair_list`` is empty or holds something else than
            :class:`Pair`, ``holder``, ``index`` or ``rounds`` is out of range, the
            algorithm claims no sensitivity (AdaD2P) or mixes neighbouring relations, an
            add/remove pair is asked of releases that draw no sample, or ``seed`` is neither None
            nor an integer >= 0.
    """
    from tqdm.auto import tqdm

    seed = choose_seed(seed)
    if not isinstance(data, (list, tuple)) or not data:
        raise InputError("data is not allowed: expected a non-empty list of (x, y) pairs, one per holder.")
    if not 0 <= int(holder) < len(data):
        raise InputError(f"holder={holder!r} is not allowed: expected an integer in [0, {len(data) - 1}].")
    if not 0 <= int(index) < data[holder][0].shape[0]:
        raise InputError(f"index={index!r} is not allowed: expected an integer in [0, {data[holder][0].shape[0] - 1}].")
    first = build(data, seed, None)
    name = first.name
    if isinstance(first, NoGuarantee):
        raise InputError(f"algorithm={name!r} is not allowed for a sensitivity probe: it claims no sensitivity "
                         "(AdaD2P's noise scales with the private gradient itself: no finite guarantee, AdaD2P-E1).")
    relation = _relation(first)
    if pair_list is None:
        x, y = data[holder]
        pair_list = pairs(x[index], y[index], held_out, relation)
    pair_list = tuple(pair_list)
    if not pair_list or not all(isinstance(pr, Pair) for pr in pair_list):
        raise InputError(f"pair_list={pair_list!r} is not allowed: expected a non-empty list of Pair, or None for "
                         "the standard pairs.")
    n = first.total_rounds if rounds is None else int(rounds)
    if not 1 <= n <= first.total_rounds:
        raise InputError(f"rounds={rounds!r} is not allowed: expected an integer in [1, {first.total_rounds}].")
    tally = _Tally(torch.finfo(first.dtype).eps)
    bar = tqdm(total=len(pair_list) * n, desc=f"probe {name}", disable=(None if progress is None else not progress),
               leave=False)
    try:
        for pr in pair_list:
            lead_s = ForcedRecord(holder, index, True)
            leader = build(_with_record(data, holder, index, pr.record_d), seed, lead_s)
            leader.privatizer.record = leader.privatizer.record_values = True
            twin_s = ForcedRecord(holder, index, pr.record_dprime is not None)
            twin = build(_with_record(data, holder, index, pr.record_dprime or pr.record_d), seed, twin_s)
            twin.privatizer = ReplaySource(leader.privatizer, twin.device, twin.dtype)
            _lockstep(leader, twin, n, bar)
            if pr.record_dprime is None and twin_s.draws == 0:
                raise InputError(f"algorithm={name!r} is not allowed for an add/remove probe: its releases draw no "
                                 "sample, so the record cannot be taken out (its claim is under replace-one).")
            tally.compare(pr.label, leader.privatizer.releases, twin.privatizer.releases, relation)
    finally:
        bar.close()
    return tally.report(name, (int(holder), int(index)), seed)


def sensitivity_probe(build, candidates: dict | None = None, *, holder: int = 0, rounds: int | None = None,
                      seed: int | None = None) -> RecordProbeReport:
    """The record probe with **gradient canaries** instead of real records: the ``holder``'s record 0
    is each candidate canary in turn (the leader's A, the twin's B, :func:`~.lockstep.run_pair`), and
    every release of the visited trajectory is compared with its claim as in :func:`record_probe`.

    The canary bypasses the forward and backward (it is the record's per-example gradient), so this
    probe checks the noise and the accounting, not the clipping code.  Under add/remove only pairs
    with the candidate named ``"zero"`` (= the record removed) are compared.  Releases without a
    claim (AdaD2P) are counted in ``unclaimed`` and fail the probe.

    Args:
        build: ``build(seed)`` -> a fresh optimizer (the same configuration every call).
        candidates: name -> canary (``canary(j)`` callable or flat tensor); None for the defaults:
            zero gradient, a huge constant gradient (1e6) and its opposite, a huge alternating gradient.
        holder: the canaries' holder.
        rounds: the number of rounds; None for the run's ``total_rounds``.
        seed: the seed of every run, an integer >= 0; None (the default): a fresh seed from the
            operating system's entropy, recorded in the report (``seed``).

    Returns:
        A :class:`RecordProbeReport` (``pair`` rows named ``"A -> B"``, slot ``(holder, 0)``), its
        ``seed`` the seed used.

    Raises:
        InputError: if ``candidates`` holds fewer than two canaries, or ``seed`` is neither None nor
            an integer >= 0.
    """
    seed = choose_seed(seed)
    first = build(seed)
    d = sum(q.numel() for q in first.model.parameters())
    if candidates is None:
        candidates = {"zero": zero(d), "huge": constant(d, 1e6), "opposite": constant(d, -1e6),
                      "alternating": alternating(d, 1e6)}
    if len(candidates) < 2:
        raise InputError(f"candidates={candidates!r} is not allowed: expected at least two canaries by name.")
    tally = _Tally(torch.finfo(first.dtype).eps)
    for a in candidates:
        for b in candidates:
            if a == b:
                continue
            leader, twin = run_pair(build, seed, candidates[a], candidates[b], holder=holder, rounds=rounds)
            rl, rt = leader.privatizer.releases, twin.privatizer.releases
            if rl and rl[0].relation == "add/remove" and "zero" not in (a, b):
                continue
            tally.compare(f"{a} -> {b}", rl, rt)
    return tally.report(first.name, (int(holder), 0), seed)


def _relation(opt) -> str:
    rels = {spec.relation for spec in opt.mechanism.releases}
    if len(rels) != 1:
        raise InputError(f"algorithm={opt.name!r} is not allowed: its releases mix neighbouring relations {rels}.")
    return rels.pop()


# ---- the standard probe of each algorithm (CLI and docs) ---------------------------------------------
def probe_defaults(algorithm: str) -> dict | None:
    """The standard probe's defaults of ``algorithm`` (the papers' values): ``lr`` and each clip option of
    its optimizer (``c1``, ``c2``, ``clip``; the registry's ``clips``): 0.1 and 1 unless the optimizer's
    ``paper_values`` says otherwise.

    Args:
        algorithm: a registered algorithm name.

    Returns:
        ``{"lr": ..., clip option: ...}``, or None where the algorithm claims no sensitivity (no probe).

    Raises:
        InputError: if ``algorithm`` is not registered.
    """
    entry = lookup(algorithm)
    if entry.no_guarantee:
        return None
    from ..algorithms.registry import optimizer_class

    return {"lr": 0.1, **dict.fromkeys(entry.clips, 1.0), **optimizer_class(algorithm).paper_values}


def refusal(algorithm: str) -> str:
    """Why ``algorithm`` has no standard probe.

    Args:
        algorithm: the algorithm's name.

    Returns:
        The message: the algorithm's lack of a guarantee, or the list of the probed algorithms.
    """
    entry = REGISTRY.get(algorithm) if isinstance(algorithm, str) else None
    if entry is not None and entry.no_guarantee:
        return (f"ALGORITHM={algorithm!r} is not allowed for a sensitivity probe: it claims no sensitivity "
                f"({entry.no_guarantee})")
    probed = ", ".join(name for name, a in REGISTRY.items() if not a.no_guarantee)
    return f"ALGORITHM={algorithm!r} is not allowed for a probe: expected one of {probed}"


#: nodes of the standard D2P probe network
PROBE_NODES = 4


def _table(name: str, rows: int, seed: int):
    """``(x, y)`` float tensors: ``rows`` records of a synthetic shape or a numeric CSV (last column: the
    target), prepared as in the DIFF2 paper (standardised features; targets scaled by ``max |y|``)."""
    import os

    from .. import data as D

    if os.path.exists(name):
        t = D.load_csv(name, test_fraction=0.0, seed=seed)
    elif name in D.SHAPES:
        t = D.prepare(*D.synthetic(name, n=rows, seed=seed), task="regression", test_fraction=0.0, seed=seed)
    else:
        raise InputError(f"data={name!r} is not allowed: expected a synthetic shape ({', '.join(sorted(D.SHAPES))}) "
                         "or the path of a numeric CSV file.")
    if t.x_train.shape[0] < rows:
        raise InputError(f"data={name!r} is not allowed: it has {t.x_train.shape[0]} records, the run needs {rows} "
                         "(and one held out).")
    return t.x_train[:rows], t.y_train[:rows].to(t.x_train.dtype)


def probe_harness(algorithm: str, mechanism, noise, *, n: int = 1000, hidden: int = 64, data: str = "california",
                  lr: float | None = None, clips: dict | None = None, seed: int | None = None, dtype=torch.float32,
                  secure_mode: bool = False):
    """``(build, data, held_out)`` of the standard record probe of ``algorithm`` at the run shape
    ``mechanism`` and noise ``noise``: an MLP d -> hidden -> hidden -> 1 (softplus; the papers'
    model family) with the squared loss, on ``data`` (a synthetic shape or a CSV); as many records
    as the shape fixes (the registry entry's ``records``: DIFF2 family n_min per client; DP-SRM n;
    DiceSGD N; D2P J per node on 4 nodes), else ``n`` (DP-SGD).  ``lr``, ``clips`` (``c1``, ``c2``,
    ``clip``, passed as the entry's ``clips`` keywords): default the entry's ``probe``.  ``secure_mode``:
    the optimizers draw from the secure generator and sampler (seeded: the probe simulates the
    adversary who knows the seed).

    Args:
        algorithm: a registered algorithm with a standard probe.
        mechanism: the run shape (a mechanism of ``algorithm``).
        noise: its calibration or a dict of noise levels.
        n: records per dataset where the shape does not fix it, an integer >= 2.
        hidden: the MLP's hidden width, an integer >= 1.
        data: a synthetic shape's name or the path of a numeric CSV (last column: the target).
        lr: the learning rate, or None for the entry's.
        clips: clip norms by option name (None values ignored), or None for the entry's.
        seed: the seed of the data and the model's initialisation, an integer >= 0; None (the
            default): a fresh seed from the operating system's entropy, recorded as ``build.seed``.
        dtype: the dtype of the data and the model.
        secure_mode: run the optimizers in secure mode.

    Returns:
        ``(build, data, held_out)`` for :func:`record_probe`; ``build.seed`` is the seed used
        (``seed=build.seed`` gives the same data and model again).

    Raises:
        InputError: if ``algorithm`` has no standard probe, ``hidden`` or the records per dataset
            are out of range, ``data`` is unknown or too small, or ``seed`` is neither None nor an
            integer >= 0.
    """
    from torch import nn

    from ..algorithms.registry import optimizer_class, squared_loss

    entry = REGISTRY.get(algorithm) if isinstance(algorithm, str) else None
    if entry is None or entry.no_guarantee:
        raise InputError(refusal(algorithm))
    opts = {**probe_defaults(algorithm), **{k: v for k, v in (clips or {}).items() if v is not None}}
    if lr is not None:
        opts["lr"] = lr
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
        raise InputError(f"hidden={hidden!r} is not allowed: expected an integer >= 1.")
    fixed = getattr(mechanism, entry.records, None) if entry.records else None
    if entry.data == "clients":
        holders, per = mechanism.clients, fixed
    elif entry.data == "nodes":
        holders, per = PROBE_NODES, fixed
    else:
        holders, per = 1, (fixed if entry.records else n)
    if isinstance(per, bool) or not isinstance(per, int) or per < 2:
        raise InputError(f"n={per!r} is not allowed: expected an integer >= 2 (records per dataset).")
    seed = choose_seed(seed)
    x, y = _table(data, holders * per + 1, seed)
    x, y = x.to(dtype), y.to(dtype)
    held_out = (x[-1], y[-1])
    tables = [(x[h * per:(h + 1) * per], y[h * per:(h + 1) * per]) for h in range(holders)]
    d_in = x.shape[1]

    def model():
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(d_in, hidden), nn.Softplus(), nn.Linear(hidden, hidden), nn.Softplus(),
                             nn.Linear(hidden, 1)).to(dtype)

    cls = optimizer_class(algorithm)
    kw = {"lr": opts["lr"], **{keyword: opts[option] for option, keyword in entry.clips.items()}}

    def build(tabs, s, sampler):
        payload = tabs[0] if holders == 1 else tabs
        return cls(model(), squared_loss, payload, mechanism, noise, seed=s, sampler=sampler, secure_mode=secure_mode,
                   **kw)

    build.seed = seed
    return build, tables, held_out
