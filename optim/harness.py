"""The standard audit harnesses (CLI and docs): for an algorithm and its calibration, the model,
the data, the canaries and the holder of a white-box audit, a one-run audit and a
without-replacement audit.  Small models on synthetic data, so that an audit of thousands of runs
takes seconds.
"""

from __future__ import annotations

import torch

from ..accountant.validation import InputError
from ..mechanisms.registry import names
from .lockstep import alternating, constant, zero

__all__ = ["AUDITABLE", "harness", "ONE_RUN", "one_run_harness", "wor_harness", "wor_claim"]


# ---- standard harnesses (CLI and docs) ------------------------------------------------------------
AUDITABLE = names(audit="llr")


def harness(algorithm: str, mechanism, noise):
    """``(build, canary_d, canary_dprime, holder, gdp_exact)`` for a standard white-box audit of
    ``algorithm`` at the run shape ``mechanism`` and noise levels ``noise``: a one-layer linear
    model on 2 synthetic features, ``n_min`` records per client / N records / one record per node.

    The LLR conditions on the sampling, so only claims without amplification by sampling are
    auditable: full-batch DP-GD / DIFF2-GD, DiceSGD's assumption-free accountant, and the D2P
    family with one record per node (J = 1).
    """
    from torch import nn

    from .. import mechanisms as M
    from . import registry as O

    if algorithm not in AUDITABLE:
        raise InputError(f"algorithm={algorithm!r} is not allowed for an audit: expected one of {AUDITABLE} "
                         "(claims that rely on amplification by sampling need a mixture statistic, not "
                         "implemented).")
    g = torch.Generator().manual_seed(12345)
    d_model = 3

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(2, 1))

    def table(n):
        return torch.randn(n, 2, generator=g), torch.randn(n, generator=g)

    if algorithm in ("dp-gd", "diff2-gd"):
        shards = [table(mechanism.n_min) for _ in range(mechanism.clients)]
        cls = O.DPGD if algorithm == "dp-gd" else O.DIFF2GD
        kw = {"C1": 1.0} if algorithm == "dp-gd" else {"C1": 1.0, "C2": 1.0}
        build = lambda s: cls(model(), O.squared_loss, shards, mechanism, noise, lr=0.1, seed=s, **kw)  # noqa: E731
        return build, alternating(d_model, 1e6), alternating(d_model, 1e6, sign=-1.0), 0, True
    if algorithm == "dicesgd":
        data = table(mechanism.N)
        build = lambda s: O.DiceSGD(model(), O.squared_loss, data, mechanism, noise, lr=0.1, seed=s)  # noqa: E731
        return build, constant(d_model, 1e6), zero(d_model), 0, False
    if mechanism.samples_per_node != 1:
        raise InputError(f"samples_per_node={mechanism.samples_per_node} is not allowed for this audit: expected 1 "
                         "(with J > 1 the claim relies on amplification by sampling: under replace-one the "
                         "without-replacement audit applies, --relation replace-one; see docs/audit.md).")
    nodes = [table(1) for _ in range(4)]
    if algorithm == "clipd2p":
        build = lambda s: O.ClipD2P(model(), O.squared_loss, nodes, mechanism, noise, C=1.0, lr=0.1,  # noqa: E731
                                    seed=s)
    elif algorithm == "constd2p":
        build = lambda s: O.ConstD2P(model(), O.squared_loss, nodes, mechanism, noise, G=1.0,  # noqa: E731
                                     lr=0.1, seed=s)
    else:
        mech = M.AdaD2P(1, mechanism.iterations)
        build = lambda s: O.AdaD2P(model(), O.squared_loss, nodes, mech, noise, lr=0.1, seed=s)  # noqa: E731
    # "a record with gradient norm C vs a zero-gradient record" (ConstD2P: norm 100 G, far above its bound)
    norm = 100.0 if algorithm == "constd2p" else 1.0
    return build, constant(d_model, norm), zero(d_model), 0, False


ONE_RUN = names(audit="one-run")


