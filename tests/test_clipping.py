"""Per-sample clipping: ghost vs vmap vs a naive per-sample loop (gradients and differences)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dpcalib.optim.clipping.paths import clipped_grad_diff_sum, clipped_grad_sum, supports_ghost

ACTS = [nn.Softplus, nn.ReLU, nn.Tanh, nn.Sigmoid]


def sq_loss(out, y):
    return 0.5 * (out.squeeze(-1) - y) ** 2


def make(seed, widths, act, bias):
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b, bias=bias))
        if i < len(widths) - 2:
            layers.append(act())
    return nn.Sequential(*layers).double()


def naive(model, params, x, y, C, params_prev=None):
    """Obviously-correct oracle: one backward pass per example."""
    total = {k: torch.zeros_like(v) for k, v in params.items()}
    norms = []
    for i in range(x.shape[0]):
        def g_at(p):
            out = torch.func.functional_call(model, p, (x[i:i + 1],))
            return torch.autograd.grad(sq_loss(out, y[i:i + 1]).sum(), list(p.values()))
        p = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        gs = g_at(p)
        if params_prev is not None:
            p0 = {k: v.detach().requires_grad_(True) for k, v in params_prev.items()}
            gs = [a - b for a, b in zip(gs, g_at(p0))]
        n = math.sqrt(sum(float(t.pow(2).sum()) for t in gs))
        f = 0.0 if n == 0 or C == 0 else min(1.0, C / n)
        for k, t in zip(params, gs):
            total[k] += f * t
        norms.append(n)
    return total, torch.tensor(norms, dtype=torch.float64)


def assert_close(a, b):
    for k in b:
        torch.testing.assert_close(a[k], b[k], rtol=1e-6, atol=1e-10)


shapes = st.lists(st.integers(1, 12), min_size=2, max_size=4)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), hidden=shapes, batch=st.integers(1, 12), C=st.floats(1e-3, 20.0),
       act=st.sampled_from(ACTS), bias=st.booleans())
def test_gradient_paths_agree(seed, hidden, batch, C, act, bias):
    widths = hidden + [1]
    model = make(seed, widths, act, bias)
    assert supports_ghost(model)
    x = torch.randn(batch, widths[0], dtype=torch.float64)
    y = torch.randn(batch, dtype=torch.float64)
    params = dict(model.named_parameters())
    ref, nref = naive(model, params, x, y, C)
    for method in ("ghost", "vmap"):
        got, n = clipped_grad_sum(model, sq_loss, x, y, C, method=method, chunk_size=5)
        assert_close(got, ref)
        torch.testing.assert_close(n, nref, rtol=1e-6, atol=1e-12)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), hidden=shapes, batch=st.integers(1, 12), C=st.floats(1e-4, 5.0),
       act=st.sampled_from(ACTS), bias=st.booleans(), step=st.floats(1e-4, 1.0))
def test_difference_paths_agree(seed, hidden, batch, C, act, bias, step):
    widths = hidden + [1]
    model = make(seed, widths, act, bias)
    x = torch.randn(batch, widths[0], dtype=torch.float64)
    y = torch.randn(batch, dtype=torch.float64)
    params = {k: v.detach() for k, v in model.named_parameters()}
    prev = {k: v + step * torch.randn_like(v) for k, v in params.items()}
    ref, nref = naive(model, params, x, y, C, params_prev=prev)
    for method in ("ghost", "vmap"):
        got, n = clipped_grad_diff_sum(model, sq_loss, x, y, C, params, prev, method=method, chunk_size=4)
        assert_close(got, ref)
        torch.testing.assert_close(n, nref, rtol=1e-6, atol=1e-9)


def test_edge_cases_and_fallback():
    model = make(0, [3, 4, 1], nn.Softplus, True)
    x, y = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    p = {k: v.detach() for k, v in model.named_parameters()}
    zero, _ = clipped_grad_sum(model, sq_loss, x, y, 0.0)                 # C = 0 -> 0
    assert all(float(v.abs().max()) == 0.0 for v in zero.values())
    same, n = clipped_grad_diff_sum(model, sq_loss, x, y, 1.0, p, p)      # equal points -> 0
    assert float(n.max()) < 1e-7 and all(float(v.abs().max()) < 1e-9 for v in same.values())
    unclipped, _ = clipped_grad_sum(model, sq_loss, x, y, math.inf)       # C = inf -> full gradient
    model.zero_grad()
    sq_loss(model(x), y).sum().backward()
    for k, v in model.named_parameters():
        torch.testing.assert_close(unclipped[k], v.grad)
    conv = nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2), nn.Linear(2, 1)).double()
    assert not supports_ghost(conv)
    g, _ = clipped_grad_sum(conv, sq_loss, x, y, 1.0)                     # auto falls back to vmap
    assert set(g) == {k for k, _ in conv.named_parameters()}
    with pytest.raises(ValueError, match="method='ghost' is not allowed"):
        clipped_grad_sum(conv, sq_loss, x, y, 1.0, method="ghost")
    with pytest.raises(ValueError, match=r"max_norm=-1\.0"):
        clipped_grad_sum(model, sq_loss, x, y, -1.0)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), batch=st.integers(1, 10), C=st.floats(1e-3, 5.0),
       stab=st.one_of(st.none(), st.floats(1e-3, 1.0)), diff=st.booleans())
def test_weighted_and_automatic_clipping_agree_with_the_naive_loop(seed, batch, C, stab, diff):
    """``weights`` (DIFF2's 1/(P n_p)) and ``stabilizer`` (automatic clipping, DiceSGD Alg. 4)."""
    model = make(seed, [3, 5, 1], nn.Softplus, True)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 3, generator=g, dtype=torch.float64)
    y = torch.randn(batch, generator=g, dtype=torch.float64)
    w = torch.rand(batch, generator=g, dtype=torch.float64)
    params = {k: v.detach() for k, v in model.named_parameters()}
    prev = {k: v + 0.1 * torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in params.items()}
    if diff:
        stab = None  # automatic clipping is only used for gradients
    # oracle: per-example loop, each term scaled by its weight
    expected = {k: torch.zeros_like(v) for k, v in params.items()}
    for i in range(batch):
        one, norms = naive(model, params, x[i:i + 1], y[i:i + 1], math.inf, prev if diff else None)
        n = float(norms[0])
        f = (C / (n + stab)) if stab is not None else (0.0 if n == 0 else min(1.0, C / n))
        for k in expected:
            expected[k] += w[i] * f * one[k]
    for method in ("ghost", "vmap"):
        if diff:
            got, _ = clipped_grad_diff_sum(model, sq_loss, x, y, C, params, prev, method=method, weights=w)
        else:
            got, _ = clipped_grad_sum(model, sq_loss, x, y, C, params, method=method, weights=w, stabilizer=stab)
        assert_close(got, expected)


