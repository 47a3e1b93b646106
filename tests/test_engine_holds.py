"""The engine holds what it wraps (issue 72, item 6): a step trains the parameters the private forward
ran with or is refused before anything is charged; the un-noised ``p.summed_grad`` does not outlive
its release; a step without ``zero_grad`` always gets the zero_grad message; make_private's numeric
options are numbers; and ``get_epsilon`` under the engine's accountant never exceeds the target
``make_private_with_epsilon`` calibrated."""

import pickle

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import dpcalib.optim as O
from dpcalib.accountant.validation import InputError
from dpcalib.optim import BatchMemoryManager

N, B, DELTA = 64, 16, 1e-5


def _data(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return torch.randn(N, 4, generator=g).to(dtype), torch.randn(N, 1, generator=g).to(dtype)


def _net(dtype=torch.float32):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(dtype)


def _make(net=None, engine=None, dtype=torch.float32, optimizer=None, method="make_private", **kw):
    net = net if net is not None else _net(dtype)
    x, y = _data(dtype)
    opt = optimizer(net.parameters()) if optimizer else torch.optim.SGD(net.parameters(), lr=0.1)
    engine = engine or O.PrivacyEngine()
    base = {"max_grad_norm": 1.0, "seed": 1}
    if method == "make_private":
        base["noise_multiplier"] = 1.0
    m, opt, dl = getattr(engine, method)(module=net, optimizer=opt, data_loader=DataLoader(TensorDataset(x, y),
                                                                                             batch_size=B),
                                         **{**base, **kw})
    return engine, net, m, opt, dl


def _batch(m, xb, yb, extra=None):
    loss = nn.functional.mse_loss(m(xb), yb)
    if extra is not None:
        loss = loss + extra()
    loss.backward()


def _one_line(err):
    assert "\n" not in str(err.value), str(err.value)


# -- a. parameters replaced after make_private --------------------------------------------------------
def test_a_parameter_replaced_by_assignment_is_refused_before_anything_is_charged():
    engine, net, m, opt, dl = _make()
    net[0].weight = nn.Parameter(net[0].weight.detach().clone())
    xb, yb = next(iter(dl))
    opt.zero_grad()
    _batch(m, xb, yb)
    with pytest.raises(InputError, match=r"parameter '0\.weight' is not the one make_private wrapped.*before "
                                         r"make_private") as err:
        opt.step()
    _one_line(err)
    assert engine.get_epsilon(DELTA) == 0.0 and engine.ledger.steps == 0 and opt.round == 0


def test_model_to_making_new_parameters_is_refused_not_trained_in_a_stale_copy():
    engine, net, m, opt, dl = _make()
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        net.to(torch.float32)                      # new Parameter objects, as a device move can make
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    before = [p.detach().clone() for p in net.parameters()]
    xb, yb = next(iter(dl))
    opt.zero_grad()
    _batch(m, xb, yb)
    with pytest.raises(InputError, match="not the one make_private wrapped"):
        opt.step()
    assert all(torch.equal(p, b) for p, b in zip(net.parameters(), before))
    assert engine.get_epsilon(DELTA) == 0.0


def test_a_trained_parameter_added_to_the_optimizer_after_make_private_is_refused():
    engine, net, m, opt, dl = _make()
    opt.add_param_group({"params": [nn.Parameter(torch.zeros(3))]})
    xb, yb = next(iter(dl))
    opt.zero_grad()
    _batch(m, xb, yb)
    with pytest.raises(InputError, match="1 of the optimizer's trained parameters are not the module's") as err:
        opt.step()
    _one_line(err)
    assert engine.ledger.steps == 0


def test_a_moved_in_place_module_and_frozen_parameters_in_the_optimizer_still_train():
    """``model.to(...)`` that keeps the Parameter objects (torch's default), and an optimizer built from
    every parameter, frozen ones included (Opacus's tests do both): the run trains as before."""
    net = _net()
    net[0].bias.requires_grad_(False)
    engine, net, m, opt, dl = _make(net=net)
    net.to("cpu")
    before = net[2].weight.detach().clone()
    for xb, yb in dl:
        opt.zero_grad()
        _batch(m, xb, yb)
        opt.step()
    assert not torch.equal(net[2].weight, before) and engine.ledger.steps == N // B


# -- b. p.summed_grad does not outlive its release --------------------------------------------------------
def _summed(net):
    return [getattr(p, "summed_grad", None) for p in net.parameters()]


def test_summed_grad_is_cleared_by_a_release_with_noise_and_pickled_parameters_carry_none():
    engine, net, m, opt, dl = _make()
    for xb, yb in dl:
        opt.zero_grad()
        _batch(m, xb, yb)
        opt.step()
        assert all(s is None for s in _summed(net))
    back = pickle.loads(pickle.dumps(list(net.parameters())))     # a Parameter pickles its attributes
    assert all(getattr(p, "summed_grad", None) is None for p in back)


def test_summed_grad_grows_over_the_physical_batches_and_is_cleared_when_the_logical_batch_is_released():
    engine, net, m, opt, dl = _make(poisson_sampling=False)
    seen = []
    with BatchMemoryManager(data_loader=dl, max_physical_batch_size=6, optimizer=opt) as chunks:
        for xb, yb in chunks:
            opt.zero_grad()
            _batch(m, xb, yb)
            opt.step()
            seen.append(all(s is not None for s in _summed(net)))
            if opt.round == 1:
                break
    assert seen == [True, True, False]          # 16 records in chunks of 6: two kept sums, then the release


def test_keep_summed_grad_keeps_it_after_the_release_until_zero_grad():
    engine, net, m, opt, dl = _make(keep_summed_grad=True)
    xb, yb = next(iter(dl))
    opt.zero_grad()
    _batch(m, xb, yb)
    opt.step()
    assert all(s is not None and s.shape == p.shape for s, p in zip(_summed(net), net.parameters()))
    opt.zero_grad()
    assert all(s is None for s in _summed(net))


def test_a_release_without_noise_keeps_summed_grad_which_it_released_exactly():
    """Noise 0 (Opacus's clipping checks): eps is infinite and the release is the sum itself, so nothing is
    kept that the release did not publish."""
    engine, net, m, opt, dl = _make(noise_multiplier=0.0, dtype=torch.float64)
    xb, yb = next(iter(dl))
    opt.zero_grad()
    _batch(m, xb, yb)
    opt.step()
    for p in net.parameters():
        assert torch.allclose(p.summed_grad, p.grad * opt.kernel.normaliser, rtol=1e-12, atol=1e-15)
    assert engine.get_epsilon(DELTA) == float("inf")


# -- c. a step without zero_grad gets the zero_grad message -------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("optimizer", [None, lambda p: torch.optim.Adam(p, lr=0.01)])
def test_a_step_without_zero_grad_always_gets_the_zero_grad_message(dtype, optimizer):
    engine, net, m, opt, dl = _make(dtype=dtype, optimizer=optimizer)
    x, y = _data(dtype)
    for t in range(8):
        xb, yb = x[2 * t * 4:(2 * t + 1) * 4], y[2 * t * 4:(2 * t + 1) * 4]
        opt.zero_grad()
        _batch(m, xb, yb)
        opt.step()
        _batch(m, x[(2 * t + 1) * 4:(2 * t + 2) * 4], y[(2 * t + 1) * 4:(2 * t + 2) * 4])
        steps = engine.ledger.steps
        with pytest.raises(InputError, match=r"zero_grad\(\) was not called since the last step") as err:
            opt.step()
        _one_line(err)
        assert engine.ledger.steps == steps                  # refused before it was charged
        opt.zero_grad()


@pytest.mark.parametrize("set_to_none", [True, False])
def test_a_real_foreign_gradient_still_gets_its_own_message(set_to_none):
    engine, net, m, opt, dl = _make()
    it = iter(dl)
    xb, yb = next(it)
    opt.zero_grad()
    _batch(m, xb, yb)
    opt.step()
    xb, yb = next(it)
    opt.zero_grad(set_to_none=set_to_none)
    _batch(m, xb, yb, extra=lambda: 0.1 * sum(p.square().sum() for p in net.parameters()))
    with pytest.raises(InputError, match="a gradient reached the parameters outside the private forward") as err:
        opt.step()
    _one_line(err)


def test_zero_grad_in_place_then_a_step_is_not_refused():
    engine, net, m, opt, dl = _make()
    for xb, yb in dl:
        opt.zero_grad(set_to_none=False)
        _batch(m, xb, yb)
        opt.step()
    assert engine.ledger.steps == N // B


# -- d. numeric options are numbers -----------------------------------------------------------------------
_SRM = dict(algorithm="dp-srm", noise={"sigma0": 0.1, "sigma": 0.1}, criterion=nn.MSELoss(), noise_multiplier=None)
_DICE = dict(algorithm="dicesgd", noise={"sigma1": 0.1}, noise_multiplier=None)
_EPS = dict(method="make_private_with_epsilon", target_epsilon=2.0, target_delta=DELTA, epochs=1)


@pytest.mark.parametrize("name, value, kw, allowed", [
    ("noise_multiplier", "1.0", {}, ">= 0"),
    ("noise_multiplier", True, {}, ">= 0"),
    ("noise['noise_multiplier']", "1.0", {"noise": {"noise_multiplier": "1.0"}, "noise_multiplier": None}, ">= 0"),
    ("max_grad_norm", "1.0", {}, "> 0"),
    ("max_grad_norm", True, {}, "> 0"),
    ("max_grad_norm", None, {}, "> 0"),
    ("max_grad_norm", ["1.0", 1.0, 1.0, 1.0], {"clipping": "per_layer"}, "> 0"),
    ("max_grad_norm", [True, 1.0, 1.0, 1.0], {"clipping": "per_layer"}, "> 0"),
    ("C2", "0.1", _DICE, "> 0"),
    ("b0", "20", _SRM, ">= 1"),
    ("momentum", "0.2", _SRM, "(0, 1]"),
    ("keep_summed_grad", "yes", {}, "True or False"),
    ("target_epsilon", "2.0", _EPS, "> 0"),
    ("target_epsilon", True, _EPS, "> 0"),
    ("target_epsilon", None, _EPS, "> 0"),
    ("target_epsilon", -1.0, _EPS, "(0, inf)"),
    ("target_delta", 1.0, _EPS, "(0, 1)"),
    ("target_delta", "1e-5", _EPS, "(0, 1)"),
    ("epochs", "1", _EPS, ">= 1"),
    ("max_grad_norm", "1.0", _EPS, "> 0"),
])
def test_a_numeric_option_that_is_not_a_number_is_refused_in_one_line(name, value, kw, allowed):
    kw = dict(kw)
    if not name.startswith("noise["):
        kw[name] = value
    with pytest.raises(InputError) as err:
        _make(**kw)
    msg = str(err.value)
    _one_line(err)
    assert msg.startswith(f"{name}={value!r} is not allowed: expected") and allowed in msg, msg


# -- e. get_epsilon under the engine's accountant never exceeds the calibrated target ------------------------
def _run(engine, m, opt, dl, epochs):
    after = []
    for _ in range(epochs):
        for xb, yb in dl:
            opt.zero_grad()
            _batch(m, xb, yb)
            opt.step()
        after.append(engine.get_epsilon(DELTA))
    return after


@pytest.mark.parametrize("sampling", ["poisson", "shuffle", "balls-in-bins"])
@pytest.mark.parametrize("kind", ["best", "auto", "gdp", "rdp", "pld"])
def test_get_epsilon_under_each_accountant_meets_the_calibrated_target(kind, sampling):
    target = 2.0
    engine = O.PrivacyEngine(accountant=kind)
    kw = dict(method="make_private_with_epsilon", target_epsilon=target, target_delta=DELTA, epochs=2,
              sampling=sampling, engine=engine, dtype=torch.float64)
    if kind == "gdp" and sampling != "shuffle":       # exact GDP accounts full-batch Gaussians only: refused up front
        with pytest.raises(InputError, match="accountant='gdp' is not allowed") as err:
            _make(**kw)
        _one_line(err)
        assert engine.ledger.steps == 0
        return
    engine, net, m, opt, dl = _make(**kw)
    eps = _run(engine, m, opt, dl, 2)
    assert engine.ledger.steps == 2 * (N // B)
    assert eps[0] < eps[1] <= target                  # the whole run, and its first half
    assert eps[1] > 0.999 * target                    # the accountant's own calibration: no noise to spare


@pytest.mark.parametrize("kind", ["rdp", "auto"])
def test_a_calibration_by_steps_and_of_dicesgd_meet_the_engines_accountant(kind):
    engine, net, m, opt, dl = _make(method="make_private_with_epsilon", engine=O.PrivacyEngine(accountant=kind),
                                    target_epsilon=4.0, target_delta=DELTA, epochs=None, steps=6,
                                    dtype=torch.float64)
    while engine.ledger.steps < 6:                   # 6 steps: a pass of 4 and half of the next
        for xb, yb in dl:
            if engine.ledger.steps == 6:
                break
            opt.zero_grad()
            _batch(m, xb, yb)
            opt.step()
    assert 0.999 * 4.0 < engine.get_epsilon(DELTA) <= 4.0
    engine, net, m, opt, dl = _make(method="make_private_with_epsilon", engine=O.PrivacyEngine(accountant=kind),
                                    algorithm="dicesgd", C2=0.1, target_epsilon=4.0, target_delta=DELTA, epochs=1,
                                    dtype=torch.float64)
    _run(engine, m, opt, dl, 1)
    assert engine.get_epsilon(DELTA) <= 4.0
