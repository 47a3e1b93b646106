"""Opacus's ``opacus.grad_sample.functorch``: :func:`make_functional`, the stand-in for functorch's removed
``make_functional`` that Opacus's examples call.

Opacus's CIFAR-10 example calls it in its ``grad_sample_mode="no_op"`` branch, to compute per-sample gradients
itself with ``torch.func.vmap`` and hand them to Opacus's optimizer as ``p.grad_sample``.  dpcalib's engine
forms no ``grad_sample`` (its per-layer rules clip the signals of the user's own backward) and refuses
``"no_op"`` in one line, so an Opacus script reaches this function only in its own code; it behaves as
Opacus's: a stateless copy of the module and a function of (parameters, inputs).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["make_functional"]


def make_functional(mod: nn.Module, disable_autograd_tracking: bool = False):
    """``(fmodel, params)``: ``fmodel(params, *args, **kwargs)`` runs ``mod`` at ``params`` (``torch.func.functional_call``
    on a parameter-free copy of ``mod`` on the meta device); ``params`` are ``mod``'s parameters, in order.

    Args:
        mod: the module (left unchanged).  Only parameters are passed, as in Opacus: a module whose forward
            reads a buffer's values (BatchNorm's running statistics) cannot run on the meta copy.
        disable_autograd_tracking: return the parameters detached.

    Returns:
        ``(fmodel, params)``: the function, and the tuple of ``mod``'s parameters (detached if asked).
    """
    named = dict(mod.named_parameters())
    names, values = tuple(named), tuple(named.values())
    stateless = copy.deepcopy(mod).to("meta")

    def fmodel(new_params, *args, **kwargs):
        return torch.func.functional_call(stateless, dict(zip(names, new_params)), args, kwargs)

    if disable_autograd_tracking:
        values = tuple(v.detach() for v in values)
    return fmodel, values
