"""The requests to replay: a trace file or a synthetic shape, scaled and cut as the settings say; or
the phases of closed-loop clients."""

from __future__ import annotations

from dataclasses import dataclass

from planner_loadgen.settings import LoadgenSettings, parse_client_phases
from planner_sim.traces import TraceError, TraceRequest, read_trace, scale_trace, synthetic


@dataclass(frozen=True)
class Workload:
    requests: list[TraceRequest]
    """Arrival times in wall seconds from the start of the replay."""
    errors: list[TraceError]
    source: str
    phases: tuple[tuple[int, float], ...] = ()
    """Closed-loop clients (count, wall seconds) per phase, instead of ``requests``."""


def phase_at(phases: tuple[tuple[int, float], ...], elapsed_s: float) -> tuple[int, float] | None:
    """(clients wanted, seconds left in the phase) ``elapsed_s`` after the start; None once the last
    phase is over."""
    end = 0.0
    for n, dur in phases:
        end += dur
        if elapsed_s < end:
            return n, end - elapsed_s
    return None


def build_workload(s: LoadgenSettings) -> Workload:
    """Raises TraceError (``on_trace_error=stop``), OSError or ValueError."""
    if s.clients:
        return Workload([], [], f"clients:{s.clients}", tuple(parse_client_phases(s.clients)))
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
