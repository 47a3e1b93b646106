"""The float64 numerics every per-layer rule of the layers path shares: per-row dot products and
sums of squares accumulated in float64 (block by block, so that the float64 copies stay in cache),
the a-priori-inflated float32 upper bound of a row's sum of squares, and the per-record norms and
sums of matrices ``sum_k G_k^T A_k`` (norms by Gram products when cheaper, else of the matrices formed a
few records at a time; sums by one matrix product of the weighted signals).  The guarantee they serve: :mod:`.layers`."""

from __future__ import annotations

import functools
import math

import torch

__all__ = ["UPPER_MAX_COLS", "row_sq_upper"]


def work_dtype(*tensors) -> torch.dtype:
    """The dtype a rule forms per-record gradients in: the widest floating dtype of ``tensors``, and at least
    float32 -- so that under ``torch.autocast`` (a float32 input beside a bfloat16 output gradient) or with
    bfloat16 / float16 parameters every product a norm is measured on is formed in float32 or better (the
    inputs cast exactly; the sums are cast to the parameters' dtype once, at the end).

    Args:
        *tensors: tensors or None (None and integer tensors are skipped).

    Returns:
        ``torch.float32`` promoted with every floating dtype among ``tensors``.
    """
    out = torch.float32
    for t in tensors:
        if t is not None and t.is_floating_point():
            out = torch.promote_types(out, t.dtype)
    return out


def in_work(*tensors):
    """``tensors`` in their :func:`work_dtype` (integer tensors, e.g. ids, and None unchanged).

    Args:
        *tensors: tensors or None.

    Returns:
        A tuple of the same length: floating tensors cast to :func:`work_dtype`, the others as given.
    """
    dt = work_dtype(*tensors)
    return tuple(t.to(dt) if t is not None and t.is_floating_point() and t.dtype != dt else t for t in tensors)


#: rows per block of :func:`rowdots64` (the float64 copies of a block stay in cache)
ROW_BLOCK = 1024


def rowdots64(pairs) -> list:
    """``[sum_j x_ij y_ij for (x, y) in pairs]``: per-row dot products of ``[n, d]`` tensors accumulated in
    float64.  A pair of one tensor with itself is a squared norm (:func:`row_sq64`); other pairs are cast
    block by block (casting whole matrices to float64 is memory-bound; a block's copies stay in cache).

    Args:
        pairs: ``[(x, y)]``, tensors ``[n, d]`` (each pair of one width), every one with the same ``n``.

    Returns:
        One float64 tensor ``[n]`` per pair, in order.
    """
    n = pairs[0][0].shape[0]
    dev = pairs[0][0].device
    out = [row_sq64(x) if _same(x, y) else torch.empty(n, dtype=torch.float64, device=dev) for x, y in pairs]
    cross = [(o, x, y) for o, (x, y) in zip(out, pairs) if not _same(x, y)]
    for s in range(0, n if cross else 0, ROW_BLOCK):
        e = min(s + ROW_BLOCK, n)
        memo = {}

        def f64(t):
            k = id(t)
            if k not in memo:
                memo[k] = t[s:e].to(torch.float64)
            return memo[k]
        for o, x, y in cross:
            o[s:e] = torch.einsum("ij,ij->i", f64(x), f64(y))
    return out


#: rows at most this long take :func:`row_sq_upper`'s float32 reduction (its slack gamma_d <= 6.2e-5)
UPPER_MAX_COLS = 1024


_U32 = 2.0 ** -24          # unit roundoff of float32


_ETA32 = 2.0 ** -149       # smallest positive float32 (what an underflowing square may lose)


def row_sq_upper(x: torch.Tensor) -> torch.Tensor:
    """Per-row upper bounds, in float64, on the sums of squares of ``x [n, d]`` -- for the norm behind a
    clip factor, where only an upper bound is needed for soundness (clipping harder is safe).

    A float32 ``x`` with ``d <= UPPER_MAX_COLS`` is reduced in float32 (one pass, no float64 copy) and
    the result inflated by the a-priori bound on its rounding: squaring and summing ``d`` non-negative
    terms in ANY order gives ``s >= (1 - gamma_d) sum_j x_j^2 - d eta`` (Higham, Accuracy and Stability
    of Numerical Algorithms, Lemma 3.1 and eq. (4.4); ``gamma_d = d u / (1 - d u)``, ``u = 2^-24``,
    ``eta = 2^-149`` for squares that underflow), so ``(s + d eta) / (1 - gamma_d)`` is >= the exact
    sum.  The slack is at most ``(1 + gamma_d) / (1 - gamma_d) - 1 ~ 2 gamma_d`` relative on the sum
    (``gamma_d`` = 6.2e-5 at d = 1024): the norm is over-stated by at most about ``gamma_d``.  Rows
    whose float32 sum overflows, longer rows and other dtypes are summed exactly in float64
    (:func:`row_sq64`).

    Args:
        x: ``[n, d]`` tensor.

    Returns:
        ``[n]`` float64 upper bounds on the rows' sums of squares.
    """
    return rows_sq_upper([x])[0]


