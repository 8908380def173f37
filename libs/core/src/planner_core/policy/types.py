"""Plain frozen structs the policies take and return. Components are keyed by name
(``"prefill"``, ``"decode"``, ``"agg"``; ``planner_proto.Component`` values work as keys)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.policy.calibration import SpreadCalibration
from planner_core.policy.queue_calibration import QueueCalibration
from planner_proto.decision import ComponentReplicas, Reason
from planner_proto.demand import DemandForecast
from planner_proto.state import ComponentSnapshot
from planner_proto.traffic import LoadForecast, TrafficSample

PREFILL = "prefill"
DECODE = "decode"
AGG = "agg"

Diagnostics = dict[str, float]


class LatencyEstimator(Protocol):
    """Re-estimates latency under a hypothetical load (e.g. N engines' load spread over N-1).

    Implemented on top of ``planner_core.regression`` by the decider; tests use small fakes. Return
    ``None`` when the model cannot say (not fitted, missing capabilities).
    """

    def ttft_ms(self, snapshot: ComponentSnapshot, queued_prefill_tokens: float) -> float | None:
        """Next TTFT of an engine of this component with this many prefill tokens queued."""
        ...

    def itl_ms(self, snapshot: ComponentSnapshot, decode_kv_tokens: float) -> float | None:
        """Next ITL of an engine holding this many decode KV tokens (scheduled + queued)."""
        ...


@dataclass(frozen=True)
class CapacityModel:
    """Profile interpolators for throughput mode, built once per profile."""

    prefill: PrefillInterpolator
    decode: DecodeInterpolator


@dataclass(frozen=True, kw_only=True)
class DecisionInputs:
    replicas: Mapping[str, ComponentReplicas]
    """Components under management, with the actuators' view of them."""
    forecast: LoadForecast | None = None
    traffic: TrafficSample | None = None
    """The latest completed traffic interval (correction factors, zero-traffic detection)."""
    demand: DemandForecast | None = None
    """The predictor's latest demand forecast (the predictive floor sizes for it)."""
    snapshots: Mapping[str, ComponentSnapshot] = field(default_factory=dict)
    in_progress: frozenset[str] = frozenset()
    """Components whose last change has not been acknowledged as completed yet."""
    capacity: CapacityModel | None = None
    estimator: LatencyEstimator | None = None
    queued_demand_requests: float = 0.0
    """Requests waiting at the frontend with nowhere to go (wakes a component scaled to zero)."""


@dataclass(frozen=True, kw_only=True)
class ComponentResult:
    """One policy's recommendation for one component. ``target is None``: no valid decision."""

    target: int | None
    reason: Reason
    need: float = math.nan
    """Fractional replica need, when the policy has one (throughput mode)."""
    diagnostics: Diagnostics = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PolicyResult:
    components: Mapping[str, ComponentResult]
    diagnostics: Diagnostics = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ScaleEvent:
    at_s: float
    component: str
    from_replicas: int
    to_replicas: int


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    at_s: float
    component: str
    replicas: int
    hold_s: float | None = None
    """How long this recommendation holds a scale-down back (None: ``down_window_s``)."""


@dataclass(frozen=True, kw_only=True)
class QueueSample:
    at_s: float
    component: str
    queued_tokens: float
    """Summed over the component's engines: queued prefill tokens (prefill), scheduled + queued
    decode KV tokens (decode)."""
    engines: int = 0
    """The component's engines (not draining) that held them."""


@dataclass(frozen=True, kw_only=True)
class PredictiveState:
    floor: dict[str, int] = field(default_factory=dict)
    """The latest predictive floor per component."""
    start: dict[str, int] = field(default_factory=dict)
    """The fleet (desired replicas per component) when the floor first sized it."""
    intermittent: dict[str, bool] = field(default_factory=dict)
    """Per component, whether the latest demand forecast saw on-off traffic (holds a floor longer)."""
    calibration: dict[str, SpreadCalibration] = field(default_factory=dict)
    """Per component, the scale on the forecast spread its floors cover (:mod:`.calibration`)."""
    queue: QueueCalibration = field(default_factory=QueueCalibration)
    """Prefill's queueing variability calibrated on the requests' TTFT (:mod:`.queue_calibration`)."""
    decode_rate: float = 0.0
    """Output tokens/s one decode engine gives within the ITL target, as the latest floor sized it
    (0: none yet): the load policy drains a decode backlog at it."""


@dataclass(frozen=True, kw_only=True)
class PolicyState:
    """Everything the policies remember between ticks. Start from ``PolicyState()``."""

    desired: Mapping[str, int] = field(default_factory=dict)
    """Final targets of the last decision, before transition gating."""
    last_throughput_s: float | None = None
    throughput_floor: Mapping[str, int] = field(default_factory=dict)
    prefill_correction: float = 1.0
    decode_correction: float = 1.0
    prev_forecast_requests: float | None = None
    prev_forecast_s: float | None = None
    last_load_s: float | None = None
    last_threshold_s: float | None = None
    prev_prefill_queue: float | None = None
    last_decode_up_s: float | None = None
    zero_since_s: float | None = None
    queue_samples: tuple[QueueSample, ...] = ()
    """Ours: recent prefill queues and decode KV demand (one per load tick), for burst-aware scale-up
    and consolidation."""
    last_up_s: Mapping[str, float] = field(default_factory=dict)
    """Ours: when each component's desired count last went up (one burst step per queue window)."""
    last_decode_blocked_s: float | None = None
    """Ours: when decode requests were last seen waiting for admission (freezes the decode correction)."""
    recommendations: tuple[Recommendation, ...] = ()
    events: tuple[ScaleEvent, ...] = ()
    predictive: PredictiveState = field(default_factory=PredictiveState)
    """Ours: the latest predictive floor and the fleet it first sized."""


@dataclass(frozen=True, kw_only=True)
class DecisionResult:
    targets: dict[str, int]
    """Absolute targets that can be issued now (GPU budget holds during the transition)."""
    desired: dict[str, int]
    """Where the policy wants to go; differs from ``targets`` while the budget gates a rebalance."""
    previous: dict[str, int]
    reasons: dict[str, Reason]
    diagnostics: Diagnostics
    advisory: bool
    policy: str
    evaluated: bool
    """False when no policy was due this tick (targets then only carry on a gated transition)."""

    @property
    def changed(self) -> bool:
        return self.targets != self.previous
