"""The engine (dpcalib.optim.PrivacyEngine): a user's own loop over the engine's module, optimizer
and loader makes the reference optimizer's run; its loader draws what the accountant assumes; its
ledger charges what really ran."""

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O
from dpcalib.accountant.validation import InputError
from dpcalib.optim.engine.capture import one_batch
from dpcalib.optim.engine import (BudgetExceeded, FixedSizeBatchSampler, OverspendWarning, PoissonBatchSampler,
                                  ShuffleBatchSampler)
from tests import engine_setup as S

ALGORITHMS = ["dp-sgd", "dicesgd", "dp-srm"]


# -- 1. the same iterates as the reference optimizer ------------------------------------------------
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_user_loop_makes_the_reference_optimizers_iterates(algorithm):
    net, ref_net = S.copies()
    x, y = S.data()
    ref = S.reference(algorithm, ref_net, x, y)
    engine, m, opt, crit, loader = S.private(algorithm, net, x, y)
    if algorithm == "dp-srm":
        ref.step()          # the reference's round r + 1 moves by v^{r-1}: the engine's step r writes it
    k, worst = S.beside_reference(ref, net, ref_net, m, opt, crit, loader)
    assert k == S.EPOCHS * (S.N // S.B)
    assert worst < 1e-6
    assert S.flat(net).abs().max() > 0.1 and not torch.equal(S.flat(net), S.flat(S.model()))  # the run moved
    if algorithm != "dp-srm":           # the same releases: the same eps, the number `dpcalib epsilon` prints
        assert engine.get_epsilon(1e-5) == ref.epsilon_spent(1e-5)


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_adam_and_adamw_are_applied_to_the_reference_direction(name):
    """DP-SGD: the reference's release at the engine's iterate, divided by B, fed to torch's optimizer."""
    net, shadow = S.copies()
    x, y = S.data()
    make = lambda p: getattr(torch.optim, name)(p, lr=0.05, weight_decay=0.01)  # noqa: E731
    engine, m, opt, crit, loader = S.private("dp-sgd", net, x, y, optimizer=make)
    ref = S.reference("dp-sgd", shadow, x, y, record_values=True)
    torch_opt = make(shadow.parameters())
    worst = []
    S.loop(m, opt, crit, loader, after=S.applied_to_reference(net, shadow, ref, torch_opt, worst))
    assert max(worst) < 1e-6


def test_dicesgd_with_adam_is_the_papers_algorithm_3():
    net, ref_net = S.copies()
    x, y = S.data()
    ref = S.reference("dicesgd", ref_net, x, y, optimizer="adam")
    _, m, opt, crit, loader = S.private("dicesgd", net, x, y, optimizer=lambda p: torch.optim.Adam(p, lr=0.05))
    _, worst = S.beside_reference(ref, net, ref_net, m, opt, crit, loader)
    assert worst < 1e-6


def test_a_sum_reduced_loss_gives_the_same_run():
    net, net2 = S.copies()
    x, y = S.data()
    _, m, opt, crit, loader = S.private("dp-sgd", net, x, y)
    _, m2, opt2, _, loader2 = S.private("dp-sgd", net2, x, y, loss_reduction="sum")
    S.loop(m, opt, crit, loader)
    S.loop(m2, opt2, nn.MSELoss(reduction="sum"), loader2)
    torch.testing.assert_close(S.flat(net), S.flat(net2), rtol=1e-9, atol=1e-12)


def test_physical_chunks_give_the_step_of_one_pass():
    net, net2 = S.copies()
    x, y = S.data()
    _, m, opt, crit, loader = S.private("dicesgd", net, x, y)
    _, m2, opt2, crit2, loader2 = S.private("dicesgd", net2, x, y)
    S.loop(m, opt, crit, loader)
    steps = 0
    with O.BatchMemoryManager(data_loader=loader2, max_physical_batch_size=3, optimizer=opt2) as chunks:
        for _ in range(S.EPOCHS):
            for xb, yb in chunks:
                assert xb.shape[0] <= 3
                opt2.zero_grad()
                crit2(m2(xb), yb).backward()
                opt2.step()
                steps += 1
    assert steps > opt2.round == opt.round == S.EPOCHS * (S.N // S.B)
    torch.testing.assert_close(S.flat(net), S.flat(net2), rtol=1e-9, atol=1e-12)


# -- 2. the loader the accountant assumes ------------------------------------------------------------
def test_poisson_batch_sizes_are_binomial_and_empty_batches_run():
    n, q, draws = 40, 0.05, 4000
    sizes = np.array([len(b) for b in PoissonBatchSampler(n, q, draws, torch.Generator().manual_seed(7))])
    k = np.arange(0, 8)
    expected = stats.binom.pmf(k, n, q) * draws
    expected[-1] += stats.binom.sf(k[-1], n, q) * draws
    observed = np.array([np.sum(sizes == v) for v in k[:-1]] + [np.sum(sizes >= k[-1])])
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    assert sizes.mean() == pytest.approx(n * q, rel=0.05)
    # empty batches reach the loop as zero-row tensors and make a (noise-only) release each
    net = S.model()
    x, y = S.data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=30)
    engine = O.PrivacyEngine()
    m, opt, loader = engine.make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                                         data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0, seed=1, epochs=1)
    loader.batch_sampler.q = 0.01                 # a rate at which most batches are empty
    seen = []
    for xb, yb in loader:
        seen.append(xb.shape[0])
        assert xb.shape[1:] == (4,) and yb.shape[1:] == (1,)
        opt.zero_grad()
        nn.MSELoss()(m(xb), yb).backward()
        opt.step()
    assert 0 in seen and opt.round == len(seen)
    assert torch.isfinite(S.flat(net)).all()


