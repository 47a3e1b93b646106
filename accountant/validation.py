"""Input validation shared by the whole accountant (one place, one message format).

Every public function of :mod:`accountant` checks its arguments here and raises an
:class:`InputError` (a ``ValueError``) that names the argument, the value received and the
allowed range, e.g. ``InputError: noise_multiplier=-1.0 is not allowed: expected a number in
(0, inf).``  Every layer raises :class:`InputError` for a bad input and nothing else, so a
caller (the command line) tells a user's mistake from a failed computation by its type.
"""

from __future__ import annotations

import math
import os
import numbers

import numpy as np

__all__ = ["InputError", "in_range", "integer", "delta", "writable_file", "MAX_RUN_LENGTH"]

#: the longest run a mechanism describes (steps, rounds, iterations, epochs, local steps): longer
#: than any training run, and the privacy-loss distribution of 1e9 steps already takes 10-40 s and
#: about 2 GB here (docs/testing.md, the parameter-space fuzz)
MAX_RUN_LENGTH = 10 ** 9
#: the largest dataset (records, samples per node, clients) a mechanism describes: its sampling
#: rates (b/n down to 1e-9) are the smallest the accountants are tested at, and the privacy-loss
#: distribution of such rates at little noise already takes 30-40 s here
MAX_RECORDS = 10 ** 9


class InputError(ValueError):
    """A bad input: an argument, option or file that is not allowed (the message names it, the
    value and what is allowed).  A ``ValueError``, so ``except ValueError`` still catches it."""


def _fail(name: str, value, allowed: str) -> ValueError:
    if isinstance(value, np.generic):
        value = value.item()
    return InputError(f"{name}={value!r} is not allowed: expected {allowed}.")


def real(value, name: str) -> float:
    """Return ``value`` as a float; reject bools, strings, NaN and non-numbers.

    Args:
        value: the number to check (a Python or numpy real; bools and strings are refused).
        name: the argument's name, quoted in the error message.

    Returns:
        ``value`` as a Python float (possibly infinite).

    Raises:
        InputError: if ``value`` is a bool, not a real number, or NaN.
    """
    if type(value) is not float and (isinstance(value, bool) or      # (a float: no ABC check, the common case)
                                     not isinstance(value, (numbers.Real, np.floating, np.integer))):
        raise _fail(name, value, "a real number")
    x = float(value)
    if math.isnan(x):
        raise _fail(name, value, "a real number (got NaN)")
    return x


def in_range(value, name: str, low: float, high: float, *, low_open: bool = False,
             high_open: bool = False) -> float:
    """Check ``low <(=) value <(=) high`` and return the value as a float.

    Args:
        value: the number to check.
        name: the argument's name, quoted in the error message.
        low: the lower bound.
        high: the upper bound.
        low_open: exclude ``low`` itself (strict ``>``).
        high_open: exclude ``high`` itself (strict ``<``).

    Returns:
        ``value`` as a Python float.

    Raises:
        InputError: if ``value`` is not a real number, is NaN, or lies outside the range.
    """
    x = real(value, name)
    ok_low = x > low if low_open else x >= low
    ok_high = x < high if high_open else x <= high
    if not (ok_low and ok_high):
        lb = "(" if low_open else "["
        rb = ")" if high_open else "]"
        raise _fail(name, value, f"a number in {lb}{_fmt(low)}, {_fmt(high)}{rb}")
    return x


def positive(value, name: str, *, allow_inf: bool = False) -> float:
    """A strictly positive number (finite unless ``allow_inf``).

    Args:
        value: the number to check.
        name: the argument's name, quoted in the error message.
        allow_inf: also accept ``inf``.

    Returns:
        ``value`` as a float in (0, inf), or (0, inf] when ``allow_inf``.

    Raises:
        InputError: if ``value`` is not a real number, is NaN, or lies outside the range.
    """
    return in_range(value, name, 0.0, math.inf, low_open=True, high_open=not allow_inf)


def probability(value, name: str) -> float:
    """A sampling probability / ratio in [0, 1].

    Args:
        value: the number to check.
        name: the argument's name, quoted in the error message.

    Returns:
        ``value`` as a float in [0, 1].

    Raises:
        InputError: if ``value`` is not a real number, is NaN, or lies outside the range.
    """
    return in_range(value, name, 0.0, 1.0)


def delta(value, name: str = "delta") -> float:
    """A target delta in the open interval (0, 1).

    Args:
        value: the number to check.
        name: the argument's name, quoted in the error message.

    Returns:
        ``value`` as a float in (0, 1).

    Raises:
        InputError: if ``value`` is not a real number, is NaN, or lies outside the range.
    """
    return in_range(value, name, 0.0, 1.0, low_open=True, high_open=True)


