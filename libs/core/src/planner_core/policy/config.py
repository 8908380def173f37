"""All policy settings in one frozen struct. Defaults follow the reference planner (NVIDIA Dynamo's
planner, whose policies the bench re-implements as baselines; see docs/concepts/design.md).

``validate_config`` names the field and the allowed range of the first bad value; the decider calls it
once at start, the simulator once per bench run.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields


class PolicyKind(enum.StrEnum):
    THRESHOLD = "threshold"
    THROUGHPUT = "throughput"
    LOAD = "load"
    COMBINED = "combined"
    """A floor (the predictive one, or the throughput mode's), the load policy adding scale-ups above it."""


THRESHOLD_VARIANT_ALIASES: dict[str, str] = {"seed003": "original_kv_queue"}
"""Former names of threshold variants, still accepted on input (config files, env, flags)."""


class ThresholdVariant(enum.StrEnum):
    ORIGINAL_KV_QUEUE = "original_kv_queue"
    """The reference planner's original threshold rules: mean KV utilisation (``decode_kv_up`` /
    ``decode_kv_down``, 0.9 / 0.5) and mean prefill queue (``prefill_queue_up`` / ``prefill_queue_down``,
    0.5 / 0.2), no decode scale-down for ``decode_grace_intervals`` after adding a decode worker, no
    prefill scale-up when the queue's trend brings it under the threshold within
    ``prefill_trend_intervals``. The name ``seed003`` is read as this one."""
    SIMPLE_THROUGHPUT = "simple_throughput"
    """The reference planner's simple thresholds, throughput-oriented targets."""
    SIMPLE_LATENCY = "simple_latency"
    """The reference planner's simple thresholds, latency-oriented targets."""

    @classmethod
    def _missing_(cls, value: object) -> ThresholdVariant | None:
        new = THRESHOLD_VARIANT_ALIASES.get(str(value))
        return None if new is None else cls(new)


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    policy: PolicyKind = PolicyKind.COMBINED
    reference_compat: bool = False
    """Reproduce the reference planner (bench baseline): skip NaN/zero-traffic ticks, +-1 steps in load
    mode, skip while scaling, no stabilisation, no tolerance, no startup/pending awareness, budget
    applied to the final targets only (no transition check)."""
    advisory: bool = False

    # SLA
    ttft_target_ms: float = 500.0
    itl_target_ms: float = 50.0

    # cadence (measured between timestamps, never in ticks)
    throughput_interval_s: float = 180.0
    load_interval_s: float = 5.0
    threshold_interval_s: float = 30.0

    # fleet
    gpus_per_prefill: int = 1
    gpus_per_decode: int = 1
    gpus_per_agg: int = 1
    max_gpu_budget: int = 8
    """-1 = no budget."""
    min_replicas: int = 1
    max_replicas: int = 64
    """Per component; -1 = no limit beyond the budget."""

    # throughput / SLA mode
    use_correction: bool = True
    correction_min: float = 0.1
    """Bounds for observed correction factors (not in the reference planner; ignored in reference_compat)."""
    correction_max: float = 10.0
    correction_smoothing: float = 0.5
    """Weight of a new observation in the correction factors' moving average (1 = no smoothing)."""
    correction_max_step: float = 1.5
    """A correction factor moves by at most this ratio per throughput interval."""
    prefill_max_utilisation: float = 0.6
    """Size prefill so the forecast load uses at most this share of the profiled throughput.
    TTFT is set by queueing behind bursts: on the Azure traces a fleet that meets the TTFT target runs
    its prefill engines at 30-60 % on average (ignored in reference_compat)."""
    decode_max_utilisation: float = 0.75
    """Likewise for decode. A decode engine past its capacity makes every request wait for
    admission, so the floor keeps a margin over the profile's best throughput at the ITL target. With
    one or two decode engines (the Azure conv trace) 0.85 leaves ITL misses; a lower cap costs
    GPU-hours on large fleets (the sinusoid)."""
    decode_pooled_headroom: bool = True
    """Predictive floor: ``decode_max_utilisation`` is the cap of one decode engine; a fleet of
    k keeps (1 - cap) x sqrt(k) engines spare in all instead of (1 - cap) x k (square-root staffing:
    the router spreads the running batch, the fluctuation to absorb grows with its square root)."""
    predictive: bool = True
    """Combined policy: the floor is the predictive one (demand of the startup horizon at the target
    attainment, re-sized on every traffic sample); False: the throughput mode's floor, as in the
    reference planner."""
    demand_interval_s: float = 30.0
    """Traffic sample interval the simulator's frontend uses for the predictive floor (the
    decider takes the samples as the frontend publishes them)."""
    target_attainment: float = 0.99
    """Combined policy: the share of requests that should meet both targets. The predictive floor
    picks, per component, the fewest replicas whose predicted attainment over the startup horizon
    reaches this (the policy's aggressiveness knob: lower is cheaper and riskier)."""
    cold_miss_share: float = 0.5
    """Combined policy: while a demand series' forecast errors are not measured yet (a stand-in
    spread sizes its floor), the floor allows this share of the misses ``target_attainment`` allows
    (0.5 at 0.97: sized for 0.985). A fleet's first minutes decide a run's attainment (their misses
    cannot be made up later) and their spread is a guess; the measured spread then sizes at the
    target itself. 1 turns it off."""
    arrival_variability: float = 2.0
    """c_a^2 + c_s^2 of prefill arrivals and service in the queueing tail (2 = Poisson arrivals,
    exponential service); burstier traffic needs more, and the predictive floor more engines."""
    use_forecast_upper: bool = False
    """Size for ``LoadForecast.num_requests_upper`` when the predictor gives one."""

    # load mode
    sensitivity: float = 0.8
    """Scale-down headroom: the consolidated fleet must stay under sensitivity * target."""
    max_step_up: int = 4
    """Largest single move in load mode when far from target (reference: 1)."""
    max_step_down: int = 2
    stale_after_s: float = 30.0
    """A worker whose latest load is older than this makes the snapshot invalid."""
    cold_start_s: float = 60.0
    """Workers younger than this are ignored by the SLA checks and block scale-down."""
    queue_window_s: float = 180.0
    """Load mode: prefill queues of this window are replayed on the fleet: a consolidation must fit every
    one of them, and too many that would still be over target ask for more engines."""
    queue_overload_samples: int = 2
    """Load mode: scale prefill up when this many queues of the window would be over the TTFT target."""

    # threshold mode (the reference planner's original rules and defaults, or its simple thresholds)
    threshold_variant: ThresholdVariant = ThresholdVariant.ORIGINAL_KV_QUEUE
    """Threshold policy rules: ``original_kv_queue`` (the reference planner's original rules: mean KV
    utilisation and prefill queue against the four thresholds below, decode grace, prefill queue
    trend), ``simple_throughput`` or ``simple_latency`` (the reference planner's simple thresholds:
    up when any worker crosses, down when all are below, fixed levels). ``seed003`` is read as
    ``original_kv_queue``."""
    decode_kv_up: float = 0.9
    decode_kv_down: float = 0.5
    prefill_queue_up: float = 0.5
    prefill_queue_down: float = 0.2
    decode_grace_intervals: int = 3
    prefill_trend_intervals: int = 3

    # beyond the reference
    scale_to_zero: bool = False
    scale_to_zero_after_s: float = 600.0
    """Zero traffic and no queued work for this long -> 0 replicas (when scale_to_zero)."""
    startup_s: float = 120.0
    """Time for a new worker to become ready; the forecast horizon for scale-up."""

    # stabilisation and rate limits (Kubernetes-HPA style)
    tolerance: float = 0.1
    """Dead-band on the fractional replica need: |need/current - 1| <= tolerance keeps current."""
    up_window_s: float = 0.0
    """Scale up to the smallest recommendation of this window (0 = immediately)."""
    down_window_s: float = 300.0
    """Scale down to the largest recommendation of this window."""
    rate_period_s: float = 60.0
    up_limit_replicas: int = 4
    up_limit_percent: float = 100.0
    down_limit_replicas: int = 2
    down_limit_percent: float = 50.0

    @property
    def sizes_for_demand(self) -> bool:
        """Whether the predictive floor sizes the fleet for the predictor's demand forecast."""
        return self.policy is PolicyKind.COMBINED and self.predictive and not self.reference_compat

    def gpus_per(self, component: str) -> int:
        if component == "prefill":
            return self.gpus_per_prefill
        if component == "decode":
            return self.gpus_per_decode
        return self.gpus_per_agg


_POSITIVE = (
    "ttft_target_ms",
    "itl_target_ms",
    "throughput_interval_s",
    "load_interval_s",
    "threshold_interval_s",
    "demand_interval_s",
    "arrival_variability",
)
_NON_NEGATIVE = (
    "stale_after_s",
    "cold_start_s",
    "queue_window_s",
    "scale_to_zero_after_s",
    "startup_s",
    "tolerance",
    "up_window_s",
    "down_window_s",
    "rate_period_s",
    "up_limit_percent",
    "down_limit_percent",
)
_MIN_ONE_INT = (
    "gpus_per_prefill",
    "gpus_per_decode",
    "gpus_per_agg",
    "max_step_up",
    "max_step_down",
    "queue_overload_samples",
)
_NON_NEGATIVE_INT = (
    "min_replicas",
    "decode_grace_intervals",
    "prefill_trend_intervals",
    "up_limit_replicas",
    "down_limit_replicas",
)


def validate_config(cfg: PolicyConfig) -> PolicyConfig:
    """Return ``cfg`` unchanged, or raise ValueError naming the field and its allowed range."""
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{f.name}: must be finite, got {v}")
    for name in _POSITIVE:
        if getattr(cfg, name) <= 0:
            raise ValueError(f"{name}: must be > 0, got {getattr(cfg, name)}")
    for name in _NON_NEGATIVE + _NON_NEGATIVE_INT:
        if getattr(cfg, name) < 0:
            raise ValueError(f"{name}: must be >= 0, got {getattr(cfg, name)}")
    for name in _MIN_ONE_INT:
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name}: must be >= 1, got {getattr(cfg, name)}")
    if cfg.max_gpu_budget < -1:
        raise ValueError(f"max_gpu_budget: must be -1 (none) or >= 0, got {cfg.max_gpu_budget}")
    if cfg.max_replicas != -1 and cfg.max_replicas < max(cfg.min_replicas, 1):
        raise ValueError(f"max_replicas: must be -1 or >= max(min_replicas, 1), got {cfg.max_replicas}")
    if not 0.0 < cfg.sensitivity <= 1.0:
        raise ValueError(f"sensitivity: must be in (0, 1], got {cfg.sensitivity}")
    if not 0.0 < cfg.prefill_max_utilisation <= 1.0:
        raise ValueError(f"prefill_max_utilisation: must be in (0, 1], got {cfg.prefill_max_utilisation}")
    if not 0.0 < cfg.decode_max_utilisation <= 1.0:
        raise ValueError(f"decode_max_utilisation: must be in (0, 1], got {cfg.decode_max_utilisation}")
    if not 0.0 < cfg.cold_miss_share <= 1.0:
        raise ValueError(f"cold_miss_share: must be in (0, 1], got {cfg.cold_miss_share}")
    if not 0.0 < cfg.target_attainment < 1.0:
        raise ValueError(f"target_attainment: must be in (0, 1), got {cfg.target_attainment}")
    if not 0.0 < cfg.correction_smoothing <= 1.0:
        raise ValueError(f"correction_smoothing: must be in (0, 1], got {cfg.correction_smoothing}")
    if cfg.correction_max_step < 1.0:
        raise ValueError(f"correction_max_step: must be >= 1, got {cfg.correction_max_step}")
    if not 0.0 < cfg.correction_min <= 1.0 <= cfg.correction_max:
        raise ValueError("correction_min/correction_max: need 0 < correction_min <= 1 <= correction_max")
    if not 0.0 <= cfg.decode_kv_down < cfg.decode_kv_up:
        raise ValueError("decode_kv_down/decode_kv_up: need 0 <= decode_kv_down < decode_kv_up")
    if not 0.0 <= cfg.prefill_queue_down < cfg.prefill_queue_up:
        raise ValueError(
            "prefill_queue_down/prefill_queue_up: need 0 <= prefill_queue_down < prefill_queue_up"
        )
    return cfg
