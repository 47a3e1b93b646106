"""The checks: everything that watches a run without being part of it.

Job: the record-level sensitivity probe (:mod:`.probe`), the white-box audits and their drivers
(:mod:`.drivers`: many-run likelihood-ratio audits, Poisson and without-replacement audits,
one-run audits) and the audit's figure (:mod:`.figures`), the lockstep leader/twin runs
(:mod:`.lockstep`) with the twin's replayed noise (:mod:`.replay`), the canaries and sampler
couplings (:mod:`.canaries`), batched audit runs (:mod:`.batched`), the statistics that turn scores
into eps lower bounds (:mod:`.bounds`), the noise tests (:mod:`.noise_tests`), the standard audit
setups (:mod:`.harnesses`), the checks of anyone's private step (:mod:`.steps`) behind one small
contract (:mod:`.contract`) and the statistics for anyone's scores (:mod:`.scores`).

May import: :mod:`dpcalib.accountant`, :mod:`dpcalib.mechanisms` and every other sub-package of
:mod:`dpcalib.optim` (``algorithms``, ``run``, ``clipping``, ``data``, ``tensors``); nothing
imports it but :mod:`dpcalib.optim` itself and the command line.  A check enters a run only through
its sampler, its per-example object and its noise source (tests/test_architecture.py).
"""

from .bounds import (CONFIDENCE, AuditReport, CurveCheck, curve_check, epsilon_lower_bounds, gdp_thresholds,
                     heldout_curve_check, heldout_lower_bound, one_run_epsilon, one_run_p_value)
from .canaries import GradientCanary, ManyCanaries, WORCoupling, plant
from .drivers import (CANARY_NORM, DEFAULT_BATCH, OneRunReport, audit, audit_poisson, audit_wor, llr_samples,
                      one_run_audit, spent_tradeoff)
from .figures import audit_figure, plot_audit
from .harnesses import harness, one_run_harness, wor_claim, wor_harness
from .lockstep import alternating, constant, pair_llr, release_llr, run_pair, wor_llr, zero
from .noise_tests import NoiseKSTest, NoisePooledTest, NoiseStdTest, noise_ks_test, noise_pooled_test, noise_std_test
from .probe import (SLACK_ULPS, Move, Pair, ProbeReport, RecordProbeReport, measure, pairs, probe_harness,
                    record_probe, sensitivity_probe)
from .replay import ReplaySource
from .scores import ScoresAudit, epsilon_from_guesses, epsilon_from_scores
from .contract import EngineStep, FunctionStep, OpacusStep, PrivateStep, StepClaim
from .steps import StepReport, audit_step, check_step, noise_test_step, probe_step, sampler_test
from ...accountant import TradeOffCurve

__all__ = ["audit", "audit_wor", "one_run_audit", "plot_audit", "harness",
           "one_run_harness", "wor_claim", "wor_harness", "noise_ks_test", "noise_std_test", "noise_pooled_test",
           "PrivateStep", "StepClaim", "FunctionStep", "check_step", "probe_step", "audit_step", "sampler_test"]
