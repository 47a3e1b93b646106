"""``make_private(..., wrap_model=False)``: the user keeps training the module they passed in.

Opacus's hooks mode attaches its per-sample machinery to the user's module instead of returning a
wrapper.  Here the module's ``forward`` is replaced on the instance (its class, parameters,
``state_dict`` keys, hooks and attributes are untouched): a training forward with gradients enabled
runs the :class:`~.module.PrivateModule` built around it -- the same recorded forward, the same
captures, the same private step as the wrapper -- and every other call (``eval()``, ``torch.no_grad()``,
the calls the private forward makes of the module itself, and those the private step makes to
re-run the model: DP-SRM's previous point, the per-module vmap rule) is the class's own ``forward``.

:func:`engine_internal` marks the private step's own calls (the optimizer enters it around
``step``); :meth:`ModuleHooks.remove` gives the module its class's ``forward`` back.
"""

from __future__ import annotations

import contextlib
import threading

import torch

from ...accountant.validation import InputError

__all__ = []

_STATE = threading.local()


@contextlib.contextmanager
def engine_internal():
    """Calls of a hooked module inside this block run its class's own ``forward`` (the private step's).

    Yields:
        None, once, with the hooked modules' own ``forward`` in force (this thread).
    """
    _STATE.depth = getattr(_STATE, "depth", 0) + 1
    try:
        yield
    finally:
        _STATE.depth -= 1


def _internal() -> bool:
    return getattr(_STATE, "depth", 0) > 0


class ModuleHooks:
    """The user's module (``private.inner``) made to run ``private``'s forward when trained.

    Args:
        private: the :class:`~.module.PrivateModule` built around the user's module.

    Raises:
        InputError: if the module's ``forward`` is already replaced on the instance.
    """

    def __init__(self, private):
        module = private.inner
        if "forward" in vars(module):
            raise InputError("module is not allowed with wrap_model=False: its forward is already replaced on the "
                             "instance (make_private was called on it before; call remove() on what it returned).")
        self.private, self.module = private, module
        original = type(module).forward

        def forward(*args, **kwargs):
            if _internal() or not (module.training and torch.is_grad_enabled()):
                return original(module, *args, **kwargs)
            with engine_internal():          # the private forward's own call of the module is the class's
                return private(*args, **kwargs)

        forward.__wrapped__ = original
        module.forward = forward

    def remove(self) -> None:
        """The module's class ``forward`` again (the engine's optimizer no longer sees its batches)."""
        vars(self.module).pop("forward", None)