def test_fixed_size_and_shuffled_batches():
    wor = FixedSizeBatchSampler(30, 4, 6, torch.Generator().manual_seed(2), b0=9)
    sizes = [len(b) for b in list(wor) + list(wor)]
    assert sizes == [9] + [4] * 11
    assert all(len(set(b)) == len(b) for b in wor)
    sh = ShuffleBatchSampler(23, 5, torch.Generator().manual_seed(2))
    for _ in range(3):
        batches = list(sh)
        assert [len(b) for b in batches] == [5, 5, 5, 5, 3]
        assert sorted(i for b in batches for i in b) == list(range(23))     # every record once per epoch
    assert [len(b) for b in ShuffleBatchSampler(23, 5, torch.Generator(), drop_last=True)] == [5] * 4


def test_the_loader_keeps_the_users_settings_and_refuses_what_it_cannot_account():
    x, y = S.data()
    ds = torch.utils.data.TensorDataset(x, y)
    seen = []

    def collate(items):
        seen.append(len(items))
        return torch.utils.data.default_collate(items)

    user = torch.utils.data.DataLoader(ds, batch_size=10, collate_fn=collate, pin_memory=False)
    net = S.model()
    _, _, loader = O.PrivacyEngine().make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                                                  data_loader=user, noise_multiplier=1.0, max_grad_norm=1.0)
    assert len(loader) == 6 and isinstance(loader.batch_sampler, PoissonBatchSampler)
    assert sum(1 for _ in loader) == 6 and seen
    bad = {
        "WeightedRandomSampler": dict(sampler=torch.utils.data.WeightedRandomSampler([1.0] * 60, 60), batch_size=10),
        "batch_sampler": dict(batch_sampler=[[0, 1], [2, 3]]),
        "batch_size=None": dict(batch_size=None),
    }
    for needle, kw in bad.items():
        with pytest.raises(InputError, match=needle.split("=")[0]):
            O.PrivacyEngine().make_private(module=S.model(), optimizer=torch.optim.SGD(S.model().parameters(), lr=0.1),
                                           data_loader=torch.utils.data.DataLoader(ds, **kw), noise_multiplier=1.0,
                                           max_grad_norm=1.0)

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([(torch.zeros(4), torch.zeros(1))])

    with pytest.raises(InputError, match="IterableDataset"):
        O.PrivacyEngine().make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                                       data_loader=torch.utils.data.DataLoader(Stream(), batch_size=2),
                                       noise_multiplier=1.0, max_grad_norm=1.0)


# -- 2. the ledger ------------------------------------------------------------------------------------
def _dp_sgd_run(epochs=2, **kw):
    net = S.model()
    x, y = S.data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=S.B)
    engine = O.PrivacyEngine()
    m, opt, loader = engine.make_private_with_epsilon(
        module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), data_loader=loader, target_epsilon=2.0,
        target_delta=1e-5, epochs=epochs, max_grad_norm=1.0, seed=4, **kw)
    return engine, m, opt, loader


