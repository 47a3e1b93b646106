"""Opacus's module paths answered by dpcalib (issue 73): every dpcalib path of the migration table
(dpcalib.optim.opacus_paths.OPACUS_PATHS, docs/how-to/opacus.md) imports its names, and each runs private steps:
the DP layers compute torch's layers' function and their clipped sums equal a naive per-record loop, the
distributed wrapper starts the processes equal, BatchMemoryManager, DPDataLoader, ModuleValidator.fix and
make_functional do what Opacus's scripts expect of them."""

from __future__ import annotations

import copy
import importlib
import multiprocessing as mp
import os
import pathlib
import re
import socket
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpcalib.accountant.validation import InputError
from dpcalib.optim import BatchMemoryManager, ClippingFallbackWarning, DPDataLoader, ModuleValidator, PrivacyEngine
from dpcalib.optim.clipping import UnsupportedModuleError
from dpcalib.optim.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
from dpcalib.optim.functorch import make_functional
from dpcalib.optim.layers import DPGRU, DPLSTM, DPRNN, DPMultiheadAttention, SequenceBias
from dpcalib.optim.opacus_paths import OPACUS_PATHS, rewrite_imports

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = {"lstm": (DPLSTM, nn.LSTM), "gru": (DPGRU, nn.GRU), "rnn": (DPRNN, nn.RNN)}


# -- the table ---------------------------------------------------------------------------------------------------
def test_every_dpcalib_path_of_the_table_holds_its_names():
    for opacus_path, (path, names) in OPACUS_PATHS.items():
        module = importlib.import_module(path)
        for name in names:
            assert getattr(module, name).__name__ == name, (opacus_path, path, name)


