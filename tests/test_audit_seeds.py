"""No audit or probe has a constant default seed ("Secrets: no default is a constant seed").

Without ``seed``, every driver and probe draws a fresh seed from the operating system's entropy,
so two calls are two experiments (their draws differ); the seed used is recorded on the result,
and passing it back as ``seed=`` repeats the result number for number.  A bad seed is refused in
one line naming it, its value and what is allowed.
"""

import pytest
import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O
from dpcalib.optim import audit as A
from dpcalib.optim.audit import probe as P

CANARIES = (A.alternating(3, 1e6), A.alternating(3, 1e6, sign=-1.0))


def _dpgd():
    """DP-GD on 2 clients of 5 records, 4 rounds (docs/audit.md's example); ``build.built`` keeps every
    optimizer and ``build.seeds`` the seed of each."""
    g = torch.Generator().manual_seed(0)
    shards = [(torch.randn(5, 2, generator=g, dtype=torch.float64),
               torch.randn(5, generator=g, dtype=torch.float64)) for _ in range(2)]
    mech = M.DPGD(rounds=4, clients=2, n_min=5)
    rep = mech.calibrate(2.0, 1e-5, method="tight")
    built, seeds = [], []

    def build(seed):
        seeds.append(seed)
        torch.manual_seed(0)                  # the initial model does not depend on the seed
        opt = O.DPGD(nn.Sequential(nn.Linear(2, 1)).double(), O.squared_loss, shards, mech, rep, C1=1.0, lr=0.1,
                     seed=seed)
        built.append(opt)
        return opt

    build.built, build.seeds = built, seeds
    return build, rep


def _dpsgd():
    """DP-SGD (q = 0.5, 4 steps) on 20 records, a linear model."""
    g = torch.Generator().manual_seed(0)
    data = (torch.randn(20, 2, generator=g, dtype=torch.float64), torch.randn(20, generator=g, dtype=torch.float64))
    mech = M.DPSGD(0.5, 4)
    rep = mech.calibrate(2.0, 1e-5)

    def build(seed):
        torch.manual_seed(0)
        return O.DPSGD(nn.Sequential(nn.Linear(2, 1)).double(), O.squared_loss, data, mech, rep, C=1.0, lr=0.1,
                       seed=seed)

    return build


def _first_release(built) -> torch.Tensor:
    """The first recorded release value of the optimizers built so far (a draw of the noise)."""
    for opt in built:
        rels = getattr(opt.privatizer, "releases", None)
        if rels and getattr(rels[0], "released", None) is not None:
            return rels[0].released.detach().clone()
    raise AssertionError("no recorded release")


@pytest.mark.parametrize("batch", [None, "auto"])
def test_llr_samples_without_a_seed_draw_anew_and_record_the_seed(batch):
    build, _ = _dpgd()
    a = A.llr_samples(build, *CANARIES, runs=4, batch=batch, progress=False)
    b = A.llr_samples(build, *CANARIES, runs=4, batch=batch, progress=False)
    assert a.seed != b.seed and a[0] != b[0] and a[1] != b[1]          # two experiments: other draws
    for s in (a, b):
        again = A.llr_samples(build, *CANARIES, runs=4, batch=batch, progress=False, seed=s.seed)
        assert again == s and again.seed == s.seed
    s_d, s_p = a                                                       # still a pair of lists
    assert isinstance(a, tuple) and len(s_d) == len(s_p) == 4
    assert A.llr_samples(build, *CANARIES, runs=2, batch=batch, progress=False, seed=7).seed == 7


def test_the_many_run_audit_without_a_seed_draws_anew_and_its_report_repeats_it():
    build, rep = _dpgd()
    kw = dict(runs=20, claimed_epsilon=rep.epsilon, delta=rep.delta, progress=False)
    r1, r2 = A.audit(build, *CANARIES, **kw), A.audit(build, *CANARIES, **kw)
    assert r1.seed != r2.seed and r1.scores != r2.scores
    assert r1.details["mean_llr_d"] != r2.details["mean_llr_d"]
    for r in (r1, r2):
        again = A.audit(build, *CANARIES, **kw, seed=r.seed)
        assert again.scores == r.scores and again.as_dict() == r.as_dict() and r.as_dict()["seed"] == r.seed


