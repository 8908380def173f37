"""TTFT (chunked prefill) and ITL estimates with exact numbers."""

from __future__ import annotations

import pytest

from planner_core.regression import (
    OnlineRegression,
    RegressionConfig,
    estimate_next_itl,
    estimate_next_ttft,
)
from planner_proto.engine import Component
from planner_proto.fpm import ForwardPassMetrics, ScheduledRequestMetrics


def prefill_line(x: list[float] | tuple[float, ...]) -> float:
    return 0.01 + 1e-5 * x[0]  # 10 ms + 10 µs per token


@pytest.mark.parametrize(
    ("queued", "isl", "hit", "chunk", "seconds", "chunks"),
    [
        # T = (10000 + 2000) * 0.5 = 6000 -> 4096 + 1904: (0.01 + 0.04096) + (0.01 + 0.01904) = 0.08
        (10000, 2000, 0.5, 4096, 0.08, 2),
        # T = 0 + 1000 = 1000 -> one chunk: 0.01 + 0.01 = 0.02
        (0, 1000, 0.0, 8192, 0.02, 1),
        # T = 16384 -> two full chunks of 8192: 2 * (0.01 + 0.08192) = 0.18384
        (15384, 1000, 0.0, 8192, 0.18384, 2),
        # everything hits the prefix cache: nothing to compute
        (5000, 1000, 1.0, 8192, 0.0, 0),
    ],
    ids=["split-4096+1904", "single-chunk", "two-full-chunks", "all-cached"],
)
def test_ttft(queued: float, isl: float, hit: float, chunk: int, seconds: float, chunks: int) -> None:
    est = estimate_next_ttft(
        prefill_line,
        queued_prefill_tokens=queued,
        avg_isl_tokens=isl,
        max_num_batched_tokens=chunk,
        kv_hit_rate=hit,
    )
    assert est.latency_s == pytest.approx(seconds)
    assert est.num_chunks == chunks


def test_itl_decode() -> None:
    # 0.005 + 1e-4 * (9 + 1) + 1e-7 * (100000 + 50000 + 2000) = 0.005 + 0.001 + 0.0152 = 0.0212
    est = estimate_next_itl(
        lambda x: 0.005 + 1e-4 * x[0] + 1e-7 * x[1],
        avg_num_decode_requests=9,
        scheduled_kv_tokens=100000,
        queued_kv_tokens=50000,
        avg_decode_length_tokens=2000,
    )
    assert est.latency_s == pytest.approx(0.0212)


def test_bad_input_gives_a_reason() -> None:
    est = estimate_next_ttft(
        prefill_line, queued_prefill_tokens=float("nan"), avg_isl_tokens=1, max_num_batched_tokens=8
    )
    assert est.latency_s is None and est.reason == "bad_input"


def _fpm(wall: float, p: int, preq: int, dreq: int, kv: int) -> ForwardPassMetrics:
    s = ScheduledRequestMetrics(
        num_prefill_requests=preq, sum_prefill_tokens=p, num_decode_requests=dreq, sum_decode_kv_tokens=kv
    )
    return ForwardPassMetrics(wall_time=wall, scheduled_requests=s)


def test_model_estimates_use_its_own_averages() -> None:
    # prefill engine: wall = 0.01 + 1e-5 * tokens, each pass one request -> avg ISL = mean(1000..5000) = 3000
    m = OnlineRegression(RegressionConfig(component=Component.PREFILL))
    for t in (1000, 2000, 3000, 4000, 5000):
        m.observe(_fpm(prefill_line([t]), t, 1, 0, 0), now_s=1e6, worker_started_s=0.0)
    # T = 5000 + 3000 = 8000 < 8192: 0.01 + 0.08 = 0.09
    assert m.estimate_next_ttft(
        queued_prefill_tokens=5000, max_num_batched_tokens=8192
    ).latency_s == pytest.approx(0.09)
    assert m.estimate_next_itl(scheduled_kv_tokens=0, queued_kv_tokens=0).reason == "wrong_component"


def test_decode_model_itl() -> None:
    # wall = 0.005 + 1e-4 n + 1e-7 kv; passes (n, kv): avg n = 10, avg len = sum kv / sum n
    rows = [(5, 50000), (10, 100000), (15, 200000), (8, 40000), (12, 130000)]
    m = OnlineRegression(RegressionConfig(component=Component.DECODE))
    for n, kv in rows:
        m.observe(_fpm(0.005 + 1e-4 * n + 1e-7 * kv, 0, 0, n, kv), now_s=1e6, worker_started_s=0.0)
    # avg n = 50 / 5 = 10; avg len = 520000 / 50 = 10400; kv = 60000 + 0 + 10400 = 70400
    # ITL = 0.005 + 1e-4 * 11 + 1e-7 * 70400 = 0.005 + 0.0011 + 0.00704 = 0.01314
    est = m.estimate_next_itl(scheduled_kv_tokens=60000, queued_kv_tokens=0)
    assert est.latency_s == pytest.approx(0.01314)


def test_not_ready_estimate_carries_the_fit_reason() -> None:
    m = OnlineRegression(RegressionConfig(component=Component.PREFILL))
    assert (
        m.estimate_next_ttft(queued_prefill_tokens=0, max_num_batched_tokens=8192).reason == "too_few_samples"
    )
