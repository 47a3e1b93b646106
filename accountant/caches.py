"""The accountant's remembered answers, emptied in one call.

A calibration asks the same composition many times (its search, its checks, its report), so the
PLD brackets, the compositions' ends, the discretised steps and the RDP reports are remembered
(bounded, least recently used first out).  Each module that remembers registers how to forget;
:func:`clear_cache` forgets everything -- benchmarks call it between repeats to time a cold answer.
"""

from __future__ import annotations

import functools
from typing import Callable

__all__ = ["clear_cache"]

_CLEARERS: list[Callable[[], None]] = []


def register(clear: Callable[[], None]) -> Callable[[], None]:
    """Remember ``clear`` (no arguments) as one of the things :func:`clear_cache` calls.

    Args:
        clear: a callable taking no arguments that empties one cache.

    Returns:
        ``clear`` itself (so it can be used as a decorator).
    """
    _CLEARERS.append(clear)
    return clear


def cached(maxsize: int):
    """``functools.lru_cache(maxsize)`` whose ``cache_clear`` is registered.

    Args:
        maxsize: the most answers kept (``None`` for no bound, as in ``functools.lru_cache``).

    Returns:
        A decorator that wraps a function in the registered ``lru_cache``.
    """
    def wrap(fn):
        out = functools.lru_cache(maxsize=maxsize)(fn)
        register(out.cache_clear)
        return out
    return wrap


class Memo(dict):
    """A dict of at most ``size`` answers, the oldest first out, emptied by :func:`clear_cache`:
    for answers an ``lru_cache`` cannot key (a function of part of its arguments, or of state).

    Args:
        size: the most answers kept, >= 1.
    """

    def __init__(self, size: int):
        super().__init__()
        self.size = size
        register(self.clear)

    def remember(self, key, value):
        """Keep ``value`` under ``key`` (dropping the oldest answer when full); returns ``value``.

        Args:
            key: a hashable key.
            value: the answer to keep.

        Returns:
            ``value``, unchanged.
        """
        if len(self) >= self.size:
            self.pop(next(iter(self)))
        self[key] = value
        return value


class SizedMemo(dict):
    """A dict of answers taking at most ``budget`` bytes in all, the least recently used first out (an
    answer over half the budget is not kept), emptied by :func:`clear_cache`: for answers whose size
    varies by orders of magnitude (a discretised step, a pair's atoms).

    Args:
        budget: the most bytes kept, >= 1.
        size: ``size(value)``, the bytes an answer takes.
    """

    def __init__(self, budget: int, size: Callable):
        super().__init__()
        self.budget, self.size = budget, size
        register(self.clear)

    def recall(self, key):
        """The answer under ``key``, now the most recently used, or None.

        Args:
            key: a hashable key.

        Returns:
            The answer, or None.
        """
        if key not in self:
            return None
        value = self[key] = self.pop(key)
        return value

    def remember(self, key, value):
        """Keep ``value`` under ``key``, dropping the least recently used answers until it fits (not kept if it
        takes over half the budget); returns ``value``.

        Args:
            key: a hashable key.
            value: the answer to keep.

        Returns:
            ``value``, unchanged.
        """
        n = self.size(value)
        if n <= self.budget // 2:
            while self and n + sum(self.size(v) for v in self.values()) > self.budget:
                self.pop(next(iter(self)))
            self[key] = value
        return value


def clear_cache() -> None:
    """Forget every remembered answer: brackets, composition ends, discretised steps, RDP reports."""
    for clear in _CLEARERS:
        clear()
