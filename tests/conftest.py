"""Test-suite configuration.

Every hypothesis test is derandomised: its examples are a fixed function of the test, so CI
replays exactly the examples that were checked and a failure is reproducible, never luck.  The
suite's own ``settings(...)`` also say ``derandomize=True``; this profile covers any test that
does not.
"""

from hypothesis import settings

settings.register_profile("dpcalib", derandomize=True, database=None, deadline=None)
settings.load_profile("dpcalib")
