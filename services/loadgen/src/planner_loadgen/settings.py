"""Settings of the load generator."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from planner_runtime.settings import BaseSettings

PosFloat = Annotated[float, Meta(gt=0.0)]
NonNegFloat = Annotated[float, Meta(ge=0.0)]


class LoadgenSettings(BaseSettings, frozen=True, kw_only=True):
    """Load generator: replays a trace or a synthetic shape against the registered engines."""

    trace: str = ""
    """Trace file: Azure CSV (.csv) or Mooncake JSONL (.jsonl). Exclusive with shape."""
    shape: Literal["", "constant", "step", "sinusoid", "burst"] = ""
    on_trace_error: Literal["skip", "stop"] = "skip"
    duration_s: Annotated[float, Meta(gt=0.0, le=30 * 86400.0)] = 60.0
    """Length of a synthetic shape (trace seconds, before time_scale)."""
    rate_per_s: NonNegFloat = 2.0
    peak_rate_per_s: NonNegFloat = 0.0
    """Peak of step/sinusoid/burst; 0 = twice rate_per_s."""
    period_s: PosFloat = 600.0
    step_at_s: NonNegFloat = 0.0
    """When the step happens; 0 = half-way."""
    burst_every_s: PosFloat = 300.0
    burst_len_s: PosFloat = 30.0
    isl_tokens: Annotated[int, Meta(ge=1)] = 1024
    osl_tokens: Annotated[int, Meta(ge=1)] = 128
    length_jitter: NonNegFloat = 0.0
    seed: int = 0
    time_scale: Annotated[float, Meta(gt=0.0, le=1000.0)] = 1.0
    """Multiplies arrival times: 0.1 plays the trace 10x faster."""
    rate_scale: Annotated[float, Meta(gt=0.0, le=1000.0)] = 1.0
    """Multiplies the request rate, keeping the timeline (replicates or thins requests)."""
    max_duration_s: NonNegFloat = 0.0
    """Replay only arrivals before this (wall seconds after scaling); 0 = all."""
    max_requests: Annotated[int, Meta(ge=0)] = 0
    """Replay at most this many requests; 0 = all."""
    mode: Literal["auto", "agg", "disagg"] = "auto"
    """auto: disaggregated when prefill and decode engines are registered, else agg engines."""
    min_engines: Annotated[int, Meta(ge=0)] = 1
    """Wait for this many routable engines (of the first stage) before replaying."""
    engine_wait_timeout_s: PosFloat = 60.0
    max_retries: Annotated[int, Meta(ge=0, le=100)] = 3
    """Re-sends of a request rejected before its first token (or by a decode worker in hand-off)."""
    stall_timeout_s: PosFloat = 10.0
    """A request with no chunk for this long (wall seconds) is counted failed."""
    interval_s: PosFloat = 10.0
    """TrafficSample period (wall seconds)."""
    results_file: str = ""
    """Per-request results as JSONL."""
    exit_when_done: bool = True
    frontend_metric_prefix: Annotated[str, Meta(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")] = "dynamo_frontend"
    model: str = "engine-sim"
    """Value of the ``model`` label of the frontend metrics."""
    latency_scale: PosFloat = 1.0
    """Multiplies measured latencies before they are reported (set it to the engines'
    time_compression to report modelled-GPU seconds); the raw wall figures stay in results_file."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if bool(self.trace) == bool(self.shape):
            raise ValueError("give exactly one of trace (--trace PATH) or shape (--shape constant|step|...)")
