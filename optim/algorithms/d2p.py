"""AdaD2P, ConstD2P and ClipD2P (AdaD2P paper, Algorithms 1-3): decentralised push-sum SGD with
Gaussian noise over the time-varying directed exponential graph (AdaD2P paper App. C).

The n nodes are simulated in one process with their parameters stacked along dimension 0
(``X`` is n x d); per-node, per-sample gradients and their clipped sums come from the clipping
package (:mod:`dpcalib.optim.clipping.points`: one nested ``torch.func.vmap``, norms in float64),
the mixing is one matrix product ``X <- P^k X_half``.  The same code runs one node per process on
torch.distributed: ``X`` then has the rank's one row and the mixing is a push-sum exchange
(:class:`dpcalib.optim.run.ranks.NodesOnRanks`; see :mod:`dpcalib.optim.run.transport`).  Node i's
iteration k::

  g_i = grad l(z_i; xi_i)                         (ClipD2P: clipped to C)
  x_i^{k+1/2} = x_i - lr (g_i + N_i),   N_i ~ N(0, s_i^2 I)
      s_i = sigma C (ClipD2P), sigma G (ConstD2P), sigma ||g_i|| (AdaD2P: NO valid guarantee)
  x^{k+1} = P^k x^{k+1/2},  w^{k+1} = P^k w^k,  z = x / w.

Sampling follows the accountant: ONE example per node, uniformly (replace-one; the algorithm as
written), or -- when the calibration is under add/remove, whose accountant assumes Poisson
sampling (AdaD2P-E4) -- every example independently with probability 1/J.

The releases are written once, in :class:`~.d2p_kernels.D2PKernel`; the optimizers here sample,
compute the per-example gradients, hand the kernel its :class:`~.d2p_kernels.NodeQueries` and mix.
"""

from __future__ import annotations

import math

import torch

from ...accountant.validation import InputError
from ... import mechanisms as M
from ...mechanisms import paper_warning

from ..tensors import flat, unflat
from .core import PrivateOptimizer, check_clip, check_lr
from .d2p_kernels import D2PKernel, NodeQueries
from ..clipping.points import point_grads
from ..clipping.precision import exact_float32
from ..run.graph import VARIANTS

__all__ = []


