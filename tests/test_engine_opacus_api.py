"""Opacus's public engine API on dpcalib's engine: module checks, wrap_model=False, the loader's own
batches (poisson_sampling=False) and their accounting, DPDataLoader's constructors, BatchMemoryManager's
length, schedulers, checkpoints, noise_generator, ghost mode's criterion, the errors Opacus users catch,
per-layer clipping (its sensitivity, leave-one-out on real records, against a naive loop),
and p.summed_grad (the un-noised clipped sum, across physical batches; with keep_summed_grad=True kept after
the release until zero_grad, else cleared by a release with noise: tests/test_engine_holds.py)."""

import io
import math
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import dpcalib.mechanisms as M
from dpcalib.accountant import gdp_epsilon
from dpcalib.accountant.validation import InputError
from dpcalib.optim import BatchMemoryManager, DPDataLoader, PrivacyEngine

N, B = 48, 8


def _data(n=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 5, generator=g, dtype=torch.float64), torch.randn(n, 1, generator=g, dtype=torch.float64)


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 1)).double()


def _make(model=None, loader=None, engine=None, **kw):
    model = model or _model()
    x, y = _data()
    loader = loader or DataLoader(TensorDataset(x, y), batch_size=B)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    engine = engine or PrivacyEngine()
    kw = {"noise_multiplier": 1.0, "max_grad_norm": 1.0, **kw}
    return (engine, model) + tuple(engine.make_private(module=model, optimizer=opt, data_loader=loader, **kw))


def _epoch(m, opt, dl, steps=None):
    for j, (x, y) in enumerate(dl):
        if steps is not None and j >= steps:
            break
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()


# -- module checks and the errors Opacus users catch ------------------------------------------------------
def test_get_compatible_module_replaces_batchnorm_and_the_error_carries_opacus_meaning():
    bad = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Linear(4, 1)).double()
    engine = PrivacyEngine()
    assert not engine.is_compatible(module=bad)
    fixed = PrivacyEngine.get_compatible_module(bad)
    assert fixed is not bad and engine.is_compatible(module=fixed)
    assert isinstance(fixed[1], nn.GroupNorm)
    with pytest.raises(InputError, match="BatchNorm"):
        _make(model=bad)
    opacus_errors = pytest.importorskip("opacus.validators.errors")
    with pytest.raises(opacus_errors.UnsupportedModuleError) as info:
        engine.validate(module=bad)
    assert isinstance(info.value, InputError) and len(str(info.value).splitlines()) == 1


def test_an_optimizer_of_other_parameters_is_refused_with_opacus_wording():
    model, other = _model(), _model(1)
    x, y = _data()
    with pytest.raises(InputError, match="Module parameters are different than optimizer Parameters"):
        PrivacyEngine().make_private(module=model, optimizer=torch.optim.SGD(other.parameters(), lr=0.1),
                                     data_loader=DataLoader(TensorDataset(x, y), batch_size=B), noise_multiplier=1.0,
                                     max_grad_norm=1.0)


@pytest.mark.parametrize("clipping, match", [("adaptive", "adaptive clipping"), ("per_sample", "expected one of")])
def test_adaptive_and_unknown_clipping_are_refused_in_one_line(clipping, match):
    with pytest.raises(InputError, match=match) as info:
        _make(clipping=clipping)
    assert len(str(info.value).splitlines()) == 1


# -- wrap_model=False -------------------------------------------------------------------------------------
def test_wrap_model_false_trains_the_module_passed_in_as_the_wrapper_does():
    _, m1, w1, o1, dl1 = _make(model=_model(), seed=5)
    _, m2, w2, o2, dl2 = _make(model=_model(), seed=5, wrap_model=False)
    assert w2 is m2 and w1 is not m1
    _epoch(w1, o1, dl1)
    _epoch(m2, o2, dl2)                               # the user's own module object
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(a, b)
    assert not torch.equal(next(m2.parameters()), next(_model().parameters()))
    m2.eval()
    with torch.no_grad():
        assert m2(_data()[0]).shape == (N, 1)        # evaluation is the plain forward
    o2.module.hooks.remove()                         # the hooks are the private module's
    assert "forward" not in vars(m2)


