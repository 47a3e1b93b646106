"""The models users bring (benchmarks/user_models.py: sequence-first encoders with T == B, recurrent layers
packed and sequence-first, 3-d and transposed convolutions, instance norm, tied and shared weights, custom
modules, frozen parts, bf16 / fp16 autocast and bf16 parameters, torch.compile, tiny Hugging Face BERT,
GPT-2 and ViT built from configs, full and LoRA) through the engine's module: the clipped sum its step takes
from the user's own forward and backward equals the naive per-record float64 loop (float32 within 1e-5
relative, bfloat16 / float16 within 2e-2), and removing or replacing one record moves it by at most C (2C);
what cannot be clipped soundly is refused in one line naming the layer.  Hugging Face cases are skipped where
transformers / peft are not installed."""

import copy
import warnings

import pytest
import torch
from torch import nn

from benchmarks import user_models as U
from dpcalib.optim.clipping.calls import rebuild
from dpcalib.optim.engine import PrivateModule

N = 6


def _available(case) -> bool:
    return case.needs is None or (U.HF and (case.needs == "hf" or U.PEFT))


def _cast(obj, dtype):
    return rebuild(obj, lambda t: t.to(dtype) if t.is_floating_point() else t)


def _prepare(case):
    if not _available(case):
        pytest.skip(f"{case.needs}: transformers / peft not installed (pip install 'dpcalib[test]')")
    model = case.build()
    args, kwargs, y = case.batch(N, 0)
    if case.dtype != torch.float32:
        model = model.to(case.dtype)
        args, kwargs = _cast((args, kwargs), case.dtype)
    return model, (args, kwargs, y)


def _naive(case, model, batch, C):
    """sum_i clip(g_i, C), g_i by one float64 backward of record i alone (the trained parameters)."""
    m = copy.deepcopy(getattr(model, "_orig_mod", model)).double()
    ps = [p for p in m.parameters() if p.requires_grad]
    args, kwargs, y = batch
    total = 0.0
    for i in range(U.records_in(args, kwargs, case.dim)):
        a, k, t = U.one_record(args, kwargs, y, i, case.dim, case.packed)
        a, k = _cast((a, k), torch.float64)
        v = torch.cat([g.reshape(-1) for g in torch.autograd.grad(case.loss(m(*a, **k), t), ps)])
        total = total + v * min(1.0, C / float(v.norm()))
    return total


class Engine:
    """One PrivateModule of the case's model; the clipped sum of a batch through the user's forward and backward
    (``reduction="sum"``: the summed loss, ``loss_reduction="sum"``)."""

    def __init__(self, case, model, reduction="mean"):
        self.case, self.pm = case, PrivateModule(model, batch_first=case.dim == 0, loss_reduction=reduction)
        self.loss = case.loss if reduction == "mean" else U.summed(case.loss)

    def clipped(self, batch, C):
        args, kwargs, y = batch
        self.pm.clear()
        ctx = torch.autocast("cpu", dtype=self.case.autocast) if self.case.autocast else torch.autocast("cpu",
                                                                                                      enabled=False)
        with ctx:
            loss = self.loss(self.pm(*args, **kwargs), y)
        loss.backward()
        s = self.pm.captures[-1].clipped_sum(C)
        self.pm.clear()
        return s.to(torch.float64)


def _low(case) -> bool:
    return case.autocast is not None or case.dtype != torch.float32


