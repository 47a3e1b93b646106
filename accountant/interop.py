"""dp-accounting interop: turn a dp-accounting ``DpEvent`` tree into dpcalib events.

``from_dp_event(event)`` accepts the trees dp-accounting users build for Gaussian mechanisms --
``GaussianDpEvent``, ``PoissonSampledDpEvent`` and ``SampledWithoutReplacementDpEvent`` around a
Gaussian, ``SelfComposedDpEvent``, ``ComposedDpEvent`` and ``NoOpDpEvent`` -- and returns the
``(event, count)`` pairs a :class:`~dpcalib.accountant.PrivacyAccountant` composes, so that a
dp-accounting user gets dpcalib's certified bracket (and sampling without replacement, which
dp-accounting's PLD accountant rejects) for their own mechanism:

    acc = PrivacyAccountant.from_dp_event(my_event)
    acc.epsilon_bracket(1e-5)

It is the inverse of :meth:`PrivacyAccountant.to_dp_event`.  dp-accounting itself is never
imported: the tree is read by class name and attributes, so this module stays numpy-only.
"""

from __future__ import annotations

from .validation import InputError
from .events import GaussianEvent, PoissonSampledGaussianEvent, WORSampledGaussianEvent

__all__ = ["from_dp_event"]

_SUPPORTED = ("GaussianDpEvent", "PoissonSampledDpEvent", "SampledWithoutReplacementDpEvent",
              "SelfComposedDpEvent", "ComposedDpEvent", "NoOpDpEvent")


def _gaussian_z(event, where: str) -> float:
    if type(event).__name__ != "GaussianDpEvent":
        raise InputError(f"event={event!r} is not allowed: {where} must wrap a GaussianDpEvent "
                         f"(dpcalib accounts Gaussian mechanisms only).")
    return event.noise_multiplier


def _walk(event, mult: int, out: list) -> None:
    name = type(event).__name__
    if name == "NoOpDpEvent":
        return
    if name == "GaussianDpEvent":
        out.append((GaussianEvent(event.noise_multiplier), mult))
    elif name == "PoissonSampledDpEvent":
        z = _gaussian_z(event.event, "a PoissonSampledDpEvent")
        out.append((PoissonSampledGaussianEvent(event.sampling_probability, z), mult))
    elif name == "SampledWithoutReplacementDpEvent":
        z = _gaussian_z(event.event, "a SampledWithoutReplacementDpEvent")
        out.append((WORSampledGaussianEvent.from_sizes(event.sample_size, event.source_dataset_size, z), mult))
    elif name == "SelfComposedDpEvent":
        if not isinstance(event.count, int) or event.count < 0:
            raise InputError(f"count={event.count!r} is not allowed: expected an integer >= 0.")
        _walk(event.event, mult * event.count, out)
    elif name == "ComposedDpEvent":
        for e in event.events:
            _walk(e, mult, out)
    else:
        raise InputError(f"event={name} is not allowed: expected one of {', '.join(_SUPPORTED)} "
                         f"(dpcalib accounts Gaussian mechanisms, possibly subsampled, and their compositions).")


def from_dp_event(event) -> list:
    """``[(event, count), ...]`` of a dp-accounting ``DpEvent`` tree (consecutive equal events merged).

    A ``SelfComposedDpEvent`` of a composition repeats each part ``count`` times in place
    (``(A, B) x 3`` becomes ``A x 3, B x 3``): composition commutes, so every eps is unchanged.
    """
    out: list = []
    _walk(event, 1, out)
    merged: list = []
    for ev, k in out:
        if k == 0:
            continue
        if merged and merged[-1][0] == ev:
            merged[-1] = (ev, merged[-1][1] + k)
        else:
            merged.append((ev, k))
    return merged
