"""Privacy-loss distributions: the decayed suffix sums ``B_j = sum_{s >= j} m_s e^((j - s) h)`` that the
profiles of discretised steps and compositions read (``delta(e_j) = A_{j+1} - e^-h B_{j+1}``), with
their rounding bound.  Used by :mod:`.discretise` (steps) and :mod:`.bracket` (compositions).
"""

from __future__ import annotations

import math

import numpy as np

from ..caches import cached

__all__ = []


def decayed_rounding(n: int, h: float) -> float:
    """Relative rounding bound of :func:`decayed_suffix` on ``n`` points: within a block of ``L``
    points a cumulative sum (``L`` additions) and three block weights (``exp`` of an argument of at
    most 32: ``<= 34 u`` each); per doubling pass of the carries a weight (``exp`` of an argument
    below 746: ``<= 747 u``) and two roundings; the carry's own weight and addition.

    Args:
        n: the number of points, >= 0.
        h: the grid step (the decay rate per point), > 0.

    Returns:
        The relative rounding bound (a float, a multiple of the machine epsilon).
    """
    L = decay_block(n, h) if n else 0
    nb = -(-n // L) if n else 0
    passes = max(0, nb - 1).bit_length()
    return (L + 2 + 140 + 750 * passes) * float(np.finfo(float).eps)


_DECAY_SPAN = 32.0     # e^-h decays by at most e^-32 inside a block of decayed_suffix
_DECAY_BLOCK = 1 << 16


def decay_block(n: int, h: float) -> int:
    """The block length ``L`` of :func:`decayed_suffix`: at most ``2^16`` points and ``L h <= 32``.

    Args:
        n: the number of points, >= 1 (0 gives 1).
        h: the grid step, > 0.

    Returns:
        ``L = max(1, min(n, 2^16, int(32 / h)))``, an int.
    """
    return max(1, min(n, _DECAY_BLOCK, int(_DECAY_SPAN / h)))


@cached(maxsize=8)
def _decay_weights(h: float):
    """``e^(k h)``, ``e^(-k h)``, ``e^(-(k + 1) h)`` for the offsets ``k`` of the longest block."""
    kh = h * np.arange(decay_block(_DECAY_BLOCK, h))
    down = np.exp(-kh)
    return np.exp(kh), down, down * math.exp(-h)


def decayed_suffix(x: np.ndarray, h: float) -> np.ndarray:
    """``B_j = sum_(s >= j) x_s e^((j - s) h)`` for non-negative ``x`` and ``h > 0``.

    The recursion ``B_j = x_j + e^-h B_(j+1)``, vectorised on the reversed array ``y`` (where it
    reads ``C_t = y_t + e^-h C_(t-1)``): within a block of ``L`` points (``L h <= 32``,
    ``L <= 2^16``) ``C_t = e^(-k_t h) sum_(t' <= t) y_t' e^(k_t' h)`` (``k``: the offset in the
    block; the weights stay in ``[1, e^32]``, no overflow), then each block adds the previous
    block's last value times ``e^-((k_t + 1) h)`` (those last values first carried from block to
    block by a doubling scan).  Every term is non-negative; the rounding is bounded by
    :func:`decayed_rounding`.  (This replaced ``scipy.signal.lfilter``, whose import alone took
    0.6 s of every CLI call; it runs as fast.)

    Args:
        x: a 1-d array of non-negative masses.
        h: the decay rate per point (the grid step), > 0.

    Returns:
        A float array of the same length: ``B_j`` for each ``j``.
    """
    x = np.asarray(x, dtype=float)
    n = x.size
    if n == 0:
        return x.copy()
    L = decay_block(n, h)
    up, down, carry = _decay_weights(float(h))
    if L == n:                                    # one block (the usual case)
        y = x[::-1] * up[:n]
        np.cumsum(y, out=y)
        y *= down[:n]
        return y[::-1]
    up, down, carry = up[:L], down[:L], carry[:L]
    nb = -(-n // L)
    X = np.zeros(nb * L)
    X[:n] = x[::-1]
    X = X.reshape(nb, L)
    X *= up
    np.cumsum(X, axis=1, out=X)
    X *= down
    # C at each block's last point: the same recursion with decay e^-(L h) between blocks, by
    # doubling (after the pass with shift s, point i holds the blocks i - 2s + 1 .. i); the
    # weight e^-(s L h) is 0 from s L h > 745 on, and so are all later passes
    last = X[:, -1].copy()
    s = 1
    while s < nb:
        w = math.exp(-s * L * h)
        if w == 0.0:
            break
        last[s:] += w * last[:-s]
        s *= 2
    X[1:] += last[:-1, None] * carry
    return X.reshape(-1)[n - 1::-1]
