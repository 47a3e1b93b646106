"""Opacus's ``save_checkpoint`` / ``load_checkpoint`` for :class:`~.engine.PrivacyEngine`.

The checkpoint is one dict of plain data and tensors, with Opacus's keys (``module_state_dict``,
``privacy_accountant_state_dict``, ``optimizer_state_dict``, ``noise_scheduler_state_dict``,
``grad_clip_scheduler_state_dict``) and the entries of the user's ``checkpoint_dict`` beside them,
plus ``data_loader_state_dict`` (the loader's position mid-pass).  It is read back with
``torch.load(weights_only=True)``: nothing is unpickled, so a scheduler whose state holds a
function (Opacus's ``LambdaNoise``) is refused at load in one line.  ``path``: a file name
(written to ``path.tmp`` and renamed: a crash leaves the old checkpoint whole) or a binary file
object (``io.BytesIO``), as ``torch.save`` takes.

**What a checkpoint holds, and what a resume or a fork gives.**  The module, the optimizer (the
wrapped one, the kernel's state, the round, the noise levels and clip), the schedulers, the ledger,
the epoch charged so far and the private loader's position (taken from the optimizer's loader, so
Opacus's call without ``data_loader=`` keeps it too).  A run of fresh entropy (no ``seed``, the
default) keeps **no generator state**: its resume goes on from the saved position with the new
engine's fresh noise and batches -- statistically, not bitwise, the same run: Poisson batches are
drawn afresh, a shuffled or balls-in-bins epoch goes on with the records it has not used (so each
record is still in one batch an epoch, and the epoch is not charged twice).  Two forks of one file
then never share a noise draw; each fork's eps is its own lineage's, and releasing both spends both.
A seeded run (or one with the user's own ``noise_generator`` or loader generator) keeps its
generators' states and resumes bit for bit; loading one such checkpoint a second time in a process
warns that the continuations share their noise.  A checkpoint of the other mode (secure / plain,
seeded / unseeded) is refused in one line.

The optimizer's state carries the noise levels and the clip norm the run was at.  By default they
are not taken back (Opacus's behaviour: they are the optimizer's configuration, which a scheduler
sets); ``resume_noise=True`` takes them back, so that a run resumed mid-schedule makes the same
releases bit for bit.  Either way the ledger is the saved one: ``get_epsilon`` after a load is the
eps of the steps that ran before the save.
"""

from __future__ import annotations

import os

import torch

from ...accountant.validation import InputError

__all__ = []

_KEYS = ("module_state_dict", "privacy_accountant_state_dict", "optimizer_state_dict", "noise_scheduler_state_dict",
         "grad_clip_scheduler_state_dict", "data_loader_state_dict")


def _module_of(module):
    """The user's module under a wrapper (its ``state_dict`` keys are the user's, as Opacus saves)."""
    inner = getattr(module, "inner", None)
    return inner if isinstance(inner, torch.nn.Module) else module


def save(engine, *, path, module, optimizer=None, noise_scheduler=None, grad_clip_scheduler=None, checkpoint_dict=None,
         module_state_dict_kwargs=None, torch_save_kwargs=None, data_loader=None) -> None:
    """Write the checkpoint (the module text); ``checkpoint_dict``'s keys must not be Opacus's.

    Args:
        engine: the :class:`~.engine.PrivacyEngine` whose ledger is saved.
        path, module, optimizer, noise_scheduler, grad_clip_scheduler, checkpoint_dict, module_state_dict_kwargs,
            torch_save_kwargs, data_loader: as :meth:`~.engine.PrivacyEngine.save_checkpoint`.

    Raises:
        InputError: if ``checkpoint_dict`` has a key of the checkpoint's own.
    """
    extra = dict(checkpoint_dict or {})
    taken = sorted(set(extra) & set(_KEYS))
    if taken:
        raise InputError(f"checkpoint_dict[{taken[0]!r}] is not allowed: the checkpoint keeps its own entry there.")
    state = dict(extra)
    state["module_state_dict"] = _module_of(module).state_dict(**(module_state_dict_kwargs or {}))
    state["privacy_accountant_state_dict"] = engine.state_dict()
    if optimizer is not None:
        state["optimizer_state_dict"] = optimizer.state_dict()
    if noise_scheduler is not None:
        state["noise_scheduler_state_dict"] = noise_scheduler.state_dict()
    if grad_clip_scheduler is not None:
        state["grad_clip_scheduler_state_dict"] = grad_clip_scheduler.state_dict()
    if data_loader is not None and hasattr(data_loader, "state_dict"):
        state["data_loader_state_dict"] = data_loader.state_dict()   # the optimizer's state has its loader's too
    kwargs = torch_save_kwargs or {}
    if isinstance(path, (str, os.PathLike)):
        tmp = f"{os.fspath(path)}.tmp"
        torch.save(state, tmp, **kwargs)
        os.replace(tmp, path)
    else:
        torch.save(state, path, **kwargs)