# -- the loader's own batches (poisson_sampling=False) ---------------------------------------------------
def test_poisson_sampling_false_keeps_the_loaders_order_and_is_one_gaussian_per_record_per_pass():
    engine, _, m, opt, dl = _make(poisson_sampling=False, epochs=2)
    first = next(iter(dl))[0]
    assert torch.equal(first, _data()[0][:B])         # the sequential loader's rows 0..B-1
    z, passes = 1.0, 2
    for _ in range(passes):
        _epoch(m, opt, dl)
    # E passes of a partition: E Gaussian releases of sensitivity C (zero-out), exact GDP mu = sqrt(E) / z
    exact = gdp_epsilon(math.sqrt(passes) / z, 1e-5)
    assert engine.get_epsilon(1e-5) == pytest.approx(exact, rel=1e-9)
    mech = M.DPSGD(n=N, batch_size=B, epochs=passes, sampling="shuffle")
    assert engine.get_epsilon(1e-5) == pytest.approx(mech.epsilon(1e-5, z).epsilon, rel=1e-12)


def test_a_pass_restarted_early_is_charged_as_a_new_participation():
    """One step per pass, four passes: the first batch's records are in four releases -- charged as four
    participations (never as ceil(4 steps / 6 per pass) = 1)."""
    engine, _, m, opt, dl = _make(poisson_sampling=False)
    for _ in range(4):
        _epoch(m, opt, dl, steps=1)
    assert engine.get_epsilon(1e-5) == pytest.approx(gdp_epsilon(math.sqrt(4) / 1.0, 1e-5), rel=1e-9)


def test_a_noise_change_mid_pass_charges_the_pass_at_both_levels():
    """The first two batches at z = 1, the other four of the same pass at z = 2: a record is in one
    release of the pass, at either level -- both are charged (mu^2 = 1 + 1/4), never a part of one."""
    engine, _, m, opt, dl = _make(poisson_sampling=False)
    for j, (x, y) in enumerate(dl):
        if j == 2:
            opt.noise_multiplier = 2.0
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    assert engine.get_epsilon(1e-5) == pytest.approx(gdp_epsilon(math.sqrt(1.0 + 0.25), 1e-5), rel=1e-6)


def test_poisson_sampling_false_is_refused_where_the_accountant_cannot_follow_it():
    with pytest.raises(InputError, match="poisson_sampling=False is not allowed for dicesgd"):
        _make(algorithm="dicesgd", noise={"sigma1": 1.0}, noise_multiplier=None, C2=0.1, poisson_sampling=False)


# -- DPDataLoader and BatchMemoryManager ----------------------------------------------------------------
def test_dp_data_loader_constructors_follow_their_generator_and_take_fresh_entropy_without_one():
    x, y = _data()
    ds = TensorDataset(x, y)

    def rows(dl):
        return [len(b[0]) for b in dl]

    g = torch.Generator().manual_seed(3)
    a = rows(DPDataLoader(ds, sample_rate=0.25, generator=g))
    g.manual_seed(3)
    assert rows(DPDataLoader(ds, sample_rate=0.25, generator=g)) == a and len(a) == 4
    dl = DPDataLoader.from_data_loader(DataLoader(ds, batch_size=B))
    assert len(dl) == N // B and dl.sample_rate == pytest.approx(B / N)
    fresh = [torch.cat([b[0] for b in DPDataLoader(ds, sample_rate=0.5)]) for _ in range(2)]
    assert not (fresh[0].shape == fresh[1].shape and torch.equal(*fresh))
    with pytest.raises(InputError, match="sample_rate=0 is not allowed"):
        DPDataLoader(ds, sample_rate=0)


