"""The per-layer rules of the layers path: one module per layer kind (:mod:`.linear`, :mod:`.conv`,
:mod:`.embedding`, :mod:`.normalization`, :mod:`.recurrent`), each registering a :class:`Rule` here, in the
manner of Opacus's per-layer grad samplers.  A rule answers, for one module and the signals of a batch (its
input ``a`` and the back-propagated gradient ``g`` of its output, records on dim 0, at one parameter point or
at two), every record's squared gradient norm in float64 and the weighted sum of the records' gradients; the
path (:mod:`.layers`) adds the norms over the layers, computes the clip factors once and asks each rule for
its sum.  Fixing a layer kind's rule is a change to its one module; adding a kind is a new module that calls
:func:`register_rule` (its hooks private to it: their one contract is :class:`Rule`'s).  A module with
parameters and no rule is taken by the per-module vmap rule of :mod:`.generic` where the caller allows it
(the engine does; the reference optimizers' layers path sends the model to whole-model vmap instead)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .numerics import block_terms

__all__ = ["rule_for"]

#: ``want`` meaning every parameter the module owns
ALL = None


def _always(module) -> None:
    return None


@dataclass(frozen=True)
class Rule:
    """One layer kind's rule: the per-record squared gradient norms and weighted sums of a module.

    Attributes:
        kinds: the module classes it takes (and their subclasses), a tuple of types.
        terms: ``terms(mod, a1, g1, a0=None, g0=None, want=ALL) -> (norm2, sums)``: ``norm2`` the records'
            squared norms ``[B]`` (float64) of the gradient at the point of ``(a1, g1)`` -- or, with
            ``(a0, g0)``, of the gradient DIFFERENCE between the two points (``a`` the module's input and ``g``
            the gradient of its output, records on dim 0) -- over the parameters named in ``want`` (the
            module's own names; ALL: every one), and ``sums(f) -> {"weight": ..., "bias": ...}``
            the sum of the same per-record vectors weighted by ``f [B]``: the norm is always that of the
            vector summed.
        why_not: ``why_not(mod)``: why this instance cannot be taken (None: it can).
        per_record: ``per_record(mod, a, g, want) -> {name: [B, ...]}``: the records' gradients themselves
            (a parameter shared with another call adds them before the norm), or None.
        signals: ``"first"`` -- ``a`` the first input and ``g`` the output's gradient, records on dim 0 --
            or ``"call"`` -- ``a`` the whole :class:`~.calls.Call` (every input, every output's gradient;
            ``g`` None).
        record_dim: ``record_dim(mod)``: the dimension of the first input that indexes the records whatever
            the model's layout (a convolution's is 0), or None (the model's: ``batch_first``).
        match: ``match(mod) -> bool``: further modules it takes by another test (a class of a library that
            is not imported here), or None.
        records: ``records(call, moved, probe, rows, option) -> (input dim, output dims)``: a layer that knows
            its own record layout (recurrent: ``batch_first``, packed) checks it against the probes of
            :mod:`.records` itself; or None.
        blocks: ``blocks(mod, call, want) -> {name: (G [B, T, out], A [B, T, in]) or G [B, T, out]}``: a layer
            whose per-record gradients are sums over positions (a weight ``sum_t G_t^T A_t``, a bias ``sum_t G_t``)
            gives its signals so, or None; the calls of one module (an ``RNNLinear`` at every time step, a cell
            in a loop) are then measured as one call, their positions concatenated (:mod:`.units`).
    """

    kinds: tuple
    terms: Callable
    why_not: Callable = _always
    per_record: Callable | None = None
    signals: str = "first"
    record_dim: Callable = _always
    match: Callable | None = None
    records: Callable | None = None
    blocks: Callable | None = None


def block_rule(blocks) -> tuple:
    """``(terms, per_record)`` of a ``signals="call"`` rule from its :attr:`Rule.blocks` alone.

    Args:
        blocks: ``blocks(mod, call, want) -> {name: (G [B, T, out], A [B, T, in]) or G [B, T, out]}``.

    Returns:
        ``(terms, per_record)`` as :class:`Rule` takes them: the norms and sums by
        :func:`~.numerics.block_terms`, the records' gradients ``sum_t G_t^T A_t`` and ``sum_t G_t`` formed.
    """
    def terms(mod, c1, g1=None, c0=None, g0=None, want=ALL):
        b0 = blocks(mod, c0, want) if c0 is not None else None
        return block_terms(blocks(mod, c1, want), b0, c1.rows, next(mod.parameters()).device)

    def per_record(mod, call, g=None, want=ALL) -> dict:
        return {k: torch.einsum("bto,bti->boi", *v) if isinstance(v, tuple) else v.sum(1)
                for k, v in blocks(mod, call, want).items()}
    return terms, per_record


#: the registered rules, in registration order (the first whose kinds match a module takes it)
RULES: list = []


def register_rule(rule: Rule) -> Rule:
    """Add a layer kind's rule (its module calls this once, at import).

    Args:
        rule: the rule to append to ``RULES`` (after those already registered).

    Returns:
        The same ``rule``, so that a module can keep it as ``RULE``.
    """
    RULES.append(rule)
    return rule


def rule_for(module):
    """The rule that takes ``module``, or None.

    Args:
        module: an ``nn.Module`` instance.

    Returns:
        The first registered :class:`Rule` whose ``kinds`` include the module's class (or whose ``match``
        accepts it), or None when no rule takes it.
    """
    return next((r for r in RULES if isinstance(module, r.kinds) or (r.match is not None and r.match(module))), None)
