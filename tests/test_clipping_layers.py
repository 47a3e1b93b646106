"""The layers path of per-sample clipping (optim/clipping/layers.py): every layer kind and the three benchmark
models against a naive per-sample float64 loop (one backward per record), and leave-one-out
soundness on real records (removed, replaced) at parameter steps down to 1e-6, float32 and float64."""

import copy
import math
import warnings

import pytest
import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as Fn

from benchmarks import models as BM
from dpcalib.optim.clipping import paths as CL


class Tree(nn.Module):
    def __init__(self, trunk, width, pool_dims):
        super().__init__()
        self.trunk, self.pool_dims, self.head = trunk, pool_dims, nn.Linear(width, 3)

    def forward(self, x):
        return self.head(self.trunk(x).mean(self.pool_dims))


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.ln, self.b = nn.Linear(6, 6), nn.LayerNorm(6), nn.Linear(6, 3)

    def forward(self, x):
        return self.b(self.ln(x + torch.tanh(self.a(x)))).mean(1)


def _kinds():
    torch.manual_seed(0)
    return {
        "linear on sequences": (Tree(nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 5)), 5, (1,)), "seq"),
        "linear, no bias, residual + layernorm": (Residual(), "seq"),
        "conv1d stride/padding/groups/dilation": (
            Tree(nn.Sequential(nn.Conv1d(4, 6, 3, stride=2, padding=1), nn.ReLU(),
                               nn.Conv1d(6, 6, 3, dilation=2, padding="same", groups=2)), 6, (2,)), "signal"),
        "conv2d stride/padding/groups/dilation": (
            Tree(nn.Sequential(nn.Conv2d(4, 6, 3, stride=2, padding=1), nn.ReLU(),
                               nn.Conv2d(6, 6, (3, 1), dilation=(2, 1), padding="same", groups=3, bias=False)),
                 6, (2, 3)), "image"),
        "groupnorm": (Tree(nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), nn.GroupNorm(3, 6), nn.ReLU()), 6, (2, 3)),
                      "image"),
        "layernorm": (Tree(nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Tanh()), 8, (1,)), "seq"),
        "embedding with padding_idx": (Tree(nn.Embedding(20, 5, padding_idx=0), 5, (1,)), "ids"),
        "attention from Linear layers": (BM.model("transformer", small=True), "tokens"),
        "benchmark: GroupNorm CNN": (BM.model("cnn", small=True), "cifar"),
        "benchmark: transformer": (BM.model("transformer", small=True), "tokens"),
        "benchmark: MLP": (BM.model("mlp", small=True), "mlp"),
    }


class Encoder(nn.Module):
    """nn.TransformerEncoderLayer (nn.MultiheadAttention inside) after linear_attention."""

    def __init__(self):
        super().__init__()
        from dpcalib.optim import linear_attention

        self.emb = nn.Embedding(20, 8, padding_idx=0)
        self.enc = linear_attention(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True))
        self.head = nn.Linear(8, 3)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids)).mean(1))


def _with_encoder():
    kinds = _kinds()
    torch.manual_seed(0)
    kinds["nn.TransformerEncoderLayer, attention converted"] = (Encoder(), "ids")
    return kinds


KINDS = _with_encoder()