def integer(value, name: str, low: int = 0, high: float = math.inf) -> int:
    """An integer (int, numpy integer or integral float) in [low, high].

    Args:
        value: the number to check (an int, a numpy integer or a finite integral float; not a bool).
        name: the argument's name, quoted in the error message.
        low: the smallest integer allowed.
        high: the largest integer allowed (``inf`` for no ceiling).

    Returns:
        ``value`` as a Python int.

    Raises:
        InputError: if ``value`` is a bool, not integral, or outside ``[low, high]``.
    """
    if isinstance(value, bool):
        raise _fail(name, value, f"an integer in [{low}, {_fmt(high)}]")
    if type(value) is int or isinstance(value, (numbers.Integral, np.integer)):     # (an int: no ABC check)
        k = int(value)
    elif isinstance(value, (numbers.Real, np.floating)) and math.isfinite(float(value)) \
            and float(value).is_integer():
        k = int(value)
    else:
        raise _fail(name, value, f"an integer in [{low}, {_fmt(high)}]")
    if not (low <= k <= high):
        raise _fail(name, value, f"an integer in [{low}, {_fmt(high)}]")
    return k


class CountCheck:
    """The check of a count with a ceiling (:data:`run_length`, :data:`records`): an integer in
    ``[low, cap]``, whose refusal says why there is a ceiling.

    Args:
        cap: the largest count allowed.
        why: why there is a ceiling, quoted in the error message.
    """

    def __init__(self, cap: int, why: str):
        self.cap, self.why = cap, why

    def __call__(self, value, name: str, low: int = 1) -> int:
        """``value`` checked: an integer in ``[low, cap]``.

        Args:
            value: the count to check.
            name: the argument's name, quoted in the error message.
            low: the smallest count allowed.

        Returns:
            ``value`` as a Python int.

        Raises:
            InputError: if ``value`` is not an integer in the range.
        """
        k = integer(value, name, low=low)
        if k > self.cap:
            raise InputError(f"{name}={value!r} is not allowed: expected an integer in [{low}, {self.cap:.0e}] "
                             f"({self.why}).")
        return k


#: a run length (steps, rounds, iterations, epochs) in ``[low, MAX_RUN_LENGTH]``
run_length = CountCheck(MAX_RUN_LENGTH, "no training run is longer, and accounting for 1e9 steps already takes "
                                        "10-40 s and about 2 GB")
#: a number of records (dataset size, batch, samples per node, clients) in ``[low, MAX_RECORDS]``
records = CountCheck(MAX_RECORDS, "sampling rates below 1e-9 are beyond what the accountants are tested at")


def orders_array(alpha, name: str = "alpha", *, integer_only: bool = False,
                 low: float = 1.0, max_order: float = math.inf) -> np.ndarray:
    """Validate one order or an array of Rényi orders (> ``low``; integers >= 2 if asked).

    Args:
        alpha: one Rényi order or an array-like of orders.
        name: the argument's name, quoted in the error message.
        integer_only: require integer orders in ``[2, max_order]`` (``low`` is then ignored).
        low: the orders must exceed this (exclusive).
        max_order: the largest order allowed (inclusive).

    Returns:
        The orders as a float numpy array (0-d for a single order).

    Raises:
        InputError: if ``alpha`` is not numeric, is empty, holds NaN, or holds an order out of range
            (infinite, ``<= low`` or ``> max_order``; not an integer ``>= 2`` when ``integer_only``).
    """
    try:
        arr = np.asarray(alpha, dtype=float)
    except (TypeError, ValueError):
        raise _fail(name, alpha, "a real number or an array of real numbers") from None
    if arr.size == 0:
        raise _fail(name, alpha, "at least one order")
    if np.isnan(arr).any():
        raise _fail(name, alpha, "orders without NaN")
    if integer_only:
        bad = (arr != np.round(arr)) | (arr < 2) | ~np.isfinite(arr) | (arr > max_order)
        if bad.any():
            v = arr[bad].flat[0]
            raise _fail(name, _scalar(v), f"an integer order in [2, {_fmt(max_order)}]")
    else:
        bad = (arr <= low) | ~np.isfinite(arr) | (arr > max_order)
        if bad.any():
            v = arr[bad].flat[0]
            raise _fail(name, _scalar(v), f"an order in ({_fmt(low)}, {_fmt(max_order)}]")
    return arr


def _scalar(v):
    v = float(v)
    return int(v) if v.is_integer() else v


def _fmt(x: float) -> str:
    if x == math.inf:
        return "inf"
    if x == -math.inf:
        return "-inf"
    if float(x).is_integer() and abs(x) < 1e16:
        return str(int(x))
    return repr(float(x))


def writable_file(path, name: str) -> str:
    """``path`` of a file to be written (a checkpoint, a plot): checked before any work, not after
    it, by creating it (and removing it again if it did not exist) -- a folder's permission bits
    do not tell (root passes every check, /proc refuses new files whatever they say).

    Args:
        path: the file's path (a str or path-like).
        name: the argument's name, quoted in the error message.

    Returns:
        ``path`` as a str.

    Raises:
        InputError: if its folder does not exist, it is a folder, or it cannot be opened for writing.
    """
    text = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise InputError(f"{name}={text!r} is not allowed: the folder {folder!r} does not exist.")
    if os.path.isdir(text):
        raise InputError(f"{name}={text!r} is not allowed: it is a folder; expected a file name.")
    existed = os.path.exists(text)
    try:
        with open(text, "ab"):
            pass
    except OSError as exc:
        raise InputError(f"{name}={text!r} is not allowed: it cannot be written ({exc.strerror or exc}).") from None
    if not existed:
        try:
            os.remove(text)
        except OSError:
            pass
    return text
