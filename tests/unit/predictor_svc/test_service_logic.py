"""The predictor's per-interval step without NATS: reasons, warm-up, backtest metric; settings."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from planner_predictor.service import PredictorService
from planner_predictor.settings import PredictorSettings
from planner_predictor.traffic import Observation
from planner_runtime.settings import SettingsError, load_settings


def service(**kw: object) -> PredictorService:
    return PredictorService(msgspec.convert({"model": "constant", **kw}, PredictorSettings))


def test_reasons_and_forecast() -> None:
    svc = service(min_intervals=2)
    assert svc.step(None, 0.0).reason == "no_data"
    fc = svc.step(Observation(10, 100, 20), 60.0)
    assert fc.reason == "warming_up" and fc.num_requests is None
    fc = svc.step(None, 120.0)  # unknown interval: nothing learnt, still warming up
    assert fc.reason == "warming_up"
    fc = svc.step(Observation(12, 110, 22), 180.0)
    assert fc.reason == "" and (fc.num_requests, fc.mean_isl_tokens, fc.mean_osl_tokens) == (12, 110, 22)
    assert fc.issued_at_s == fc.for_start_s == 180.0 and fc.interval_s == 60.0
    svc.step(Observation(15, 110, 22), 240.0)  # forecast was 12, came 15: 20 % off
    assert svc.registry.get_sample_value("planner_forecast_abs_pct_error", {"series": "requests"}) == (
        pytest.approx(20.0)
    )
    assert svc.registry.get_sample_value("planner_forecast_requests") == 15.0


def test_zero_traffic_forecasts_zero() -> None:
    svc = service(min_intervals=1)
    svc.step(Observation(10, 100, 20), 0.0)
    fc = svc.step(Observation(0, None, None), 60.0)
    assert fc.num_requests == 0.0 and fc.mean_isl_tokens == 100.0


def test_warm_start_trace_counts_toward_warm_up(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(f'{{"timestamp": {k * 1000}, "input_length": 50, "output_length": 5}}\n' for k in range(300))
    )
    s = load_settings(
        PredictorSettings, flags={"warm_start": str(trace), "model": "constant", "interval_s": 60}, env={}
    )
    from planner_predictor.warm import warm_start

    svc = PredictorService(s)
    assert warm_start(svc.forecaster, s.warm_start) == 5
    fc = svc.step(None, 0.0)
    assert fc.reason == "" and fc.num_requests == 60.0 and fc.mean_isl_tokens == 50.0


def test_settings_validation(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="warm_start"):
        load_settings(PredictorSettings, flags={"warm_start": str(tmp_path / "missing.csv")}, env={})
    with pytest.raises(SettingsError, match="model"):
        load_settings(PredictorSettings, flags={"model": "magic"}, env={})
    with pytest.raises(SettingsError, match="prometheus_model"):
        load_settings(PredictorSettings, flags={"prometheus_model": 'a"b'}, env={})
    s = load_settings(
        PredictorSettings, flags={"prometheus_model": "llama", "auto_candidates": "holt,kalman"}, env={}
    )
    assert s.label_filters() == {"model": "llama"}
    assert s.forecast_config().auto_candidates == ("holt", "kalman")
    assert PredictorSettings().model == "auto" and PredictorSettings().interval_s == 60.0