def rows_sq_upper(xs: list) -> torch.Tensor:
    """:func:`row_sq_upper` of several ``[n, d_j]`` tensors at once: ``[J, n]`` float64 (one float32
    reduction per tensor, the inflation and the overflow check on the stacked result: few small
    operations, which is what a millisecond step pays for).

    Args:
        xs: a list of ``[n, d_j]`` tensors, all with the same ``n``.

    Returns:
        ``[J, n]`` float64 upper bounds, row j for ``xs[j]``.
    """
    if not all(_bounded32(x) for x in xs):
        return torch.stack([row_sq_upper(x) if _bounded32(x) else row_sq64(x) for x in xs])
    s = torch.stack([(x * x).sum(1) for x in xs]).to(torch.float64)
    add, scale = _inflation(tuple(x.shape[1] for x in xs), s.device)
    out = torch.addcmul(add, s, scale)          # add + s * scale, >= (s + d eta) / (1 - gamma_d)
    if not bool(torch.isfinite(s).all()):                 # a float32 sum overflowed: those rows exactly
        for j, x in enumerate(xs):
            big = ~torch.isfinite(s[j])
            if bool(big.any()):
                out[j, big] = row_sq64(x[big])
    return out


@functools.lru_cache(maxsize=256)
def _inflation(widths: tuple, device) -> tuple:
    """``(add, scale)`` columns ``[J, 1]`` (float64) with ``add + s * scale >= (s + d eta) / (1 - gamma_d)``
    for each row length ``d`` of :func:`rows_sq_upper` -- the scale rounded UP, the added term too
    (kept per widths and device: a millisecond step should not rebuild two small tensors)."""
    scale = [math.nextafter(1.0 / (1.0 - d * _U32 / (1.0 - d * _U32)), math.inf) for d in widths]
    add = [math.nextafter(d * _ETA32 * s, math.inf) for d, s in zip(widths, scale)]
    return (torch.tensor(add, dtype=torch.float64, device=device)[:, None],
            torch.tensor(scale, dtype=torch.float64, device=device)[:, None])


def _bounded32(x: torch.Tensor) -> bool:
    """``x`` takes :func:`row_sq_upper`'s float32 reduction (float32 rows at most ``UPPER_MAX_COLS`` long)."""
    return x.dtype == torch.float32 and x.shape[1] <= UPPER_MAX_COLS


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    """``x`` and ``y`` are the same elements (the same tensor, or equal views of one storage)."""
    return x is y or (x.data_ptr() == y.data_ptr() and x.shape == y.shape and x.stride() == y.stride()
                      and x.dtype == y.dtype)


def gram_cheaper(T: int, din: int, dout: int) -> bool:
    """A linear layer's per-record norm by Gram products (``T (in + out)``) costs less than forming ``G^T A`` (``in out``).

    Args:
        T: positions per record.
        din: the layer's input width.
        dout: its output width.

    Returns:
        True when ``T * (din + dout) < din * dout``.
    """
    return T * (din + dout) < din * dout


#: the cost of a float64 product relative to a float32 one (CPU vector units: half the lanes)
F64_COST = 2
#: the cost of a formed gradient's float64 norm per element, in float32 multiply-adds (a cast and a
#: square, memory-bound)
NORM_COST = 8


def gram_norm_cheaper(T: int, din: int, dout: int, blocks: int = 1) -> bool:
    """Per-record norms of ``sum_k G_k^T A_k`` (``blocks`` terms of ``T`` positions) are cheaper by float64 Gram
    products (``F64_COST * (blocks T)^2 (in + out)`` per record) than by forming the matrices in float32 and
    taking their float64 norms (``blocks T in out + NORM_COST in out``).

    Args:
        T: positions per record in each term.
        din: the input width.
        dout: the output width.
        blocks: the number of terms ``k``, >= 1.

    Returns:
        True when the Gram products' estimated cost is the lower.
    """
    n = blocks * T
    return F64_COST * n * n * (din + dout) < (n + NORM_COST) * din * dout