def load(engine, *, path, module, optimizer=None, noise_scheduler=None, grad_clip_scheduler=None,
         module_load_dict_kwargs=None, torch_load_kwargs=None, data_loader=None, resume_noise: bool = False) -> dict:
    """Read the checkpoint back into the given objects; returns the whole dict.

    Args:
        engine: the :class:`~.engine.PrivacyEngine` whose ledger is replaced by the saved one.
        path, module, optimizer, noise_scheduler, grad_clip_scheduler, module_load_dict_kwargs, torch_load_kwargs,
            data_loader, resume_noise: as :meth:`~.engine.PrivacyEngine.load_checkpoint`.

    Returns:
        The checkpoint's dict (``checkpoint_dict``'s entries among them).

    Raises:
        InputError: if ``torch_load_kwargs`` asks for ``weights_only=False``, the file holds an object other
            than plain data and tensors, or it is not a checkpoint of ``save_checkpoint``.
    """
    kwargs = dict(torch_load_kwargs or {})
    if kwargs.pop("weights_only", True) is not True:
        raise InputError("torch_load_kwargs={'weights_only': False} is not allowed: a checkpoint is read without "
                         "unpickling anything.")
    try:
        state = torch.load(path, weights_only=True, **kwargs)
    except Exception as exc:          # torch's UnpicklingError names what it refused
        if "weights_only" not in str(exc) and "Unsupported global" not in str(exc):
            raise
        raise InputError(f"path={path!r} is not allowed: the checkpoint holds an object other than plain data and "
                         "tensors (a scheduler's function?), which is never unpickled.") from None
    if not isinstance(state, dict) or "privacy_accountant_state_dict" not in state:
        raise InputError(f"path={path!r} is not allowed: it is not a checkpoint of PrivacyEngine.save_checkpoint.")
    _module_of(module).load_state_dict(state["module_state_dict"], **(module_load_dict_kwargs or {}))
    engine.load_state_dict(state["privacy_accountant_state_dict"])
    opt_state = state.get("optimizer_state_dict")
    if optimizer is not None and opt_state:
        if resume_noise:
            optimizer.load_state_dict(opt_state)
        else:
            levels, clip = dict(optimizer.noise), optimizer.max_grad_norm
            optimizer.load_state_dict(opt_state)
            optimizer.set_noise(**levels)
            optimizer.max_grad_norm = clip
    if noise_scheduler is not None and "noise_scheduler_state_dict" in state:
        noise_scheduler.load_state_dict(state["noise_scheduler_state_dict"])
    if grad_clip_scheduler is not None and "grad_clip_scheduler_state_dict" in state:
        grad_clip_scheduler.load_state_dict(state["grad_clip_scheduler_state_dict"])
    own = getattr(optimizer, "loader", None) if optimizer is not None and opt_state else None
    if data_loader is not None and data_loader is not own and state.get("data_loader_state_dict") is not None:
        data_loader.load_state_dict(state["data_loader_state_dict"])
    return state
