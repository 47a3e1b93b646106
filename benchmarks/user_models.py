"""The models users bring, small: what tests/test_models_matrix.py checks against a naive float64 loop and
benchmarks/bench_user_models.py times beside Opacus.

Each :class:`Case` builds a model (seeded), a batch of ``n`` records (its inputs -- positional and keyword,
records along ``dim`` -- and the loss target), the loss users write for it (a mean over the records), and the
inputs of one record alone (for the naive loop).  Hugging Face models (BERT, GPT-2, ViT; full and LoRA by peft)
are built from tiny configs, no download; they are absent where transformers / peft are not installed
(:data:`HF`, :data:`PEFT`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as Fn
from torch.nn.utils.rnn import pack_sequence

try:
    import transformers as _hf  # noqa: F401
    HF = True
except ImportError:                         # pragma: no cover  (the test extra installs it)
    HF = False
try:
    import peft as _peft  # noqa: F401
    PEFT = True
except ImportError:                         # pragma: no cover
    PEFT = False

__all__ = ["Case", "CASES", "case", "HF", "PEFT", "one_record", "records_in", "subset", "summed"]


@dataclass
class Case:
    """``build() -> model``; ``batch(n, seed) -> (args, kwargs, target)``; ``loss(out, target)`` the batch's mean
    loss; ``dim``: where the inputs hold the records (``batch_first``); ``needs``: "hf", "peft" or None."""

    name: str
    build: Callable
    batch: Callable
    loss: Callable
    dim: int = 0
    needs: str | None = None
    autocast: torch.dtype | None = None
    dtype: torch.dtype = torch.float32
    packed: bool = False
    tags: tuple = field(default_factory=tuple)


def _seed(s):
    torch.manual_seed(s)


def _ce(out, y):
    return Fn.cross_entropy(out, y)


def _logits_ce(out, y):
    return Fn.cross_entropy(out.logits, y)


def summed(loss):
    """The summed version of a case's mean loss (None where the model computes its own loss)."""
    return {_ce: lambda out, y: Fn.cross_entropy(out, y, reduction="sum"),
            _logits_ce: lambda out, y: Fn.cross_entropy(out.logits, y, reduction="sum")}.get(loss)


def _hf_loss(out, y):
    return out.loss


# -- plain torch models --------------------------------------------------------------------------------
class SeqEncoder(nn.Module):
    """A sequence-first transformer encoder ([T, B, d] in) with a classifier on the mean over time."""

    def __init__(self, convert=False, layers=2):
        super().__init__()
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), layers,
                                         enable_nested_tensor=False)
        if convert:
            from dpcalib.optim import linear_attention
            linear_attention(self.enc)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.enc(x).mean(0))


class BatchEncoder(nn.Module):
    """Token ids -> embedding -> batch-first encoder layer (attention converted) -> classifier."""

    def __init__(self, vocab=20):
        super().__init__()
        from dpcalib.optim import linear_attention
        self.emb = nn.Embedding(vocab, 8, padding_idx=0)
        self.enc = linear_attention(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True))
        self.head = nn.Linear(8, 3)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids)).mean(1))


class Recurrent(nn.Module):
    """An RNN / LSTM / GRU over [B, T, d] or [T, B, d] or a PackedSequence, a classifier on the last state."""

    def __init__(self, kind="LSTM", layers=1, bidirectional=False, batch_first=True, nonlinearity="tanh", hx=False):
        super().__init__()
        cls = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN}[kind]
        extra = {"nonlinearity": nonlinearity} if kind == "RNN" else {}
        self.rnn = cls(5, 6, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, **extra)
        self.kind, self.hx = kind, hx
        d = 2 if bidirectional else 1
        self.init = nn.Linear(5, 6 * layers * d) if hx else None
        self.head = nn.Linear(6 * d, 3)

    def forward(self, x):
        hx = None
        if self.hx:
            first = x[:, 0] if self.rnn.batch_first else x[0]
            h = torch.tanh(self.init(first)).reshape(first.shape[0], -1, 6).transpose(0, 1).contiguous()
            hx = (h, torch.zeros_like(h)) if self.kind == "LSTM" else h
        out, _ = self.rnn(x, hx)
        if isinstance(out, nn.utils.rnn.PackedSequence):
            out, lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
            return self.head(out.sum(1) / lengths[:, None].to(out.dtype))
        return self.head(out.mean(1 if self.rnn.batch_first else 0))


class Tree(nn.Module):
    def __init__(self, trunk, width, pool):
        super().__init__()
        self.trunk, self.pool, self.head = trunk, pool, nn.Linear(width, 3)

    def forward(self, x):
        return self.head(self.trunk(x).mean(self.pool))


