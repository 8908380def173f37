"""Performance profiles in the reference NPZ/JSON format: estimated from a timing model (no engine),
or planned, aggregated and judged for a live sweep (the I/O of which lives in the CLI)."""

from planner_core.profiling.estimate import EngineShape, estimate_decode, estimate_prefill, recommend
from planner_core.profiling.measure import (
    StreamTrace,
    decode_profile,
    median_ttft_ms,
    prefill_profile,
    steady_itl_ms,
)
from planner_core.profiling.select import (
    DecodeChoice,
    PlannerSettings,
    PrefillChoice,
    choose_decode_tp,
    choose_prefill_tp,
    decode_at,
    planner_settings,
    prefill_at,
)
from planner_core.profiling.sweep import (
    DecodePoint,
    EngineLimits,
    SweepConfig,
    decode_plan,
    max_concurrency,
    prefill_plan,
    sweep_requests,
)

__all__ = [
    "DecodeChoice",
    "DecodePoint",
    "EngineLimits",
    "EngineShape",
    "PlannerSettings",
    "PrefillChoice",
    "StreamTrace",
    "SweepConfig",
    "choose_decode_tp",
    "choose_prefill_tp",
    "decode_at",
    "decode_plan",
    "decode_profile",
    "estimate_decode",
    "estimate_prefill",
    "max_concurrency",
    "median_ttft_ms",
    "planner_settings",
    "prefill_at",
    "prefill_plan",
    "prefill_profile",
    "recommend",
    "steady_itl_ms",
    "sweep_requests",
]