def test_batch_memory_manager_counts_physical_batches_and_makes_one_step_per_logical_batch():
    engine, _, m, opt, dl = _make(poisson_sampling=False)
    with BatchMemoryManager(data_loader=dl, max_physical_batch_size=3, optimizer=opt) as chunks:
        assert len(chunks) == len(dl) * 3                # 8 rows: chunks of 3, 3, 2
        seen = 0
        for x, y in chunks:
            nn.functional.mse_loss(m(x), y).backward()
            opt.step()
            opt.zero_grad()
            seen += 1
    assert seen == len(dl) * 3 and opt.round == len(dl)


# -- schedulers, checkpoints, noise_generator -----------------------------------------------------------
def test_grad_clip_changes_scale_the_noise_and_noise_changes_open_ledger_groups():
    engine, _, m, opt, dl = _make()
    std = opt.kernel.std("step")
    opt.max_grad_norm = 2.0
    assert opt.kernel.std("step") == pytest.approx(2 * std) and opt.max_grad_norm == 2.0
    _epoch(m, opt, dl, steps=1)
    opt.noise_multiplier = 3.0
    _epoch(m, opt, dl, steps=1)
    assert [lv for _, lv, _ in engine.ledger.groups] == [{"noise_multiplier": 1.0}, {"noise_multiplier": 3.0}]
    with pytest.raises(InputError, match="max_grad_norm=-1"):
        opt.max_grad_norm = -1


def test_opacus_schedulers_drive_the_optimizer():
    sch = pytest.importorskip("opacus.schedulers")
    engine, _, m, opt, dl = _make()
    noise, clip = sch.StepNoise(optimizer=opt, step_size=1, gamma=0.5), sch.StepGradClip(optimizer=opt, step_size=1,
                                                                                            gamma=2.0)
    _epoch(m, opt, dl, steps=2)
    noise.step(), clip.step()
    assert opt.noise_multiplier == 0.5 and opt.max_grad_norm == 2.0


def _run_with_checkpoint(resume):
    """Four steps with a noise scheduler at step 2, checkpointed after step 3 into a BytesIO; resumed
    (or not) into a fresh engine built the same way."""
    sch = pytest.importorskip("opacus.schedulers")
    torch.manual_seed(0)
    e1, _, m1, o1, dl1 = _make(seed=11)
    s1 = sch.StepNoise(optimizer=o1, step_size=1, gamma=0.5)
    batches = [b for b, _ in zip(dl1, range(4))]

    def step(m, o, b):
        o.zero_grad()
        nn.functional.mse_loss(m(b[0]), b[1]).backward()
        o.step()
    for j in range(3):
        step(m1, o1, batches[j])
        if j == 1:
            s1.step()
    buf = io.BytesIO()
    e1.save_checkpoint(path=buf, module=m1, optimizer=o1, noise_scheduler=s1, checkpoint_dict={"epoch": 3})
    step(m1, o1, batches[3])
    e2, _, m2, o2, _ = _make(model=_model(7), seed=12)
    s2 = sch.StepNoise(optimizer=o2, step_size=1, gamma=0.9)
    buf.seek(0)
    state = e2.load_checkpoint(path=buf, module=m2, optimizer=o2, noise_scheduler=s2, resume_noise=resume)
    assert state["epoch"] == 3 and s2.state_dict() == s1.state_dict()
    eps_at_save = e2.get_epsilon(1e-5)
    step(m2, o2, batches[3])
    return e1, m1, o1, e2, m2, o2, eps_at_save


def test_a_checkpoint_with_schedulers_resumes_the_same_run_bit_for_bit():
    e1, m1, o1, e2, m2, o2, _ = _run_with_checkpoint(resume=True)
    assert e2.get_epsilon(1e-5) == e1.get_epsilon(1e-5)
    assert e2.accountant.state_dict() == e1.accountant.state_dict()
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(a, b)


def test_by_default_a_checkpoint_keeps_the_optimizers_own_noise_as_opacus_does():
    e1, m1, o1, e2, m2, o2, eps_at_save = _run_with_checkpoint(resume=False)
    assert o2.noise_multiplier == 1.0 and o1.noise_multiplier == 0.5
    assert 0 < eps_at_save < e2.get_epsilon(1e-5)          # the ledger was the saved one, then charged as it ran


