"""Decider settings: every ``PolicyConfig`` knob as a flat setting, plus the service's own.

Flags, ``PLANNER_*`` env and YAML keys use the PolicyConfig field names unchanged (``--ttft-target-ms``,
``PLANNER_TTFT_TARGET_MS``, ``ttft_target_ms:``), so one name means one thing everywhere. The policy
part is validated by ``planner_core.policy.validate_config``; its message names the field.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import Meta

from planner_core.policy import PolicyConfig, PolicyKind, ThresholdVariant, validate_config
from planner_runtime.settings import LeaseSettings

_D = PolicyConfig()
Pos = Annotated[float, Meta(gt=0.0)]


class DeciderSettings(LeaseSettings, frozen=True, kw_only=True):
    """Decider: runs the scaling policies on the latest inputs and publishes ScalingDecisions."""

    # --- policy (PolicyConfig, same names and defaults) ---------------------------------------
    policy: PolicyKind = _D.policy
    reference_compat: bool = _D.reference_compat
    advisory: bool = _D.advisory
    """Publish decisions with advisory=true: actuators do not apply them, the decider waits for no ack."""
    ttft_target_ms: float = _D.ttft_target_ms
    itl_target_ms: float = _D.itl_target_ms
    throughput_interval_s: float = _D.throughput_interval_s
    load_interval_s: float = _D.load_interval_s
    threshold_interval_s: float = _D.threshold_interval_s
    gpus_per_prefill: int = _D.gpus_per_prefill
    gpus_per_decode: int = _D.gpus_per_decode
    gpus_per_agg: int = _D.gpus_per_agg
    max_gpu_budget: int = _D.max_gpu_budget
    min_replicas: int = _D.min_replicas
    max_replicas: int = _D.max_replicas
    use_correction: bool = _D.use_correction
    correction_min: float = _D.correction_min
    correction_max: float = _D.correction_max
    correction_smoothing: float = _D.correction_smoothing
    correction_max_step: float = _D.correction_max_step
    queue_window_s: float = _D.queue_window_s
    queue_overload_samples: int = _D.queue_overload_samples
    prefill_max_utilisation: float = _D.prefill_max_utilisation
    decode_max_utilisation: float = _D.decode_max_utilisation
    decode_pooled_headroom: bool = _D.decode_pooled_headroom
    predictive: bool = _D.predictive
    demand_interval_s: float = _D.demand_interval_s
    target_attainment: float = _D.target_attainment
    cold_miss_share: float = _D.cold_miss_share
    arrival_variability: float = _D.arrival_variability
    use_forecast_upper: bool = _D.use_forecast_upper
    sensitivity: float = _D.sensitivity
    max_step_up: int = _D.max_step_up
    max_step_down: int = _D.max_step_down
    stale_after_s: float = _D.stale_after_s
    cold_start_s: float = _D.cold_start_s
    threshold_variant: ThresholdVariant = _D.threshold_variant
    decode_kv_up: float = _D.decode_kv_up
    decode_kv_down: float = _D.decode_kv_down
    prefill_queue_up: float = _D.prefill_queue_up
    prefill_queue_down: float = _D.prefill_queue_down
    decode_grace_intervals: int = _D.decode_grace_intervals
    prefill_trend_intervals: int = _D.prefill_trend_intervals
    scale_to_zero: bool = _D.scale_to_zero
    scale_to_zero_after_s: float = _D.scale_to_zero_after_s
    startup_s: float = _D.startup_s
    tolerance: float = _D.tolerance
    up_window_s: float = _D.up_window_s
    down_window_s: float = _D.down_window_s
    rate_period_s: float = _D.rate_period_s
    up_limit_replicas: int = _D.up_limit_replicas
    up_limit_percent: float = _D.up_limit_percent
    down_limit_replicas: int = _D.down_limit_replicas
    down_limit_percent: float = _D.down_limit_percent

    # --- the service ----------------------------------------------------------------------------
    profile_dir: str = ""
    """Folder of the profile (reference NPZ/JSON) for throughput mode, the only place a profile is
    loaded from; empty: none (the throughput part then has no capacity model and says so)."""
    components: list[str] = msgspec.field(default_factory=list)
    """Components to manage; empty = every component the actuators report in ReplicaStatus."""
    ack_timeout_s: Pos = 1800.0
    """How long to wait for a `completed` ack before issuing another change for the component."""
    ack_poll_s: Pos = 10.0
    """Upper bound of the tick period, so ack timeouts and gated re-issues are noticed in time."""
    snapshot_max_age_s: Pos = 30.0
    """A ComponentSnapshot received longer ago than this is ignored."""
    replicas_max_age_s: Pos = 60.0
    """Without a ReplicaStatus received within this time, no decision is made."""
    report_path: str = ""
    """HTML report of the run, rewritten every report_interval_s and at shutdown; empty = none."""
    report_interval_s: Pos = 60.0
    history_points: Annotated[int, Meta(ge=10, le=1_000_000)] = 20_000
    """Ticks kept for the report (older ones are dropped)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        validate_config(self.policy_config())
        if self.profile_dir and not Path(self.profile_dir).is_dir():
            raise ValueError(f"profile_dir {self.profile_dir!r} is not a folder")
        bad = [c for c in self.components if c not in ("prefill", "decode", "agg")]
        if bad:
            raise ValueError(f"components: unknown component(s) {bad}; allowed: prefill, decode, agg")

    def policy_config(self) -> PolicyConfig:
        return PolicyConfig(**{f.name: getattr(self, f.name) for f in fields(PolicyConfig)})

    def tick_s(self) -> float:
        """The decider's loop period: the shortest policy interval in use, at most ack_poll_s."""
        kind = self.policy
        intervals = [self.ack_poll_s]
        if kind in (PolicyKind.LOAD, PolicyKind.COMBINED):
            intervals.append(self.load_interval_s)
        if kind in (PolicyKind.THROUGHPUT, PolicyKind.COMBINED):
            intervals.append(self.throughput_interval_s)
        if kind is PolicyKind.THRESHOLD:
            intervals.append(self.threshold_interval_s)
        return min(intervals)
