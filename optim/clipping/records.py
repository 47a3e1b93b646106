"""Which dimension of each layer's input and output holds the records: known, never guessed.

The per-layer rules need, for every call of a module that owns parameters, the dimension along which its input
``a`` and its output gradient ``g`` index the records of the batch.  The model says where the batch's records
are in its own input (``batch_first``, Opacus's meaning: ``[B, ...]`` when True, ``[T, B, ...]`` when False; a
``PackedSequence`` says it itself); every layer's dimension is then DETERMINED by two probes (:func:`resolve`)
on the first batch with at least two records, and checked again by the same probes on later batches
(:mod:`dpcalib.optim.engine.module` says which):

* **forward**: the batch with record 0 changed (:func:`perturbed`) is run again, on the same path (in float64
  where the model runs in it); along a layer's record dimension its input and output may change at index 0
  only (:func:`moves`: by more than a few float ulps) -- a layer that sees time steps as records (a
  sequence-first transformer fed as batch-first) sees one time step move every position after attention, and
  a layer after a weak mean over the batch (``x + 1e-6 * x.mean(0)``) sees every record move by ~1e-7;
  the model's own outputs are held to the same rule (:func:`mixed_output`);
* **backward**: a loss on the last record's outputs alone is back-propagated; along a layer's record dimension
  its output gradient must be exactly zero at every other index -- a layer whose output is shared by every
  record (a table looked up with no record dimension) gets gradient from all of them.

A layer's candidates are the dimensions of its input of the batch's size -- a convolution's and a group or
instance norm's is 0, a recurrent layer's follows its own ``batch_first`` -- preferring the model's.  Exactly the
candidates both probes accept remain; where none remains, or several remain and the model's is not among them,
the run is refused in one line naming the layer, what moved and the option (``batch_first``).
"""

from __future__ import annotations

import torch
from torch import nn

from ...accountant.validation import InputError
from .rules import rule_for

__all__ = ["records_of", "perturbed", "resolve", "check_rows", "layout_of", "last_record_loss", "mixed_output",
           "ProbeSchedule", "FORWARD_ULPS"]

#: a forward value moves when it changes by more than this many ulps of its dtype times the tensor's largest
#: magnitude.  Both forwards of a probe run the same kernels on the same shapes, so on the CPU every record but
#: the changed one comes out bit for bit the same (every model of tests/test_models_matrix.py: 0 ulps); the
#: margin is for kernels whose order of accumulation may vary between calls (atomics on a GPU).  In float64 it
#: is 3.6e-15 of the values: a mean over the batch weighted 1e-6 moves the others by ~10^7 times more
FORWARD_ULPS = 16


def records_of(x, dim: int) -> int:
    """The batch's records: ``x.shape[dim]``, or a ``PackedSequence``'s sequences.

    Args:
        x: the model's input, a tensor or a ``PackedSequence``.
        dim: the dimension that holds the records (0: ``batch_first``).

    Returns:
        The number of records.

    Raises:
        InputError: if the tensor has no dimension ``dim``.
    """
    if isinstance(x, nn.utils.rnn.PackedSequence):
        return int(x.batch_sizes[0]) if x.batch_sizes.numel() else 0
    if x.dim() <= dim:
        raise InputError(f"the module's input of shape {tuple(x.shape)} is not allowed with batch_first="
                         f"{dim == 0}: it has no dimension {dim} to hold the records.")
    return int(x.shape[dim])


def perturbed(x, dim: int):
    """``x`` with record 0 changed (floating: ``-1.5 x + 1``; ids: another record's, or the smallest and largest id
    swapped; a ``PackedSequence``: its sequence 0), every other record the same; None when nothing changes.

    Args:
        x: a tensor or a ``PackedSequence`` (not modified).
        dim: the tensor's record dimension.

    Returns:
        A changed copy, or None when every id is the same (nothing to change).
    """
    if isinstance(x, nn.utils.rnn.PackedSequence):
        data = x.data.clone()
        s0 = int(x.unsorted_indices[0]) if x.unsorted_indices is not None else 0
        offsets = torch.cumsum(x.batch_sizes, 0) - x.batch_sizes
        rows = [int(o) + s0 for o, b in zip(offsets.tolist(), x.batch_sizes.tolist()) if s0 < b]
        new = perturbed(data[rows].unsqueeze(0), 0)
        if new is None:
            return None
        data[rows] = new[0]
        return nn.utils.rnn.PackedSequence(data, x.batch_sizes, x.sorted_indices, x.unsorted_indices)
    y = x.clone()
    r0 = y.select(dim, 0)
    if x.is_floating_point() or x.is_complex():
        r0.mul_(-1.5).add_(1.0)
        return y
    n = x.shape[dim]
    for j in range(1, n):
        other = x.select(dim, j)
        if not torch.equal(other, r0):
            r0.copy_(other)
            return y
    lo, hi = x.min(), x.max()
    if torch.equal(lo, hi):
        return None
    r0.copy_(torch.where(r0 == lo, hi, lo))
    return y


