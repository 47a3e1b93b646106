"""The records' norms and clipped sums from the calls of a forward: each call's rule, and the calls that share a
parameter together.

A record's gradient of a parameter is the sum over every call that used it: a module called twice (a layer
applied at two places, an unrolled loop), or one weight owned by two modules (an output layer tied to the
embedding, ``lm_head.weight is wte.weight``).  The calls that share any parameter form one unit; a unit of one
call asks its rule for ``(norm2, sums)`` (:class:`~.rules.Rule`); a larger unit adds its calls' per-record
gradients (each rule's ``per_record``) parameter by parameter and measures and sums those -- the norm is the
norm of the vector summed, cross terms included (adding the calls' norms instead could understate it by up to
``sqrt(calls)``).  A unit of calls of one module whose rule gives its signals as blocks over positions
(:attr:`~.rules.Rule.blocks`: Linear, recurrent layers and cells) is one call with the calls' positions
concatenated -- the same per-record sums, measured by Gram products without forming a matrix per call (Opacus's
``RNNLinear`` at every time step, a cell in a loop).  A call whose module has no rule, or one the rule does not take, or that covers parameters of
its children (a parent using a child's weight, the whole model), is served by the per-module vmap rule of
:mod:`.generic`.  Sums come back under the run's parameter names (``call.keys``)."""

from __future__ import annotations

import copy

import torch

from .generic import call_per_record, generic_terms
from .numerics import block_terms, row_sq64
from .rules import rule_for

__all__ = ["signal_terms", "add_sums", "rule_of"]


def rule_of(call):
    """The call's rule, or None for the per-module vmap rule.

    None: no rule, a rule that does not take this instance, or parameters of the module's children among
    the call's.

    Args:
        call: a :class:`~.calls.Call`.

    Returns:
        The :class:`~.rules.Rule` that serves the call, or None.
    """
    rule = rule_for(call.module)
    if rule is None or rule.why_not(call.module) is not None or any("." in k for k in call.keys):
        return None
    return rule


