"""Acceptance 1 of the optimizers: with zero noise and no clipping each optimizer is its
non-private counterpart.  Oracles are written here from plain autograd (and torch.optim.Adam),
never from the code under test."""

import math

import pytest
import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O
from dpcalib.optim.run.graph import exponential_hops, mixing_matrix, period, sgp_offsets

INF = math.inf


def mlp(d_in=4, h=6, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, h), nn.Softplus(), nn.Linear(h, 1)).double()


def data(n, d_in=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g, dtype=torch.float64)
    return x, torch.sin(x.sum(1)) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)


def full_grad(model, params, x, y, w=None):
    """grad of sum_i w_i (f(x_i) - y_i)^2 by plain autograd (w default 1/n)."""
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    out = torch.func.functional_call(model, p, (x,)).squeeze(-1)
    w = torch.full((len(x),), 1.0 / len(x), dtype=x.dtype) if w is None else w
    loss = (w * (out - y) ** 2).sum()
    g = torch.autograd.grad(loss, list(p.values()))
    return torch.cat([t.reshape(-1) for t in g])


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def set_flat(model, vec):
    i = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(vec[i:i + p.numel()].view_as(p))
            i += p.numel()


def gd_path(model, x, y, lr, steps, w=None):
    m = mlp()
    m.load_state_dict(model.state_dict())
    out = [flat(m)]
    for _ in range(steps):
        g = full_grad(m, dict(m.named_parameters()), x, y, w)
        set_flat(m, flat(m) - lr * g)
        out.append(flat(m))
    return out


def shards_of(P=3, sizes=(20, 21, 22)):
    return [data(n, seed=10 + p) for p, n in zip(range(P), sizes)]


def diff2_weights(shards):
    P = len(shards)
    return torch.cat([torch.full((len(s[0]),), 1.0 / (P * len(s[0])), dtype=torch.float64) for s in shards])


def test_diff2_gd_estimator_is_the_full_gradient_without_noise_or_clipping():
    shards = shards_of()
    model = mlp()
    x = torch.cat([s[0] for s in shards])
    y = torch.cat([s[1] for s in shards])
    w = diff2_weights(shards)
    mech = M.DIFF2GD(rounds=12, restart_interval=4, clients=3, n_min=20)
    opt = O.DIFF2GD(model, O.squared_loss, shards, mech, {"sigma1": 0.0, "sigma2": 0.0}, C1=INF, C2=INF, lr=0.05)
    for _ in range(12):
        before = {k: v.clone() for k, v in opt.params().items()}
        opt.step()
        expected = full_grad(model, before, x, y, w)
        torch.testing.assert_close(opt.v, expected, rtol=1e-9, atol=1e-12)
    # and the iterates are plain GD on f = (1/P) sum_p f_p
    ref = gd_path(mlp(), x, y, 0.05, 12, w)[-1]
    torch.testing.assert_close(flat(model), ref, rtol=1e-9, atol=1e-12)


def test_restart_interval_one_is_dp_gd_exactly():
    shards = shards_of()
    a, b = mlp(), mlp()
    mech_a = M.DIFF2GD(rounds=8, restart_interval=1, clients=3, n_min=20)
    mech_b = M.DPGD(rounds=8, clients=3, n_min=20)
    noise = {"sigma1": 0.01}
    # DIFF2-GD at T = 1 would silently be DP-GD: refused, naming the option (a benchmark's max(1, R // 100) did this)
    with pytest.raises(ValueError, match=r"restart_interval=1 is not allowed for DIFF2-GD.*O.DPGD"):
        O.DIFF2GD(a, O.squared_loss, shards, mech_a, noise, C1=1.0, C2=1.0, lr=0.1, seed=5)
    oa = O.DPGD(a, O.squared_loss, shards, mech_a, noise, C1=1.0, lr=0.1, seed=5)
    ob = O.DPGD(b, O.squared_loss, shards, mech_b, noise, C1=1.0, lr=0.1, seed=5)
    oa.run(progress=False, delta=1e-5)
    ob.run(progress=False, delta=1e-5)
    assert torch.equal(flat(a), flat(b))
    assert oa.counts["difference"] == 0 and ob.counts["restart"] == 8


def test_dp_gd_without_noise_or_clipping_is_gd():
    shards = shards_of()
    model = mlp()
    x = torch.cat([s[0] for s in shards])
    y = torch.cat([s[1] for s in shards])
    opt = O.DPGD(model, O.squared_loss, shards, M.DPGD(5, 3, 20), {"sigma1": 0.0}, C1=INF, lr=0.2)
    opt.run(progress=False)
    torch.testing.assert_close(flat(model), gd_path(mlp(), x, y, 0.2, 5, diff2_weights(shards))[-1],
                               rtol=1e-9, atol=1e-12)


