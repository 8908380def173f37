"""Traffic read from Prometheus over its HTTP API (``/api/v1/query``), from the frontend's or the
engines' own series.

Per interval ``w`` ending at ``now``: the request count is ``sum(increase(R[w]))`` for the first
request counter ``R`` of the series map with data; each average is ``sum(increase(S[w])) /
sum(increase(C[w]))`` for a histogram's ``_sum``/``_count`` (TTFT, ITL, ISL, OSL, request duration),
or a fallback pair of counters (SGLang without length histograms: prompt tokens over requests). The
latency histograms come whole, ``sum by (le) (increase(H_bucket[w]))``: TTFT, and where the source
has one per request, the mean time per output token (vLLM's ``request_time_per_output_token``). A
query that returns nothing means "unknown" (no such series, or Prometheus has no data yet), never zero
traffic; an increase of 0 is zero traffic, and its averages are NaN (0/0), i.e. None.

Each engine names these series its own way; :data:`ENGINE_SERIES` maps them (``prometheus_series``),
and the Dynamo frontend's names take the configurable prefix (``metric_prefix``, the default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import httpx

from planner_proto import LatencyHistogram, TrafficSample

COUNT_METRICS = ("requests_total", "requests_started_total")
HISTOGRAMS = {
    "ttft": "time_to_first_token_seconds",
    "itl": "inter_token_latency_seconds",
    "isl": "input_sequence_tokens",
    "osl": "output_sequence_tokens",
    "duration": "request_duration_seconds",
}
MEAN_KEYS = tuple(HISTOGRAMS)
_T = TypeVar("_T")
_V = TypeVar("_V")

Ratio = tuple[str, str]
"""``(numerator, denominator)``: full names of two counters whose increases divide to a mean."""


def _hist(name: str) -> Ratio:
    return (f"{name}_sum", f"{name}_count")


@dataclass(frozen=True)
class SeriesMap:
    """Where one source keeps the request count and each mean (full series names)."""

    counts: tuple[str, ...]
    """Request counters, first with data wins."""
    means: Mapping[str, tuple[Ratio, ...]] = field(default_factory=dict)
    """Mean key (ttft, itl, isl, osl, duration) -> candidate ratios, first with data wins."""
    model_label: str = "model"
    """The label that names the model (``prometheus_model`` filters on it)."""
    buckets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Latency (ttft, itl) -> candidate ``_bucket`` series of a per-request histogram, first with
    data wins (``itl``: a request's mean time per output token, not each gap)."""


def dynamo_series(prefix: str, count_metrics: Sequence[str] = COUNT_METRICS) -> SeriesMap:
    """The Dynamo frontend's names (also what our loadgen exports), under ``prefix``."""
    return SeriesMap(
        counts=tuple(f"{prefix}_{n}" for n in count_metrics),
        means={k: (_hist(f"{prefix}_{h}"),) for k, h in HISTOGRAMS.items()},
        buckets={"ttft": (f"{prefix}_{HISTOGRAMS['ttft']}_bucket",)},
    )


