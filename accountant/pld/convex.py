"""Privacy-loss distributions: the greatest convex minorant of a lowered polyline (pool-adjacent-violators
on its segment slopes), which :func:`~.discretise.lower_step` needs to keep a lowered profile convex and
:mod:`.allocation_terms` to bound a balls-in-bins bulk on a grid of equal steps (``h = 0``).
"""

from __future__ import annotations

import math
import sys

import numpy as np

__all__ = []


def convexify(m, h, max_pools: int = 4096) -> int | None:
    """Replace the lowered polyline by its greatest convex minorant where it is not convex
    (in place).

    ``m_k`` is ``t_k`` times the slope increase at grid point ``k``; a negative one is a
    concave kink.  Pool-adjacent-violators on the segment slopes (weights ``t_(k+1) - t_k``):
    a block of segments from vertex ``a`` to ``b`` is replaced by the chord, whose slope is the
    weighted mean of theirs -- the minorant lies below the polyline, hence below ``f``.  All
    slopes are taken relative to the block's first one (``t_a (s_i - s_a) = sum_(a<k<=i)
    m_k e^((a-k) h)``) so that tiny tail masses keep their precision.  The end vertices keep
    their kinks; a negative kink at vertex 0 is left to the caller.

    Args:
        m: the kinks times ``t`` at the grid points (float64, changed in place).
        h: the grid step (``t_k = e^(k h)``; 0: equal steps).
        max_pools: the most concave kinks it takes on (more: it gives up at once); the pooling's step
            and work budgets are 5 and 5000 times it.

    Returns:
        None when done, or the vertex where it gave up (``m`` unusable) when more than ``max_pools``
        concave kinks, a block of more than ``_MAX_BLOCK`` segments or too much pooling work would be
        needed: the lower end then comes from the other bound, never from a long Python loop.
    """
    J = m.size - 1
    work = steps = 0
    negs = np.nonzero(m[1:] < 0.0)[0] + 1
    if negs.size > max_pools:
        return int(negs[0])
    done = 0                                      # vertices below this are settled
    for j in negs:                                # pooling only leaves negative kinks at 0 or J
        j = int(j)
        if j < done or m[j] >= 0.0:
            continue
        a, b = j - 1, j + 1                       # pool the two segments around vertex j
        width = 16
        while True:
            # the block's right end grows one segment at a time until its chord holds: every
            # candidate end b..hi is read off one pass of cumulative sums (a block grown to
            # _MAX_BLOCK segments cost a Python iteration and an O(length) sum per segment);
            # a candidate within round-off of a tie is decided by the block's own sums, as before
            hi = max(min(J, a + min(width, _MAX_BLOCK + 1)), min(b, J))
            if (hi - 1 - a) * h > _LOG_MAX:       # its weights e^((i - a) h) past the doubles: give up
                return j
            bs = np.arange(min(b, J), hi + 1)
            rel, sw, w = _block_sums(m, h, a, hi)
            pooled = np.cumsum(sw)[bs - a - 1] / np.cumsum(w)[bs - a - 1]
            tie = 4e-12 * np.cumsum(np.abs(sw))[bs - a - 1] / np.cumsum(w)[bs - a - 1]
            end_gap = rel[bs - a - 1] - pooled
            dec_a = (m[a] + pooled < 0.0) & (a > 0)
            inc_b = ~dec_a & (end_gap < 0.0) & (bs < J)
            near = (np.abs(m[a] + pooled) < tie) | (np.abs(end_gap) < tie)    # (sums of zeros: exact)
            works = work + max(0, b - J) + np.cumsum(bs - a)   # (b counted before clamping, as before)
            over = (steps + np.arange(1, bs.size + 1) > 5 * max_pools) | (works > 5000 * max_pools) \
                | (bs - a > _MAX_BLOCK)
            ends = np.nonzero(~inc_b | over | near)[0]
            i = int(ends[0]) if ends.size else bs.size - 1
            work, steps, b = int(works[i]), steps + i + 1, int(bs[i])
            if ends.size and over[i]:
                return j
            if ends.size and near[i]:
                new_a, new_b, _ = _chord(m, h, a, b)
                dec, inc = new_a < 0.0 and a > 0, new_b < 0.0 and b < J
            else:
                dec, inc = bool(dec_a[i]), bool(inc_b[i])
            if dec:
                a -= 1
                z = _grows_left_to(m, h, a, b)
                if z < a:                 # the steps at a..z+1 are skipped, counted as before
                    n = a - z
                    steps, work = steps + n, work + n * b - (a + z + 1) * n // 2
                    if steps > 5 * max_pools or work > 5000 * max_pools or b - z - 1 > _MAX_BLOCK:
                        return j
                    a = z
            elif inc:
                b += 1
                width = 4 * width if not ends.size else width
            else:
                new_a, new_b, _ = _chord(m, h, a, b)
                m[a] = new_a
                m[a + 1:b] = 0.0
                m[b] = new_b
                break
        done = b
    return None


