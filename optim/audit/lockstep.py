"""Lockstep runs of the white-box audits and their likelihood ratios.

A **leader** runs on dataset D (record 0 of a holder a gradient canary, :mod:`dpcalib.optim.audit.canaries`)
and records its releases; a **twin** on the neighbouring D' walks the leader's public history
through a :class:`~dpcalib.optim.audit.replay.ReplaySource`.  At every release both noiseless queries and both
stds are known at the state actually visited, which gives the log-likelihood ratio of the whole
transcript (:func:`pair_llr`) -- or, for fixed-size sampling without replacement, the exact
mixture ratio of the replace-one coupling (:func:`wor_llr`, with the coupled samplers of
:class:`~dpcalib.optim.audit.canaries.WORCoupling`).  Drivers and reports: :mod:`optim.audit`.
"""

from __future__ import annotations

import math

import torch

from .canaries import WORCoupling, plant
from .replay import ReplaySource

__all__ = []


# ---- canaries ----------------------------------------------------------------------------------
def _unit(d: int, direction=None) -> torch.Tensor:
    u = torch.ones(d, dtype=torch.float64) if direction is None else torch.as_tensor(direction, dtype=torch.float64)
    return u / torch.linalg.vector_norm(u)


def zero(d: int):
    """A record with zero gradient everywhere (under add/remove: the same as no record).

    Args:
        d: the number of parameter coordinates.

    Returns:
        ``canary(j)`` -> the zero vector (float64) at every point j.
    """
    z = torch.zeros(d, dtype=torch.float64)
    return lambda j: z


def constant(d: int, norm: float, direction=None):
    """The same gradient ``norm * u`` at every point.

    Args:
        d: the number of parameter coordinates.
        norm: the gradient's L2 norm.
        direction: the direction u (normalised here; nonzero), or None for the all-ones direction.

    Returns:
        ``canary(j)`` -> ``norm * u`` (float64) at every point j.
    """
    g = norm * _unit(d, direction)
    return lambda j: g


def alternating(d: int, norm: float, direction=None, sign: float = 1.0):
    """``sign * (-1)^j * norm * u`` at the j-th point: its differences between consecutive points
    are ``2 norm`` long, so DIFF2's difference rounds carry it too.

    Args:
        d: the number of parameter coordinates.
        norm: the gradient's L2 norm.
        direction: the direction u (normalised here; nonzero), or None for the all-ones direction.
        sign: the sign at even points.

    Returns:
        ``canary(j)`` -> the gradient (float64) at the j-th point.
    """
    g = sign * norm * _unit(d, direction)
    return lambda j: g if j % 2 == 0 else -g


# ---- lockstep runs -----------------------------------------------------------------------------
def lead_run(build, seed, canary, holder=0):
    """A run that records its releases with their values (the truth of an experiment); record 0 of
    the ``holder`` is the gradient canary (:func:`dpcalib.optim.audit.canaries.plant`).

    Args:
        build: ``build(seed)`` -> a fresh optimizer (the same run for every seed's leader and twins).
        seed: the run's seed.
        canary: a gradient canary (``gradient(j)`` callable or flat tensor, see
            :func:`~dpcalib.optim.audit.canaries.plant`), or None.
        holder: the canary's holder.

    Returns:
        The leader optimizer (not yet stepped).
    """
    leader = build(seed)
    leader.privatizer.record = leader.privatizer.record_values = True
    plant(leader, canary, holder)
    return leader


def follow_run(build, seed, leader, canary, holder=0):
    """A run on another dataset that walks ``leader``'s public history (see :class:`~dpcalib.optim.audit.replay.ReplaySource`).

    Args:
        leader: the leader optimizer whose releases are walked.
        build, seed, canary, holder: as :func:`lead_run`.

    Returns:
        The follower optimizer (not yet stepped).
    """
    f = build(seed)
    plant(f, canary, holder)
    f.privatizer = ReplaySource(leader.privatizer, f.device, f.dtype)
    return f


def _leader_twin(build, seed, canary_a, canary_b, holder):
    leader = lead_run(build, seed, canary_a, holder)
    return leader, follow_run(build, seed, leader, canary_b, holder)


