"""The per-layer rules of the layers path: one module per layer kind (:mod:`.linear`, :mod:`.conv`,
:mod:`.embedding`, :mod:`.normalization`), each registering a :class:`Rule` here, in the manner of Opacus's
per-layer grad samplers.  A rule answers, for one module and the signals of a batch (its input
``a`` and the back-propagated gradient ``g`` of its output, at one parameter point or at two), every
record's squared gradient norm in float64 and the weighted sum of the records' gradients; the path
(:mod:`.layers`) adds the norms over the layers, computes the clip factors once and asks each rule
for its sum.  Fixing a layer kind's rule is a change to its one module; adding a kind is a new
module that calls :func:`register_rule`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["Rule", "RULES", "register_rule", "rule_for"]


def _always(module) -> None:
    return None


@dataclass(frozen=True)
class Rule:
    """``kinds``: the module classes it takes (and their subclasses).  ``terms(mod, a1, g1, a0=None,
    g0=None) -> (norm2, sums)``: ``norm2`` the records' squared norms ``[B]`` (float64) of the
    gradient at the point of ``(a1, g1)`` -- or, with ``(a0, g0)``, of the gradient DIFFERENCE
    between the two points -- and ``sums(f) -> {"weight": ..., "bias": ...}`` the sum of the same
    per-record vectors weighted by ``f [B]``: the norm is always that of the vector summed.
    ``why_not(mod)``: why this instance cannot be taken (None: it can)."""

    kinds: tuple
    terms: Callable
    why_not: Callable = _always


#: the registered rules, in registration order (the first whose kinds match a module takes it)
RULES: list = []


def register_rule(rule: Rule) -> Rule:
    """Add a layer kind's rule (its module calls this once, at import)."""
    RULES.append(rule)
    return rule


def rule_for(module):
    """The rule that takes ``module``, or None."""
    return next((r for r in RULES if isinstance(module, r.kinds)), None)
