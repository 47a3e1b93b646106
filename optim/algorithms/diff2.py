"""DP-GD, DIFF2-GD and DIFF2-BVR-L-SGD (DIFF2 Algorithms 1-4): the drivers of the DIFF2 kernels.

P clients are simulated in one process: their datasets are concatenated and each record carries
the weight ``1/(P n_p)``, so one clipping pass gives ``(1/P) sum_p ClippedMean(D_p)`` without a
loop over clients or samples.  The server adds ``N(0, sigma^2 C^2 I)`` to the client average
(Algorithm 1 line 11) from the run's dedicated noise generator.  The releases are written once, in
the kernels of :mod:`.diff2_kernels` (:class:`~.diff2_kernels.DIFF2Kernel` for a round,
:class:`~.diff2_kernels.LocalStepKernel` for a DIFF2-BVR local step); the optimizers here draw the
records, hand the kernels their :class:`~.diff2_kernels.ShardQueries` and step the parameters.  The same code runs one client
per process on torch.distributed (:class:`dpcalib.optim.algorithms.distributed.ClientsOnRanks`): the sum
over clients becomes an all-reduce, the release a broadcast from the server rank (see
:mod:`dpcalib.optim.run.transport`).
"""

from __future__ import annotations

import math

import torch

from ...accountant.validation import InputError
from ... import mechanisms as M

from ..tensors import flat, unflat
from ..randomness import uniform
from .core import PrivateOptimizer, check_clip, check_lr
from .diff2_kernels import DIFF2Kernel, LocalStepKernel, ShardQueries

__all__ = ["DIFF2GD", "DIFF2BVR"]


def _shards(shards, clients: int, here: list, n_min: int, to) -> dict:
    """``{client id: (x, y)}`` of the clients this process runs, validated."""
    if not isinstance(shards, (list, tuple)) or not shards:
        raise InputError("shards is not allowed: expected a non-empty list of (x, y) pairs, one per client.")
    if len(shards) != len(here):
        raise InputError(f"shards has {len(shards)} clients, which is not allowed: the calibration is for "
                         f"clients={clients}.")
    out = {}
    for p, pair in zip(here, shards):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise InputError(f"shards[{p}] is not allowed: expected an (x, y) pair.")
        x, y = (to(t) for t in pair)
        if x.shape[0] != y.shape[0]:
            raise InputError(f"shards[{p}] is not allowed: {x.shape[0]} inputs but {y.shape[0]} targets.")
        if x.shape[0] < n_min:
            raise InputError(f"shards[{p}] has n_p={x.shape[0]} records, which is not allowed: the calibration "
                             f"assumes every client has at least n_min={n_min} (fewer records means a larger "
                             "sensitivity than calibrated).")
        out[p] = (x, y)
    return out


def _client_release(noise, p: int, k: int):
    """Client p's release of its local step k: from row p of ``noise``, named for the record."""
    def release(value, std, **record):
        return noise.privatize_row(p, value, std, **{**record, "name": f"v~ (local k={k}, client {p})"})
    return release


