"""The run's shape, one typed value: how the batches are drawn (:class:`Sampling`) and how long the run
is (:class:`Run`), with the clip norms the run states.  It is built once, where the user's input is
read -- ``dpcalib train``'s parser, the engine's loader inspection
(:meth:`dpcalib.optim.PrivacyEngine.make_private`) -- and handed to the mechanism, whose
``from_run(run)`` builds itself (and so its events) from it.

The names of the samplings have this one owner: :data:`POISSON`, :data:`WOR`, :data:`SHUFFLE`,
:data:`BALLS_IN_BINS` (and :data:`SAMPLINGS`, their words).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..accountant import steps_per_epoch
from ..accountant.validation import InputError

__all__ = ["Sampling", "Run", "SAMPLINGS", "POISSON", "WOR", "SHUFFLE", "BALLS_IN_BINS"]

POISSON, WOR, SHUFFLE, BALLS_IN_BINS = "poisson", "wor", "shuffle", "balls-in-bins"
#: every sampling a run may have -> its words
SAMPLINGS = {POISSON: "Poisson", WOR: "fixed size without replacement", SHUFFLE: "shuffled epochs",
             BALLS_IN_BINS: "balls-in-bins epochs"}


@dataclass(frozen=True)
class Sampling:
    """How a run's batches are drawn from ``n`` records with (expected) batch ``batch_size``.

    Attributes:
        kind: one of :data:`SAMPLINGS` (``"poisson"``, ``"wor"``, ``"shuffle"``, ``"balls-in-bins"``).
        n: the number of records N, an integer >= 1.
        batch_size: the (expected) batch size b, an integer >= 1.
        drop_last: shuffled epochs (and a loader's own batches): drop each epoch's last, partial batch.

    Raises:
        InputError: on construction, if ``kind`` is not a known sampling.
    """

    kind: str
    n: int
    batch_size: int
    drop_last: bool = False

    def __post_init__(self):
        if self.kind not in SAMPLINGS:
            raise InputError(f"sampling={self.kind!r} is not allowed: expected one of {', '.join(SAMPLINGS)}.")

    @property
    def epoch_wise(self) -> bool:
        """Whether the run is whole epochs, every record once an epoch (shuffled or balls-in-bins)."""
        return self.kind in (SHUFFLE, BALLS_IN_BINS)

    @property
    def rate(self) -> float:
        """The Poisson rate ``q = min(1, b / N)``."""
        return min(1.0, self.batch_size / self.n)

    @property
    def steps_per_epoch(self) -> int:
        """The steps of one pass, from public numbers: ``ceil(N / b)`` (1 for a batch larger than the
        dataset), ``floor(N / b)`` with ``drop_last``; balls-in-bins: its ``ceil(N / b)`` bins whatever a
        loader would drop (:func:`dpcalib.accountant.steps_per_epoch`).

        Raises:
            InputError: if ``drop_last`` and ``batch_size > n`` (no whole batch), or balls-in-bins with
                ``batch_size > n``.
        """
        if self.kind == BALLS_IN_BINS:
            return steps_per_epoch(self.n, self.batch_size)
        if self.drop_last and self.batch_size > self.n:
            raise InputError(f"batch_size={self.batch_size!r} is not allowed with drop_last=True over {self.n} "
                             "records: no whole batch in a pass; give a smaller batch_size or drop_last=False.")
        return steps_per_epoch(self.n, min(self.batch_size, self.n), self.drop_last)


@dataclass(frozen=True)
class Run:
    """A run's shape: its sampling, its length and the clip norms it states.

    Attributes:
        sampling: the :class:`Sampling`, or None (a full-batch run of ``clients`` clients).
        steps: the steps (rounds) T.
        epochs: the epochs E of an epoch-wise sampling, else None.
        clip: the clip norm C (C1, DP-SRM's Lipschitz bound).
        clip2: the second bound (C2, DP-SRM's step bound), or None (the algorithm's default).
        b0: DP-SRM's first batch, or None.
        momentum: DP-SRM's momentum, or None (its default).
        clients: the clients P of a full-batch run, or None.
        n_min: the smallest client's records, or None.
        restart_interval: DIFF2's rounds between restarts.
    """

    sampling: Sampling | None
    steps: int
    epochs: int | None = None
    clip: float = 1.0
    clip2: float | None = None
    b0: int | None = None
    momentum: float | None = None
    clients: int | None = None
    n_min: int | None = None
    restart_interval: int = 1

    @classmethod
    def of(cls, sampling: Sampling, *, epochs=None, steps=None, **rest) -> "Run":
        """The run of ``epochs`` passes or ``steps`` steps (one pass when neither is given) over ``sampling``.

        Args:
            sampling: the run's :class:`Sampling`.
            epochs: the passes, an integer >= 1, or None.
            steps: the steps, an integer >= 1, or None (with an epoch-wise sampling a whole number of epochs).
            **rest: :class:`Run`'s other fields (``clip``, ``clip2``, ``b0``, ``momentum``).

        Returns:
            The :class:`Run`.

        Raises:
            InputError: if both ``epochs`` and ``steps`` are given, one is not an integer >= 1, or ``steps``
                is not whole epochs of an epoch-wise sampling.
        """
        if epochs is not None and steps is not None:
            raise InputError("epochs and steps are not allowed together: give one.")
        for name, val in (("epochs", epochs), ("steps", steps)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 1):
                raise InputError(f"{name}={val!r} is not allowed: expected an integer >= 1.")
        per_pass = sampling.steps_per_epoch
        if sampling.epoch_wise and steps is not None and steps % per_pass:
            raise InputError(f"steps={steps} is not allowed with sampling={sampling.kind!r}: expected whole epochs "
                             f"(a multiple of {per_pass} batches); give epochs.")
        E = epochs if epochs is not None else (steps // per_pass if steps is not None else 1)
        T = steps if steps is not None else E * per_pass
        return cls(sampling, T, E if sampling.epoch_wise else None, **rest)
