"""Settings of the load generator."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from planner_runtime.settings import BaseSettings

PosFloat = Annotated[float, Meta(gt=0.0)]
MAX_CLIENTS = 10_000
NonNegFloat = Annotated[float, Meta(ge=0.0)]


class LoadgenSettings(BaseSettings, frozen=True, kw_only=True):
    """Load generator: replays a trace, a synthetic shape or closed-loop clients against the engines."""

    target: Literal["nats", "openai"] = "nats"
    """How requests reach the engines: nats, engine-sim's generate subject; openai, streamed HTTP
    ``/v1/completions`` at the address of the engine's ``metrics_url`` (llama-server, vLLM, SGLang)."""
    trace: str = ""
    """Trace file: Azure CSV (.csv) or Mooncake JSONL (.jsonl). Exclusive with shape and clients."""
    shape: Literal["", "constant", "step", "sinusoid", "burst"] = ""
    clients: str = ""
    """Closed-loop clients instead of a trace or shape: comma-separated ``COUNT:SECONDS`` phases (e.g.
    ``1:10,6:25``); each of COUNT clients sends its next request (isl_tokens, osl_tokens) when its
    last one is done; after the last phase no new request is sent."""
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
    """Prompt length of a shape's or a client's requests. openai sends a request's input length as a
    prompt of that many words (the engine's tokenizer decides how many tokens they make)."""
    osl_tokens: Annotated[int, Meta(ge=1)] = 128
    length_jitter: NonNegFloat = 0.0
    seed: int = 0
    time_scale: Annotated[float, Meta(gt=0.0, le=1000.0)] = 1.0
    """Multiplies arrival times: 0.1 plays the trace 10x faster."""
    rate_scale: Annotated[float, Meta(gt=0.0, le=1000.0)] = 1.0
    """Multiplies the request rate, keeping the timeline (adds shifted copies of the trace, or thins it)."""
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
    connect_timeout_s: PosFloat = 2.0
    """openai: an engine that does not accept the connection within this is passed over (the request
    is sent to another)."""
    interval_s: PosFloat = 10.0
    """TrafficSample period (wall seconds)."""
    publish_traffic: bool = True
    """Publish a TrafficSample per interval; false makes the loadgen a plain client, as users' own
    traffic is (the predictor's ``source: engines`` then counts it from the engines)."""
    results_file: str = ""
    """Per-request results as JSONL."""
    exit_when_done: bool = True
    frontend_metric_prefix: Annotated[str, Meta(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")] = "dynamo_frontend"
    model: str = "engine-sim"
    """Value of the ``model`` label of the frontend metrics, and the ``model`` of openai requests."""
    latency_scale: PosFloat = 1.0
    """Multiplies measured latencies before they are reported (set it to the engines'
    time_compression to report modelled-GPU seconds); the raw wall figures stay in results_file."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if sum(map(bool, (self.trace, self.shape, self.clients))) != 1:
            raise ValueError(
                "give exactly one of trace (--trace PATH), shape (--shape constant|step|...) "
                "or clients (--clients COUNT:SECONDS,...)"
            )
        if self.clients:
            parse_client_phases(self.clients)  # raises ValueError naming the field
        if self.target == "openai" and self.mode == "disagg":
            raise ValueError("target openai sends whole requests to agg engines: mode must be auto or agg")


def parse_client_phases(text: str) -> list[tuple[int, float]]:
    """``"1:10,6:25"`` -> ``[(1, 10.0), (6, 25.0)]``: client count and length (wall seconds) per phase."""
    phases: list[tuple[int, float]] = []
    for part in text.split(","):
        count, sep, secs = part.strip().partition(":")
        try:
            n, dur = int(count), float(secs)
        except ValueError:
            n, dur = -1, -1.0
        if not sep or not 0 <= n <= MAX_CLIENTS or not 0 < dur <= 30 * 86400.0:
            raise ValueError(
                f"clients: phase {part.strip()!r} must be COUNT:SECONDS with COUNT in 0..{MAX_CLIENTS} "
                "and SECONDS > 0 (e.g. 1:10,6:25)"
            )
        phases.append((n, dur))
    return phases
