"""Data preparation of the papers (DIFF2 sec. 6): standardise, y / max|y|, 80/20, equal shards."""

import numpy as np
import pytest
import torch

from dpcalib.optim import data as D


def test_prepare_standardises_scales_target_and_splits_80_20():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 5.0, size=(1000, 4))
    x[:, 3] = 7.0                                   # a constant column stays finite
    y = rng.normal(10.0, 2.0, size=1000)
    d = D.prepare(x, y, seed=1)
    assert len(d.x_train) == 800 and len(d.x_test) == 200
    allx = torch.cat([d.x_train, d.x_test]).double()
    np.testing.assert_allclose(allx.mean(0).numpy(), 0.0, atol=1e-6)
    np.testing.assert_allclose(allx[:, :3].std(0, unbiased=False).numpy(), 1.0, rtol=1e-5)
    assert torch.all(allx[:, 3] == 0)
    ally = torch.cat([d.y_train, d.y_test]).double()
    assert float(ally.abs().max()) == pytest.approx(1.0)
    np.testing.assert_allclose(sorted(ally.numpy() * np.abs(y).max()), sorted(y), rtol=1e-5)


def test_equal_shards_of_the_california_shape():
    x, y = D.synthetic("california", seed=0)
    assert x.shape == (20640, 8) and y.shape == (20640,)
    d = D.prepare(x, y, seed=0)
    shards = d.shards(10)
    sizes = [len(s[0]) for s in shards]
    assert sum(sizes) == 16512 and min(sizes) == 1651 and max(sizes) == 1652
    assert d.n_min(10) == 1651
    assert torch.equal(torch.cat([s[0] for s in shards]), d.x_train)


def test_synthetic_shapes_are_the_papers_and_deterministic():
    x, y = D.synthetic("covtype", n=500, seed=0)
    assert x.shape == (500, 54) and set(np.unique(y)) <= set(range(7))
    a, b = D.synthetic("gas_turbine", n=300, seed=4), D.synthetic("gas_turbine", n=300, seed=4)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    d = D.prepare(*D.synthetic("ijcnn1", n=200, seed=0), task="classification", seed=0)
    assert d.y_train.dtype == torch.long


def test_no_default_seed_is_a_constant_and_a_given_seed_repeats():
    """The secrets standard: without ``seed=`` the data and the split come from fresh operating-system
    entropy (two calls differ); ``seed=s`` gives the same data and split again."""
    a, b = D.synthetic("gas_turbine", n=300), D.synthetic("gas_turbine", n=300)
    assert not np.array_equal(a[0], b[0]) and not np.array_equal(a[1], b[1])
    c, e = D.synthetic("gas_turbine", n=300, seed=7), D.synthetic("gas_turbine", n=300, seed=7)
    assert np.array_equal(c[0], e[0]) and np.array_equal(c[1], e[1])
    x, y = np.arange(2000.0).reshape(1000, 2), np.arange(1000.0)
    one, two = D.prepare(x, y), D.prepare(x, y)
    assert not torch.equal(one.x_train, two.x_train) and not torch.equal(one.y_test, two.y_test)
    one, two = D.prepare(x, y, seed=7), D.prepare(x, y, seed=7)
    assert torch.equal(one.x_train, two.x_train) and torch.equal(one.y_test, two.y_test)
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(ValueError, match="seed="):
            D.synthetic("gas_turbine", n=300, seed=bad)
        with pytest.raises(ValueError, match="seed="):
            D.prepare(x, y, seed=bad)


def test_load_csv_reads_a_local_table(tmp_path):
    p = tmp_path / "t.csv"
    rng = np.random.default_rng(2)
    a = rng.normal(size=(50, 3))
    np.savetxt(p, a, delimiter=",", header="a,b,y", comments="")
    d = D.load_csv(p, target=-1, skip_header=1, test_fraction=0.2, seed=0)
    assert d.x_train.shape == (40, 2)
    assert float(torch.cat([d.y_train, d.y_test]).abs().max()) == pytest.approx(1.0)


def test_bad_data_input_is_refused():
    with pytest.raises(ValueError, match="parts=0"):
        D.equal_shards(np.zeros((3, 1)), np.zeros(3), 0)
    with pytest.raises(ValueError, match="test_fraction"):
        D.prepare(np.zeros((4, 1)), np.zeros(4), test_fraction=1.5)
    with pytest.raises(ValueError, match="NaN"):
        D.prepare(np.array([[1.0], [np.nan]]), np.zeros(2))
    with pytest.raises(ValueError, match="name="):
        D.synthetic("mnist")
    with pytest.raises(ValueError, match="x, y"):
        D.prepare(np.zeros((4, 1)), np.zeros(3))


class _Counting(torch.utils.data.Dataset):
    """A map-style dataset over tensors that counts the items read."""

    def __init__(self, x, y):
        self.x, self.y, self.reads = x, y, 0

    def __len__(self):
        return self.x.shape[0]

    def __getitem__(self, i):
        self.reads += 1
        return self.x[i], self.y[i]


@pytest.mark.parametrize("name", ["dp-sgd", "dp-srm", "dicesgd"])
def test_a_map_style_dataset_gives_the_tensor_run_and_reads_only_drawn_records(name):
    from tests.builders import build, data, mlp

    ref, _ = build(name, mlp())
    for _ in range(6):
        ref.step()
    opt, _ = build(name, mlp())
    x, y = data(100)
    ds = _Counting(x, y)
    opt.dataset, opt.x, opt.y = ds, None, None          # the same run, records read from the dataset
    drawn = []
    plain = opt.sampler.poisson, opt.sampler.without_replacement
    opt.sampler.poisson = lambda *a, **k: drawn.append(plain[0](*a, **k)) or drawn[-1]
    opt.sampler.without_replacement = lambda *a, **k: drawn.append(plain[1](*a, **k)) or drawn[-1]
    for _ in range(6):
        opt.step()
    a, b = ref.params(), opt.params()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert ds.reads <= sum(len(d) for d in drawn) * 2 + 6 and ds.reads < 6 * 100
    assert opt.evaluate()["loss"] == pytest.approx(ref.evaluate()["loss"], rel=1e-6)


def test_the_optimizer_takes_a_dataset_directly():
    import dpcalib.mechanisms as M
    import dpcalib.optim as O
    from tests.builders import data, mlp

    x, y = data(100)
    mech = M.DPSGD(0.1, 5)
    opt = O.DPSGD(mlp(), O.squared_loss, torch.utils.data.TensorDataset(x, y), mech, mech.calibrate(2.0, 1e-5),
                  C=1.0, lr=0.1, seed=0)
    opt.run(progress=False)
    ref = O.DPSGD(mlp(), O.squared_loss, (x, y), mech, mech.calibrate(2.0, 1e-5), C=1.0, lr=0.1, seed=0)
    ref.run(progress=False)
    a, b = ref.params(), opt.params()
    assert all(torch.equal(a[k], b[k]) for k in a) and opt.epsilon_spent() == ref.epsilon_spent()
    with pytest.raises(ValueError, match="empty"):
        O.DPSGD(mlp(), O.squared_loss, torch.utils.data.TensorDataset(x[:0], y[:0]), mech,
                mech.calibrate(2.0, 1e-5), C=1.0, lr=0.1)