ENGINE_SERIES: dict[str, SeriesMap] = {
    # vLLM counts a request when it finishes (every finished_reason label summed); the length
    # histograms are recorded at the same moment, so count and means describe the same requests.
    "vllm": SeriesMap(
        counts=("vllm:request_success_total",),
        means={
            "ttft": (_hist("vllm:time_to_first_token_seconds"),),
            # vLLM >= 0.11; older releases only time_per_output_token_seconds
            "itl": (_hist("vllm:inter_token_latency_seconds"), _hist("vllm:time_per_output_token_seconds")),
            "isl": (_hist("vllm:request_prompt_tokens"),),
            "osl": (_hist("vllm:request_generation_tokens"),),
            "duration": (_hist("vllm:e2e_request_latency_seconds"),),
        },
        model_label="model_name",
        buckets={
            "ttft": ("vllm:time_to_first_token_seconds_bucket",),
            "itl": ("vllm:request_time_per_output_token_seconds_bucket",),
        },
    ),
    # SGLang: the length histograms only with --collect-tokens-histogram; otherwise the token
    # counters over the request counter give the same means.
    "sglang": SeriesMap(
        counts=("sglang:num_requests_total",),
        means={
            "ttft": (_hist("sglang:time_to_first_token_seconds"),),
            "itl": (_hist("sglang:inter_token_latency_seconds"),),
            "isl": (
                _hist("sglang:prompt_tokens_histogram"),
                ("sglang:prompt_tokens_total", "sglang:num_requests_total"),
            ),
            "osl": (
                _hist("sglang:generation_tokens_histogram"),
                ("sglang:generation_tokens_total", "sglang:num_requests_total"),
            ),
            "duration": (_hist("sglang:e2e_request_latency_seconds"),),
        },
        model_label="model_name",
        buckets={"ttft": ("sglang:time_to_first_token_seconds_bucket",)},
    ),
    # llama-server --metrics has no request counter and no latency histograms: only token counters
    # and the seconds spent on them. Means per token are known, the request count is not (the
    # settings refuse this map for the Prometheus source and say so).
    "llamacpp": SeriesMap(
        counts=(),
        means={"itl": (("llamacpp:tokens_predicted_seconds_total", "llamacpp:tokens_predicted_total"),)},
        model_label="",
    ),
}


def series_map(series: str, prefix: str) -> SeriesMap:
    """The map for ``prometheus_series`` (``dynamo`` takes ``metric_prefix``)."""
    return dynamo_series(prefix) if series == "dynamo" else ENGINE_SERIES[series]


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


def increase_query(name: str, labels: Mapping[str, str], window_s: float) -> str:
    return f"sum(increase({name}{selector(labels)}[{duration(window_s)}]))"


def ratio_query(ratio: Ratio, labels: Mapping[str, str], window_s: float) -> str:
    return f"{increase_query(ratio[0], labels, window_s)} / {increase_query(ratio[1], labels, window_s)}"


def buckets_query(name: str, labels: Mapping[str, str], window_s: float) -> str:
    return f"sum by (le) (increase({name}{selector(labels)}[{duration(window_s)}]))"


def _result(body: object) -> tuple[str | None, object]:
    if not isinstance(body, dict) or body.get("status") != "success":
        detail = body.get("error", "no status") if isinstance(body, dict) else "not a JSON object"
        raise PromQueryError("error_status", str(detail)[:200])
    data = body.get("data")
    if not isinstance(data, dict):
        raise PromQueryError("bad_response", "no data")
    return data.get("resultType"), data.get("result")


def parse_buckets(body: object) -> LatencyHistogram | None:
    """A ``sum by (le)`` answer as a histogram in ms; None for an empty result (no such series, or
    no request in the window) or one without a ``+Inf`` bucket."""
    _, result = _result(body)
    if not isinstance(result, list):
        raise PromQueryError("bad_response", "result is not a list")
    by_le: dict[float, float] = {}
    try:
        for item in result:
            by_le[float(item["metric"]["le"])] = float(item["value"][1])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise PromQueryError("bad_response", repr(exc)) from None
    total = by_le.pop(math.inf, None)
    if total is None or not math.isfinite(total) or total <= 0:
        return None
    bounds = sorted(by_le)
    return LatencyHistogram(
        bounds_ms=[b * 1000.0 for b in bounds], counts=[max(by_le[b], 0.0) for b in bounds], total=total
    )


def parse_scalar(body: object) -> float | None:
    """The single value of an instant-vector answer; None for an empty result. NaN stays NaN."""
    kind, result = _result(body)
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        return float(result[1])
    if not isinstance(result, list):
        raise PromQueryError("bad_response", "result is not a list")
    if not result:
        return None
    try:
        return float(result[0]["value"][1])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise PromQueryError("bad_response", repr(exc)) from None


def _finite_scalar(body: object) -> float | None:
    """A scalar answer, a non-finite one counting as no data."""
    v = parse_scalar(body)
    return v if v is not None and math.isfinite(v) else None


def finite_or_none(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) and v >= 0 else None


@dataclass(frozen=True)
class Reading:
    """What one interval's queries found; ``num_requests`` None means unknown."""

    num_requests: float | None
    means: dict[str, float | None]
    errors: tuple[str, ...] = ()
    histograms: dict[str, LatencyHistogram | None] = field(default_factory=dict)


