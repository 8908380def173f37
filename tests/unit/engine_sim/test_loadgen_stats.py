"""Per-request figures, TrafficSample building and the run summary."""

from __future__ import annotations

import pytest

from planner_loadgen.flights import Flight
from planner_loadgen.stats import IntervalStats, RequestResult, mean_itl_s, percentile, summarize
from planner_sim.traces import TraceRequest


def ok(ttft: float, itl: float | None, dur: float, attempts: int = 1) -> RequestResult:
    return RequestResult(
        request_id="r",
        arrival_s=0.0,
        input_tokens=10,
        output_tokens=5,
        ok=True,
        tokens=5,
        ttft_s=ttft,
        itl_s=itl,
        duration_s=dur,
        attempts=attempts,
    )


def failed() -> RequestResult:
    return RequestResult(
        request_id="f", arrival_s=0.0, input_tokens=1, output_tokens=1, ok=False, error="stalled"
    )


@pytest.mark.parametrize(
    ("first", "last", "tokens", "expected"),
    [
        (1.0, 2.0, 11, 0.1),  # 10 gaps in 1 s
        (1.0, 1.0, 1, None),  # one token: no gap
        (0.5, 0.8, 4, 0.1),  # 3 gaps in 0.3 s
    ],
)
def test_mean_itl(first: float, last: float, tokens: int, expected: float | None) -> None:
    got = mean_itl_s(first, last, tokens)
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, None),
        ([3.0], 99, 3.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),  # between the 2nd and 3rd
        ([1.0, 2.0, 3.0, 4.0, 5.0], 100, 5.0),
        ([10.0, 0.0], 25, 2.5),  # sorted first: 0 + 0.25 * 10
    ],
)
def test_percentile(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == (None if expected is None else pytest.approx(expected))


def test_interval_sample_means_and_reset() -> None:
    st = IntervalStats()
    st.arrival(100, 10)
    st.arrival(300, 30)
    st.completion(ok(0.1, 0.01, 1.0))
    st.completion(ok(0.3, None, 2.0))  # single-token answer has no ITL
    st.completion(failed())
    s = st.sample("ns", start_s=1000.0, interval_s=10.0, latency_scale=2.0)
    assert s.num_requests == 2 and s.mean_isl_tokens == 200 and s.mean_osl_tokens == 20
    assert s.mean_ttft_ms == pytest.approx(400.0)  # mean 0.2 s x scale 2
    assert s.mean_itl_ms == pytest.approx(20.0)
    assert s.mean_request_duration_s == pytest.approx(3.0)
    assert s.num_failed == 1 and s.namespace == "ns" and s.source == "loadgen"
    st.reset()
    empty = st.sample("ns", 1010.0, 10.0)
    assert empty.num_requests == 0 and empty.mean_isl_tokens is None and empty.mean_ttft_ms is None


def test_summary_counts_and_percentiles() -> None:
    res = [ok(0.1 * i, 0.01, 1.0, attempts=2 if i == 1 else 1) for i in range(1, 11)] + [failed()]
    s = summarize(res, wall_s=5.0)
    assert (s.requests, s.completed, s.failed, s.retries) == (11, 10, 1, 1)
    assert s.ttft_p50_ms == pytest.approx(550.0)  # median of 100..1000 ms
    assert s.itl_p99_ms == pytest.approx(10.0)
    assert s.completed_per_s == pytest.approx(2.0)


def test_flight_result_measures_from_arrival() -> None:
    f = Flight(0, "r0", "inbox.0", TraceRequest(0.0, 100, 5), created_s=10.0, last_activity_s=10.0)
    f.first_token_s, f.last_token_s, f.tokens, f.attempts = 10.2, 10.6, 5, 1
    r = f.result(ok=True)
    assert (
        r.ttft_s == pytest.approx(0.2)
        and r.itl_s == pytest.approx(0.1)
        and r.duration_s == pytest.approx(0.6)
    )
    bad = f.result(ok=False, error="stalled")
    assert bad.itl_s is None and bad.duration_s is None and bad.error == "stalled"