def test_checkpoint_to_a_file_name_is_atomic_and_plain_data(tmp_path):
    engine, _, m, opt, dl = _make()
    _epoch(m, opt, dl, steps=1)
    path = tmp_path / "c.pt"
    engine.save_checkpoint(path=str(path), module=m, optimizer=opt, data_loader=dl)
    assert not (tmp_path / "c.pt.tmp").exists()
    state = torch.load(path, weights_only=True)
    assert state["privacy_accountant_state_dict"] == engine.accountant.state_dict()
    with pytest.raises(InputError, match="checkpoint_dict\\['module_state_dict'\\] is not allowed"):
        engine.save_checkpoint(path=str(path), module=m, checkpoint_dict={"module_state_dict": 1})


def test_noise_generator_is_the_users_randomness():
    def run():
        _, _, m, opt, dl = _make(seed=1, noise_generator=torch.Generator().manual_seed(9))
        _epoch(m, opt, dl, steps=2)
        return torch.cat([p.detach().reshape(-1) for p in m.parameters()])
    assert torch.equal(run(), run())


def test_ghost_mode_returns_the_criterion_as_opacus_does():
    out = _make(grad_sample_mode="ghost", criterion=nn.MSELoss())
    _, _, m, opt, crit, dl = out
    x, y = next(iter(dl))
    crit(m(x), y).backward()
    opt.step()
    assert opt.round == 1
    with pytest.raises(InputError, match="grad_sample_mode='fast'"):
        _make(grad_sample_mode="fast")


def test_a_missing_zero_grad_is_refused_as_opacus_refuses_it():
    _, _, m, opt, dl = _make()
    x, y = _data()
    nn.functional.mse_loss(m(x[:B]), y[:B]).backward()
    opt.step()
    nn.functional.mse_loss(m(x[:B]), y[:B]).backward()
    with pytest.raises(InputError, match="zero_grad"):
        opt.step()



def test_a_second_batch_before_step_is_refused_at_its_forward_and_the_run_goes_on_unchanged():
    _, _, m, opt, dl = _make(noise_multiplier=0.0)
    x, y = _data()
    nn.functional.mse_loss(m(x[:B]), y[:B]).backward()
    alone = opt.release_of(noise=False)                   # the first batch's clipped sum
    nn.functional.mse_loss(m(x[:B]), y[:B]).backward()
    with pytest.raises(InputError, match="count twice") as err:
        m(x[B:2 * B])                                     # Opacus raises ValueError here (Poisson accumulation)
    assert isinstance(err.value, ValueError) and len(m.captures) == 1
    assert torch.equal(opt.release_of(noise=False), alone)    # the refused forward recorded nothing
    nn.functional.mse_loss(m(x[:B]), y[:B]).backward()    # (release_of forgets the batch it answered)
    opt.step()
    assert opt.round == 1
    m(x[:B])                                              # a forward without backward is not refused here ...
    opt.zero_grad()                                       # ... and zero_grad forgets it
    nn.functional.mse_loss(m(x[:B]), y[:B]).backward()
    opt.step()
    assert opt.round == 2


