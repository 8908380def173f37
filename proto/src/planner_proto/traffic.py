"""Traffic observed at the frontend, and the predictor's forecast of it."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

NonNegFloat = Annotated[float, Meta(ge=0.0)]


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