def test_get_epsilon_of_the_calibrated_run_is_what_dpcalib_epsilon_prints(capsys):
    from dpcalib.cli import main

    engine, m, opt, loader = _dp_sgd_run()
    S.loop(m, opt, nn.MSELoss(), loader)
    z = opt.noise_multiplier
    assert engine.get_epsilon(1e-5) <= 2.0
    capsys.readouterr()
    assert main(["epsilon", "dp-sgd", "--sampling-rate", repr(1.0 / 6), "--steps", "12", "--noise-multiplier",
                 repr(z), "--delta", "1e-5", "--json"]) == 0
    import json

    printed = json.loads(capsys.readouterr().out)
    assert engine.get_epsilon(1e-5) == pytest.approx(printed["epsilon"], rel=1e-9, abs=0)


def test_a_shuffled_run_reports_the_upper_end_of_the_shuffle_bracket():
    engine, m, opt, loader = _dp_sgd_run(sampling="shuffle")
    assert isinstance(loader.batch_sampler, ShuffleBatchSampler)
    S.loop(m, opt, nn.MSELoss(), loader)
    mech = M.DPSGD(n=S.N, batch_size=S.B, epochs=2, sampling="shuffle")
    br = mech.epsilon_bracket(1e-5, opt.noise_multiplier)
    assert engine.get_epsilon(1e-5) == pytest.approx(br.upper, rel=1e-12) and engine.get_epsilon(1e-5) <= 2.0
    assert engine.epsilon_bracket(1e-5).lower == pytest.approx(br.lower, rel=1e-12)


def test_a_run_stopped_early_or_with_noise_changed_is_charged_as_it_ran():
    engine, m, opt, loader = _dp_sgd_run()
    z = opt.noise_multiplier
    q = 1.0 / 6
    S.loop(m, opt, nn.MSELoss(), loader, epochs=1)
    early = engine.get_epsilon(1e-5)
    assert early == pytest.approx(M.DPSGD(q, 6).epsilon(1e-5, z).epsilon, rel=1e-9)
    assert early < 2.0
    opt.noise_multiplier = z * 2                  # more noise from here on: charged as it runs
    S.loop(m, opt, nn.MSELoss(), loader, epochs=1)
    mixed = engine.get_epsilon(1e-5)
    from dpcalib.accountant import PoissonSampledGaussianEvent, PrivacyAccountant

    acc = PrivacyAccountant().compose(PoissonSampledGaussianEvent(q, z), 6).compose(
        PoissonSampledGaussianEvent(q, 2 * z), 6)
    assert mixed == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert acc.epsilon_bracket(1e-5).lower <= mixed             # never below the truth's lower bound
    assert early < mixed < M.DPSGD(q, 12).epsilon(1e-5, z).epsilon


def test_a_step_past_the_budget_raises_and_overspending_is_charged():
    engine, m, opt, loader = _dp_sgd_run(epochs=1)
    S.loop(m, opt, nn.MSELoss(), loader, epochs=1)
    with pytest.raises(BudgetExceeded, match="past the budget"):
        S.loop(m, opt, nn.MSELoss(), loader, epochs=1)
    assert opt.round == 6
    # less noise than calibrated: the next step is past the budget although the run is not over
    engine, m, opt, loader = _dp_sgd_run(epochs=2)
    opt.noise_multiplier = opt.noise_multiplier / 3
    with pytest.raises(BudgetExceeded):
        S.loop(m, opt, nn.MSELoss(), loader, epochs=2)
    engine, m, opt, loader = _dp_sgd_run(epochs=1, allow_overspend=True)
    with pytest.warns(OverspendWarning):
        S.loop(m, opt, nn.MSELoss(), loader, epochs=2)
    assert opt.round == 12 and engine.get_epsilon(1e-5) > 2.0


def test_zero_noise_spends_infinite_epsilon():
    net = S.model()
    x, y = S.data()
    engine, m, opt, crit, loader = S.private("dp-sgd", net, x, y, noise_multiplier=0.0)
    assert engine.get_epsilon(1e-5) == 0.0
    S.loop(m, opt, crit, loader, epochs=1)
    assert engine.get_epsilon(1e-5) == math.inf


