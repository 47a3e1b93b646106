"""The layers path's rule for :class:`~.attention.SequenceBias` (Opacus's module; ``nn.MultiheadAttention``'s
``bias_k`` / ``bias_v`` with ``add_bias_kv``): the layer appends its bias as one more position of every
sequence, so record i's gradient is the output gradient at that position, ``g_i[-1]``, formed and measured in
float64 (records on dim 0 and positions on dim 1 whatever the layer's ``batch_first``)."""

from __future__ import annotations

from .attention import SequenceBias
from .linear import wants
from .numerics import formed_terms, in_work
from .rules import ALL, Rule, register_rule

__all__ = []


def _per_record(mod, a, g, want=ALL) -> dict:
    """:attr:`.rules.Rule.per_record` of a :class:`SequenceBias`: ``{"bias": [B, E]}``."""
    if not wants(mod, "bias", want):
        return {}
    (g,) = in_work(g)
    return {"bias": g[:, -1]}


def _terms(mod, a1, g1, a0=None, g0=None, want=ALL):
    """:attr:`.rules.Rule.terms` of a :class:`SequenceBias`: from the formed per-record gradients."""
    return formed_terms(_per_record, mod, a1, g1, a0, g0, want)


def _record_dim(mod):
    return 0 if mod.batch_first else 1


RULE = register_rule(Rule((SequenceBias,), _terms, per_record=_per_record, record_dim=_record_dim))
