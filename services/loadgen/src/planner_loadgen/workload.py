"""The requests to replay: a trace file or a synthetic shape, scaled and cut as the settings say."""

from __future__ import annotations

from dataclasses import dataclass

from planner_loadgen.settings import LoadgenSettings
from planner_sim.traces import TraceError, TraceRequest, read_trace, scale_trace, synthetic


@dataclass(frozen=True)
class Workload:
    requests: list[TraceRequest]
    """Arrival times in wall seconds from the start of the replay."""
    errors: list[TraceError]
    source: str


def build_workload(s: LoadgenSettings) -> Workload:
    """Raises TraceError (``on_trace_error=stop``), OSError or ValueError."""
    if s.trace:
        result = read_trace(s.trace, on_error="raise" if s.on_trace_error == "stop" else "skip")
        reqs, errors, source = result.requests, result.errors, s.trace
    else:
        shape = s.shape or "constant"
        reqs = synthetic(
            shape,
            s.duration_s,
            s.rate_per_s,
            s.isl_tokens,
            s.osl_tokens,
            peak_rate_per_s=s.peak_rate_per_s or None,
            period_s=s.period_s,
            step_at_s=s.step_at_s or None,
            burst_every_s=s.burst_every_s,
            burst_len_s=s.burst_len_s,
            length_jitter=s.length_jitter,
            seed=s.seed,
        )
        errors, source = [], f"synthetic:{shape}"
    if s.time_scale != 1.0 or s.rate_scale != 1.0:
        reqs = scale_trace(reqs, s.time_scale, s.rate_scale, seed=s.seed)
    if s.max_duration_s:
        reqs = [r for r in reqs if r.arrival_s < s.max_duration_s]
    if s.max_requests:
        reqs = reqs[: s.max_requests]
    return Workload(reqs, errors, source)
