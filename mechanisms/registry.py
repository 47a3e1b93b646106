"""The one registry of the algorithms: everything the other layers and the command line need to
know about an algorithm by name.  Every list of algorithm names in the project is derived from
:data:`REGISTRY` (``ALGORITHMS``, ``OPTIMIZERS``, the audits' ``AUDITABLE`` / ``ONE_RUN`` /
``BATCHABLE``, ``dpcalib train``'s choices, the command line's examples); adding an algorithm is
one entry here (tests/test_layout.py checks that no other list is written out).

The reference optimizer is not named here: the optim layer registers its class under the
algorithm's name (:func:`dpcalib.optim.register_optimizer`), so that this layer and the command line
never import torch and nothing is imported by a string.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..accountant.validation import InputError

from .d2p import AdaD2P, ClipD2P, ConstD2P
from .dicesgd import DiceSGD
from .diff2 import DIFF2BVR, DIFF2GD, DPGD
from .dpsgd import DPSGD
from .dpsrm import DPSRM

__all__ = ["Algorithm", "REGISTRY", "names", "Names", "RegistryView", "ALGORITHMS", "lookup", "register"]


@dataclass(frozen=True)
class Algorithm:
    """One algorithm: its mechanism, the paper, and which checks apply (its reference optimizer is
    registered by the optim layer, :func:`dpcalib.optim.register_optimizer`).

    Attributes:
        name: the registry name (``"dp-sgd"``...).
        mechanism: the mechanism class (:mod:`dpcalib.mechanisms`).
        source: the paper and the algorithm, theorem or proposition, in words.
        audit: the audits that apply: ``"llr"``, ``"wor"``, ``"one-run"``.
        batched: whether many audit runs are stacked along a tensor dimension.
        train: how ``dpcalib train`` runs it: ``"clients"``, ``"data-parallel"``, or ``""`` (not).
        examples: command -> a worked command line.
        probe: the record probe's defaults (lr and clip options), or None (no probe).
        data: how the optimizer takes its records: ``"clients"``, ``"nodes"`` or ``"dataset"``.
        records: the mechanism field that fixes the records per shard / node / dataset, or None.
        clips: clip option (``c1``, ``c2``, ``clip``) -> the optimizer's keyword.
        clip_enforced: False where the clip norm is an estimate the update never enforces.
        claimed_by: the algorithm whose guarantee the paper claims for this one, or None.
        paper_auditable: False where the paper's claim rests on amplification by sampling.
        warnings: ``(erratum id, text)`` pairs printed with every eps of this algorithm.
        noise_notes: print every noise level the paper names, with the reason where unused.
        no_guarantee: why the algorithm claims no sensitivity at all (empty if it does).
        train_shape: ``dpcalib train``: mechanism field -> run quantity.
        train_clips: ``dpcalib train``: optimizer keyword -> run quantity.
        train_defaults: ``dpcalib train``: run quantity -> its value when not given.
        engine: the batch samplings the engine's accountant covers, the first the default.
    """

    name: str
    mechanism: type
    source: str
    audit: tuple = ()              # "llr": many-run white-box audit conditioned on the sampling
                                   # (full batch, assumption-free, J = 1); "wor": the replace-one
                                   # coupling of sampling without replacement; "one-run"
    batched: bool = False          # many audit runs stacked along a tensor dimension
    train: str = ""                # `dpcalib train`: "clients" (one client per process), "data-parallel"
                                   # (every process holds the data and computes its share of each batch)
    examples: dict = field(default_factory=dict)   # command -> a worked command line
    probe: dict | None = None      # the record probe's defaults: lr and the clip options that are not
                                   # shape options (c1, c2, clip), the papers' values; None: no probe
    # ---- how the reference optimizer takes its records and clip norms (the checks, `train` and the
    # command line build every run from these; no module outside this file branches on a name)
    data: str = "dataset"          # "clients": a list of `clients` shards; "nodes": a list of node tables;
                                   # "dataset": one table
    records: str | None = None     # the mechanism field that fixes the records per shard / node / dataset
                                   # (None: any number, e.g. DP-SGD's Poisson sampling)
    clips: dict = field(default_factory=dict)   # clip option (c1, c2, clip) -> the optimizer's keyword
    clip_enforced: bool = True     # False: the clip norm is an estimate the update never enforces (ConstD2P)
    claimed_by: str | None = None  # the paper claims this algorithm has that algorithm's guarantee at the
                                   # same noise (AdaD2P: ClipD2P's); its mechanism's `claimed_mechanism()`
    paper_auditable: bool = True   # False: the paper's claim rests on amplification by sampling, which the
                                   # many-run audit (conditioned on the sampling) cannot test
    warnings: tuple = ()           # (erratum id, text): printed with every eps of this algorithm
    noise_notes: bool = False      # print every noise level the paper names, "-" with the reason where unused
    no_guarantee: str = ""         # why the algorithm claims no sensitivity at all (no probe, no calibration)
    # ---- `dpcalib train` (only where `train` is set): the run's quantities -- rounds, restart_interval,
    # world (processes), n_min, n (records), batch_size, b0, sampling, rate (b / n, Poisson), shuffle_n and
    # shuffle_batch (shuffled epochs), epochs, c1, c2 -- onto the mechanism's fields and the optimizer's
    # keywords; train_defaults fill quantities the command line left out
    train_shape: dict = field(default_factory=dict)      # mechanism field -> quantity
    train_clips: dict = field(default_factory=dict)      # optimizer keyword -> quantity
    train_defaults: dict = field(default_factory=dict)   # quantity -> its value when not given
    # ---- the engine (dpcalib.optim.PrivacyEngine, a user's own loop): the batch samplings its accountant
    # covers ("poisson", "wor": fixed size without replacement, "shuffle", "balls-in-bins"), the first the
    # default; () : none
    engine: tuple = ()


def _ex(**kw) -> dict:
    return kw


def _d2p_examples(name: str) -> dict:
    """The worked command lines of ClipD2P and ConstD2P: the paper's shape, a one-node audit, a probe."""
    return _ex(calibrate=f"dpcalib calibrate {name} --epsilon 1 --delta 1e-5 --samples-per-node 2500 --iterations 3500",
               audit=f"dpcalib audit {name} --epsilon 2 --delta 1e-5 --samples-per-node 1 --iterations 1 "
                     "--relation replace-one --runs 300",
               probe=f"dpcalib probe {name} --epsilon 1 --delta 1e-5 --samples-per-node 50 --iterations 20")


