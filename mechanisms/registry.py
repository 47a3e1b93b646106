"""The one registry of the algorithms: what the other layers need to know about an algorithm by name
(its mechanism, the checks that apply, how its optimizer takes its records and clips).  Every list of
algorithm names in the project is derived from :data:`REGISTRY` (``ALGORITHMS``, ``OPTIMIZERS``, the
audits' kinds (``names(audit=...)``), ``dpcalib train``'s choices); adding an algorithm
is one entry here (tests/test_layout.py checks that no other list is written out).  The command
line's own facts (the worked examples) live with the command line
(:mod:`dpcalib.commands.algorithms`), the papers' learning rates and clips with the optimizers
(``paper_values``); the run's shape is :mod:`.shape`, which each mechanism builds itself from
(``from_run``).

The reference optimizer is not named here: the optim layer registers its class under the
algorithm's name (:func:`dpcalib.optim.register_optimizer`), so that this layer and the command line
never import torch and nothing is imported by a string.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..accountant.validation import InputError

from .d2p import AdaD2P, ClipD2P, ConstD2P
from .dicesgd import DiceSGD
from .diff2 import DIFF2BVR, DIFF2GD, DPGD
from .dpsgd import DPSGD
from .dpsrm import DPSRM
from .shape import BALLS_IN_BINS, POISSON, SHUFFLE, WOR

__all__ = ["REGISTRY", "names", "RegistryView", "lookup"]


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
        data: how the optimizer takes its records: ``"clients"``, ``"nodes"`` or ``"dataset"``.
        records: the mechanism field that fixes the records per shard / node / dataset, or None.
        clips: clip option (``c1``, ``c2``, ``clip``) -> the optimizer's keyword.
        clip_enforced: False where the clip norm is an estimate the update never enforces.
        claimed_by: the algorithm whose guarantee the paper claims for this one, or None.
        paper_auditable: False where the paper's claim rests on amplification by sampling.
        warnings: ``(erratum id, text)`` pairs printed with every eps of this algorithm.
        noise_notes: print every noise level the paper names, with the reason where unused.
        no_guarantee: why the algorithm claims no sensitivity at all (empty if it does).
        engine: the batch samplings the engine's accountant covers (:data:`.shape.SAMPLINGS`), the first
            the default.
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
    # ---- the engine (dpcalib.optim.PrivacyEngine, a user's own loop) and `dpcalib train`: the batch
    # samplings its accountant covers (shape.SAMPLINGS), the first the default; () : none.  A trainable
    # algorithm's mechanism builds itself from the run's shape: `from_run(run)`
    engine: tuple = ()


def _diff2_facts() -> dict:
    """What DIFF2-GD and DIFF2-BVR share: P clients' shards of at least n_min records, the two clip norms
    C1 (restart rounds) and C2 (difference rounds), every sigma named."""
    return dict(data="clients", records="n_min", clips={"c1": "C1", "c2": "C2"}, noise_notes=True)


REGISTRY: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("dp-gd", DPGD, "DIFF2 (Murata & Suzuki, ICML 2023), DP-GD baseline: Prop. 4.1 with T = 1, u -> 1",
              ("llr",), batched=True, train="clients", data="clients", records="n_min",
              clips={"c1": "C1"}, noise_notes=True),
    Algorithm("diff2-gd", DIFF2GD, "DIFF2 (Murata & Suzuki, ICML 2023), Algorithms 1-3, Prop. 4.1",
              ("llr",), batched=True, train="clients", **_diff2_facts()),
    Algorithm("diff2-bvr", DIFF2BVR, "DIFF2 (Murata & Suzuki, ICML 2023), Algorithm 4, Prop. E.2",
              ("wor",), **_diff2_facts()),
    Algorithm("dp-sgd", DPSGD, "Abadi et al. 2016; DPSGD-GC of DiceSGD (Zhang et al.) Algorithm 1, Thm 2.3",
              ("one-run",), train="data-parallel", clips={"clip": "C"}, engine=(POISSON, SHUFFLE, BALLS_IN_BINS)),
    Algorithm("dp-srm", DPSRM, "DP-SRM (Wang, Jayaraman, Evans & Gu), supplement eqs. 2.3, 2.5",
              ("wor",), train="data-parallel", records="n", engine=(WOR,)),
    Algorithm("dicesgd", DiceSGD, "DiceSGD (Zhang, Bu, Wu & Hong, 2024), Algorithms 2-4, Thm 3.7",
              ("llr", "one-run"), train="data-parallel", records="N", engine=(POISSON,), paper_auditable=False),
    Algorithm("clipd2p", ClipD2P, "AdaD2P paper (ICLR 2024 submission), Algorithm 3, Prop. 2",
              ("llr", "wor"), data="nodes", records="samples_per_node", clips={"clip": "C"}),
    Algorithm("constd2p", ConstD2P, "AdaD2P paper (ICLR 2024 submission), Algorithm 2, Prop. 2",
              ("llr",), data="nodes", records="samples_per_node", clips={"clip": "G"},
              clip_enforced=False,
              warnings=(("AdaD2P-E2", "G is estimated and not enforced; the eps holds only if every gradient norm <= G"),)),
    Algorithm("adad2p", AdaD2P, "AdaD2P paper (ICLR 2024 submission), Algorithm 1 -- no valid guarantee",
              ("llr",), data="nodes", records="samples_per_node", claimed_by="clipd2p",
              no_guarantee="its noise scales with the private gradient itself: no finite guarantee, AdaD2P-E1"),
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