def test_zero_grad_is_required_between_the_physical_batches_of_a_logical_batch():
    _, _, m, opt, dl = _make(poisson_sampling=False, noise_multiplier=0.0)
    x, y = _data()
    with BatchMemoryManager(data_loader=dl, max_physical_batch_size=3, optimizer=opt) as chunks:
        it = iter(chunks)
        for _ in range(2):                                # chunks 1-2 of the first batch, zero_grad each
            xb, yb = next(it)
            opt.zero_grad()
            nn.functional.mse_loss(m(xb), yb).backward()
            opt.step()
        xb, yb = next(it)                                 # chunk 3 (the last) without zero_grad: refused
        nn.functional.mse_loss(m(xb), yb).backward()
        with pytest.raises(InputError, match="zero_grad") as err:
            opt.step()
        assert isinstance(err.value, ValueError) and opt.round == 0
        m.zero_grad()                                     # the module's zero_grad counts (GradSampleModule's does)
        nn.functional.mse_loss(m(xb), yb).backward()
        opt.step()
        assert opt.round == 1
        xb, yb = next(it)                                 # after a full step too: a chunk without zero_grad
        nn.functional.mse_loss(m(xb), yb).backward()
        with pytest.raises(InputError, match="zero_grad"):
            opt.step()
    # the step that ran is the one-batch step: its direction is the clipped mean of the loader's first batch
    _, _, m2, opt2, _ = _make(poisson_sampling=False, noise_multiplier=0.0)
    nn.functional.mse_loss(m2(x[:B]), y[:B]).backward()
    opt2.step()
    assert all(torch.allclose(p, q, rtol=0, atol=1e-14) for p, q in zip(m.parameters(), m2.parameters()))


# -- per-layer clipping ---------------------------------------------------------------------------------
BOUNDS = [0.3, 0.2, 0.5, 0.1]


def _per_layer_sum(model, x, y, bounds, scale=1.0):
    """The naive loop: each record's gradient, each parameter's part clipped to its bound, summed."""
    total = [torch.zeros_like(p) for p in model.parameters()]
    for i in range(len(x)):
        model.zero_grad()
        nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1], reduction="sum").backward()
        for t, p, b in zip(total, model.parameters(), bounds):
            t += p.grad * min(1.0, b * scale / float(p.grad.norm()))
    return torch.cat([t.reshape(-1) for t in total])


def _clipped(opt, m, x, y):
    opt.zero_grad()
    nn.functional.mse_loss(m(x), y).backward()
    return opt.release_of(noise=False)


def test_per_layer_clipping_matches_the_naive_loop_and_its_sensitivity_is_the_norm_of_the_bounds():
    _, _, m, opt, dl = _make(clipping="per_layer", max_grad_norm=BOUNDS)
    x, y = _data()
    x, y = x[:B] * 3, y[:B] * 3
    got = _clipped(opt, m, x, y)
    assert torch.allclose(got, _per_layer_sum(_model(), x, y, BOUNDS), rtol=1e-10, atol=1e-12)
    c = math.sqrt(sum(b * b for b in BOUNDS))
    assert float(M.PerLayerClip(BOUNDS)) >= c and opt.kernel.std("step") == pytest.approx(1.0 * c)
    mech = opt.mechanism
    assert mech.sensitivity("step", M.PerLayerClip(BOUNDS)) == pytest.approx(c)
    opt.max_grad_norm = 2 * c                           # a clip scheduler scales every bound
    assert opt.max_grad_norm == pytest.approx([2 * b for b in BOUNDS])
    assert torch.allclose(_clipped(opt, m, x, y), _per_layer_sum(_model(), x, y, BOUNDS, 2.0), rtol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_per_layer_clipping_leave_one_out_moves_the_sum_by_at_most_the_norm_of_the_bounds(dtype):
    model = _model().to(dtype)
    _, _, m, opt, dl = _make(model=model, clipping="per_layer", max_grad_norm=BOUNDS, loss_reduction="sum")
    x, y = _data(16, seed=4)
    x, y, c = (x * 5).to(dtype), (y * 5).to(dtype), float(M.PerLayerClip(BOUNDS))
    full = _clipped_sum(opt, m, x, y)
    worst = 0.0
    for i in range(len(x)):
        keep = torch.arange(len(x)) != i
        worst = max(worst, float((full - _clipped_sum(opt, m, x[keep], y[keep])).double().norm()))
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert 0.5 * c < worst <= c * (1 + tol)


def _clipped_sum(opt, m, x, y):
    opt.zero_grad()
    nn.functional.mse_loss(m(x), y, reduction="sum").backward()
    return opt.release_of(noise=False)


def test_per_layer_bounds_must_match_the_trained_parameters():
    with pytest.raises(InputError, match="3 bounds for 4 trained parameters"):
        _make(clipping="per_layer", max_grad_norm=[1.0, 1.0, 1.0])
    with pytest.raises(InputError, match="per-layer clipping"):
        _make(max_grad_norm=[1.0] * 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InputError, match="clipping='per_layer' is not allowed for dicesgd"):
            _make(algorithm="dicesgd", noise={"sigma1": 1.0}, noise_multiplier=None, C2=0.1, clipping="per_layer",
                  max_grad_norm=[1.0] * 4)


class _SeqFirst(nn.Module):
    """Tokens ``[T, B]`` (records on dimension 1) -> ``[B, T]`` (records on dimension 0); mixes time steps
    (a running sum), never records."""

    def __init__(self):
        super().__init__()
        self.emb, self.fc1, self.fc2 = nn.Embedding(20, 4), nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x):
        h = torch.tanh(self.fc1(self.emb(x))).cumsum(0)
        return self.fc2(h).squeeze(-1).permute(1, 0)


