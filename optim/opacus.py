"""An accountant Opacus users can plug into ``PrivacyEngine`` (optional: needs ``opacus``).

Usage::

    import dpcalib.optim.opacus                      # registers the mechanism name "dpcalib"
    engine = opacus.PrivacyEngine(accountant="dpcalib")
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=loader,
        target_epsilon=3.0, target_delta=1e-5, epochs=10, max_grad_norm=1.0)
    ...
    engine.get_epsilon(1e-5)                         # dpcalib's certified eps so far

What works with Opacus's API (opacus >= 1.4):

* ``PrivacyEngine(accountant="dpcalib")``: every optimizer step is recorded by Opacus's hook as
  ``(noise_multiplier, sample_rate)``, exactly as for its own accountants.
* ``get_epsilon(delta)`` / ``engine.get_epsilon(delta)``: the certified upper end of dpcalib's
  bracket -- exact GDP for full-batch steps (``sample_rate == 1``), else the smaller of the PLD
  upper bound (both add/remove directions) and RDP.  ``epsilon_bracket(delta)`` gives the whole
  bracket.  Poisson sampling is assumed, as in Opacus.
* ``make_private_with_epsilon``: Opacus calibrates by its own binary search on ``get_epsilon``
  (tolerance 0.01, about 20 evaluations).  :func:`noise_multiplier` gives dpcalib's tight
  calibration instead (never above the target; pass its result to ``make_private``).
* ``state_dict`` / ``load_state_dict`` (checkpoints) keep the history, as Opacus's do.

Not supported: Opacus's per-layer or per-sample ``sample_rate`` changes are recorded like any
other step (a new history entry), nothing more.
"""

from __future__ import annotations

try:
    from opacus.accountants import IAccountant, register_accountant
except ImportError as exc:  # pragma: no cover - exercised only without opacus
    raise ImportError("dpcalib.optim.opacus needs Opacus: pip install opacus") from exc

from ..accountant import GaussianEvent, PoissonSampledGaussianEvent, PrivacyAccountant

__all__ = ["DpcalibAccountant", "noise_multiplier", "MECHANISM"]

MECHANISM = "dpcalib"


class DpcalibAccountant(IAccountant):
    """Opacus accountant backed by dpcalib's certified accountant."""

    def __init__(self):
        self.history = []  # [(noise_multiplier, sample_rate, num_steps)], Opacus's layout

    def step(self, *, noise_multiplier: float, sample_rate: float):
        """Record one optimizer step (Opacus calls it after each step); equal consecutive steps are merged.

        Args:
            noise_multiplier: the step's noise multiplier (std / clip norm), > 0.
            sample_rate: the step's Poisson sampling rate, in (0, 1] (1: full batch).
        """
        if self.history and self.history[-1][:2] == (noise_multiplier, sample_rate):
            z, q, k = self.history.pop()
            self.history.append((z, q, k + 1))
        else:
            self.history.append((noise_multiplier, sample_rate, 1))

    def accountant(self) -> PrivacyAccountant:
        """The history as a dpcalib :class:`~dpcalib.accountant.PrivacyAccountant`.

        Returns:
            A new :class:`~dpcalib.accountant.PrivacyAccountant` of the steps so far.
        """
        acc = PrivacyAccountant()
        for z, q, k in self.history:
            acc.compose(GaussianEvent(z) if q >= 1.0 else PoissonSampledGaussianEvent(q, z), k)
        return acc

    def epsilon_bracket(self, delta: float):
        """The eps bracket of the steps so far at ``delta`` (certified upper end, lower bound).

        Args:
            delta: the delta, in (0, 1).

        Returns:
            An ``EpsilonBracket``.
        """
        return self.accountant().epsilon_bracket(delta)

    def get_epsilon(self, delta: float, **kwargs) -> float:
        """The best certified eps of the steps so far (Opacus's ``get_epsilon``).

        Args:
            delta: the delta, in (0, 1).
            **kwargs: Opacus's options (ignored).

        Returns:
            eps, or 0.0 before the first step.
        """
        if not self.history:
            return 0.0
        return self.accountant().epsilon_report(delta, accountant="best").epsilon

    def __len__(self) -> int:
        return len(self.history)

    @classmethod
    def mechanism(cls) -> str:
        """The name this accountant is registered under in Opacus.

        Returns:
            ``"dpcalib"``.
        """
        return MECHANISM


def noise_multiplier(target_epsilon: float, target_delta: float, sample_rate: float, steps: int) -> float:
    """dpcalib's tight noise multiplier for ``steps`` Poisson-sampled steps (certified, never above
    the target) -- :meth:`dpcalib.mechanisms.DPSGD.calibrate`.

    Args:
        target_epsilon: target eps, in (0, 1e4].
        target_delta: target delta, in (0, 1).
        sample_rate: Poisson sampling rate, in [1e-9, 1].
        steps: number of steps, an integer in [1, 1e9].

    Returns:
        The noise multiplier (std / clip norm).
    """
    from ..mechanisms import DPSGD

    return DPSGD(sample_rate, steps).calibrate(target_epsilon, target_delta)["noise_multiplier"]


# Opacus's public registration; force: a re-import (or a reload) registers the same name again
register_accountant(MECHANISM, DpcalibAccountant, force=True)
