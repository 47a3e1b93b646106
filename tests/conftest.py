"""Test-suite configuration.

Every hypothesis test is derandomised: its examples are a fixed function of the test, so CI
replays exactly the examples that were checked and a failure is reproducible, never luck.  The
suite's own ``settings(...)`` also say ``derandomize=True``; this profile covers any test that
does not.
"""

import os

from hypothesis import settings

settings.register_profile("dpcalib", derandomize=True, database=None, deadline=None)
settings.load_profile("dpcalib")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers on a two-core machine: one thread each (torch reads this when it is first imported)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(config, items):
    """The tests marked ``slow`` (each a minute or more of one core) run first, in their order, then the
    rest: with ``-n 2`` the two workers share out the long ones while thousands of short ones are still
    to come, instead of one worker finishing a long test dealt last while the other waits.  Every
    worker sorts the same collection the same way (the order is a function of the collection alone)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