SEQ_BOUNDS = [0.3, 0.2, 0.5, 0.1, 0.05]


def _seq(batch_first=False, seed=0, **kw):
    torch.manual_seed(seed)
    model = _SeqFirst().double()
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randint(0, 20, (12, 6), generator=g), torch.randn(12, 6, generator=g, dtype=torch.float64)

    def collate(rows):
        xs, ys = zip(*rows)
        return torch.stack(xs, 1), torch.stack(ys)                 # [T, B] and [B, T]
    dl = DataLoader(TensorDataset(x, y), batch_size=6, collate_fn=collate)
    out = _make(model=model, loader=dl, clipping="per_layer", max_grad_norm=SEQ_BOUNDS, batch_first=batch_first,
                poisson_sampling=False, noise_multiplier=0.0, loss_reduction="sum", **kw)
    return out + (x, y)


def _seq_sum(opt, m, xb, yb):
    opt.zero_grad()
    ((m(xb) - yb) ** 2).sum().backward()
    return opt.release_of(noise=False)


def test_per_layer_clipping_with_sequence_first_records_matches_the_naive_loop_and_its_leave_one_out():
    _, model, m, opt, dl, x, y = _seq()
    naive = _SeqFirst().double()
    naive.load_state_dict(model.state_dict())
    xb, yb = x.T.contiguous(), y                                   # all 12 records, [T, B]
    got = _seq_sum(opt, m, xb, yb)
    assert m.captures == [] or m.captures[0].out_dim == 0
    total = 0
    for i in range(xb.shape[1]):
        naive.zero_grad()
        ((naive(xb[:, i:i + 1]) - yb[i:i + 1]) ** 2).sum().backward()
        total = total + torch.cat([(p.grad * min(1.0, b / float(p.grad.norm()))).reshape(-1)
                                   for p, b in zip(naive.parameters(), SEQ_BOUNDS)])
    assert torch.allclose(got, total, rtol=1e-10, atol=1e-13)
    c, worst = float(M.PerLayerClip(SEQ_BOUNDS)), 0.0
    for i in range(xb.shape[1]):
        keep = torch.arange(xb.shape[1]) != i
        worst = max(worst, float((got - _seq_sum(opt, m, xb[:, keep], yb[keep])).norm()))
    assert 0.5 * c < worst <= c * (1 + 1e-12)
    one = _seq_sum(opt, m, xb[:, :1], yb[:1])                       # a batch of one record
    assert torch.allclose(one, total - _seq_sum(opt, m, xb[:, 1:], yb[1:]), rtol=1e-9, atol=1e-12)


