"""Forecasting, two kinds, both run by the predictor service:

- load forecasting (:class:`LoadForecaster`): request counts and mean lengths one interval ahead,
  online one-step-ahead models by name (:data:`MODEL_NAMES`), automatic model choice, upper quantiles;
  the reference policies' throughput sizing and zero-traffic detection read it;
- demand forecasting (:mod:`planner_core.forecast.demand`, models by name in :data:`DEMAND_MODELS`):
  prompt and output tokens/s of every sample to the startup lead, as scenarios of measured errors;
  the predictive floor sizes the fleet for it.
"""

from planner_core.forecast.arima import ArimaModel
from planner_core.forecast.auto import AutoModel
from planner_core.forecast.base import ForecastDependencyError, OnlineModel
from planner_core.forecast.demand import (
    DEMAND_MODELS,
    DemandForecaster,
    DemandState,
    HorizonDemand,
    make_demand_forecaster,
)
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
    "DEMAND_MODELS",
    "MODEL_NAMES",
    "ArimaModel",
    "AutoModel",
    "ConstantModel",
    "DemandForecaster",
    "DemandState",
    "Forecast",
    "ForecastConfig",
    "ForecastDependencyError",
    "HoltModel",
    "HorizonDemand",
    "KalmanModel",
    "LoadForecaster",
    "MovingAverageModel",
    "OnlineModel",
    "ProphetModel",
    "SeriesForecaster",
    "make_demand_forecaster",
    "make_model",
    "prophet_available",
]