class _Decentralized(PrivateOptimizer):
    _mechanism_type = None

    def __init__(self, model, loss_fn, node_data, mechanism, noise, *, lr: float, graph: str = "paper",
                 **kwargs):
        if not isinstance(mechanism, self._mechanism_type):
            raise InputError(f"mechanism={mechanism!r} is not allowed: expected "
                             f"mechanisms.{self._mechanism_type.__name__}.")
        super().__init__(model, loss_fn, mechanism=mechanism, noise=noise, **kwargs)
        if graph not in VARIANTS:
            raise InputError(f"graph={graph!r} is not allowed: expected one of {VARIANTS}.")
        if not isinstance(node_data, (list, tuple)) or not node_data:
            raise InputError("node_data is not allowed: expected a non-empty list of (x, y) pairs, one per node.")
        here = self.transport.here(len(node_data))      # the nodes this process runs
        if len(here) != len(node_data):
            raise InputError(f"node_data has {len(node_data)} nodes, which is not allowed: this process runs "
                             f"{len(here)} on the {self.transport.name} transport.")
        for i, pair in zip(here, node_data):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise InputError(f"node_data[{i}] is not allowed: expected an (x, y) pair.")
        xs, ys = zip(*((self._to(a), self._to(b)) for a, b in node_data))
        sizes = {x.shape[0] for x in xs} | {y.shape[0] for y in ys}
        if len(sizes) != 1:
            raise InputError(f"node_data is not allowed: nodes hold {sorted(sizes)} records; expected the same J "
                             "everywhere (equal shards).")
        self.J = sizes.pop()
        J_cal = getattr(mechanism, "samples_per_node", self.J)
        if self.J < J_cal:
            raise InputError(f"node_data has J={self.J} records per node, which is not allowed: the calibration "
                             f"assumes J >= samples_per_node={J_cal} (a larger sampling rate than calibrated).")
        self.xs, self.ys = torch.stack(xs), torch.stack(ys)          # [nodes here, J, ...]
        self.here = here
        self.nodes = self.transport.total(len(xs))                    # nodes in the network
        self.graph, self.lr = graph, check_lr(lr)
        self.total_rounds = mechanism.iterations
        self.relation = getattr(mechanism, "relation", "replace-one")
        self.poisson = self.relation == "add/remove"
        self.like = {k: v.clone() for k, v in self.params().items()}
        # node i's sampling and noise streams are the same whichever process runs it
        self.node_generators, noise_generators = self.streams.nodes(self.nodes, here, self.device)
        self.privatizer.use_rows(noise_generators)
        x0 = flat(self.like)
        self.X = x0.unsqueeze(0).repeat(len(here), 1)                 # x_i^0 = z_i^0 = model's parameters
        self.w = torch.ones(len(here), device=self.device, dtype=self.dtype)

        self._grads = point_grads(self.model, self.loss_fn, self.like)

    def _sample(self):
        """``(x [n, M, ...], y [n, M], mask [n, M])``: the examples each node here uses this iteration."""
        n, J = len(self.here), self.J
        gens = self.node_generators       # node i samples with its own generator (as rank i would)
        if not self.poisson:
            idx = torch.stack([self.sampler.one(J, g, holder=i) for i, g in zip(self.here, gens)])
            mask = torch.ones(n, 1, device=self.device, dtype=self.dtype)
        else:
            keep = torch.zeros(n, J, dtype=torch.bool, device=self.device)
            for row, (i, g) in enumerate(zip(self.here, gens)):
                keep[row, self.sampler.poisson(J, 1.0 / J, g, holder=i)] = True
            m = max(1, int(keep.sum(1).max()))
            order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)   # kept indices first
            idx = order[:, :m]
            mask = torch.gather(keep, 1, idx).to(self.dtype)
        rows = torch.arange(n, device=self.device).unsqueeze(1)
        return self.xs[rows, idx], self.ys[rows, idx], mask, idx

    def holders(self) -> int:
        return self.nodes

    def _node_grads(self, Z):
        xs, ys, mask, idx = self._sample()
        node = torch.as_tensor(self.here, device=self.device).reshape(-1, 1).expand_as(idx)
        g = self.per_example.grads(self._grads, Z, xs, ys, ids=(node, idx))   # [n, M, d]
        return g, mask

    def _combine(self, g, mask):
        """The nodes' unclipped sums ``[n, d]`` (the kernel's ``grad_sum``)."""
        return torch.einsum("nm,nmd->nd", mask, g)

    def _release_rows(self, values, stds, **record):
        return self.privatizer.privatize_rows(values, stds, names=[f"node {i}: g + N" for i in self.here], **record)

    def _step(self, r: int) -> None:
        k = r - 1
        Z = self.X / self.w.unsqueeze(1)
        g, mask = self._node_grads(Z)
        noisy, kind = self.kernel.step(NodeQueries(g, mask, self._combine), self._release_rows, r)
        half = self.X - self.lr * noisy
        self.X, self.w = self.transport.mix(half, self.w, k, self.graph)
        self.counts[kind] += 1
        self._sync_model()

    def _sync_model(self):
        self._set_params(unflat(self.transport.view(self.X, self.w), self.like))

    def average(self) -> torch.Tensor:
        """The network average x-bar (flat; a collective on a multi-process transport)."""
        return self.transport.average(self.X)

    def _eval_params(self) -> dict:
        return unflat(self.average(), self.like)

    def _objective(self):
        """The records of the nodes here, each weighted 1 / (nodes J) of the global objective."""
        m, J = len(self.here), self.J
        w = torch.full((m * J,), 1.0 / (self.nodes * J), device=self.device, dtype=self.dtype)
        return self.xs.reshape(m * J, *self.xs.shape[2:]), self.ys.reshape(m * J, *self.ys.shape[2:]), w

    def _state(self) -> dict:
        return {"X": self.X, "w": self.w, "node_rng": [g.get_state() for g in self.node_generators]}

    def _load_state(self, state: dict) -> None:
        self.X, self.w = state["X"], state["w"]
        for g, st in zip(self.node_generators, state["node_rng"]):
            g.set_state(st.cpu())

    def _events(self) -> list:
        return self.mechanism.events(self.levels, self.counts)


class ClipD2P(_Decentralized):
    """ClipD2P (AdaD2P paper, Algorithm 3): per-example gradients clipped to C, noise ``N(0, sigma^2 C^2 I)``.
    Claimed sensitivity per node and iteration: C (add/remove) or 2C (replace-one).
    ``mechanism``: :class:`mechanisms.ClipD2P`; ``noise``: its calibration (``sigma``).

    Args:
        model: the model (its parameters are every node's starting point).
        loss_fn: ``loss_fn(output, target)`` -> per-example losses.
        node_data: one ``(x, y)`` pair per node this process runs, every node with the same number
            J of records, J >= the calibration's ``samples_per_node``.
        mechanism: a :class:`dpcalib.mechanisms.ClipD2P`.
        noise: its calibration (a CalibrationReport) or a dict of noise levels
            (``sigma``: noise multiplier, std / C, >= 0).
        C: the clipping threshold on per-example gradients, in [0, inf]; inf only with ``sigma = 0``.
        lr: the step size, finite and > 0.
        graph: the mixing graph's variant, ``"paper"`` or ``"sgp"``.
        **kwargs: passed on to :class:`~dpcalib.optim.algorithms.core.PrivateOptimizer` (``seed``,
            ``record``, ``transport``, ...).

    Raises:
        InputError: if the mechanism is of another kind, ``graph`` is unknown, ``node_data`` is not
            a non-empty list of ``(x, y)`` pairs, one per node this process runs, with the same J >=
            ``samples_per_node`` everywhere, ``lr`` is not a finite number > 0, or the noise has no ``sigma``,
            or C is negative, NaN, or inf with ``sigma > 0``.
    """

    name = "clipd2p"
    _mechanism_type = M.ClipD2P
    _rule = "clip"

    def __init__(self, model, loss_fn, node_data, mechanism, noise, *, C: float, lr: float, **kwargs):
        super().__init__(model, loss_fn, node_data, mechanism, noise, lr=lr, **kwargs)
        self.C, self.sigma = check_clip(C, "C"), self._need("sigma")
        if self.C == math.inf and self.sigma > 0:
            raise InputError(f"C=inf is not allowed with sigma={self.sigma}: unclipped gradients have unbounded "
                             "sensitivity.")
        self.kernel = D2PKernel(mechanism, self.levels, rule=self._rule, C=self.C)