def moves(t0, t1):
    """Elementwise: where the forward value moved.

    Args:
        t0: the value in the base forward.
        t1: the same value in the forward of the changed batch.

    Returns:
        A boolean tensor: for a floating tensor, moved by more than ``FORWARD_ULPS`` ulps of its dtype times
        ``t0``'s largest magnitude (a NaN where the other is not: moved; NaN in both, or the same infinity: not);
        otherwise any difference.
    """
    if t0.is_floating_point() and t0.numel():
        a, b = t0.detach(), t1.detach()
        scale = torch.nan_to_num(a.abs(), nan=0.0, posinf=0.0).amax()      # a tensor: no host sync
        tol = scale * (FORWARD_ULPS * torch.finfo(a.dtype).eps)
        return ~((b - a).abs() <= tol) & (a != b) & ~(a.isnan() & b.isnan())
    return t0 != t1


def only_at(mask, d: int, index: int) -> bool:
    """``mask`` is False at every index along ``d`` but ``index``.

    Args:
        mask: a boolean tensor.
        d: the dimension to look along.
        index: the index allowed to be True.

    Returns:
        True when no element at another index along ``d`` is True (a 0-d or all-False mask: True).
    """
    if mask.dim() == 0 or not bool(mask.any()):
        return True
    per = mask.movedim(d, 0).reshape(mask.shape[d], -1).any(1)
    per[index] = False
    return not bool(per.any())


def moved_only_at_first(t0, t1, d: int) -> bool:
    """No value of ``t1`` moved from ``t0`` (:func:`moves`) at an index along ``d`` but 0: :func:`only_at` of
    :func:`moves`, answered in one pass where the other records are bit for bit the same -- the common case (on
    the CPU every model of tests/test_models_matrix.py: 0 ulps), and then exact, since a value that did not
    change did not move.

    Args:
        t0: the value in the base forward.
        t1: the same value in the forward of the changed batch.
        d: the record dimension to look along.

    Returns:
        A bool.
    """
    if t0.shape == t1.shape and 0 <= d < t0.dim() and t0.shape[d] > 1 and t0.dtype == t1.dtype \
            and torch.equal(t0.narrow(d, 1, t0.shape[d] - 1), t1.narrow(d, 1, t1.shape[d] - 1)):
        return True
    return only_at(moves(t0, t1), d, 0)


def candidates(t, rows: int, prefer: int, fixed=None) -> list:
    """The dims of ``t`` of size ``rows`` (``fixed``: that one only), ``prefer`` first.

    Args:
        t: a tensor.
        rows: the batch's records.
        prefer: the dimension to put first (the model's).
        fixed: the only dimension allowed (the layer's own), or None.

    Returns:
        The list of dimensions.
    """
    if fixed is not None:
        return [fixed] if t.dim() > fixed and t.shape[fixed] == rows else []
    order = [prefer] + [d for d in range(t.dim()) if d != prefer]
    return [d for d in order if d < t.dim() and t.shape[d] == rows]


def last_record_loss(out, dim: int, rows: int):
    """A loss on the last record's outputs alone (a fixed non-uniform weighting of every floating output with the
    record dimension), or None when no output has one.

    Args:
        out: the forward's output (any structure of tensors).
        dim: the record dimension.
        rows: the batch's records.

    Returns:
        A scalar tensor, or None.
    """
    from .calls import leaves

    total = None
    for t in leaves(out):
        if t.is_floating_point() and t.requires_grad and t.dim() > dim and t.shape[dim] == rows:
            r = t.select(dim, rows - 1)
            w = torch.linspace(1.0, 2.0, r.numel(), dtype=r.dtype, device=r.device).reshape(r.shape)
            v = (r * w).sum()
            total = v if total is None else total + v
    return total