class Scale(nn.Module):
    """A custom module with its own elementwise parameters: ``x * scale + shift``."""

    def __init__(self, d):
        super().__init__()
        self.scale, self.shift = nn.Parameter(torch.linspace(0.5, 1.5, d)), nn.Parameter(torch.linspace(-0.1, 0.1, d))

    def forward(self, x):
        return x * self.scale + self.shift


class TiedLM(nn.Module):
    """Input embedding tied to the output layer (``head.weight is emb.weight``), a module called twice."""

    def __init__(self, vocab=16):
        super().__init__()
        self.emb, self.mix, self.head = nn.Embedding(vocab, 6), nn.Linear(6, 6), nn.Linear(6, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        h = torch.tanh(self.mix(torch.tanh(self.mix(self.emb(ids)))))
        return self.head(h.mean(1))[:, :3]


class ResBlock(nn.Module):
    def __init__(self, c, norm):
        super().__init__()
        self.c1, self.n1 = nn.Conv2d(c, c, 3, padding=1, bias=False), norm(c)
        self.c2, self.n2 = nn.Conv2d(c, c, 3, padding=1, bias=False), norm(c)

    def forward(self, x):
        return torch.relu(x + self.n2(self.c2(torch.relu(self.n1(self.c1(x))))))


class ResNet(nn.Module):
    """A small ResNet-like CNN (BatchNorm by default, as torchvision's: ModuleValidator.fix makes it GroupNorm)."""

    def __init__(self, width=8, norm=nn.BatchNorm2d):
        super().__init__()
        self.stem, self.n0 = nn.Conv2d(3, width, 3, padding=1, bias=False), norm(width)
        self.b1, self.b2 = ResBlock(width, norm), ResBlock(width, norm)
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        h = torch.relu(self.n0(self.stem(x)))
        return self.head(self.b2(self.b1(h)).mean((2, 3)))


def _gn(c):
    return nn.GroupNorm(math.gcd(4, c), c)


# -- batches ----------------------------------------------------------------------------------------------
def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _seq(n, seed, T=6, d=8, first=False, classes=3):
    g = _gen(seed)
    x = torch.randn(n, T, d, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return ((x.transpose(0, 1).contiguous() if first else x),), {}, y


def _ids(n, seed, T=7, vocab=20, classes=3):
    g = _gen(seed)
    x = torch.randint(1, vocab, (n, T), generator=g)
    x[:, -1] = 0
    return (x,), {}, torch.randint(0, classes, (n,), generator=g)


def _image(n, seed, shape=(4, 7, 6), classes=3):
    g = _gen(seed)
    return (torch.randn(n, *shape, generator=g),), {}, torch.randint(0, classes, (n,), generator=g)


def _packed(n, seed):
    g = _gen(seed)
    lengths = [2 + (7 * i + seed) % 5 for i in range(n)]
    seqs = [torch.randn(t, 5, generator=g) for t in lengths]
    return (pack_sequence(seqs, enforce_sorted=False),), {}, torch.randint(0, 3, (n,), generator=g)


def _hf_ids(n, seed, T=8, vocab=64, labels=None):
    g = _gen(seed)
    ids = torch.randint(3, vocab, (n, T), generator=g)
    kw = {"input_ids": ids, "attention_mask": torch.ones(n, T, dtype=torch.long)}
    y = torch.randint(0, 3, (n,), generator=g)
    if labels == "lm":
        kw["labels"] = ids
        return (), kw, None
    if labels == "cls":
        kw["labels"] = y
        return (), kw, None
    return (), kw, y


def _pixels(n, seed):
    g = _gen(seed)
    return (), {"pixel_values": torch.randn(n, 3, 8, 8, generator=g)}, torch.randint(0, 3, (n,), generator=g)


# -- Hugging Face ---------------------------------------------------------------------------------------
def _bert(num_labels=3):
    from transformers import BertConfig, BertForSequenceClassification
    _seed(0)
    return BertForSequenceClassification(BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32, num_labels=num_labels, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    _seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=2, n_head=2, n_positions=32, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, use_cache=False))


def _vit():
    from transformers import ViTConfig, ViTForImageClassification
    _seed(0)
    return ViTForImageClassification(ViTConfig(
        image_size=8, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def _lora(model, targets, save=None):
    from peft import LoraConfig, get_peft_model
    _seed(1)
    m = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets,
                                         modules_to_save=save))
    with torch.no_grad():                    # LoRA's B starts at zero: move it so that A's gradient is not zero
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.1)
    return m


def _frozen_base():
    _seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))
    for p in m[0].parameters():
        p.requires_grad_(False)
    m[2].weight.requires_grad_(False)          # a layer half frozen: its bias trained
    return m


