"""Traffic observed at the frontend, and the predictor's forecast of it."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Annotated

import msgspec
from msgspec import Meta

NonNegFloat = Annotated[float, Meta(ge=0.0)]


TTFT_BOUNDS_MS = (1.0, 5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0,
                  5000.0, 7500.0, 10000.0, 20000.0, 40000.0, 80000.0, 160000.0, 640000.0, 2560000.0)  # fmt: skip
"""vLLM's ``time_to_first_token_seconds`` bucket bounds (0.32), in ms."""
TPOT_BOUNDS_MS = (10.0, 25.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 400.0, 500.0, 750.0, 1000.0,
                  2500.0, 5000.0, 7500.0, 10000.0, 20000.0, 40000.0, 80000.0)  # fmt: skip
"""vLLM's ``request_time_per_output_token_seconds`` bucket bounds (0.32), in ms."""


class LatencyHistogram(msgspec.Struct, frozen=True, kw_only=True):
    """Requests of one interval by latency, as the increase of a Prometheus histogram over it:
    ``counts[i]`` requests at or under ``bounds_ms[i]`` (cumulative, bounds ascending), ``total``
    all of them (the ``+Inf`` bucket)."""

    bounds_ms: list[NonNegFloat]
    counts: list[NonNegFloat]
    total: NonNegFloat

    @classmethod
    def of(cls, values_ms: Sequence[float], bounds_ms: Sequence[float]) -> LatencyHistogram | None:
        """The histogram of measured latencies (None for none)."""
        if not values_ms:
            return None
        xs = sorted(values_ms)
        counts = [float(bisect.bisect_right(xs, b)) for b in bounds_ms]
        return cls(bounds_ms=list(bounds_ms), counts=counts, total=float(len(xs)))


class TrafficSample(msgspec.Struct, frozen=True, kw_only=True):
    """Requests that arrived in ``[start_s, start_s + interval_s)`` and what they looked like.

    Means are ``None`` when no request finished in the interval (a zero-traffic interval is
    ``num_requests == 0``, which is data, not a gap).
    """

    namespace: str
    start_s: float
    interval_s: Annotated[float, Meta(gt=0.0)]
    num_requests: NonNegFloat
    mean_isl_tokens: NonNegFloat | None = None
    mean_osl_tokens: NonNegFloat | None = None
    mean_ttft_ms: NonNegFloat | None = None
    mean_itl_ms: NonNegFloat | None = None
    mean_request_duration_s: NonNegFloat | None = None
    num_failed: NonNegFloat = 0.0
    source: str = "loadgen"
    ttft_histogram: LatencyHistogram | None = None
    """The requests that got their first token in the interval, by TTFT (vLLM's
    ``time_to_first_token_seconds``; a frontend's TTFT histogram)."""
    itl_histogram: LatencyHistogram | None = None
    """The requests that finished in the interval, by their mean inter-token latency (vLLM's
    ``request_time_per_output_token_seconds``)."""


class LoadForecast(msgspec.Struct, frozen=True, kw_only=True):
    """Forecast for the next interval ``[for_start_s, for_start_s + interval_s)``."""

    namespace: str
    issued_at_s: float
    for_start_s: float
    interval_s: Annotated[float, Meta(gt=0.0)]
    num_requests: NonNegFloat | None
    mean_isl_tokens: NonNegFloat | None
    mean_osl_tokens: NonNegFloat | None
    num_requests_upper: NonNegFloat | None = None
    upper_quantile: Annotated[float, Meta(gt=0.0, lt=1.0)] = 0.9
    model: str = ""
    reason: str = ""
    """Why there is no forecast (``no_data``, ``warming_up``, ...); empty when there is one."""
