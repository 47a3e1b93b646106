"""Small runs of the engine (dpcalib.optim.PrivacyEngine) and of the reference optimizer they must
equal, shared by tests/test_engine.py and the distributed workers (module-level: 'spawn' imports it)."""

import copy

import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O

N, B, EPOCHS, SEED = 60, 10, 2, 3
LEVELS = {"dp-sgd": {"noise_multiplier": 1.1}, "dicesgd": {"sigma1": 0.05}, "dp-srm": {"sigma0": 0.01, "sigma": 0.02}}
LR = {"dp-sgd": 0.1, "dicesgd": 0.05, "dp-srm": 0.1}


def model(dtype=torch.float64):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(dtype)


def data(dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, 4, generator=g, dtype=torch.float64)
    return x.to(dtype), torch.sin(x.sum(1)).to(dtype)


def options(algorithm):
    """make_private's keywords of each algorithm's run (the reference's shape)."""
    steps = EPOCHS * (N // B)
    if algorithm == "dp-sgd":
        return dict(noise_multiplier=1.1, max_grad_norm=1.0, epochs=EPOCHS)
    if algorithm == "dicesgd":
        return dict(algorithm="dicesgd", noise=LEVELS["dicesgd"], max_grad_norm=1.0, C2=0.1, epochs=EPOCHS)
    return dict(algorithm="dp-srm", noise=LEVELS["dp-srm"], max_grad_norm=1.0, C2=0.5, b0=20, momentum=0.2,
                steps=steps + 1, criterion=nn.MSELoss())


def reference(algorithm, net, x, y, **kw):
    """The reference optimizer of the same run (seed, shape, levels)."""
    steps = EPOCHS * (N // B)
    if algorithm == "dp-sgd":
        mech = M.DPSGD(1.0 / (N // B), steps)
        return O.DPSGD(net, O.squared_loss, (x, y), mech, LEVELS[algorithm], C=1.0, lr=LR[algorithm], seed=SEED, **kw)
    if algorithm == "dicesgd":
        mech = M.DiceSGD(N, B, steps, C1=1.0, C2=0.1)
        return O.DiceSGD(net, O.squared_loss, (x, y), mech, LEVELS[algorithm], lr=LR[algorithm], seed=SEED, **kw)
    mech = M.DPSRM(N, steps + 1, 20, B, 1.0, 0.5, 0.2)
    return O.DPSRM(net, O.squared_loss, (x, y), mech, LEVELS[algorithm], lr=LR[algorithm], seed=SEED, **kw)


def private(algorithm, net, x, y, optimizer=None, engine=None, **kw):
    """``(engine, module, optimizer, criterion, loader)`` of the same run through the engine."""
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y[:, None]), batch_size=B)
    opt = optimizer(net.parameters()) if optimizer else torch.optim.SGD(net.parameters(), lr=LR[algorithm])
    engine = engine or O.PrivacyEngine()
    o = {**options(algorithm), **kw}
    out = engine.make_private(module=net, optimizer=opt, data_loader=loader, **{"seed": SEED, **o})
    if len(out) == 4:
        m, opt, crit, loader = out
    else:
        (m, opt, loader), crit = out, nn.MSELoss()
    return engine, m, opt, crit, loader


def loop(m, opt, crit, loader, epochs=EPOCHS, after=None):
    """The user's loop; ``after(k)`` after each step."""
    k = 0
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            crit(m(xb), yb).backward()
            opt.step()
            k += 1
            if after:
                after(k)
    return k


def beside_reference(ref, net, ref_net, m, opt, crit, loader):
    """Run the user's loop with the reference optimizer stepping after each step: ``(steps, the
    worst relative difference of the two iterates over the run)``."""
    worst = []

    def compare(k):
        ref.step()
        worst.append(float((flat(net) - flat(ref_net)).abs().max() / flat(ref_net).abs().max()))

    k = loop(m, opt, crit, loader, after=compare)
    return k, max(worst)


def flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def copies(dtype=torch.float64):
    net = model(dtype)
    return net, copy.deepcopy(net)


def applied_to_reference(net, shadow, ref, torch_opt, worst, before=None, after=None):
    """``after(k)`` for :func:`loop`: the reference's own release at the shadow's point (its DP-SGD
    release / B), handed to ``torch_opt`` as the shadow's ``.grad`` -- the run the engine must equal
    with that torch optimizer; the worst relative difference so far is appended to ``worst``.
    ``before()`` / ``after()``: called first / after the shadow's step (the two schedules' steps)."""
    def follow(k):
        if before is not None:
            before()
        point = {n: p.detach().clone() for n, p in shadow.named_parameters()}
        ref.step()
        released = ref.privatizer.releases[-1].released / ref.B
        with torch.no_grad():
            i = 0
            for n, p in shadow.named_parameters():
                p.copy_(point[n])
                p.grad = released[i:i + p.numel()].view_as(p).clone()
                i += p.numel()
        torch_opt.step()
        if after is not None:
            after()
        worst.append(float((flat(net) - flat(shadow)).abs().max() / flat(shadow).abs().max()))
    return follow
