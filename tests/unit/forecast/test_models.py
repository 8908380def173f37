"""Each model on small series with known answers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner_core.forecast import (
    ArimaModel,
    ForecastConfig,
    ForecastDependencyError,
    KalmanModel,
    MovingAverageModel,
    ProphetModel,
    SeriesForecaster,
    prophet_available,
)

MODELS = ["constant", "moving_average", "holt", "arima", "kalman", "auto"]


@pytest.mark.parametrize("model", MODELS, ids=MODELS)
@pytest.mark.parametrize("log1p", [False, True], ids=["raw", "log1p"])
def test_constant_series_forecasts_itself(model: str, log1p: bool) -> None:
    f = SeriesForecaster(ForecastConfig(model=model, log1p=log1p))
    f.warm_start([42.0] * 12)
    fc = f.forecast()
    assert fc.mean == pytest.approx(42.0, rel=1e-6)
    assert fc.reason == ""
    # residuals were all 0 once the model had the value: upper = mean
    assert fc.upper == pytest.approx(42.0, rel=1e-6)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([10.0], 10.0),  # one value: the mean is it
        ([10.0, 20.0, 30.0], 20.0),  # (10 + 20 + 30) / 3
        ([10.0, 20.0, 30.0, 40.0], 30.0),  # window 3 keeps 20, 30, 40 -> 30
    ],
    ids=["one", "three", "window-slides"],
)
def test_moving_average(values: list[float], expected: float) -> None:
    m = MovingAverageModel(window=3)
    for v in values:
        m.update(v)
    assert m.predict() == pytest.approx(expected)


def test_kalman_first_steps() -> None:
    # x0 = [10, 0], P0 = 1000 I. Predict: P = F P F' + Q = [[2001, 1000], [1000, 1000.1]]; S = 2011;
    # K = [2001, 1000] / 2011; innovation 20 - 10 = 10 -> level 10 + 10*2001/2011, trend 10*1000/2011;
    # next = level + trend = 10 + 10 * 3001 / 2011 = 24.9229...
    k = KalmanModel()
    k.update(10.0)
    assert k.predict() == pytest.approx(10.0)
    k.update(20.0)
    assert k.predict() == pytest.approx(10.0 + 10.0 * 3001.0 / 2011.0)


@pytest.mark.parametrize(
    "series",
    [[100.0, 80.0, 60.0, 40.0, 20.0, 0.0, 0.0], [500.0, 1.0, 0.0, 0.0, 0.0], [0.0, 1000.0, 0.0]],
    ids=["steady-fall", "cliff", "spike"],
)
def test_kalman_not_negative_on_falls(series: list[float]) -> None:
    k = KalmanModel()
    for v in series:
        k.update(v)
        pred = k.predict()
        assert pred is not None and pred >= 0.0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(min_value=0.0, max_value=1e6, allow_nan=False), min_size=1, max_size=40),
    st.floats(min_value=0.0, max_value=10.0),
    st.floats(min_value=0.01, max_value=100.0),
)
def test_kalman_never_negative(values: list[float], q_level: float, r: float) -> None:
    k = KalmanModel(q_level=q_level, r=r)
    for v in values:
        k.update(v)
        pred = k.predict()
        assert pred is not None and pred >= 0.0 and math.isfinite(pred)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([5.0, 9.0], 9.0),  # under 5 points: last value
        ([3.0, 1.0, 4.0, 1.0], 1.0),
        ([7.0] * 8, 7.0),  # a constant series: that value
    ],
    ids=["2-points", "4-points", "constant"],
)
def test_arima_reference_rules(values: list[float], expected: float) -> None:
    m = ArimaModel()
    for v in values:
        m.update(v)
    assert m.predict() == pytest.approx(expected)
    assert m.order is None


def test_arima_fits_and_clamps() -> None:
    m = ArimaModel()
    for v in [50.0, 40.0, 30.0, 22.0, 15.0, 9.0, 5.0, 2.0, 1.0, 0.0, 0.0, 0.0]:
        m.update(v)
        pred = m.predict()
        assert pred is not None and pred >= 0.0
    assert m.order is not None


def test_prophet_absent_raises_a_clear_error() -> None:
    if prophet_available():
        pytest.skip("prophet is installed")
    with pytest.raises(ForecastDependencyError, match=r"planner-core\[prophet\]"):
        ProphetModel()
    with pytest.raises(ForecastDependencyError):
        SeriesForecaster(ForecastConfig(model="prophet"))


def test_prophet_forecasts_when_installed() -> None:
    if not prophet_available():
        pytest.skip("prophet is not installed")
    trend = SeriesForecaster(ForecastConfig(model="prophet"))
    trend.warm_start([10.0 + 2 * i for i in range(16)])
    fc = trend.forecast()
    assert fc.model == "prophet" and fc.mean == pytest.approx(42.0, abs=2.0)  # the next step of the line
    assert fc.upper is not None and fc.upper >= fc.mean
    flat = SeriesForecaster(ForecastConfig(model="prophet"))
    flat.warm_start([20.0] * 12)
    assert flat.forecast().mean == pytest.approx(20.0, abs=1.0)


def test_unknown_model_named_in_error() -> None:
    with pytest.raises(ValueError, match="model must be one of"):
        ForecastConfig(model="lstm")
