"""Per-request results, per-interval TrafficSample building and the end-of-run summary (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from planner_proto import TrafficSample
from planner_proto.traffic import TPOT_BOUNDS_MS, TTFT_BOUNDS_MS, LatencyHistogram


class RequestResult(msgspec.Struct, frozen=True, kw_only=True):
    """One replayed request; latencies in wall seconds as measured (not scaled)."""

    request_id: str
    arrival_s: float
    """Scheduled arrival, seconds from the start of the replay."""
    input_tokens: int
    output_tokens: int
    ok: bool
    tokens: int = 0
    ttft_s: float | None = None
    itl_s: float | None = None
    """Mean inter-token gap: (last token - first token) / (tokens - 1)."""
    duration_s: float | None = None
    error: str = ""
    attempts: int = 1
    workers: list[str] = []


def mean_itl_s(first_s: float, last_s: float, tokens: int) -> float | None:
    """(last - first) / (tokens - 1); None for a single-token answer."""
    return (last_s - first_s) / (tokens - 1) if tokens > 1 else None


class IntervalStats:
    """What one TrafficSample interval saw: arrivals (count, ISL, OSL) and completions (latencies)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.arrivals = 0
        self.isl_sum = 0
        self.osl_sum = 0
        self.failed = 0
        self.ttft: list[float] = []
        self.itl: list[float] = []
        self.duration: list[float] = []

    def arrival(self, isl: int, osl: int) -> None:
        self.arrivals += 1
        self.isl_sum += isl
        self.osl_sum += osl

    def completion(self, r: RequestResult) -> None:
        if not r.ok:
            self.failed += 1
            return
        if r.ttft_s is not None:
            self.ttft.append(r.ttft_s)
        if r.itl_s is not None:
            self.itl.append(r.itl_s)
        if r.duration_s is not None:
            self.duration.append(r.duration_s)

    def sample(
        self, namespace: str, start_s: float, interval_s: float, latency_scale: float = 1.0
    ) -> TrafficSample:
        def mean(xs: list[float], scale: float) -> float | None:
            return sum(xs) / len(xs) * scale if xs else None

        n = self.arrivals
        # Durations on the wire are model (GPU) time, like the latencies: with engines running
        # `latency_scale` times faster than a real GPU, a wall interval covers that much model time,
        # so rates computed downstream (count / interval) are real-GPU rates. start_s stays wall clock.
        return TrafficSample(
            namespace=namespace,
            start_s=start_s,
            interval_s=interval_s * latency_scale,
            num_requests=float(n),
            mean_isl_tokens=self.isl_sum / n if n else None,
            mean_osl_tokens=self.osl_sum / n if n else None,
            mean_ttft_ms=mean(self.ttft, 1e3 * latency_scale),
            mean_itl_ms=mean(self.itl, 1e3 * latency_scale),
            mean_request_duration_s=mean(self.duration, latency_scale),
            num_failed=float(self.failed),
            source="loadgen",
            ttft_histogram=LatencyHistogram.of([x * 1e3 * latency_scale for x in self.ttft], TTFT_BOUNDS_MS),
            itl_histogram=LatencyHistogram.of([x * 1e3 * latency_scale for x in self.itl], TPOT_BOUNDS_MS),
        )


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (``q`` in [0, 100]); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    requests: int
    completed: int
    failed: int
    retries: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    duration_p50_s: float | None
    wall_s: float
    completed_per_s: float


def summarize(results: Sequence[RequestResult], wall_s: float, latency_scale: float = 1.0) -> Summary:
    ok = [r for r in results if r.ok]
    ttft = [r.ttft_s * latency_scale for r in ok if r.ttft_s is not None]
    itl = [r.itl_s * latency_scale for r in ok if r.itl_s is not None]
    dur = [r.duration_s * latency_scale for r in ok if r.duration_s is not None]

    def ms(x: float | None) -> float | None:
        return None if x is None else x * 1e3

    return Summary(
        requests=len(results),
        completed=len(ok),
        failed=len(results) - len(ok),
        retries=sum(r.attempts - 1 for r in results),
        ttft_p50_ms=ms(percentile(ttft, 50)),
        ttft_p99_ms=ms(percentile(ttft, 99)),
        itl_p50_ms=ms(percentile(itl, 50)),
        itl_p99_ms=ms(percentile(itl, 99)),
        duration_p50_s=percentile(dur, 50),
        wall_s=wall_s,
        completed_per_s=len(ok) / wall_s if wall_s > 0 else 0.0,
    )


def format_summary(s: Summary) -> str:
    def f(x: float | None, unit: str) -> str:
        return "-" if x is None else f"{x:.1f} {unit}"

    return "\n".join(
        [
            "loadgen summary",
            f"  requests   {s.requests} (completed {s.completed}, failed {s.failed}, retries {s.retries})",
            f"  TTFT       p50 {f(s.ttft_p50_ms, 'ms')}  p99 {f(s.ttft_p99_ms, 'ms')}",
            f"  ITL        p50 {f(s.itl_p50_ms, 'ms')}  p99 {f(s.itl_p99_ms, 'ms')}",
            f"  duration   p50 {f(s.duration_p50_s, 's')}",
            f"  wall       {s.wall_s:.1f} s  ({s.completed_per_s:.2f} completed/s)",
        ]
    )