def test_the_migration_page_shows_the_table():
    """docs/how-to/opacus.md's table is OPACUS_PATHS, row for row (the page and the rewriter cannot drift)."""
    text = (ROOT / "docs" / "how-to" / "opacus.md").read_text()
    section = text.split("## Opacus's module paths", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`opacus"):
            rows[cells[0].strip("`")] = (cells[1].strip("`"), tuple(re.findall(r"`(\w+)`", cells[2])))
    assert rows == OPACUS_PATHS


def test_the_examples_imports_are_rewritten_names_and_aliases_kept():
    src = ("import torch\nfrom opacus import PrivacyEngine\n"
           "from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP\n"
           "from opacus.grad_sample.functorch import make_functional\n"
           "from opacus.layers import (\n    DPGRU,\n    DPLSTM,  # the cell\n    DPRNN,\n)\nname = 'Ślusàrski'; import opacus\n")
    out = rewrite_imports(src)
    assert out == ("import torch\nfrom dpcalib.optim import PrivacyEngine\n"
                   "from dpcalib.optim.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP\n"
                   "from dpcalib.optim.functorch import make_functional\n"
                   "from dpcalib.optim.layers import DPGRU, DPLSTM, DPRNN\n"
                   "name = 'Ślusàrski'; import dpcalib.optim as opacus\n")
    ns = {}
    exec(out, ns)
    assert ns["DPDDP"] is DPDDP and ns["DPLSTM"] is DPLSTM and ns["opacus"].PrivacyEngine is PrivacyEngine


@pytest.mark.parametrize("src, what", [("from opacus import GradSampleModule", "opacus.GradSampleModule"),
                                       ("from opacus.optimizers import DPOptimizer", "opacus.optimizers"),
                                       ("import opacus.layers", "import opacus.layers"),
                                       ("from opacus.layers import *", "import \\*")])
def test_an_import_without_a_dpcalib_home_is_refused_in_one_line(src, what):
    with pytest.raises(InputError, match=what) as err:
        rewrite_imports(src)
    assert "\n" not in str(err.value)


# -- the DP layers: torch's layers under Opacus's names --------------------------------------------------------------
@pytest.mark.parametrize("kind", list(LAYERS))
def test_a_dp_layer_is_torchs_layer_with_opacuss_signature(kind):
    dp_cls, torch_cls = LAYERS[kind]
    torch.manual_seed(0)
    m = dp_cls(5, 7, 2, True, True, 0, True, 0)           # Opacus's positional order, through proj_size
    ref = torch_cls(5, 7, num_layers=2, batch_first=True, bidirectional=True)
    ref.load_state_dict(m.state_dict())                   # the same keys: a plain layer loads it for inference
    assert isinstance(m, torch_cls) and list(m.state_dict()) == list(ref.state_dict())
    x = torch.randn(3, 4, 5)
    h = torch.randn(4, 3, 7)
    h = (h, torch.randn(4, 3, 7)) if kind == "lstm" else h
    want = ref(x, h)
    for got in (m(x, h), m(x, state_init=h), m(x, hx=h)):
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    with pytest.raises(InputError, match="state_init and hx"):
        m(x, state_init=h, hx=h)


@pytest.mark.parametrize("kwargs, match", [({"proj_size": 2}, "proj_size=2"), ({"dropout": 1.5}, "dropout=1.5"),
                                           ({"nonlinearity": "gelu"}, "nonlinearity='gelu'")])
def test_a_dp_layers_bad_option_is_one_line(kwargs, match):
    with pytest.raises(InputError, match=match):
        DPRNN(3, 4, num_layers=2, **kwargs)
    assert DPRNN(3, 4, nonlinearity="relu").mode == "RNN_RELU"


class _Tagger(nn.Module):
    """Embedding -> a DP recurrent layer (batch_first, an initial state by Opacus's keyword) -> Linear."""

    def __init__(self, cls, state=False):
        super().__init__()
        self.emb, self.rnn, self.out, self.state = nn.Embedding(11, 4), cls(4, 6, batch_first=True), nn.Linear(6, 2), state

    def forward(self, x):
        h0 = torch.ones(1, x.shape[0], 6, dtype=self.out.weight.dtype) * 0.1 if self.state else None
        h0 = (h0, h0) if h0 is not None and isinstance(self.rnn, nn.LSTM) else h0
        y, _ = self.rnn(self.emb(x), state_init=h0)
        return self.out(y[:, -1])


def _naive(model, x, y, c, loss):
    """The clipped sum of a naive loop: each record's whole gradient clipped to norm c, summed."""
    total = 0
    for i in range(len(x)):
        model.zero_grad()
        loss(model(x[i:i + 1]), y[i:i + 1]).backward()
        g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        total = total + g * min(1.0, c / float(g.norm()))
    return total


def _one_step(model, x, y, loss, c=0.05, **kw):
    """One private step of ``model`` on the batch ``(x, y)`` (``loss`` a sum over the records): its clipped sum
    (``summed_grad``) beside the naive loop's."""
    naive = _naive(copy.deepcopy(model), x, y, c, loss)
    dl = DataLoader(TensorDataset(x, y), batch_size=len(x) // 2)
    m, opt, _ = PrivacyEngine().make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                             data_loader=dl, noise_multiplier=1.0, max_grad_norm=c, seed=1,
                                             loss_reduction="sum", keep_summed_grad=True, **kw)
    opt.zero_grad()
    loss(m(x), y).backward()
    opt.step()
    return torch.cat([p.summed_grad.reshape(-1) for p in m.parameters()]), naive


@pytest.mark.parametrize("kind, state, c", [("lstm", True, 0.82), ("gru", False, 1.05), ("rnn", True, 1.4)])
def test_a_dp_layers_clipped_sum_is_the_naive_loops(kind, state, c):
    """(``c`` clips some records of the batch and not others.)"""
    torch.manual_seed(0)
    model = _Tagger(LAYERS[kind][0], state).double()
    x, y = torch.randint(0, 11, (6, 5)), torch.randint(0, 2, (6,))
    got, naive = _one_step(model, x, y, lambda o, t: nn.functional.cross_entropy(o, t, reduction="sum"), c)
    torch.testing.assert_close(got, naive, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kv, zero", [(False, False), (True, True)])
def test_dp_attention_is_torchs_attention_both_ways_of_the_state_dict(batch_first, kv, zero):
    """nn.MultiheadAttention's function and state_dict keys (Opacus 1.6's batch_first=True output is not torch's:
    opacus#825)."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(8, 2, add_bias_kv=kv, add_zero_attn=zero, batch_first=batch_first, kdim=6, vdim=6)
    m = DPMultiheadAttention(8, 2, 0.0, True, kv, zero, 6, 6, batch_first)
    m.load_state_dict(ref.state_dict())
    assert sorted(m.state_dict()) == sorted(ref.state_dict())
    ref.load_state_dict(m.state_dict())
    q, k = torch.randn(3, 4, 8), torch.randn(3, 5, 6)
    q, k = (q, k) if batch_first else (q.transpose(0, 1), k.transpose(0, 1))
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[0, -2:] = True
    for a, b in zip(m(q, k, k, key_padding_mask=mask), ref(q, k, k, key_padding_mask=mask)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert m.qlinear is m.q_proj and isinstance(m.seq_bias_k if kv else SequenceBias(8), SequenceBias)


def test_dp_attention_runs_in_torchs_transformer_layer_in_evaluation_mode():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    x = torch.randn(3, 5, 8)
    want = layer(x)
    attn = DPMultiheadAttention(8, 2, batch_first=True)
    attn.load_state_dict(layer.self_attn.state_dict())
    layer.self_attn = attn
    torch.testing.assert_close(layer(x), want, rtol=1e-5, atol=1e-6)


class _Attender(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        self.bf = batch_first
        self.attn = DPMultiheadAttention(4, 2, add_bias_kv=True, add_zero_attn=True, batch_first=batch_first)
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        x = x if self.bf else x.transpose(0, 1)
        h, _ = self.attn(x, x, x)
        return self.out(h.mean(1 if self.bf else 0))


class _Biased(nn.Module):
    """Linear -> SequenceBias (either layout) -> tanh -> mean over positions -> Linear."""

    def __init__(self, batch_first):
        super().__init__()
        self.bf, self.lin, self.seq, self.out = batch_first, nn.Linear(4, 4), SequenceBias(4, batch_first), nn.Linear(4, 1)

    def forward(self, x):
        x = x if self.bf else x.transpose(0, 1)
        return self.out(torch.tanh(self.seq(self.lin(x))).mean(1 if self.bf else 0))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("net", [_Attender, _Biased])
def test_dp_attentions_clipped_sum_is_the_naive_loops_by_the_per_layer_rules(batch_first, net):
    """(SequenceBias, add_bias_kv's learned position, has its own rule: no module falls back to vmap.)"""
    torch.manual_seed(0)
    model = net(batch_first).double()
    x, y = torch.randn(6, 3, 4, dtype=torch.float64), torch.randn(6, 1, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClippingFallbackWarning)
        got, naive = _one_step(model, x, y, lambda o, t: nn.functional.mse_loss(o, t, reduction="sum"), c=1.0)
    torch.testing.assert_close(got, naive, rtol=1e-9, atol=1e-12)


# -- BatchMemoryManager, DPDataLoader, ModuleValidator, make_functional ------------------------------------------
def _names_data(n=32):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randint(0, 11, (n, 5), generator=g), torch.randint(0, 2, (n,), generator=g))


def test_dp_data_loader_draws_poisson_batches_of_its_rate():
    ds = _names_data(400)
    loader = DPDataLoader.from_data_loader(DataLoader(ds, batch_size=100), generator=torch.Generator().manual_seed(3))
    assert len(loader) == 4 and loader.sample_rate == 0.25
    sizes = [len(x) for x, _ in loader]
    assert len(sizes) == 4 and sizes != [100] * 4 and 60 < sum(sizes) / 4 < 140      # Binomial(400, 1/4) each
    again = DPDataLoader(ds, sample_rate=0.25, generator=torch.Generator().manual_seed(3))
    assert [len(x) for x, _ in again] == sizes                                      # the generator's draws


def test_batch_memory_manager_runs_a_dp_lstm_in_chunks_and_charges_the_logical_steps():
    torch.manual_seed(0)
    model = _Tagger(DPLSTM)
    engine = PrivacyEngine()
    m, opt, dl = engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                     data_loader=DataLoader(_names_data(), batch_size=8), noise_multiplier=1.0,
                                     max_grad_norm=1.0)
    before = [p.detach().clone() for p in model.parameters()]
    chunks_seen = 0
    with BatchMemoryManager(data_loader=dl, max_physical_batch_size=3, optimizer=opt) as chunks:
        for x, y in chunks:
            assert len(x) <= 3
            chunks_seen += 1
            opt.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
    assert len(engine.accountant) == 4 and chunks_seen > 4
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert engine.get_epsilon(1e-5) == pytest.approx(_cli_epsilon(0.25, 4, 1.0, 1e-5), rel=1e-12)


def _cli_epsilon(q, steps, z, delta):
    """``dpcalib epsilon dp-sgd``'s eps of the run (the command line, in process)."""
    import contextlib
    import io
    import json

    from dpcalib.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["epsilon", "dp-sgd", "--sampling-rate", str(q), "--steps", str(steps), "--noise-multiplier",
                     str(z), "--delta", str(delta), "--json"]) == 0
    return json.loads(buf.getvalue())["epsilon"]


def test_module_validator_fix_replaces_what_private_training_refuses_and_the_copy_trains():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(4, 8, 3), nn.BatchNorm1d(8), nn.Flatten(), nn.Linear(24, 2))
    assert not ModuleValidator.is_valid(model)
    (err,) = ModuleValidator.validate(model)             # opacus.validators.errors' name, dpcalib's error
    assert isinstance(err, UnsupportedModuleError) and isinstance(err, InputError) and "BatchNorm" in str(err)
    fixed = ModuleValidator.fix(model)
    assert isinstance(fixed[1], nn.GroupNorm) and ModuleValidator.is_valid(fixed)
    attn = nn.MultiheadAttention(4, 2, add_bias_kv=True, add_zero_attn=True).eval()
    lin = ModuleValidator.fix(attn).eval()                 # add_bias_kv / add_zero_attn now have a replacement
    x = torch.randn(5, 3, 4)
    torch.testing.assert_close(lin(x, x, x)[0], attn(x, x, x)[0], rtol=1e-5, atol=1e-6)
    x, y = torch.randn(16, 4, 5, dtype=torch.float64), torch.randint(0, 2, (16,))
    got, naive = _one_step(fixed.double(), x, y, lambda o, t: nn.functional.cross_entropy(o, t, reduction="sum"), 0.5)
    torch.testing.assert_close(got, naive, rtol=1e-9, atol=1e-12)


def test_make_functional_gives_the_per_sample_gradients_of_the_cifar10_examples_no_op_branch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
    fmodel, params = make_functional(model)
    x, y = torch.randn(5, 3, 8, 8), torch.randint(0, 10, (5,))
    torch.testing.assert_close(fmodel(params, x), model(x))
    assert all(p is q for p, q in zip(params, model.parameters()))
    assert not any(p.requires_grad for p in make_functional(model, disable_autograd_tracking=True)[1])

    def loss(ps, xi, yi):
        return nn.functional.cross_entropy(fmodel(ps, xi[None]), yi[None])

    grads = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, x, y)
    for i in range(5):
        model.zero_grad()
        nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        for g, p in zip(grads, model.parameters()):
            torch.testing.assert_close(g[i], p.grad)


# -- the distributed wrapper -------------------------------------------------------------------------------------
def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_distributed_wrapper_needs_a_process_group():
    with pytest.raises(InputError, match="init_process_group"):
        DPDDP(nn.Linear(2, 1))


def _ddp_run(model, distributed, wrap=True):
    """Three private steps of a linear model, seed 5: the final parameters."""
    data = TensorDataset(torch.randn(24, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64),
                         torch.randn(24, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    net = DPDDP(model) if wrap else model
    m, opt, dl = PrivacyEngine().make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.5),
                                              data_loader=DataLoader(data, batch_size=8), noise_multiplier=1.0,
                                              max_grad_norm=1.0, seed=5, distributed=distributed)
    for x, y in dl:
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_the_distributed_wrapper_on_one_process_is_the_module_and_the_run_is_the_one_process_run():
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_port()}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = nn.Linear(3, 1).double()
        alone = copy.deepcopy(model)
        wrapped = DPDDP(model)
        assert wrapped.module is model and list(wrapped.parameters()) == list(model.parameters())
        torch.testing.assert_close(wrapped(torch.ones(2, 3, dtype=torch.float64)), model(torch.ones(2, 3, dtype=torch.float64)))
        got = _ddp_run(model, distributed=True)
    finally:
        torch.distributed.destroy_process_group()
    torch.testing.assert_close(got, _ddp_run(alone, distributed=False, wrap=False), rtol=1e-12, atol=1e-14)


def ddp_worker(rank, world, port, outdir):
    """One rank of the two-process test (module level: 'spawn' imports it): a model initialised apart, wrapped."""
    try:
        torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                             world_size=world)
        torch.manual_seed(100 + rank)                     # each rank starts elsewhere ...
        model = nn.Linear(3, 1).double()
        start = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
        # ... DPDDP broadcasts rank 0's, then three steps; distributed=True is inferred from the wrapper, as Opacus does
        final = _ddp_run(model, distributed=False)
        torch.save({"start": start, "final": final}, os.path.join(outdir, f"out{rank}.pt"))
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    except BaseException as exc:                          # noqa: BLE001 - reported to the parent test
        pathlib.Path(outdir, f"err{rank}.txt").write_text(repr(exc))
        raise


def test_the_distributed_wrapper_starts_two_processes_equal_and_they_stay_equal(tmp_path):
    ctx, port = mp.get_context("spawn"), _port()
    procs = [ctx.Process(target=ddp_worker, args=(r, 2, port, str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0], [f.read_text() for f in tmp_path.glob("err*.txt")]
    out = [torch.load(tmp_path / f"out{r}.pt", weights_only=True) for r in range(2)]
    assert not torch.equal(out[0]["start"], out[1]["start"])
    torch.testing.assert_close(out[0]["final"], out[1]["final"], rtol=0, atol=0)
    torch.manual_seed(100)
    torch.testing.assert_close(out[0]["final"], _ddp_run(nn.Linear(3, 1).double(), distributed=False, wrap=False),
                               rtol=1e-12, atol=1e-14)


def test_make_private_given_the_distributed_wrapper_runs_on_the_ranks():
    """Opacus infers the data-parallel run from the wrapper; so does dpcalib (before: one private run per rank)."""
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_port()}", rank=0, world_size=1)
    try:
        net = DPDDP(nn.Linear(3, 1))
        data = TensorDataset(torch.randn(8, 3), torch.randn(8, 1))
        _, opt, _ = PrivacyEngine().make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                                                 data_loader=DataLoader(data, batch_size=4), noise_multiplier=1.0,
                                                 max_grad_norm=1.0)
        assert opt.transport.name == "torch.distributed" and opt.transport.world == 1
    finally:
        torch.distributed.destroy_process_group()


def test_a_dp_data_loader_handed_to_make_private_runs_as_opacus_runs_it():
    """Opacus's scripts may build ``DPDataLoader.from_data_loader(loader)`` (or ``DPDataLoader(dataset,
    sample_rate=q)``) themselves and hand it to ``make_private``, whose Poisson batches are drawn again at
    ``1 / len(loader)``: the engine takes the expected batch ``n / len(loader)`` (10 of 105 records here, the
    plain loader's batch size) and charges what it draws, the plain loader's epsilon, without a notice."""
    ds = TensorDataset(torch.randn(105, 4), torch.randint(0, 2, (105,)))
    plain = DataLoader(ds, batch_size=10)
    eps, steps = [], []
    for dl in (plain, DPDataLoader.from_data_loader(plain), DPDataLoader(ds, sample_rate=1 / 11)):
        m = nn.Linear(4, 2)
        pe = PrivacyEngine()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            m, opt, loader = pe.make_private(module=m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1),
                                             data_loader=dl, noise_multiplier=1.0, max_grad_norm=1.0)
        k = 0
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
            k += 1
        eps.append(pe.get_epsilon(1e-5))
        steps.append(k)
    assert steps == [11, 11, 11]
    assert eps[0] == eps[1] == eps[2] and 0 < eps[0] < 10