def _exact_row_sq(x: torch.Tensor) -> list:
    """Exact per-row sums of squares: float32 squares are exact in float64, fsum rounds once."""
    return [math.fsum(v * v for v in row) for row in x.to(torch.float64).tolist()]


def test_the_float32_norm_bound_is_an_upper_bound_with_at_most_2_gamma_d_slack():
    from dpcalib.optim.clipping.numerics import UPPER_MAX_COLS, row_sq_upper

    g = torch.Generator().manual_seed(0)
    d = 1000
    rows = [torch.ones(d), torch.randn(d, generator=g), torch.rand(d, generator=g) * 1e-3,
            torch.full((d,), 3e-23),                              # squares underflow (subnormal or zero)
            torch.full((d,), 1e-20), torch.zeros(d)]
    spike = torch.ones(d)
    spike[0] = 4096.0                                             # 2^24 + ones: float32 naive sums lose them all
    rows.append(spike)
    x = torch.stack(rows).float()
    up = row_sq_upper(x).tolist()
    exact = _exact_row_sq(x)
    gamma = d * 2.0 ** -24 / (1 - d * 2.0 ** -24)
    for u, e in zip(up, exact):
        assert u >= e
        assert u <= e * (1 + gamma) / (1 - gamma) * (1 + 1e-15) + d * 2.0 ** -149 * 2
    # overflowing float32 sums fall back to the exact float64 sum; long rows and float64 are exact
    big = torch.full((3, 8), 3e19)
    assert row_sq_upper(big).tolist() == pytest.approx(_exact_row_sq(big), rel=1e-15)
    wide = torch.randn(2, UPPER_MAX_COLS + 1, generator=g)
    assert row_sq_upper(wide).tolist() == pytest.approx(_exact_row_sq(wide), rel=1e-14)
    assert row_sq_upper(wide.double()).tolist() == pytest.approx(_exact_row_sq(wide), rel=1e-14)