# -- checkpoints ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_checkpoint_and_resume_mid_epoch_equal_an_uninterrupted_run(tmp_path, algorithm):
    x, y = S.data()
    net = S.model()
    engine, m, opt, crit, loader = S.private(algorithm, net, x, y, optimizer=lambda p: torch.optim.Adam(p, lr=0.01))
    S.loop(m, opt, crit, loader)
    whole, eps = S.flat(net), engine.get_epsilon(1e-5)

    net = S.model()
    engine, m, opt, crit, loader = S.private(algorithm, net, x, y, optimizer=lambda p: torch.optim.Adam(p, lr=0.01))
    it = iter(loader)
    for _ in range(4):                               # 4 steps into the first epoch
        xb, yb = next(it)
        opt.zero_grad()
        crit(m(xb), yb).backward()
        opt.step()
    path = tmp_path / "ck.pt"
    engine.save_checkpoint(path=path, module=m, optimizer=opt, data_loader=loader)

    net = S.model()
    engine, m, opt, crit, loader = S.private(algorithm, net, x, y, optimizer=lambda p: torch.optim.Adam(p, lr=0.01))
    engine.load_checkpoint(path=path, module=m, optimizer=opt, data_loader=loader)
    S.loop(m, opt, crit, loader)                     # the rest of epoch 1, then epoch 2
    assert opt.round == S.EPOCHS * (S.N // S.B)
    assert torch.equal(S.flat(net), whole)
    assert engine.get_epsilon(1e-5) == eps


# -- bad input: one line each --------------------------------------------------------------------------
def _make(**kw):
    net = kw.pop("module", None) or S.model()
    x, y = S.data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=S.B)
    args = dict(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), data_loader=loader,
                noise_multiplier=1.0, max_grad_norm=1.0)
    args.update(kw)
    return O.PrivacyEngine().make_private(**args)


@pytest.mark.parametrize("kw,needle", [
    (dict(algorithm="diff2-gd"), "algorithm='diff2-gd'"),
    (dict(algorithm="nope"), "algorithm='nope'"),
    (dict(algorithm="dicesgd", noise={"sigma1": 1.0}, sampling="shuffle"), "sampling='shuffle'"),
    (dict(sampling="wor"), "sampling='wor'"),
    (dict(sampling="random"), "sampling='random'"),
    (dict(max_grad_norm=0.0), "max_grad_norm=0.0"),
    (dict(max_grad_norm=float("nan")), "max_grad_norm=nan"),
    (dict(noise_multiplier=-1.0), "noise\\['noise_multiplier'\\]=-1.0"),
    (dict(noise_multiplier=None), "noise_multiplier is required"),
    (dict(algorithm="dicesgd"), "noise_multiplier=1.0 is not allowed for dicesgd"),
    (dict(algorithm="dp-srm", noise_multiplier=None, noise={"sigma0": 1.0, "sigma": 1.0}), "criterion is required"),
    (dict(clipping="per_layer"), "clipping='per_layer'"),
    (dict(loss_reduction="none"), "loss_reduction='none'"),
    (dict(criterion=nn.MSELoss(reduction="sum")), "criterion.reduction='sum'"),
    (dict(epochs=0), "epochs=0"),
    (dict(epochs=1, steps=3), "epochs and steps"),
    (dict(seed=1.5), "seed=1.5"),
    (dict(seed=-3), "seed=-3"),
    (dict(module=nn.Sequential(nn.Linear(4, 1)), noise_multiplier=1e300), "more than the model's torch.float32"),
    (dict(module=nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 1)).double()), "BatchNorm"),
    (dict(secret=1), "secret="),
])
def test_bad_input_is_one_line_naming_the_option(kw, needle):
    with pytest.raises(InputError, match=needle) as e:
        _make(**kw)
    assert "\n" not in str(e.value)


def test_make_private_with_epsilon_needs_a_length_and_takes_no_noise():
    x, y = S.data()
    net = S.model()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=S.B)
    common = dict(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), data_loader=loader,
                  target_epsilon=1.0, target_delta=1e-5, max_grad_norm=1.0)
    with pytest.raises(InputError, match="epochs or steps is required"):
        O.PrivacyEngine().make_private_with_epsilon(**common)
    with pytest.raises(InputError, match="noise_multiplier is not allowed here"):
        O.PrivacyEngine().make_private_with_epsilon(noise_multiplier=1.0, epochs=1, **common)
    with pytest.raises(InputError, match="accountant='moments'"):
        O.PrivacyEngine(accountant="moments")


