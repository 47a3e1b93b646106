"""A privacy report a person can act on: eps at several delta, the trade-off curve, and what they
mean as attack risk, under which assumptions.

Every number is read from the certified side, so none is below the truth for the composition's
dominating pairs:

* ``epsilons``: the bracket ``[lower, upper]`` of eps at each delta (:meth:`PrivacyAccountant.
  epsilon_bracket`: exact GDP, else the PLD bracket with RDP as a further upper bound);
* ``mu``: the GDP parameter where the composition is exactly Gaussian DP (full batch);
* ``tpr_at_fpr``: the largest true-positive rate of ANY membership-inference test at a given
  false-positive rate, ``1 - f(a)`` for the trade-off curve ``f`` of the certified pair
  (:mod:`.tradeoff`; Dong, Roth & Su 2022, Prop. 2.12);
* ``advantage``: the largest TPR - FPR of any test, ``delta(0)`` of the pair (its total-variation
  distance; Kairouz, Oh & Viswanath 2015 for the (eps, delta) reading);
* ``assumptions``: the neighbouring relation, the sampling, what one record is, the number of
  steps and delta -- the conditions under which the numbers hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import validation
from .validation import InputError
from .tradeoff import attack_risk

__all__ = ["privacy_report", "relation_text", "delta_text", "DEFAULT_FPRS", "DEFAULT_DELTAS"]

#: the false-positive rates of the attack-risk terms (a membership attack is judged at low FPR:
#: Carlini, Chien, Nasr, Song, Terzis & Tramer 2022)
DEFAULT_FPRS = (0.001, 0.01, 0.1)
#: the deltas of the eps table (the report's own delta is added)
DEFAULT_DELTAS = (1e-3, 1e-4, 1e-5, 1e-6, 1e-8, 1e-10)
#: the FPRs at which the trade-off curve is sampled (log-spaced, then linear)
CURVE_FPRS = tuple(float(x) for x in np.unique(np.concatenate((np.logspace(-6, 0, 49), np.linspace(0.0, 1.0, 41)))))


@dataclass(frozen=True)
class PrivacyReport:
    """What a composition's guarantee means.  ``epsilon`` is the certified upper end at ``delta``.

    Attributes:
        delta: the report's delta, in (0, 1).
        epsilon_lower: the lower end of eps at ``delta`` (None where only an RDP upper bound exists).
        epsilon_upper: the certified upper end of eps at ``delta``.
        method: the method that certified ``epsilon_upper`` (``"pld"``, ``"gdp"``, ``"rdp"``,
            ``"tv"`` or ``"none"``; as :class:`~.pld.shared.EpsilonBracket`).
        epsilons: ``((delta, lower or None, upper), ...)``, delta decreasing.
        mu: the GDP parameter where the composition is exactly Gaussian DP, else None.
        tpr_at_fpr: ``((fpr, tpr), ...)``: the largest true-positive rate at each FPR.
        advantage: the largest ``TPR - FPR`` of any test, in [0, 1].
        tradeoff: ``((fpr, tpr), ...)`` on ``CURVE_FPRS`` (the trade-off curve is ``1 - tpr``).
        assumptions: a dict of words: the conditions under which the numbers hold.
        notes: a tuple of strings.
    """

    delta: float
    epsilon_lower: float | None
    epsilon_upper: float
    method: str
    epsilons: tuple          # ((delta, lower or None, upper), ...), delta decreasing
    mu: float | None
    tpr_at_fpr: tuple        # ((fpr, tpr), ...)
    advantage: float
    tradeoff: tuple          # ((fpr, tpr), ...) on CURVE_FPRS: the curve is 1 - tpr
    assumptions: dict
    notes: tuple = field(default=())

    @property
    def epsilon(self) -> float:
        """The certified upper end of eps at ``delta`` (``epsilon_upper``).

        """
        return self.epsilon_upper

    def to_dict(self) -> dict:
        """The JSON form (stable keys: ``epsilon``, ``epsilon_lower``, ``epsilon_upper``, ``delta``,
        ``method``, ``epsilons``, ``mu``, ``tpr_at_fpr`` keyed by the FPR as a string,
        ``advantage``, ``tradeoff``, ``assumptions``, ``notes``).

        Returns:
            A dict of JSON-serialisable values.
        """
        return {"epsilon": self.epsilon_upper, "epsilon_lower": self.epsilon_lower,
                "epsilon_upper": self.epsilon_upper, "delta": self.delta, "method": self.method,
                "epsilons": [{"delta": d, "lower": lo, "upper": up} for d, lo, up in self.epsilons],
                "mu": self.mu, "tpr_at_fpr": {_key(a): t for a, t in self.tpr_at_fpr},
                "advantage": self.advantage,
                "tradeoff": {"fpr": [a for a, _ in self.tradeoff], "tpr": [t for _, t in self.tradeoff]},
                "assumptions": dict(self.assumptions), "notes": list(self.notes)}

    def text(self) -> str:
        """The report in words, one fact a line.

        Returns:
            The lines joined by newlines (a str).
        """
        lines = []
        lo = "-" if self.epsilon_lower is None else f"{self.epsilon_lower:.6g}"
        lines.append(f"epsilon     {self.epsilon_upper:.6g}  at delta = {self.delta:g}   "
                     f"(bracket [{lo}, {self.epsilon_upper:.6g}]; upper: certified by {self.method})")
        for d, lo_d, up in self.epsilons:
            lo_s = "-" if lo_d is None else f"{lo_d:.6g}"
            lines.append(f"            delta = {d:<8.3g} epsilon in [{lo_s}, {up:.6g}]")
        if self.mu is not None:
            lines.append(f"mu          {self.mu:.6g}  (the whole run is exactly mu-GDP: the trade-off curve "
                         f"is Phi(Phi^-1(1 - a) - mu))")
        lines.append("attack risk (any membership-inference test; certified, never below the truth):")
        for a, t in self.tpr_at_fpr:
            lines.append(f"            at FPR {a:<6g} the true-positive rate is at most {t:.4g}"
                         f"  ({t / a:.3g}x the FPR)" if a > 0 else
                         f"            at FPR 0 the true-positive rate is at most {t:.4g}")
        lines.append(f"            advantage (TPR - FPR, any test, any threshold) at most {self.advantage:.4g}")
        lines.append("assumptions:")
        for k, v in self.assumptions.items():
            lines.append(f"  {k.replace('_', ' ')}: {v}")
        for n in self.notes:
            lines.append(f"note: {n}")
        return "\n".join(lines)

    def figure(self, title: str = ""):
        """The report's matplotlib figure: the trade-off curve (FNR = 1 - TPR against FPR) with the
        attack points, and the ROC bound on log axes (how attacks at low FPR are judged).  Each attack
        point is named in the right panel's legend (labels beside points at FPR 0.001 and 0.01 would
        sit on each other).  Needs matplotlib.

        Args:
            title: the figure's title (default: the certified eps and delta).

        Returns:
            A ``matplotlib.figure.Figure`` (close it when done).
        """
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        a = np.array([x for x, _ in self.tradeoff])
        t = np.array([y for _, y in self.tradeoff])
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 4))
        ax1.plot(a, 1.0 - t, label="certified trade-off curve")
        ax1.plot([0, 1], [1, 0], ls=":", c="grey", label="no privacy loss")
        markers = "osD^vP*X"
        for k, (x, y) in enumerate(self.tpr_at_fpr):
            ax1.plot([x], [1.0 - y], markers[k % len(markers)], c=f"C{3 + k % 6}", ms=5)
        ax1.set_xlabel("false-positive rate (type I error)")
        ax1.set_ylabel("false-negative rate (type II error)")
        ax1.set_xlim(0, 1)
        ax1.set_ylim(0, 1)
        ax1.legend(fontsize=7, loc="upper right")
        pos = a > 0
        ax2.loglog(a[pos], t[pos], label="largest TPR (certified)")
        ax2.loglog(a[pos], a[pos], ls=":", c="grey", label="TPR = FPR")
        for k, (x, y) in enumerate(self.tpr_at_fpr):
            if x > 0:
                ax2.plot([x], [y], markers[k % len(markers)], c=f"C{3 + k % 6}", ms=5,
                         label=f"FPR {x:g}: TPR <= {y:.3g}")
        ax2.set_xlabel("false-positive rate")
        ax2.set_ylabel("true-positive rate")
        ax2.legend(fontsize=7, loc="lower right")
        fig.suptitle(title or f"epsilon {self.epsilon_upper:.4g} at delta {self.delta:g}", fontsize=9)
        fig.tight_layout()
        return fig

    def plot(self, path: str, title: str = "") -> None:
        """Write :meth:`figure` to ``path`` (needs matplotlib).

        Args:
            path: the file to write (its extension picks the format).
            title: the figure's title (default: the certified eps and delta).
        """
        import matplotlib.pyplot as plt

        fig = self.figure(title)
        fig.savefig(path)
        plt.close(fig)


def _key(a: float) -> str:
    """The JSON key of an FPR: its shortest decimal form ("0.001")."""
    return repr(float(a)) if float(a) != 0.0 else "0"


_RELATIONS = {
    "add/remove": "add/remove: the two datasets differ in one record, present in one and absent from the other",
    "replace-one": "replace-one: the two datasets differ in one record, replaced by any other",
    "zero-out": "zero-out: one record replaced by a record that contributes nothing (zero gradient)",
    None: "full-batch releases only: the noise multipliers must be noise std / L2 sensitivity under the "
          "relation you claim (add/remove or replace-one)",
}


def relation_text(relation) -> str:
    """The neighbouring relation in words, for a report's assumptions.

    Args:
        relation: ``"add/remove"``, ``"replace-one"``, ``"zero-out"`` or None (full-batch only).

    Returns:
        The sentence (a str; ``str(relation)`` for another value).
    """
    return _RELATIONS.get(relation, str(relation))


def event_assumptions(accountant, delta: float) -> dict:
    """The assumptions of a raw composition, in words.

    Args:
        accountant: the accountant (its ``events`` and ``neighboring_relation`` are read).
        delta: the report's delta.

    Returns:
        A dict of str: ``neighbouring_relation``, ``sampling``, ``record``, ``steps``, ``delta``
        and ``attacker``.
    """
    parts, steps = [], 0
    for ev, k in accountant.events:
        steps += k
        parts.append(ev.describe(k))    # each event kind owns its words
    return {"neighbouring_relation": relation_text(accountant.neighboring_relation),
            "sampling": "; ".join(parts) or "nothing released",
            "record": "the unit whose contribution to each release the sensitivity bounds (one training "
                      "example, unless the pipeline groups examples: then one group)",
            "steps": f"{steps} release(s) in all, each adaptive (chosen after the previous outputs)",
            "delta": delta_text(delta),
            "attacker": "sees every released value (or anything computed from them) and knows every other "
                        "record: the worst case, so real attacks usually do worse"}


def delta_text(delta: float) -> str:
    """What ``delta`` means, in words, for a report's assumptions.

    Args:
        delta: the report's delta.

    Returns:
        The sentence (a str).
    """
    return (f"delta = {delta:g}: the slack of (eps, delta)-DP (roughly, the chance that the eps bound does not "
            "hold); keep it well below 1 / (number of records)")


def privacy_report(accountant, delta, deltas=None, fprs=DEFAULT_FPRS, assumptions=None, bracket=None,
                   notes=(), progress=None) -> PrivacyReport:
    """The report of ``accountant``'s composition at ``delta``.

    ``deltas``: the eps table's deltas (default :data:`DEFAULT_DELTAS`; ``delta`` is always
    added); ``fprs``: the attack-risk FPRs; ``assumptions``: a dict of words (default: read from
    the events, :func:`event_assumptions`); ``bracket``: ``delta -> EpsilonBracket`` where eps is
    not the accountant's own (shuffled batches), default the accountant's best bracket;
    ``progress``: None, or a callable ``progress(done, total, part)`` told after each part of the
    report (one eps bracket per delta, then the attack risk; ``part`` names the next one, "" at the
    end) -- a report of 10^8 steps takes minutes, and a caller may show a bar (the CLI does).

    Args:
        accountant: the :class:`~dpcalib.accountant.PrivacyAccountant` of the composition.
        delta: the report's delta, in (0, 1).
        deltas: the eps table's deltas, each in (0, 1), or None (``DEFAULT_DELTAS``).
        fprs: the attack-risk false-positive rates, each in (0, 1).
        assumptions: a dict of words, or None (read from the events).
        bracket: a callable ``delta -> EpsilonBracket``, or None (the accountant's).
        notes: strings added to the report.
        progress: None, or a callable ``progress(done, total, part)``.

    Returns:
        The :class:`PrivacyReport`.

    Raises:
        InputError: if ``delta`` or a table delta is out of range, ``fprs`` is not a non-empty 1-d
            array of rates in (0, 1), or ``progress`` is neither None nor callable.
    """
    d = validation.delta(delta)
    ds = DEFAULT_DELTAS if deltas is None else tuple(np.atleast_1d(np.asarray(deltas, dtype=float)))
    ds = sorted({validation.delta(x) for x in ds} | {d}, reverse=True)
    a = np.atleast_1d(np.asarray(fprs, dtype=float))
    if a.ndim != 1 or a.size == 0 or not np.all((a > 0.0) & (a < 1.0)):
        raise InputError(f"fprs={fprs!r} is not allowed: expected false-positive rates in (0, 1).")
    if progress is not None and not callable(progress):
        raise InputError(f"progress={progress!r} is not allowed: expected None or a callable "
                         f"progress(done, total, part).")
    if bracket is None:
        def bracket(x):
            return accountant.epsilon_bracket(x)
    parts = [f"eps at delta={x:g}" for x in ds] + ["attack risk"]

    def told(done):
        if progress is not None:
            progress(done, len(parts), parts[done] if done < len(parts) else "")
    told(0)
    rows = []
    for i, x in enumerate(ds):
        b = bracket(x)
        lower = b.lower if (b.method != "rdp" or b.discretization > 0) else None
        rows.append((x, lower, b.upper))
        if x == d:
            head, method = (lower, b.upper), b.method
        told(i + 1)
    curve = np.asarray(CURVE_FPRS)
    tpr, adv, mu = attack_risk(accountant, np.concatenate((a, curve)))
    told(len(parts))
    return PrivacyReport(d, head[0], head[1], method, tuple(rows), mu,
                         tuple(zip((float(x) for x in a), (float(t) for t in tpr[:a.size]))), float(adv),
                         tuple(zip((float(x) for x in curve), (float(t) for t in tpr[a.size:]))),
                         dict(event_assumptions(accountant, d) if assumptions is None else assumptions),
                         tuple(notes))
