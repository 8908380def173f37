"""Throughput (SLA) policy: replicas from forecast load and profile capacity, correction factors."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from planner_core.policy import (
    Corrections,
    PolicyConfig,
    throughput_policy,
    update_corrections,
)
from planner_core.policy.throughput import forecast_count, with_tolerance
from planner_proto.decision import Reason
from planner_proto.traffic import LoadForecast, TrafficSample
from tests.unit.policy.factories import capacity

EXACT = PolicyConfig(tolerance=0.0, decode_max_utilisation=1.0)
REF = PolicyConfig(reference_compat=True)
"""The reference formulas: interpolated profile throughput, no prefill headroom, no tolerance."""
NO_SMOOTH = PolicyConfig(correction_smoothing=1.0, correction_max_step=100.0)


CAP = capacity(max_kv_tokens=100_000)


def fc(
    num: float | None, isl: float | None = 3000.0, osl: float | None = 1000.0, upper: float | None = None
) -> LoadForecast:
    return LoadForecast(
        namespace="t",
        issued_at_s=0.0,
        for_start_s=0.0,
        interval_s=180.0,
        num_requests=num,
        mean_isl_tokens=isl,
        mean_osl_tokens=osl,
        num_requests_upper=upper,
    )


@pytest.mark.parametrize(
    ("forecast", "corr", "cfg", "expected"),
    [
        # prefill: 1800 req/180 s = 10 req/s * 3000 tok = 30000 tok/s / 28000 tok/s/GPU -> ceil(1.07) = 2
        # decode: 10 req/s * 1000 tok = 10000 tok/s / 4000 (ITL 50 ms at kv 1.0) -> ceil(2.5) = 3
        # (all rows: reference_compat, i.e. the profiled throughput interpolated, no prefill headroom)
        (fc(1800), Corrections(), REF, (2, 3)),
        # prefill correction 0.5: 30000 * 0.5 = 15000 / 28000 -> ceil(0.54) = 1
        (fc(1800), Corrections(prefill=0.5), REF, (1, 3)),
        # prefill correction 2 is capped by min(1, corr): 30000 / 28000 -> 2
        (fc(1800), Corrections(prefill=2.0), REF, (2, 3)),
        # decode correction 2: ITL 50/2 = 25 ms -> kv cell 37/99 -> 4000*0.3737 = 1495 tok/s/GPU;
        # 10000 / 1495 -> ceil(6.69) = 7
        (fc(1800), Corrections(decode=2.0), REF, (2, 7)),
        # no-correction flag ignores both factors
        (fc(1800), Corrections(prefill=0.5, decode=2.0), replace(REF, use_correction=False), (2, 3)),
        # 2 GPUs per engine: 1.07 / 2 -> 1 prefill; 2.5 / 2 -> ceil(1.25) = 2 decode
        (fc(1800), Corrections(), replace(REF, gpus_per_prefill=2, gpus_per_decode=2), (1, 2)),
        # tiny load: 18 req -> 300 tok/s / 28000 -> ceil(0.01) = 1, min replicas 1
        (fc(18), Corrections(), REF, (1, 1)),
        # min replicas 2 raises both
        (fc(18), Corrections(), replace(REF, min_replicas=2), (2, 2)),
    ],
    ids=[
        "base",
        "prefill_corr_below_1",
        "prefill_corr_capped_at_1",
        "decode_corr_tightens_itl",
        "no_correction",
        "two_gpus_per_engine",
        "tiny_load_min_1",
        "min_replicas_2",
    ],
)
def test_throughput_replicas(
    forecast: LoadForecast, corr: Corrections, cfg: PolicyConfig, expected: tuple[int, int]
) -> None:
    res = throughput_policy(forecast, CAP, corr, {"prefill": 1, "decode": 1}, cfg)
    assert (res.components["prefill"].target, res.components["decode"].target) == expected


@pytest.mark.parametrize(
    ("corr", "cfg", "expected"),
    [
        # prefill: 30000 tok/s / 28000 / utilisation 0.6 = 1.786 -> 2
        # decode: throughput from the ITL grid at context 3500 (cell 62 -> 3505.05 tokens): kv 1.0 has
        #   ITL 50.00000001 > 50, so cell 98/99 = 0.9899: ITL 10 + 40 * 0.9899 = 49.596 ms, requests
        #   0.9899 * 100000 / 3505.05 = 28.242 -> 28.242 / 0.049596 = 569.4 tok/s/GPU;
        #   10000 / 569.4 = 17.56 -> 18 (the reference's interpolated 3960 would give 3)
        (Corrections(), EXACT, (2, 18)),
        # decode correction 2: ITL 25 ms -> cell 37/99 = 0.3737: ITL 24.95 ms, requests 10.662
        #   -> 427.4 tok/s/GPU; 10000 / 427.4 = 23.4 -> 24
        (Corrections(decode=2.0), EXACT, (2, 24)),
        # utilisation 1.0: prefill 30000 / 28000 = 1.07 -> 2 still; 0.5: 2.14 -> 3
        (Corrections(), replace(EXACT, prefill_max_utilisation=0.5), (3, 18)),
        # decode utilisation 0.8: 17.56 / 0.8 = 21.95 -> 22
        (Corrections(), replace(EXACT, decode_max_utilisation=0.8), (2, 22)),
    ],
    ids=["derived_decode_thpt", "derived_with_decode_corr", "prefill_headroom_half", "decode_headroom"],
)
def test_throughput_replicas_ours(corr: Corrections, cfg: PolicyConfig, expected: tuple[int, int]) -> None:
    res = throughput_policy(fc(1800), CAP, corr, {"prefill": 1, "decode": 1}, cfg)
    assert (res.components["prefill"].target, res.components["decode"].target) == expected


@pytest.mark.parametrize(
    ("forecast", "cfg", "reason", "target"),
    [
        (fc(0), EXACT, Reason.ZERO_TRAFFIC, 1),  # ours: zero traffic is data -> the minimum
        (fc(0), replace(EXACT, reference_compat=True), Reason.INSUFFICIENT_DATA, None),  # reference skips
        (fc(None), EXACT, Reason.INSUFFICIENT_DATA, None),
        (fc(1800, isl=None), EXACT, Reason.INSUFFICIENT_DATA, None),
        (fc(math.nan), EXACT, Reason.INSUFFICIENT_DATA, None),
        (fc(math.inf), EXACT, Reason.INSUFFICIENT_DATA, None),
        (fc(-5.0), EXACT, Reason.ZERO_TRAFFIC, 1),  # a negative forecast (Kalman, its issue 14493) is zero
        (None, EXACT, Reason.INSUFFICIENT_DATA, None),
    ],
    ids=[
        "zero_traffic",
        "zero_traffic_reference_skips",
        "no_count",
        "no_isl",
        "nan",
        "inf",
        "negative",
        "no_forecast",
    ],
)
def test_throughput_invalid_or_zero(
    forecast: LoadForecast | None, cfg: PolicyConfig, reason: Reason, target: int | None
) -> None:
    res = throughput_policy(forecast, CAP, Corrections(), {"prefill": 3, "decode": 3}, cfg)
    for comp in ("prefill", "decode"):
        assert res.components[comp].reason is reason
        assert res.components[comp].target == target


@pytest.mark.parametrize(
    ("need", "current", "tol", "expected"),
    [
        (1.07, 1, 0.1, 1),  # 1.07 <= 1 * 1.1: inside the dead-band, stay
        (1.2, 1, 0.1, 2),  # 1.2 > 1.1: up to ceil(1.2) = 2
        (2.95, 4, 0.1, 4),  # ceil(2.95 * 1.1 = 3.245) = 4: stay
        (2.5, 4, 0.1, 3),  # ceil(2.5 * 1.1 = 2.75) = 3
        (1.07, 1, 0.0, 2),  # no tolerance: plain ceil
    ],
    ids=["up_inside_band", "up_outside_band", "down_inside_band", "down_outside_band", "no_tolerance"],
)
def test_tolerance(need: float, current: int, tol: float, expected: int) -> None:
    assert with_tolerance(need, current, tol) == expected


def traffic(**kw: float | None) -> TrafficSample:
    base: dict[str, float | None] = dict(
        num_requests=1800.0,
        mean_isl_tokens=3000.0,
        mean_osl_tokens=1000.0,
        mean_ttft_ms=214.28571,
        mean_itl_ms=60.0,
        mean_request_duration_s=20.0,
    )
    base.update(kw)
    return TrafficSample(namespace="t", start_s=0.0, interval_s=180.0, **base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sample", "cfg", "expected"),
    [
        # prefill: observed 214.3 ms / interpolated 3000/28 = 107.1 ms -> 2.0
        # decode: concurrency 1800 req / 2 engines * 20 s / 180 s = 100; kv = 100 * 3500 / 100000 = 3.5
        #   -> clamped to the grid edge kv 1.0 -> ITL 50 ms; observed 60 / 50 -> 1.2 (no smoothing)
        (traffic(), NO_SMOOTH, (2.0, 1.2)),
        # ours by default: EMA 0.5 from (1.5, 0.7): 1.5 + 0.5 * 0.5 = 1.75; 0.7 + 0.5 * 0.5 = 0.95
        (traffic(), PolicyConfig(), (1.75, 0.95)),
        # EMA 0.5 towards 10 (clamped 200): 1.5 + 0.5 * 8.5 = 5.75, step limit 1.5 * 1.5 = 2.25
        (traffic(mean_ttft_ms=21428.571), PolicyConfig(), (2.25, 0.95)),
        # the step limit alone (no EMA): 0.7 -> 1.2 is capped at 0.7 * 1.5 = 1.05
        (traffic(), replace(NO_SMOOTH, correction_max_step=1.5), (2.0, 1.05)),
        # NaN / missing observations keep the previous factors
        (traffic(mean_ttft_ms=None, mean_itl_ms=math.nan), PolicyConfig(), (1.5, 0.7)),
        # ours clamps to [0.1, 10]: 214.3 * 100 / 107.1 = 200 -> 10
        (traffic(mean_ttft_ms=21428.571), NO_SMOOTH, (10.0, 1.2)),
        # reference keeps the raw value
        (traffic(mean_ttft_ms=21428.571), PolicyConfig(reference_compat=True), (200.0, 1.2)),
        # no-correction flag -> 1, 1
        (traffic(), PolicyConfig(use_correction=False), (1.0, 1.0)),
    ],
    ids=[
        "observed",
        "smoothed",
        "smoothed_step_limited",
        "step_limited",
        "missing_keeps_previous",
        "clamped",
        "reference_unclamped",
        "disabled",
    ],
)
def test_corrections(sample: TrafficSample, cfg: PolicyConfig, expected: tuple[float, float]) -> None:
    got = update_corrections(Corrections(prefill=1.5, decode=0.7), sample, CAP, 2, cfg)
    assert (got.prefill, got.decode) == pytest.approx(expected, rel=1e-4)


def test_corrections_frozen_while_scaling() -> None:
    got = update_corrections(
        Corrections(prefill=1.5, decode=0.7), traffic(), CAP, 2, NO_SMOOTH, frozenset({"decode"})
    )
    assert (got.prefill, got.decode) == pytest.approx((2.0, 0.7), rel=1e-4)


@pytest.mark.parametrize(
    ("forecast", "prev", "cfg", "expected"),
    [
        (fc(1000), None, PolicyConfig(), 1000.0),
        # rising 800 -> 1000 over 180 s = 1.11 req/s^2 * startup 120 s = +133.3 -> 1133.3
        (fc(1000), 800.0, PolicyConfig(), 1000 + 200 / 180 * 120),
        (fc(1000), 1200.0, PolicyConfig(), 1000.0),  # falling trend: not extrapolated
        (fc(1000), 800.0, PolicyConfig(reference_compat=True), 1000.0),
        (fc(1000, upper=1300), None, PolicyConfig(use_forecast_upper=True), 1300.0),
        (fc(1000, upper=1300), None, PolicyConfig(), 1000.0),  # upper ignored unless configured
    ],
    ids=["plain", "startup_horizon", "falling", "reference_no_horizon", "upper_quantile", "upper_off"],
)
def test_forecast_count(
    forecast: LoadForecast, prev: float | None, cfg: PolicyConfig, expected: float
) -> None:
    count, _ = forecast_count(forecast, cfg, prev, 0.0 if prev is not None else None, 180.0)
    assert count == pytest.approx(expected)
