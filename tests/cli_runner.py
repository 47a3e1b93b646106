"""Running ``dpcalib.cli.main`` in process under a time limit (the CLI fuzz tests)."""

import contextlib
import signal

from dpcalib.cli import main


class Hang(Exception):
    """The command ran past its time limit."""


def _alarm(signum, frame):
    raise Hang()


@contextlib.contextmanager
def alarms():
    """SIGALRM raises :class:`Hang` inside the block (restored after it)."""
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        yield
    finally:
        signal.signal(signal.SIGALRM, old)


def call(argv, seconds: int) -> int:
    """``main(argv)``'s exit code (argparse's ``--help`` exits through SystemExit); raises
    :class:`Hang` past ``seconds`` (inside :func:`alarms`)."""
    signal.alarm(seconds)
    try:
        return main(list(argv))
    except SystemExit as exc:
        return exc.code
    finally:
        signal.alarm(0)
