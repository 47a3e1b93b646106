"""Per-record soundness of the rules for recurrent layers users keep: Opacus's own ``DPLSTM`` / ``DPGRU`` / ``DPRNN``
(their ``RNNLinear`` cells called once per time step, measured as one call by :mod:`dpcalib.optim.clipping.units`)
and torch's ``nn.RNNCell`` / ``nn.LSTMCell`` / ``nn.GRUCell`` in a loop (:mod:`dpcalib.optim.clipping.cells`),
through the engine's module in float64: the clipped sum equals the one from a loop of single-record backward
passes, removing a record moves it by at most C, and no vmap fallback is taken (no ClippingFallbackWarning)."""

import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as Fn

from dpcalib.optim.clipping import ClippingFallbackWarning
from dpcalib.optim.engine import PrivateModule


class OpacusRNN(nn.Module):
    """Opacus's recurrent layer over ``[B, T, 5]`` (or ``[T, B, 5]``), an initial state from the first step, a head
    on the mean over time."""

    def __init__(self, kind, layers=1, bidirectional=False, batch_first=True, hx=False):
        super().__init__()
        import opacus.layers as OL
        cls = {"LSTM": OL.DPLSTM, "GRU": OL.DPGRU, "RNN": OL.DPRNN}[kind]
        self.rnn = cls(5, 6, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
        self.kind, self.d = kind, (2 if bidirectional else 1)
        self.init = nn.Linear(5, 6 * layers * self.d) if hx else None
        self.head = nn.Linear(6 * self.d, 3)

    def forward(self, x):
        hx = None
        if self.init is not None:
            first = x[:, 0] if self.rnn.batch_first else x[0]
            h = torch.tanh(self.init(first)).reshape(first.shape[0], -1, 6).transpose(0, 1).contiguous()
            hx = (h, torch.zeros_like(h)) if self.kind == "LSTM" else h
        out, _ = self.rnn(x, hx)
        return self.head(out.mean(1 if self.rnn.batch_first else 0))


class CellLoop(nn.Module):
    """A torch cell stepped over ``[B, T, 5]`` in a Python loop, a head on the last state."""

    def __init__(self, kind, bias=True, nonlinearity="tanh"):
        super().__init__()
        extra = {"nonlinearity": nonlinearity} if kind == "RNN" else {}
        self.cell = {"LSTM": nn.LSTMCell, "GRU": nn.GRUCell, "RNN": nn.RNNCell}[kind](5, 6, bias=bias, **extra)
        self.kind, self.head = kind, nn.Linear(6, 3)

    def forward(self, x):
        h = c = None
        for t in range(x.shape[1]):
            if self.kind == "LSTM":
                h, c = self.cell(x[:, t], None if h is None else (h, c))
            else:
                h = self.cell(x[:, t], h)
        return self.head(h)


def _opacus(*args, **kw):
    pytest.importorskip("opacus")
    return OpacusRNN(*args, **kw)


MODELS = {
    "opacus LSTM": lambda: _opacus("LSTM"),
    "opacus GRU sequence-first": lambda: _opacus("GRU", batch_first=False),
    "opacus RNN 2 layers bidirectional": lambda: _opacus("RNN", layers=2, bidirectional=True),
    "opacus LSTM 2 layers bidirectional state_init": lambda: _opacus("LSTM", layers=2, bidirectional=True, hx=True),
    "opacus GRU state_init": lambda: _opacus("GRU", hx=True),
    "LSTMCell": lambda: CellLoop("LSTM"),
    "GRUCell": lambda: CellLoop("GRU"),
    "RNNCell relu no bias": lambda: CellLoop("RNN", bias=False, nonlinearity="relu"),
}


def _data(model, n, T, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, T, 5, generator=g, dtype=torch.float64)
    if isinstance(model, OpacusRNN) and not model.rnn.batch_first:
        x = x.transpose(0, 1).contiguous()
    return x, torch.randint(0, 3, (n,), generator=g)


def _engine(model):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClippingFallbackWarning)
        return PrivateModule(model, loss_reduction="sum", batch_first=not (isinstance(model, OpacusRNN)
                                                                          and not model.rnn.batch_first))


def _clipped(pm, x, y, C):
    pm.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClippingFallbackWarning)
        Fn.cross_entropy(pm(x), y, reduction="sum").backward()
    s = pm.captures[-1].clipped_sum(C)
    pm.clear()
    return s


def _naive(model, named, x, y, C, dim):
    """``sum_i clip(g_i, C)`` from one backward pass per record."""
    total = 0.0
    for i in range(y.shape[0]):
        xi = x.narrow(dim, i, 1)
        loss = Fn.cross_entropy(model(xi), y[i:i + 1], reduction="sum")
        g = torch.cat([t.reshape(-1) for t in torch.autograd.grad(loss, [p for _, p in named])])
        total = total + g * min(1.0, C / float(g.norm()))
    return total