def _diff2_facts() -> dict:
    """What DIFF2-GD and DIFF2-BVR-L-SGD share: P clients' shards of at least n_min records, the two
    clip norms C1 (restart rounds) and C2 (difference rounds), every sigma named, the probe's
    defaults (the paper's lr and clips)."""
    return dict(data="clients", records="n_min", clips={"c1": "C1", "c2": "C2"}, noise_notes=True,
                probe={"lr": 0.125, "c1": 1.0, "c2": 10.0})


REGISTRY: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("dp-gd", DPGD, "DIFF2 (Murata & Suzuki, ICML 2023), DP-GD baseline: Prop. 4.1 with T = 1, u -> 1",
              ("llr",), batched=True, train="clients", data="clients", records="n_min",
              clips={"c1": "C1"}, noise_notes=True,
              train_shape={"rounds": "rounds", "clients": "world", "n_min": "n_min"}, train_clips={"C1": "c1"},
              examples=_ex(
                  calibrate="dpcalib calibrate dp-gd --epsilon 3 --delta 1e-5 --rounds 2000 --clients 10 --n-min 1651",
                  audit="dpcalib audit dp-gd --epsilon 2 --delta 1e-5 --rounds 4 --clients 2 --n-min 5 --runs 2000",
                  probe="dpcalib probe dp-gd --epsilon 3 --delta 1e-5 --rounds 20 --clients 4 --n-min 250"),
              probe={"lr": 0.125, "c1": 1.0}),
    Algorithm("diff2-gd", DIFF2GD, "DIFF2 (Murata & Suzuki, ICML 2023), Algorithms 1-3, Prop. 4.1",
              ("llr",), batched=True, train="clients", **_diff2_facts(),
              train_shape={"rounds": "rounds", "restart_interval": "restart_interval", "clients": "world",
                           "n_min": "n_min"},
              train_clips={"C1": "c1", "C2": "c2"}, train_defaults={"c2": 10.0}, examples=_ex(
                  calibrate="dpcalib calibrate diff2-gd --epsilon 3 --delta 1e-5 --rounds 2000 --restart-interval 20 "
                            "--clients 10 --n-min 1651 --u 1.25 --method paper",
                  audit="dpcalib audit diff2-gd --epsilon 2 --delta 1e-5 --rounds 4 --restart-interval 2 --clients 2 "
                        "--n-min 5 --runs 2000",
                  probe="dpcalib probe diff2-gd --epsilon 3 --delta 1e-5 --rounds 40 --restart-interval 20 --clients 4 "
                        "--n-min 250 --c2 0.01")),
    Algorithm("diff2-bvr", DIFF2BVR, "DIFF2 (Murata & Suzuki, ICML 2023), Algorithm 4, Prop. E.2",
              ("wor",), **_diff2_facts(), examples=_ex(
                  calibrate="dpcalib calibrate diff2-bvr --epsilon 3 --delta 1e-5 --rounds 2000 --restart-interval 20 "
                            "--clients 10 --n-min 1651 --local-steps 5 --batch-size 13",
                  audit="dpcalib audit diff2-bvr --epsilon 8 --delta 1e-5 --rounds 2 --restart-interval 2 --clients 2 "
                        "--n-min 4 --local-steps 3 --batch-size 2 --runs 1000",
                  probe="dpcalib probe diff2-bvr --epsilon 3 --delta 1e-5 --rounds 8 --restart-interval 4 --clients 2 "
                        "--n-min 500 --local-steps 3 --batch-size 50")),
    Algorithm("dp-sgd", DPSGD, "Abadi et al. 2016; DPSGD-GC of DiceSGD (Zhang et al.) Algorithm 1, Thm 2.3",
              ("one-run",), train="data-parallel", clips={"clip": "C"},
              train_shape={"sampling": "sampling", "sampling_rate": "rate", "steps": "rounds", "n": "shuffle_n",
                           "batch_size": "shuffle_batch", "epochs": "epochs"},
              train_clips={"C": "c1"}, engine=("poisson", "shuffle", "balls-in-bins"), examples=_ex(
                  calibrate="dpcalib calibrate dp-sgd --epsilon 2 --delta 1e-5 --sampling-rate 0.02 --steps 150",
                  audit="dpcalib audit dp-sgd --epsilon 2 --delta 1e-5 --sampling-rate 0.01 --steps 1000 --one-run",
                  probe="dpcalib probe dp-sgd --epsilon 2 --delta 1e-5 --sampling-rate 0.05 --steps 20"),
              probe={"lr": 0.1, "clip": 1.0}),
    Algorithm("dp-srm", DPSRM, "DP-SRM (Wang, Jayaraman, Evans & Gu), supplement eqs. 2.3, 2.5",
              ("wor",), train="data-parallel", records="n",
              train_shape={"n": "n", "steps": "rounds", "b0": "b0", "b": "batch_size", "lipschitz": "c1",
                           "step_bound": "c2", "momentum": "momentum"},
              train_defaults={"c2": 1.0}, engine=("wor",), examples=_ex(
                  calibrate="dpcalib calibrate dp-srm --epsilon 0.5 --delta 1e-5 --n 49990 --steps 100 --b0 256 --b 64",
                  audit="dpcalib audit dp-srm --epsilon 8 --delta 1e-5 --n 4 --steps 2 --b0 2 --b 2 --momentum 1 "
                        "--step-bound 1 --runs 200",
                  probe="dpcalib probe dp-srm --epsilon 0.5 --delta 1e-5 --n 2000 --steps 30 --b0 64 --b 16"),
              probe={"lr": 0.1}),
    Algorithm("dicesgd", DiceSGD, "DiceSGD (Zhang, Bu, Wu & Hong, 2024), Algorithms 2-4, Thm 3.7",
              ("llr", "one-run"), train="data-parallel", records="N",
              train_shape={"N": "n", "batch_size": "batch_size", "steps": "rounds", "C1": "c1", "C2": "c2"},
              train_defaults={"c2": 1.0}, engine=("poisson",),
              paper_auditable=False, examples=_ex(
                  calibrate="dpcalib calibrate dicesgd --epsilon 2 --delta 1e-5 --n 50000 --batch-size 1000 "
                            "--steps 150 --c1 1 --c2 1 --c 1 --method both",
                  audit="dpcalib audit dicesgd --epsilon 2 --delta 1e-5 --n 20 --batch-size 5 --steps 4 --c1 1 "
                        "--c2 0.1 --runs 500",
                  probe="dpcalib probe dicesgd --epsilon 2 --delta 1e-5 --n 1000 --batch-size 50 --steps 20 --c1 1 "
                        "--c2 1 --c 1"),
              probe={"lr": 0.1}),
    Algorithm("clipd2p", ClipD2P, "AdaD2P paper (ICLR 2024 submission), Algorithm 3, Prop. 2",
              ("llr", "wor"), data="nodes", records="samples_per_node", clips={"clip": "C"},
              examples=_d2p_examples("clipd2p"),
              probe={"lr": 0.1, "clip": 1.0}),
    Algorithm("constd2p", ConstD2P, "AdaD2P paper (ICLR 2024 submission), Algorithm 2, Prop. 2",
              ("llr",), data="nodes", records="samples_per_node", clips={"clip": "G"},
              clip_enforced=False,
              warnings=(("AdaD2P-E2", "G is estimated and not enforced; the eps holds only if every gradient norm <= G"),),
              examples=_d2p_examples("constd2p"),
              probe={"lr": 0.1, "clip": 1.0}),
    Algorithm("adad2p", AdaD2P, "AdaD2P paper (ICLR 2024 submission), Algorithm 1 -- no valid guarantee",
              ("llr",), data="nodes", records="samples_per_node", claimed_by="clipd2p",
              no_guarantee="its noise scales with the private gradient itself: no finite guarantee, AdaD2P-E1",
              examples=_ex(
                  calibrate="dpcalib calibrate adad2p --epsilon 1 --delta 1e-5   (refused: no guarantee)",
                  audit="dpcalib audit adad2p --epsilon 2 --delta 1e-5 --samples-per-node 1 --iterations 1 --runs 300",
                  probe="dpcalib probe adad2p ...   (refused: AdaD2P claims no sensitivity)")),
)}