def test_the_poisson_audit_without_a_seed_draws_anew_and_its_report_repeats_it():
    build = _dpsgd()
    kw = dict(rate=0.5, runs=4, claimed_epsilon=2.0, delta=1e-5, progress=False)
    r1, r2 = A.audit_poisson(build, A.constant(3, 1e6), **kw), A.audit_poisson(build, A.constant(3, 1e6), **kw)
    assert r1.seed != r2.seed and r1.scores != r2.scores
    again = A.audit(build, A.constant(3, 1e6), **kw, seed=r1.seed)
    assert again.scores == r1.scores and again.as_dict() == r1.as_dict() and again.seed == r1.seed


def test_the_wor_audit_without_a_seed_draws_anew_and_its_report_repeats_it():
    mech = M.DPSRM(4, 2, 2, 2, lipschitz=1.0, step_bound=1.0, momentum=1.0)
    build, a, b, holder = A.wor_harness("dp-srm", mech, dict(mech.calibrate(2.0, 1e-5, method="tight").noise))
    kw = dict(runs=2, claimed_epsilon=2.0, delta=1e-5, holder=holder, progress=False)
    r1, r2 = A.audit_wor(build, a, b, **kw), A.audit_wor(build, a, b, **kw)
    assert r1.seed != r2.seed and r1.scores != r2.scores
    again = A.audit_wor(build, a, b, **kw, seed=r1.seed)
    assert again.scores == r1.scores and again.as_dict() == r1.as_dict()


def test_the_one_run_audit_without_a_seed_draws_anew_and_its_report_repeats_it():
    mech = M.DPSGD(0.1, 20)
    inner = A.one_run_harness("dp-sgd", mech, mech.calibrate(2.0, 1e-5), 40)
    built = []

    def build(seed):
        built.append(inner(seed))
        return built[-1]

    kw = dict(canaries=40, claimed_epsilon=2.0, delta=1e-5, progress=False)
    r1 = A.one_run_audit(build, **kw)
    first = _first_release(built)
    built.clear()
    r2 = A.one_run_audit(build, **kw)
    assert r1.seed != r2.seed and not torch.equal(first, _first_release(built))   # other noise
    built.clear()
    again = A.one_run_audit(build, **kw, seed=r1.seed)
    assert torch.equal(first, _first_release(built))
    assert again == r1 and again.as_dict() == r1.as_dict() and r1.as_dict()["seed"] == r1.seed


def test_spent_tradeoff_without_a_seed_runs_a_fresh_seed_and_records_it():
    build, rep = _dpgd()
    c1, c2 = A.spent_tradeoff(build), A.spent_tradeoff(build)
    assert c1.seed != c2.seed and build.seeds == [c1.seed, c2.seed]
    assert c1 == c2 == A.spent_tradeoff(build, c1.seed)             # DP-GD's accountant: not seed-dependent
    assert A.spent_tradeoff(build, seed=c1.seed).seed == c1.seed


def test_the_sensitivity_probe_without_a_seed_draws_anew_and_its_report_repeats_it():
    build, _ = _dpgd()
    r1 = A.sensitivity_probe(build, rounds=2)
    first = _first_release(build.built)
    build.built.clear()
    r2 = A.sensitivity_probe(build, rounds=2)
    assert r1.seed != r2.seed and not torch.equal(first, _first_release(build.built))
    build.built.clear()
    again = A.sensitivity_probe(build, rounds=2, seed=r1.seed)
    assert torch.equal(first, _first_release(build.built))
    assert again == r1 and again.as_dict() == r1.as_dict() and r1.as_dict()["seed"] == r1.seed