class ConstD2P(ClipD2P):
    """ConstD2P (AdaD2P paper, Algorithm 2): NO clipping, noise ``N(0, sigma^2 G^2 I)`` with G an estimated
    gradient bound.  The claimed sensitivity (G or 2G) holds only if every per-example gradient
    norm is <= G (AdaD2P-E2); the run counts the violations in ``bound_violations``.

    Args:
        mechanism: a :class:`dpcalib.mechanisms.ConstD2P`.
        noise: its calibration (a CalibrationReport) or a dict of noise levels
            (``sigma``: noise multiplier, std / G, >= 0).
        G: the assumed bound on per-example gradient norms, in [0, inf]; inf only with ``sigma = 0``.
        model, loss_fn, node_data, lr, graph, ``**kwargs``: as :class:`ClipD2P`.

    Raises:
        InputError: as :class:`ClipD2P`'s, with G in place of C.
    """

    name = "constd2p"
    _mechanism_type = M.ConstD2P
    _rule = "const"

    def __init__(self, model, loss_fn, node_data, mechanism, noise, *, G: float, lr: float, **kwargs):
        super().__init__(model, loss_fn, node_data, mechanism, noise, C=G, lr=lr, **kwargs)
        self.bound_violations = 0

    @exact_float32()
    def _combine(self, g, mask):
        norms = torch.linalg.vector_norm(g, dim=2)
        new = int(((norms > self.C) & (mask > 0)).sum())
        if new and not self.bound_violations:
            paper_warning("AdaD2P-E2", f"a per-example gradient norm {float(norms.max()):.4g} exceeds ConstD2P's assumed "
                          f"bound G={self.C:g} (round {self.round}): the claimed sensitivity and the epsilon do not "
                          "hold for this run; clip at G (ClipD2P) to make them hold")
        self.bound_violations += new
        return torch.einsum("nm,nmd->nd", mask, g)

    def _state(self) -> dict:
        return {**super()._state(), "violations": self.bound_violations}

    def _load_state(self, state: dict) -> None:
        super()._load_state(state)
        self.bound_violations = int(state["violations"])


class NoGuarantee:
    """Mixin for AdaD2P runs: no (eps, delta) exists -- eps spent is inf, the accountant raises."""

    def accountant(self):
        """The mechanism's accountant, which AdaD2P does not have.

        Returns:
            Nothing: AdaD2P's mechanism raises instead.

        Raises:
            NoPrivacyGuaranteeError: always (raised by the mechanism's ``accountant``).
        """
        return self.mechanism.accountant()

    def epsilon_spent(self, delta=None, accountant: str = "best") -> float:
        """The eps spent so far: none holds once a round has run.

        Args:
            delta: ignored (no delta gives a finite eps).
            accountant: ignored.

        Returns:
            0.0 before the first round, inf after.
        """
        return math.inf if self.round else 0.0

    def epsilon_metric(self, delta) -> float:
        """The metrics' eps: as :meth:`epsilon_spent`.

        Args:
            delta: ignored.

        Returns:
            0.0 before the first round, inf after.
        """
        return self.epsilon_spent()


class AdaD2P(NoGuarantee, _Decentralized):
    """AdaD2P (AdaD2P paper, Algorithm 1): noise ``N(0, sigma^2 ||g_i||^2 I)`` scaled by the private gradient's
    own norm, no clipping.  It has NO finite (eps, delta) guarantee (AdaD2P-E1): provided as the
    paper's algorithm and as a target for the empirical checks; :meth:`epsilon_spent` is inf and :meth:`accountant`
    raises :class:`mechanisms.NoPrivacyGuaranteeError`.  ``noise``: ``{"sigma": s}``.

    Args:
        mechanism: a :class:`dpcalib.mechanisms.AdaD2P`.
        noise: its calibration (a CalibrationReport) or a dict of noise levels
            (``sigma``: std / ||g_i||, >= 0).
        model, loss_fn, node_data, lr, graph, ``**kwargs``: as :class:`ClipD2P`.

    Raises:
        InputError: as :class:`ClipD2P`'s, but for the clip (AdaD2P has none).
    """

    name = "adad2p"
    _mechanism_type = M.AdaD2P

    def __init__(self, model, loss_fn, node_data, mechanism, noise, *, lr: float, **kwargs):
        super().__init__(model, loss_fn, node_data, mechanism, noise, lr=lr, **kwargs)
        self.sigma = self._need("sigma")
        self.kernel = D2PKernel(mechanism, self.levels, rule="ada")


