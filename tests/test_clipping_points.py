"""Per-example gradients and clipped sums at several parameter points at once
(optim/clipping/points.py): the one provider of the D2P nodes and the batched audit's runs.

Oracles: a naive per-record autograd loop for the gradients; leave-one-out on real records for the
clipped sums -- removing a record (weight 0) moves each point's sum by at most its weight times C,
up to the rounding of the sums themselves -- for gradients and for gradient DIFFERENCES at nearby
points (the float32 case that broke an earlier formula), float32 and float64; and the record probe
of ClipD2P in both dtypes."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import dpcalib.mechanisms as M  # noqa: E402
from dpcalib.optim import data as D  # noqa: E402
from dpcalib.optim.audit import probe as P  # noqa: E402
from dpcalib.optim.clipping import clipped_point_sums, point_grads  # noqa: E402
from dpcalib.optim.tensors import flat  # noqa: E402

SLACK_ULPS = 64


def _setup(dtype, points=3, n=12, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Softplus(), nn.Linear(16, 1)).to(dtype)
    like = {k: v.detach().clone() for k, v in model.named_parameters()}
    t = D.prepare(*D.synthetic("california", n=4 * n, seed=seed), task="regression", test_fraction=0.0, seed=seed)
    x, y = t.x_train[:n].to(dtype), t.y_train[:n].to(dtype)
    g = torch.Generator().manual_seed(seed + 1)
    Z = flat(like).unsqueeze(0) + 0.3 * torch.randn(points, flat(like).numel(), generator=g, dtype=torch.float64).to(dtype)

    def loss(out, target):
        return (out.reshape(out.shape[0]) - target).pow(2)
    return model, loss, like, Z, x, y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_point_gradients_equal_a_naive_per_record_loop(dtype):
    model, loss, like, Z, x, y = _setup(dtype)
    shared = point_grads(model, loss, like, shared_records=True)(Z, x, y)            # [points, n, d]
    xs, ys = x.unsqueeze(0).expand(Z.shape[0], *x.shape), y.unsqueeze(0).expand(Z.shape[0], *y.shape)
    own = point_grads(model, loss, like)(Z, xs, ys)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-14)
    for p in range(Z.shape[0]):
        i = 0
        for k, v in like.items():
            with torch.no_grad():
                dict(model.named_parameters())[k].copy_(Z[p, i:i + v.numel()].reshape(v.shape))
            i += v.numel()
        for r in range(x.shape[0]):
            model.zero_grad()
            loss(model(x[r:r + 1]), y[r:r + 1]).sum().backward()
            naive = torch.cat([q.grad.reshape(-1) for q in model.parameters()])
            torch.testing.assert_close(shared[p, r], naive, **tol)
            torch.testing.assert_close(own[p, r], naive, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("kind", ["gradient", "difference"])
@pytest.mark.parametrize("C", [1e-3, 1.0, 100.0])
def test_removing_a_record_moves_each_points_clipped_sum_by_at_most_its_weight_times_c(dtype, kind, C):
    model, loss, like, Z, x, y = _setup(dtype)
    grads = point_grads(model, loss, like, shared_records=True)
    g = grads(Z, x, y)
    if kind == "difference":                    # nearby points: the float32 cancellation case
        step = 1e-5 * torch.randn(Z.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(dtype)
        g = g - grads(Z - step, x, y)
    n = x.shape[0]
    w = torch.full((n,), 1.0 / n, dtype=dtype)
    clips = [C, torch.tensor([C, 2 * C, 0.5 * C], dtype=dtype)]          # one C, or one per point (DIFF2's C_2,r)
    for c in clips:
        full = clipped_point_sums(g, c, w).to(torch.float64)
        cmax = (c if isinstance(c, float) else c.to(torch.float64)) * torch.ones(Z.shape[0], dtype=torch.float64)
        for j in range(n):
            wj = w.clone()
            wj[j] = 0.0
            loo = clipped_point_sums(g, c, wj).to(torch.float64)
            move = torch.linalg.vector_norm(full - loo, dim=1)
            slack = SLACK_ULPS * torch.finfo(dtype).eps * (torch.linalg.vector_norm(full, dim=1)
                                                          + torch.linalg.vector_norm(loo, dim=1))
            assert bool((move <= float(w[j]) * cmax * (1 + 1e-6) + slack).all()), (j, move, cmax)
        # the bound is reached: rows far above C are clipped to exactly C, and removing one moves its
        # point's sum by w C (the test can fail the other way too)
        huge = 1e6 * g / torch.linalg.vector_norm(g, dim=2, keepdim=True).clamp_min(1e-30)
        w0 = w.clone()
        w0[0] = 0.0
        move = torch.linalg.vector_norm((clipped_point_sums(huge, c, w) - clipped_point_sums(huge, c, w0))
                                        .to(torch.float64), dim=1)
        torch.testing.assert_close(move, float(w[0]) * cmax, rtol=1e-4, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_clipd2p_passes_the_record_probe_through_the_shared_points(dtype):
    mech = M.ClipD2P(8, 4)
    rep = mech.calibrate(1.0, 1e-5)
    build, data, held = P.probe_harness("clipd2p", mech, rep, hidden=16, dtype=dtype, seed=0)
    r = P.record_probe(build, data, held, progress=False, seed=0)
    assert r.passed and r.exceeded == 0 and r.std_mismatches == 0
    assert 0.95 < r.worst_ratio <= 1 + r.tol
