"""Traffic read from Prometheus over its HTTP API (``/api/v1/query``), from the frontend metrics.

Per interval ``w`` ending at ``now``: the request count is ``sum(increase({p}_requests_total[w]))``
(falling back to ``{p}_requests_started_total``); each average is ``sum(increase(X_sum[w])) /
sum(increase(X_count[w]))`` over the TTFT, ITL, ISL, OSL and request-duration histograms. A query that
returns nothing means "unknown" (no such series, or Prometheus has no data yet), never zero traffic;
an increase of 0 is zero traffic, and its averages are NaN (0/0), i.e. None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from planner_proto import TrafficSample

COUNT_METRICS = ("requests_total", "requests_started_total")
HISTOGRAMS = {
    "ttft": "time_to_first_token_seconds",
    "itl": "inter_token_latency_seconds",
    "isl": "input_sequence_tokens",
    "osl": "output_sequence_tokens",
    "duration": "request_duration_seconds",
}


class PromQueryError(Exception):
    """A query that failed (transport error, HTTP error, or an error status from Prometheus)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def selector(labels: Mapping[str, str]) -> str:
    """``{a="x",b="y"}`` (values are validated in the settings: no quotes, backslashes, newlines)."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def duration(window_s: float) -> str:
    """A PromQL range duration; milliseconds so that any interval is exact."""
    return f"{max(1, round(window_s * 1000))}ms"


def count_query(prefix: str, name: str, labels: Mapping[str, str], window_s: float) -> str:
    return f"sum(increase({prefix}_{name}{selector(labels)}[{duration(window_s)}]))"


def mean_query(prefix: str, hist: str, labels: Mapping[str, str], window_s: float) -> str:
    sel, w = selector(labels), duration(window_s)
    return f"sum(increase({prefix}_{hist}_sum{sel}[{w}])) / sum(increase({prefix}_{hist}_count{sel}[{w}]))"


def parse_scalar(body: object) -> float | None:
    """The single value of an instant-vector answer; None for an empty result. NaN stays NaN."""
    if not isinstance(body, dict) or body.get("status") != "success":
        detail = body.get("error", "no status") if isinstance(body, dict) else "not a JSON object"
        raise PromQueryError("error_status", str(detail)[:200])
    data = body.get("data")
    if not isinstance(data, dict):
        raise PromQueryError("bad_response", "no data")
    result = data.get("result")
    if data.get("resultType") == "scalar" and isinstance(result, list) and len(result) == 2:
        return float(result[1])
    if not isinstance(result, list):
        raise PromQueryError("bad_response", "result is not a list")
    if not result:
        return None
    try:
        return float(result[0]["value"][1])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise PromQueryError("bad_response", repr(exc)) from None


def finite_or_none(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) and v >= 0 else None


@dataclass(frozen=True)
class Reading:
    """What one interval's queries found; ``num_requests`` None means unknown."""

    num_requests: float | None
    means: dict[str, float | None]
    errors: tuple[str, ...] = ()


class PrometheusTraffic:
    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        prefix: str,
        labels: Mapping[str, str],
        timeout_s: float,
        count_metrics: Sequence[str] = COUNT_METRICS,
    ) -> None:
        self.client = client
        self.url = base_url.rstrip("/") + "/api/v1/query"
        self.prefix = prefix
        self.labels = dict(labels)
        self.timeout_s = timeout_s
        self.count_metrics = list(count_metrics)

    async def query(self, promql: str, at_s: float) -> float | None:
        try:
            resp = await self.client.get(
                self.url, params={"query": promql, "time": f"{at_s:.3f}"}, timeout=self.timeout_s
            )
        except httpx.TimeoutException as exc:
            raise PromQueryError("timeout", str(exc) or "timeout") from None
        except httpx.HTTPError as exc:
            raise PromQueryError("transport", str(exc) or type(exc).__name__) from None
        try:
            body = resp.json()
        except ValueError:
            raise PromQueryError("http", f"HTTP {resp.status_code}, not JSON") from None
        return parse_scalar(body)

    async def count(self, now_s: float, window_s: float, errors: list[str]) -> float | None:
        """First count metric with data wins (and is tried first next time)."""
        for name in list(self.count_metrics):
            try:
                v = await self.query(count_query(self.prefix, name, self.labels, window_s), now_s)
            except PromQueryError as exc:
                errors.append(f"count:{exc.kind}")
                continue
            if v is not None and math.isfinite(v):
                if name != self.count_metrics[0]:
                    self.count_metrics.remove(name)
                    self.count_metrics.insert(0, name)
                return max(v, 0.0)
        return None

    async def read(self, now_s: float, window_s: float) -> Reading:
        errors: list[str] = []
        count = await self.count(now_s, window_s, errors)
        means: dict[str, float | None] = {}
        for key, hist in HISTOGRAMS.items():
            try:
                v = await self.query(mean_query(self.prefix, hist, self.labels, window_s), now_s)
            except PromQueryError as exc:
                errors.append(f"{key}:{exc.kind}")
                v = None
            means[key] = finite_or_none(v)
        return Reading(count, means, tuple(errors))


def sample_of(reading: Reading, *, namespace: str, now_s: float, window_s: float) -> TrafficSample | None:
    """The interval as a TrafficSample; None when the request count is unknown."""
    if reading.num_requests is None:
        return None
    m = reading.means

    def scaled(key: str, factor: float) -> float | None:
        v = m.get(key)
        return None if v is None else v * factor

    return TrafficSample(
        namespace=namespace,
        start_s=now_s - window_s,
        interval_s=window_s,
        num_requests=reading.num_requests,
        mean_isl_tokens=m.get("isl"),
        mean_osl_tokens=m.get("osl"),
        mean_ttft_ms=scaled("ttft", 1000.0),
        mean_itl_ms=scaled("itl", 1000.0),
        mean_request_duration_s=m.get("duration"),
        source="prometheus",
    )
