"""The runner: the loop that drives an optimizer's update, with its metrics, progress bar,
checkpoints and the privacy spent so far.

An update (a :class:`~dpcalib.optim.algorithms.core.PrivateOptimizer` subclass) knows how to make ONE round --
``step()``, the events of the releases it made, its state -- and nothing of the loop around it.
:class:`Runner` drives it: rounds up to the calibrated total, metrics (``loss``, ``grad_norm``,
``epsilon`` spent) every ``log_every`` rounds, a tqdm bar, atomic checkpoints.  A checkpoint holds
the model, the algorithm's state tensors, the round, the events composed so far, the metrics and the
recorded releases, and -- for a seeded run only -- the three generator states, so that a seeded resume
makes exactly the same draws as an uninterrupted run.  A run of fresh entropy (no seed, the default)
keeps no generator state: its resume draws its noise, batches and output choice afresh (statistically,
not bitwise, the same run), so no two continuations of one checkpoint ever share a noise draw.  **A
checkpoint is as secret as the data**: it holds the model trained on it, the epoch's permutation of a
shuffled run, and a seeded run's generator states (every later batch and noise draw; for a secure run,
the ChaCha20 keys).
It is plain data (tensors, numbers, strings, lists, dicts) and is
read with ``torch.load(weights_only=True)``: loading never runs code.

The same update is driven by this runner on one process, on torch.distributed (the transport
decides where each crossing goes) and by the checks (probes and audits step it release by
release with their own samplers, per-example objects and replay noise sources).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import fields, is_dataclass

import torch
from ...accountant.validation import InputError, writable_file

__all__ = ["Runner"]


CHECKPOINT_FORMAT = "dpcalib-optimizer/2"      # /2: plain containers only (weights_only=True)


def _secure(update) -> bool:
    """Does the update draw from secure_mode's generators?"""
    streams = getattr(update, "streams", None)
    return bool(getattr(streams, "secure", False))


def _shape(mechanism) -> dict:
    """The run's shape as plain values: the mechanism's name and its dataclass fields."""
    out = {"name": getattr(mechanism, "name", type(mechanism).__name__)}
    if is_dataclass(mechanism):
        for f in fields(mechanism):
            v = getattr(mechanism, f.name)
            out[f.name] = v if v is None or isinstance(v, (bool, int, float, str)) else repr(v)
    return out


