"""A release adds each record's vector as clipped, whatever float32 precision the user set for products
(dpcalib.optim.clipping.precision.exact_float32).

``torch.set_float32_matmul_precision("high")`` lets CUDA round float32 products' inputs to TF32 (10
bits), ``"medium"`` lets oneDNN round them to bf16 (8 bits) on CPUs with AMX: inside a clipped sum
that re-rounds every clipped vector, and one record moved the vmap path's release of a float32 MLP by
1.0032 C on an AMX CPU before releases ran under ``exact_float32``.  Here: the settings are exact
inside a release and the user's afterwards; leave-one-out on real records under the reduced settings
(on this machine's products, whatever they do); and a planted bf16 product -- every machine -- that
the leave-one-out sees when the guard is off and does not see with it on.
"""

import pytest
import torch

from benchmarks import fuzz_clipping as F
from benchmarks import models as BM
from dpcalib.optim.clipping import paths as CL
from dpcalib.optim.clipping import precision
from dpcalib.optim.clipping.points import clipped_point_sums

B = torch.backends
LEAVES = [(B.cuda.matmul, "cuda.matmul"), (B.cudnn.conv, "cudnn.conv"), (B.mkldnn.matmul, "mkldnn.matmul"),
          (B.mkldnn.conv, "mkldnn.conv")]


def _settings() -> dict:
    return {name: leaf.fp32_precision for leaf, name in LEAVES}


@pytest.fixture
def user_precision():
    """Sets the user's float32 product precision for one test and restores this process's afterwards."""
    keep = _settings()

    def set_(level):
        torch.set_float32_matmul_precision(level)
        conv = {"highest": "ieee", "high": "tf32", "medium": "bf16"}[level]
        B.mkldnn.conv.fp32_precision = conv
        B.cudnn.conv.fp32_precision = "ieee" if conv == "bf16" else conv
        return _settings()
    yield set_
    for leaf, name in LEAVES:
        leaf.fp32_precision = keep[name]


def test_exact_float32_is_exact_inside_and_restores_the_users_settings(user_precision):
    before = user_precision("medium")
    assert before["mkldnn.matmul"] == "bf16" and before["cuda.matmul"] == "tf32"
    with precision.exact_float32():
        assert set(_settings().values()) == {"ieee"}
        with precision.exact_float32():                      # re-entrant
            assert set(_settings().values()) == {"ieee"}
        assert set(_settings().values()) == {"ieee"}
    assert _settings() == before
    with pytest.raises(ZeroDivisionError):                    # restored on an error too
        with precision.exact_float32():
            1 / 0
    assert _settings() == before


def test_every_release_restores_the_users_settings(user_precision):
    before = user_precision("medium")
    model = F.mlp(dtype=torch.float32)
    x, y, _ = F.records(8, 20, torch.float32)
    params = {k: v.detach() for k, v in model.named_parameters()}
    prev = {k: v + 1e-3 for k, v in params.items()}
    seen = []
    for method in ("ghost", "vmap"):
        s, _ = CL.clipped_grad_sum(model, F.sq_loss, x, y, 1.0, params, method=method)
        d, _ = CL.clipped_grad_diff_sum(model, F.sq_loss, x, y, 1.0, params, prev, method=method)
        seen.append(float(torch.cat([t.reshape(-1) for t in s.values()]).norm()))
        assert _settings() == before
    out = clipped_point_sums(torch.randn(2, 5, 7), 1.0, torch.ones(5))
    assert out.shape == (2, 7) and _settings() == before
    assert 0.0 < seen[0] <= 8.0 * (1 + 1e-6) and seen[0] == pytest.approx(seen[1], rel=1e-4)