def test_per_layer_clipping_refuses_records_it_cannot_find_in_the_output():
    _, _, m, opt, dl, x, y = _seq(batch_first=True)                 # the same model declared batch-first
    with pytest.raises(InputError, match="mixes the records"):     # the per-layer rules' record probe
        m(x.T.contiguous())                                         # "records" would be time steps: mixed

    class Centred(nn.Module):                                      # subtracts the batch's mean: mixes records
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 1)

        def forward(self, x):
            return self.fc(x - x.mean(0))

    _, _, m2, opt2, _ = _make(model=Centred().double(), clipping="per_layer", max_grad_norm=[1.0, 1.0])
    with pytest.raises(InputError, match="mixe"):
        m2(_data()[0][:B])

    class Summed(nn.Module):                                       # no dimension of its output holds the records
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 1)

        def forward(self, x):
            return self.fc(x).sum(0)

    _, _, m3, opt3, _ = _make(model=Summed().double(), clipping="per_layer", max_grad_norm=[1.0, 1.0])
    with pytest.raises(InputError, match="no dimension could hold"):
        m3(_data()[0][:B])


# -- p.summed_grad: Opacus's un-noised clipped sum of the logical batch ------------------------------------
def _flat_sum(model, x, y, c):
    """The naive loop: each record's whole gradient clipped to norm c, summed (flat)."""
    total = None
    for i in range(len(x)):
        model.zero_grad()
        nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1], reduction="sum").backward()
        g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        g = g * min(1.0, c / float(g.norm()))
        total = g if total is None else total + g
    return total


def _summed(m):
    return torch.cat([p.summed_grad.reshape(-1) for p in m.parameters()])


@pytest.mark.parametrize("clipping", ["flat", "per_layer"])
def test_summed_grad_is_the_clipped_sum_before_the_noise_which_is_added_on_top(clipping):
    bound = 0.2 if clipping == "flat" else BOUNDS
    _, _, m, opt, dl = _make(clipping=clipping, max_grad_norm=bound, noise_multiplier=1.0, seed=3,
                             keep_summed_grad=True)             # Opacus's: kept after the release until zero_grad
    opt.privatizer.record = opt.privatizer.record_noise = True      # keep the noise drawn, to compare with
    assert all(p.summed_grad is None for p in m.parameters())       # Opacus's None before the first step
    x, y = _data()
    x, y = x[:B] * 3, y[:B] * 3
    opt.zero_grad()
    nn.functional.mse_loss(m(x), y).backward()
    opt.step()
    naive = _flat_sum(_model(), x, y, bound) if clipping == "flat" else _per_layer_sum(_model(), x, y, bound)
    got = _summed(m)
    assert torch.allclose(got, naive, rtol=1e-10, atol=1e-12)
    for p in m.parameters():
        assert p.summed_grad.dtype == p.dtype and p.summed_grad.shape == p.shape
        assert p.summed_grad.data_ptr() != p.grad.data_ptr()
    noise = opt.privatizer.releases[-1].noise.to(got.dtype)
    assert float(noise.norm()) > 0.1 * opt.kernel.std("step")       # noise was drawn ...
    grad = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
    assert torch.equal(grad, (got + noise) / opt.kernel.normaliser)  # ... on top of summed_grad, not into it
    opt.zero_grad()
    assert all(p.summed_grad is None for p in m.parameters())


def test_summed_grad_accumulates_over_the_physical_batches_until_zero_grad_after_the_step():
    _, _, m, opt, dl = _make(poisson_sampling=False, max_grad_norm=0.2, keep_summed_grad=True)
    seen_x, seen_y = [], []
    with BatchMemoryManager(data_loader=dl, max_physical_batch_size=3, optimizer=opt) as chunks:
        for xb, yb in chunks:
            opt.zero_grad()
            if seen_x:                                               # kept between the physical batches
                assert torch.equal(_summed(m), before)
            nn.functional.mse_loss(m(xb), yb).backward()
            opt.step()
            seen_x.append(xb)
            seen_y.append(yb)
            before = _summed(m).clone()
            naive = _flat_sum(_model(), torch.cat(seen_x), torch.cat(seen_y), 0.2)
            assert torch.allclose(before, naive, rtol=1e-10, atol=1e-12)
            if opt.round == 1:
                break
    assert sum(len(t) for t in seen_x) == B and len(seen_x) == 3     # the first logical batch, in 3 chunks
    opt.zero_grad()
    assert all(p.summed_grad is None for p in m.parameters())