def _move(obj, device):
    """Tensors of a (nested) checkpoint entry onto ``device`` (generator states stay on the CPU)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _move(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_move(v, device) for v in obj)
    return obj


class Runner:
    """Drives ``update`` (an optimizer): :meth:`run`, :meth:`log_metrics`, checkpoints.

    Args:
        update: the optimizer to drive (a ``PrivateOptimizer``).
    """

    def __init__(self, update):
        self.update = update

    def run(self, rounds: int | None = None, *, log_every: int | None = None, progress: bool | None = None,
            checkpoint: str | os.PathLike | None = None, checkpoint_every: int | None = None,
            delta: float | None = None, test=None, metrics: dict | None = None) -> list[dict]:
        """Run ``rounds`` more rounds (default: to the calibrated total).

        Every ``log_every`` rounds (default ``max(1, total // 100)``) and at the end, appends
        ``{"round", "loss", "grad_norm", "epsilon"}`` to :attr:`metrics` (``epsilon``: the best
        certified eps spent so far; at the end of the calibrated run, the run's eps).  ``progress``: tqdm bar
        (``None``: shown on a terminal).  ``checkpoint``/``checkpoint_every``: save the whole state
        there every that many rounds and at the end; :meth:`load_checkpoint` resumes exactly.
        ``test=(x, y)`` and ``metrics={"name": fn}``: also logged, as the update's ``evaluate`` computes
        them (test loss, e.g. accuracy on the training and test records).

        Args:
            rounds: rounds to run, in [0, rounds left]; None: all rounds left.
            log_every: log metrics every this many rounds, >= 1 (None: ``max(1, total // 100)``).
            progress: show a tqdm bar (None: on a terminal).
            checkpoint: the checkpoint path, or None (no checkpoints).
            checkpoint_every: save every this many rounds, >= 1 (None: at the end only).
            delta: the delta of the logged eps (None: the update's).
            test: None, or ``(x, y)`` test records to evaluate.
            metrics: None, or name -> metric function, evaluated by the update.

        Returns:
            The update's metrics list (one dict per logged round).

        Raises:
            InputError: if ``rounds``, ``log_every`` or ``checkpoint_every`` is out of range, or the
                checkpoint path is not writable.
        """
        u = self.update
        left = u.total_rounds - u.round
        n = left if rounds is None else int(rounds)
        if n < 0 or n > left:
            raise InputError(f"rounds={rounds!r} is not allowed: expected an integer in [0, {left}] "
                             f"({u.round} of {u.total_rounds} calibrated rounds are done).")
        every = max(1, u.total_rounds // 100) if log_every is None else int(log_every)
        if every < 1:
            raise InputError(f"log_every={log_every!r} is not allowed: expected an integer >= 1.")
        if checkpoint_every is not None and int(checkpoint_every) < 1:
            raise InputError(f"checkpoint_every={checkpoint_every!r} is not allowed: expected an integer >= 1.")
        if checkpoint is not None:          # checked before the first round, not after the hundredth
            writable_file(u.transport.path(os.fspath(checkpoint)), "checkpoint")
        from tqdm.auto import tqdm

        bar = tqdm(total=n, desc=u.name, disable=(None if progress is None else not progress), leave=False)
        try:
            for i in range(n):
                u.step()
                bar.update(1)
                if u.round % every == 0 or i == n - 1:
                    self.log_metrics(delta, test=test, metrics=metrics)
                    bar.set_postfix(loss=f"{u.metrics[-1]['loss']:.4g}", eps=f"{u.metrics[-1]['epsilon']:.3g}")
                if checkpoint is not None and (
                        (checkpoint_every is not None and u.round % int(checkpoint_every) == 0) or i == n - 1):
                    self.save_checkpoint(checkpoint)
        finally:
            bar.close()
        return u.metrics

    def log_metrics(self, delta=None, *, test=None, metrics: dict | None = None) -> None:
        """Append (or replace, for the same round) the metrics of the current round.

        Args:
            delta: the delta of the logged eps (None: the update's).
            test: None, or ``(x, y)`` test records to evaluate.
            metrics: None, or name -> metric function, evaluated by the update.
        """
        u = self.update
        m = {"round": u.round, **u.evaluate(test=test, metrics=metrics)}
        d = u.delta if delta is None else delta
        m["epsilon"] = u.epsilon_metric(d)
        if u.metrics and u.metrics[-1]["round"] == u.round:
            u.metrics[-1] = m
        else:
            u.metrics.append(m)

    def state_dict(self) -> dict:
        """The whole state of the run as plain containers (what a checkpoint holds).

        Returns:
            A dict: algorithm, round, model, algorithm state, counts, metrics, generator states,
            noise source, output state, noise levels, format, run shape, transport, secure mode.
        """
        u = self.update
        return {
            "algorithm": u.name, "round": u.round, "total_rounds": u.total_rounds,
            "model": {k: v.clone() for k, v in u.model.state_dict().items()},
            "state": u.algorithm_state(), "counts": dict(u.counts), "metrics": list(u.metrics),
            # a run of fresh entropy keeps no generator state: its resume (or two forks of one file) draws afresh
            "rng": ({"data": u.data_generator.get_state(), "output": u.output_generator.get_state()}
                    if u.streams.seeded else None),
            "noise": u.privatizer.state_dict(), "out": u.output_state()[0], "n_candidates": u.output_state()[1],
            "levels": dict(u.levels), "format": CHECKPOINT_FORMAT,
            "mechanism": _shape(u.mechanism), "transport": u.transport.name, "secure_mode": _secure(u),
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`.  A state of another algorithm, run shape, noise or
        model is refused with a ``ValueError`` (resuming it would spend privacy that was never
        accounted, or silently train another model).

        Args:
            state: a dict from :meth:`state_dict`.

        Raises:
            InputError: if the state is not a checkpoint of this format, or its algorithm, rounds,
                transport, secure mode, run shape, noise levels or model shapes differ from this run's.
        """
        u = self.update
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise InputError("checkpoint is not allowed: it is not a dpcalib optimizer checkpoint "
                             f"(format {state.get('format') if isinstance(state, dict) else type(state).__name__!r}, "
                             f"expected {CHECKPOINT_FORMAT!r}).")
        if state.get("algorithm") != u.name or state.get("total_rounds") != u.total_rounds:
            raise InputError(f"checkpoint is not allowed: it is a {state.get('algorithm')!r} run of "
                             f"{state.get('total_rounds')} rounds; this is {u.name!r} with {u.total_rounds}.")
        if state.get("transport", "one-process") != u.transport.name:
            raise InputError(f"checkpoint is not allowed: it was written on the {state.get('transport')!r} transport; "
                             f"this run is on {u.transport.name!r}.")
        if bool(state.get("secure_mode", False)) != _secure(u):
            raise InputError(f"checkpoint is not allowed: it was written with secure_mode={bool(state.get('secure_mode'))}"
                             f" and this run has secure_mode={_secure(u)} (its generators' states do not fit).")
        if state.get("mechanism") != _shape(u.mechanism):
            raise InputError(f"checkpoint is not allowed: its run shape {state.get('mechanism')} differs from "
                             f"this run's {_shape(u.mechanism)}.")
        if state.get("levels") != u.levels:
            raise InputError(f"checkpoint is not allowed: its noise levels {state.get('levels')} differ from "
                             f"this run's {u.levels}.")
        mine = {k: tuple(v.shape) for k, v in u.model.state_dict().items()}
        theirs = {k: tuple(v.shape) for k, v in state["model"].items()}
        if mine != theirs:
            raise InputError(f"checkpoint is not allowed: its model's parameters {theirs} differ from this "
                             f"model's {mine}.")
        u.model.load_state_dict(state["model"])
        u.load_algorithm_state(_move(state["state"], u.device))
        u.round = int(state["round"])
        u.counts = Counter(state["counts"])
        u.metrics = list(state["metrics"])
        u.privatizer.load_state_dict(state["noise"])      # refuses a seeded / unseeded mismatch first
        if state["rng"] is not None:
            u.data_generator.set_state(state["rng"]["data"])
            u.output_generator.set_state(state["rng"]["output"])
        u.load_output_state(_move(state["out"], u.device), state["n_candidates"])

    def save_checkpoint(self, path) -> None:
        """Write the whole state atomically (a crash mid-write leaves the previous file intact).

        Args:
            path: the checkpoint path (the transport may add a per-rank suffix).
        """
        u = self.update
        path = u.transport.path(os.fspath(path))
        tmp = f"{path}.tmp"
        torch.save(self.state_dict(), tmp)
        os.replace(tmp, path)

    def load_checkpoint(self, path) -> None:
        """Resume from a file written by :meth:`save_checkpoint`.  The file is read with
        ``torch.load(weights_only=True)``: tensors, numbers, strings, lists and dicts only, so a
        checkpoint from someone else cannot run code; anything else is refused (``ValueError``).

        Args:
            path: the checkpoint path (the transport may add a per-rank suffix).

        Raises:
            InputError: if the file does not exist, cannot be loaded with ``weights_only=True``, or
                does not fit this run (:meth:`load_state_dict`).
        """
        u = self.update
        path = u.transport.path(os.fspath(path))
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise InputError(f"checkpoint={os.fspath(path)!r} is not allowed: no such file.") from None
        except Exception as exc:       # pickle.UnpicklingError (a forbidden global), a corrupt or foreign file
            msg = " ".join(str(exc).split())[:300]
            raise InputError(f"checkpoint={os.fspath(path)!r} is not allowed: it is not a plain-tensor dpcalib "
                             f"checkpoint loadable with weights_only=True ({type(exc).__name__}: {msg}).") from None
        self.load_state_dict(state)
