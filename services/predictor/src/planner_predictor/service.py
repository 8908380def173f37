"""The predictor service: traffic in (NATS TrafficSample or PromQL), one LoadForecast per interval.

Each tick closes the interval that just ended: its observation (if any: no data is "unknown", not
zero) is scored against the forecast made for it, fed to the forecaster, and the next interval's
forecast is published. Model fits run in a worker thread so that ARIMA refits never stall the loop.
"""

from __future__ import annotations

import asyncio
import time

import httpx
from prometheus_client import Counter, Gauge

from planner_core.engines.traffic import FleetTraffic
from planner_core.forecast import LoadForecaster
from planner_predictor.engines import counters_of, engine_key
from planner_predictor.prometheus import PrometheusTraffic, sample_of, series_map
from planner_predictor.settings import PredictorSettings
from planner_predictor.traffic import Observation, TrafficAccumulator, abs_pct_error, observation_of
from planner_predictor.warm import warm_start
from planner_proto import LoadForecast, TrafficSample, WorkerLoadSample
from planner_runtime.service import Service, run_service


class PredictorMetrics:
    def __init__(self, svc: PredictorService) -> None:
        r = svc.registry
        self.requests = Gauge(
            "planner_forecast_requests", "Forecast requests in the next interval", registry=r
        )
        self.requests_upper = Gauge(
            "planner_forecast_requests_upper", "Upper-quantile forecast of next-interval requests", registry=r
        )
        self.isl = Gauge("planner_forecast_isl_tokens", "Forecast mean input length", registry=r)
        self.osl = Gauge("planner_forecast_osl_tokens", "Forecast mean output length", registry=r)
        self.abs_pct_error = Gauge(
            "planner_forecast_abs_pct_error",
            "Absolute percentage error of the last one-step-ahead forecast against what came",
            ["series"],
            registry=r,
        )
        self.query_errors = Counter(
            "planner_prometheus_query_errors", "Failed PromQL queries", ["query"], registry=r
        )
        self.intervals = Counter(
            "planner_predictor_intervals",
            "Intervals closed, by outcome (observed, unknown)",
            ["outcome"],
            registry=r,
        )
        self.forecasts = Counter(
            "planner_predictor_forecasts", "Forecasts published, by reason", ["reason"], registry=r
        )
        self.engines_counted = Gauge(
            "planner_traffic_engines",
            "Engines whose counters made the last interval's traffic (source engines)",
            registry=r,
        )
        self.engine_resets = Counter(
            "planner_traffic_engine_resets",
            "Engine counter resets (restarts) seen while summing the fleet's traffic (source engines)",
            registry=r,
        )
        self.engines_unknown = Counter(
            "planner_traffic_unknown_intervals",
            "Intervals whose traffic the engines' counters could not give, by reason (source engines)",
            ["reason"],
            registry=r,
        )