def _mlp(d=6):
    _seed(0)
    return nn.Sequential(nn.Linear(d, 16), nn.GELU(), nn.Linear(16, 3))


def _conv_tree(*layers, width, pool):
    _seed(0)
    return Tree(nn.Sequential(*layers), width, pool)


def _prelu():
    _seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.PReLU(8), nn.Linear(8, 3))


def _compiled():
    _seed(0)
    return torch.compile(nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)))


def _built(f, *a, **k):
    def build():
        _seed(0)
        return f(*a, **k)
    return build


CASES = [
    # sequence-first and attention
    Case("seq-first encoder, T == B, nn.MultiheadAttention", _built(SeqEncoder), lambda n, s: _seq(n, s, T=n, first=True),
         _ce, dim=1, tags=("seq-first",)),
    Case("seq-first encoder, T == B, attention converted", _built(SeqEncoder, convert=True),
         lambda n, s: _seq(n, s, T=n, first=True), _ce, dim=1, tags=("seq-first",)),
    Case("seq-first encoder, T != B", _built(SeqEncoder, convert=True), lambda n, s: _seq(n, s, T=5, first=True), _ce,
         dim=1),
    Case("batch-first encoder with embedding (padding_idx)", _built(BatchEncoder), _ids, _ce),
    # recurrent
    Case("LSTM, 2 layers, bidirectional, batch_first", _built(Recurrent, "LSTM", 2, True), lambda n, s: _seq(n, s, d=5),
         _ce),
    Case("LSTM sequence-first", _built(Recurrent, "LSTM", 1, False, batch_first=False),
         lambda n, s: _seq(n, s, d=5, first=True), _ce, dim=1),
    Case("GRU, packed sequences, bidirectional", _built(Recurrent, "GRU", 1, True), _packed, _ce, packed=True),
    Case("LSTM, packed sequences, 2 layers", _built(Recurrent, "LSTM", 2, False), _packed, _ce, packed=True),
    Case("RNN tanh, initial state from the record", _built(Recurrent, "RNN", 1, False, hx=True),
         lambda n, s: _seq(n, s, d=5), _ce),
    Case("RNN relu, 2 layers, sequence-first, bidirectional", _built(Recurrent, "RNN", 2, True, batch_first=False,
                                                                      nonlinearity="relu"),
         lambda n, s: _seq(n, s, d=5, first=True), _ce, dim=1),
    Case("GRU sequence-first, T == B, initial state", _built(Recurrent, "GRU", 1, False, batch_first=False, hx=True),
         lambda n, s: _seq(n, s, T=n, d=5, first=True), _ce, dim=1, tags=("seq-first",)),
    # convolutions and norms
    Case("instance norm (affine)", lambda: _conv_tree(nn.Conv2d(4, 6, 3, padding=1), nn.InstanceNorm2d(6, affine=True),
                                                      nn.ReLU(), width=6, pool=(2, 3)), _image, _ce),
    Case("conv3d, stride and padding", lambda: _conv_tree(nn.Conv3d(2, 4, 3, stride=2, padding=1), nn.ReLU(),
                                                          nn.Conv3d(4, 4, (1, 2, 2), groups=2), width=4, pool=(2, 3, 4)),
         lambda n, s: _image(n, s, (2, 5, 6, 5)), _ce),
    Case("transposed convolutions 1-d and 2-d", lambda: _conv_tree(
        nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
        nn.ConvTranspose2d(6, 4, 2, groups=2, dilation=2, bias=False), width=4, pool=(2, 3)), _image, _ce),
    Case("conv1d reflect padding, transposed 1-d", lambda: _conv_tree(
        nn.Conv1d(4, 6, 3, padding=1, padding_mode="reflect"), nn.ReLU(), nn.ConvTranspose1d(6, 4, 3, stride=2),
        width=4, pool=(2,)), lambda n, s: _image(n, s, (4, 9)), _ce),
    Case("ResNet-like, GroupNorm", _built(ResNet, 8, _gn), lambda n, s: _image(n, s, (3, 8, 8), 4), _ce),
    Case("RMSNorm and LayerNorm without bias", lambda: _conv_tree(nn.Linear(8, 8), nn.RMSNorm(8), nn.GELU(),
                                                                  nn.LayerNorm(8, bias=False), width=8, pool=(1,)),
         _seq, _ce),
    # parameters in other places
    Case("tied embedding and output layer, a layer called twice", _built(TiedLM), lambda n, s: _ids(n, s, vocab=16), _ce),
    Case("custom module with elementwise parameters", lambda: _conv_tree(nn.Linear(8, 8), Scale(8), nn.Tanh(),
                                                                         width=8, pool=(1,)), _seq, _ce),
    Case("PReLU (per-module vmap)", _prelu,
         lambda n, s: _image(n, s, (6,)), _ce),
    Case("frozen first layer, a layer half frozen", _frozen_base, lambda n, s: _image(n, s, (6,)), _ce),
    # precision and compilation
    Case("bf16 autocast MLP", _mlp, lambda n, s: _image(n, s, (6,)), _ce, autocast=torch.bfloat16),
    Case("bf16 autocast encoder, attention converted", _built(BatchEncoder), _ids, _ce, autocast=torch.bfloat16),
    Case("bf16 autocast RNN", _built(Recurrent, "RNN", 1, True), lambda n, s: _seq(n, s, d=5), _ce,
         autocast=torch.bfloat16),
    Case("bf16 parameters, GroupNorm CNN", lambda: _conv_tree(nn.Conv2d(4, 8, 3, padding=1), nn.GroupNorm(2, 8),
                                                              nn.ReLU(), width=8, pool=(2, 3)), _image, _ce,
         dtype=torch.bfloat16),
    Case("fp16 autocast CNN", lambda: _conv_tree(nn.Conv2d(4, 6, 3, padding=1), nn.GroupNorm(2, 6), nn.ReLU(),
                                                width=6, pool=(2, 3)), _image, _ce, autocast=torch.float16),
    Case("torch.compile MLP", _compiled, lambda n, s: _image(n, s, (6,)), _ce),
    # Hugging Face (built from configs, no download)
    Case("HF BERT, logits and a loss", _bert, _hf_ids, _logits_ce, needs="hf"),
    Case("HF BERT, labels: the model's loss", _bert, lambda n, s: _hf_ids(n, s, labels="cls"), _hf_loss, needs="hf"),
    Case("HF BERT LoRA (peft)", lambda: _lora(_bert(), ["query", "value"], ["classifier"]), _hf_ids, _logits_ce,
         needs="peft"),
    Case("HF GPT-2 (tied lm_head, Conv1D)", _gpt2, lambda n, s: _hf_ids(n, s, labels="lm"), _hf_loss, needs="hf"),
    Case("HF GPT-2 LoRA (peft)", lambda: _lora(_gpt2(), ["c_attn"]), lambda n, s: _hf_ids(n, s, labels="lm"), _hf_loss,
         needs="peft"),
    Case("HF ViT", _vit, _pixels, _logits_ce, needs="hf"),
    Case("HF ViT LoRA (peft)", lambda: _lora(_vit(), ["q_proj", "v_proj"], ["classifier"]), _pixels, _logits_ce,
         needs="peft"),
    Case("HF BERT, bf16 autocast", _bert, _hf_ids, _logits_ce, needs="hf", autocast=torch.bfloat16),
]