def _weighted_sum(terms, f):
    """``sum_i f_i sum_k G_ik^T A_ik`` as ONE matrix product over every record's positions (``[out, B T] @
    [B T, in]``: no per-record matrix, no ``[B, out, in]`` intermediate)."""
    out = None
    for G, A in terms:
        B, T, dout = G.shape
        Gf = (G * f.to(G.dtype)[:, None, None]).reshape(B * T, dout)
        w = Gf.T @ A.reshape(B * T, A.shape[2])
        out = w if out is None else out + w
    return out


def _formed(terms, s, e):
    """``[e - s, out, in]``: records ``s:e``'s matrices ``sum_k G_k^T A_k`` (added in place: no copy)."""
    W = None
    for G, A in terms:
        w = torch.bmm(G[s:e].transpose(1, 2), A[s:e])
        W = w if W is None else W.add_(w)
    return W


def gram_block(terms):
    """``(norm2 [B] float64, sums(f) -> [out, in])`` of the per-record matrices ``sum_k G_k^T A_k``
    (``terms = [(G [B, T, out], A [B, T, in]), ...]``).  The norms by float64 Gram products when cheaper
    (:func:`gram_norm_cheaper`), otherwise from the per-record matrices formed in the working dtype a few
    records at a time, each block's float64 norms taken and the block dropped (the batch's ``[B, out, in]`` is
    never held: the step's memory stays that of the signals).  The sum, either way, is one matrix product of the
    signals weighted by the factors (:func:`_weighted_sum`).  Both norms are of the matrices ``sum_k G_ik^T A_ik`` of record i's own signals,
    up to a float64 rounding (Gram) or a float32 one relative to that record's products (formed), and the
    sum rounds in the working dtype relative to the summands, as any sum (:mod:`.paths`, the guarantee).

    Args:
        terms: ``[(G [B, T, out], A [B, T, in]), ...]``, every term with the same ``B`` and widths.

    Returns:
        ``(norm2, sums)``: the records' squared norms ``[B]`` (float64) and ``sums(f) -> [out, in]``, the
        matrices weighted by ``f [B]`` and summed.
    """
    G0, A0 = terms[0]
    B, T, din = A0.shape
    dout = G0.shape[2]
    if T == 1 and len(terms) == 1:
        gg, aa = rowdots64([(G0[:, 0], G0[:, 0]), (A0[:, 0], A0[:, 0])])
        n2 = gg * aa
        return n2, (lambda f: (G0[:, 0] * f.to(G0.dtype)[:, None]).T @ A0[:, 0])
    n2 = torch.zeros(B, dtype=torch.float64, device=A0.device)
    if gram_norm_cheaper(T, din, dout, len(terms)):
        step = max(1, CAST_ELEMS // max(T * (din + dout) * len(terms), 1))   # records per float64 block
        for s in range(0, B, step):
            c = [(G[s:s + step].to(torch.float64), A[s:s + step].to(torch.float64)) for G, A in terms]
            for i, (Gi, Ai) in enumerate(c):
                for j in range(i, len(c)):
                    Gj, Aj = c[j]
                    v = ((Ai @ Aj.transpose(1, 2)) * (Gi @ Gj.transpose(1, 2))).sum((1, 2))
                    n2[s:s + step] += v if i == j else 2.0 * v
    else:
        step = max(1, FORMED_ELEMS // max(din * dout, 1))                       # records per formed block
        for s in range(0, B, step):
            W = _formed(terms, s, s + step)
            n2[s:s + step] = row_sq64(W.reshape(W.shape[0], -1))
    return n2, (lambda f: _weighted_sum(terms, f))


#: elements per block of per-record matrices :func:`gram_block` forms at once (the block is dropped after its norms)
FORMED_ELEMS = 1 << 18


#: elements per float64 block of :func:`row_sq64` and of the Gram products (the copies stay in cache)
CAST_ELEMS = 1 << 18


def block_terms(b1: dict, b0: dict | None, rows: int, device) -> tuple:
    """``(norm2, sums)`` of parameters whose per-record gradients are sums over positions (:attr:`.rules.Rule.blocks`).

    A weight's block ``(G [B, T, out], A [B, T, in])`` is record i's ``G_i^T A_i`` (:func:`gram_block`), a bias's
    ``G [B, T, out]`` its ``sum_t G_it``; with ``b0`` (the same blocks at the other point) the difference
    ``dG^T A1 + G0^T (A1 - A0)``.

    Args:
        b1: ``{name: (G, A) or G}`` at the current point.
        b0: the same names at the other point, or None (the gradient).
        rows: the batch's records (the norms' length when ``b1`` is empty).
        device: the norms' device.

    Returns:
        ``(norm2, sums)``: the records' squared norms ``[B]`` (float64), and ``sums(f) -> {name: tensor}``
        the per-record gradients weighted by ``f [B]`` and summed (a weight ``[out, in]``, a bias ``[out]``).
    """
    norm2 = torch.zeros(rows, dtype=torch.float64, device=device)
    parts = {}
    for name, v in b1.items():
        if isinstance(v, tuple):
            G, A = v
            n2, parts[name] = gram_block([(G, A)] if b0 is None else [(G - b0[name][0], A), (b0[name][0], A - b0[name][1])])
        else:
            s = (v if b0 is None else v - b0[name]).sum(1)
            n2, parts[name] = row_sq64(s), (lambda f, s=s: (s * f.to(s.dtype)[:, None]).sum(0))
        norm2 = norm2 + n2
    return norm2, (lambda f: {k: fn(f) for k, fn in parts.items()})


def row_sq64(W: torch.Tensor) -> torch.Tensor:
    """Per-row sums of squares of ``W [B, m]`` in float64 (``vector_norm`` with a float64 accumulator,
    squared: relative error ~1e-16), block by block for large ``W`` -- blocks of whole rows, or of
    columns when a row alone is larger than a block (each block's float64 copy stays in cache; a
    whole-matrix cast is memory-bound).

    Args:
        W: ``[B, m]`` tensor.

    Returns:
        ``[B]`` float64 sums of squares.
    """
    B, m = W.shape
    if B * m <= CAST_ELEMS:
        return torch.linalg.vector_norm(W, dim=1, dtype=torch.float64).square()
    if m <= CAST_ELEMS:                      # many rows: blocks of whole rows
        rows = CAST_ELEMS // m
        return torch.cat([torch.linalg.vector_norm(W[r:r + rows], dim=1, dtype=torch.float64).square()
                          for r in range(0, B, rows)])
    out = torch.zeros(B, dtype=torch.float64, device=W.device)       # few, very long rows: blocks of columns
    cols = max(1, CAST_ELEMS // max(B, 1))
    for c in range(0, m, cols):
        out += torch.linalg.vector_norm(W[:, c:c + cols], dim=1, dtype=torch.float64).square()
    return out


def record_sq64(W: torch.Tensor) -> torch.Tensor:
    """Per-record sums of squares, in float64, of ``W [in, B, ...]`` (records on axis 1), cast block
    by block along axis 0 (each block's float64 copy stays in cache).

    Args:
        W: ``[in, B, ...]`` tensor, records on axis 1.

    Returns:
        ``[B]`` float64 sums of squares.
    """
    dims = (0,) + tuple(range(2, W.dim()))
    step = max(1, CAST_ELEMS // max(W[0].numel(), 1))
    out = torch.zeros(W.shape[1], dtype=torch.float64, device=W.device)
    for c in range(0, W.shape[0], step):
        out += torch.linalg.vector_norm(W[c:c + step], dim=dims, dtype=torch.float64).square()
    return out


def formed_terms(per_record, mod, a1, g1, a0=None, g0=None, want=None):
    """``(norm2, sums)`` of a rule that forms each record's gradient (``per_record(mod, a, g, want)``:
    name -> ``[B, ...]``): the squared norms in float64 and the weighted sums ``f -> {name: sum_b f_b
    per_b}``.  With a second point ``(a0, g0)`` the records' gradient differences.

    Args:
      per_record: the rule's ``(mod, a, g, want) -> {name: tensor [B, ...]}``.
      mod: the layer; a1, g1: its input and output gradient at the point; a0, g0: at the previous
        point, or None.
      want: the parameter names asked for (None: all).

    Returns:
      ``(norm2 [B] float64, sums)``.
    """
    per = per_record(mod, a1, g1, want)
    if a0 is not None:
        p0 = per_record(mod, a0, g0, want)
        per = {k: v - p0[k] for k, v in per.items()}
    B = g1.shape[0]
    norm2 = sum((row_sq64(v.reshape(B, -1)) for v in per.values()),
                torch.zeros(B, dtype=torch.float64, device=g1.device))
    return norm2, (lambda f: {k: torch.einsum("b,b...->...", f.to(v.dtype), v) for k, v in per.items()})