class PredictorService(Service[PredictorSettings]):
    name = "predictor"
    settings_type = PredictorSettings

    def __init__(self, settings: PredictorSettings) -> None:
        super().__init__(settings)
        self.metrics = PredictorMetrics(self)
        self.forecaster = LoadForecaster(settings.forecast_config())
        self.accumulator = TrafficAccumulator(settings.interval_s)
        self.last_forecast: LoadForecast | None = None
        self._http: httpx.AsyncClient | None = None
        self._prom: PrometheusTraffic | None = None
        self.fleet: FleetTraffic | None = None

    async def setup(self) -> None:
        s = self.settings
        if s.warm_start:
            fed = await asyncio.to_thread(warm_start, self.forecaster, s.warm_start)
            self.log.info("warm_started", path=s.warm_start, intervals=fed)
        if s.source == "prometheus":
            self._http = httpx.AsyncClient()
            self._prom = PrometheusTraffic(
                self._http,
                s.prometheus_url,
                series_map(s.prometheus_series, s.metric_prefix),
                s.label_filters(),
                s.prometheus_timeout_s,
            )
        elif s.source == "engines":
            self.fleet = FleetTraffic(s.namespace, forget_after_s=max(600.0, 10 * s.interval_s))
            await self.bus.subscribe(self.subjects.load(), WorkerLoadSample, self._on_load)
        else:
            await self.bus.subscribe(self.subjects.traffic(), TrafficSample, self._on_traffic)
        self.every(s.interval_s, self._tick, "forecast")

    async def _on_traffic(self, sample: TrafficSample, subject: str) -> None:
        if sample.namespace != self.settings.namespace:
            return
        if not self.accumulator.add(sample):
            self.bus.count_bad(subject, "not_finite")

    async def _on_load(self, sample: WorkerLoadSample, subject: str) -> None:
        key = engine_key(subject)
        if key is None or self.fleet is None:
            self.bus.count_bad(subject, "bad_subject")
            return
        self.fleet.add(key[1], counters_of(sample, key[0]))

    # ---- tick ----------------------------------------------------------------------------------
    async def _tick(self) -> None:
        now_s = time.time()
        obs = await self._close_interval(now_s)
        self.metrics.intervals.labels("unknown" if obs is None else "observed").inc()
        forecast = await asyncio.to_thread(self.step, obs, now_s)
        await self.bus.publish(self.subjects.forecast(), forecast)

    async def _close_interval(self, now_s: float) -> Observation | None:
        if self.fleet is not None:
            return await self._close_engines(now_s)
        if self._prom is None:
            return self.accumulator.close()
        s = self.settings
        reading = await self._prom.read(now_s, s.interval_s)
        for err in reading.errors:
            self.metrics.query_errors.labels(err.split(":", 1)[0]).inc()
        if reading.errors:
            self.log.warning("prometheus_query_errors", errors=list(reading.errors))
        sample = sample_of(reading, namespace=s.namespace, now_s=now_s, window_s=s.interval_s)
        if sample is None:
            return None
        if s.publish_traffic:
            await self.bus.publish(self.subjects.traffic(), sample)
        return observation_of(sample, s.interval_s)

    async def _close_engines(self, now_s: float) -> Observation | None:
        """The interval from the engines' counters; published for the decider like any traffic."""
        assert self.fleet is not None
        s = self.settings
        reading = self.fleet.close(now_s, s.interval_s)
        self.metrics.engines_counted.set(reading.engines)
        self.metrics.engine_resets.inc(reading.resets)
        if reading.sample is None:
            self.metrics.engines_unknown.labels(reading.reason).inc()
            self.log.info("engine_traffic_unknown", reason=reading.reason, engines=self.fleet.known_engines)
            return None
        if s.publish_traffic:
            await self.bus.publish(self.subjects.traffic(), reading.sample)
        return observation_of(reading.sample, s.interval_s)

    def step(self, obs: Observation | None, now_s: float) -> LoadForecast:
        """Score the last forecast, learn the interval, forecast the next one (pure but for metrics)."""
        if obs is not None:
            self._score(obs)
            self.forecaster.observe_values(obs.num_requests, obs.mean_isl_tokens, obs.mean_osl_tokens)
        forecast = self.forecast(now_s)
        self.last_forecast = forecast
        m = self.metrics
        m.forecasts.labels(forecast.reason.split(":", 1)[0] or "ok").inc()
        for gauge, value in (
            (m.requests, forecast.num_requests),
            (m.requests_upper, forecast.num_requests_upper),
            (m.isl, forecast.mean_isl_tokens),
            (m.osl, forecast.mean_osl_tokens),
        ):
            gauge.set(float("nan") if value is None else value)
        return forecast

    def forecast(self, now_s: float) -> LoadForecast:
        s = self.settings
        seen = self.forecaster.samples_seen
        if seen == 0 or seen < s.min_intervals:
            return LoadForecast(
                namespace=s.namespace,
                issued_at_s=now_s,
                for_start_s=now_s,
                interval_s=s.interval_s,
                num_requests=None,
                mean_isl_tokens=None,
                mean_osl_tokens=None,
                upper_quantile=s.upper_quantile,
                model=s.model,
                reason="no_data" if seen == 0 else "warming_up",
            )
        return self.forecaster.forecast(namespace=s.namespace, now_s=now_s, for_start_s=now_s)

    def _score(self, obs: Observation) -> None:
        last = self.last_forecast
        if last is None:
            return
        for series, predicted, actual in (
            ("requests", last.num_requests, obs.num_requests),
            ("isl", last.mean_isl_tokens, obs.mean_isl_tokens),
            ("osl", last.mean_osl_tokens, obs.mean_osl_tokens),
        ):
            err = abs_pct_error(predicted, actual)
            if err is not None:
                self.metrics.abs_pct_error.labels(series).set(err)

    async def cleanup(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    def health_detail(self) -> dict[str, object]:
        fc = self.last_forecast
        return {
            "source": self.settings.source,
            "engines_known": self.fleet.known_engines if self.fleet is not None else 0,
            "intervals_seen": self.forecaster.samples_seen,
            "last_reason": fc.reason if fc is not None else "none",
        }


SERVICE = PredictorService

if __name__ == "__main__":
    raise SystemExit(run_service(PredictorService))
