"""Gradient-difference releases compute in float64 whatever the model's dtype
(dpcalib.optim.clipping.precision): the widening is exact and only upwards, buffers follow the
parameters, and a float32 / bfloat16 model's clipped difference equals the naive per-record
float64 loop up to the one final cast -- where the same computed in the model's dtype is off by
its rounding amplified ~1/step.  (Leave-one-out under batch-dependent rounding:
tests/test_clipping_soundness.py, tests/test_engine_soundness.py.)"""

import copy

import pytest
import torch
from torch import nn
from torch.func import functional_call

from dpcalib.optim.clipping import precision
from dpcalib.optim.clipping.paths import clipped_grad_diff_sum
from dpcalib.optim.engine import PrivateModule


def test_widening_is_exact_and_only_upwards():
    x = torch.tensor([1.0 / 3.0, 1e-40, 3e38, -0.0], dtype=torch.float32)
    w = precision.widened(x)
    assert w.dtype == torch.float64 and torch.equal(w.to(torch.float32), x)
    assert precision.widened(x.to(torch.bfloat16)).dtype == torch.float64
    assert precision.widened(x.to(torch.float16), torch.float32).dtype == torch.float32
    d = torch.tensor([0.1], dtype=torch.float64)
    assert precision.widened(d, torch.float32) is d          # never narrowed
    ids = torch.tensor([1, 2])
    assert precision.widened(ids) is ids and precision.widened("text") == "text" and precision.widened(None) is None
    sums = precision.narrowed({"a": w, "b": w}, {"a": x, "b": x.to(torch.float64)})
    assert sums["a"].dtype == torch.float32 and sums["b"].dtype == torch.float64


class _WithBuffer(nn.Module):
    """A Linear layer, then a fixed float projection kept as a buffer (a product with the activations)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(6, 4)
        self.register_buffer("proj", torch.randn(4, 3))

    def forward(self, x):
        return torch.tanh(self.lin(x)) @ self.proj


def _sq(out, y):
    return 0.5 * ((out - y) ** 2).sum(1)


def _naive64(model, x, y, C, params, prev):
    """``sum_i clip(grad_i(params) - grad_i(prev), C)``, one float64 backward per record."""
    m = copy.deepcopy(model).to(torch.float64)

    def grad(P, i):
        P = {k: v.detach().to(torch.float64).requires_grad_(True) for k, v in P.items()}
        loss = _sq(functional_call(m, P, (x[i:i + 1].to(torch.float64),)), y[i:i + 1].to(torch.float64)).sum()
        return torch.cat([t.reshape(-1) for t in torch.autograd.grad(loss, list(P.values()))])

    total = 0.0
    for i in range(x.shape[0]):
        v = grad(params, i) - grad(prev, i)
        total = total + min(1.0, C / float(v.norm())) * v
    return total


def _flat(d, like):
    return torch.cat([d[k].reshape(-1) for k in like]).to(torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("method", ["layers", "vmap"])
def test_a_narrow_models_difference_is_the_float64_difference_cast_once(method, dtype):
    model = _WithBuffer().to(dtype)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 6, generator=g).to(dtype), torch.randn(16, 3, generator=g).to(dtype)
    params = {k: v.detach() for k, v in model.named_parameters()}
    prev = {k: (v.double() + 1e-3 * torch.randn(v.shape, generator=g, dtype=torch.float64)).to(dtype)
            for k, v in params.items()}
    C = 1e-3                                     # every record clipped: the sum's norm is up to 16 C
    want = _naive64(model, x, y, C, params, prev)
    sums, norms = clipped_grad_diff_sum(model, _sq, x, y, C, params, prev, method=method)
    assert all(sums[k].dtype == dtype for k in params) and norms.dtype == torch.float64
    got = _flat(sums, params)
    eps = torch.finfo(dtype).eps
    # the one cast of each summed entry: half an ulp of that entry
    assert torch.all((got - want).abs() <= eps * want.abs() + 1e-300), float(((got - want).abs() / want.abs()).max())
    # the same computed in the model's dtype is off by far more (the amplified rounding)
    keep = precision.DIFFERENCE_DTYPE
    try:
        precision.DIFFERENCE_DTYPE = dtype
        narrow, _ = clipped_grad_diff_sum(model, _sq, x, y, C, params, prev, method=method)
    finally:
        precision.DIFFERENCE_DTYPE = keep
    assert float((_flat(narrow, params) - want).norm()) > 10 * float((got - want).norm())


def test_the_engines_difference_of_a_model_with_a_buffer():
    model = _WithBuffer()
    pm = PrivateModule(model, loss_reduction="sum")
    assert pm.fast
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(10, 6, generator=g), torch.randn(10, 3, generator=g)
    params = {k: v.detach() for k, v in model.named_parameters()}
    prev = {k: v + 1e-4 * torch.randn(v.shape, generator=g) for k, v in params.items()}

    def criterion(out, t):
        return _sq(out, t).sum()

    criterion(pm(x), y).backward()
    cap = pm.captures[-1]
    cap.target = y
    got = cap.clipped_diff_sum(1e-4, prev, criterion)
    pm.clear()
    assert got.dtype == torch.float32
    want = _naive64(model, x, y, 1e-4, params, prev)
    torch.testing.assert_close(got.double(), want, rtol=2 * torch.finfo(torch.float32).eps, atol=1e-12)