def test_the_float32_ghost_norms_are_never_below_the_exact_norms():
    from dpcalib.optim.clipping.paths import _ghost_signals

    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(30, 64), nn.ReLU(), nn.Linear(64, 1))
    x, y = torch.randn(40, 30), torch.randn(40)
    params = {k: v.detach() for k, v in model.named_parameters()}
    _, norms = clipped_grad_sum(model, sq_loss, x, y, 1.0, params)
    # the exact norm of what the path adds for record i: sum over layers ||g_i||^2 (||a_i||^2 + 1)
    sig = _ghost_signals(model, params, sq_loss, x, y)
    exact2 = [0.0] * 40
    for _, a, g, _ in sig:
        for i, (gg, aa) in enumerate(zip(_exact_row_sq(g), _exact_row_sq(a))):
            exact2[i] += gg * (aa + 1.0)
    assert all(n * n >= e for n, e in zip(norms.tolist(), exact2))
    assert (norms ** 2).tolist() == pytest.approx(exact2, rel=1e-5)
    _, oracle = naive(model.double(), {k: v.double() for k, v in params.items()}, x.double(), y.double(), 1.0)
    assert norms.tolist() == pytest.approx(oracle.tolist(), rel=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clip_factors_follow_the_definition(dtype):
    """min{1, C/||v||}, 0 where the norm is 0 (or NaN) or C = 0, 1 for C = inf (a tensor C: where the norm
    is > 0) -- per element against the definition in Python floats, for a scalar C (the fast form) and
    a tensor C; C = 2^-140 is subnormal in float32 (a reciprocal would overflow there)."""
    from dpcalib.optim.clipping.paths import clip_factors

    tiny = torch.finfo(dtype).tiny
    t = torch.tensor([0.0, 1e-40, 0.25, 0.999, 1.0, 1.0 + 2 ** -20, 3.0, 1e30, math.inf, math.nan], dtype=dtype)
    norms = t.tolist()                                  # the values as stored
    for C in (0.0, 2.0 ** -140, 1e-3, 1.0, 2.5, math.inf):
        want = [0.0 if not (n > 0) else (1.0 if C == math.inf else min(1.0, C / n)) for n in norms]
        for c in (C, torch.tensor(C, dtype=dtype)):
            got = clip_factors(t, c).tolist()
            expect = [1.0] * len(norms) if C == math.inf and not isinstance(c, torch.Tensor) else want
            for f, w, n in zip(got, expect, norms):
                if w < tiny and w != 0.0:     # a subnormal factor: rounded to a multiple of the smallest one
                    assert 0.0 <= f and f * n <= C + n * torch.finfo(dtype).smallest_normal * 2.0 ** -23, (C, c, n)
                    continue
                assert f == pytest.approx(w, rel=2 ** -23 if dtype == torch.float32 else 2 ** -52, abs=0.0), \
                    (C, c, n)
                if 0 < n < math.inf and f > 0:            # the clipped norm is C up to one rounding
                    assert f * n <= C * (1 + (2 ** -23 if dtype == torch.float32 else 2 ** -52)), (C, c, n)