def run_pair(build, seed: int, canary_a, canary_b, *, holder: int = 0, rounds: int | None = None):
    """Leader (canary A) and twin (canary B) stepped in lockstep; returns both optimizers.

    Args:
        build, seed: as :func:`lead_run`.
        canary_a: the leader's canary.
        canary_b: the twin's canary.
        holder: the canaries' holder.
        rounds: the number of rounds; None for the run's ``total_rounds``.

    Returns:
        ``(leader, twin)``, both stepped.
    """
    leader, twin = _leader_twin(build, seed, canary_a, canary_b, holder)
    n = leader.total_rounds if rounds is None else int(rounds)
    for _ in range(n):
        leader.step()
        twin.step()
    return leader, twin


# ---- likelihood ratio --------------------------------------------------------------------------
def gaussian_llr(o, q_a, s_a, q_b, s_b) -> torch.Tensor:
    """``log N(o; q_A, s_A^2 I) - log N(o; q_B, s_B^2 I)`` of each run's Gaussian release, in float64:
    the one likelihood ratio of the audits (sequential and batched).

    A zero std is a point mass: its log-density is +inf at its query and -inf elsewhere, and the
    ratio of two identical point masses is 0.  With equal stds the normalising terms are exactly 0,
    so the ratio is the difference of the two quadratic terms alone.

    Args:
        o: the released values, shape ``(runs, d)``.
        q_a: the noiseless queries under A, shape ``(runs, d)``.
        s_a: the noise stds under A, shape ``(runs,)``, >= 0.
        q_b: the noiseless queries under B, shape ``(runs, d)``.
        s_b: the noise stds under B, shape ``(runs,)``, >= 0.

    Returns:
        The log-likelihood ratios, shape ``(runs,)``, float64 (possibly +-inf).
    """
    o, q_a, q_b = (t.to(torch.float64) for t in (o, q_a, q_b))
    s_a, s_b = (torch.as_tensor(t, dtype=torch.float64, device=o.device) for t in (s_a, s_b))
    pos = (s_a > 0) & (s_b > 0)
    sa = torch.where(pos, s_a, torch.ones_like(s_a))
    sb = torch.where(pos, s_b, torch.ones_like(s_b))
    out = -((o - q_a) ** 2).sum(1) / (2.0 * sa * sa) - (-((o - q_b) ** 2).sum(1) / (2.0 * sb * sb))
    out = out + o.shape[1] * (torch.log(sb) - torch.log(sa))        # exactly 0 where the stds agree
    if not bool(pos.all()):
        def log_density(q, s):
            quad = -((o - q) ** 2).sum(1) / (2.0 * torch.where(s > 0, s, torch.ones_like(s)) ** 2) \
                - o.shape[1] * torch.log(torch.where(s > 0, s, torch.ones_like(s)))
            hit = (o == q).all(1)
            return torch.where(s > 0, quad, torch.where(hit, torch.full_like(s, math.inf),
                                                        torch.full_like(s, -math.inf)))
        la, lb = log_density(q_a, s_a), log_density(q_b, s_b)
        both_inf = torch.isinf(la) & torch.isinf(lb)
        point = torch.where(both_inf, torch.where(la == lb, torch.zeros_like(la), la), la - lb)
        out = torch.where(pos, out, point)
    return out


def release_llr(o, q_a, s_a, q_b, s_b) -> float:
    """``log p_A(o) - log p_B(o)`` for one Gaussian release (inf - inf of identical point masses is 0):
    :func:`gaussian_llr` of a single run.

    Args:
        o: the released value.
        q_a: the noiseless query under A.
        s_a: the noise std under A, >= 0 (0: a point mass).
        q_b: the noiseless query under B.
        s_b: the noise std under B, >= 0.

    Returns:
        The log-likelihood ratio (possibly +-inf).
    """
    row = (lambda t: torch.as_tensor(t).reshape(1, -1))
    return float(gaussian_llr(row(o), row(q_a), [float(s_a)], row(q_b), [float(s_b)])[0])


def _llr_of_pair(leader, twin, truth_is_a: bool) -> float:
    """S = log p_D(transcript) - log p_D'(transcript) (D carries canary A)."""
    total = 0.0
    for x, y in zip(leader.privatizer.releases, twin.privatizer.releases):
        o = x.released.detach().to("cpu", torch.float64)
        q_t, s_t, q_o, s_o = x.value, x.std, y.value, y.std
        llr = release_llr(o, q_t, s_t, q_o, s_o) if truth_is_a else release_llr(o, q_o, s_o, q_t, s_t)
        total += llr
        if math.isinf(total):
            return total
    return total


