"""The sampler the run has is the sampler it charges, and its shape comes from public numbers (issue 72).

make_private inspects the user's loader: a sampler whose law is not "every record once a pass"
(``RandomSampler`` with replacement or ``num_samples``, a sampler over another source, a batch sampler
of another law) is replaced with a one-line notice, a weighted or custom one refused.  The Poisson
rate ``q = min(1, b / N)``, the ``ceil(N / b)`` batches a pass and the noisy sum's divisor come from
the batch size ``b`` and the public dataset size N (``dataset_size=``, by default the data's),
never from the sampler's length, nor -- once N is stated -- from the private dataset's size."""

import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import (BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset,
                              WeightedRandomSampler)

import dpcalib.mechanisms as M
from dpcalib.accountant.validation import InputError
from dpcalib.optim import DPDataLoader, PrivacyEngine
from dpcalib.optim.engine.samplers import FixedSizeBatchSampler, ShuffleBatchSampler


def _ds(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 3, generator=g, dtype=torch.float64),
                         torch.randn(n, 1, generator=g, dtype=torch.float64))


def _make(loader, engine=None, **kw):
    torch.manual_seed(0)
    net = nn.Linear(3, 1, bias=False).double()
    kw = {"noise_multiplier": 1.0, "max_grad_norm": 1.0, "seed": 0, **kw}
    if "noise" in kw:
        kw.pop("noise_multiplier")
    engine = engine or PrivacyEngine()
    return (engine, *engine.make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.5),
                                         data_loader=loader, **kw))


