"""The models of the per-sample clipping benchmarks and tests: the papers' MLP, a GroupNorm CNN
(ResNet-like, CIFAR-shaped), a plain Conv-GroupNorm CNN without residuals and a small transformer built from Embedding, Linear and LayerNorm.
Each comes with a per-example loss and a batch of inputs and targets."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as Fn


def mlp(d_in=54, width=256, classes=7, dtype=torch.float32, seed=0) -> nn.Sequential:
    """The papers' MLP (covtype-shaped, DIFF2 / DP-SRM): 54-256-256-7."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, classes)).to(dtype)


class Block(nn.Module):
    """conv-GroupNorm-ReLU-conv-GroupNorm plus a (strided 1x1 conv) shortcut: a ResNet basic block."""

    def __init__(self, c_in, c_out, stride, groups=8):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.gn1 = nn.GroupNorm(groups, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.gn2 = nn.GroupNorm(groups, c_out)
        self.short = nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False) if (stride != 1 or c_in != c_out) else None

    def forward(self, x):
        h = Fn.relu(self.gn1(self.conv1(x)))
        h = self.gn2(self.conv2(h))
        return Fn.relu(h + (x if self.short is None else self.short(x)))


class GroupNormCNN(nn.Module):
    """Three residual blocks 64-128-256 on 32x32x3 (CIFAR-shaped), GroupNorm, global pooling, Linear."""

    def __init__(self, widths=(64, 128, 256), classes=10, groups=8):
        super().__init__()
        self.stem = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        self.gn = nn.GroupNorm(groups, widths[0])
        blocks, c = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(Block(c, w, 1 if i == 0 else 2, groups))
            c = w
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        h = Fn.relu(self.gn(self.stem(x)))
        h = self.blocks(h)
        return self.head(h.mean((2, 3)))


class Attention(nn.Module):
    """Multi-head self-attention from four nn.Linear layers (what the layers path clips fast)."""

    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        B, T, d = x.shape
        def split(t):
            return t.reshape(B, T, self.h, d // self.h).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.h), dim=-1)
        return self.o((att @ v).transpose(1, 2).contiguous().reshape(B, T, d))


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.att, self.ln1 = Attention(d, heads), nn.LayerNorm(d)
        self.ff1, self.ff2, self.ln2 = nn.Linear(d, ff), nn.Linear(ff, d), nn.LayerNorm(d)

    def forward(self, x):
        x = self.ln1(x + self.att(x))
        return self.ln2(x + self.ff2(Fn.gelu(self.ff1(x))))


class SmallTransformer(nn.Module):
    """Embedding 5000 x 128 (+ learned positions as an Embedding), one encoder layer with 4 heads,
    mean pooling, a Linear classifier: the benchmark's text model (32 tokens)."""

    def __init__(self, vocab=5000, d=128, heads=4, ff=256, tokens=32, classes=2, layers=1):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d, padding_idx=0), nn.Embedding(tokens, d)
        self.layers = nn.Sequential(*(EncoderLayer(d, heads, ff) for _ in range(layers)))
        self.head = nn.Linear(d, classes)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device).expand_as(ids).contiguous()
        h = self.layers(self.tok(ids) + self.pos(pos))
        return self.head(h.mean(1))


class PlainCNN(nn.Module):
    """Conv (with bias) - GroupNorm - ReLU in three stages 64-128-256 (strided), no residuals, global
    pooling, a Linear classifier: the plain CIFAR-shaped CNN a user brings."""

    def __init__(self, widths=(64, 128, 256), classes=10, groups=8):
        super().__init__()
        layers, c = [], 3
        for i, w in enumerate(widths):
            layers += [nn.Conv2d(c, w, 3, stride=1 if i == 0 else 2, padding=1), nn.GroupNorm(groups, w), nn.ReLU()]
            c = w
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def ce_loss(out, y):
    """Per-example cross-entropy."""
    return Fn.cross_entropy(out, y, reduction="none")


def batch(kind: str, n: int, dtype=torch.float32, seed=0, small: bool = False):
    """``(x, y)`` for a model kind: "mlp", "cnn" or "transformer" (``small``: for :func:`model`'s small one)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "mlp":
        return torch.randn(n, 54, generator=g).to(dtype), torch.randint(0, 7, (n,), generator=g)
    if kind in ("cnn", "plaincnn"):
        return torch.randn(n, 3, 32, 32, generator=g).to(dtype), torch.randint(0, 10, (n,), generator=g)
    ids = torch.randint(1, 50 if small else 5000, (n, 32), generator=g)
    ids[:, -3:] = 0                                    # padding at the end of every sequence
    return ids, torch.randint(0, 2, (n,), generator=g)


def model(kind: str, dtype=torch.float32, seed=0, small: bool = False) -> nn.Module:
    """The benchmark model of a kind (``small``: narrower, for tests)."""
    torch.manual_seed(seed)
    if kind == "mlp":
        return mlp(width=32 if small else 256, dtype=dtype, seed=seed)
    if kind == "cnn":
        return (GroupNormCNN((8, 16, 16), groups=4) if small else GroupNormCNN()).to(dtype)
    if kind == "plaincnn":
        return (PlainCNN((8, 16, 16), groups=4) if small else PlainCNN()).to(dtype)
    return (SmallTransformer(vocab=50, d=16, heads=2, ff=32, tokens=32) if small else SmallTransformer()).to(dtype)
