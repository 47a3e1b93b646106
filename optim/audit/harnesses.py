"""The standard audit harnesses (CLI and docs): for an algorithm and its calibration, the model,
the data, the canaries and the holder of a white-box audit, a one-run audit and a
without-replacement audit.  Small models on synthetic data, so that an audit of thousands of runs
takes seconds.

Every setup is built from the algorithm's registry entry (``dpcalib.mechanisms.REGISTRY``): how its
optimizer takes records (``data``: clients' shards, nodes, one dataset), which mechanism field
fixes their number (``records``), its clip keywords (``clips``, all set to 1) and whether the clip
is enforced (``clip_enforced``); no branch names an algorithm, so an algorithm registered from
outside dpcalib gets the same audits.
"""

from __future__ import annotations

import torch

from ...accountant.validation import InputError
from ...mechanisms.registry import lookup, names
from .lockstep import alternating, constant, zero

__all__ = []


# ---- standard harnesses (CLI and docs; the auditable algorithms: names(audit="llr"), names(audit="one-run"))


def _optimizer(algorithm: str):
    from ..algorithms.registry import optimizer_class, squared_loss

    entry = lookup(algorithm)
    return entry, optimizer_class(algorithm), squared_loss, {kw: 1.0 for kw in entry.clips.values()}


def _records(entry, mechanism, default=None):
    """The records per shard / node / dataset that the run's shape fixes (``default`` where it fixes none)."""
    return getattr(mechanism, entry.records) if entry.records else default


def _linear_model(d_in: int):
    from torch import nn

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(d_in, 1))
    return model


def harness(algorithm: str, mechanism, noise):
    """``(build, canary_d, canary_dprime, holder, gdp_exact)`` for a standard white-box audit of
    ``algorithm`` at the run shape ``mechanism`` and noise levels ``noise``: a one-layer linear
    model on 2 synthetic features, ``n_min`` records per client / N records / one record per node.

    The LLR conditions on the sampling, so only claims without amplification by sampling are
    auditable: full-batch DP-GD / DIFF2-GD, DiceSGD's assumption-free accountant, and the D2P
    family with one record per node (J = 1).

    Args:
        algorithm: a registered algorithm's name.
        mechanism: the run shape (a mechanism of ``algorithm``).
        noise: its calibration or a dict of noise levels.

    Returns:
        ``(build, canary_d, canary_dprime, holder, gdp_exact)``: ``build(seed)`` -> a fresh
        optimizer, the two canaries, the canaries' holder (0) and whether the claim is exactly GDP.

    Raises:
        InputError: if ``algorithm`` is not registered or not auditable this way, or a D2P run has
            more than one record per node.
    """
    lookup(algorithm)
    if algorithm not in names(audit="llr"):
        raise InputError(f"algorithm={algorithm!r} is not allowed for an audit: expected one of "
                         f"{names(audit='llr')} (claims that rely on amplification by sampling need a mixture "
                         "statistic, not implemented).")
    entry, cls, loss, kw = _optimizer(algorithm)
    g = torch.Generator().manual_seed(12345)
    d_model = 3
    model = _linear_model(2)

    def table(n):
        return torch.randn(n, 2, generator=g), torch.randn(n, generator=g)

    if entry.data == "clients":
        shards = [table(_records(entry, mechanism)) for _ in range(mechanism.clients)]
        build = lambda s: cls(model(), loss, shards, mechanism, noise, lr=0.1, seed=s, **kw)  # noqa: E731
        return build, alternating(d_model, 1e6), alternating(d_model, 1e6, sign=-1.0), 0, True
    if entry.data == "dataset":
        data = table(_records(entry, mechanism))
        build = lambda s: cls(model(), loss, data, mechanism, noise, lr=0.1, seed=s, **kw)  # noqa: E731
        return build, constant(d_model, 1e6), zero(d_model), 0, False
    J = _records(entry, mechanism, 1)
    if J != 1:
        raise InputError(f"{entry.records}={J} is not allowed for this audit: expected 1 "
                         "(with J > 1 the claim relies on amplification by sampling: under replace-one the "
                         "without-replacement audit applies, --relation replace-one; see docs/audit.md).")
    nodes = [table(1) for _ in range(4)]
    build = lambda s: cls(model(), loss, nodes, mechanism, noise, lr=0.1, seed=s, **kw)  # noqa: E731
    # "a record with gradient norm C vs a zero-gradient record" (a clip that is not enforced, ConstD2P's G:
    # norm 100 G, far above its bound)
    norm = 1.0 if entry.clip_enforced else 100.0
    return build, constant(d_model, norm), zero(d_model), 0, False


