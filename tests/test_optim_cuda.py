"""The CUDA path (skipped on machines without a GPU): device and dtype follow the model, and
with zero noise a CUDA run reproduces the CPU run."""

import pytest
import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Softplus(), nn.Linear(8, 1)).double()


def shards(P, n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(n, 4, generator=g, dtype=torch.float64),
             torch.randn(n, generator=g, dtype=torch.float64)) for _ in range(P)]


def _run(cls, device, mech, noise, data, **kw):
    model = mlp().to(device)
    opt = cls(model, O.squared_loss, data, mech, noise, **kw)
    opt.run(progress=False, delta=1e-5)
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()]), opt


@cuda
def test_diff2_gd_on_cuda_matches_cpu_without_noise():
    mech = M.DIFF2GD(10, 5, 3, 30)
    noise = {"sigma1": 0.0, "sigma2": 0.0}
    a, _ = _run(O.DIFF2GD, "cpu", mech, noise, shards(3, 30), C1=1.0, C2=2.0, lr=0.1)
    b, opt = _run(O.DIFF2GD, "cuda", mech, noise, shards(3, 30), C1=1.0, C2=2.0, lr=0.1)
    assert opt.x.device.type == "cuda" and opt.privatizer.generator.device.type == "cuda"
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


@cuda
def test_noisy_runs_on_cuda_have_the_calibrated_noise():
    mech = M.ClipD2P(10, 20, "replace-one")
    rep = mech.calibrate(8.0, 1e-5)
    _, opt = _run(O.ClipD2P, "cuda", mech, rep, shards(4, 10), C=1.0, lr=0.05, record=True)
    assert O.noise_std_test(opt.privatizer.releases).passed
    mech = M.DPSGD(0.2, 20)
    x = torch.cat([s[0] for s in shards(4, 30)])
    y = torch.cat([s[1] for s in shards(4, 30)])
    _, opt = _run(O.DPSGD, "cuda", mech, mech.calibrate(2.0, 1e-5), (x, y), C=1.0, lr=0.1, record=True)
    assert O.noise_std_test(opt.privatizer.releases).passed


@cuda
def test_batched_audit_runs_on_cuda_and_matches_the_sequential_cuda_runs():
    from dpcalib.optim import audit as A

    data = [(x.cuda(), y.cuda()) for x, y in shards(2, 5)]
    mech = M.DIFF2GD(4, 2, 2, 5)
    rep = mech.calibrate(2.0, 1e-5, method="tight")

    def build(seed):
        return O.DIFF2GD(mlp().cuda(), O.squared_loss, data, mech, rep, C1=1.0, C2=1.0, lr=0.1, seed=seed)
    assert build(0).privatizer.generator.device.type == "cuda"
    d = sum(p.numel() for p in mlp().parameters())
    canaries = (A.alternating(d, 1e6), A.alternating(d, 1e6, sign=-1.0))
    seq = A.llr_samples(build, *canaries, runs=6, batch=None, progress=False, seed=0)
    bat = A.llr_samples(build, *canaries, runs=6, batch=5, progress=False, seed=0)
    for a, b in zip(seq, bat):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=1e-9, atol=1e-9)
    r = A.audit(build, *canaries, runs=20_000, claimed_epsilon=rep.epsilon, delta=1e-5, progress=False, seed=0)
    assert r.verdict == "consistent" and r.epsilon_lo_gdp > 0.8 * 2.0


@cuda
@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_the_layers_path_on_cuda_matches_cpu(kind):
    """The per-layer rules (conv by grouped convolution, embeddings, norms, attention) on a CUDA device:
    the clipped sums and difference sums of the CPU run, float64."""
    from benchmarks import models as BM
    from dpcalib.optim.clipping import paths as CL

    out = []
    for device in ("cpu", "cuda"):
        model = BM.model(kind, torch.float64, small=True).to(device)
        x, y = BM.batch(kind, 6, torch.float64, small=True)
        x, y = x.to(device), y.to(device)
        params = {k: v.detach() for k, v in model.named_parameters()}
        prev = {k: v + 1e-3 for k, v in params.items()}
        assert CL.clip_path(model) == "layers"
        s, _ = CL.clipped_grad_sum(model, BM.ce_loss, x, y, 0.5, params)
        d, _ = CL.clipped_grad_diff_sum(model, BM.ce_loss, x, y, 0.5, params, prev)
        out.append(torch.cat([s[k].reshape(-1).cpu() for k in params] + [d[k].reshape(-1).cpu() for k in params]))
    torch.testing.assert_close(out[0], out[1], rtol=1e-9, atol=1e-12)


