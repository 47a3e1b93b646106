"""Several forwards before one backward (issue: loops as users write them).

A GAN's discriminator on the real batch and on as many generated records, and a siamese pair's two views, are one
batch whose record i is position i of every forward: each record's gradients across the forwards are summed, then
clipped.  Checked against a naive per-record loop (float64), and by leave-one-out on real records: removing a
record (with its position's public partner) moves the clipped sum by at most C.  Forwards that are two private
batches stay refused; ``zero_grad()`` between a forward and its backward is allowed; ``torch.compile`` before and
after ``make_private`` gives the eager clipped sum.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import dpcalib.optim as O
from dpcalib.accountant.validation import InputError
from dpcalib.optim.engine.capture import one_batch

C = 0.05
N = 12
BACKEND = "eager"     # the training forward runs eagerly whatever the backend (inductor checked by hand: the same)


def _private(module, data, batch_size=N, **kw):
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*data), batch_size=batch_size)
    args = dict(module=module, optimizer=torch.optim.SGD(module.parameters(), lr=0.1), data_loader=loader,
                noise_multiplier=1.0, max_grad_norm=C, poisson_sampling=False)
    args.update(kw)
    return O.PrivacyEngine().make_private(**args)


def _clip_sum(vectors):
    return sum(v * min(1.0, C / float(v.norm())) for v in vectors)


def _flat(grads):
    return torch.cat([g.reshape(-1) for g in grads])


def _discriminator():
    torch.manual_seed(1)
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(3 * 4 * 4, 1),
                         nn.Sigmoid()).double()


def _gan_sum(m, real, fake):
    """The engine's clipped sum of one discriminator step: real then generated batch, one backward."""
    bce = nn.BCELoss()
    err_real = bce(m(real).view(-1), torch.ones(len(real), dtype=torch.float64))
    err_fake = bce(m(fake).view(-1), torch.zeros(len(fake), dtype=torch.float64))
    (err_real + err_fake).backward()
    out = one_batch(m.captures).clipped_sum(C)
    m.clear()
    return out


def test_gan_discriminator_sums_each_position_then_clips():
    torch.manual_seed(0)
    real = torch.randn(N, 1, 6, 6, dtype=torch.float64)
    generator = nn.Sequential(nn.Linear(4, 36), nn.Tanh()).double()
    fake = generator(torch.randn(N, 4, dtype=torch.float64)).view(N, 1, 6, 6).detach()
    d = _discriminator()
    m, opt, _ = _private(d, (real,))
    assert m.fast
    got = _gan_sum(m, real, fake)
    params = list(d.parameters())
    naive = []
    for i in range(N):
        loss = nn.functional.binary_cross_entropy(d(real[i:i + 1]).view(-1), torch.ones(1, dtype=torch.float64)) + \
            nn.functional.binary_cross_entropy(d(fake[i:i + 1]).view(-1), torch.zeros(1, dtype=torch.float64))
        naive.append(_flat(torch.autograd.grad(loss, params)))
    torch.testing.assert_close(got, _clip_sum(naive), rtol=1e-12, atol=1e-15)
    # each record's two positions clipped together: not the sum of the forwards clipped apart
    apart = _clip_sum(naive[:0] + [_flat(torch.autograd.grad(nn.functional.binary_cross_entropy(
        d(real[i:i + 1]).view(-1), torch.ones(1, dtype=torch.float64)), params)) for i in range(N)])
    assert float((got - apart).norm()) > 1e-6
    for j in range(N):                       # leave one real record out (its generated partner with it)
        keep = [i for i in range(N) if i != j]
        moved = float((got - _gan_sum(m, real[keep], fake[keep])).norm())
        assert moved <= C * (1 + 1e-12), (j, moved / C)
    opt.zero_grad()
    _gan_sum(m, real, fake)                 # and the step takes it
    bce = nn.BCELoss()
    (bce(m(real).view(-1), torch.ones(N, dtype=torch.float64))
     + bce(m(fake).view(-1), torch.zeros(N, dtype=torch.float64))).backward()
    opt.step()


class _Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 4))

    def forward(self, x):
        return self.embed(x)


def _siamese_loss(e1, e2, same):
    d = (e1 - e2).pow(2).sum(1)
    return (same * d + (1 - same) * torch.relu(1.0 - d)).sum()


def test_siamese_pair_from_one_loader_batch_is_one_record_per_position():
    torch.manual_seed(2)
    x1, x2 = torch.randn(N, 5, dtype=torch.float64), torch.randn(N, 5, dtype=torch.float64)
    same = (torch.rand(N) < 0.5).double()
    net = _Tower().double()
    m, opt, loader = _private(net, (x1, x2, same), loss_reduction="sum")
    a, b, s = next(iter(loader))
    _siamese_loss(m(a), m(b), s).backward()
    got = one_batch(m.captures).clipped_sum(C)
    m.clear()
    params = list(net.parameters())
    naive = [_flat(torch.autograd.grad(_siamese_loss(net(x1[i:i + 1]), net(x2[i:i + 1]), same[i:i + 1]), params))
             for i in range(N)]
    torch.testing.assert_close(got, _clip_sum(naive), rtol=1e-12, atol=1e-15)
    for j in range(N):
        keep = [i for i in range(N) if i != j]
        _siamese_loss(m(x1[keep]), m(x2[keep]), same[keep]).backward()
        moved = float((got - one_batch(m.captures).clipped_sum(C)).norm())
        m.clear()
        assert moved <= C * (1 + 1e-12)
    pairs = torch.stack([x1, x2], 1)         # two views stored side by side: views of the same records
    _siamese_loss(m(pairs[:, 0]), m(pairs[:, 1]), same).backward()
    torch.testing.assert_close(one_batch(m.captures).clipped_sum(C), got, rtol=1e-12, atol=1e-15)
    m.clear()