class ProbeSchedule:
    """The batches of two records or more the record probe runs on: the first; every one larger than all those
    probed so far in some dimension (more records, longer sequences; or of another rank); and the 2^j-th
    (1, 2, 4, 8, ...) -- about ``2 log2(steps)`` in a run.  A batch between two probed ones is not probed.
    """

    def __init__(self):
        self.largest = None               # each dimension's largest over the batches probed
        self.seen = 0                     # batches of two records or more counted

    def due(self, shape: tuple, first: bool = False):
        """Count a batch and say whether it is probed.

        Args:
            shape: the batch's shape (any fixed order of its dimensions, the same at every batch).
            first: no batch has been probed to the end yet (probe it whatever it is).

        Returns:
            The largest shape probed once this batch is (to hand :meth:`done` when its probe passed), or None
            when it is not probed.
        """
        self.seen += 1
        seen = self.largest
        if seen is None or len(shape) != len(seen):
            return tuple(shape)
        if any(a > b for a, b in zip(shape, seen)):
            return tuple(max(a, b) for a, b in zip(shape, seen))
        return seen if first or self.seen & (self.seen - 1) == 0 else None

    def done(self, largest: tuple) -> None:
        """The probe of a batch :meth:`due` chose passed.

        Args:
            largest: what :meth:`due` returned for it.
        """
        self.largest = tuple(largest)


def _name(call) -> str:
    return f"{call.name or '<model>'} ({type(call.module).__name__})"


def advice(option: str) -> str:
    """What to give instead of ``option`` ("batch_first=True" or "batch_first=False").

    Args:
        option: the option in force, ``"batch_first=True"`` or ``"batch_first=False"``.

    Returns:
        A clause for an error message, naming the other ``batch_first``.
    """
    if option.endswith("True"):
        return "if the module's input is [T, B, ...], pass batch_first=False to make_private"
    return "if the module's input is [B, ...], pass batch_first=True to make_private"


def _fixed(call):
    rule = rule_for(call.module)
    return rule.record_dim(call.module) if rule is not None else None


def resolve(base: list, moved, probe: dict | None, rows: int, prefer: int, option: str) -> list:
    """The record dimensions ``(input dim, [output dims])`` of every call of ``base``, decided by the probes.

    Args:
        base: the survey's calls (the batch as given).
        moved: the calls of the batch with record 0 changed, or None (not run).
        probe: ``{(call index, output index): gradient}`` of :func:`last_record_loss`, or None (not run).
        rows: the batch's records.
        prefer: the model's record dimension (0: ``batch_first``).
        option: the option in force, named in the error messages.

    Returns:
        One ``(input dim, [output dims])`` per call (a dim None: the call has none).

    Raises:
        InputError: (one line) where it cannot tell: the changed batch ran other layers, a call's input is
            not a tensor, or no single dimension of a call's input holds the records alone.
    """
    if moved is not None and [c.signature() for c in moved] != [c.signature() for c in base]:
        raise InputError("the module is not allowed: changing one record changed which layers run (control flow "
                         "on the data), so the records' layers cannot be matched.")
    dims = []
    for k, call in enumerate(base):
        hook = getattr(rule_for(call.module), "records", None)
        if hook is not None:                      # a layer that knows its own layout (recurrent: batch_first, packed)
            dims.append(hook(call, moved[k] if moved is not None else None,
                             {j: g for (i, j), g in (probe or {}).items() if i == k} if probe is not None else None,
                             rows, option))
            continue
        x = call.input()
        if not isinstance(x, torch.Tensor):
            raise InputError(f"{_name(call)} is not allowed: its input is a {type(x).__name__}, not a tensor whose "
                             "records the per-layer rules can index.")
        fixed = _fixed(call)
        if rows == 1:
            c = candidates(x, 1, prefer, fixed)
            d = c[0] if c else None
            dims.append((d, [d if d is None or (z.dim() > d and z.shape[d] == 1) else None for z in call.outs]))
            continue
        ok, spread = [], None
        for d in candidates(x, rows, prefer, fixed):
            z0 = call.outs[0] if call.outs else None
            if z0 is None or not (z0.dim() > d and z0.shape[d] == rows):
                continue
            if moved is not None:
                m = moved[k]
                if call.broadcast and bool(moves(x, m.input()).any()):
                    continue
                if not (moved_only_at_first(x, m.input(), d)
                        and (not m.outs or moved_only_at_first(z0, m.outs[0], d))):
                    spread = d if spread is None else spread
                    continue
            g0 = probe.get((k, 0)) if probe is not None else None
            if g0 is not None and not only_at(g0 != 0, d, rows - 1):
                continue
            ok.append(d)
        want = fixed if fixed is not None else prefer
        if len(ok) == 1 or (ok and want in ok):
            d = ok[0] if len(ok) == 1 else want
            dims.append((d, [d] + [_out_dim(z, rows, d, probe.get((k, j)) if probe is not None else None)
                                   for j, z in enumerate(call.outs) if j > 0]))
            continue
        shape = tuple(x.shape)
        if not ok and not candidates(x, rows, prefer, fixed):
            where = f"dimension {fixed} (the layer's)" if fixed is not None else "no dimension"
            raise InputError(f"{_name(call)} is not allowed with {option}: its input of shape {shape} has {where} of "
                             f"the batch's {rows} records; {advice(option)}.")
        if spread is not None:
            raise InputError(f"{_name(call)} is not allowed with {option}: changing record 0 of a batch of {rows} moved "
                             f"other records of its input of shape {shape} or of its output along dimension {spread}, "
                             "so something before or in this layer mixes the records of a batch (a mean, norm or "
                             f"attention across them, however weak); replace it, or {advice(option)}.")
        raise InputError(f"{_name(call)} is not allowed with {option}: no dimension of its input of shape {shape} holds "
                         f"the batch's {rows} records alone (one record's loss reaches several); {advice(option)}.")
    return dims