def lookup(name: str) -> Algorithm:
    """The registry entry of ``name``; an unknown name raises :class:`InputError` listing the known ones.

    Args:
        name: a registered algorithm name.

    Returns:
        The :class:`Algorithm` entry.

    Raises:
        InputError: if ``name`` is not registered.
    """
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise InputError(f"algorithm={name!r} is not allowed: expected one of {', '.join(REGISTRY)}.") from None


def register(algorithm: Algorithm) -> Algorithm:
    """Add an algorithm (its mechanism, optimizer and the facts above) to the registry: every command,
    check and list derived from the registry then knows it.  A name already taken is refused.

    Args:
        algorithm: the :class:`Algorithm` to add.

    Returns:
        ``algorithm`` itself.

    Raises:
        InputError: if ``algorithm`` is not an :class:`Algorithm` or its name is taken.
    """
    if not isinstance(algorithm, Algorithm):
        raise InputError(f"algorithm={algorithm!r} is not allowed: expected a registry.Algorithm.")
    if algorithm.name in REGISTRY:
        raise InputError(f"algorithm.name={algorithm.name!r} is not allowed: that name is registered already.")
    REGISTRY[algorithm.name] = algorithm
    return algorithm


def names(*, audit: str | None = None, batched: bool | None = None, train: bool | str | None = None) -> tuple:
    """The names (registry order) of the algorithms with that audit kind / batched audits / train
    (``train=True``: any way of training; or the way, "clients" / "data-parallel").

    Args:
        audit: None (any), or an audit kind (``"llr"``, ``"wor"``, ``"one-run"``).
        batched: None (any), or whether the audits are batched.
        train: None (any), True/False (trainable or not), or ``"clients"`` / ``"data-parallel"``.

    Returns:
        A tuple of algorithm names.
    """
    return tuple(n for n, a in REGISTRY.items()
                 if (audit is None or audit in a.audit) and (batched is None or a.batched == batched)
                 and (train is None or (bool(a.train) == train if isinstance(train, bool) else a.train == train)))


