"""Load forecasting: online one-step-ahead models, automatic model choice, upper quantiles."""

from planner_core.forecast.arima import ArimaModel
from planner_core.forecast.auto import AutoModel
from planner_core.forecast.base import ForecastDependencyError, OnlineModel
from planner_core.forecast.kalman import KalmanModel
from planner_core.forecast.load import LoadForecaster
from planner_core.forecast.prophet import ProphetModel, prophet_available
from planner_core.forecast.series import (
    AUTO_CANDIDATES,
    MODEL_NAMES,
    Forecast,
    ForecastConfig,
    SeriesForecaster,
    make_model,
)
from planner_core.forecast.simple import ConstantModel, HoltModel, MovingAverageModel

__all__ = [
    "AUTO_CANDIDATES",
    "MODEL_NAMES",
    "ArimaModel",
    "AutoModel",
    "ConstantModel",
    "Forecast",
    "ForecastConfig",
    "ForecastDependencyError",
    "HoltModel",
    "KalmanModel",
    "LoadForecaster",
    "MovingAverageModel",
    "OnlineModel",
    "ProphetModel",
    "SeriesForecaster",
    "make_model",
    "prophet_available",
]