def _quiet(loader, **kw):
    """make_private with every warning an error: a plain loader is replaced (or kept) without a word."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return _make(loader, **kw)


# -- finding 1: the user's sampler is not trusted ------------------------------------------------------------
def test_a_sampler_with_replacement_is_not_kept_as_the_loaders_own_batches():
    ds = _ds(800)
    loader = DataLoader(ds, batch_size=16, sampler=RandomSampler(ds, replacement=True))
    with pytest.warns(UserWarning, match=r"RandomSampler\(replacement=True\) is replaced by shuffled epochs of 50 "
                                         r"batches of 16") as rec:
        _, _, opt, dl = _make(loader, poisson_sampling=False)
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    assert isinstance(dl.batch_sampler, ShuffleBatchSampler) and len(dl) == 50
    seen = torch.cat([x for x, _ in dl])                    # a pass: every record exactly once
    assert seen.shape[0] == 800 and torch.unique(seen, dim=0).shape[0] == 800
    assert opt.mechanism.sampling == "shuffle" and opt.mechanism.n == 800 and opt.mechanism.batch_size == 16


def test_num_samples_sets_neither_the_rate_nor_the_pass():
    ds = _ds(800)
    loader = DataLoader(ds, batch_size=16, sampler=RandomSampler(ds, num_samples=64))
    with pytest.warns(UserWarning, match=r"RandomSampler\(num_samples=64\) is replaced by Poisson batches at "
                                         r"q = 16/800, 50 a pass"):
        engine, _, opt, dl = _make(loader, epochs=2)
    assert opt.mechanism.sampling_rate == 16 / 800 and opt.mechanism.steps == 100      # not 0.25, 8
    assert len(dl) == 50 and dl.batch_sampler.q == 16 / 800
    assert opt.expected_batch_size == pytest.approx(16.0) and opt.kernel.normaliser == pytest.approx(16.0)
    with pytest.warns(UserWarning, match=r"num_samples=64\) is replaced by shuffled epochs of 50 batches"):
        _, _, opt, dl = _make(DataLoader(ds, batch_size=16, sampler=RandomSampler(ds, num_samples=64)),
                              poisson_sampling=False)
    assert isinstance(dl.batch_sampler, ShuffleBatchSampler) and len(dl) == 50


def test_a_sampler_over_part_of_the_records_or_of_another_law_is_replaced():
    ds = _ds(80)
    with pytest.warns(UserWarning, match="SequentialSampler over 10 of the 80 records is replaced by shuffled"):
        _, _, _, dl = _make(DataLoader(ds, batch_size=8, sampler=SequentialSampler(range(10))),
                            poisson_sampling=False)
    assert isinstance(dl.batch_sampler, ShuffleBatchSampler) and len(dl) == 10
    wor = DPDataLoader(ds, batch_sampler=FixedSizeBatchSampler(80, 8, 10, torch.Generator().manual_seed(0)))
    with pytest.warns(UserWarning, match="FixedSizeBatchSampler is replaced by shuffled epochs"):
        _, _, _, dl = _make(wor, poisson_sampling=False)     # independent batches: not a partition of a pass
    assert isinstance(dl.batch_sampler, ShuffleBatchSampler)


def test_plain_loaders_are_kept_or_replaced_without_a_word():
    ds = _ds(80)
    for loader in (DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=8, shuffle=True),
                   DataLoader(ds, batch_size=8, sampler=RandomSampler(ds, num_samples=80))):
        _, _, opt, dl = _quiet(loader, poisson_sampling=False)
        assert opt.mechanism.sampling == "shuffle"
        if isinstance(loader.sampler, RandomSampler):   # the same law, drawn by the run's own shuffle sampler
            assert isinstance(dl.batch_sampler, ShuffleBatchSampler) and dl.batch_sampler.b == 8 and len(dl) == 10
        else:
            assert dl.batch_sampler is loader.batch_sampler
        _, _, opt, dl = _quiet(loader)
        assert opt.mechanism.sampling_rate == 0.1 and len(dl) == 10


def test_weighted_and_custom_batch_samplers_are_refused_naming_them():
    ds = _ds(80)
    with pytest.raises(InputError, match="its sampler WeightedRandomSampler draws records"):
        _make(DataLoader(ds, batch_size=8, sampler=WeightedRandomSampler(torch.ones(80), 80)))

    class Mine(BatchSampler):
        pass

    with pytest.raises(InputError, match="its batch_sampler Mine decides the batches"):
        _make(DataLoader(ds, batch_sampler=Mine(SequentialSampler(ds), 8, False)))


def test_the_rate_and_the_pass_come_from_the_batch_size():
    ds = _ds(100)
    _, _, opt, dl = _quiet(DataLoader(ds, batch_size=16), epochs=3)
    assert opt.mechanism.sampling_rate == 0.16 and opt.mechanism.steps == 21 and len(dl) == 7   # q = b/N, not 1/7
    assert opt.expected_batch_size == pytest.approx(16.0)
    _, _, opt, dl = _quiet(DataLoader(ds, batch_size=16, drop_last=True))
    assert opt.mechanism.sampling_rate == 0.16 and len(dl) == 6
    _, _, opt, dl = _quiet(DataLoader(_ds(7), batch_size=8))                  # a batch larger than the data
    assert opt.mechanism.sampling_rate == 1.0 and len(dl) == 1 and opt.expected_batch_size == 7.0
    with pytest.raises(InputError, match="batch_size=8 is not allowed with drop_last=True over 7 records"):
        _make(DataLoader(_ds(7), batch_size=8, drop_last=True))


def test_from_data_loader_is_not_fooled_by_num_samples():
    ds = _ds(800)
    for sampler, needle in ((RandomSampler(ds, num_samples=64), "num_samples=64"),
                            (RandomSampler(ds, replacement=True), "replacement=True")):
        with pytest.warns(UserWarning, match=rf"RandomSampler\({needle}\) is replaced by Poisson batches at "
                                             r"q = 1/50, 50 per pass"):
            dl = DPDataLoader.from_data_loader(DataLoader(ds, batch_size=16, sampler=sampler))
        assert dl.sample_rate == 1 / 50 and len(dl) == 50
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert DPDataLoader.from_data_loader(DataLoader(_ds(100), batch_size=16)).sample_rate == 1 / 7  # Opacus's


# -- finding 2: the normaliser does not read the private dataset's size --------------------------------------
def _one_step(ds, **kw):
    _, m, opt, dl = _make(DataLoader(ds, batch_size=8), loss_reduction="sum", **kw)
    for x, y in dl:
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y, reduction="sum").backward()
        opt.step()
        break
    return next(m.parameters()).detach().clone(), opt


def test_neighbouring_datasets_get_the_same_update_scale_at_a_stated_size():
    big = _ds(8)
    big.tensors[0][7], big.tensors[1][7] = 0.0, 0.0          # the 8th record: a zero gradient
    small = TensorDataset(big.tensors[0][:7], big.tensors[1][:7])
    w8, o8 = _one_step(big, dataset_size=8)
    w7, o7 = _one_step(small, dataset_size=8)
    assert o8.kernel.normaliser == o7.kernel.normaliser == 8.0
    assert o8.mechanism == o7.mechanism == M.DPSGD(1.0, 1)
    assert torch.equal(w8, w7)                               # the one step does not tell them apart
    # the size accepted as public (the default): the divisor is each dataset's own, 8 and 7
    assert _one_step(big)[1].kernel.normaliser == 8.0 and _one_step(small)[1].kernel.normaliser == 7.0


def test_a_stated_size_fixes_the_poisson_run_and_draws_from_the_records_there_are():
    ds = _ds(90)
    engine, _, opt, dl = _quiet(DataLoader(ds, batch_size=10), dataset_size=100, epochs=2)
    assert opt.mechanism == M.DPSGD(0.1, 20) and len(dl) == 10 and dl.batch_sampler.n == 90
    assert opt.kernel.normaliser == pytest.approx(10.0)
    net = nn.Linear(3, 1, bias=False).double()
    _, opt2, _ = PrivacyEngine().make_private_with_epsilon(
        module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), data_loader=DataLoader(ds, batch_size=10),
        target_epsilon=2.0, target_delta=1e-5, epochs=2, max_grad_norm=1.0, seed=0, dataset_size=100)
    assert opt2.mechanism == M.DPSGD(0.1, 20)
    _, _, opt, dl = _quiet(DataLoader(ds, batch_size=10), algorithm="dicesgd", noise={"sigma1": 0.1}, C2=0.1,
                           dataset_size=100)
    assert opt.mechanism.N == 100 and dl.batch_sampler.q == 0.1 and len(dl) == 10 and dl.batch_sampler.n == 90


def test_a_stated_size_fixes_the_balls_in_bins_epoch():
    _, _, opt, dl = _quiet(DataLoader(_ds(90), batch_size=10), sampling="balls-in-bins", dataset_size=100)
    assert opt.mechanism.n == 100 and len(dl) == 10 and dl.batch_sampler.n == 90
    assert opt.kernel.normaliser == 10.0
    assert sum(len(x) for x, _ in dl) == 90
    with pytest.raises(InputError, match="dataset_size=1000 is not allowed with sampling='balls-in-bins' over 90"):
        _make(DataLoader(_ds(90), batch_size=1), sampling="balls-in-bins", dataset_size=1000)


@pytest.mark.parametrize("kw", [dict(poisson_sampling=False), dict(sampling="shuffle"),
                                dict(algorithm="dp-srm", noise={"sigma0": 0.1, "sigma": 0.1}, steps=3,
                                     criterion=nn.MSELoss())])
def test_a_stated_size_other_than_the_datas_is_refused_where_the_size_is_public(kw):
    with pytest.raises(InputError, match=r"dataset_size=100 is not allowed with sampling='(shuffle|wor)' over 90 "
                                         "records") as exc:
        _make(DataLoader(_ds(90), batch_size=10), dataset_size=100, **kw)
    assert "\n" not in str(exc.value)
    _quiet(DataLoader(_ds(90), batch_size=10), dataset_size=90, **kw)        # the data's own size: fine


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "8", 10 ** 10])
def test_a_bad_dataset_size_is_refused_in_one_line(bad):
    with pytest.raises(InputError, match=r"dataset_size=.+ is not allowed: expected an integer in \[1, ") as exc:
        _make(DataLoader(_ds(8), batch_size=4), dataset_size=bad)
    assert "\n" not in str(exc.value)
