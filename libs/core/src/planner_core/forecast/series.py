"""One forecast series: input cleaning, the chosen model, an upper quantile, and the raw-scale clamp.

Cleaning: NaN/inf and negative values are skipped (counted); leading zeros are skipped until the
first non-zero value (a planner started before its traffic must not learn "zero"). With ``log1p`` the
model sees ``log1p(value)`` and forecasts are mapped back with ``expm1``. The upper quantile is the
mean forecast plus the ``q``-quantile of recent raw-scale one-step residuals (actual - forecast).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from planner_core.forecast.arima import ArimaModel
from planner_core.forecast.auto import AutoModel
from planner_core.forecast.base import OnlineModel
from planner_core.forecast.kalman import KalmanModel
from planner_core.forecast.prophet import ProphetModel
from planner_core.forecast.simple import ConstantModel, HoltModel, MovingAverageModel

MODEL_NAMES = ("constant", "moving_average", "holt", "arima", "kalman", "prophet", "auto")
AUTO_CANDIDATES = ("constant", "moving_average", "holt", "arima", "kalman")


@dataclass(frozen=True)
class ForecastConfig:
    model: str = "auto"
    log1p: bool = False
    upper_quantile: float = 0.9
    residual_window: int = 30
    min_residuals: int = 5
    interval_s: float = 60.0
    ma_window: int = 5
    kalman_q_level: float = 1.0
    kalman_q_trend: float = 0.1
    kalman_r: float = 10.0
    kalman_p0: float = 1000.0
    kalman_min_points: int = 1
    arima_select_every: int = 24
    arima_refit_every: int = 8
    auto_candidates: tuple[str, ...] = AUTO_CANDIDATES
    auto_window: int = 30
    auto_min_scored: int = 3

    def __post_init__(self) -> None:
        if self.model not in MODEL_NAMES:
            raise ValueError(f"model must be one of {', '.join(MODEL_NAMES)}; got {self.model!r}")
        if not 0.0 < self.upper_quantile < 1.0:
            raise ValueError(f"upper_quantile must be in (0, 1), got {self.upper_quantile}")
        if self.interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {self.interval_s}")
        bad = [c for c in self.auto_candidates if c not in MODEL_NAMES or c == "auto"]
        if bad or not self.auto_candidates:
            raise ValueError(f"auto_candidates must be non-empty model names other than 'auto'; bad: {bad}")


def make_model(name: str, cfg: ForecastConfig) -> OnlineModel:
    """Build one model by name. ``prophet`` raises ForecastDependencyError when not installed."""
    match name:
        case "constant":
            return ConstantModel()
        case "moving_average":
            return MovingAverageModel(cfg.ma_window)
        case "holt":
            return HoltModel()
        case "arima":
            return ArimaModel(select_every=cfg.arima_select_every, refit_every=cfg.arima_refit_every)
        case "kalman":
            return KalmanModel(
                cfg.kalman_q_level, cfg.kalman_q_trend, cfg.kalman_r, cfg.kalman_p0, cfg.kalman_min_points
            )
        case "prophet":
            return ProphetModel(cfg.interval_s)
        case "auto":
            return AutoModel(
                [make_model(c, cfg) for c in cfg.auto_candidates], cfg.auto_window, cfg.auto_min_scored
            )
    raise ValueError(f"unknown forecast model {name!r}")


@dataclass(frozen=True)
class Forecast:
    """``mean`` is None when there is no forecast, and ``reason`` says why."""

    mean: float | None
    upper: float | None = None
    model: str = ""
    reason: str = ""


class SeriesForecaster:
    def __init__(self, config: ForecastConfig | None = None) -> None:
        self.config = config or ForecastConfig()
        self.model = make_model(self.config.model, self.config)
        self._started = False
        self._zeros_seen = 0
        self.skipped = 0
        self.used = 0
        self._residuals: deque[float] = deque(maxlen=max(1, self.config.residual_window))

    def update(self, value: float) -> bool:
        """Take one observation; returns False when it was skipped (non-finite, negative, or a
        leading zero)."""
        if not math.isfinite(value) or value < 0:
            self.skipped += 1
            return False
        if not self._started:
            if value == 0:
                self._zeros_seen += 1
                return False
            self._started = True
        mean = self._mean()
        if mean is not None:
            self._residuals.append(value - mean)
        self.model.update(math.log1p(value) if self.config.log1p else value)
        self.used += 1
        return True

    def warm_start(self, values: Iterable[float]) -> int:
        """Feed a history (e.g. a binned trace); returns how many values were used."""
        return sum(self.update(float(v)) for v in values)

    def _mean(self) -> float | None:
        pred = self.model.predict()
        if pred is None or not math.isfinite(pred):
            return None
        if self.config.log1p:
            pred = math.expm1(min(pred, 700.0))
        return max(pred, 0.0)

    @property
    def model_name(self) -> str:
        return self.model.chosen if isinstance(self.model, AutoModel) else self.model.name

    def forecast(self) -> Forecast:
        if not self._started:
            if self._zeros_seen:
                return Forecast(0.0, 0.0, "zeros")
            return Forecast(None, None, "", "no_data")
        mean = self._mean()
        if mean is None:
            return Forecast(None, None, self.model_name, "model_failed")
        upper: float | None = None
        if len(self._residuals) >= self.config.min_residuals:
            q = float(np.quantile(np.fromiter(self._residuals, dtype=np.float64), self.config.upper_quantile))
            upper = max(mean + q, mean)
        return Forecast(mean, upper, self.model_name)
