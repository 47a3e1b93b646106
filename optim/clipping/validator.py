"""``ModuleValidator``: what private training refuses in a model, and the replacements that fix it, with
Opacus's names (``validate``, ``is_valid``, ``fix``, ``fix_and_validate``).

``validate(module)`` lists, one line each, the modules that break a record's bound or leak outside the gradient
-- these the engine refuses at ``make_private``:

* **BatchNorm** (``nn.BatchNorm1d/2d/3d``, ``nn.SyncBatchNorm``, lazy ones): normalises by the batch's statistics,
  so each record's output depends on the others -- no record has its own gradient -- and its running
  statistics learn from the records without noise;
* **InstanceNorm with** ``track_running_stats=True``: its running statistics learn from the records without noise;
* **Embedding with** ``max_norm`` (renormalises the rows the batch looks up, in place, during the forward: the
  records change the parameters outside the gradient) **or** ``scale_grad_by_freq`` (scales each record's gradient
  by counts over the batch);

``fix(module)`` returns a copy with every replacement made (:data:`REPLACEMENTS`, also listed in
docs/optimizers.md):

* BatchNorm -> ``nn.GroupNorm(gcd(32, C), C)`` with the same ``affine`` (Opacus takes ``min(32, C)`` groups, which
  must divide ``C``; the greatest common divisor always does);
* InstanceNorm(``track_running_stats=True``) -> the same InstanceNorm with ``track_running_stats=False``;
* ``nn.MultiheadAttention`` -> :class:`~.attention.LinearMultiheadAttention` (the same function and weights; the
  per-module vmap rule would serve it, the Linear rules are faster) -- Opacus's ``DPMultiheadAttention``.

Embeddings with ``max_norm`` / ``scale_grad_by_freq`` have no replacement with the same function: the user decides.
"""

from __future__ import annotations

import copy
import math

from torch import nn

from ...accountant.validation import InputError
from .attention import LinearMultiheadAttention

__all__ = ["ModuleValidator"]

_BATCHNORM = (nn.modules.batchnorm._BatchNorm, nn.SyncBatchNorm)
_INSTANCE = nn.modules.instancenorm._InstanceNorm

#: (what, replaced by, why): every replacement ``ModuleValidator.fix`` makes
REPLACEMENTS = (
    ("nn.BatchNorm1d / 2d / 3d, nn.SyncBatchNorm", "nn.GroupNorm(gcd(32, C), C), same affine",
     "batch statistics mix the records; running statistics learn from them without noise"),
    ("nn.InstanceNorm1d / 2d / 3d with track_running_stats=True", "the same with track_running_stats=False",
     "running statistics learn from the records without noise"),
    ("nn.MultiheadAttention", "dpcalib.optim.LinearMultiheadAttention (same function and weights)",
     "fused projections: the Linear rules replace a per-module vmap"),
)


class UnsupportedModuleError(InputError):
    """A module private training refuses (one line: where, what, and the replacement if there is one)."""


def _where(name: str, m) -> str:
    return f"{name or '<model>'} ({type(m).__name__})"


def _error(name, m):
    if isinstance(m, _BATCHNORM):
        return UnsupportedModuleError(f"{_where(name, m)}: BatchNorm mixes the records of a batch, so no record has its "
                                      "own gradient; replace it with GroupNorm (ModuleValidator.fix does).")
    if isinstance(m, _INSTANCE) and m.track_running_stats:
        return UnsupportedModuleError(f"{_where(name, m)}: track_running_stats=True keeps statistics of the records "
                                      "without noise; set it to False (ModuleValidator.fix does).")
    if isinstance(m, nn.Embedding) and (m.max_norm is not None or m.scale_grad_by_freq):
        what = "max_norm renormalises the rows a batch looks up during the forward" if m.max_norm is not None else \
            "scale_grad_by_freq scales each record's gradient by counts over the batch"
        return UnsupportedModuleError(f"{_where(name, m)}: {what}; the records would move the parameters outside "
                                      "their clipped gradients (no replacement has the same function: drop the option).")
    return None


def _replacement(m):
    if isinstance(m, _BATCHNORM):
        c = m.num_features
        g = nn.GroupNorm(math.gcd(32, c), c, eps=m.eps, affine=m.affine)
        return g.to(device=m.weight.device, dtype=m.weight.dtype) if m.affine else g
    if isinstance(m, _INSTANCE) and m.track_running_stats:
        new = copy.deepcopy(m)
        new.track_running_stats = False
        new.running_mean = new.running_var = new.num_batches_tracked = None
        return new
    if isinstance(m, nn.MultiheadAttention):
        return LinearMultiheadAttention.from_module(m)
    return None


class ModuleValidator:
    """Opacus's ``ModuleValidator``: :meth:`validate`, :meth:`is_valid`, :meth:`fix`, :meth:`fix_and_validate`."""

    @staticmethod
    def validate(module: nn.Module, *, strict: bool = False) -> list:
        """The modules private training refuses, one :class:`UnsupportedModuleError` each (module text).

        Args:
            module: the model.
            strict: raise the first error instead of returning the list.

        Returns:
            the errors (empty: the model is valid).

        Raises:
            UnsupportedModuleError: ``strict=True`` and the list is not empty.
        """
        errors = [e for n, m in module.named_modules() if (e := _error(n, m)) is not None]
        if strict and errors:
            raise errors[0]
        return errors

    @staticmethod
    def is_valid(module: nn.Module) -> bool:
        """No error (:meth:`validate`).

        Args:
            module: the model.

        Returns:
            True when :meth:`validate` finds nothing to refuse.
        """
        return not ModuleValidator.validate(module)

    @staticmethod
    def fix(module: nn.Module, **kwargs) -> nn.Module:
        """A copy of ``module`` with every replacement of :data:`REPLACEMENTS` made (the original untouched).

        Args:
            module: the model.
            **kwargs: none accepted (Opacus's options are refused, not ignored).

        Returns:
            the fixed copy (a module needing no replacement comes back as an equal copy).

        Raises:
            InputError: if any keyword argument is given.
        """
        if kwargs:
            raise InputError(f"{sorted(kwargs)[0]}= is not allowed: ModuleValidator.fix takes no options.")
        fixed = copy.deepcopy(module)
        new = _replacement(fixed)
        if new is not None:
            return new
        _fix_children(fixed)
        return fixed

    @staticmethod
    def fix_and_validate(module: nn.Module, **kwargs) -> nn.Module:
        """:meth:`fix`, then :meth:`validate` with ``strict=True`` (what no replacement fixes raises).

        Args:
            module: the model.
            **kwargs: passed to :meth:`fix` (none accepted).

        Returns:
            The fixed copy.

        Raises:
            InputError: if any keyword argument is given.
            UnsupportedModuleError: if the fixed copy still has a module private training refuses.
        """
        fixed = ModuleValidator.fix(module, **kwargs)
        ModuleValidator.validate(fixed, strict=True)
        return fixed


def _fix_children(module: nn.Module) -> None:
    for name, child in list(module.named_children()):
        new = _replacement(child)
        if new is not None:
            setattr(module, name, new)
        else:
            _fix_children(child)
