"""Record-level soundness of every rule the models users bring added (3-d and transposed convolutions, padding
modes, instance norm, RMSNorm, RNN / LSTM / GRU, Hugging Face's Conv1D, weights shared between modules and calls,
the per-module vmap rule of a custom module, layers half frozen, a position table broadcast over the records),
through the engine's module, in float32, float64 and bfloat16 autocast: one record removed or replaced (by
another, an adversarial or an all-zero record) moves the clipped sums -- at one point and for the difference
between two points (DP-SRM) -- by at most C (2C), and the record probe's twin runs through the whole step
(loader, module, optimizer, kernel; record 3 replaced, lockstep) move every release by at most 2C.

Under autocast the leave-one-out sums take a summed loss (``loss_reduction="sum"``): a mean's 1/B is rounded in
the low-precision backward, which makes every record's vector depend on the batch's size
(tests/test_models_matrix.py; docs/optimizers.md).  Replace-one keeps the size, so the probe keeps the mean."""

import copy
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as Fn

from benchmarks import user_models as U
from dpcalib.optim.clipping import SequenceBias
from dpcalib.optim.engine import PrivateModule
from tests.test_clipping_layers import _replacements


class Transposed(nn.Module):
    """A batch-first input through a sequence-first recurrent layer (its own batch_first=False)."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn, self.head = rnn, nn.Linear(rnn.hidden_size * (2 if rnn.bidirectional else 1), 3)

    def forward(self, x):
        out, _ = self.rnn(x.transpose(0, 1))
        return self.head(out.mean(0))


class Positions(nn.Module):
    """Token and position embeddings, the positions looked up once as ``[1, T]`` (broadcast over the records)."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos, self.head = nn.Embedding(20, 6), nn.Embedding(10, 6), nn.Linear(6, 3)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)[None, :]
        return self.head(torch.tanh(self.tok(ids) + self.pos(pos)).mean(1))


class HFConv1D(nn.Module):
    def __init__(self):
        super().__init__()
        from transformers.pytorch_utils import Conv1D
        self.a, self.b = Conv1D(8, 6), Conv1D(3, 8)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x))).mean(1)


def _tree(*layers, width, pool):
    return U.Tree(nn.Sequential(*layers), width, pool)


def _frozen():
    m = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    m[0].weight.requires_grad_(False)
    return m


#: name -> (build, input shape of one record or "ids", needs transformers)
KINDS = {
    "conv3d": (lambda: _tree(nn.Conv3d(2, 4, 3, stride=2, padding=1), nn.ReLU(), nn.Conv3d(4, 4, (1, 2, 2), groups=2),
                             width=4, pool=(2, 3, 4)), (2, 5, 6, 5), False),
    "transposed conv": (lambda: _tree(nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
                                      nn.ConvTranspose2d(6, 4, 2, groups=2),
                                      width=4, pool=(2, 3)), (4, 5, 4), False),
    "padding modes": (lambda: _tree(nn.Conv2d(4, 6, 3, padding=1, padding_mode="circular"), nn.ReLU(),
                                    nn.Conv2d(6, 4, 2, padding="same", padding_mode="reflect"), width=4, pool=(2, 3)),
                      (4, 5, 6), False),
    "instance norm": (lambda: _tree(nn.Conv1d(4, 6, 3), nn.InstanceNorm1d(6, affine=True), nn.ReLU(), width=6,
                                    pool=(2,)), (4, 9), False),
    "RMSNorm": (lambda: _tree(nn.Linear(6, 8), nn.RMSNorm(8), nn.Tanh(), width=8, pool=(1,)), (5, 6), False),
    "LSTM 2 layers bidirectional": (lambda: U.Recurrent("LSTM", 2, True), (6, 5), False),
    "GRU sequence-first": (lambda: Transposed(nn.GRU(5, 6)), (6, 5), False),
    "RNN relu": (lambda: U.Recurrent("RNN", 1, False, nonlinearity="relu", hx=True), (6, 5), False),
    "HF Conv1D": (HFConv1D, (5, 6), True),
    "tied and called twice": (lambda: U.TiedLM(20), "ids", False),
    "custom elementwise (per-module vmap)": (lambda: _tree(nn.Linear(6, 8), U.Scale(8), nn.Tanh(), width=8,
                                                           pool=(1,)), (5, 6), False),
    "half frozen": (_frozen, (6,), False),
    "sequence bias (add_bias_kv's position)": (lambda: _tree(nn.Linear(6, 8), SequenceBias(8, batch_first=True), nn.Tanh(),
                                                             width=8, pool=(1,)), (5, 6), False),
    "positions broadcast": (Positions, "ids", False),
}
MODES = ("float32", "float64", "bf16 autocast")


def _lstm_runs_in_bf16() -> bool:
    """Whether torch's own nn.LSTM runs under CPU bfloat16 autocast here (oneDNN refuses it on some CPUs)."""
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            nn.LSTM(2, 2)(torch.randn(3, 1, 2))
        return True
    except RuntimeError:
        return False


def _build(name, mode):
    build, shape, hf = KINDS[name]
    if hf and not U.HF:
        pytest.skip("transformers not installed")
    if "LSTM" in name and mode == "bf16 autocast" and not _lstm_runs_in_bf16():
        pytest.skip("torch's nn.LSTM does not run under bfloat16 autocast on this CPU (oneDNN)")
    torch.manual_seed(0)
    model = build()
    return model.double() if mode == "float64" else model, shape


