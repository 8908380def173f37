"""Heartbeats and cold-start passes are never fitted; moving averages."""

from __future__ import annotations

import pytest

from planner_core.regression import Admission, OnlineRegression, RegressionConfig
from planner_proto.engine import Component
from planner_proto.fpm import ForwardPassMetrics, ScheduledRequestMetrics


def _pass(
    wall_s: float, prefill_tokens: int = 1000, prefill_reqs: int = 1, decode_reqs: int = 0, kv: int = 0
) -> ForwardPassMetrics:
    return ForwardPassMetrics(
        worker_id="w0",
        wall_time=wall_s,
        scheduled_requests=ScheduledRequestMetrics(
            num_prefill_requests=prefill_reqs,
            sum_prefill_tokens=prefill_tokens,
            num_decode_requests=decode_reqs,
            sum_decode_kv_tokens=kv,
        ),
    )


@pytest.mark.parametrize(
    ("wall_s", "now_s", "started_s", "expected", "fitted"),
    [
        (0.0, 1000.0, 0.0, Admission.HEARTBEAT, 0),  # idle heartbeat: wall_time 0
        (0.05, 150.0, 100.0, Admission.COLD_START, 0),  # 50 s after start < 120 s
        (0.05, 219.9, 100.0, Admission.COLD_START, 0),  # 119.9 s < 120 s
        (0.05, 220.0, 100.0, Admission.ACCEPTED, 1),  # 120 s: warm
        (0.05, 150.0, None, Admission.ACCEPTED, 1),  # start unknown: no cold-start check
    ],
    ids=["heartbeat", "cold-50s", "cold-119.9s", "warm-120s", "start-unknown"],
)
def test_admission(
    wall_s: float, now_s: float, started_s: float | None, expected: Admission, fitted: int
) -> None:
    model = OnlineRegression(RegressionConfig(component=Component.PREFILL, cold_start_s=120.0))
    assert model.observe(_pass(wall_s), now_s, started_s) is expected
    assert len(model.samples) == fitted
    assert model.counts[expected] == 1


def test_invalid_version_dropped() -> None:
    model = OnlineRegression(RegressionConfig(component=Component.PREFILL))
    assert model.observe(ForwardPassMetrics(version=2, wall_time=0.1), 0.0) is Admission.INVALID


def test_cold_start_passes_do_not_corrupt_the_fit() -> None:
    # a new worker's first passes are 10x slow; excluding them keeps the slope exact
    model = OnlineRegression(RegressionConfig(component=Component.PREFILL, cold_start_s=60.0))
    for i, tokens in enumerate((1000, 2000, 3000, 4000, 5000)):
        model.observe(_pass(10 * (0.01 + 1e-5 * tokens), tokens), now_s=10.0 + i, worker_started_s=0.0)
    for i, tokens in enumerate((1000, 2000, 3000, 4000, 5000)):
        model.observe(_pass(0.01 + 1e-5 * tokens, tokens), now_s=100.0 + i, worker_started_s=0.0)
    fit = model.fit()
    assert fit.coefficients[0] == pytest.approx(1e-5)
    assert model.counts[Admission.COLD_START] == 5


def test_moving_averages() -> None:
    model = OnlineRegression(RegressionConfig(component=Component.AGG, avg_window=3))
    # the first pass falls out of the 3-pass window
    model.observe(_pass(0.1, prefill_tokens=9999, prefill_reqs=1, decode_reqs=9, kv=9999), 0.0)
    model.observe(_pass(0.1, prefill_tokens=3000, prefill_reqs=2, decode_reqs=4, kv=4000), 0.0)
    model.observe(_pass(0.1, prefill_tokens=0, prefill_reqs=0, decode_reqs=6, kv=8000), 0.0)
    model.observe(_pass(0.1, prefill_tokens=1500, prefill_reqs=1, decode_reqs=2, kv=3000), 0.0)
    a = model.averages
    assert a.avg_isl_tokens == pytest.approx(1500.0)  # (3000 + 0 + 1500) / (2 + 0 + 1)
    assert a.avg_decode_length_tokens == pytest.approx(1250.0)  # (4000 + 8000 + 3000) / (4 + 6 + 2)
    assert a.avg_prefill_tokens_per_pass == pytest.approx(1500.0)  # 4500 / 3
    assert a.avg_num_decode_requests == pytest.approx(4.0)  # 12 / 3