class DIFF2GD(PrivateOptimizer):
    """DIFF2-GD (Algorithms 1-3).  Restart rounds ``r = 1, T+1, ...`` release
    ``v~_r = (1/P) sum_p ClippedMean(grad l(x_{r-1}, D_p), C1) + N(0, sigma1^2 C1^2 I)``; difference
    rounds release ``v~_r = (1/P) sum_p ClippedMean(grad l(x_{r-1}, .) - grad l(x_{r-2}, .), C_{2,r})
    + v~_{r-1} + N(0, sigma2^2 C_{2,r}^2 I)`` with ``C_{2,r} = C2 ||x_{r-1} - x_{r-2}||``; then
    ``x_r = x_{r-1} - lr v~_r``.  Claimed sensitivity per release: ``2 C / (n_min P)`` (Lemma C.1).

    ``mechanism``: a :class:`mechanisms.DIFF2GD` (or :class:`mechanisms.DPGD`, i.e. T = 1);
    ``noise``: its :class:`~mechanisms.CalibrationReport` (or a dict ``{"sigma1", "sigma2"}``;
    zeros give the non-private algorithm).

    Args:
        model: the model (its parameters are the starting point x_0).
        loss_fn: ``loss_fn(output, target)`` -> per-example losses.
        shards: one ``(x, y)`` pair per client this process runs (all P in one process), each with
            as many inputs as targets and at least the calibration's ``n_min`` records.
        mechanism: a :class:`dpcalib.mechanisms.DIFF2GD` with ``restart_interval`` T >= 2.
        noise: its calibration, or a dict with ``sigma1`` (restart rounds) and ``sigma2``
            (difference rounds; needed when T > 1): noise multipliers, std / clip, >= 0.
        C1: the clip of the restart rounds' per-example gradients, in [0, inf] (inf only with ``sigma1 = 0``).
        C2: the scale of the difference rounds' clip ``C2 ||x_{r-1} - x_{r-2}||``, in [0, inf]
            (inf, the default, only with ``sigma2 = 0``).
        lr: the step size, finite and > 0.
        seed: None (fresh entropy) or an integer >= 0 (reproducible).
        secure_mode: draw the streams from ChaCha20 and the noise on a fixed grid.
        record: record every release.
        record_noise: with recording on, keep each release's noise.
        clip_method: ``"auto"``, ``"ghost"``, ``"layers"`` or ``"vmap"``.
        chunk_size: the number of examples per chunk of the per-example computation.
        transport: the process layout (one process by default).
        sampler: how minibatches are drawn, or None for the plain draws.
        regularizer: ``regularizer(params) -> scalar tensor`` added to the objective, or None.

    Raises:
        InputError: if the mechanism is of another kind or has T = 1, a clip is NaN or negative or
            inf with nonzero noise, ``lr`` is not a finite number > 0, a needed noise level is
            missing, or ``shards`` does not match the calibration (see above).
    """

    name = "diff2-gd"
    _mechanism_types = (M.DIFF2GD,)
    supports_regularizer = True
    paper_values = {"lr": 0.125, "c2": 10.0}
    #: T = 1 makes every round a restart round: the run would silently be DP-GD
    refuses_dp_gd = True

    def __init__(self, model, loss_fn, shards, mechanism, noise, *, C1: float, C2: float = math.inf, lr: float,
                 seed: int | None = None, secure_mode: bool = False, record: bool = False, record_noise: bool = True,
                 clip_method: str = "auto", chunk_size: int = 1024, transport=None, sampler=None, regularizer=None):
        if not isinstance(mechanism, self._mechanism_types):
            raise InputError(f"mechanism={mechanism!r} is not allowed: expected "
                             f"{' or '.join('mechanisms.' + t.__name__ for t in self._mechanism_types)}.")
        super().__init__(model, loss_fn, mechanism=mechanism, noise=noise, seed=seed, secure_mode=secure_mode,
                         record=record, record_noise=record_noise, clip_method=clip_method, chunk_size=chunk_size,
                         transport=transport, sampler=sampler, regularizer=regularizer)
        m = mechanism
        self.T = getattr(m, "restart_interval", 1)
        if self.refuses_dp_gd and isinstance(m, M.DIFF2GD) and m.restart_interval == 1:
            raise InputError("mechanism.restart_interval=1 is not allowed for DIFF2-GD: every round would be a "
                             "restart round, i.e. the run would be DP-GD (use O.DPGD with M.DPGD, or T >= 2).")
        self.P, self.n_min, self.total_rounds = m.clients, m.n_min, m.rounds
        self.C1, self.C2 = check_clip(C1, "C1"), check_clip(C2, "C2")
        self.lr = check_lr(lr)
        self.sigma1 = self._need("sigma1")
        self.sigma2 = self._need("sigma2") if self.T > 1 else 0.0
        for c, s, cn, sn in ((self.C1, self.sigma1, "C1", "sigma1"), (self.C2, self.sigma2, "C2", "sigma2")):
            if c == math.inf and s > 0:
                raise InputError(f"{cn}=inf is not allowed with {sn}={s}: unclipped queries have unbounded "
                                 "sensitivity (use inf only for the non-private run, with zero noise).")
        # the clients this process runs (all P in one process; the rank's own on torch.distributed)
        self.shards = _shards(shards, self.P, self.transport.here(self.P), self.n_min, self._to)
        held = list(self.shards.values())
        self.x = torch.cat([s[0] for s in held])
        self.y = torch.cat([s[1] for s in held])
        self.w = torch.cat([torch.full((s[0].shape[0],), 1.0 / (self.P * s[0].shape[0]), device=self.device,
                                       dtype=self.dtype) for s in held])
        self.offsets = [0]
        for xs, _ in held:
            self.offsets.append(self.offsets[-1] + xs.shape[0])
        # which record each row of x is: (client, position in the client's shard)
        self.ids = (torch.cat([torch.full((s[0].shape[0],), p, device=self.device, dtype=torch.long)
                               for p, s in self.shards.items()]),
                    torch.cat([torch.arange(s[0].shape[0], device=self.device) for s in held]))
        self.prev = None   # x_{r-2}
        self.kernel = DIFF2Kernel(m, self.levels, C1=self.C1, C2=self.C2, T=self.T)

    @property
    def v(self):
        """The last release ``v~_{r-1}`` (the kernel's state)."""
        return self.kernel.v

    def holders(self) -> int:
        """The number of clients P.

        Returns:
            P, the calibration's number of clients.
        """
        return self.P

    # -- one round -------------------------------------------------------------------------------
    def is_restart(self, r: int) -> bool:
        """Is round ``r`` (1-based) a restart round (r = 1, T + 1, ...)?

        Args:
            r: the round, >= 1.

        Returns:
            True for a restart round.
        """
        return self.kernel.is_restart(r)

    def difference_clip(self, dx):
        """A difference round's clip ``C_{2,r} = C2 ||x_{r-1} - x_{r-2}||`` from the step length ``dx`` (a
        number, or a tensor of them: one per batched run); 0 where the iterate did not move.

        Args:
            dx: the step length ``||x_{r-1} - x_{r-2}||`` (a float, or a tensor of them), >= 0.

        Returns:
            The clip ``C2 dx`` (0 where ``dx`` is 0), of the same kind as ``dx``.
        """
        return self.kernel.difference_clip(dx)

    def _diff2_round(self, r: int) -> dict:
        """Lines 2-12 of Algorithm 1: returns x_r (does not change the model)."""
        cur = self.params()
        queries = ShardQueries(self, cur, self.prev, self.x, self.y, self.ids, self.w, round=r)
        vt, kind = self.kernel.step(queries, self.release, r, self.is_restart(r))
        self.counts[kind] += 1
        self.prev = {k: t.clone() for k, t in cur.items()}
        return unflat(flat(cur) - self.lr * self._regularized(vt, cur), cur)

    def _step(self, r: int) -> None:
        self._offer_output(self.params())      # x^out = x_{r^-1}, r^ ~ Unif[R]  (x_0^out := x_0)
        self._set_params(self._diff2_round(r))

    # -- privacy and state -----------------------------------------------------------------------
    def _events(self) -> list:
        return self.mechanism.events(self.levels, self.counts)

    def _noise_keys(self) -> tuple:
        return ("sigma1", "sigma2") if self.counts["difference"] else ("sigma1",)

    def _objective(self):
        return self.x, self.y, self.w

    def _state(self) -> dict:
        return {"prev": self.prev, **self.kernel.state_dict()}

    def _load_state(self, state: dict) -> None:
        self.prev = state["prev"]
        self.kernel.load_state_dict(state)


