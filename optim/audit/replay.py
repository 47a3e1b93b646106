"""The lockstep twin of a check: a noise source that replays another run's releases.

A probe or an audit steps a **leader** on dataset D and a **twin** on a neighbouring D'.  The
twin's noise source is a :class:`ReplaySource`: instead of adding noise it returns the leader's
released values in order, so the twin walks the leader's public history (same iterates, same
sampling) while its own data and hidden state (DIFF2's differences, DP-SRM's momentum, DiceSGD's
error feedback, the D2P nodes) stay its own.  The twin records its own noiseless queries and
stds.  The optimizer's update does not know which source it releases through.
"""

from __future__ import annotations

import torch

from ...accountant.validation import InputError
from ..algorithms.noise import NoiseSource, split_public

__all__ = []


class ReplaySource(NoiseSource):
    """For audits: instead of adding noise, return the LEADER run's released values in order, so
    that a twin run on a neighbouring dataset follows the leader's public history while its own
    data (and hidden state) stay its own.  Records the twin's own noiseless values and stds.

    Args:
        leader: the leader's noise source, recording with values (``record_values``).
        device: the twin's device.
        dtype: the twin's dtype.

    Raises:
        InputError: if the leader does not record its releases' values.
    """

    def __init__(self, leader: NoiseSource, device, dtype):
        super().__init__(0, device, dtype, record=True, record_noise=False, record_values=True)
        if not leader.record_values:
            raise InputError("leader is not allowed: its releases were not recorded with values (record_values).")
        self.leader, self.cursor = leader, 0

    def _next(self):
        if self.cursor >= len(self.leader.releases):
            raise RuntimeError("the follower is ahead of its leader: step the leader first.")
        rel = self.leader.releases[self.cursor]
        self.cursor += 1
        return rel

    def privatize(self, value, std, *, round, name, sensitivity, relation, public=None):
        """The leader's next released value, in place of ``value (+ public) + noise``; the twin's query is recorded.

        Args:
            value: the twin's noiseless query.
            std: the twin's noise std (recorded, not drawn).
            round: the round of the release (for the record).
            name: the release's name (for the record).
            sensitivity: the claimed L2 sensitivity, or None (for the record).
            relation: the neighbouring relation of the claim (for the record).
            public: a data-independent term added to ``value``, or None.

        Returns:
            The leader's released tensor.

        Raises:
            RuntimeError: if the leader has no release left (the follower is ahead of it).
        """
        fresh, value = split_public(value, public)
        out = self._next().released
        self._log(round, name, std, sensitivity, relation, out - value, value, out, fresh)
        return out

    def privatize_row(self, i, value, std, *, round, name, sensitivity, relation, public=None):
        """As :meth:`privatize` (the leader's next release, whatever the row).

        Args:
            i: the row (ignored: the releases are replayed in order).
            value, std, round, name, sensitivity, relation, public: as :meth:`privatize`.

        Returns:
            The leader's released tensor.

        Raises:
            RuntimeError: if the leader has no release left.
        """
        return self.privatize(value, std, round=round, name=name, sensitivity=sensitivity, relation=relation,
                              public=public)

    def privatize_rows(self, values, stds, *, round, names, sensitivity, relation):
        """The leader's next releases, one per row of ``values``; the twin's queries are recorded.

        Args:
            values: the twin's noiseless queries, one per row.
            stds: the twin's per-row noise stds (recorded, not drawn).
            round: the round of the releases (for the records).
            names: one release name per row (for the records).
            sensitivity: the claimed L2 sensitivity of each row, or None (for the records).
            relation: the neighbouring relation of the claim (for the records).

        Returns:
            The leader's released rows, stacked.

        Raises:
            RuntimeError: if the leader has fewer releases left than rows.
        """
        out = torch.stack([self._next().released for _ in range(values.shape[0])])
        for i in range(values.shape[0]):
            self._log(round, names[i], float(stds[i]), sensitivity, relation, out[i] - values[i], values[i], out[i])
        return out