@pytest.mark.parametrize("name", [c.name for c in U.CASES])
def test_the_engines_clipped_sum_is_the_naive_loops_and_one_record_moves_it_by_at_most_c(name):
    case = U.case(name)
    model, batch = _prepare(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the per-module vmap's ClippingFallbackWarning, transformers' notes
        eng = Engine(case, model)
        got = eng.clipped(batch, 0.5)
        ref = _naive(case, model, batch, 0.5)
        tol = 2e-2 if _low(case) else 1e-5
        assert float((got - ref).norm()) <= tol * float(ref.norm()), (name, float((got - ref).norm() / ref.norm()))
        # leave one out, and replace one by another record, at a C that clips every record.  In bfloat16 / float16 a
        # mean loss's 1/B is rounded in the backward, so every record's vector depends on the batch's size (docs:
        # the models users bring): those cases use the summed loss, which a record's vector does not depend on
        if _low(case):
            eng = Engine(case, model, "sum")
        C = 1e-3
        eps = torch.finfo(torch.float32).eps
        narrow = torch.finfo(next(model.parameters()).dtype).eps      # the release's one rounding to the parameters'
        full = eng.clipped(batch, C)
        worst = 0.0
        for i in (0, N - 1):
            for claim, index in ((C, [j for j in range(N) if j != i]),
                                 (2 * C, [(i + 1) % N if j == i else j for j in range(N)])):
                s2 = eng.clipped(U.subset(*batch, index, case.dim, N), C)
                move = float((full - s2).norm())
                slack = (64 * eps + narrow) * float(full.norm() + s2.norm())
                assert move <= claim * (1 + 1e-5) + slack, (name, i, move / claim)
                worst = max(worst, move / claim)
    assert worst > 0.3                           # the records reach the clip: the check is not vacuous


def test_a_sequence_first_model_given_as_batch_first_is_refused_in_one_line():
    """The sequence-first encoder fed [T, B, d] with T == B and the default batch_first=True: time steps are not
    records -- changing one moves every position after attention -- and the first forward says so, naming the
    layer and the option; with batch_first=False the same batch is the naive loop's (the matrix)."""
    case = U.case("seq-first encoder, T == B, attention converted")
    model, (args, kwargs, y) = _prepare(case)
    pm = PrivateModule(model)
    with pytest.raises(ValueError, match="batch_first=False") as e:
        pm(*args)
    assert "\n" not in str(e.value) and "enc.layers.0" in str(e.value)
    lstm = U.case("GRU sequence-first, T == B, initial state")
    model, (args, kwargs, y) = _prepare(lstm)
    with pytest.raises(ValueError, match="batch_first") as e:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            PrivateModule(model)(*args)
    assert "\n" not in str(e.value)


def test_what_cannot_be_clipped_is_refused_at_make_private_and_the_fixer_fixes_it():
    import dpcalib.optim as O
    from dpcalib.optim.clipping import ModuleValidator

    x, y = torch.randn(12, 3, 8, 8), torch.randint(0, 4, (12,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)

    def make(model):
        return O.PrivacyEngine().make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                              data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0)
    for model, needle in ((U.ResNet(), "n0 \\(BatchNorm2d\\): BatchNorm mixes the records"),
                          (nn.Sequential(nn.Embedding(10, 4, max_norm=1.0)), "0 \\(Embedding\\): max_norm"),
                          (nn.Sequential(nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4, affine=True, track_running_stats=True)),
                           "1 \\(InstanceNorm2d\\): track_running_stats=True")):
        assert not ModuleValidator.is_valid(model) and not O.PrivacyEngine().is_compatible(module=model)
        with pytest.raises(ValueError, match=needle) as e:
            make(model)
        assert "\n" not in str(e.value)
    fixed = O.PrivacyEngine.get_compatible_module(U.ResNet())
    assert isinstance(fixed.b1.n2, nn.GroupNorm) and ModuleValidator.validate(fixed) == []
    with pytest.raises(ValueError, match="max_norm"):
        ModuleValidator.fix_and_validate(nn.Sequential(nn.Embedding(10, 4, max_norm=1.0)))
    # the fixed ResNet: the naive loop's sum
    case = U.case("ResNet-like, GroupNorm")
    batch = case.batch(N, 0)
    got = Engine(case, fixed).clipped(batch, 0.5)
    ref = _naive(case, fixed, batch, 0.5)
    assert float((got - ref).norm()) <= 1e-5 * float(ref.norm())


def test_the_fixer_replaces_multihead_attention_by_the_same_function():
    from dpcalib.optim import LinearMultiheadAttention
    from dpcalib.optim.clipping import REPLACEMENTS, ModuleValidator

    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0).double()
    fixed = ModuleValidator.fix(model)
    assert isinstance(fixed.self_attn, LinearMultiheadAttention) and isinstance(model.self_attn, nn.MultiheadAttention)
    x = torch.randn(5, 3, 8, dtype=torch.float64)
    model.train(), fixed.train()
    torch.testing.assert_close(fixed(x), model(x), rtol=1e-12, atol=1e-12)
    assert len(REPLACEMENTS) == 3 and all(len(r) == 3 for r in REPLACEMENTS)
