"""The record-mixing check of the engine's module (dpcalib.optim.engine.PrivateModule, issue 72): a layer that mixes
the records of a batch is refused (an InputError, one line naming the layer) before any batch it mixes is
released -- however weakly it mixes (a mean over the batch weighted 1e-6), and also when it mixes only in batches
larger than the first -- and every batch that is released moves by at most C when one of its real records is left
out.  The probes run where the module text says (the first batch, every batch larger than those probed, the
2^j-th batch), leave the run's randomness alone, and refuse no real model (tests/test_models_matrix.py)."""

import copy
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as Fn

from dpcalib.accountant.validation import InputError
from dpcalib.optim.engine import PrivateModule

C = 1e-2


class Mix(nn.Module):
    """``x + w * mean over the batch`` on batches of more than ``above`` records (``detach``: no gradient through the
    mean, so no backward probe sees it)."""

    def __init__(self, w=1e-6, above=0, detach=False):
        super().__init__()
        self.w, self.above, self.detach = w, above, detach

    def forward(self, x):
        if x.shape[0] <= self.above:
            return x
        m = x.mean(0, keepdim=True)
        return x + self.w * (m.detach() if self.detach else m)


class Scaled(nn.Module):
    """A trained layer (served by the per-module vmap rule) whose own output mixes the batch weakly (no gradient
    through the mean: the backward probe does not see it)."""

    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(torch.ones(16))

    def forward(self, x):
        return x * self.s + 1e-6 * x.mean(0, keepdim=True).detach()


class Later(nn.Module):
    """Mixes from its ``start``-th call on (a switch the model flips during the run)."""

    def __init__(self, start):
        super().__init__()
        self.start, self.calls = start, 0

    def forward(self, x):
        self.calls += 1
        return x + x.mean(0, keepdim=True) if self.calls >= self.start else x


def _mlp(*front, back=()):
    torch.manual_seed(0)
    return nn.Sequential(*front, nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3), *back)


def _batch(n, seed, big=None):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)
    if big is not None:
        x[0] = big                             # one record far out: it moves a mixed batch the most
    return x, y


def _released(pm, x, y):
    """The clipped sum the engine's step takes after the user's forward and backward (float64)."""
    pm.clear()
    Fn.cross_entropy(pm(x), y).backward()
    s = pm.captures[-1].clipped_sum(C)
    pm.clear()
    return s.to(torch.float64)


def _run(pm, batches):
    """Each batch released (and each of its records left out in turn, through the same module), until the first
    refusal: ``(worst leave-one-out move / C over the released batches, the refusal or None, batches released)``."""
    worst, done = 0.0, 0
    for x, y in batches:
        try:
            full = _released(pm, x, y)
            for i in range(x.shape[0]):
                keep = [j for j in range(x.shape[0]) if j != i]
                s = _released(pm, x[keep], y[keep])
                slack = 64 * torch.finfo(torch.float32).eps * float(full.norm() + s.norm())
                worst = max(worst, (float((full - s).norm()) - slack) / C)
        except InputError as e:
            return worst, e, done
        done += 1
    return worst, None, done


def _one_line(e, *names):
    assert e is not None and "\n" not in str(e), e
    assert any(n in str(e) for n in names), str(e)


