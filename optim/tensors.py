"""A model's parameters as one vector: the dict <-> flat-vector conversions that the updates, the
transports and the checks share (no other job; imports torch only)."""

from __future__ import annotations

import torch

__all__ = ["flat", "unflat"]


def flat(tensors: dict) -> torch.Tensor:
    """Concatenate a dict of tensors into one vector (dict order).

    Args:
        tensors: name -> tensor.

    Returns:
        A 1-d tensor of all the entries, in dict order.
    """
    return torch.cat([t.reshape(-1) for t in tensors.values()])


def unflat(vec: torch.Tensor, like: dict) -> dict:
    """Inverse of :func:`flat` for tensors shaped like ``like``.

    Args:
        vec: a 1-d tensor of at least the total size of ``like``.
        like: name -> tensor, giving the names and shapes.

    Returns:
        name -> a view of ``vec`` shaped like ``like[name]``.
    """
    out, i = {}, 0
    for k, t in like.items():
        out[k] = vec[i:i + t.numel()].view_as(t)
        i += t.numel()
    return out
