"""What each record of a batch contributes to a release: the data layer's per-example queries.

Every reference optimizer asks its :class:`PerExample` object for the per-example part of a query
-- it never calls the clipped sums of :mod:`.paths` itself -- and names the records it asks about:

* :meth:`PerExample.clipped_sum` -- ``sum_i w_i clip(grad l(params; z_i), C)`` (flat);
* :meth:`PerExample.clipped_diff_sum` -- the same for ``grad l(cur; z_i) - grad l(prev; z_i)``;
* :meth:`PerExample.grad_sum` -- ``sum_i grad l(params; z_i)`` unclipped (DiceSGD's error feedback);
* :meth:`PerExample.grads` -- per-example gradients of several nodes' points at once (D2P).

``ids = (holder, index)`` says which records the rows of ``x`` are: ``holder`` the client or node
(an int, or a tensor shaped like ``index``), ``index`` the record's position in the holder's data.
The default object computes every row by forward and backward through the model
(:mod:`dpcalib.optim.clipping`) and ignores ``ids``.  (The D2P updates clip the per-example
gradients that :meth:`PerExample.grads` returns with :func:`~.paths.clip_factors` themselves;
DiceSGD clips its error feedback, which is no record's, the same way.)  A check may put another object in its place -- e.g.
an injected-gradient canary (:mod:`dpcalib.optim.audit.canaries`) answers for one named record -- without the
optimizer's update knowing: the update only says which records it uses, at which parameters.

Every query is asked at every release, also when the batch is empty, so an object that watches
the calls sees every parameter point the run visits, in order.
"""

from __future__ import annotations

import torch

from ...accountant.validation import InputError
from .paths import clipped_grad_diff_sum, clipped_grad_sum
from .signals import SignalCache

__all__ = ["PerExample", "flat_of"]


def flat_of(tensors: dict, like: dict) -> torch.Tensor:
    """The values of ``tensors`` in the order of ``like``'s keys, as one flat vector.

    Args:
        tensors: ``{name: tensor}`` with at least ``like``'s keys.
        like: ``{name: ...}`` giving the order.

    Returns:
        The concatenation of the flattened tensors.
    """
    return torch.cat([tensors[k].reshape(-1) for k in like])


def _zeros(params: dict) -> torch.Tensor:
    """The flat zero vector of an empty batch (the parameters' dtype and device)."""
    return next(iter(params.values())).new_zeros(sum(t.numel() for t in params.values()))


class PerExample:
    """Forward and backward on the records themselves (the plain queries of a run).

    Args:
        clip_method: ``"auto"``, ``"ghost"``, ``"layers"`` or ``"vmap"``: see
            :func:`optim.clipping.clipped_grad_sum`.
        chunk_size: records per vmap chunk: see :func:`optim.clipping.clipped_grad_sum`.
        reuse_signals: keep a :class:`~.signals.SignalCache` so that full-batch rounds reuse the previous
            point's per-sample signals.

    Raises:
        InputError: if ``clip_method`` is not one of the four.
    """

    def __init__(self, clip_method: str = "auto", chunk_size: int = 1024, reuse_signals: bool = True):
        if clip_method not in ("auto", "ghost", "layers", "vmap"):
            raise InputError(f"clip_method={clip_method!r} is not allowed: expected 'auto', 'ghost', 'layers' or "
                             "'vmap'.")
        self.clip_method, self.chunk_size = clip_method, int(chunk_size)
        #: full-batch rounds reuse the previous point's per-sample signals (dpcalib.optim.clipping.signals)
        self.cache = SignalCache() if reuse_signals else None

    def clipped_sum(self, model, loss_fn, params: dict, x, y, c: float, *, ids, weights=None,
                    stabilizer=None) -> torch.Tensor:
        """``sum_i w_i clip(grad l(params; z_i), C)``, flat.

        Args:
            model: the model.
            loss_fn: ``loss_fn(output, target)``, one loss per example.
            params: ``{name: tensor}`` the parameter point (the flat vector follows its order).
            x: the records' inputs, records on dim 0 (may be empty).
            y: the records' targets.
            c: the clip norm C >= 0.
            ids: ``(holder, index)`` naming the records (ignored here).
            weights: the records' weights ``[B]`` (None: 1).
            stabilizer: automatic clipping's offset (see :func:`~.paths.clip_factors`), or None.

        Returns:
            The clipped sum as one flat vector (zeros for an empty batch).
        """
        if x.shape[0] == 0:
            return _zeros(params)
        sums, _ = clipped_grad_sum(model, loss_fn, x, y, c, params, method=self.clip_method,
                                   chunk_size=self.chunk_size, weights=weights, stabilizer=stabilizer,
                                   cache=self.cache)
        return flat_of(sums, params)

    def clipped_diff_sum(self, model, loss_fn, cur: dict, prev: dict, x, y, c: float, *, ids,
                         weights=None) -> torch.Tensor:
        """``sum_i w_i clip(grad l(cur; z_i) - grad l(prev; z_i), C)``, flat.

        Args:
            cur: ``{name: tensor}`` the current parameter point (the flat vector follows its order).
            prev: the earlier point, the same names.
            model, loss_fn, x, y, c, ids, weights: as :meth:`clipped_sum`.

        Returns:
            The clipped sum of the differences as one flat vector (zeros for an empty batch).
        """
        if x.shape[0] == 0:
            return _zeros(cur)
        sums, _ = clipped_grad_diff_sum(model, loss_fn, x, y, c, cur, prev, method=self.clip_method,
                                        chunk_size=self.chunk_size, weights=weights, cache=self.cache)
        return flat_of(sums, cur)

    def grad_sum(self, model, loss_fn, params: dict, x, y, *, ids) -> torch.Tensor:
        """``sum_i grad l(params; z_i)`` unclipped (DiceSGD's error feedback), flat.

        Args:
            model, loss_fn, params, x, y, ids: as :meth:`clipped_sum`.

        Returns:
            The summed gradient as one flat vector (zeros for an empty batch).
        """
        if x.shape[0] == 0:
            return _zeros(params)
        from torch.func import functional_call

        p = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        loss = loss_fn(functional_call(model, p, (x,)), y).sum()
        return flat_of(dict(zip(p, torch.autograd.grad(loss, list(p.values())))), p)

    def grads(self, grad_fn, Z: torch.Tensor, x, y, *, ids) -> torch.Tensor:
        """``grad_fn(Z, x, y)``: ``[nodes, records, d]`` per-example gradients, node i's records at Z[i].

        Args:
            grad_fn: the function of :func:`~.points.point_grads`.
            Z: the nodes' flat parameter vectors ``[nodes, d]``.
            x: the records' inputs (per node, or shared).
            y: the records' targets.
            ids: ``(holder, index)`` naming the records (ignored here).

        Returns:
            The per-example gradients ``[nodes, records, d]``.
        """
        return grad_fn(Z, x, y)