@pytest.mark.parametrize("where", ["before the first layer", "inside a trained layer", "after the last layer"])
def test_a_weak_mean_over_the_batch_is_refused_before_its_first_release(where):
    """``x + 1e-6 * x.mean(0)``: a record 3e7 away from the others moves each of them by ~5, and the release by
    more than C when it is left out (3.12 C before the first layer, 2.94 C inside one, when the probe's tolerance
    was 1e-4 of the values); the float64 probe sees the mix on the first, ordinary batch (~1e-7 of the values,
    10^7 times its tolerance) and refuses the run there, before any release."""
    model = {"before the first layer": _mlp(Mix()),
             "after the last layer": _mlp(back=(Mix(detach=True),))}.get(where)
    if model is None:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 16), Scaled(), nn.Tanh(), nn.Linear(16, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # Scaled: the per-module vmap rule's ClippingFallbackWarning
        pm = PrivateModule(model)
        worst, refused, done = _run(pm, [_batch(6, 1), _batch(6, 2, big=3e7)])
    assert done == 0 and worst <= 1 + 1e-5, (where, done, worst)
    _one_line(refused, "1 (Linear)", "1 (Scaled)", "its output")
    assert "mixes the records" in str(refused)
    with pytest.raises(InputError, match="mixes the records"):    # and it stays refused
        pm(_batch(6, 3)[0])


def test_a_mean_over_batches_of_more_than_8_is_refused_at_the_first_such_batch():
    """Batches of 6 are not mixed, batches of 10 are: each batch larger than every batch probed so far is probed
    again, before its forward returns -- the batches of 6 are released (and move by at most C), the batch of 10
    never (it moved by 2.68 C when it was: the check ran on the first batch only)."""
    pm = PrivateModule(_mlp(Mix(1.0, above=8)))
    worst, refused, done = _run(pm, [_batch(6, 1), _batch(6, 2), _batch(10, 3, big=30.0)])
    assert done == 2 and worst <= 1 + 1e-5, (done, worst)
    _one_line(refused, "1 (Linear)")
    assert "batch of 10" in str(refused)


def test_the_engines_run_stops_at_the_forward_of_the_first_mixed_batch():
    """Through make_private's module and optimizer: the steps on the batches of 6 run, the forward of the batch of
    10 raises, and no step releases it."""
    import dpcalib.optim as O

    model = _mlp(Mix(1.0, above=8))
    x, y = _batch(24, 0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=6)
    m, opt, _ = O.PrivacyEngine().make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                               data_loader=loader, noise_multiplier=1.0, max_grad_norm=C, seed=0,
                                               poisson_sampling=False)
    steps = []
    opt.attach_step_hook(lambda o: steps.append(1))
    with pytest.raises(InputError, match="mixes the records") as e:
        for n in (6, 6, 10, 6):
            opt.zero_grad()
            Fn.cross_entropy(m(x[:n]), y[:n]).backward()
            opt.step()
    assert len(steps) == 2 and "\n" not in str(e.value)


def test_a_model_that_starts_mixing_later_is_refused_at_the_next_probed_batch():
    """The 2^j-th batch is probed whatever its size: a layer that starts mixing at its 8th call (the probes' own
    calls counted: the first batch's survey, probe and forward are 4, the second's probe and forward 3) mixes the
    3rd batch unseen -- the limit the docs state: a batch between two probed ones is not checked -- and is refused
    at the 4th, the next probed one, before its forward returns."""
    pm = PrivateModule(_mlp(Later(start=8)))
    for k in range(1, 4):
        _released(pm, *_batch(6, k))
    assert pm.probes == 2                    # batches 1 and 2
    with pytest.raises(InputError, match="batch of 6"):
        _released(pm, *_batch(6, 4))


def test_the_probes_run_on_the_first_larger_and_2_to_the_j_th_batches_and_leave_the_randomness_alone():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.5), nn.Linear(16, 3))
    pm = PrivateModule(model)
    expect = []
    for k, n in enumerate((6, 1, 6, 6, 6, 5, 7, 7, 3, 6, 6)):
        before = pm.probes
        x = _batch(n, k)[0]
        torch.manual_seed(k)
        out = pm(x)
        torch.manual_seed(k)
        ref = model(x)                        # the same dropout masks: the probe restored the generator
        assert torch.equal(out, ref), k
        pm.clear()
        expect.append(pm.probes - before)
    # batches of two records or more, counted 1..10: probed at 1 (first), 2, 4, 8 (2^j), and 6 (7 records > 6)
    assert expect == [1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0], expect


def test_real_layers_are_not_refused_by_the_exact_probe_at_growing_batches():
    """Convolutions, group and layer norm, embeddings, a recurrent layer and attention from Linear layers, probed at
    every batch (each larger than the last): no record but the changed one moves by a single ulp."""
    from tests.test_clipping_layers import KINDS, _data

    for name in ("conv2d stride/padding/groups/dilation", "groupnorm", "layernorm", "embedding with padding_idx",
                 "attention from Linear layers"):
        model, kind = KINDS[name]
        pm = PrivateModule(copy.deepcopy(model))
        for n in (2, 3, 5):
            x, y = _data(kind, n, torch.float32, seed=n)
            _released(pm, x, y)
        assert pm.probes == 3, name
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 5, batch_first=True)
    pm = PrivateModule(lstm)
    for n in (2, 4):
        pm(torch.randn(n, 3, 4))[0].sum().backward()
        pm.clear()
    assert pm.probes == 2