def _block_sums(m, h, a: int, b: int):
    """``(rel, sw, w)`` of the block of segments ``a..b-1`` of :func:`convexify`: ``rel_i = t_a (s_i -
    s_a)`` for ``i = a+1..b``, the segments' weights ``w`` (widths over ``t_a (e^h - 1)``) and
    ``sw`` their slopes times ``w``."""
    k = np.arange(a + 1, b + 1)
    rel = np.cumsum(m[a + 1:b + 1] * np.exp((a - k) * h))
    w = np.exp((np.arange(a, b) - a) * h)
    return rel, np.concatenate(([0.0], rel[:-1])) * w, w


def _grows_left_to(m, h, a: int, b: int) -> int:
    """The vertex ``z <= a`` down to which the block ``a..b`` of :func:`convexify` surely grows
    left: at every ``a' in (z, a]`` the kink ``m_a'`` plus the chord's slope of ``a'..b``
    (relative to segment ``a'``) is negative beyond round-off, so the block would grow past it.
    Read off one pass of sums anchored at ``A = z``'s lowest candidate (a vertex with no kink is
    sure: the chord's slope, a mean of its segments' and lower ones, stays below theirs); a
    near-tie stops the run, and the block's own sums decide there as before."""
    if a <= 0:
        return a
    span = _MAX_BLOCK if h <= 0.0 else min(_MAX_BLOCK, int(500.0 / h))
    A = max(a - span, 0)
    k = np.arange(A + 1, b + 1)
    # (weights past the doubles -- a grid step of hundreds -- give inf and NaN sums: a NaN kink is not sure)
    with np.errstate(over="ignore", invalid="ignore"):
        t = m[A + 1:b + 1] * np.exp((A - k) * h)
        R = np.concatenate(([0.0], np.cumsum(t)))               # t_A (s_i - s_A), i = A..b
        aR = np.concatenate(([0.0], np.cumsum(np.abs(t))))
        e = np.exp((np.arange(A, b) - A) * h)                   # e^((i - A) h), i = A..b-1
        den = np.cumsum(e[::-1])[::-1]
        mean = np.cumsum((R[:-1] * e)[::-1])[::-1] / den        # chord of a'..b, i = a' = A..b-1
        amean = np.cumsum((aR[:-1] * e)[::-1])[::-1] / den
        ap = np.arange(a, max(A, 1) - 1, -1)                    # candidates a, a-1, .., max(A, 1)
        scale = np.exp((ap - A) * h)
        kink = m[ap] + scale * (mean[ap - A] - R[ap - A])
        err = 1e-9 * (np.abs(m[ap]) + scale * (amean[ap - A] + aR[ap - A]))
    sure = (m[ap] == 0.0) | (kink < -err)
    stop = np.flatnonzero(~sure)
    return int(ap[stop[0]]) if stop.size else int(ap[-1]) - 1


def _chord(m, h, a: int, b: int):
    """``(new_a, new_b, pooled)``: the kinks at ``a`` and ``b`` (times ``t``) once the segments
    ``a..b-1`` of :func:`convexify` are replaced by their chord, the weighted mean slope."""
    rel, sw, w = _block_sums(m, h, a, b)
    pooled = float(np.sum(sw) / np.sum(w))
    return m[a] + pooled, math.exp((b - a) * h) * (rel[-1] - pooled), pooled


#: the largest exponent whose e^x is a double: a block's weights beyond it are infinite, and its chord NaN
_LOG_MAX = math.log(sys.float_info.max)

#: the longest block :func:`convexify` pools (the longest seen in the benchmark settings is
#: ~1300 segments); a concave kink that needs more -- an atom's chord gap at the bottom of a
#: step, with only a thin tail above to absorb it -- gives a poor lower step anyway, and a
#: block grown one segment at a time costs O(length^2): it used to take 0.5 s to give up
_MAX_BLOCK = 2048