class DPGD(DIFF2GD):
    """DP-GD (DIFF2's baseline): DIFF2-GD with T = 1; every round releases
    ``(1/P) sum_p ClippedMean(grad l(x_{r-1}, D_p), C1) + N(0, sigma1^2 C1^2 I)``.
    ``mechanism``: :class:`mechanisms.DPGD` (or a :class:`mechanisms.DIFF2GD` with T = 1).

    Args:
        model: the model (its parameters are the starting point x_0).
        loss_fn: ``loss_fn(output, target)`` -> per-example losses.
        shards: one ``(x, y)`` pair per client this process runs (all P in one process), each with
            as many inputs as targets and at least the calibration's ``n_min`` records.
        mechanism: a :class:`dpcalib.mechanisms.DPGD`, or a :class:`dpcalib.mechanisms.DIFF2GD` with
            ``restart_interval`` 1 (then converted to DP-GD, and a calibration to its dict of noise levels).
        noise: its calibration, or a dict with ``sigma1``: noise multiplier, std / C1, >= 0.
        C1: the clip of the per-example gradients, in [0, inf] (inf only with ``sigma1 = 0``).
        lr: the step size, finite and > 0.
        **kwargs: the other keyword arguments of :class:`DIFF2GD` (``seed``, ``record``, ...).

    Raises:
        InputError: if the mechanism is a DIFF2-GD with ``restart_interval`` other than 1, or on any
            of :class:`DIFF2GD`'s checks.
    """

    refuses_dp_gd = False
    name = "dp-gd"
    paper_values = {"lr": 0.125}
    _mechanism_types = (M.DPGD, M.DIFF2GD)

    def __init__(self, model, loss_fn, shards, mechanism, noise, *, C1: float, lr: float, **kwargs):
        if isinstance(mechanism, M.DIFF2GD) and mechanism.restart_interval != 1:
            raise InputError(f"mechanism={mechanism!r} is not allowed: DP-GD is DIFF2-GD with restart_interval=1.")
        if isinstance(mechanism, M.DIFF2GD):   # a DIFF2-GD calibration with T = 1 drives DP-GD too
            mechanism = M.DPGD(mechanism.rounds, mechanism.clients, mechanism.n_min)
            if hasattr(noise, "algorithm"):
                noise = dict(noise.noise)
        super().__init__(model, loss_fn, shards, mechanism, noise, C1=C1, lr=lr, **kwargs)


