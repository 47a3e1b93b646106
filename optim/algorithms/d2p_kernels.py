"""The D2P family's releases as a kernel: one iteration's noisy gradients of ClipD2P, ConstD2P and
AdaD2P, one row per node.

As the kernels of :mod:`.kernels`, :class:`D2PKernel` asks its :class:`~.kernels.Queries` for the
terms it needs -- here one row per node: the clipped sum (ClipD2P) or the plain sum (ConstD2P,
AdaD2P) of the node's sampled per-example gradients -- and releases them through the ``release``
callable it is handed (the run's row-wise noise: node i's noise from node i's stream), with one
std per node.  It keeps no state.  Its driver is the reference optimizer of :mod:`.d2p`, whose
:class:`NodeQueries` answer from the per-example gradients it computed at every node's point; the
push-sum mixing is the driver's.
"""

from __future__ import annotations

import torch

from ..clipping.points import clipped_point_sums
from .kernels import Kernel, Queries

__all__ = []


class NodeQueries(Queries):
    """The D2P queries: the per-example gradients ``g`` ``[nodes, M, d]`` of each node's sampled
    records at its point, ``mask`` ``[nodes, M]`` (0 for a padding slot); every answer has one row per node.

    Args:
        g: the per-example gradients, ``[nodes, M, d]``.
        mask: the sample mask, ``[nodes, M]``.
        plain_sum: ``plain_sum(g, mask)`` -> ``[nodes, d]``, the driver's unclipped sum (it may watch
            the gradients, as ConstD2P's assumed bound).
    """

    def __init__(self, g: torch.Tensor, mask: torch.Tensor, plain_sum):
        self.g, self.mask, self.plain_sum = g, mask, plain_sum

    def clipped_sum(self, c, stabilizer=None):
        """Each node's sum of its records' gradients clipped to ``c`` (norms in float64).

        Args:
            c: the clip norm, >= 0.
            stabilizer: must be None (no automatic clipping here).

        Returns:
            ``[nodes, d]``.
        """
        return clipped_point_sums(self.g, c, self.mask)

    def grad_sum(self):
        """Each node's sum of its records' unclipped gradients.

        Returns:
            ``[nodes, d]``.
        """
        return self.plain_sum(self.g, self.mask)


class D2PKernel(Kernel):
    """One D2P iteration's releases, node ``i``'s ``g_i + N(0, s_i^2 I)``: ``rule="clip"`` (ClipD2P)
    ``g_i = sum clip(g_im, C)``, ``s_i = sigma C``; ``"const"`` (ConstD2P) ``g_i = sum g_im``,
    ``s_i = sigma G`` (``C`` = G); ``"ada"`` (AdaD2P) ``g_i = sum g_im``, ``s_i = sigma ||g_i||``.

    Args:
        mechanism: a :class:`dpcalib.mechanisms.ClipD2P`, :class:`~dpcalib.mechanisms.ConstD2P` or
            :class:`~dpcalib.mechanisms.AdaD2P`.
        levels: the noise levels (``sigma``).
        rule: ``"clip"``, ``"const"`` or ``"ada"``.
        C: the clip (ClipD2P) or the assumed bound G (ConstD2P), >= 0; not used by AdaD2P.
    """

    name = "d2p"
    kinds = ("iteration", "iteration")          # every iteration makes an "iteration" release

    def __init__(self, mechanism, levels, *, rule: str, C: float | None = None):
        super().__init__(mechanism, levels)
        self.rule, self.C = rule, None if C is None else float(C)
        self.clip = self.C
        self.relation = getattr(mechanism, "relation", "replace-one")

    def asks(self, first):
        """The clipped sum at C (ClipD2P) or the plain sum.

        Args:
            first: ignored.

        Returns:
            ``(("clipped_sum", (C, None)),)`` or ``(("grad_sum", ()),)``.
        """
        return (("clipped_sum", (self.C, None)),) if self.rule == "clip" else (("grad_sum", ()),)

    def std(self, kind, values=None):
        """One std per node: ``sigma C`` (0 without noise), or AdaD2P's ``sigma ||g_i||``.

        Args:
            kind: ``"iteration"``.
            values: the nodes' noiseless values ``[nodes, d]`` (their number; AdaD2P: their norms).

        Returns:
            A float64 tensor ``[nodes]``.
        """
        sigma = self.levels["sigma"]
        if self.rule == "ada":
            return sigma * torch.linalg.vector_norm(values, dim=1).to(torch.float64)
        s = 0.0 if sigma == 0.0 else self.mechanism.std(kind, sigma, self.C)
        return torch.full((values.shape[0],), s, device=values.device, dtype=torch.float64)

    def step(self, queries, release, round, first=False):
        """Release every node's noisy gradient.

        Args:
            queries: the nodes' :class:`NodeQueries`.
            release: ``release(values, stds, **record)`` -> the released rows (node i's noise from its stream).
            round: the round of the release (1-based).
            first: ignored.

        Returns:
            ``(released rows, "iteration")``.
        """
        g = queries.clipped_sum(self.C) if self.rule == "clip" else queries.grad_sum()
        m = self.mechanism
        sens = None if self.rule == "ada" else m.sensitivity("iteration", self.C)
        return release(g, self.std("iteration", g), round=round, sensitivity=sens, relation=self.relation), "iteration"