class PrometheusTraffic:
    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        series: str | SeriesMap,
        labels: Mapping[str, str],
        timeout_s: float,
        count_metrics: Sequence[str] | None = None,
    ) -> None:
        """``series``: a map, or a Dynamo frontend prefix (``count_metrics`` then names its request
        counters without the prefix)."""
        self.client = client
        self.url = base_url.rstrip("/") + "/api/v1/query"
        if isinstance(series, str):
            series = dynamo_series(series, COUNT_METRICS if count_metrics is None else count_metrics)
        self.labels = dict(labels)
        self.timeout_s = timeout_s
        self.count_metrics = list(series.counts)
        self.mean_ratios = {k: list(v) for k, v in series.means.items()}
        self.bucket_series = {k: list(v) for k, v in series.buckets.items()}

    async def query(self, promql: str, at_s: float) -> float | None:
        return parse_scalar(await self._get(promql, at_s))

    async def histogram(
        self, key: str, now_s: float, window_s: float, errors: list[str]
    ) -> LatencyHistogram | None:
        """The first bucket series of ``key`` with data wins (and is tried first next time)."""
        tried = self.bucket_series.get(key, [])
        query = lambda name: buckets_query(name, self.labels, window_s)  # noqa: E731
        return await self._first(tried, query, now_s, errors, f"{key}_buckets", parse_buckets)

    async def _get(self, promql: str, at_s: float) -> object:
        try:
            resp = await self.client.get(
                self.url, params={"query": promql, "time": f"{at_s:.3f}"}, timeout=self.timeout_s
            )
        except httpx.TimeoutException as exc:
            raise PromQueryError("timeout", str(exc) or "timeout") from None
        except httpx.HTTPError as exc:
            raise PromQueryError("transport", str(exc) or type(exc).__name__) from None
        try:
            body: object = resp.json()
        except ValueError:
            raise PromQueryError("http", f"HTTP {resp.status_code}, not JSON") from None
        return body

    async def _first(
        self,
        tried: list[_T],
        promql: Callable[[_T], str],
        now_s: float,
        errors: list[str],
        tag: str,
        parse: Callable[[object], _V | None],
    ) -> _V | None:
        """The answer (``parse`` of the response; None is no data) of the first candidate with data,
        moved to the front of ``tried`` (asked first next time); a failed query is listed in
        ``errors`` as ``{tag}:{kind}``."""
        for cand in list(tried):
            try:
                v = parse(await self._get(promql(cand), now_s))
            except PromQueryError as exc:
                errors.append(f"{tag}:{exc.kind}")
                continue
            if v is not None:
                tried.remove(cand)
                tried.insert(0, cand)
                return v
        return None

    async def count(self, now_s: float, window_s: float, errors: list[str]) -> float | None:
        """First count metric with data wins (and is tried first next time)."""
        v = await self._first(
            self.count_metrics,
            lambda name: increase_query(name, self.labels, window_s),
            now_s,
            errors,
            "count",
            _finite_scalar,
        )
        return None if v is None else max(v, 0.0)

    async def mean(self, key: str, now_s: float, window_s: float, errors: list[str]) -> float | None:
        """First ratio of ``key`` with data wins (and is tried first next time). A ratio answering
        NaN (0/0: the series exist, no request in the interval) is the answer, not a miss."""
        ratios = self.mean_ratios.get(key, [])
        v = await self._first(
            ratios, lambda r: ratio_query(r, self.labels, window_s), now_s, errors, key, parse_scalar
        )
        return finite_or_none(v)

    async def read(self, now_s: float, window_s: float) -> Reading:
        errors: list[str] = []
        count = await self.count(now_s, window_s, errors)
        means = {key: await self.mean(key, now_s, window_s, errors) for key in MEAN_KEYS}
        hists = {key: await self.histogram(key, now_s, window_s, errors) for key in self.bucket_series}
        return Reading(count, means, tuple(errors), hists)


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
        ttft_histogram=reading.histograms.get("ttft"),
        itl_histogram=reading.histograms.get("itl"),
    )
