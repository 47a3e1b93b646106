"""Privacy-loss distributions (PLD): a certified two-sided bracket on ``eps(delta)`` and the privacy
profile ``delta(eps)`` of a composition of Gaussian events.  The public queries are those of
:mod:`.queries`, re-exported here.

The modules form one chain, and each imports only modules before it (tests/test_pld_chain.py reads
the imports from the source)::

    shared -> pairs -> mixture -> lossdist -> decay -> convex -> discretise -> compose -> binomial
           -> allocation_terms -> allocation -> bracket -> blocks -> profile -> grid -> refine -> exact
           -> queries

* :mod:`.shared`: what every link shares: the constants, the grid ladder, the discretised ``Step``, the
  ``EpsilonBracket``;
* :mod:`.pairs`: each event's dominating pair (as its kind states it);
* :mod:`.mixture`: the mixture of Gaussians' pair (its loss inverted by Newton's step and the chord);
* :mod:`.lossdist`: the exact pairs of the non-Gaussian kinds (Laplace, finite loss distributions, and
  either under Poisson sampling), and the grid step that puts their atoms on grid points;
* :mod:`.decay`, :mod:`.convex`, :mod:`.discretise`: the pairs on a grid, upper (connect-the-dots) and
  lower steps (the lowered profile kept convex by its greatest convex minorant);
* :mod:`.compose`, :mod:`.binomial`: the FFT composition, tilted, with its charged masses, and the
  split (binomial) composition of a step's atoms;
* :mod:`.allocation_terms`, :mod:`.allocation`: the balls-in-bins epoch's steps;
* :mod:`.bracket`, :mod:`.blocks`: the ends a composition certifies, and many steps composed in blocks;
* :mod:`.profile`: ``delta(eps)`` read off the composed masses;
* :mod:`.grid`: the bracket on one grid (the loss cut, the first grid, the window size);
* :mod:`.refine`: the grids refined until the bracket is narrow enough;
* :mod:`.exact`: no grid where every event is a finite pair on one lattice (randomized response,
  discrete Laplace): the composition's atoms exactly, and the bracket's ends from their sum;
* :mod:`.queries`: the entrance, where every input (events, delta, epsilon, rtol, atol, memory_cap,
  discretization) is checked once; every module before it trusts its arguments.

The method.  Every event the papers use is a Gaussian release, possibly on a subsample.  In units of its
noise multiplier ``z`` (noise std / L2 sensitivity) each step has a *dominating pair* ``(P, Q)``
of one-dimensional Gaussian mixtures (all with std ``z``); its privacy loss ``L = log(dP/dQ)``
under ``P`` and the hockey-stick profile ``delta(eps) = E_P[(1 - e^(eps - L))_+]`` describe the
step completely (Dong, Roth & Su 2019; Zhu, Dong & Wang 2022).  Composition adds independent
losses (the profile of a composition is ``E[delta_A(eps - L_B)]``, monotone in each factor).

Dominating pairs (``N(m) = N(m, z^2)``):

* ``GaussianEvent`` (full batch): ``(N(1), N(0))`` -- Balle & Wang 2018.  Symmetric.
* ``PoissonSampledGaussianEvent`` (add/remove, probability ``q``): the *remove* pair
  ``((1-q) N(0) + q N(1), N(0))`` and the *add* pair ``(N(0), (1-q) N(0) + q N(1))``
  (Zhu, Dong & Wang 2022, Sec. 5, Poisson subsampling).  A neighbouring pair of datasets fixes
  the direction for the whole run, so each direction is composed on its own and the worse one
  is reported -- composing only one direction under-reports (Lebeda, Regehr, Kamath & Steinke
  2024, Sec. 4).
* ``WORSampledGaussianEvent`` (fixed size ``b`` of ``n`` without replacement, replace-one,
  ``gamma = b/n``): ``(gamma P + (1-gamma) Q, Q)`` with ``(P, Q) = (N(1), N(0))`` dominates the
  subsampled Gaussian under substitution (Zhu, Dong & Wang 2022, Sec. 5, sampling without
  replacement; the (eps, delta) form is Balle, Barthe & Gaboardi 2018, Thm 10).  The
  convention: dpcalib's noise multiplier of this event is noise std / *replace-one* sensitivity
  (``2C`` for a sum of clipped terms), which is the shift ``1`` of the pair.  The pair is
  attained: with every other record's contribution at ``-C`` and the replaced one going from
  ``+C`` to ``-C`` the release is exactly ``((1-gamma) N(-bC) + gamma N(-bC + 2C), N(-bC))``
  (tests/test_pld.py integrates that mechanism batch by batch).  Under replace-one the
  *direction* can change from step to step (it depends on the other records' clipped values,
  which the model chooses adaptively), so each step is charged ``max`` of the two directions'
  profiles -- a convex profile, hence a valid one -- before composing.

Discretisation (grid ``h``; losses at ``i*h``):

* **upper** -- each step's loss is rounded to the two neighbouring grid points at random with
  the probability that keeps ``E_P[e^-L]`` (the ``Q``-mass): this is exactly connect-the-dots
  (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022); its profile is the chord of the true
  convex profile between grid points, hence pointwise larger: a dominating pair.  Mass above
  the grid is charged as infinite loss, mass below is rounded up to the lowest grid point.
* **lower** -- the rounding error ``e = L' - L`` of a step has, given ``L``, range exactly
  ``h`` and mean in ``[0, g(h)]`` with ``g(h) = h/(1-e^-h) - 1 - log(h/(1-e^-h)) ~ h^2/8``.
  Hoeffding's inequality over the ``K`` steps: ``sum e <= t + K g(h)`` except with probability
  ``p = exp(-2 t^2 / (K h^2))``, so ``delta(eps) >= delta'(eps + t + K g) - p - (tail mass)``
  (the argument of the PRV accountant, Gopi, Lee & Wutschitz 2021, Thm 5.1, with one-sided
  rounding errors).  Both bounds use the same discrete distribution, so the bracket's width is
  about ``2 t``, i.e. ``O(h sqrt(K))``, not ``O(h K)``.
* **composition** -- one FFT: each step's pmf is folded onto a cyclic grid of ``N`` points,
  the transforms are raised to the counts and multiplied.  ``N`` covers a window
  ``[w_lo, w_hi]`` outside which the composed (discrete) loss has mass at most ``alpha`` on
  each side by a Chernoff bound computed from the discrete steps' moment generating
  functions; the wrapped-around mass (at most ``2 alpha``) is charged to the upper bound and
  subtracted from the lower one.  When delta is small the composition is repeated with the
  pmfs tilted by ``e^(lam L)`` toward the delta-quantile, so that the FFT's round-off stays
  relative to delta (down to delta = 1e-300); the round-off is bounded per bin by a
  floating-point error model (see :func:`~.compose.compose_steps`) and added to / taken from the masses.

The grid is refined until ``upper - lower <= max(rtol * upper, atol)`` or the memory cap is reached (then
the best certified answer is returned with a note): :mod:`.refine`; the bracket on one grid is
:mod:`.grid`'s.  ``delta(eps)`` -- the profile the same compositions give -- is read in :mod:`.profile`.
"""

from .shared import EpsilonBracket, MAX_DISCRETIZATION, MEMORY_CAP, MIN_DELTA, RTOL
from .queries import (clear_cache, first_grid, pld_delta, pld_epsilon, pld_epsilon_at, pld_profile, pld_upper_profiles,
                      report_grid, window_points)

__all__ = ["EpsilonBracket", "first_grid", "window_points", "pld_epsilon", "pld_epsilon_at", "report_grid", "clear_cache",
           "pld_delta", "pld_profile", "pld_upper_profiles", "MAX_DISCRETIZATION", "MEMORY_CAP", "MIN_DELTA", "RTOL"]