def units(calls) -> list:
    """Lists of call indices: the calls that share a parameter (by the run's names), in first-call order.

    Args:
        calls: the :class:`~.calls.Call` list of one forward.

    Returns:
        A list of lists of indices into ``calls``, each a unit (calls linked by a shared parameter).
    """
    parent = list(range(len(calls)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    owner = {}
    for i, c in enumerate(calls):
        for key in c.keys.values():
            j = owner.setdefault(key, i)
            if j != i:
                parent[find(i)] = find(j)
    groups: dict = {}
    for i in range(len(calls)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def _want(call):
    return frozenset(call.keys)


def _one(c1, c0, reduction):
    """``(norm2, sums)`` of a call alone (own names)."""
    rule = rule_of(c1)
    want = _want(c1)
    if rule is None:
        n2, sums, _ = generic_terms(c1, c0, want, reduction)
        return n2, sums
    if rule.signals == "call":
        return rule.terms(c1.module, c1, None, c0, None, want=want)
    if c0 is None:
        return rule.terms(c1.module, c1.a(), c1.g(), want=want)
    return rule.terms(c1.module, c1.a(), c1.g(), c0.a(), c0.g(), want=want)


def _per_record(call, reduction) -> dict:
    """The call's per-record gradients under the run's names."""
    rule = rule_of(call)
    want = _want(call)
    if rule is None or rule.per_record is None:
        per = call_per_record(call, want, reduction)
    elif rule.signals == "call":
        per = rule.per_record(call.module, call, None, want)
    else:
        per = rule.per_record(call.module, call.a(), call.g(), want)
    return {call.keys[k]: (v.float() if v.dtype.itemsize < 4 else v) for k, v in per.items()}


def _shared(cs1, cs0, reduction):
    """``(norm2, sums)`` of calls that share parameters: their per-record gradients added per parameter."""
    total: dict = {}
    for j, c in enumerate(cs1):
        for k, v in _per_record(c, reduction).items():
            total[k] = v if k not in total else total[k] + v.to(total[k].dtype)
        if cs0 is not None:
            for k, v in _per_record(cs0[j], reduction).items():
                total[k] = total[k] - v.to(total[k].dtype)
    B = next(iter(total.values())).shape[0]
    norm2 = torch.zeros(B, dtype=torch.float64, device=next(iter(total.values())).device)
    for v in total.values():
        norm2 = norm2 + row_sq64(v.reshape(B, -1))
    return norm2, (lambda f: {k: torch.einsum("b,b...->...", f.to(v.dtype), v) for k, v in total.items()})


def _stacked(cs1, cs0):
    """``(norm2, sums)`` of calls of one module whose rule has ``blocks``: their positions concatenated, or None."""
    rule = rule_of(cs1[0])
    if rule is None or rule.blocks is None or any(c.module is not cs1[0].module for c in cs1):
        return None
    want = _want(cs1[0])

    def joined(cs):
        bs = [rule.blocks(c.module, c, want) for c in cs]
        return {k: (tuple(torch.cat([b[k][i] for b in bs], 1) for i in (0, 1)) if isinstance(v, tuple)
                    else torch.cat([b[k] for b in bs], 1)) for k, v in bs[0].items()}
    b0 = None if cs0 is None else joined(cs0)
    return block_terms(joined(cs1), b0, cs1[0].rows, next(cs1[0].module.parameters()).device)


def _only(calls, name):
    """The calls restricted to the one parameter ``name`` (run's name): shallow copies, the others' keys dropped."""
    out = []
    for c in calls:
        d = copy.copy(c)
        d.keys = {k: v for k, v in c.keys.items() if v == name}
        out.append(d)
    return out


def signal_terms(sig1, sig0=None, reduction=None, only=None) -> tuple:
    """``(norm2 [B] float64, [(names, sums)])`` of the calls ``sig1``, or of ``sig1`` against ``sig0``.

    At one point: the gradient; against ``sig0`` (the same calls at another point): the difference.  The
    records' squared norms are summed over the units; each unit gives its ``sums(f)`` with ``names``
    mapping its keys to the run's parameter names (None: they are the run's already).

    Args:
        sig1: the calls of the forward at the current point.
        sig0: the same calls at the other point, or None.
        reduction: how a root call's output without the record dimension was reduced
            (:func:`~.generic.call_per_record`), or None.
        only: one parameter's run name: the norms and sums of that parameter's part alone (per-layer
            clipping); None: every parameter.

    Returns:
        ``(norm2, terms)``: the records' squared norms ``[B]`` (float64) and one ``(names, sums)`` per unit.
    """
    if only is not None:
        keep = [i for i, c in enumerate(sig1) if only in c.keys.values()]
        sig1 = _only([sig1[i] for i in keep], only)
        sig0 = None if sig0 is None else _only([sig0[i] for i in keep], only)
    terms, norm2 = [], None
    for unit in units(sig1):
        cs1 = [sig1[i] for i in unit]
        cs0 = None if sig0 is None else [sig0[i] for i in unit]
        if len(unit) == 1:
            n2, sums = _one(cs1[0], None if cs0 is None else cs0[0], reduction)
            names = cs1[0].keys
        else:
            got = _stacked(cs1, cs0)
            n2, sums = got if got is not None else _shared(cs1, cs0, reduction)
            names = cs1[0].keys if got is not None else None
        norm2 = n2 if norm2 is None else norm2 + n2.to(norm2.device)
        terms.append((names, sums))
    if norm2 is None:
        rows = sig1[0].rows if sig1 else 0
        norm2 = torch.zeros(rows, dtype=torch.float64)
    return norm2, terms


def add_sums(total: dict, terms, f) -> None:
    """``total[param] += sum_i f_i v_i`` for every unit of :func:`signal_terms` (``f`` in the totals' dtype).

    Args:
        total: ``{run's parameter name: tensor}``, added to in place.
        terms: the ``[(names, sums)]`` of :func:`signal_terms`.
        f: the records' factors ``[B]`` (clip factors times weights).
    """
    for names, sums in terms:
        for p, v in sums(f).items():
            k = p if names is None else names[p]
            total[k] += v.to(total[k].dtype)
