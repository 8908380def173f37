"""Input cleaning, upper quantile, auto selection and the LoadForecast wrapper."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner_core.forecast import (
    AutoModel,
    ConstantModel,
    ForecastConfig,
    LoadForecaster,
    MovingAverageModel,
    SeriesForecaster,
)
from planner_proto.traffic import LoadForecast, TrafficSample

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(
    ("values", "mean", "reason", "used"),
    [
        ([], None, "no_data", 0),
        ([NAN, NAN, NAN], None, "no_data", 0),  # NaN only: nothing usable
        ([NAN, INF, -INF, -3.0], None, "no_data", 0),  # non-finite and negative are skipped
        ([0.0, 0.0], 0.0, "", 0),  # only zeros so far: zero traffic, not "no data"
        ([0.0, 0.0, 0.0, 5.0, NAN, 7.0], 7.0, "", 2),  # leading zeros and NaN skipped; last value 7
    ],
    ids=["empty", "nan-only", "non-finite", "zeros-only", "leading-zeros"],
)
def test_cleaning(values: list[float], mean: float | None, reason: str, used: int) -> None:
    f = SeriesForecaster(ForecastConfig(model="constant"))
    f.warm_start(values)
    fc = f.forecast()
    assert (fc.mean, fc.reason, f.used) == (mean, reason, used)


def test_zero_after_start_is_data() -> None:
    f = SeriesForecaster(ForecastConfig(model="constant"))
    f.warm_start([4.0, 0.0])
    assert f.forecast().mean == 0.0


def test_upper_quantile_from_residuals() -> None:
    # constant model on 10, 20, 10, 20, ...: residuals (actual - last) alternate +10, -10.
    # After 10 values: 9 residuals = five +10 and four -10 (the first step forecasts 10 -> 20 = +10).
    # 0.9-quantile of {-10 x4, +10 x5} = +10, so upper = last (20) + 10 = 30.
    f = SeriesForecaster(ForecastConfig(model="constant", upper_quantile=0.9, min_residuals=5))
    f.warm_start([10.0, 20.0] * 5)
    fc = f.forecast()
    assert fc.mean == 20.0
    assert fc.upper == pytest.approx(30.0)


def test_no_upper_before_enough_residuals() -> None:
    f = SeriesForecaster(ForecastConfig(model="constant", min_residuals=5))
    f.warm_start([1.0, 2.0, 3.0])  # two residuals < 5
    assert f.forecast().upper is None


@pytest.mark.parametrize(
    ("series", "winner"),
    [
        # ramp: last value is off by 10 each step, MA(4) by 25 -> constant
        ([10.0 * i for i in range(1, 21)], "constant"),
        # alternating 10/30: last value is off by 20, MA(4) = 20 is off by 10 -> moving_average
        ([10.0, 30.0] * 10, "moving_average"),
    ],
    ids=["ramp-picks-constant", "alternating-picks-ma"],
)
def test_auto_picks_the_better_model(series: list[float], winner: str) -> None:
    auto = AutoModel([ConstantModel(), MovingAverageModel(window=4)], window=6, min_scored=3)
    for v in series:
        auto.update(v)
    assert auto.chosen == winner
    errors = auto.recent_errors()
    assert errors[winner] == min(errors.values())


def test_auto_default_candidates_beat_last_value_on_a_trend() -> None:
    # a clean ramp: trend models forecast the next step; auto must not stay on a worse model
    f = SeriesForecaster(ForecastConfig(model="auto", auto_candidates=("constant", "holt", "kalman")))
    f.warm_start([100.0 + 5.0 * i for i in range(30)])
    fc = f.forecast()
    assert fc.model in ("holt", "kalman")
    assert fc.mean == pytest.approx(250.0, abs=1.0)  # next ramp value 100 + 5 * 30


def test_log1p_option_is_back_transformed() -> None:
    f = SeriesForecaster(ForecastConfig(model="constant", log1p=True))
    f.warm_start([3.0, 99.0])
    assert f.forecast().mean == pytest.approx(99.0)


def test_load_forecast_message() -> None:
    lf = LoadForecaster(ForecastConfig(model="constant", interval_s=60.0))
    # warm start with an empty (NaN-mean) interval in the middle
    lf.warm_start(
        np.array([0.0, 10.0, 0.0, 12.0]),
        np.array([NAN, 1000.0, NAN, 1200.0]),
        np.array([NAN, 100.0, NAN, 80.0]),
    )
    # a 30 s sample of 9 requests counts as 18 per 60 s
    lf.observe(
        TrafficSample(namespace="ns", start_s=240.0, interval_s=30.0, num_requests=9, mean_isl_tokens=900.0)
    )
    fc = lf.forecast(namespace="ns", now_s=270.0, for_start_s=300.0)
    assert isinstance(fc, LoadForecast)
    assert (fc.num_requests, fc.mean_isl_tokens, fc.mean_osl_tokens) == (18.0, 900.0, 80.0)
    assert fc.reason == "" and fc.model == "constant" and fc.interval_s == 60.0


def test_load_forecast_without_data_says_why() -> None:
    lf = LoadForecaster()
    lf.warm_start([NAN, NAN], [NAN, NAN], [NAN, NAN])
    fc = lf.forecast(namespace="ns", now_s=0.0)
    assert fc.num_requests is None and fc.reason == "count:no_data"


def test_warm_start_lengths_must_match() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        LoadForecaster().warm_start([1.0], [1.0, 2.0], [1.0])