@pytest.mark.parametrize("name", list(MODELS))
def test_clipped_sums_match_single_record_backward_passes(name):
    torch.manual_seed(0)
    model = MODELS[name]().double()
    pm = _engine(model)
    dim = pm._dim
    for T in (4, 7, 4):                        # sequences of another length: the RNNLinear / cell runs more steps
        x, y = _data(model, 6, T, seed=T)
        norms = [float(_naive(model, pm.named, x.narrow(dim, i, 1), y[i:i + 1], float("inf"), dim).norm())
                 for i in range(6)]
        C = sorted(norms)[3]                   # some records clipped, some not
        got = _clipped(pm, x, y, C)
        want = _naive(model, pm.named, x, y, C, dim)
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-12 * float(want.norm())), (name, T)


@pytest.mark.parametrize("name", list(MODELS))
def test_one_record_removed_moves_the_clipped_sum_by_at_most_C(name):
    torch.manual_seed(0)
    model = MODELS[name]().double()
    pm = _engine(model)
    x, y = _data(model, 8, 5)
    dim = pm._dim
    worst = 0.0
    for C in (1e-3, 0.3):
        full = _clipped(pm, x, y, C)
        for i in (0, 5, 7):
            keep = torch.tensor([j for j in range(8) if j != i])
            move = float((full - _clipped(pm, x.index_select(dim, keep), y[keep], C)).norm())
            assert move <= C * (1 + 1e-9), (name, C, i, move / C)
            worst = max(worst, move / C)
    assert worst > 0.5


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_opacus_layers_and_cells_take_no_vmap_fallback_in_training(kind):
    """make_private and a few steps with Opacus's layer (or a torch cell) raise no ClippingFallbackWarning."""
    import dpcalib.optim as O

    models = [CellLoop(kind)]
    try:
        models.append(OpacusRNN(kind))
    except ImportError:
        pass
    for model in models:
        data = torch.utils.data.TensorDataset(torch.randn(32, 5, 5), torch.randint(0, 3, (32,)))
        with warnings.catch_warnings():
            warnings.simplefilter("error", ClippingFallbackWarning)
            m, opt, dl = O.PrivacyEngine().make_private(
                module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                data_loader=torch.utils.data.DataLoader(data, batch_size=8), noise_multiplier=1.0, max_grad_norm=1.0)
            for x, y in dl:
                opt.zero_grad()
                Fn.cross_entropy(m(x), y).backward()
                opt.step()
        assert m.fast


def test_a_packed_sequence_into_opacus_layers_is_refused_in_one_line():
    """Opacus's layers step a PackedSequence with the sequences sorted by length, so a step's rows are not the
    batch's records: the record probe refuses it (dpcalib's DPLSTM, an nn.LSTM, takes packed batches)."""
    from dpcalib.accountant.validation import InputError

    pytest.importorskip("opacus")
    torch.manual_seed(0)
    model = OpacusRNN("LSTM")
    x = torch.randn(5, 4, 5)
    packed = nn.utils.rnn.pack_padded_sequence(x, torch.tensor([4, 2, 3, 1, 4]), batch_first=True,
                                               enforce_sorted=False)

    class Last(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, p):
            _, (h, _) = self.inner.rnn(p)
            return self.inner.head(h[-1])
    pm = _engine(Last(model))
    with pytest.raises(InputError, match="RNNLinear"):
        pm(packed)


@pytest.mark.parametrize("name", ["opacus LSTM 2 layers bidirectional state_init", "LSTMCell"])
def test_per_layer_clipping_of_recurrent_layers_matches_single_record_backward_passes(name):
    """clipping='per_layer' by the rules: each parameter's part of a record's gradient clipped to its own bound."""
    torch.manual_seed(0)
    model = MODELS[name]().double()
    n = sum(1 for p in model.parameters() if p.requires_grad)
    bounds = [0.05 * (1 + k % 3) for k in range(n)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClippingFallbackWarning)
        pm = PrivateModule(model, loss_reduction="sum", bounds=bounds)
    x, y = _data(model, 6, 5)
    got = _clipped(pm, x, y, float(pm.bounds))
    want = 0.0
    for i in range(6):
        loss = Fn.cross_entropy(model(x[i:i + 1]), y[i:i + 1], reduction="sum")
        gs = torch.autograd.grad(loss, [p for _, p in pm.named])
        want = want + torch.cat([(g * min(1.0, b / float(g.norm()))).reshape(-1) for g, b in zip(gs, bounds)])
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12 * float(want.norm()))
