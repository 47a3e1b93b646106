"""Per-record gradients of one module's call by ``torch.func.vmap``: the rule for a module no per-layer rule
covers (a custom module's own parameters, ``x * scale + bias``; a Vision Transformer's class token and position
table; ``nn.PReLU``; a module that uses a child's weight functionally, such as ``nn.MultiheadAttention``), in
the manner of Opacus's functorch grad sampler: the module alone is run again on each record's inputs, at the
parameters of the call, and differentiated against that record's output gradient -- the linearised loss
``<f(a_i), g_i>``, whose gradient is the record's gradient of this module's parameters.  The whole model is the
same rule applied to the root call (parameters used outside their own module's call: tied through a parent's
``F.linear``, a module's weight used by another).

Each record sees its inputs with a record dimension of size 1 (shape-reading code runs unchanged); inputs
without the record dimension are shared.  An output without it (the model's mean loss when the root is
replayed) is linearised with the batch's weight on it (``g / rows`` for a mean, ``g`` for a sum).  The replay
runs under the autocast state of the call.  The outputs of the replay are checked against the call's own
(once per module and shape): a module whose records are not independent along the dimension found, or whose
per-record replay differs, is refused in one line naming it.
"""

from __future__ import annotations

import contextlib
import weakref

import torch
from torch.func import functional_call, grad, vmap

from ...accountant.validation import InputError
from .calls import leaves, rebuild
from .numerics import row_sq64

__all__ = []

_CHECKED = weakref.WeakKeyDictionary()     # module -> the output shapes its replay was checked at


def autocast_of(state):
    """The autocast region a call ran in, to replay it under.

    Args:
        state: ``(device, dtype)`` of the region, or None.

    Returns:
        A context manager: ``torch.autocast(device, dtype=dtype)``, or a null context for None.
    """
    if state is None:
        return contextlib.nullcontext()
    return torch.autocast(state[0], dtype=state[1])


def tolerance(dtype) -> float:
    """How far a replay of a call may be from the call's own output, relative to its largest value.

    Args:
        dtype: the output's dtype.

    Returns:
        1e-7 for float64, 1e-3 for float32, 6e-2 for any other dtype.
    """
    return {torch.float64: 1e-7, torch.float32: 1e-3}.get(dtype, 6e-2)


def _randomness(mod) -> bool:
    return any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.training and m.p > 0 for m in mod.modules())


def _name(call) -> str:
    return f"{call.name or '<model>'} ({type(call.module).__name__})"


def call_per_record(call, want, reduction: str | None = None) -> dict:
    """``{name: [B, ...]}``: every record's gradient of the call's parameters named in ``want``.

    Names are relative to the call's module; its children's parameters are included.

    Args:
        call: the :class:`~.calls.Call`.
        want: the parameter names (relative to the call's module) to differentiate.
        reduction: how an output without the record dimension was reduced over the batch (the root's
            loss: ``"mean"`` or ``"sum"``); None: such an output is refused.

    Returns:
        A dict by name of the records' gradients, records on dim 0 (one record when ``call.dim`` is None).

    Raises:
        InputError: if an output without the record dimension has a gradient (and no ``reduction`` covers
            it), vmap cannot run the module per record, or the per-record replay does not give the call's
            output.
    """
    mod, d, rows = call.module, call.dim, call.rows
    point = call.point if call.point is not None else dict(mod.named_parameters())
    diff = {k: point[k].detach() for k in want}
    const = {k: v.detach() for k, v in point.items() if k not in diff}
    ins = leaves((call.args, call.kwargs))
    in_dims = [d if (d is not None and t.dim() > d and t.shape[d] == rows) else None for t in ins]
    batched = [t.unsqueeze(dd + 1) if dd is not None else t for t, dd in zip(ins, in_dims)]
    out_dims = call.out_dims or [d] * len(call.outs)
    gs, g_dims = [], []
    for j, z in enumerate(call.outs):
        g = call.grads.get(j)
        od = out_dims[j] if j < len(out_dims) else None
        if g is None:
            gs.append(None)
            g_dims.append(None)
        elif od is not None and d is not None:
            gs.append(g.unsqueeze(od + 1))
            g_dims.append(od)
        elif d is None:
            gs.append(g)
            g_dims.append(None)
        elif reduction is not None and g.numel() == 1:
            gs.append(g / rows if reduction == "mean" else g)
            g_dims.append(None)
        else:
            raise InputError(f"{_name(call)} is not allowed: its output of shape {tuple(z.shape)} has no dimension of the "
                             f"batch's {rows} records, and its gradient is not zero (an output shared by the records).")

    def f(p, xs, gl):
        it = iter(xs)
        a, kw = rebuild((call.args, call.kwargs), lambda t: next(it))
        with autocast_of(call.autocast):
            out = functional_call(mod, {**const, **p}, tuple(a), kw)
        seen, outs = set(), []
        for t in leaves(out):
            if t.is_floating_point() and id(t) not in seen:
                seen.add(id(t))
                outs.append(t)
        total = sum((o * g.to(o.dtype)).sum() for o, g in zip(outs, gl) if g is not None)
        return total, [o.detach() for o in outs]

    try:
        with torch.no_grad():
            if d is None:                       # one record: no vmap
                gr, aux = grad(f, has_aux=True)(diff, ins, gs)
                per = {k: v.unsqueeze(0) for k, v in gr.items()}
                aux = [o.unsqueeze(0) for o in aux]
            else:
                per, aux = vmap(grad(f, has_aux=True), in_dims=(None, in_dims, g_dims),
                                randomness="different")(diff, batched, gs)
    except InputError:
        raise
    except Exception as exc:                    # vmap could not run the module per record
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{_name(call)} is not allowed: its per-record gradients by vmap failed ({msg}); "
                         "ModuleValidator.fix may replace it.") from None
    _check(call, aux, out_dims)
    return per