@cuda
def test_data_parallel_optimizers_accept_a_cuda_model_and_a_dataset():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(60, 4, generator=g, dtype=torch.float64), torch.randn(60, generator=g, dtype=torch.float64)
    mech = M.DPSGD(sampling="shuffle", n=60, batch_size=13, epochs=1)
    noise = {"noise_multiplier": 0.0}
    # (the CUDA generator draws other permutations than the CPU one: the runs differ, their accounting not)
    _, a = _run(O.DPSGD, "cpu", mech, noise, (x, y), C=1.0, lr=0.1)
    b, opt = _run(O.DPSGD, "cuda", mech, noise, torch.utils.data.TensorDataset(x, y), C=1.0, lr=0.1)
    assert torch.isfinite(b).all() and opt.perm.device.type == "cuda"
    assert opt.round == a.round == 5 and opt.epsilon_spent(1e-5) == a.epsilon_spent(1e-5)


@cuda
@pytest.mark.parametrize("algorithm", ["dp-sgd", "dicesgd", "dp-srm"])
def test_the_engines_loop_on_cuda_matches_cpu_without_noise(algorithm):
    """The user's loop moves each batch to the GPU; the engine's noise source and state follow the module."""
    from tests import engine_setup as S

    zero = {k: 0.0 for k in S.LEVELS[algorithm]}
    out = {}
    for device in ("cpu", "cuda"):
        x, y = S.data()
        net = S.model().to(device)
        kw = {"noise_multiplier": 0.0} if algorithm == "dp-sgd" else {"noise": zero}
        engine, m, opt, crit, loader = S.private(algorithm, net, x, y, **kw)
        for _ in range(S.EPOCHS):
            for xb, yb in loader:
                xb, yb = xb.to(device), yb.to(device)
                opt.zero_grad()
                crit(m(xb), yb).backward()
                opt.step()
        assert opt.privatizer.generator.device.type == device
        out[device] = S.flat(net).cpu()
    torch.testing.assert_close(out["cpu"], out["cuda"], rtol=1e-9, atol=1e-12)


def _cuda_level(level):
    """The user's float32 settings on CUDA: torch's defaults (cuDNN convolutions may use TF32) or "high"
    (matrix products in TF32 too); returns a function that restores the previous ones."""
    from torch import backends as B

    leaves = [B.cuda.matmul, B.cudnn.conv, B.mkldnn.matmul, B.mkldnn.conv]
    keep = [leaf.fp32_precision for leaf in leaves]
    if level == "high":
        torch.set_float32_matmul_precision("high")
        B.cudnn.conv.fp32_precision = "tf32"

    def restore():
        for leaf, v in zip(leaves, keep):
            leaf.fp32_precision = v
    return restore


@cuda
@pytest.mark.parametrize("level", ["default", "high"])
@pytest.mark.parametrize("kind", ["mlp", "cnn", "transformer"])
def test_leave_one_out_on_cuda_under_the_users_float32_settings(level, kind):
    """A record moves a float32 release on the GPU by at most its sensitivity, on every path, with
    torch's default settings and with TF32 products allowed ("high"): gradients and differences."""
    from benchmarks import fuzz_clipping as F
    from benchmarks import models as BM

    restore = _cuda_level(level)
    try:
        if kind == "mlp":
            model = F.mlp(dtype=torch.float32).cuda()
            x, y, held = F.records(48, 20, torch.float32)
            x, y, held = x.cuda(), y.cuda(), (held[0].cuda(), held[1].cuda())
            loss, methods, nb = F.sq_loss, F.METHODS, None
        else:
            model = BM.model(kind, torch.float32, small=True).cuda()
            x, y = BM.batch(kind, 25, torch.float32, small=True)
            x, y = x.cuda(), y.cuda()
            x, y, held = x[:24], y[:24], (x[24], y[24])
            loss, methods, nb = BM.ce_loss, ("auto", "vmap"), (lambda xi, yi, h: {"another record": h})
        worst = 0.0
        for method in methods:
            for kind_, step in (("gradient", 0.0), ("difference", 1e-3), ("difference", 1e-6)):
                for C in (1e-3, 1.0):
                    rows, _ = F.leave_one_out(model, x, y, held, C=C, kind=kind_, step=step, method=method,
                                              chosen=range(0, x.shape[0], 4), loss_fn=loss, neighbours=nb)
                    bad = [r for r in rows if r["violation"]]
                    assert not bad, (method, kind_, step, C, bad[:2])
                    worst = max(worst, max(r["move"] / r["claim"] for r in rows))
        assert worst > 0.99
    finally:
        restore()