class DIFF2BVR(DIFF2GD):
    """DIFF2-BVR-L-SGD (Algorithm 4): each DIFF2 round, then ``K - 1`` local steps on client
    ``p_r = 1 + (r mod P)`` with minibatches of ``b`` records drawn WITHOUT replacement:
    ``v~_k = ClippedMean(grad l(x_{k-1}, I_k) - grad l(x_{k-2}, I_k), C_{3,k}) + v~_{k-1}
    + N(0, sigma3^2 C_{3,k}^2 I)``, ``C_{3,k} = C3 ||x_{k-1} - x_{k-2}||``, ``x_k = x_{k-1} - lr v~_k``.
    Claimed sensitivity of a local release: ``2 C_{3,k} / b`` (Lemma E.1).  Returned iterate:
    ``x_{k^-1, r-1}`` with ``k^ ~ Unif[K]`` (DIFF2-E5).  ``C3`` defaults to ``C2`` (Thm 5.3).

    Args:
        model: the model (its parameters are the starting point x_0).
        loss_fn: ``loss_fn(output, target)`` -> per-example losses.
        shards: one ``(x, y)`` pair per client this process runs (all P in one process), each with
            as many inputs as targets and at least the calibration's ``n_min`` records.
        mechanism: a :class:`dpcalib.mechanisms.DIFF2BVR` (its ``local_steps`` K and ``batch_size`` b).
        noise: its calibration, or a dict with ``sigma1``, ``sigma2`` (when T > 1) and ``sigma3``
            (local steps; needed when K > 1): noise multipliers, std / clip, >= 0.
        C1: the clip of the restart rounds, in [0, inf] (inf only with ``sigma1 = 0``).
        C2: the scale of the difference rounds' clip, in [0, inf] (inf only with ``sigma2 = 0``).
        C3: the scale of the local steps' clip ``C3 ||x_{k-1} - x_{k-2}||``, in [0, inf] (inf only
            with ``sigma3 = 0``); None for ``C2``.
        lr: the step size, finite and > 0.
        **kwargs: the other keyword arguments of :class:`DIFF2GD` (``seed``, ``record``, ...).

    Raises:
        InputError: if the mechanism is not a DIFF2-BVR, C3 is NaN or negative or inf with nonzero
            ``sigma3``, ``sigma3`` is missing when K > 1, or on any of :class:`DIFF2GD`'s checks.
    """

    name = "diff2-bvr"
    _mechanism_types = (M.DIFF2BVR,)
    supports_regularizer = False
    refuses_dp_gd = False        # local steps: not DP-GD even at T = 1

    def __init__(self, model, loss_fn, shards, mechanism, noise, *, C1: float, C2: float = math.inf,
                 C3: float | None = None, lr: float, **kwargs):
        if not isinstance(mechanism, M.DIFF2BVR):
            raise InputError(f"mechanism={mechanism!r} is not allowed: expected mechanisms.DIFF2BVR.")
        self.K, self.b = mechanism.local_steps, mechanism.batch_size
        super().__init__(model, loss_fn, shards, mechanism, noise, C1=C1, C2=C2, lr=lr, **kwargs)
        self.C3 = check_clip(self.C2 if C3 is None else C3, "C3")
        self.sigma3 = self._need("sigma3") if self.K > 1 else 0.0
        if self.C3 == math.inf and self.sigma3 > 0:
            raise InputError(f"C3=inf is not allowed with sigma3={self.sigma3}: unclipped queries have unbounded "
                             "sensitivity.")
        self.local = [0] * self.P           # noisy local steps done by each client
        self.x_out = None                    # x^out_{r-1}
        self.client_generators, noise_generators = self.streams.nodes(self.P, range(self.P), self.device)
        self.privatizer.use_rows(noise_generators)
        self.local_kernel = LocalStepKernel(mechanism, self.levels, C3=self.C3)

    def _step(self, r: int) -> None:
        self._offer_output(self.x_out if self.x_out is not None else self.params())
        x0 = self.params()
        x1 = self._diff2_round(r)            # x_{1,r-1} = x_{0,r-1} - lr v~_r
        p = r % self.P                       # p_r = 1 + (r mod P), 0-based here
        cur, keep = self.transport.run_on(
            p, lambda: self._local_phase(r, p, self.shards[p], x0, x1, self.client_noise_source()), x0)
        self.local[p] += self.K - 1
        self.x_out = {n: t.clone() for n, t in keep.items()}
        self._set_params(cur)

    def client_noise_source(self):
        """The noise source the clients' local releases are drawn from (a check may override it).

        Returns:
            The run's :class:`~dpcalib.optim.algorithms.noise.NoiseSource` (row p: client p's stream).
        """
        return self.privatizer

    def _local_phase(self, r, p, shard, x0, x1, noise):
        """Algorithm 4 lines 4-9 on client p: K - 1 noisy local steps from x_{1,r-1} = x1.  The
        client samples with its own generator and draws its local noise from its own stream (row p
        of the noise source), as it would as a separate process.  Returns (x_K, x^out_r)."""
        xp, yp = shard
        gen = self.client_generators[p]
        before, cur = x0, x1
        self.local_kernel.v = self.v         # v~_{1,r-1}: the round's release
        keep, seen = x0, 1                   # reservoir over x_{0..K-1}: x^out_r = x_{k^-1, r-1}
        for k in range(2, self.K + 1):
            seen += 1
            if uniform(gen) < 1.0 / seen:
                keep = cur
            idx = self.sampler.without_replacement(xp.shape[0], self.b, gen, holder=p)
            queries = ShardQueries(self, cur, before, xp[idx], yp[idx], (p, idx), aggregate=False, round=r)
            vt, _ = self.local_kernel.step(queries, _client_release(noise, p, k), r)
            before, cur = cur, unflat(flat(cur) - self.lr * vt, cur)
        return cur, keep

    def _events(self) -> list:
        # every client's local releases are accounted by the busiest client's count
        return self.mechanism.events(self.levels, {**self.counts, "local": max(self.local)})

    def _noise_keys(self) -> tuple:
        return super()._noise_keys() + (("sigma3",) if max(self.local) else ())

    def _state(self) -> dict:
        return {**super()._state(), "local": list(self.local), "x_out": self.x_out,
                "client_rng": [g.get_state() for g in self.client_generators]}

    def _load_state(self, state: dict) -> None:
        super()._load_state(state)
        self.local, self.x_out = list(state["local"]), state["x_out"]
        for g, st in zip(self.client_generators, state["client_rng"]):
            g.set_state(st.cpu())