def _data(shape, n, mode, seed=2):
    g = torch.Generator().manual_seed(seed)
    if shape == "ids":
        x = torch.randint(1, 20, (n, 7), generator=g)
    else:
        x = torch.randn(n, *shape, generator=g, dtype=torch.float64 if mode == "float64" else torch.float32)
    return x, torch.randint(0, 3, (n,), generator=g)


def _ctx(mode):
    return torch.autocast("cpu", dtype=torch.bfloat16) if mode == "bf16 autocast" else torch.autocast("cpu",
                                                                                                     enabled=False)


def _sum(pm, x, y, C, mode, prev=None, reduction="mean"):
    def crit(out, t):
        return Fn.cross_entropy(out.float(), t, reduction=reduction)
    pm.clear()
    with _ctx(mode):
        loss = crit(pm(x), y)
    loss.backward()
    cap = pm.captures[-1]
    cap.target = y
    s = cap.clipped_sum(C) if prev is None else cap.clipped_diff_sum(C, prev, crit)
    pm.clear()
    return s.to(torch.float64)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(KINDS))
def test_one_record_moves_the_engines_clipped_sums_by_at_most_their_sensitivity(name, mode):
    model, shape = _build(name, mode)
    reduction = "sum" if mode == "bf16 autocast" else "mean"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the per-module vmap's ClippingFallbackWarning
        pm = PrivateModule(model, loss_reduction=reduction)
    x, y = _data(shape, 8, mode)
    params = {k: v.detach() for k, v in pm.named}
    eps = torch.finfo(torch.float64 if mode == "float64" else torch.float32).eps
    g = torch.Generator().manual_seed(3)
    worst = 0.0
    for step in (None, 1e-6):
        prev = None if step is None else {
            k: v + step * torch.randn(v.shape, generator=g, dtype=torch.float64).to(v.dtype) for k, v in params.items()}
        for C in (1e-4, 1.0):
            full = _sum(pm, x, y, C, mode, prev, reduction)
            for i in (0, 7):
                keep = torch.tensor([j for j in range(x.shape[0]) if j != i])
                nbrs = [(C, _sum(pm, x[keep], y[keep], C, mode, prev, reduction))]
                for xr in _replacements("ids" if shape == "ids" else "x", x, i, g).values():
                    x2, y2 = x.clone(), y.clone()
                    x2[i] = xr
                    y2[i] = (y[i] + 1) % 3
                    nbrs.append((2 * C, _sum(pm, x2, y2, C, mode, prev, reduction)))
                for claim, s2 in nbrs:
                    move = float((full - s2).norm())
                    assert move <= claim * (1 + 1e-5) + 64 * eps * float(full.norm() + s2.norm()), \
                        (name, mode, step, C, i, move / claim)
                    worst = max(worst, move / claim)
    assert worst > 0.5          # the claim is reached: the check is not vacuous


def _releases(model, x, y, C, mode, seed, steps, leader=None):
    import dpcalib.optim as O

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m, opt, loader = O.PrivacyEngine().make_private(
            module=model, optimizer=torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5),
            data_loader=loader, noise_multiplier=1.0, max_grad_norm=C, seed=seed)
    out, params = [], []
    opt.attach_step_hook(lambda o: out.append(torch.cat([p.grad.reshape(-1) for _, p in o.module.named]).double()
                                              * o.kernel.normaliser))
    for k, (xb, yb) in enumerate(loader):
        if k == steps:
            break
        if leader is not None:
            with torch.no_grad():
                for (_, p), v in zip(m.named, leader[k]):
                    p.copy_(v)
        params.append([p.detach().clone() for _, p in m.named])
        opt.zero_grad()
        with warnings.catch_warnings(), _ctx(mode):
            warnings.simplefilter("ignore")      # MixedPrecisionWarning: replace-one keeps the batch's size
            loss = Fn.cross_entropy(m(xb).float(), yb)
        loss.backward()
        opt.step()
    return out, params


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(KINDS))
def test_the_record_probe_through_the_engines_whole_step(name, mode):
    """The probe's replace-one comparison through the engine's loader, module, optimizer and kernel: a twin run
    on the data with record 3 replaced, in lockstep at the leader's parameters, with the same seeds."""
    model, shape = _build(name, mode)
    x, y = _data(shape, 12, mode)
    g = torch.Generator().manual_seed(4)
    C = 1e-3
    worst = 0.0
    for xr in list(_replacements("ids" if shape == "ids" else "x", x, 3, g).values())[1:]:
        x2, y2 = x.clone(), y.clone()
        x2[3] = xr
        y2[3] = (y[3] + 1) % 3
        lead, params = _releases(copy.deepcopy(model), x, y, C, mode, seed=5, steps=4)
        twin, _ = _releases(copy.deepcopy(model), x2, y2, C, mode, seed=5, steps=4, leader=params)
        eps = torch.finfo(torch.float64 if mode == "float64" else torch.float32).eps
        for r1, r2 in zip(lead, twin):
            move = float((r1 - r2).norm())
            assert move <= 2 * C * (1 + 1e-5) + 64 * eps * float(r1.norm() + r2.norm()), (name, mode, move / (2 * C))
            worst = max(worst, move / (2 * C))
    assert worst > 0.3          # record 3 is drawn and reaches the clip: the check is not vacuous
