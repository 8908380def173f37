"""Scaling policies: pure functions of (inputs, state, config, now_s). See :func:`decide`."""

from planner_core.policy.budget import Gated, apply_budget, apply_budget_pd, held_gpus, issuable_targets
from planner_core.policy.config import PolicyConfig, PolicyKind, ThresholdVariant, validate_config
from planner_core.policy.decide import decide
from planner_core.policy.load import load_policy
from planner_core.policy.stabilize import rate_limit, stabilize
from planner_core.policy.threshold import ThresholdMemory, threshold_policy
from planner_core.policy.throughput import Corrections, throughput_policy, update_corrections, with_tolerance
from planner_core.policy.types import (
    AGG,
    DECODE,
    PREFILL,
    CapacityModel,
    ComponentResult,
    DecisionInputs,
    DecisionResult,
    LatencyEstimator,
    PolicyResult,
    PolicyState,
    Recommendation,
    ScaleEvent,
)

__all__ = [
    "AGG",
    "DECODE",
    "PREFILL",
    "CapacityModel",
    "ComponentResult",
    "Corrections",
    "DecisionInputs",
    "DecisionResult",
    "Gated",
    "LatencyEstimator",
    "PolicyConfig",
    "PolicyKind",
    "PolicyResult",
    "PolicyState",
    "Recommendation",
    "ScaleEvent",
    "ThresholdMemory",
    "ThresholdVariant",
    "apply_budget",
    "apply_budget_pd",
    "decide",
    "held_gpus",
    "issuable_targets",
    "load_policy",
    "rate_limit",
    "stabilize",
    "threshold_policy",
    "throughput_policy",
    "update_corrections",
    "validate_config",
    "with_tolerance",
]