def test_diff2_bvr_local_steps_are_recursive_variance_reduction_without_noise():
    # b = n_p: every minibatch is the whole shard, so the local estimator is deterministic:
    # v_2 = grad f_p(x_1) - grad f_p(x_0) + v~_1,  x_2 = x_1 - lr v_2.
    shards = shards_of(sizes=(20, 20, 20))
    model = mlp()
    x = torch.cat([s[0] for s in shards])
    y = torch.cat([s[1] for s in shards])
    mech = M.DIFF2BVR(rounds=3, restart_interval=3, clients=3, n_min=20, local_steps=2, batch_size=20)
    opt = O.DIFF2BVR(model, O.squared_loss, shards, mech, {"sigma1": 0.0, "sigma2": 0.0, "sigma3": 0.0},
                     C1=INF, C2=INF, lr=0.05)
    x0 = flat(model)
    opt.step()
    w = diff2_weights(shards)
    m = mlp()
    v1 = full_grad(m, dict(m.named_parameters()), x, y, w)
    x1 = x0 - 0.05 * v1
    p = 1 % 3          # p_r = 1 + (r mod P), r = 1 -> client index 1 (0-based)
    set_flat(m, x1)
    g1 = full_grad(m, dict(m.named_parameters()), *shards[p])
    set_flat(m, x0)
    g0 = full_grad(m, dict(m.named_parameters()), *shards[p])
    x2 = x1 - 0.05 * (g1 - g0 + v1)
    torch.testing.assert_close(flat(model), x2, rtol=1e-9, atol=1e-12)
    assert opt.local == [0, 1, 0]


def test_dp_sgd_full_batch_without_noise_or_clipping_is_gd():
    x, y = data(30)
    model = mlp()
    opt = O.DPSGD(model, O.squared_loss, (x, y), M.DPSGD(1.0, 6), {"noise_multiplier": 0.0}, C=INF, lr=0.1)
    opt.run(progress=False)
    torch.testing.assert_close(flat(model), gd_path(mlp(), x, y, 0.1, 6)[-1], rtol=1e-9, atol=1e-12)


def test_dicesgd_without_clipping_or_noise_is_sgd_and_error_stays_zero():
    x, y = data(30)
    model = mlp()
    mech = M.DiceSGD(N=30, batch_size=30, steps=6)
    opt = O.DiceSGD(model, O.squared_loss, (x, y), mech, {"sigma1": 0.0}, C1=INF, C2=INF, lr=0.1)
    opt.run(progress=False)
    torch.testing.assert_close(flat(model), gd_path(mlp(), x, y, 0.1, 6)[-1], rtol=1e-9, atol=1e-12)
    assert float(opt.e.abs().max()) < 1e-12


def test_dicesgd_adam_without_clipping_or_noise_is_torch_adam():
    x, y = data(30)
    model, ref = mlp(), mlp()
    mech = M.DiceSGD(N=30, batch_size=30, steps=7)
    opt = O.DiceSGD(model, O.squared_loss, (x, y), mech, {"sigma1": 0.0}, C1=INF, C2=INF, lr=0.05,
                    optimizer="adam", betas=(0.8, 0.95), eps=1e-6)
    opt.run(progress=False)
    adam = torch.optim.Adam(ref.parameters(), lr=0.05, betas=(0.8, 0.95), eps=1e-6)
    for _ in range(7):
        adam.zero_grad()
        ((ref(x).squeeze(-1) - y) ** 2).mean().backward()
        adam.step()
    torch.testing.assert_close(flat(model), flat(ref), rtol=1e-9, atol=1e-12)


def test_dicesgd_error_feedback_recovers_what_clipping_removed():
    # e^{t+1} = e^t + (1/B) sum g_i - v^t: one step from e^0 = 0 with C2 = inf gives
    # e^1 = mean(g_i - clip(g_i, C1)) exactly (S4 eq. (8)).
    x, y = data(30)
    model = mlp()
    mech = M.DiceSGD(N=30, batch_size=30, steps=2, C1=0.05, C2=1.0)
    opt = O.DiceSGD(model, O.squared_loss, (x, y), mech, {"sigma1": 0.0}, C2=INF, lr=0.1)
    params = {k: v.clone() for k, v in opt.params().items()}
    opt.step()
    rows = []
    for i in range(30):
        g = full_grad(mlp(), params, x[i:i + 1], y[i:i + 1], torch.ones(1, dtype=torch.float64))
        rows.append(g - g * min(1.0, 0.05 / float(g.norm())))
    torch.testing.assert_close(opt.e, torch.stack(rows).mean(0), rtol=1e-9, atol=1e-12)


