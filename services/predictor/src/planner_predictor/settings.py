"""Settings of the predictor service (one frozen struct, validated once at start)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, cast

import msgspec
from msgspec import Meta

from planner_core.forecast import AUTO_CANDIDATES, ForecastConfig, prophet_available
from planner_runtime.settings import BaseSettings

ModelName = Literal["constant", "moving_average", "holt", "arima", "kalman", "prophet", "auto"]
LabelValue = Annotated[str, Meta(pattern=r'^[^"\\\n]*$')]


def _auto_candidates() -> list[ModelName]:
    return [cast("ModelName", name) for name in AUTO_CANDIDATES]


class PredictorSettings(BaseSettings, frozen=True, kw_only=True):
    """Predictor service: forecasts next-interval request count, mean ISL and mean OSL."""

    source: Literal["nats", "prometheus"] = "nats"
    """Where traffic comes from: TrafficSample on NATS, or PromQL over the frontend histograms."""
    interval_s: Annotated[float, Meta(gt=0.0, le=86_400.0)] = 60.0
    """Forecast interval: one observation and one LoadForecast per interval."""
    model: ModelName = "auto"
    """``auto`` backtests constant, moving average, Holt, ARIMA and Kalman online and uses the one with
    the lowest recent one-step error (the reference always uses ARIMA)."""
    auto_candidates: list[ModelName] = msgspec.field(default_factory=_auto_candidates)
    """Models ``auto`` backtests and chooses from (drop ``arima`` to save CPU on long warm starts)."""
    log1p: bool = False
    """Model the series on a log1p scale (multiplicative noise, bursty traffic)."""
    upper_quantile: Annotated[float, Meta(gt=0.0, lt=1.0)] = 0.9
    min_intervals: Annotated[int, Meta(ge=1, le=10_000)] = 2
    """Intervals observed (warm start included) before a forecast is published; before that the
    forecast says ``warming_up``. The first interval after a start is often partial."""
    warm_start: str = ""
    """Trace file (Azure CSV or Mooncake JSONL) binned per interval and fed before live traffic."""
    prometheus_url: str = "http://127.0.0.1:9090"
    prometheus_timeout_s: Annotated[float, Meta(gt=0.0, le=300.0)] = 5.0
    metric_prefix: Annotated[str, Meta(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")] = "dynamo_frontend"
    prometheus_model: LabelValue = ""
    """Only series with this ``model`` label (empty: all)."""
    prometheus_dynamo_namespace: LabelValue = ""
    """Only series with this ``dynamo_namespace`` label (empty: all)."""
    publish_traffic: bool = True
    """With the Prometheus source, also publish each interval's TrafficSample on NATS (for the decider)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.warm_start and not Path(self.warm_start).is_file():
            raise ValueError(f"warm_start: no such file {self.warm_start!r}")
        if self.warm_start and Path(self.warm_start).suffix.lower() not in (".csv", ".jsonl", ".json"):
            raise ValueError("warm_start: expected an Azure .csv or a Mooncake .jsonl trace")
        if not self.auto_candidates or "auto" in self.auto_candidates:
            raise ValueError("auto_candidates: name one or more models other than auto")
        if "prophet" in (self.model, *self.auto_candidates) and not prophet_available():
            raise ValueError("model: prophet is not installed (install the optional prophet extra)")
        if self.source == "prometheus" and not self.prometheus_url.startswith(("http://", "https://")):
            raise ValueError(
                f"prometheus_url must start with http:// or https://, got {self.prometheus_url!r}"
            )

    def forecast_config(self) -> ForecastConfig:
        return ForecastConfig(
            model=self.model,
            log1p=self.log1p,
            upper_quantile=self.upper_quantile,
            interval_s=self.interval_s,
            auto_candidates=tuple(self.auto_candidates),
        )

    def label_filters(self) -> dict[str, str]:
        out = {}
        if self.prometheus_model:
            out["model"] = self.prometheus_model
        if self.prometheus_dynamo_namespace:
            out["dynamo_namespace"] = self.prometheus_dynamo_namespace
        return out