def _check(call, aux, out_dims) -> None:
    """The replay's outputs are the call's own (once per module and shapes; not where dropout draws)."""
    key = tuple(tuple(z.shape) for z in call.outs)
    if key in _CHECKED.get(call.module, ()) or _randomness(call.module):
        return
    for j, (z, o) in enumerate(zip(call.outs, aux)):
        od = out_dims[j] if j < len(out_dims) else None
        if call.dim is not None and od is None:
            continue
        dd = 0 if call.dim is None else od
        got = o.squeeze(dd + 1) if call.dim is not None else o.squeeze(0)
        if call.dim is not None:
            got = got.movedim(0, dd)
        ref = z.detach()
        if got.shape != ref.shape:
            raise InputError(f"{_name(call)} is not allowed: run on one record it gives an output of shape "
                             f"{tuple(got.shape)}, not its part of the batch's {tuple(ref.shape)}.")
        tol = tolerance(ref.dtype) * (float(ref.abs().max()) if ref.numel() else 0.0) + 1e-30
        if float((got.to(ref.dtype) - ref).abs().max() if ref.numel() else 0.0) > tol:
            raise InputError(f"{_name(call)} is not allowed: run on one record it does not give that record's part of "
                             "the batch's output (its records are not independent along the dimension found).")
    _CHECKED.setdefault(call.module, set()).add(key)


def generic_terms(c1, c0=None, want=(), reduction=None):
    """``(norm2, sums)`` of :func:`call_per_record` (the difference: of the two points' per-record gradients).

    Args:
        c1: the call at the current point.
        c0: the same call at the other point, or None (the gradient).
        want: the parameter names to include (relative to the call's module).
        reduction: as for :func:`call_per_record`.

    Returns:
        ``(norm2, sums, per)``: the records' squared norms (float64), ``sums(f)`` the per-record vectors
        weighted by ``f`` and summed, and the per-record vectors themselves.

    Raises:
        InputError: as :func:`call_per_record`.
    """
    per = {k: v.float() if v.dtype.itemsize < 4 else v for k, v in call_per_record(c1, want, reduction).items()}
    if c0 is not None:
        p0 = call_per_record(c0, want, reduction)
        per = {k: v - p0[k].to(v.dtype) for k, v in per.items()}
    B = c1.rows if c1.dim is not None else 1
    norm2 = torch.zeros(B, dtype=torch.float64, device=next(iter(per.values())).device if per else None)
    for v in per.values():
        norm2 = norm2 + row_sq64(v.reshape(v.shape[0], -1))
    return norm2, (lambda f: {k: torch.einsum("b,b...->...", f.to(v.dtype), v) for k, v in per.items()}), per
