"""Settings of the predictor service (one frozen struct, validated once at start)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, cast

import msgspec
from msgspec import Meta

from planner_core.forecast import AUTO_CANDIDATES, DEMAND_MODELS, ForecastConfig, prophet_available
from planner_core.forecast.horizon import HorizonConfig
from planner_predictor.prometheus import series_map
from planner_runtime.settings import LeaseSettings

ModelName = Literal["constant", "moving_average", "holt", "arima", "kalman", "prophet", "auto"]
LabelValue = Annotated[str, Meta(pattern=r'^[^"\\\n]*$')]


def _auto_candidates() -> list[ModelName]:
    return [cast("ModelName", name) for name in AUTO_CANDIDATES]


class PredictorSettings(LeaseSettings, frozen=True, kw_only=True):
    """Predictor service: forecasts the demand the fleet is sized for (prompt and output tokens/s to
    the startup lead, as scenarios) and next-interval request count, mean ISL and mean OSL."""

    source: Literal["nats", "prometheus", "engines"] = "nats"
    """Where traffic comes from: TrafficSample on NATS (loadgen, a frontend), PromQL over the
    frontend's or the engines' series (``prometheus_series``), or ``engines``: the scraped engines' own
    counters (WorkerLoadSample from the relays' scrape adapters; requests finished, prompt and
    generated tokens, the length histograms) summed over the fleet, for a stock fleet with no
    frontend and no Prometheus. Explicit, never automatic: with a loadgen or frontend also
    publishing, the same requests would be counted twice."""
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
    prometheus_series: Literal["dynamo", "vllm", "sglang", "llamacpp"] = "dynamo"
    """Whose series the Prometheus source reads: ``dynamo`` (a Dynamo frontend or our loadgen,
    ``{metric_prefix}_requests_total`` and the ``_input_sequence_tokens``... histograms) or an engine's
    own: ``vllm`` (``vllm:request_success_total``, ``vllm:request_prompt_tokens``,
    ``vllm:request_generation_tokens``, ``vllm:time_to_first_token_seconds``,
    ``vllm:inter_token_latency_seconds``), ``sglang`` (``sglang:num_requests_total``, the token
    histograms or counters, ``sglang:time_to_first_token_seconds``...). ``llamacpp`` is refused:
    llama-server counts no requests (use ``source: engines`` alongside engines that do)."""
    metric_prefix: Annotated[str, Meta(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")] = "dynamo_frontend"
    """Prefix of the Dynamo frontend's series (``prometheus_series: dynamo`` only)."""
    prometheus_model: LabelValue = ""
    """Only series of this model (label ``model`` on a frontend, ``model_name`` on vLLM and SGLang;
    empty: all)."""
    prometheus_dynamo_namespace: LabelValue = ""
    """Only series with this ``dynamo_namespace`` label (frontend series only; empty: all)."""
    demand_model: str = "horizon"
    """The demand forecaster (``horizon``: damped trends, a season, and the forecast errors measured
    at the startup lead), or ``none`` to publish no demand forecast (the decider's predictive floor
    then sizes nothing and the throughput floor stands in)."""
    startup_s: Annotated[float, Meta(ge=0.0, le=86_400.0)] = 120.0
    """The workers' startup time, as the decider's ``startup_s``: the demand forecast reaches the
    first traffic sample a worker ordered now can serve, and its errors are measured at that lead."""
    demand_history_samples: Annotated[int, Meta(ge=16, le=100_000)] = 720
    """Traffic samples the demand forecaster keeps to find a season (720: 6 h of 30 s samples; a daily
    season needs 1.5 days of them)."""
    demand_errors_kept: Annotated[int, Meta(ge=12, le=10_000)] = 240
    """Forecast errors at the lead kept as the demand's scenarios (the latest ones)."""
    state_save_interval_s: Annotated[float, Meta(gt=0.0, le=86_400.0)] = 30.0
    """How often the active predictor saves what the demand forecaster learned (KV planner_state,
    ``{ns}.predictor.demand_state``)."""
    state_max_age_s: Annotated[float, Meta(ge=0.0)] = 900.0
    """A newly active predictor starts from the saved demand state when it is at most this old (0:
    always start cold)."""
    publish_traffic: bool = True
    """With the Prometheus or engines source, also publish each interval's TrafficSample on NATS (for
    the decider's floor)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.warm_start and not Path(self.warm_start).is_file():
            raise ValueError(f"warm_start: no such file {self.warm_start!r}")
        if self.warm_start and Path(self.warm_start).suffix.lower() not in (".csv", ".jsonl", ".json"):
            raise ValueError("warm_start: expected an Azure .csv or a Mooncake .jsonl trace")
        if self.demand_model != "none" and self.demand_model not in DEMAND_MODELS:
            raise ValueError(
                f"demand_model: unknown {self.demand_model!r} (known: {', '.join(sorted(DEMAND_MODELS))},"
                " none)"
            )
        if not self.auto_candidates or "auto" in self.auto_candidates:
            raise ValueError("auto_candidates: name one or more models other than auto")
        if "prophet" in (self.model, *self.auto_candidates) and not prophet_available():
            raise ValueError("model: prophet is not installed (install the optional prophet extra)")
        if self.source == "prometheus" and not self.prometheus_url.startswith(("http://", "https://")):
            raise ValueError(
                f"prometheus_url must start with http:// or https://, got {self.prometheus_url!r}"
            )
        if self.source == "prometheus" and self.prometheus_series == "llamacpp":
            raise ValueError(
                "prometheus_series: llamacpp exports no request counter (only prompt and generated"
                " token counters), so PromQL cannot count its requests; use source: engines (requests"
                " estimated from prompt tokens over the ISL of engines that count them) or a"
                " frontend's series (dynamo)"
            )
        if self.prometheus_series != "dynamo" and self.prometheus_dynamo_namespace:
            raise ValueError("prometheus_dynamo_namespace applies only to prometheus_series: dynamo")

    def forecast_config(self) -> ForecastConfig:
        return ForecastConfig(
            model=self.model,
            log1p=self.log1p,
            upper_quantile=self.upper_quantile,
            interval_s=self.interval_s,
            auto_candidates=tuple(self.auto_candidates),
        )

    def horizon_config(self) -> HorizonConfig:
        """The demand forecaster's configuration: the kept history and errors are settings; its
        smoothing, damping and season constants are the forecaster's own (:class:`HorizonConfig`)."""
        return HorizonConfig(max_history=self.demand_history_samples, max_errors=self.demand_errors_kept)

    def label_filters(self) -> dict[str, str]:
        out = {}
        if self.prometheus_model:
            out[series_map(self.prometheus_series, self.metric_prefix).model_label] = self.prometheus_model
        if self.prometheus_dynamo_namespace:
            out["dynamo_namespace"] = self.prometheus_dynamo_namespace
        return out