@pytest.mark.parametrize("level", ["high", "medium"])
@pytest.mark.parametrize("method", F.METHODS)
def test_leave_one_out_under_the_users_reduced_precision(user_precision, level, method):
    """On this machine's own products (bf16 on an AMX CPU under "medium"; elsewhere exact anyway)."""
    user_precision(level)
    model = F.mlp(dtype=torch.float32)
    x, y, held = F.records(64, 20, torch.float32)
    worst = 0.0
    for kind in ("gradient", "difference"):
        for C in (1e-3, 1.0):
            rows, _ = F.leave_one_out(model, x, y, held, C=C, kind=kind, step=1e-3, method=method,
                                      chosen=range(0, 64, 8))
            assert not [r for r in rows if r["violation"]], (kind, C)
            worst = max(worst, max(r["move"] / r["claim"] for r in rows))
    assert worst > 0.99


@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_leave_one_out_of_the_layers_path_under_bf16_products(user_precision, kind):
    user_precision("medium")
    model = BM.model(kind, torch.float32, small=True)
    x, y = BM.batch(kind, 13, torch.float32, small=True)
    assert CL.clip_path(model) == "layers"
    held = (x[12], y[12])
    for C in (1e-3, 1.0):
        rows, _ = F.leave_one_out(model, x[:12], y[:12], held, C=C, kind="gradient", step=0.0, method="auto",
                                  chosen=range(0, 12, 3), loss_fn=BM.ce_loss,
                                  neighbours=lambda xi, yi, h: {"another record": h})
        assert not [r for r in rows if r["violation"]], C
        assert max(r["move"] / r["claim"] for r in rows) > 0.99


def _bf16_einsum(einsum):
    """``torch.einsum`` as a machine whose float32 products round their inputs to bf16 computes it,
    unless oneDNN's matmul precision is "ieee" (what exact_float32 sets): planted."""
    def planted(eq, *ops):
        if B.mkldnn.matmul.fp32_precision != "ieee":
            ops = [o.to(torch.bfloat16).to(o.dtype) if o.dtype == torch.float32 else o for o in ops]
        return einsum(eq, *ops)
    return planted


def test_a_planted_bf16_product_is_seen_without_the_guard_and_not_with_it(user_precision, monkeypatch):
    user_precision("medium")
    monkeypatch.setattr(torch, "einsum", _bf16_einsum(torch.einsum))
    model = F.mlp(dtype=torch.float32)
    x, y, held = F.records(48, 20, torch.float32)

    def worst():
        rows, _ = F.leave_one_out(model, x, y, held, C=1e-3, kind="gradient", step=0.0, method="vmap",
                                  chosen=range(0, 48, 4))
        return max(r["move"] / r["claim"] for r in rows), sum(r["violation"] for r in rows)
    guarded, bad = worst()
    assert bad == 0 and guarded < 1 + 1e-5
    monkeypatch.setattr(precision, "EXACT_FLOAT32", False)
    unguarded, bad = worst()
    assert bad > 0 and unguarded > 1.0005


class _TwoLayers(torch.nn.Module):
    """Not an nn.Sequential: the engine takes its per-layer sums (module._sum), not the ghost ones."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


@pytest.mark.parametrize("net", ["sequential", "module"])
def test_the_engines_sums_run_exact_and_the_users_loop_keeps_its_settings(user_precision, monkeypatch, net):
    """The user's own loop under "medium": their forward and backward keep it, the release's sums do not."""
    from dpcalib.optim.engine import capture as EM
    from tests import engine_setup as S

    inside = []

    def spy(f):
        def wrapped(*a, **k):
            inside.append(_settings())
            return f(*a, **k)
        return wrapped
    monkeypatch.setattr(CL, "_ghost_sum", spy(CL._ghost_sum))
    monkeypatch.setattr(EM, "add_sums", spy(EM.add_sums))
    before = user_precision("medium")
    x, y = S.data(torch.float32)
    model = S.model(torch.float32) if net == "sequential" else _TwoLayers()
    engine, m, opt, crit, loader = S.private("dp-sgd", model, x, y, noise_multiplier=0.0)
    steps = S.loop(m, opt, crit, loader, epochs=1, after=lambda k: inside.append(("after", _settings())))
    sums = [s for s in inside if not isinstance(s, tuple)]
    after = [s for t, s in (t for t in inside if isinstance(t, tuple))]
    assert len(sums) >= steps == len(after) > 0
    assert all(set(s.values()) == {"ieee"} for s in sums)
    assert all(s == before for s in after)