def test_the_record_probe_and_its_harness_without_a_seed_draw_anew_and_record_their_seeds():
    mech = M.DPGD(4, 2, 40)
    rep = mech.calibrate(3.0, 1e-5)
    b1, d1, h1 = P.probe_harness("dp-gd", mech, rep, hidden=8)
    b2, d2, h2 = P.probe_harness("dp-gd", mech, rep, hidden=8)
    assert b1.seed != b2.seed and not torch.equal(d1[0][0], d2[0][0])    # other data
    b3, d3, h3 = P.probe_harness("dp-gd", mech, rep, hidden=8, seed=b1.seed)
    assert b3.seed == b1.seed and all(torch.equal(x, y) for p, q in zip(d1, d3) for x, y in zip(p, q))
    assert torch.equal(h1[0], h3[0])
    built = []

    def build(data, seed, sampler):
        built.append(b1(data, seed, sampler))
        return built[-1]

    r1 = P.record_probe(build, d1, h1, rounds=2, progress=False)
    first = _first_release(built)
    built.clear()
    r2 = P.record_probe(build, d1, h1, rounds=2, progress=False)
    assert r1.seed != r2.seed and not torch.equal(first, _first_release(built))
    built.clear()
    again = P.record_probe(build, d1, h1, rounds=2, progress=False, seed=r1.seed)
    assert torch.equal(first, _first_release(built))
    assert again == r1 and again.as_dict() == r1.as_dict() and r1.as_dict()["seed"] == r1.seed


@pytest.mark.parametrize("bad", [-1, 1.5, True, "0"])
def test_a_bad_seed_is_refused_in_one_line(bad):
    build, rep = _dpgd()
    mech = M.DPGD(4, 2, 40)
    calls = [
        lambda: A.llr_samples(build, *CANARIES, runs=2, progress=False, seed=bad),
        lambda: A.audit(build, *CANARIES, runs=2, claimed_epsilon=2.0, delta=1e-5, progress=False, seed=bad),
        lambda: A.audit_poisson(_dpsgd(), A.zero(3), rate=0.5, runs=2, claimed_epsilon=2.0, delta=1e-5,
                                progress=False, seed=bad),
        lambda: A.audit_wor(build, *CANARIES, runs=2, claimed_epsilon=2.0, delta=1e-5, progress=False, seed=bad),
        lambda: A.one_run_audit(_dpsgd(), canaries=2, claimed_epsilon=2.0, delta=1e-5, progress=False, seed=bad),
        lambda: A.spent_tradeoff(build, bad),
        lambda: A.sensitivity_probe(build, seed=bad),
        lambda: P.probe_harness("dp-gd", mech, mech.calibrate(3.0, 1e-5), hidden=8, seed=bad),
        lambda: P.record_probe(lambda data, s, sampler: build(s), [(torch.zeros(2, 2), torch.zeros(2))],
                               (torch.zeros(2), torch.zeros(())), progress=False, seed=bad),
    ]
    for call in calls:
        with pytest.raises(ValueError) as e:
            call()
        msg = str(e.value)
        assert msg.startswith(f"seed={bad!r} is not allowed") and ">= 0" in msg and "\n" not in msg, msg
    assert not build.seeds                       # refused before any run


def test_the_step_checks_without_a_seed_draw_anew_and_their_report_repeats_them():
    from dpcalib.optim.audit import FunctionStep, StepClaim, check_step

    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, generator=g, dtype=torch.float64)
    claim = StepClaim(sensitivity=1.0, noise_std=1.0, relation="add/remove")

    def step(batch, noise, generator):
        (xb,) = batch
        clipped = (xb / torch.clamp(xb.norm(dim=1, keepdim=True), min=1.0)).sum(0)
        return clipped + torch.randn(3, generator=generator, dtype=torch.float64) if noise else clipped

    a = check_step(FunctionStep(step, claim), (x,), runs=20)
    b = check_step(FunctionStep(step, claim), (x,), runs=20)
    assert a.seed != b.seed and a.audit.seed == a.seed + 1
    assert a.noise_std.statistic != b.noise_std.statistic
    again = check_step(FunctionStep(step, claim), (x,), runs=20, seed=a.seed)
    assert again.noise_std.statistic == a.noise_std.statistic and again.audit.epsilon_lo == a.audit.epsilon_lo
