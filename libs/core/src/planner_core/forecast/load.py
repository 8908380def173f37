"""Request count, mean ISL and mean OSL forecast together, as a ``planner_proto.LoadForecast``."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from planner_core.forecast.series import Forecast, ForecastConfig, SeriesForecaster
from planner_proto.traffic import LoadForecast, TrafficSample


class LoadForecaster:
    """Three :class:`SeriesForecaster`; ISL/OSL may use a different config (e.g. log1p off)."""

    def __init__(
        self,
        config: ForecastConfig | None = None,
        *,
        isl_config: ForecastConfig | None = None,
        osl_config: ForecastConfig | None = None,
    ) -> None:
        self.config = config or ForecastConfig()
        self.count = SeriesForecaster(self.config)
        self.isl = SeriesForecaster(isl_config or self.config)
        self.osl = SeriesForecaster(osl_config or self.config)
        self.samples_seen = 0

    def observe_values(
        self, num_requests: float, mean_isl_tokens: float | None, mean_osl_tokens: float | None
    ) -> None:
        """One interval; a None or NaN mean (no request in the interval) is skipped for that series."""
        self.samples_seen += 1
        self.count.update(num_requests)
        self.isl.update(math.nan if mean_isl_tokens is None else mean_isl_tokens)
        self.osl.update(math.nan if mean_osl_tokens is None else mean_osl_tokens)

    def observe(self, sample: TrafficSample) -> None:
        """Counts from intervals of another length are rescaled to this forecaster's interval."""
        count = sample.num_requests * self.config.interval_s / sample.interval_s
        self.observe_values(count, sample.mean_isl_tokens, sample.mean_osl_tokens)

    def warm_start(
        self,
        num_requests: npt.ArrayLike,
        mean_isl_tokens: npt.ArrayLike,
        mean_osl_tokens: npt.ArrayLike,
    ) -> int:
        """Feed binned history (same interval as the config; NaN means for empty bins). Returns the
        number of intervals fed."""
        n = np.asarray(num_requests, dtype=np.float64).ravel()
        isl = np.asarray(mean_isl_tokens, dtype=np.float64).ravel()
        osl = np.asarray(mean_osl_tokens, dtype=np.float64).ravel()
        if not (len(n) == len(isl) == len(osl)):
            raise ValueError(f"warm_start arrays differ in length: {len(n)}, {len(isl)}, {len(osl)}")
        for c, i, o in zip(n, isl, osl, strict=True):
            self.observe_values(float(c), float(i), float(o))
        return len(n)

    def forecast_parts(self) -> tuple[Forecast, Forecast, Forecast]:
        return self.count.forecast(), self.isl.forecast(), self.osl.forecast()

    def forecast(self, *, namespace: str, now_s: float, for_start_s: float | None = None) -> LoadForecast:
        count, isl, osl = self.forecast_parts()
        reason = next(
            (f"{name}:{f.reason}" for name, f in (("count", count), ("isl", isl), ("osl", osl)) if f.reason),
            "",
        )
        return LoadForecast(
            namespace=namespace,
            issued_at_s=now_s,
            for_start_s=now_s if for_start_s is None else for_start_s,
            interval_s=self.config.interval_s,
            num_requests=count.mean,
            mean_isl_tokens=isl.mean,
            mean_osl_tokens=osl.mean,
            num_requests_upper=count.upper,
            upper_quantile=self.config.upper_quantile,
            model=count.model,
            reason=reason,
        )
