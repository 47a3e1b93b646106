"""``secure_mode``: random bits from a cryptographically secure generator, and Gaussian noise that a
floating-point attack cannot tell apart.

**The generator.**  :class:`SecureGenerator` is the ChaCha20 stream cipher (RFC 8439) run as a
random bit generator: its keystream under a 256-bit key.  The key comes from the operating system
(``os.urandom``, the kernel's CSPRNG) unless a seed is given for a reproducible test.  The cipher is
the one of the ``cryptography`` package (pyca, OpenSSL's implementation): maintained, audited,
constant-time, and about 3x faster than reading ``os.urandom`` for every draw; unlike a
torch.Generator (Mersenne Twister or Philox, whose state follows from a few outputs), its outputs
say nothing of its key or of its other outputs.  Its state (key and block counter) is a
checkpoint's secret, exactly like the data.

**The noise.**  A textbook sampler returns ``x + fl(sigma z)`` in floating point, and the set of
values it can return depends on ``x``: near 0 a release of mean 1 is a multiple of ulp(1) while one
of mean 0 is not, so the output alone tells the two means apart with large probability (Mironov,
"On significance of the least significant bits for differential privacy", CCS 2012; Jin,
McMurtry, Rubinstein and Ohrimenko, "Are We There Yet? Timing and Floating-Point Attacks on
Differential Privacy Systems", IEEE S&P 2022).  :func:`gaussian_release` returns instead

    gamma * round((x + Z) / gamma),   Z ~ N(0, sigma^2 I) exactly,   gamma = 2^(floor(log2 sigma) - 12),

a value on the fixed grid ``gamma Z`` whatever ``x`` is.  It is a function of ``x + Z`` alone, so it
is post-processing of the exact Gaussian mechanism: **its privacy is the Gaussian mechanism's, and
every accountant of dpcalib applies unchanged** (no new accounting, no extra delta).  The rounding
adds at most gamma / 2 <= sigma / 8192 to each coordinate (variance sigma^2 (1 + < 2^-25)).

The cell ``round((x + Z) / gamma)`` is drawn exactly, not approximately: ``Z = sigma Phi^-1(U)`` for
a uniform ``U`` whose bits are drawn lazily.  With 64 bits of ``U`` the interval of ``Z`` they
leave open is computed in float64 with a margin that bounds every rounding error (2^-40 of the
grid, over 1000 times scipy's measured error: tests/test_secure_randomness.py checks it against
mpmath); when that interval lies inside one cell the cell is certain (all but ~3e-8 of the
coordinates).  Otherwise 64 more bits are drawn and the cell's boundaries are compared with ``U``
in arbitrary precision (mpmath) until it is certain.  So the distribution of the output is
exactly that of the rounded Gaussian, given uniform bits.
"""

from __future__ import annotations

import hashlib
import math
import os

import numpy as np
import torch

from ...accountant.validation import InputError

__all__ = []

#: the noise grid is 2^-GRID_BITS of the std's power of two (sigma / gamma in [2^12, 2^13))
GRID_BITS = 12
#: the float64 evaluation's margin, in units of (|Z| + sigma) / gamma: far above every rounding error
_MARGIN = 2.0 ** -40
_BLOCK = 64                          # bytes in a ChaCha20 block
_COUNTER = 2 ** 32                   # blocks under one nonce (the 32-bit block counter)
_MAX_REFINE = 64                     # 64 x 64 more bits of U: P(not resolved) < 2^-4000