def test_forwards_that_are_not_the_same_records_are_refused():
    torch.manual_seed(3)
    x, y = torch.randn(4 * N, 5), torch.randn(4 * N, 4)
    net = _Tower()
    m, opt, loader = _private(net, (x, y), batch_size=N)
    mse = nn.MSELoss()
    it = iter(loader)
    (x1, y1), (x2, y2) = next(it), next(it)          # two batches of the loader, then one backward
    (mse(m(x1), y1) + mse(m(x2), y2)).backward()
    with pytest.raises(InputError, match="two batches of the private loader"):
        opt.step()
    opt.zero_grad()
    (mse(m(x1[:6]), y1[:6]) + mse(m(x1[6:]), y1[6:])).backward()      # two halves of one batch
    with pytest.raises(InputError, match="two slices of one batch tensor"):
        opt.step()
    opt.zero_grad()
    (mse(m(x1), y1) + mse(m(x1[:5]), y1[:5])).backward()              # different sizes
    with pytest.raises(InputError, match=f"hold {N}, 5 records"):
        opt.step()
    opt.zero_grad()
    with O.BatchMemoryManager(data_loader=loader, max_physical_batch_size=N // 2, optimizer=opt) as chunks:
        it = iter(chunks)
        (c1, d1), (c2, d2) = next(it), next(it)      # two chunks of one logical batch in one step
        (mse(m(c1), d1) + mse(m(c2), d2)).backward()
        with pytest.raises(InputError, match="two batches of the private loader|two slices of one batch"):
            opt.step()
    opt.zero_grad()
    (mse(m(x1), y1)).backward()                      # a forward after a backward, before the step: refused
    with pytest.raises(InputError, match="count twice"):
        m(x1)


def test_zero_grad_between_forward_and_backward():
    torch.manual_seed(4)
    x, y = torch.randn(N, 5, dtype=torch.float64), torch.randn(N, 4, dtype=torch.float64)
    net = _Tower().double()
    m, opt, loader = _private(net, (x, y))
    nn.MSELoss()(m(x), y).backward()
    plain = one_batch(m.captures).clipped_sum(C)
    opt.zero_grad()
    out = m(x)
    opt.zero_grad()                                  # legal in PyTorch and Opacus: the backward still reaches it
    m.zero_grad()
    nn.MSELoss()(out, y).backward()
    torch.testing.assert_close(one_batch(m.captures).clipped_sum(C), plain, rtol=0, atol=0)
    before = [p.detach().clone() for p in net.parameters()]
    opt.step()
    assert any(not torch.equal(p, q) for p, q in zip(net.parameters(), before))


@pytest.mark.parametrize("when", ["before", "after"])
def test_torch_compile_gives_the_eager_clipped_sum(when):
    torch.manual_seed(5)
    x, y = torch.randn(N, 5), torch.randn(N, 4)
    eager_net, net = _Tower(), _Tower()
    net.load_state_dict(eager_net.state_dict())
    m0, _, _ = _private(eager_net, (x, y))
    nn.MSELoss()(m0(x), y).backward()
    want = one_batch(m0.captures).clipped_sum(C)
    if when == "before":
        m, opt, loader = _private(torch.compile(net, backend=BACKEND), (x, y))
        run = m
    else:
        m, opt, loader = _private(net, (x, y))
        run = torch.compile(m, backend=BACKEND)
    for _ in range(2):                               # the second call runs what the first compiled
        opt.zero_grad()
        nn.MSELoss()(run(x), y).backward()
        torch.testing.assert_close(one_batch(m.captures).clipped_sum(C), want, rtol=1e-6, atol=1e-9)
        m.clear()
    nn.MSELoss()(run(x), y).backward()
    opt.step()
    run.eval()
    with torch.no_grad():
        torch.testing.assert_close(run(x), net(x))


def test_a_layer_held_twice_is_one_vector_per_record():
    """``nn.Sequential(l, tanh, l)``: one Linear called twice; its calls' gradients are summed, then the record
    is measured (the ghost path, which measures each layer apart, no longer takes it), in the engine and in the
    reference optimizers' path."""
    torch.manual_seed(6)
    lin = nn.Linear(4, 4)
    net = nn.Sequential(lin, nn.Tanh(), lin).double()
    x, y = torch.randn(N, 4, dtype=torch.float64), torch.randn(N, 4, dtype=torch.float64)
    assert not O.supports_ghost(net)
    params = list(net.parameters())
    naive = [_flat(torch.autograd.grad((net(x[i:i + 1]) - y[i:i + 1]).pow(2).sum(), params)) for i in range(N)]
    want = _clip_sum(naive)
    m, _, _ = _private(net, (x, y), loss_reduction="sum")
    (m(x) - y).pow(2).sum().backward()
    torch.testing.assert_close(one_batch(m.captures).clipped_sum(C), want, rtol=1e-12, atol=1e-15)
    m.clear()
    got, _ = O.clipped_grad_sum(net, lambda o, t: (o - t).pow(2).sum(1), x, y, C)
    flat = got if isinstance(got, torch.Tensor) else torch.cat([got[k].reshape(-1) for k, _ in net.named_parameters()])
    torch.testing.assert_close(flat, want, rtol=1e-12, atol=1e-15)