def one_run_harness(algorithm: str, mechanism, noise, canaries: int):
    """``build(seed)`` for the standard one-run audit of ``algorithm`` (CLI and docs): an MLP
    32 -> h -> 1 (ReLU) with h the smallest width >= 32 giving at least ``canaries`` parameters, on
    synthetic records (as many as the shape fixes -- DiceSGD's N -- else 100), clip norms 1.

    Args:
        algorithm: a registered algorithm's name.
        mechanism: the run shape (a mechanism of ``algorithm``).
        noise: its calibration or a dict of noise levels.
        canaries: the number of canaries the audit will plant, >= 1.

    Returns:
        ``build(seed)`` -> a fresh optimizer.

    Raises:
        InputError: if ``algorithm`` is not registered or has no one-run audit.
    """
    from torch import nn

    lookup(algorithm)
    if algorithm not in names(audit="one-run"):
        raise InputError(f"algorithm={algorithm!r} is not allowed for a one-run audit: expected one of "
                         f"{names(audit='one-run')}.")
    entry, cls, loss, kw = _optimizer(algorithm)
    m = int(canaries)
    h = max(32, -(-(m - 1) // 34))
    g = torch.Generator().manual_seed(12345)
    n = _records(entry, mechanism, 100)
    data = (torch.randn(n, 32, generator=g), torch.randn(n, generator=g))

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(32, h), nn.ReLU(), nn.Linear(h, 1))

    return lambda s: cls(model(), loss, data, mechanism, noise, lr=0.01, seed=s, **kw)


def wor_claim(algorithm: str, mechanism) -> bool:
    """Does this run's claim rest on sampling without replacement under replace-one?  (ClipD2P's
    only with more than one record per node under replace-one; its J = 1 audit is the plain one.)

    Args:
        algorithm: a registered algorithm's name.
        mechanism: the run shape (a mechanism of ``algorithm``).

    Returns:
        True if the without-replacement audit applies.

    Raises:
        InputError: if ``algorithm`` is not registered (raised by the registry's lookup).
    """
    lookup(algorithm)
    if algorithm not in names(audit="wor"):
        return False
    return not hasattr(mechanism, "samples_per_node") or (
        mechanism.samples_per_node > 1 and mechanism.relation == "replace-one")


def wor_harness(algorithm: str, mechanism, noise):
    """``(build, canary_a, canary_b, holder)`` for the standard without-replacement audit (CLI and
    docs): a one-layer linear model on 2 features.  The holder's records (one dataset, or node 0) have
    x = 0 and y = 1e6, so their clipped gradient is -C along the bias; canary B is the same gradient
    and canary A its opposite -- the worst case of the replace-one pair (see docs/audit.md).  Clients'
    shards (DIFF2-BVR): P clients of n_min random records, alternating canaries (every DIFF2 round and
    local difference moves by its claimed sensitivity).

    Args:
        algorithm: a registered algorithm's name.
        mechanism: the run shape (a mechanism of ``algorithm``).
        noise: its calibration or a dict of noise levels.

    Returns:
        ``(build, canary_a, canary_b, holder)``: ``build(seed)`` -> a fresh optimizer, the two
        canaries and their holder (0).

    Raises:
        InputError: if ``algorithm`` is not registered or its claim does not rest on sampling
            without replacement under replace-one (:func:`wor_claim`).
    """
    if not wor_claim(algorithm, mechanism):
        raise InputError(f"algorithm={algorithm!r} is not allowed for a without-replacement audit: expected one of "
                         f"{names(audit='wor')} (ClipD2P: with samples_per_node > 1 under replace-one).")
    entry, cls, loss, kw = _optimizer(algorithm)
    e_bias = torch.tensor([0.0, 0.0, 1.0])
    up, down = constant(3, 1e6, e_bias), constant(3, -1e6, e_bias)
    g = torch.Generator().manual_seed(12345)
    model = _linear_model(2)

    def holder_table(n):
        return torch.zeros(n, 2), torch.full((n,), 1e6)

    def build_on(data):
        return lambda s: cls(model(), loss, data, mechanism, noise, lr=0.1, seed=s, **kw)

    if entry.data == "dataset":
        return build_on(holder_table(_records(entry, mechanism))), up, down, 0
    if entry.data == "nodes":
        J = _records(entry, mechanism)
        nodes = [holder_table(J)] + [(torch.randn(J, 2, generator=g), torch.randn(J, generator=g)) for _ in range(3)]
        return build_on(nodes), up, down, 0
    n_min = _records(entry, mechanism)
    shards = [(torch.randn(n_min, 2, generator=g), torch.randn(n_min, generator=g)) for _ in range(mechanism.clients)]
    return build_on(shards), alternating(3, 1e6), alternating(3, 1e6, sign=-1.0), 0