class SecureGenerator:
    """Random bits from ChaCha20 (``cryptography``'s implementation) under a secret 256-bit key.

    Use :meth:`from_entropy` (the key from ``os.urandom``) for a run; :meth:`from_seed` only for
    tests and reproducible research (anyone who knows the seed knows every draw).  ``device``: where
    the tensors drawn from it are put (the bits are computed on the CPU).  Streams for distinct
    purposes are :meth:`child` generators: independent keys derived by SHA-256.  ``get_state`` /
    ``set_state`` have torch.Generator's shape (a uint8 tensor), so a checkpoint of a run saves and
    restores either kind: the state holds the key, a secret.

    Args:
        key: 32 bytes.
        device: torch device of the tensors drawn.

    Raises:
        InputError: a key that is not 32 bytes.
    """

    def __init__(self, key: bytes, device="cpu"):
        if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
            raise InputError("key is not allowed: expected 32 bytes.")
        self._key = bytes(key)
        self._block = 0                          # next unused 64-byte block of the keystream
        self.device = torch.device(device)

    @classmethod
    def from_entropy(cls, device="cpu") -> "SecureGenerator":
        """A generator keyed from the operating system's CSPRNG (``os.urandom(32)``).

        Args:
            device: torch device of the tensors drawn.

        Returns:
            A new :class:`SecureGenerator`.
        """
        return cls(os.urandom(32), device)

    @classmethod
    def from_seed(cls, seed: int, device="cpu") -> "SecureGenerator":
        """A generator keyed by SHA-256 of ``seed`` (reproducible: for tests only).

        Args:
            seed: an integer >= 0.
            device: torch device of the tensors drawn.

        Returns:
            A new :class:`SecureGenerator`.
        """
        return cls(hashlib.sha256(b"dpcalib secure seed " + str(int(seed)).encode()).digest(), device)

    def child(self, label: str, device=None) -> "SecureGenerator":
        """An independent generator for one purpose (its key: SHA-256 of this key and ``label``).

        Args:
            label: the purpose ("data", "noise", "node-noise/3", ...).
            device: torch device of its tensors (this generator's by default).

        Returns:
            A new :class:`SecureGenerator`.
        """
        key = hashlib.sha256(self._key + b"/" + label.encode()).digest()
        return SecureGenerator(key, self.device if device is None else device)

    def bytes(self, n: int) -> bytes:
        """The next ``n`` bytes of the keystream (whole blocks are consumed).

        Args:
            n: how many bytes (>= 0).

        Returns:
            ``n`` uniformly random bytes.
        """
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

        blocks = -(-int(n) // _BLOCK)
        parts, start = [], self._block
        while blocks > 0:
            counter, nonce = start % _COUNTER, start // _COUNTER
            take = min(blocks, _COUNTER - counter)
            iv = counter.to_bytes(4, "little") + nonce.to_bytes(12, "little")
            parts.append(Cipher(algorithms.ChaCha20(self._key, iv), mode=None).encryptor().update(bytes(take * _BLOCK)))
            start, blocks = start + take, blocks - take
        self._block = start
        out = parts[0] if len(parts) == 1 else b"".join(parts)
        return out if len(out) == int(n) else out[:int(n)]

    def words(self, n: int) -> np.ndarray:
        """``n`` uniformly random 64-bit words (numpy ``uint64``, read-only).

        Args:
            n: how many words, >= 0.

        Returns:
            A read-only ``uint64`` array ``[n]``.
        """
        return np.frombuffer(self.bytes(8 * int(n)), dtype=np.uint64)

    def get_state(self) -> torch.Tensor:
        """The key and the keystream position as 48 bytes (a uint8 tensor): a secret.

        Returns:
            A uint8 tensor ``[48]``: the 32-byte key and the 16-byte block counter.
        """
        return torch.tensor(list(self._key + self._block.to_bytes(16, "little")), dtype=torch.uint8)

    def set_state(self, state) -> None:
        """Restore :meth:`get_state`'s output.

        Args:
            state: a 48-byte state from :meth:`get_state` (a uint8 tensor or a sequence of bytes).

        Raises:
            InputError: a state that is not 48 bytes (another generator's state).
        """
        raw = bytes(torch.as_tensor(state).cpu().to(torch.uint8).tolist())
        if len(raw) != 48:
            raise InputError(f"state is not allowed: a secure generator's state is 48 bytes, got {len(raw)} (a "
                             "checkpoint written without secure_mode cannot resume a secure run, nor the reverse).")
        self._key, self._block = raw[:32], int.from_bytes(raw[32:], "little")


# -- sampling ------------------------------------------------------------------------------------------
def _bits53(g: SecureGenerator, n: int) -> np.ndarray:
    return g.words(n) >> np.uint64(11)


def uniform_mask(g: SecureGenerator, n: int, q: float) -> torch.Tensor:
    """A Poisson sample's membership: each of ``n`` records independently with probability
    ``floor(q 2^53) / 2^53`` (never above ``q``, so an accountant at rate q stays sound).

    Args:
        g: the generator.
        n: how many records.
        q: the sampling rate in [0, 1].

    Returns:
        A bool tensor ``[n]`` on ``g.device``.
    """
    threshold = np.uint64(math.floor(math.ldexp(float(q), 53)))
    return torch.from_numpy(_bits53(g, n) < threshold).to(g.device)


def permutation(g: SecureGenerator, n: int) -> torch.Tensor:
    """A uniformly random permutation of ``0 .. n-1`` (the order of 64-bit random keys; a draw with
    tied keys is rejected and drawn again, so every order is exactly equally likely).

    Args:
        g: the generator.
        n: how many records, >= 0.

    Returns:
        A long tensor ``[n]`` on ``g.device``.
    """
    while True:
        keys = g.words(n)
        order = np.argsort(keys, kind="stable")
        ranked = keys[order]
        if n < 2 or not bool(np.any(ranked[1:] == ranked[:-1])):
            return torch.from_numpy(order.astype(np.int64)).to(g.device)


def randint(g: SecureGenerator, n: int, size: int = 1) -> torch.Tensor:
    """``size`` independent uniform draws from ``0 .. n-1`` (rejection sampling: exactly uniform).

    Args:
        g: the generator.
        n: the range, an integer >= 1.
        size: how many draws, >= 0.

    Returns:
        A long tensor ``[size]`` on ``g.device``.

    Raises:
        InputError: if ``n`` < 1.
    """
    n = int(n)
    if n < 1:
        raise InputError(f"n={n} is not allowed: expected an integer >= 1.")
    limit = (2 ** 64 // n) * n               # accept words below the largest multiple of n
    out = np.empty(0, dtype=np.uint64)
    while out.size < size:
        w = g.words(max(size - out.size, 1))
        out = np.concatenate([out, w[w < np.uint64(limit)] if limit < 2 ** 64 else w])
    return torch.from_numpy((out[:size] % np.uint64(n)).astype(np.int64)).to(g.device)


def uniform(g: SecureGenerator) -> float:
    """One uniform draw from [0, 1) on the 2^-53 grid.

    Args:
        g: the generator.

    Returns:
        A float in [0, 1), a multiple of 2^-53.
    """
    return math.ldexp(float(_bits53(g, 1)[0]), -53)


# -- the noise ---------------------------------------------------------------------------------------------
def grid_exponent(std: float) -> int:
    """``e`` with the noise grid ``gamma = 2^e = 2^(floor(log2 std) - GRID_BITS)``.

    Args:
        std: the noise std (> 0, finite).

    Returns:
        The grid's exponent.
    """
    return math.frexp(float(std))[1] - 1 - GRID_BITS


def gaussian_release(g: SecureGenerator, value: torch.Tensor, std: float) -> torch.Tensor:
    """``gamma round((value + Z) / gamma)`` with ``Z ~ N(0, std^2 I)`` drawn exactly (see the module
    text): the Gaussian mechanism's release, put on a grid that does not depend on ``value``.

    Args:
        g: the generator.
        value: the noiseless query (any float dtype and device).
        std: the noise std (> 0, finite).

    Returns:
        The release, in ``value``'s dtype and device.

    Raises:
        InputError: a std too small for the magnitude of ``value`` (the grid's index would overflow
            float64: ``|value| / gamma`` beyond 1e308).
    """
    x = value.detach().reshape(-1).to("cpu", torch.float64).numpy()
    e = grid_exponent(std)
    s = math.ldexp(float(std), -e)                       # std in grid units, in [2^12, 2^13)
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.ldexp(x, -e)                              # exact: a power-of-two scaling
    if bool(np.any(np.isinf(a) & np.isfinite(x))):
        raise InputError(f"std={std!r} is not allowed in secure mode for values of magnitude "
                         f"{float(np.max(np.abs(x))):.3g}: the noise grid 2^{e} cannot index them in float64.")
    m = np.floor(a)
    f = a - m                                             # exact, in [0, 1)
    words = g.words(x.size)
    negative = (words >> np.uint64(63)) == np.uint64(1)
    k = words & np.uint64(2 ** 63 - 1)                    # U in [k 2^-64, (k + 1) 2^-64), within [0, 1/2)
    cell = _cells(f, negative, k, s)
    unsure = np.flatnonzero(np.isnan(cell))
    for i in unsure:
        cell[i] = _exact_cell(g, float(f[i]), bool(negative[i]), int(k[i]), s)
    out = np.ldexp(m + cell, e)                          # a function of round((x + Z) / gamma) alone
    return torch.from_numpy(out.reshape(tuple(value.shape))).to(value.device, value.dtype)


def _cells(f: np.ndarray, negative: np.ndarray, k: np.ndarray, s: float) -> np.ndarray:
    """``floor(f + W + 1/2)`` where the bits ``(sign, k)`` decide it, NaN where they do not.

    ``W = +-s t`` with ``t = -Phi^-1(U)``.  The top 53 bits of ``k`` put ``U`` in ``[u, u + 2^-54)``
    with ``u`` exact in float64; ``t`` is decreasing and convex in ``U``, so over that interval it
    lies in ``[t(u) - 2^-54 / phi(t(u)), t(u)]`` (the tangent at ``u`` is below the curve).  The
    margin covers every rounding of the float64 evaluation (module text)."""
    from scipy.special import ndtri

    u = np.ldexp((k >> np.uint64(10)).view(np.int64).astype(np.float64), -54)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        t_big = -ndtri(u)                                  # u = 0: inf, left to the exact path
        width = math.sqrt(2 * math.pi) * 2.0 ** -54 * np.exp(0.5 * t_big * t_big)
        sign = np.where(negative, -s, s)
        mid = f + sign * (t_big - 0.5 * width) + 0.5
        reach = s * (0.5 * width + _MARGIN * (t_big + 1.0))
        lo = np.floor(mid - reach)
        hi = np.floor(mid + reach)
    return np.where(np.isfinite(lo) & (lo == hi), lo, np.nan)


def _exact_cell(g: SecureGenerator, f: float, negative: bool, k: int, s: float) -> float:
    """The cell for one coordinate whose 64 bits did not decide it: draw 64 more bits of U at a time
    and compare U's interval with the cell's boundaries ``Phi(-t)`` in arbitrary precision."""
    import mpmath

    num, bits = k, 64
    for _ in range(_MAX_REFINE):
        num, bits = (num << 64) | int(g.words(1)[0]), bits + 64
        with mpmath.workprec(bits + 64):
            u_lo = mpmath.ldexp(num, -bits)
            u_hi = mpmath.ldexp(num + 1, -bits)
            t = -mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.ldexp(2 * num + 1, -bits - 1) - 1)
            w = -s * t if negative else s * t
            c = int(mpmath.floor(f + w + mpmath.mpf(0.5)))
            # W in [c - 1/2 - f, c + 1/2 - f)  <=>  t in an interval [ta, tb]  <=>  U in [Phi(-tb), Phi(-ta)]
            base = mpmath.mpf(c) - mpmath.mpf(f)           # exact: f and s are floats, the precision ample
            ends = ((base - mpmath.mpf(0.5)) / s, (base + mpmath.mpf(0.5)) / s)
            ta, tb = (-ends[1], -ends[0]) if negative else (ends[0], ends[1])
            slack = mpmath.ldexp(1, -bits - 32)
            if u_lo > mpmath.ncdf(-tb) + slack and u_hi < mpmath.ncdf(-ta) - slack:
                return float(c)
    raise RuntimeError("the secure Gaussian sampler did not resolve a cell after 4096 bits")  # pragma: no cover
