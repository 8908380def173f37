"""PromQL building, answer parsing, count fallback and error kinds (Prometheus faked by an
httpx.MockTransport; the real one is in tests/integration/predictor_svc)."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from planner_predictor.prometheus import (
    PrometheusTraffic,
    PromQueryError,
    Reading,
    dynamo_series,
    increase_query,
    parse_scalar,
    ratio_query,
    sample_of,
    series_map,
)


def vector(v: str | None) -> dict[str, object]:
    result = [] if v is None else [{"metric": {}, "value": [1.0, v]}]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_queries() -> None:
    labels = {"model": "llama", "dynamo_namespace": "prod"}
    assert increase_query(dynamo_series("dynamo_frontend").counts[0], labels, 60) == (
        'sum(increase(dynamo_frontend_requests_total{dynamo_namespace="prod",model="llama"}[60000ms]))'
    )
    assert ratio_query(dynamo_series("p").means["isl"][0], {}, 1.5) == (
        "sum(increase(p_input_sequence_tokens_sum[1500ms])) / sum(increase(p_input_sequence_tokens_count[1500ms]))"
    )


def test_parse() -> None:
    assert parse_scalar(vector("12.5")) == 12.5
    assert parse_scalar(vector(None)) is None  # empty: unknown
    assert math.isnan(parse_scalar(vector("NaN")) or 0.0)  # 0/0: kept as NaN for the caller
    with pytest.raises(PromQueryError) as exc:
        parse_scalar({"status": "error", "errorType": "bad_data", "error": "parse error"})
    assert exc.value.kind == "error_status"
    with pytest.raises(PromQueryError):
        parse_scalar({"status": "success", "data": {"resultType": "vector", "result": [{"value": []}]}})


def fake(answers: dict[str, dict[str, object] | int]) -> httpx.AsyncClient:
    """Answers by metric name found in the query; an int is an HTTP status with an error body."""

    def handle(request: httpx.Request) -> httpx.Response:
        q = request.url.params["query"]
        assert request.url.path == "/api/v1/query" and request.url.params["time"] == "1000.000"
        for key, answer in answers.items():
            if key in q:
                if isinstance(answer, int):
                    return httpx.Response(answer, text="oops")
                return httpx.Response(200, text=json.dumps(answer))
        return httpx.Response(200, text=json.dumps(vector(None)))

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


async def test_count_falls_back_and_remembers() -> None:
    async with fake({"requests_started_total": vector("7"), "input_sequence": vector("NaN")}) as http:
        prom = PrometheusTraffic(http, "http://prom:9090/", "p", {}, 1.0)
        r = await prom.read(1000.0, 60.0)
        assert r.num_requests == 7.0 and r.means["isl"] is None and r.errors == ()
        assert prom.count_metrics[0] == "p_requests_started_total"


async def test_errors_are_reported_by_kind() -> None:
    async with fake(
        {"requests_total": 503, "requests_started": 503, "output_sequence": vector("20")}
    ) as http:
        r = await PrometheusTraffic(http, "http://prom:9090", "p", {}, 1.0).read(1000.0, 60.0)
        assert r.num_requests is None  # failed count: unknown, never zero
        assert r.means["osl"] == 20.0
        assert r.errors == ("count:http", "count:http")

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    async with httpx.AsyncClient(transport=httpx.MockTransport(down)) as http:
        r = await PrometheusTraffic(http, "http://prom:9090", "p", {}, 1.0).read(1000.0, 60.0)
        assert r.num_requests is None and set(e.split(":")[1] for e in r.errors) == {"transport"}


def test_sample_of() -> None:
    r = Reading(12.0, {"ttft": 0.25, "itl": 0.02, "isl": 100.0, "osl": None, "duration": 3.0})
    s = sample_of(r, namespace="n", now_s=600.0, window_s=60.0)
    assert s is not None and (s.start_s, s.interval_s, s.num_requests) == (540.0, 60.0, 12.0)
    assert s.mean_ttft_ms == 250.0 and s.mean_itl_ms == 20.0 and s.mean_osl_tokens is None
    assert s.source == "prometheus"
    assert sample_of(Reading(None, {}), namespace="n", now_s=600.0, window_s=60.0) is None


# ---- engine series maps ---------------------------------------------------------------------------


async def _queries(series: str, answers: dict[str, dict[str, object]], **labels: str) -> list[str]:
    """Every PromQL the reader sends for one interval, with the answers by substring."""
    sent: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        q = request.url.params["query"]
        sent.append(q)
        for key, answer in answers.items():
            if key in q:
                return httpx.Response(200, text=json.dumps(answer))
        return httpx.Response(200, text=json.dumps(vector(None)))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as http:
        await PrometheusTraffic(http, "http://prom:9090", series_map(series, "unused"), labels, 1.0).read(
            1000.0, 60.0
        )
    return sent


async def test_vllm_series_names() -> None:
    sent = await _queries("vllm", {"request_success_total": vector("4")}, model_name="tiny")
    sel = '{model_name="tiny"}[60000ms]'
    assert sent[0] == f"sum(increase(vllm:request_success_total{sel}))"
    assert (
        f"sum(increase(vllm:request_prompt_tokens_sum{sel})) / sum(increase(vllm:request_prompt_tokens_count{sel}))"
        in sent
    )
    assert (
        f"sum(increase(vllm:request_generation_tokens_sum{sel})) / sum(increase(vllm:request_generation_tokens_count{sel}))"
        in sent
    )
    assert (
        f"sum(increase(vllm:time_to_first_token_seconds_sum{sel})) / sum(increase(vllm:time_to_first_token_seconds_count{sel}))"
        in sent
    )
    # no ITL data: the older name is tried next
    itl = [q for q in sent if "inter_token" in q or "time_per_output" in q]
    assert ["inter_token_latency" in itl[0], "time_per_output_token" in itl[1]] == [True, True]
    assert not any("vllm:_" in q or "dynamo" in q for q in sent)


async def test_sglang_isl_falls_back_to_token_counters() -> None:
    sent = await _queries("sglang", {"sglang:num_requests_total": vector("3")})
    assert sent[0] == "sum(increase(sglang:num_requests_total[60000ms]))"
    isl = [q for q in sent if "prompt_tokens" in q]
    assert isl == [
        "sum(increase(sglang:prompt_tokens_histogram_sum[60000ms])) / sum(increase(sglang:prompt_tokens_histogram_count[60000ms]))",
        "sum(increase(sglang:prompt_tokens_total[60000ms])) / sum(increase(sglang:num_requests_total[60000ms]))",
    ]


async def test_dynamo_default_is_unchanged() -> None:
    sent = await _queries("dynamo", {}, model="m")
    assert sent[:2] == [
        'sum(increase(unused_requests_total{model="m"}[60000ms]))',
        'sum(increase(unused_requests_started_total{model="m"}[60000ms]))',
    ]


def test_settings_series_and_labels() -> None:
    from planner_predictor.settings import PredictorSettings

    vllm = PredictorSettings(source="prometheus", prometheus_series="vllm", prometheus_model="tiny")
    assert vllm.label_filters() == {"model_name": "tiny"}
    assert PredictorSettings(prometheus_model="m").label_filters() == {"model": "m"}
    with pytest.raises(ValueError, match="no request counter"):
        PredictorSettings(source="prometheus", prometheus_series="llamacpp")


def test_bucket_answers_become_a_histogram_in_ms() -> None:
    from planner_predictor.prometheus import PromQueryError, buckets_query, parse_buckets

    def body(pairs: list[tuple[str, str]]) -> dict[str, object]:
        result = [{"metric": {"le": le}, "value": [0, v]} for le, v in pairs]
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    h = parse_buckets(body([("+Inf", "40"), ("0.5", "30"), ("0.1", "10")]))
    assert h is not None and (h.bounds_ms, h.counts, h.total) == ([100.0, 500.0], [10.0, 30.0], 40.0)
    assert parse_buckets(body([])) is None  # no such series
    assert parse_buckets(body([("+Inf", "0"), ("0.1", "0")])) is None  # no request in the window
    assert parse_buckets(body([("0.1", "3")])) is None  # no +Inf bucket
    with pytest.raises(PromQueryError):
        parse_buckets(body([("x", "3")]))
    q = buckets_query("vllm:time_to_first_token_seconds_bucket", {"model_name": "m"}, 30.0)
    assert q == 'sum by (le) (increase(vllm:time_to_first_token_seconds_bucket{model_name="m"}[30000ms]))'