class Names(Sequence):
    """:func:`names` as a live view: read from the registry at every use, so that an algorithm
    registered after import is in it too (``AUDITABLE``, ``ONE_RUN``, ``BATCHABLE``, ...).

    Args:
        **which: the filters of :func:`names` (``audit``, ``batched``, ``train``).
    """

    def __init__(self, **which):
        self._which = which

    def _now(self) -> tuple:
        return names(**self._which)

    def __getitem__(self, i):
        return self._now()[i]

    def __len__(self):
        return len(self._now())

    def __contains__(self, name):
        return name in self._now()

    def __iter__(self):
        return iter(self._now())

    def __eq__(self, other):
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, Names)) else other)

    def __hash__(self):
        return hash(self._now())

    def __repr__(self):
        return repr(self._now())


class RegistryView(Mapping):
    """``name -> of(name)`` for every registered algorithm, read from the registry at every use (so an
    algorithm registered after import is in it too): ``ALGORITHMS``, ``OPTIMIZERS``.

    Args:
        of: maps a registered name to the view's value.
    """

    def __init__(self, of):
        self._of = of

    def __getitem__(self, name):
        if name not in REGISTRY:
            raise KeyError(name)
        return self._of(name)

    def __iter__(self):
        return iter(list(REGISTRY))

    def __len__(self):
        return len(REGISTRY)

    def __repr__(self):
        return repr(dict(self))


#: name -> (class, source), derived from :data:`REGISTRY` (the one list of the algorithms)
ALGORITHMS = RegistryView(lambda name: (REGISTRY[name].mechanism, REGISTRY[name].source))