def _data(kind, n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if kind == "seq":
        x = torch.randn(n, 5, 6, generator=g)
    elif kind == "signal":
        x = torch.randn(n, 4, 11, generator=g)
    elif kind == "image":
        x = torch.randn(n, 4, 7, 6, generator=g)
    elif kind == "ids":
        x = torch.randint(0, 20, (n, 7), generator=g)
        x[:, -1] = 0
        return x, torch.randint(0, 3, (n,), generator=g)
    elif kind in ("tokens", "cifar", "mlp"):
        return BM.batch({"tokens": "transformer", "cifar": "cnn", "mlp": "mlp"}[kind], n, dtype, seed, small=True)
    return x.to(dtype), torch.randint(0, 3, (n,), generator=g)


def _loss(out, y):
    return Fn.cross_entropy(out, y, reduction="none")


def _prepare(name, dtype):
    model, kind = KINDS[name]
    model = copy.deepcopy(model).to(dtype)
    params = {k: v.detach() for k, v in model.named_parameters()}
    return model, kind, params


def _prev(params, step, seed=1):
    g = torch.Generator().manual_seed(seed)
    return {k: v + step * torch.randn(v.shape, generator=g, dtype=torch.float64).to(v.dtype) for k, v in params.items()}


def _naive(model, x, y, C, params, prev=None, weights=None):
    """sum_i w_i clip(v_i, C) with v_i from one float64 backward per record."""
    m = copy.deepcopy(model).to(torch.float64)
    xs = x.to(torch.float64) if x.is_floating_point() else x

    def grad(P, i):
        P = {k: v.detach().to(torch.float64).requires_grad_(True) for k, v in P.items()}
        loss = _loss(functional_call(m, P, (xs[i:i + 1],)), y[i:i + 1]).sum()
        return torch.cat([t.reshape(-1) for t in torch.autograd.grad(loss, list(P.values()))])

    total = 0.0
    for i in range(x.shape[0]):
        v = grad(params, i) if prev is None else grad(params, i) - grad(prev, i)
        nrm = float(v.norm())
        f = min(1.0, C / nrm) if nrm > 0 else 0.0
        total = total + (1.0 if weights is None else float(weights[i])) * f * v
    return total


def _ours(model, x, y, C, params, prev=None, weights=None, method="auto"):
    if prev is None:
        s, _ = CL.clipped_grad_sum(model, _loss, x, y, C, params, method=method, weights=weights)
    else:
        s, _ = CL.clipped_grad_diff_sum(model, _loss, x, y, C, params, prev, method=method, weights=weights)
    return torch.cat([s[k].reshape(-1) for k in params]).to(torch.float64)


@pytest.mark.parametrize("name", list(KINDS))
def test_layer_kinds_take_the_fast_path_and_equal_the_naive_float64_loop(name):
    model, kind, params = _prepare(name, torch.float64)
    assert CL.clip_path(model) == ("ghost" if name == "benchmark: MLP" else "layers")
    x, y = _data(kind, 7, torch.float64)
    w = torch.linspace(0.5, 1.5, 7, dtype=torch.float64)
    for C in (1e-3, 1.0):
        for prev, weights in ((None, None), (_prev(params, 1e-2), None), (None, w), (_prev(params, 1e-5), w)):
            ref = _naive(model, x, y, C, params, prev, weights)
            got = _ours(model, x, y, C, params, prev, weights)
            assert float((got - ref).norm()) <= 1e-4 * float(ref.norm()) + 1e-300, (name, C, prev is None)
    # float32 model: still within 1e-4 of the float64 loop
    model32, _, p32 = _prepare(name, torch.float32)
    x32, y32 = _data(kind, 7, torch.float32)
    for prev in (None, _prev(p32, 1e-2)):
        ref = _naive(model32, x32, y32, 1.0, p32, prev)
        got = _ours(model32, x32, y32, 1.0, p32, prev)
        assert float((got - ref).norm()) <= 1e-4 * float(ref.norm()), name


def _replacements(kind, x, i, g):
    """Replace-one neighbours of record i: another record, an adversarial one, a zero/padding one."""
    other = x[(i + 1) % x.shape[0]]
    if not x.is_floating_point():
        rnd = torch.randint(1, int(x.max()) + 1, x[i].shape, generator=g)
        return {"another record": other, "random ids": rnd, "all padding": torch.zeros_like(x[i])}
    return {"another record": other, "features x 1e3": x[i] * 1e3, "all-zero record": torch.zeros_like(x[i])}


STEPS = (None, 1e-2, 1e-6)
CLASSES = {"tokens": 2, "cifar": 10, "mlp": 7}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(KINDS))
def test_leave_one_out_moves_the_clipped_sum_by_at_most_its_sensitivity(name, dtype):
    model, kind, params = _prepare(name, dtype)
    x, y = _data(kind, 10, dtype, seed=2)
    eps = torch.finfo(dtype).eps
    g = torch.Generator().manual_seed(3)
    worst = 0.0
    for step in STEPS:
        prev = None if step is None else _prev(params, step)
        for C in (1e-3, 1.0):
            full = _ours(model, x, y, C, params, prev)
            for i in (0, 4, 9):
                keep = torch.tensor([j for j in range(x.shape[0]) if j != i])
                nbrs = [(C, _ours(model, x[keep], y[keep], C, params, prev))]
                for xr in _replacements(kind, x, i, g).values():
                    x2 = x.clone()
                    x2[i] = xr
                    y2 = y.clone()
                    y2[i] = (y[i] + 1) % CLASSES.get(kind, 3)
                    nbrs.append((2 * C, _ours(model, x2, y2, C, params, prev)))
                for claim, s2 in nbrs:
                    move = float((full - s2).norm())
                    slack = 64 * eps * float(full.norm() + s2.norm())
                    assert move <= claim * (1 + 1e-5) + slack, (name, step, C, i, move / claim)
                    worst = max(worst, move / claim)
    assert worst > 0.5          # the claim is reached somewhere: the check is not vacuous


class WithPReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.act, self.b = nn.Linear(6, 8), nn.PReLU(), nn.Linear(8, 3)

    def forward(self, x):
        return self.b(self.act(self.a(x)))