def case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


def records_in(args, kwargs, dim):
    """The batch's records: of its first tensor (or PackedSequence)."""
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, nn.utils.rnn.PackedSequence):
            return int(a.batch_sizes[0])
        if isinstance(a, torch.Tensor):
            return int(a.shape[dim])
    raise ValueError("no tensor input")


def one_record(args, kwargs, target, i, dim, packed=False):
    """Record ``i`` alone: every input with the batch's records along ``dim`` cut to it (a PackedSequence: its
    sequence ``i``), the target's entry."""
    n = records_in(args, kwargs, dim)

    def cut(t):
        if isinstance(t, nn.utils.rnn.PackedSequence):
            seqs = nn.utils.rnn.unpack_sequence(t)
            return pack_sequence([seqs[i]])
        if isinstance(t, torch.Tensor) and t.dim() > dim and t.shape[dim] == n:
            return t.narrow(dim, i, 1)
        return t
    return (tuple(cut(a) for a in args), {k: cut(v) for k, v in kwargs.items()},
            None if target is None else target[i:i + 1])


def subset(args, kwargs, target, index, dim, n=None):
    """The batch's records ``index`` (a list; repeats and reorders allowed) along ``dim`` (a PackedSequence: those
    sequences); inputs without the records' dimension unchanged."""
    n = records_in(args, kwargs, dim) if n is None else n
    idx = torch.as_tensor(index, dtype=torch.long)

    def cut(t):
        if isinstance(t, nn.utils.rnn.PackedSequence):
            seqs = nn.utils.rnn.unpack_sequence(t)
            return pack_sequence([seqs[i] for i in index], enforce_sorted=False)
        if isinstance(t, torch.Tensor) and t.dim() > dim and t.shape[dim] == n:
            return t.index_select(dim, idx)
        return t
    return (tuple(cut(a) for a in args), {k: cut(v) for k, v in kwargs.items()},
            None if target is None else target[idx])