def _out_dim(z, rows: int, d: int, g):
    """The record dimension of a call's further output (an attention's weights beside its output): ``d`` or the one
    other dimension of the batch's size the gradient probe accepts; None where it has none (its gradient must
    then be zero: :mod:`.generic` refuses it otherwise)."""
    for c in candidates(z, rows, d):
        if g is None or only_at(g != 0, c, rows - 1):
            return c
    return None


def mixed_output(out, moved, rows: int, dim: int):
    """The model's first output that the changed record moves at another record, or None: a floating output with
    a dimension of the batch's size must keep the change at index 0 along one of them (the model's ``dim``
    first) -- a mean over the batch after the last trained layer, which no layer's probe sees, moves every one.

    Args:
        out: the forward's output on the batch (any structure of tensors).
        moved: the output of the same forward with record 0 changed.
        rows: the batch's records.
        dim: the model's record dimension.

    Returns:
        ``(index among the output's tensors, shape)`` of the first such output, or None.  A ``PackedSequence``
        is not read (its rows are time steps of sorted sequences, not records).
    """
    for j, (t0, t1) in enumerate(zip(_unpacked(out), _unpacked(moved))):
        cands = candidates(t0, rows, dim) if t0.is_floating_point() and t0.shape == t1.shape else []
        if cands:
            if not any(moved_only_at_first(t0, t1, d) for d in cands):
                return j, tuple(t0.shape)
    return None


def _unpacked(obj) -> list:
    """The tensors of ``obj`` as :func:`~.calls.leaves` lists them, a ``PackedSequence``'s aside."""
    from .calls import leaves

    if isinstance(obj, nn.utils.rnn.PackedSequence):
        return []
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _unpacked(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _unpacked(o)]
    return leaves(obj)


def layout_of(layout: tuple, sigs: list):
    """The record dimensions of a batch's calls ``sigs`` from the layout found on an earlier batch, or None.

    The same calls in the same order take the layout's dims one by one.  Other calls of the same modules --
    a module called once per time step over sequences of another length (Opacus's ``RNNLinear``, a cell in a
    loop) -- take their module's dims, where every call of that module had the same ones and the batch runs
    exactly the layout's modules.

    Args:
        layout: ``(signatures, dims)`` of the calls of the earlier batch (:func:`resolve`'s dims).
        sigs: the signatures of this batch's calls (:meth:`~.calls.Call.signature`).

    Returns:
        One ``(input dim, [output dims])`` per call of ``sigs``, or None where the calls cannot be matched.
    """
    sigs0, dims0 = layout
    if list(sigs) == list(sigs0):
        return dims0
    by: dict = {}
    for s, d in zip(sigs0, dims0):
        if by.setdefault(s, d) != d:
            return None
    if set(sigs) != set(by):
        return None
    return [by[s] for s in sigs]


def check_rows(calls: list, dims: list, rows: int, option: str) -> None:
    """Every later batch: each call's input still has the batch's rows where its records were found (and the
    call takes its record dimensions: ``dims`` from :func:`resolve`).

    Args:
        calls: the batch's calls (their ``dim`` and ``out_dims`` are set from ``dims``).
        dims: the ``(input dim, [output dims])`` of :func:`resolve`, one per call.
        rows: the batch's records.
        option: the option in force, named in the error message.

    Raises:
        InputError: if a call's input does not have ``rows`` records in its record dimension.
    """
    for call, (d, out_dims) in zip(calls, dims):
        call.dim, call.out_dims = d, out_dims
        x = call.input()
        if d is None or not isinstance(x, torch.Tensor) or getattr(rule_for(call.module), "records", None):
            continue
        if x.dim() <= d or x.shape[d] != rows:
            raise InputError(f"{_name(call)} is not allowed with {option}: its input of shape {tuple(x.shape)} does not "
                             f"have the batch's {rows} records in dimension {d}, where the first batch had them.")