def test_an_unsupported_layer_falls_back_to_vmap_with_one_warning_naming_it():
    CL._WARNED.discard(WithPReLU)
    torch.manual_seed(0)
    model = WithPReLU().double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = torch.randn(5, 6, dtype=torch.float64), torch.randint(0, 3, (5,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _ours(model, x, y, 0.5, params)
        _ours(model, x, y, 0.5, params)
    msgs = [str(w.message) for w in caught if issubclass(w.category, CL.ClippingFallbackWarning)]
    assert len(msgs) == 1 and "act (PReLU)" in msgs[0], msgs
    ref = _naive(model, x, y, 0.5, params)
    assert float((got - ref).norm()) <= 1e-10 * float(ref.norm())
    with pytest.raises(ValueError, match="act \\(PReLU\\)"):
        CL.clipped_grad_sum(model, _loss, x, y, 1.0, params, method="layers")


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 3)

    def forward(self, x):
        return self.b(self.a(torch.tanh(self.a(x))))


def test_a_module_run_twice_is_one_unit_of_the_fast_path():
    """A module called twice: the record's gradient of its weight is the sum over both calls, measured as one
    vector (the calls' norms added would understate it); no fallback, the naive loop's sums, gradients and
    differences."""
    torch.manual_seed(0)
    model = Shared().double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = torch.randn(5, 6, dtype=torch.float64), torch.randint(0, 3, (5,))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CL.ClippingFallbackWarning)
        for C in (0.05, 1e3):
            for prev in (None, _prev(params, 1e-2)):
                got = _ours(model, x, y, C, params, prev, method="layers")
                ref = _naive(model, x, y, C, params, prev)
                assert float((got - ref).norm()) <= 1e-10 * float(ref.norm()), (C, prev is None)


@pytest.mark.parametrize("arch", ["mlp", "tree"])
def test_full_batch_rounds_reuse_the_previous_points_signals_and_give_the_same_run(arch):
    """DIFF2-GD's difference rounds need the signals at x_{r-1}, which the round before computed: with the
    cache every round after the first computes one point, and the run is bitwise the run without it."""
    from dpcalib.optim.clipping.per_example import PerExample
    from tests.builders import build

    def model():
        torch.manual_seed(0)
        if arch == "mlp":
            return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        return Tree(nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Tanh()), 8, ()).double().float()

    runs = []
    for reuse in (True, False):
        opt, _ = build("diff2-gd", model() if arch == "mlp" else _SqueezeOut(model()))
        opt.per_example = PerExample(reuse_signals=reuse)
        for _ in range(8):
            opt.step()
        runs.append((opt.params(), opt.per_example.cache))
    (a, cache), (b, _) = runs
    assert all(torch.equal(a[k], b[k]) for k in a)
    # difference rounds 3, 4, 7, 8: the earlier point was kept (round 6's was last evaluated by round 5's
    # gradient release, in the model's float32; a difference needs it in float64: .precision)
    assert cache.hits >= 4


class _SqueezeOut(nn.Module):
    """A Tree with a 3-way head used as a regressor: the mean of its outputs."""

    def __init__(self, tree):
        super().__init__()
        self.tree = tree

    def forward(self, x):
        return self.tree.head(self.tree.trunk(x)).mean(-1, keepdim=True)


def test_the_cache_never_answers_for_changed_data_or_parameters():
    from dpcalib.optim.clipping.signals import SignalCache

    cache = SignalCache()
    model = nn.Linear(3, 1)
    x, y = torch.randn(5, 3), torch.randn(5)
    p = {k: v.detach().clone() for k, v in model.named_parameters()}
    calls = []

    def compute(tag):
        return lambda: calls.append(tag) or tag

    for _ in range(2):
        cache.signals("ghost", model, _loss, x, y, 0, 5, p, compute("a"))
    assert cache.signals("ghost", model, _loss, x, y, 0, 5, p, compute("b")) == "a"       # kept: same everything
    p2 = {k: v + 1e-6 for k, v in p.items()}
    assert cache.signals("ghost", model, _loss, x, y, 0, 5, p2, compute("c")) == "c"      # other parameters
    x.mul_(1.0)                                                                            # in place: new version
    assert cache.signals("ghost", model, _loss, x, y, 0, 5, p, compute("d")) == "d"
    x2 = x.clone()
    assert cache.signals("ghost", model, _loss, x2, y, 0, 5, p, compute("e")) == "e"      # another batch object


class TiedLM(nn.Module):
    """An embedding whose matrix is reused by the output layer (weight tying, common in language models)."""

    def __init__(self):
        super().__init__()
        self.emb, self.mix = nn.Embedding(12, 6), nn.Linear(6, 6)

    def forward(self, ids):
        h = torch.tanh(self.mix(self.emb(ids))).mean(1)
        return Fn.linear(h, self.emb.weight)[:, :3]


