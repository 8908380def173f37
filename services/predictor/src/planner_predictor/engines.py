"""Traffic from the scraped engines' own counters: the WorkerLoadSamples every relay publishes on
``load.{component}.{worker_id}`` become one TrafficSample per interval (the maths is
:class:`planner_core.engines.traffic.FleetTraffic`; this module only maps the message onto it)."""

from __future__ import annotations

from planner_core.engines.traffic import Buckets, EngineCounters
from planner_proto import WorkerLoadSample


def engine_key(subject: str) -> tuple[str, str] | None:
    """``(component, "{component}.{worker_id}")`` of a ``...load.{component}.{worker_id}`` subject."""
    parts = subject.rsplit(".", 3)
    if len(parts) != 4 or parts[1] != "load":
        return None
    return parts[2], f"{parts[2]}.{parts[3]}"


def counters_of(sample: WorkerLoadSample, component: str) -> EngineCounters:
    """The sample's cumulative totals (a latency sum without observations adds 0 to a mean's
    denominator, so an engine without histograms changes no mean)."""
    return EngineCounters(
        component=component,
        observed_at_s=sample.observed_at_s,
        requests=sample.requests_total,
        prompt_tokens=sample.prompt_tokens_total,
        generation_tokens=sample.generation_tokens_total,
        isl_sum=sample.isl_tokens_sum,
        isl_count=sample.isl_tokens_count,
        osl_sum=sample.osl_tokens_sum,
        osl_count=sample.osl_tokens_count,
        ttft_sum_s=sample.ttft_seconds_sum,
        ttft_count=sample.ttft_seconds_count,
        itl_sum_s=sample.itl_seconds_sum,
        itl_count=sample.itl_seconds_count,
        ttft_buckets=_buckets(sample.ttft_bucket_le_s, sample.ttft_bucket_counts),
        tpot_buckets=_buckets(sample.tpot_bucket_le_s, sample.tpot_bucket_counts),
    )


def _buckets(le_s: tuple[float, ...], counts: tuple[float, ...]) -> Buckets | None:
    return (le_s, counts) if le_s and len(counts) == len(le_s) + 1 else None