def test_a_step_without_a_backward_is_refused():
    m, opt, loader = _make()
    xb, yb = next(iter(loader))
    m(xb)
    with pytest.raises(InputError, match="no backward"):
        opt.step()
    with pytest.raises(InputError, match="expected the batch, a tensor"):
        m([xb])
    m.clear()
    torch.testing.assert_close(m(input=xb), m.inner(xb))     # the batch as a keyword input (Hugging Face's way)
    m.clear()
    with torch.no_grad():
        assert m(xb).shape == (xb.shape[0], 1)              # evaluation: the plain module


# -- 3. record-level soundness through the engine's module -----------------------------------------------
def test_an_unsupported_layer_and_tied_weights_fall_back_to_vmap_with_the_same_run():
    class WithPReLU(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.act, self.b = nn.Linear(4, 8), nn.PReLU(), nn.Linear(8, 1)

        def forward(self, x):
            return self.b(self.act(self.a(x)))

    torch.manual_seed(0)
    net = WithPReLU().double()
    x, y = S.data()
    with pytest.warns(O.ClippingFallbackWarning, match="PReLU"):
        engine, m, opt, crit, loader = S.private("dp-sgd", net, x, y)
    assert not m.fast
    torch.manual_seed(0)
    ref_net = WithPReLU().double()
    ref = S.reference("dp-sgd", ref_net, x, y)

    def compare(k):
        ref.step()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", O.ClippingFallbackWarning)
        S.loop(m, opt, crit, loader, after=compare)
    torch.testing.assert_close(S.flat(net), S.flat(ref_net), rtol=1e-9, atol=1e-12)


def test_every_registered_algorithm_and_sampling_runs_or_is_refused():
    """Driven by the registry: each algorithm with an ``engine`` entry runs two steps with each of its
    samplings (the loader of that sampling, a finite certified eps); the others are refused in one line."""
    from dpcalib.mechanisms import REGISTRY

    x, y = S.data()
    ran = []
    for name, entry in REGISTRY.items():
        for sampling in ("poisson", "wor", "shuffle"):
            net = S.model()
            kw = dict(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), max_grad_norm=1.0,
                      data_loader=torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]),
                                                              batch_size=7),   # n = 60 not divisible by 7
                      algorithm=name, sampling=sampling, criterion=nn.MSELoss())
            if sampling not in entry.engine:
                with pytest.raises(InputError, match=f"algorithm='{name}'|sampling='{sampling}'") as e:
                    O.PrivacyEngine().make_private(noise_multiplier=1.0, **kw)
                assert "\n" not in str(e.value)
                continue
            engine = O.PrivacyEngine()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")        # the papers' conditions (DiceSGD-E4) are warned about
                m, opt, crit, loader = engine.make_private_with_epsilon(target_epsilon=4.0, target_delta=1e-5,
                                                                        epochs=1, **kw)
            assert loader.batch_sampler.sampling == sampling and len(loader) == 9
            it = iter(loader)
            for _ in range(2):
                xb, yb = next(it)
                opt.zero_grad()
                crit(m(xb), yb).backward()
                opt.step()
            eps = engine.get_epsilon(1e-5)
            assert 0.0 < eps <= 4.0 and math.isfinite(eps)
            ran.append((name, sampling))
    assert {("dp-sgd", "poisson"), ("dp-sgd", "shuffle"), ("dicesgd", "poisson"), ("dp-srm", "wor")} <= set(ran)


