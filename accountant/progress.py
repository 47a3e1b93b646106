"""Where long accounting work is, told to whoever watches: the accountant draws nothing itself.

A bracket of 10^8 steps composes a few grids of seconds each, inside cached functions whose
arguments cannot carry a callback.  The work says what it starts (:func:`tell`); a caller that
wants to show it (the command line's progress bar) watches for the length of a ``with`` block
(:func:`watching`).  Nothing is told where nobody watches (one context-variable read).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator

__all__ = ["watching", "tell"]

_WATCHERS: contextvars.ContextVar[tuple] = contextvars.ContextVar("dpcalib_progress_watchers", default=())


@contextlib.contextmanager
def watching(watcher: Callable[[str], None]) -> Iterator[None]:
    """Call ``watcher(part)`` with each part of long work started inside the block (e.g. ``"upper end
    on grid 1.45e-05"``); blocks nest, every watcher is told.

    Args:
        watcher: a callable taking one string (the part of work that starts).

    Yields:
        Nothing (``None``): the watcher is told for the length of the ``with`` block.

    Raises:
        InputError: if ``watcher`` is not callable.
    """
    if not callable(watcher):
        from .validation import InputError

        raise InputError(f"watcher={watcher!r} is not allowed: expected a callable taking one string.")
    token = _WATCHERS.set(_WATCHERS.get() + (watcher,))
    try:
        yield
    finally:
        _WATCHERS.reset(token)


def tell(part: str) -> None:
    """Tell every watcher that ``part`` starts (nothing where nobody watches).

    Args:
        part: a short description of the work that starts.
    """
    for watcher in _WATCHERS.get():
        watcher(part)