def one_run_harness(algorithm: str, mechanism, noise, canaries: int):
    """``build(seed)`` for the standard one-run audit of ``algorithm`` (CLI and docs): an MLP
    32 -> h -> 1 (ReLU) with h the smallest width >= 32 giving at least ``canaries`` parameters, on
    synthetic records (100 for DP-SGD, N for DiceSGD), C = 1 (DiceSGD: its C1, C2)."""
    from torch import nn

    from . import registry as O

    if algorithm not in ONE_RUN:
        raise InputError(f"algorithm={algorithm!r} is not allowed for a one-run audit: expected one of {ONE_RUN}.")
    m = int(canaries)
    h = max(32, -(-(m - 1) // 34))
    g = torch.Generator().manual_seed(12345)
    n = 100 if algorithm == "dp-sgd" else mechanism.N
    data = (torch.randn(n, 32, generator=g), torch.randn(n, generator=g))

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(32, h), nn.ReLU(), nn.Linear(h, 1))

    if algorithm == "dp-sgd":
        return lambda s: O.DPSGD(model(), O.squared_loss, data, mechanism, noise, C=1.0, lr=0.01, seed=s)
    return lambda s: O.DiceSGD(model(), O.squared_loss, data, mechanism, noise, lr=0.01, seed=s)


def wor_claim(algorithm: str, mechanism) -> bool:
    """Does this run's claim rest on sampling without replacement under replace-one?  (ClipD2P's
    only with more than one record per node under replace-one; its J = 1 audit is the plain one.)"""
    if algorithm not in names(audit="wor"):
        return False
    return not hasattr(mechanism, "samples_per_node") or (
        mechanism.samples_per_node > 1 and mechanism.relation == "replace-one")


def wor_harness(algorithm: str, mechanism, noise):
    """``(build, canary_a, canary_b, holder)`` for the standard without-replacement audit (CLI and
    docs): a one-layer linear model on 2 features.  The holder's records (DP-SRM's dataset, ClipD2P's
    node 0) have x = 0 and y = 1e6, so their clipped gradient is -C along the bias; canary B is the
    same gradient and canary A its opposite -- the worst case of the replace-one pair (see
    docs/audit.md).  DIFF2-BVR: P clients of n_min random records, alternating canaries (every
    DIFF2 round and local difference moves by its claimed sensitivity)."""
    from torch import nn

    from . import registry as O

    if not wor_claim(algorithm, mechanism):
        raise InputError(f"algorithm={algorithm!r} is not allowed for a without-replacement audit: expected dp-srm, "
                         "diff2-bvr, or clipd2p with samples_per_node > 1 under replace-one.")
    e_bias = torch.tensor([0.0, 0.0, 1.0])
    up, down = constant(3, 1e6, e_bias), constant(3, -1e6, e_bias)
    g = torch.Generator().manual_seed(12345)

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(2, 1))

    if algorithm == "dp-srm":
        data = (torch.zeros(mechanism.n, 2), torch.full((mechanism.n,), 1e6))
        return (lambda s: O.DPSRM(model(), O.squared_loss, data, mechanism, noise, lr=0.1, seed=s)), up, down, 0
    if algorithm == "clipd2p":
        J = mechanism.samples_per_node
        nodes = [(torch.zeros(J, 2), torch.full((J,), 1e6))] + \
            [(torch.randn(J, 2, generator=g), torch.randn(J, generator=g)) for _ in range(3)]
        return (lambda s: O.ClipD2P(model(), O.squared_loss, nodes, mechanism, noise, C=1.0, lr=0.1, seed=s)), \
            up, down, 0
    shards = [(torch.randn(mechanism.n_min, 2, generator=g), torch.randn(mechanism.n_min, generator=g))
              for _ in range(mechanism.clients)]
    build = lambda s: O.DIFF2BVR(model(), O.squared_loss, shards, mechanism, noise, C1=1.0, C2=1.0,  # noqa: E731
                                 lr=0.1, seed=s)
    return build, alternating(3, 1e6), alternating(3, 1e6, sign=-1.0), 0