class Functional(nn.Module):
    """A parent that uses its child's weight directly (as nn.MultiheadAttention does with out_proj)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 3)

    def forward(self, x):
        return Fn.linear(torch.tanh(self.a(x)), self.b.weight, self.b.bias)


@pytest.mark.parametrize("cls,kind", [(TiedLM, "ids12"), (Functional, "vec")])
def test_weights_used_outside_their_own_module_call_send_the_model_to_vmap(cls, kind):
    """The per-layer rules see only a module's own call: a tied or functionally used weight would lose terms
    of the per-sample gradient (an unsound, too small norm), so the model falls back to vmap -- same sums as the
    naive loop, a warning, and method='layers' refused."""
    CL._WARNED.discard((cls, "shared"))
    torch.manual_seed(0)
    model = cls().double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 12, (6, 5), generator=g) if kind == "ids12" else torch.randn(6, 6, generator=g,
                                                                                         dtype=torch.float64)
    y = torch.randint(0, 3, (6,), generator=g)
    assert CL.clip_path(model) == "layers"          # every module has a rule: only the graph shows the reuse
    with pytest.warns(CL.ClippingFallbackWarning, match="tied or shared weights"):
        got = _ours(model, x, y, 0.05, params)
    ref = _naive(model, x, y, 0.05, params)
    assert float((got - ref).norm()) <= 1e-10 * float(ref.norm())
    with pytest.raises(ValueError, match="tied or shared"):
        CL.clipped_grad_sum(model, _loss, x, y, 1.0, params, method="layers")


@pytest.mark.parametrize("batch_first", [True, False])
def test_linear_attention_is_the_same_function_as_nn_multiheadattention(batch_first):
    from dpcalib.optim import LinearMultiheadAttention

    torch.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, batch_first=batch_first).double()
    n = LinearMultiheadAttention.from_module(m)
    x, kv = torch.randn(3, 5, 8, dtype=torch.float64), torch.randn(3, 5, 8, dtype=torch.float64)
    B, L = (3, 5) if batch_first else (5, 3)
    kpm = torch.zeros(B, L, dtype=torch.bool)
    kpm[:, -1] = True
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    for kw in ({}, {"key_padding_mask": kpm}, {"attn_mask": causal}, {"attn_mask": causal, "need_weights": False},
               {"average_attn_weights": False}):
        with torch.no_grad():
            a, b = m(x, kv, kv, **kw), n(x, kv, kv, **kw)
        torch.testing.assert_close(a[0], b[0], rtol=1e-12, atol=1e-12)
        assert (a[1] is None) == (b[1] is None)
        if a[1] is not None:
            torch.testing.assert_close(a[1], b[1], rtol=1e-12, atol=1e-12)


def test_a_model_with_nn_multiheadattention_is_told_how_to_take_the_fast_path():
    model = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    assert any("linear_attention" in u for u in CL.unsupported_layers(model))
    from dpcalib.optim import linear_attention

    assert CL.clip_path(linear_attention(model)) == "layers"


@pytest.mark.parametrize("conv,size", [
    (nn.Conv2d(3, 4, 3, stride=2, padding=1), (9, 8)),         # the stride leaves input rows unreached
    (nn.Conv2d(3, 4, (3, 2), stride=(3, 2), padding=(2, 0), dilation=(1, 2)), (11, 10)),
    (nn.Conv2d(3, 4, 3, dilation=2, padding="same", bias=False), (7, 9)),
    (nn.Conv2d(3, 4, 5, stride=1, padding=0), (8, 8)),
    (nn.Conv1d(3, 4, 3, stride=2, padding=1), (9,)),
    (nn.Conv1d(3, 4, 4, stride=3, dilation=2), (17,)),
], ids=["s2p1-odd", "s3x2-d1x2", "dil2-same", "k5p0", "1d-s2", "1d-s3d2"])
def test_per_sample_conv_weight_gradients_equal_one_backward_per_record(conv, size):
    """The grouped-convolution rule against autograd on each record alone (float64)."""
    from dpcalib.optim.clipping.conv import conv_weight_grads as _conv_weight_grads

    torch.manual_seed(0)
    conv = conv.double()
    B = 3
    a = torch.randn(B, 3, *size, dtype=torch.float64)
    out = conv(a)
    g = torch.randn_like(out)                     # the back-propagated signal of each record
    W = _conv_weight_grads(conv, a, g)            # [in, B, out, k...]
    assert W.is_contiguous()
    for b in range(B):
        ref, = torch.autograd.grad((conv(a[b:b + 1]) * g[b:b + 1]).sum(), [conv.weight])
        got = W[:, b].transpose(0, 1).reshape(conv.weight.shape)
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