def pair_llr(build, seed: int, canary_d, canary_dprime, truth_is_d: bool, holder: int = 0) -> float:
    """One run's statistic ``S = log p_D - log p_D'``: a leader releasing from D (``truth_is_d``) or
    D', and its twin on the other dataset.

    Args:
        build, seed: as :func:`lead_run`.
        canary_d: the canary of D.
        canary_dprime: the canary of D'.
        truth_is_d: does the leader release from D?
        holder: the canaries' holder.

    Returns:
        The statistic S (possibly +-inf).
    """
    a, b = (canary_d, canary_dprime) if truth_is_d else (canary_dprime, canary_d)
    return _llr_of_pair(*run_pair(build, seed, a, b, holder=holder), truth_is_a=truth_is_d)


# ---- fixed-size sampling without replacement (replace-one) ----------------------------------------
def _log_kernel(o, q, s: float) -> float:
    """``-||o - q||^2 / (2 s^2)`` (the part of log N(o; q, s^2 I) that differs between means); a point
    mass for s = 0 (0 at q, -inf elsewhere)."""
    if s == 0.0:
        return 0.0 if torch.equal(o, q) else -math.inf
    return float(-torch.sum((o - q) ** 2) / (2.0 * s * s))


def logaddexp(x: float, y: float) -> float:
    """``log(e^x + e^y)`` in double precision (either may be -inf).

    Args:
        x: a log-value (may be -inf).
        y: a log-value (may be -inf).

    Returns:
        ``log(e^x + e^y)``.
    """
    m = max(x, y)
    if m == -math.inf:
        return -math.inf
    return m + math.log1p(math.exp(min(x, y) - m))


def _mixture_llr(o, q_out, q_a, q_b, s: float, gamma: float) -> float:
    """``log p_A(o) - log p_B(o)`` with ``p_X = (1 - gamma) N(q_out, s^2) + gamma N(q_X, s^2)``."""
    la, lb, lo = _log_kernel(o, q_a, s), _log_kernel(o, q_b, s), _log_kernel(o, q_out, s)
    if gamma < 1.0:
        w_out, w_in = math.log1p(-gamma), math.log(gamma)
        la, lb = logaddexp(w_out + lo, w_in + la), logaddexp(w_out + lo, w_in + lb)
    if la == lb:
        return 0.0
    return la - lb


def wor_llr(build, seed: int, canary_a, canary_b, truth_is_a: bool, holder: int = 0) -> float:
    """One run of the without-replacement statistic: the leader releases from D (canary A) or D'
    (canary B); three followers walk its public history with the coupled batches -- "out", "in"
    with canary A, "in" with canary B -- and each release contributes the exact mixture LLR
    (:func:`_mixture_llr`, gamma = b/n of the sample that could hold the canary; a release whose
    query holds the canary for sure -- a full batch -- has gamma = 1; one that cannot -- another
    client's local step -- has equal queries and contributes 0).

    Args:
        build, seed: as :func:`lead_run`.
        canary_a: the canary of D.
        canary_b: the canary of D'.
        truth_is_a: does the leader release from D?
        holder: the canaries' holder (whose samples are coupled).

    Returns:
        The statistic ``log p_A - log p_B`` of the run.

    Raises:
        RuntimeError: if the followers' samplers recorded different sampling rates (the sampling
            depends on private data).
    """
    leader = lead_run(build, seed, canary_a if truth_is_a else canary_b, holder)
    f_out = follow_run(build, seed, leader, canary_a, holder)
    f_a = follow_run(build, seed, leader, canary_a, holder)
    f_b = follow_run(build, seed, leader, canary_b, holder)
    for f, mode in ((f_out, "out"), (f_a, "in"), (f_b, "in")):
        f.sampler = WORCoupling(seed, mode, (lambda f=f: len(f.privatizer.releases)), holder, base=f.sampler)
    for _ in range(leader.total_rounds):
        leader.step()
        for f in (f_out, f_a, f_b):
            f.step()
    gam = f_out.sampler.gammas
    if f_a.sampler.gammas != gam or f_b.sampler.gammas != gam:
        raise RuntimeError("the followers sampled differently: the optimizer's sampling depends on private data.")
    total = 0.0
    for i, (x, u, a, b) in enumerate(zip(leader.privatizer.releases, f_out.privatizer.releases, f_a.privatizer.releases,
                                         f_b.privatizer.releases)):
        o = x.released.detach().to("cpu", torch.float64)
        total += _mixture_llr(o, u.value, a.value, b.value, a.std, gam.get(i, 1.0))
    return total
