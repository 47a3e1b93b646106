"""Privacy-loss distributions (PLD): a certified two-sided bracket on ``eps(delta)`` and the privacy
profile ``delta(eps)`` of a composition of Gaussian events, from each event's dominating pair
discretised on a grid, composed by FFT, and refined until the bracket is narrow enough.

The public queries are re-exported here; the method, with its references, is written in
:mod:`.refine` and docs/accounting.md.
"""

from .refine import (EpsilonBracket, MAX_DISCRETIZATION, MEMORY_CAP, MIN_DELTA, RTOL, clear_cache, first_grid,
                     pld_epsilon, pld_epsilon_at, report_grid, window_points)
from .profile import pld_delta, pld_profile, pld_upper_profiles

__all__ = ["EpsilonBracket", "first_grid", "window_points", "pld_epsilon", "pld_epsilon_at", "report_grid", "clear_cache",
           "pld_delta", "pld_profile", "pld_upper_profiles", "MAX_DISCRETIZATION", "MEMORY_CAP", "MIN_DELTA", "RTOL"]
