"""What the command line's parts share: the error types, the parser that refuses in one line, the
--plot and --accountant options, and how an eps is chosen, checked and printed."""

from __future__ import annotations

import argparse
import math
import time

from .algorithms import fmt as _fmt

#: the refusal of --conversion without --accountant rdp (epsilon, account)
CONVERSION_REFUSAL = ("--conversion={} is not allowed without --accountant rdp: only the RDP accountant converts RDP "
                      "to (eps, delta); the default (best) certifies with exact GDP, the PLD or RDP at the improved "
                      "conversion")

__all__ = ["install_hint", "CONVERSION_REFUSAL", "UsageError", "Parser", "writable_plot", "print_epsilon",
           "need_matplotlib", "accountant_argument", "conversion_argument", "epsilon_of", "finite_epsilon",
           "ProgressBar"]


def install_hint(extra: str) -> str:
    """How to install one of dpcalib's extras, as the refusals that need it say it: dpcalib is
    installed from a clone of its repository (it is not on a package index).

    Args:
        extra: the extra's name (``torch``, ``plot``).

    Returns:
        The instruction, e.g. ``install the dpcalib[plot] extra: pip install '.[plot]' from the
        repository's root``.
    """
    return f"install the dpcalib[{extra}] extra: pip install '.[{extra}]' from the repository's root"


class UsageError(Exception):
    """A command line that is not allowed: reported in one line with exit status 2."""
    pass