def test_dp_srm_full_batch_without_noise_or_clipping_is_gd():
    # b0 = b = n: v^t = grad f(theta^t) + (1-gamma)(v^{t-1} - grad f(theta^{t-1})) = grad f(theta^t).
    x, y = data(25)
    model = mlp()
    mech = M.DPSRM(n=25, steps=6, b0=25, b=25, lipschitz=1.0, step_bound=0.1, momentum=0.3)
    opt = O.DPSRM(model, O.squared_loss, (x, y), mech, {"sigma0": 0.0, "sigma": 0.0}, C1=INF, C2=INF, lr=0.1)
    opt.run(progress=False)
    # after T = 6 releases the model holds theta^5 (5 updates)
    torch.testing.assert_close(flat(model), gd_path(mlp(), x, y, 0.1, 5)[-1], rtol=1e-9, atol=1e-12)


def test_push_sum_preserves_the_network_average_and_weights():
    # one example per node (J = 1), so the node gradients are known; the average moves by
    # -lr * mean_i(g_i + N_i) exactly (S2 eq. (15)), whatever the mixing.
    n = 6
    nodes = [data(1, seed=30 + i) for i in range(n)]
    model = mlp()
    mech = M.ClipD2P(samples_per_node=1, iterations=5, relation="replace-one")
    opt = O.ClipD2P(model, O.squared_loss, nodes, mech, {"sigma": 0.3}, C=0.5, lr=0.1, record=True)
    for k in range(5):
        Z = opt.X / opt.w.unsqueeze(1)
        xbar = opt.X.mean(0)
        gs = []
        for i in range(n):
            p = {}
            j = 0
            for name, t in opt.like.items():
                p[name] = Z[i, j:j + t.numel()].reshape(t.shape)
                j += t.numel()
            g = full_grad(model, p, *nodes[i], torch.ones(1, dtype=torch.float64))
            gs.append(g * min(1.0, 0.5 / float(g.norm())))
        opt.step()
        noise = torch.stack([r.noise for r in opt.privatizer.releases[-n:]])
        torch.testing.assert_close(opt.X.mean(0), xbar - 0.1 * (torch.stack(gs) + noise).mean(0),
                                   rtol=1e-9, atol=1e-12)
        assert torch.equal(opt.w, torch.ones(n, dtype=torch.float64))


def test_single_node_clipd2p_without_noise_or_clipping_is_sgd():
    x, y = data(1)
    model = mlp()
    opt = O.ClipD2P(model, O.squared_loss, [(x, y)], M.ClipD2P(1, 4, "replace-one"), {"sigma": 0.0}, C=INF, lr=0.1)
    opt.run(progress=False)
    torch.testing.assert_close(flat(model), gd_path(mlp(), x, y, 0.1, 4)[-1], rtol=1e-9, atol=1e-12)


# ---- graph (spec 8(f), T11) -----------------------------------------------------------------------
def _deviation(n, variant):
    prod = torch.eye(n, dtype=torch.float64)
    for k in range(period(n, variant)):
        prod = mixing_matrix(n, k, variant) @ prod
    return float(torch.linalg.matrix_norm(prod - torch.full((n, n), 1.0 / n, dtype=torch.float64), ord=2))


@pytest.mark.parametrize("n,variant,expected", [(20, "paper", 0.189987), (20, "sgp", 0.0551483),
                                                (16, "paper", 0.0), (16, "sgp", 0.0), (8, "paper", 0.0),
                                                (8, "sgp", 0.0)])
def test_exponential_graph_one_period_deviation_matches_spec(n, variant, expected):
    assert _deviation(n, variant) == pytest.approx(expected, abs=5e-7)


def test_exponential_graph_hops_and_peers_match_spec():
    assert exponential_hops(20) == [1, 2, 4, 8, 16] and period(20) == 5
    assert sgp_offsets(20) == [1, 19, 2, 18, 4, 16, 8, 12] and period(20, "sgp") == 8
    assert sgp_offsets(16) == [1, 15, 2, 14, 4, 12, 8] and sgp_offsets(8) == [1, 7, 2, 6, 4]
    assert exponential_hops(9) == [1, 2, 4, 8]    # n - 1 = 8 exactly a power of two (spec 8 E4)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 20, 33])
@pytest.mark.parametrize("variant", ["paper", "sgp"])
def test_mixing_matrices_are_doubly_stochastic(n, variant):
    for k in range(2 * period(n, variant)):
        P = mixing_matrix(n, k, variant)
        torch.testing.assert_close(P.sum(0), torch.ones(n, dtype=torch.float64))
        torch.testing.assert_close(P.sum(1), torch.ones(n, dtype=torch.float64))
