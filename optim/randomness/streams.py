"""A run's random streams: where they come from, and every draw made from them.

A private run draws from three independent streams -- ``data`` (which records each batch holds),
``noise`` (the DP noise, never used for anything else) and ``output`` (the data-independent choice
of the returned iterate) -- plus one data and one noise stream per client or node of a
decentralised run.  **All of them are secrets**: anyone who can predict the noise subtracts it from
the released iterates, and anyone who knows the batches loses the amplification by sampling.  So:

* with no seed (the default everywhere), the streams come from 128 bits of fresh operating-system
  entropy (:func:`fresh_root`: ``secrets.randbits``), never from a constant, a process id or the
  clock; on several processes the root is drawn once and shared only inside the process group;
* ``seed=s`` derives them from ``s`` (``numpy.random.SeedSequence(s).spawn(3)``): reproducible,
  for tests, audits and research -- and anyone who knows ``s`` knows every batch and every noise
  draw of the run, so its epsilon protects nobody from them;
* ``secure_mode=True`` draws every stream from :class:`~.secure.SecureGenerator` (ChaCha20 keyed
  from ``os.urandom``) and the noise with :func:`~.secure.gaussian_release`.

The draws (:func:`poisson_mask`, :func:`permutation`, :func:`randint`, :func:`bins`, :func:`uniform`,
:func:`standard_normal`) take either kind of generator: a ``torch.Generator`` (the default; a seeded
run draws exactly as it always has) or a :class:`~.secure.SecureGenerator`.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import warnings

import numpy as np
import torch

from ...accountant.validation import InputError
from . import secure
from .secure import SecureGenerator

__all__ = []

#: a run's root: 128 bits of entropy (a SeedSequence's) or a 256-bit secure key
ROOT_BYTES = 32


def check_seed(seed) -> int | None:
    """``seed`` as given (None or an integer >= 0).

    Args:
        seed: None or an integer >= 0.

    Returns:
        None, or the seed as an int.

    Raises:
        InputError: anything else (a bool, a float, a negative integer).
    """
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed={seed!r} is not allowed: expected None (fresh entropy, the default) or an integer >= 0.")
    return int(seed)


def choose_seed(seed) -> int:
    """A seed that is never a constant default: ``seed`` checked, or (None) a fresh one drawn from
    the operating system's entropy (``secrets.randbits``).  32 bits, as ``dpcalib audit`` and
    ``dpcalib probe`` draw theirs: a seed drawn here, recorded on a report, is one ``--seed`` takes
    back.  The audits, the probes and the data (:func:`dpcalib.optim.data.synthetic`,
    :func:`dpcalib.optim.data.prepare`) take their default seed from here.

    Args:
        seed: None (draw a fresh seed) or an integer >= 0.

    Returns:
        The seed, an int >= 0.

    Raises:
        InputError: if ``seed`` is neither None nor an integer >= 0 (one line naming it).
    """
    seed = check_seed(seed)
    return secrets.randbits(32) if seed is None else seed


def fresh_root() -> bytes:
    """32 bytes of fresh operating-system entropy (``secrets.token_bytes``): a run's root when no
    seed is given.

    Returns:
        ``ROOT_BYTES`` (32) random bytes.
    """
    return secrets.token_bytes(ROOT_BYTES)


def _seed_of(ss) -> int:
    return int(ss.generate_state(1, dtype=np.uint64)[0] % (2 ** 63))


def stream_seeds(seed: int) -> list[int]:
    """The (data, noise, output) seeds of a seeded run (``SeedSequence(seed).spawn(3)``).

    Args:
        seed: an integer >= 0 (any size).

    Returns:
        Three 63-bit seeds for ``torch.Generator.manual_seed``.
    """
    return [_seed_of(s) for s in np.random.SeedSequence(int(seed)).spawn(3)]


def node_seeds(seed: int, nodes: int) -> tuple[list[int], list[int]]:
    """Per-node (data, noise) seeds of a decentralised run: node i's streams are the same in the
    one-process simulation and on rank i of a multi-process run.

    Args:
        seed: an integer >= 0 (any size).
        nodes: how many clients or nodes.

    Returns:
        ``(data seeds, noise seeds)``, one of each per node.
    """
    data, noise, _ = np.random.SeedSequence(int(seed)).spawn(3)
    return [_seed_of(s) for s in data.spawn(nodes)], [_seed_of(s) for s in noise.spawn(nodes)]


#: how many bytes of a value's text :func:`same_on_ranks` compares and names
_NAMED = 48


def same_on_ranks(name: str, text: str, gather) -> None:
    """Refuse, on every process, a setting that differs between the processes of one run: a seed per
    rank draws another logical batch and other noise on each, so one record is counted on several.

    Args:
        name: the setting's name, for the message (``"seed"``).
        text: this process's value as text (its first 48 bytes and a SHA-256 digest of the whole are compared).
        gather: the transport's ``gather(tensor) -> [world, ...]`` (one process: nothing to compare).

    Raises:
        InputError: if two processes hold different values (every process raises, naming rank 0's value and
            the first that differs).
    """
    raw = text.encode()
    head = raw[:_NAMED].ljust(_NAMED, b"\0")
    payload = torch.tensor(list(head + hashlib.sha256(raw).digest()), dtype=torch.uint8)
    every = gather(payload)
    if every.shape[0] < 2:
        return
    for r in range(1, every.shape[0]):
        if not torch.equal(every[r], every[0]):
            show = [bytes(every[k, :_NAMED].tolist()).rstrip(b"\0").decode(errors="replace") for k in (0, r)]
            raise InputError(f"{name}={show[1]} on rank {r} is not allowed: rank 0 has {name}={show[0]}; every rank of "
                             f"one run must give the same {name} (or none: the ranks then share one fresh root), or "
                             "each rank would draw its own batch and its own noise and a record would count twice.")


#: digests of the seeded stream states restored in this process (a second restore of one is a fork)
_RESTORED: set = set()


def note_restored(states) -> None:
    """Warn when the same seeded stream states are restored a second time in this process: the two
    continuations then make the same noise draws (and batches), so their releases taken together
    give the clipped sums back -- the accounting covers one continuation, not both.

    Args:
        states: the restored generators' states (uint8 tensors); an empty list restores nothing.
    """
    if not states:
        return
    h = hashlib.sha256()
    for st in states:
        h.update(bytes(st.cpu().numpy().tobytes()))
    key = h.digest()
    if key in _RESTORED:
        warnings.warn("this checkpoint of a seeded run was loaded before in this process: the two continuations "
                      "share their noise draws and batches, so their releases together reveal the clipped sums "
                      "(give each fork its own seed, or none).", UserWarning, stacklevel=3)
    _RESTORED.add(key)


class RunStreams:
    """The generators of one run, from its root.

    On several processes (``agree`` and ``gather`` of a process group), an unseeded run's root is rank 0's,
    shared inside the group, and a seeded run's seed must be the same on every rank (:func:`same_on_ranks`).

    Args:
        seed: None (fresh entropy: the default) or an integer >= 0 (reproducible; see the module text).
        secure_mode: draw from :class:`~.secure.SecureGenerator` (ChaCha20) instead of torch.Generator.
        agree: ``agree(root_bytes) -> root_bytes``, the transport's way to share one root inside a process
            group (identity on one process).
        gather: the transport's ``gather(tensor)``, to check that every rank gave the same seed (None: not checked).

    Raises:
        InputError: a seed that is not None or an integer >= 0, or seeds that differ between the ranks.
    """

    def __init__(self, seed=None, *, secure_mode: bool = False, agree=None, gather=None):
        seed = check_seed(seed)
        self.secure = bool(secure_mode)
        self.seeded = seed is not None
        if gather is not None:
            same_on_ranks("seed", "None" if seed is None else str(seed), gather)
        root = fresh_root() if seed is None else None
        if root is not None and agree is not None:
            root = agree(root)
        if self.secure:
            self._key = (SecureGenerator.from_seed(seed) if root is None else SecureGenerator(root))
        else:
            # a SeedSequence from 128 bits of the root, or from the seed: the seeded streams are the ones
            # dpcalib has always drawn for that seed
            self._seed = seed if root is None else int.from_bytes(root[:16], "little")

    def _torch(self, seed: int, device) -> torch.Generator:
        return torch.Generator(device=device).manual_seed(int(seed))

    def run(self, device, data_device=None) -> tuple:
        """``(data, noise, output)`` generators: noise on ``device``, data on ``data_device`` (``device`` by
        default), output on the CPU.

        Args:
            device: the noise generator's device.
            data_device: the data generator's device (None: ``device``).

        Returns:
            ``(data, noise, output)``: torch.Generators, or SecureGenerators in secure mode.
        """
        data_device = device if data_device is None else data_device
        if self.secure:
            return (self._key.child("data", data_device), self._key.child("noise", device),
                    self._key.child("output"))
        s_data, s_noise, s_out = stream_seeds(self._seed)
        return self._torch(s_data, data_device), self._torch(s_noise, device), self._torch(s_out, "cpu")

    def nodes(self, count: int, here, device) -> tuple[list, list]:
        """Per-node ``(data generators, noise generators)`` of the nodes ``here`` of ``count``.

        Args:
            count: the number of clients or nodes of the run.
            here: the indices of the nodes this process holds.
            device: the generators' device.

        Returns:
            ``(data generators, noise generators)``, one of each per node in ``here``.
        """
        if self.secure:
            return ([self._key.child(f"node-data/{i}", device) for i in here],
                    [self._key.child(f"node-noise/{i}", device) for i in here])
        data, noise = node_seeds(self._seed, count)
        return [self._torch(data[i], device) for i in here], [self._torch(noise[i], device) for i in here]


def is_secure(generator) -> bool:
    """Is ``generator`` a :class:`~.secure.SecureGenerator`?

    Args:
        generator: any generator.

    Returns:
        True for a :class:`~.secure.SecureGenerator`.
    """
    return isinstance(generator, SecureGenerator)


#: below this rate a float32 uniform's 2^-24 grid would cost more than 2^-14 of q (see poisson_mask)
_FLOAT32_RATE = 2.0 ** -10


def poisson_mask(generator, n: int, q: float) -> torch.Tensor:
    """Which of ``n`` records a Poisson sample at rate ``q`` holds: each independently with a
    probability that is never above ``q`` (an accountant at q stays sound).

    A uniform ``u`` on a grid of 2^-k is compared with ``floor(q 2^k) / 2^k``, so the probability is
    exactly that number: float32 uniforms (k = 24, the draws dpcalib has always made) on the CPU for
    q >= 2^-10, float64 ones (k = 53) otherwise -- a float32 ``u < q`` gives ``ceil(q 2^24) / 2^24``,
    which is above q (by 19 % at q = 1e-7).

    Args:
        generator: a torch.Generator or a SecureGenerator.
        n: how many records.
        q: the rate in [0, 1].

    Returns:
        A bool tensor ``[n]`` on the generator's device.
    """
    if is_secure(generator):
        return secure.uniform_mask(generator, n, q)
    q = float(q)
    if generator.device.type == "cpu" and q >= _FLOAT32_RATE:
        u = torch.rand(n, generator=generator, device=generator.device)
        return u < math.ldexp(math.floor(math.ldexp(q, 24)), -24)
    u = torch.rand(n, generator=generator, device=generator.device, dtype=torch.float64)
    return u < math.ldexp(math.floor(math.ldexp(q, 53)), -53)


def permutation(generator, n: int) -> torch.Tensor:
    """A uniformly random order of ``0 .. n-1`` on the generator's device.

    Args:
        generator: a torch.Generator or a SecureGenerator.
        n: how many records, >= 0.

    Returns:
        A long tensor, a permutation of ``0 .. n-1``.
    """
    if is_secure(generator):
        return secure.permutation(generator, n)
    return torch.randperm(n, generator=generator, device=generator.device)


def randint(generator, n: int, size: int = 1) -> torch.Tensor:
    """``size`` uniform draws from ``0 .. n-1`` on the generator's device.

    Args:
        generator: a torch.Generator or a SecureGenerator.
        n: the range, >= 1.
        size: how many draws.

    Returns:
        A long tensor ``[size]``.
    """
    if is_secure(generator):
        return secure.randint(generator, n, size)
    return torch.randint(n, (size,), generator=generator, device=generator.device)


def bins(generator, n: int, t: int) -> torch.Tensor:
    """Balls-in-bins: each of ``n`` records put in one of ``t`` bins (the steps of an epoch), exactly
    uniformly and independently.

    ``torch.randint`` with a range that is not a power of two reduces 32 random bits modulo ``t``, which
    favours the low bins by up to ``t / 2^32`` -- the accountant's pair assumes exactly ``1/t`` each.  So a
    torch.Generator draws ``k = ceil(log2 t)`` bits per record (a power-of-two range: exact) and redraws
    the records whose draw is ``>= t`` (each round keeps at least half); a SecureGenerator rejects 64-bit
    words (:func:`~.secure.randint`).  A seeded generator draws the same bins every time.

    Args:
        generator: a torch.Generator or a SecureGenerator.
        n: how many records, an integer >= 0.
        t: how many bins, an integer >= 1.

    Returns:
        A long tensor ``[n]`` of bins in ``0 .. t-1`` on the generator's device.

    Raises:
        InputError: ``n < 0`` or ``t < 1``.
    """
    n, t = int(n), int(t)
    if n < 0 or t < 1:
        raise InputError(f"n={n}, t={t} are not allowed: expected n >= 0 records and t >= 1 bins.")
    if is_secure(generator):
        return secure.randint(generator, t, n)
    device = generator.device
    span = 1 << max(0, (t - 1).bit_length())           # the smallest power of two >= t
    out = torch.randint(span, (n,), generator=generator, device=device)
    if span == t:
        return out
    bad = (out >= t).nonzero().flatten()
    while bad.numel():
        out[bad] = torch.randint(span, (bad.numel(),), generator=generator, device=device)
        bad = bad[out[bad] >= t]
    return out


def uniform(generator) -> float:
    """One uniform draw from [0, 1).

    Args:
        generator: a torch.Generator or a SecureGenerator.

    Returns:
        A float in [0, 1).
    """
    if is_secure(generator):
        return secure.uniform(generator)
    return torch.rand((), generator=generator, device=generator.device).item()


def standard_normal(generator, shape, *, device, dtype) -> torch.Tensor:
    """Standard normal draws from a torch.Generator (a secure run adds its noise with
    :func:`~.secure.gaussian_release` instead: its noise is not a standard normal times a std).

    Args:
        generator: a torch.Generator.
        shape: the shape of the draw.
        device: the tensor's device.
        dtype: the tensor's dtype.

    Returns:
        A tensor of i.i.d. N(0, 1) draws.

    Raises:
        InputError: a SecureGenerator (its noise is drawn with the value it is added to).
    """
    if is_secure(generator):
        raise InputError("generator is not allowed here: secure-mode noise is drawn with the value it is added to "
                         "(secure.gaussian_release).")
    return torch.randn(shape, generator=generator, device=device, dtype=dtype)