def test_a_packed_sequence_output_is_not_read_as_records():
    """The model's outputs are held to the probe's rule, but a ``PackedSequence``'s rows are time steps of sorted
    sequences: with a hidden size equal to the batch's 6 sequences its data must not pass for records."""
    torch.manual_seed(0)
    pm = PrivateModule(nn.LSTM(4, 6))
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randn(n, 4, generator=g) for n in (5, 3, 4, 2, 5, 1)]
    out, (h, _) = pm(nn.utils.rnn.pack_sequence(seqs, enforce_sorted=False))
    assert pm.probes == 1 and out.data.shape == (20, 6) and h.shape == (1, 6, 6)


class Cast(nn.Module):
    """A layer that computes in float32 whatever its input: the float64 probe cannot run it."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 16)

    def forward(self, x):
        return self.lin(x.float())


def test_a_model_that_cannot_run_in_float64_is_probed_in_its_own_dtype_and_told():
    torch.manual_seed(0)
    model = nn.Sequential(Cast(), nn.Tanh(), nn.Linear(16, 3))
    pm = PrivateModule(model)
    with pytest.warns(UserWarning, match="record probe"):
        _released(pm, *_batch(6, 1))
    torch.manual_seed(0)
    pm = PrivateModule(nn.Sequential(Mix(1e-3), Cast(), nn.Tanh(), nn.Linear(16, 3)))
    with pytest.warns(UserWarning, match="record probe"), pytest.raises(InputError, match="mixes the records"):
        _released(pm, *_batch(6, 1))


def test_per_layer_clipping_refuses_a_weak_mixer_and_one_that_mixes_only_larger_batches():
    """clipping='per_layer' compares each record's slice of the batch's output with its own output, in float64 to
    1e-10 of the values (it was 1e-4, on the first batch only): the 1e-6 mean is refused at the first batch, the
    mean over batches of more than 8 at the first batch of 10, and then at every batch."""
    from dpcalib.optim.engine.perlayer import PerLayerModule

    def forward(pm, n, seed):
        x, y = _batch(n, seed)
        Fn.cross_entropy(pm(x), y).backward()
        pm.clear()

    pm = PerLayerModule(_mlp(Mix()), [1.0] * 4)
    with pytest.raises(InputError, match="mixed") as e:
        forward(pm, 6, 1)
    assert "\n" not in str(e.value)
    pm = PerLayerModule(_mlp(Mix(1.0, above=8)), [1.0] * 4)
    forward(pm, 6, 1)
    forward(pm, 6, 2)
    with pytest.raises(InputError, match="on a batch of 10 .* mixed"):
        forward(pm, 10, 3)
    with pytest.raises(InputError, match="mixed"):
        forward(pm, 6, 4)


def test_the_one_pass_answer_is_the_elementwise_one():
    """The probe's comparison first asks whether the other records are bit for bit the same (one pass); it must
    answer as the elementwise rule (moved by more than FORWARD_ULPS ulps of the largest value) on every case:
    unchanged, changed at record 0 only, a move below and above the margin elsewhere, NaN and infinities, in
    float64, float32 and integers, along each dimension."""
    from dpcalib.optim.clipping.records import FORWARD_ULPS, moved_only_at_first, moves, only_at

    g = torch.Generator().manual_seed(3)
    cases = 0
    for dtype in (torch.float64, torch.float32, torch.int64):
        for d in (0, 1, 2):
            for change in ("none", "first", "tiny", "large", "nan", "inf", "nan-both"):
                t0 = (torch.randn(4, 5, 6, generator=g) * 10).to(dtype)
                t1 = t0.clone()
                at_first = [slice(None)] * 3
                at_first[d] = 0
                other = [slice(None)] * 3
                other[d] = 2
                if change == "first":
                    t1[tuple(at_first)] += 7
                elif change == "tiny" and dtype.is_floating_point:
                    eps = torch.finfo(dtype).eps
                    t1[tuple(other)] += float(t0.abs().max()) * eps * FORWARD_ULPS / 4
                elif change == "large":
                    t1[tuple(other)] += 3
                elif change in ("nan", "nan-both") and dtype.is_floating_point:
                    t1[tuple(other)] = float("nan")
                    if change == "nan-both":
                        t0[tuple(other)] = float("nan")
                elif change == "inf" and dtype.is_floating_point:
                    t0[tuple(other)] = t1[tuple(other)] = float("inf")
                want = only_at(moves(t0, t1), d, 0)
                assert moved_only_at_first(t0, t1, d) == want, (dtype, d, change)
                cases += 1
    assert cases == 63
