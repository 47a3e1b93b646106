"""dpcalib accounting core: Rényi DP of Gaussian mechanisms, subsampling amplification,
RDP -> (eps, delta) conversion, exact Gaussian (GDP) composition, and privacy-loss
distributions with a certified two-sided bracket on eps(delta) (:mod:`.pld`).

Pure numpy/scipy: importing this package never imports torch (dp-accounting and Opacus are
imported only inside :mod:`.interop`'s ``cross_check`` and ``to_dp_event``, the second opinions).  See docs/accounting.md for
the lemma behind every function.
"""

from .accountant import ACCOUNTANTS, DEFAULT_ORDERS, EpsilonReport, PrivacyAccountant
from .conversion import CONVERSIONS, best_epsilon, best_epsilon_linear, rdp_to_dp
from .events import (
    ADD_REMOVE,
    BallsInBinsGaussianEvent,
    REPLACE_ONE,
    GaussianEvent,
    PoissonSampledGaussianEvent,
    WORSampledGaussianEvent,
    full_batch_form,
)
from .gaussian import gaussian_rdp
from .kinds import EventKind, event_types, register_kind
from .mechanism_events import (DiscreteGaussianEvent, DiscreteLaplaceEvent, EpsilonDeltaEvent, LaplaceEvent,
                               MixtureOfGaussiansEvent, NonPrivateEvent, RandomizedResponseEvent, ZCDPEvent)
from .tree_events import (ComposedEvent, PoissonSampledEvent, RepeatAndSelectEvent, SelfComposedEvent,
                          TreeAggregationEvent, WORSampledEvent, event_from_json, event_to_json)
from .tune import calibrate_parameter
from .gdp import gdp_delta, gdp_epsilon, gdp_log_delta, gdp_mu
from .interop import from_dp_event
from .truncated import TruncatedPoissonGaussianEvent
from .caches import clear_cache
from .progress import watching
from .pld import EpsilonBracket, pld_epsilon
from .pld import pld_delta, pld_profile
from .poisson import poisson_gaussian_rdp
from .tradeoff import (TradeOffCurve, attack_risk, certified_advantage, certified_tpr, claimed_tradeoff,
                       gdp_tradeoff, profile_tradeoff)
from .report import PrivacyReport, privacy_report
from .shuffle import (ZERO_OUT, shuffle_epsilon_bracket, shuffle_lower_epsilon, shuffle_mu,
                      shuffle_upper_epsilon, steps_per_epoch)
from .subsampling import (
    LemmaB8Conditions,
    SubsamplingConditionWarning,
    lemma_b8_conditions,
    subsampled_gaussian_rdp_wor,
    subsampled_rdp_wor,
    subsampled_rdp_wor_simple,
)

__all__ = [
    "clear_cache", "watching",
    "gaussian_rdp", "poisson_gaussian_rdp",
    "subsampled_rdp_wor", "subsampled_rdp_wor_simple", "subsampled_gaussian_rdp_wor",
    "lemma_b8_conditions", "LemmaB8Conditions", "SubsamplingConditionWarning",
    "rdp_to_dp",
    "best_epsilon",
    "best_epsilon_linear",
    "CONVERSIONS",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_mu",
    "gdp_log_delta",
    "GaussianEvent",
    "WORSampledGaussianEvent",
    "PoissonSampledGaussianEvent",
    "BallsInBinsGaussianEvent",
    "EventKind", "event_types", "register_kind",
    "LaplaceEvent", "DiscreteLaplaceEvent", "DiscreteGaussianEvent", "RandomizedResponseEvent", "EpsilonDeltaEvent",
    "ZCDPEvent", "MixtureOfGaussiansEvent", "NonPrivateEvent", "TruncatedPoissonGaussianEvent",
    "ComposedEvent", "SelfComposedEvent", "PoissonSampledEvent", "WORSampledEvent", "RepeatAndSelectEvent",
    "TreeAggregationEvent", "event_from_json", "event_to_json", "calibrate_parameter",
    "full_batch_form",
    "REPLACE_ONE",
    "ADD_REMOVE",
    "PrivacyAccountant",
    "EpsilonReport",
    "ACCOUNTANTS",
    "DEFAULT_ORDERS",
    "EpsilonBracket",
    "pld_epsilon",
    "pld_delta",
    "pld_profile",
    "TradeOffCurve",
    "claimed_tradeoff",
    "gdp_tradeoff",
    "profile_tradeoff",
    "from_dp_event",
    "attack_risk",
    "certified_tpr",
    "certified_advantage",
    "PrivacyReport",
    "privacy_report",
    "ZERO_OUT",
    "shuffle_epsilon_bracket",
    "shuffle_lower_epsilon",
    "shuffle_upper_epsilon",
    "shuffle_mu",
    "steps_per_epoch",
]