def test_param_groups_and_a_learning_rate_schedule_are_the_wrapped_optimizers():
    """Two parameter groups with their own learning rates and a StepLR schedule: the engine's run equals
    the same torch optimizer and schedule fed the reference's direction (DP-SGD, zero noise)."""
    net, shadow = S.copies()
    x, y = S.data()

    def make(model):
        first, last = list(model.children())[0], list(model.children())[-1]
        return torch.optim.SGD([{"params": first.parameters(), "lr": 0.2},
                                {"params": last.parameters(), "lr": 0.05}], lr=0.1, momentum=0.5)

    engine, m, opt, crit, loader = S.private("dp-sgd", net, x, y, optimizer=lambda p: make(net), noise_multiplier=0.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    assert opt.param_groups is opt.original_optimizer.param_groups and len(opt.param_groups) == 2
    ref = S.reference("dp-sgd", shadow, x, y, record_values=True)
    ref.levels["noise_multiplier"] = 0.0
    ref.kernel.levels["noise_multiplier"] = 0.0
    torch_opt = make(shadow)
    ref_sched = torch.optim.lr_scheduler.StepLR(torch_opt, step_size=3, gamma=0.5)
    worst = []
    S.loop(m, opt, crit, loader, after=S.applied_to_reference(net, shadow, ref, torch_opt, worst, before=sched.step,
                                                              after=ref_sched.step))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.2 * 0.5 ** 4) and max(worst) < 1e-6
    state = opt.state_dict()
    assert state["optimizer"]["param_groups"][1]["lr"] == pytest.approx(0.05 * 0.5 ** 4)
    assert state["round"] == 12 and state["levels"] == {"noise_multiplier": 0.0}


def test_frozen_layers_are_constants_and_a_second_forward_is_refused():
    """Fine-tuning: a frozen first layer is no record's gradient (the run equals the reference optimizer
    on the trained layers, the frozen ones untouched); a layer half frozen keeps its rule; two
    training forwards before one step would count a record twice and are refused."""
    net, ref_net = S.copies()
    for m in (net, ref_net):
        for p in m[0].parameters():
            p.requires_grad_(False)
    x, y = S.data()
    engine, m, opt, crit, loader = S.private("dp-sgd", net, x, y,
                                             optimizer=lambda p: torch.optim.SGD([q for q in p if q.requires_grad],
                                                                                 lr=S.LR["dp-sgd"]))
    assert m.fast and [k for k, _ in m.named] == ["2.weight", "2.bias"]
    frozen = S.flat(net[0]).clone()

    class Head(nn.Module):             # the reference optimizer over the trained layer, the frozen one as data
        def __init__(self):
            super().__init__()
            self.head = ref_net[2]

        def forward(self, h):
            return self.head(h)

    with torch.no_grad():
        h = torch.tanh(ref_net[0](x))
    ref = S.reference("dp-sgd", Head(), h, y)

    def compare(k):
        ref.step()

    S.loop(m, opt, crit, loader, after=compare)
    assert torch.equal(S.flat(net[0]), frozen)
    torch.testing.assert_close(S.flat(net[2]), S.flat(ref_net[2]), rtol=1e-9, atol=1e-12)
    half = S.model()
    half[2].bias.requires_grad_(False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", O.ClippingFallbackWarning)     # a layer half frozen: still its rule's
        _, m2, opt2, crit2, loader2 = S.private("dp-sgd", half, x, y)
        assert m2.fast
        m2(x[:7]).mean().backward()
    got = m2.captures[-1].clipped_sum(0.05)
    m2.clear()
    ref = 0.0
    for i in range(7):          # the naive loop over the trained parameters
        gs = torch.autograd.grad(half(x[i:i + 1]).sum(), [half[0].weight, half[0].bias, half[2].weight])
        v = torch.cat([g.reshape(-1) for g in gs])
        ref = ref + v * min(1.0, 0.05 / float(v.norm()))
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-15)
    frozen_bias = half[2].bias.detach().clone()
    S.loop(m2, opt2, crit2, loader2, epochs=1)
    assert torch.equal(half[2].bias, frozen_bias)
    m3, opt3, loader3 = _make()
    xb, yb = next(iter(loader3))
    nn.MSELoss()(m3(xb), yb).backward()
    with pytest.raises(InputError, match="count twice"):      # a second batch: refused at its forward
        m3(xb)
    opt3.step()                                                # the first batch's step
    opt3.zero_grad()
    m3(xb)                                                     # a forward without backward adds nothing
    nn.MSELoss()(m3(xb), yb).backward()
    assert len(m3.captures) == 2 and one_batch(m3.captures) is m3.captures[1]
    opt3.step()
    opt3.zero_grad()
    it = iter(loader3)
    b1, b2 = next(it), next(it)                                # two batches of the loader in one step: refused
    (nn.MSELoss()(m3(b1[0]), b1[1]) + nn.MSELoss()(m3(b2[0]), b2[1])).backward()
    with pytest.raises(InputError, match="2 back-propagated training forwards"):   # sizes or batches differ
        opt3.step()