class Parser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` that refuses in one line (:class:`UsageError`), with no
    abbreviated options.

    Args:
        *args: passed to ``argparse.ArgumentParser``.
        **kwargs: passed to ``argparse.ArgumentParser`` (``allow_abbrev`` defaults to False).
    """
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)     # --sampling is not --sampling-rate
        super().__init__(*args, **kwargs)

    def error(self, message):  # one line, exit 2, no traceback
        """Refuse the command line in one line (exit 2, no traceback).

        Args:
            message: argparse's message.

        Raises:
            UsageError: always, with ``message``.
        """
        raise UsageError(message)


#: what matplotlib's savefig writes (by file suffix)
PLOT_FORMATS = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp", "pgf")


#: seconds long work runs before the command line shows its bar (on a terminal only)
PROGRESS_DELAY = 1.0


class ProgressBar:
    """Long work's parts as a bar on stderr: on a terminal only, and only once the work has run for
    :data:`PROGRESS_DELAY` seconds, as a calibration's bar (a report or a
    curve of 10^8 steps takes minutes; most take a second).  A ``progress(done, total, part)``
    callable (:func:`~dpcalib.accountant.report.privacy_report`'s hook); :meth:`note` is a watcher of
    the accountant's own work (:func:`~dpcalib.accountant.watching`: each grid composed), so that a
    single bracket of seconds shows where it is (told after the bar closed: nothing drawn); a
    context manager that closes the bar.

    Args:
        desc: the bar's label.
        total: the number of parts, or None (unknown until told).
    """

    def __init__(self, desc: str, total: int | None = None):
        from tqdm.auto import tqdm

        self.delay = PROGRESS_DELAY
        # (a redraw at every part: a report has a few, each of seconds or more)
        self.bar = tqdm(desc=desc, total=total, unit=" parts", leave=False, disable=None, delay=self.delay,
                        mininterval=0.0, miniters=1)
        self.t0 = time.monotonic()

    def __call__(self, done: int, total: int, part: str) -> None:
        self.bar.total = total
        self.bar.set_postfix_str(part, refresh=False)
        self.bar.update(done - self.bar.n)
        if done >= total:               # the work is whole: no bar left beside what it prints
            self.bar.close()

    def note(self, part: str) -> None:
        """What the current part is doing now (the bar shows it once the delay has passed).

        Args:
            part: what the current part is doing, in words.
        """
        self.bar.set_postfix_str(part, refresh=False)
        if time.monotonic() - self.t0 >= self.delay:
            self.bar.refresh()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()
        return False


def writable_plot(text: str) -> str:
    """``--plot FILE``: checked before any work -- a format matplotlib writes and a folder that exists.

    Args:
        text: the ``--plot`` file name.

    Returns:
        The file name, checked.

    Raises:
        argparse.ArgumentTypeError: if the suffix is not one of :data:`PLOT_FORMATS` or the file
            cannot be written.
    """
    import os

    suffix = os.path.splitext(text)[1].lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        raise argparse.ArgumentTypeError(f"--plot={text!r} is not allowed: expected a file name ending in one of "
                                         f".{', .'.join(PLOT_FORMATS)}")
    from ..accountant.validation import InputError, writable_file

    try:
        return writable_file(text, "--plot")
    except InputError as exc:           # argparse reports an ArgumentTypeError's own words
        raise argparse.ArgumentTypeError(str(exc)) from None


#: the methods whose eps is exact, and what the bracket line says of them
EXACT = {"gdp": "exact Gaussian DP at both ends", "tv": "exact: the total variation is at most delta"}


def print_epsilon(rep, ends: str | None = None) -> None:
    """The lines shared by ``epsilon`` and ``account``: eps, delta, method, order, conversion.

    Args:
        rep: the ``EpsilonReport`` to print.
        ends: the words for the bracket's two ends, or None (the method's default).
    """
    print(f"epsilon     {_fmt(rep.epsilon)}")
    bracket = [n for n in rep.notes if str(n).startswith("bracket [")]
    exact = EXACT.get(rep.method)
    if bracket:
        print(f"            {bracket[0]} ({ends or exact or 'lower: PLD lower bound; upper: certified'})")
    print(f"delta       {_fmt(rep.delta)}")
    print(f"method      {rep.method}" + (" (exact)" if exact else ""))
    if rep.order is not None:
        print(f"order       {_fmt(rep.order)}")
        print(f"conversion  {rep.conversion}")


def need_matplotlib() -> None:
    """Refuse ``--plot`` before any work when matplotlib is not installed.

    Raises:
        UsageError: if matplotlib cannot be imported.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(f"--plot needs matplotlib: {install_hint('plot')}") from None


#: --accountant: one meaning in every command (calibrate solves on it; epsilon, account, compare and
#: report answer with it)
ACCOUNTANT_HELP = ("best (default: the smallest certified eps of exact GDP, the privacy-loss-distribution upper "
                   "bound and RDP), pld (the PLD bracket's upper end alone), rdp (RDP alone, at the optimal order) "
                   "or gdp (exact GDP; full-batch runs only)")


def accountant_argument(p, solves: bool = False) -> None:
    """The one ``--accountant`` option (``solves``: calibrate's wording -- the noise is the smallest whose
    eps under that accountant meets the target).

    Args:
        p: the (sub)parser to add the option to.
        solves: use calibrate's wording and default (``best``).
    """
    from ..accountant import ACCOUNTANTS

    what = "the accountant the calibration meets the target with: " if solves else "which bound answers: "
    p.add_argument("--accountant", choices=list(ACCOUNTANTS), default="best" if solves else None,
                   help=what + ACCOUNTANT_HELP + (".  The certified line is the best certified eps either way"
                                                  if solves else ""))


def conversion_argument(p) -> None:
    """Add the ``--conversion`` option (RDP's conversion, with ``--accountant rdp`` only).

    Args:
        p: the (sub)parser to add the option to.
    """
    p.add_argument("--conversion", choices=["improved", "mironov"], default=None,
                   help="the RDP -> (eps, delta) conversion of --accountant rdp: improved (default) or mironov "
                        "(DIFF2 Lemma B.4); only with --accountant rdp")


def epsilon_of(acc, args) -> tuple:
    """(report, lower) of an accountant under the chosen --accountant (lower: None without PLD).

    Args:
        acc: the :class:`~dpcalib.accountant.PrivacyAccountant` of the events.
        args: the parsed command line (``accountant``, ``delta``, ``conversion``).

    Returns:
        ``(report, lower)``: an ``EpsilonReport`` and a lower bound on eps (None where none).

    Raises:
        UsageError: if ``--accountant gdp`` is asked for events that are not full-batch
            Gaussian releases.
    """
    from ..accountant import EpsilonReport

    which = args.accountant or "best"
    if which in ("best", "pld"):
        b = acc.epsilon_bracket(args.delta, methods=("gdp", "pld", "rdp") if which == "best" else ("pld",))
        lower = b.lower if b.method != "rdp" or b.discretization > 0 else None
        return EpsilonReport.from_bracket(b), lower
    if which == "gdp" and not acc.is_full_batch_gaussian:
        raise UsageError("--accountant gdp is not allowed for these events: exact Gaussian DP holds only for "
                          "full-batch Gaussian releases (--gaussian); use best, pld or rdp")
    rep = acc.epsilon_report(args.delta, accountant=which, conversion=args.conversion or "improved")
    return rep, (rep.epsilon if rep.method == "gdp" else None)


def finite_epsilon(value, args, noise_flags) -> None:
    """An eps that is not a finite number (noise so small that the privacy loss leaves the floats)
    is refused, naming the noise the user gave: there is no privacy left to report.

    Args:
        value: the eps, or None.
        args: the parsed command line (unused).
        noise_flags: ``(flag, value)`` pairs of the noise the user gave, named in the refusal.

    Raises:
        UsageError: if ``value`` is not a finite number.
    """
    if value is None or math.isfinite(value):
        return
    given = ", ".join(f"{f}={v!r}" for f, v in noise_flags) or "the noise"
    raise UsageError(f"{given} is not allowed: at this noise the privacy loss exceeds every floating-point "
                      f"number (eps = {value}, no privacy); expected more noise")
