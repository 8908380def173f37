"""The predictor service: traffic in (NATS TrafficSample, PromQL, or the engines' counters); out, the
demand forecast the decider sizes the fleet for, and one LoadForecast per interval.

- Demand (:mod:`planner_core.forecast.demand`): every traffic sample is learned by the demand
  forecaster, and a :class:`~planner_proto.demand.DemandForecast` (prompt and output tokens/s of each
  sample to the startup lead, as scenarios of the measured errors) is published on
  ``planner.{ns}.demand``.
- Load (:class:`~planner_core.forecast.LoadForecaster`): each tick closes the interval that just
  ended: its observation (if any: no data is "unknown", not zero) is scored against the forecast made
  for it, fed to the forecaster, and the next interval's forecast is published. Model fits run in a
  worker thread so that ARIMA refits never stall the loop.

One predictor per namespace is active (KV lease ``{ns}.predictor``); standbys learn the same traffic
but publish nothing, so a takeover forecasts from what it learned itself. The active one saves the
demand forecaster's state to KV (:mod:`planner_predictor.demand_state`); a newly active one starts
from the saved state when that has learned more than it has (a restart).
"""

from __future__ import annotations

import asyncio
import time

import httpx
import nats.errors
from prometheus_client import Counter, Gauge

from planner_core.engines.traffic import FleetTraffic
from planner_core.forecast import HorizonDemand, LoadForecaster, make_demand_forecaster
from planner_predictor.demand_state import encode_state, restore_state
from planner_predictor.engines import counters_of, engine_key
from planner_predictor.prometheus import PrometheusTraffic, sample_of, series_map
from planner_predictor.settings import PredictorSettings
from planner_predictor.traffic import Observation, TrafficAccumulator, abs_pct_error, observation_of
from planner_predictor.warm import warm_start
from planner_proto import DemandForecast, LoadForecast, TrafficSample, WorkerLoadSample
from planner_proto.subjects import STATE_BUCKET
from planner_runtime.saved_state import RETRY_S, put_saved, read_saved, read_until_answered
from planner_runtime.service import Service, run_service

"""How long a newly active predictor waits for its saved demand state (a JetStream read can hang
through a cluster's leader election) before it goes on with what it learned itself."""


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
        self.demand_forecasts = Counter(
            "planner_demand_forecasts",
            "Demand forecasts, by outcome (published; not_yet: nothing learned with request lengths)",
            ["outcome"],
            registry=r,
        )
        self.demand_at_lead = Gauge(
            "planner_demand_forecast_tokens_per_s",
            "Demand forecast at the startup lead (prompt tokens/s for prefill, output for decode)",
            ["component"],
            registry=r,
        )
        self.demand_errors = Gauge(
            "planner_demand_errors_measured",
            "Forecast errors measured at the lead so far (the scenarios are the forecaster's own from"
            " the errors needed on)",
            ["component"],
            registry=r,
        )
        self.state_saves = Counter(
            "planner_demand_state_saves",
            "Saves of the learned demand state to KV, by result (saved, failed, deferred: the saved"
            " one not read yet)",
            ["result"],
            registry=r,
        )  # fmt: skip
        self.state_restores = Counter(
            "planner_demand_state_restores",
            "Reads of the saved demand state on activation, by outcome (restored, kept_own, absent,"
            " stale, invalid, version, namespace, disabled, unreachable)",
            ["outcome"],
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
    lease = "predictor"

    def __init__(self, settings: PredictorSettings) -> None:
        super().__init__(settings)
        self.metrics = PredictorMetrics(self)
        self.forecaster = LoadForecaster(settings.forecast_config())
        self.demand: HorizonDemand | None = None
        if settings.demand_model != "none":
            self.demand = make_demand_forecaster(
                settings.demand_model, settings.startup_s, settings.horizon_config()
            )
        self.last_demand: DemandForecast | None = None
        self._state_lock = asyncio.Lock()
        self.accumulator = TrafficAccumulator(settings.interval_s)
        self.last_forecast: LoadForecast | None = None
        self._http: httpx.AsyncClient | None = None
        self._prom: PrometheusTraffic | None = None
        self.fleet: FleetTraffic | None = None
        self._state_unread = False

    async def setup(self) -> None:
        s = self.settings
        if self.demand is not None:
            self.state_kv = await self.bus.kv(STATE_BUCKET)
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

    async def started(self) -> None:
        # every instance learns (a standby that takes over forecasts from its own history); only the
        # active one publishes. Started once the first role is known: a first tick that ran before
        # the lease was taken would learn its interval without publishing it (nothing for a whole
        # interval after a lone predictor starts)
        self.every(self.settings.interval_s, self._tick, "forecast")

    async def activate(self) -> None:
        if self.demand is not None:
            self._state_unread = True
            if not await self._load_demand_state(attempt=1):
                self.spawn(read_until_answered(self._load_demand_state), "load_state", active=True)
            self.every(
                self.settings.state_save_interval_s, self._save_demand_state, "save_state", active=True
            )

    async def drain(self) -> None:
        await self._save_demand_state()

    # ---- demand ------------------------------------------------------------------------------------
    async def _learn_demand(self, sample: TrafficSample) -> None:
        """Learn one traffic sample and publish the demand forecast that includes it."""
        if self.demand is None:
            return
        async with self._state_lock:
            if not self.demand.observe(sample):
                return
            fc = self.demand.forecast(self.settings.namespace, time.time())
        if fc is None:
            self.metrics.demand_forecasts.labels("not_yet").inc()
            return
        self.last_demand = fc
        for comp in fc.components:
            self.metrics.demand_at_lead.labels(str(comp.component)).set(comp.steps[-1].forecast)
            self.metrics.demand_errors.labels(str(comp.component)).set(comp.errors_measured)
        if self.is_active:
            await self.bus.publish(self.subjects.demand(), fc)
            self.metrics.demand_forecasts.labels("published").inc()

    def _demand_state_key(self) -> str:
        return self.subjects.state_key("predictor", "demand_state")

    async def _load_demand_state(self, attempt: int) -> bool:
        """On activation: the saved demand state, when it has learned more samples than this instance
        has (a restart; a standby that ran alongside keeps its own, which is as long and newer).
        False when KV did not answer: this instance forecasts from its own state meanwhile, and does
        not save it over the one it has not read yet."""
        assert self.demand is not None
        key = self._demand_state_key()
        try:
            raw = await read_saved(self.state_kv, key)
        except (nats.errors.Error, TimeoutError) as exc:
            if attempt == 1:
                self.metrics.state_restores.labels("unreachable").inc()
                self.log.warning(
                    "demand_state_not_read", key=key, detail=str(exc) or type(exc).__name__,
                    learned_samples=self.demand.state.prefill.samples, retry_every_s=RETRY_S,
                )  # fmt: skip
            return False
        self._state_unread = False
        s = self.settings
        saved, outcome, detail = restore_state(raw, s.namespace, time.time(), s.state_max_age_s)
        async with self._state_lock:
            own = self.demand.state
            if saved is not None and saved.prefill.samples <= own.prefill.samples:
                outcome, detail = "kept_own", f"{detail}; this instance has learned {own.prefill.samples}"
            elif saved is not None:
                self.demand.state = saved
        self.metrics.state_restores.labels(outcome).inc()
        if outcome == "restored" and saved is not None:
            self.log.info(
                "demand_state_restored", key=key, detail=detail, samples=saved.prefill.samples,
                attempt=attempt,
                errors=len(saved.prefill.errors), season_samples=saved.prefill.period,
            )  # fmt: skip
        else:
            log = self.log.warning if outcome in ("invalid", "version", "namespace") else self.log.info
            log("demand_state_not_restored", key=key, outcome=outcome, detail=detail, attempt=attempt)
        return True

    async def _save_demand_state(self) -> None:
        if self.demand is None or not self.is_active:
            return
        if self._state_unread:
            self.metrics.state_saves.labels("deferred").inc()
            return
        async with self._state_lock:
            data = encode_state(self.demand.state, self.settings.namespace, time.time())
        key = self._demand_state_key()
        await put_saved(
            self.state_kv, key, data, self.metrics.state_saves, self.log, "demand_state_not_saved"
        )

    # ---- traffic in --------------------------------------------------------------------------------
    async def _on_traffic(self, sample: TrafficSample, subject: str) -> None:
        if sample.namespace != self.settings.namespace:
            return
        if not self.accumulator.add(sample):
            self.bus.count_bad(subject, "not_finite")
            return
        await self._learn_demand(sample)

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
        if self.is_active:
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
        if s.publish_traffic and self.is_active:
            await self.bus.publish(self.subjects.traffic(), sample)
        await self._learn_demand(sample)
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
        if s.publish_traffic and self.is_active:
            await self.bus.publish(self.subjects.traffic(), reading.sample)
        await self._learn_demand(reading.sample)
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
        demand = self.demand.state if self.demand is not None else None
        return {
            "source": self.settings.source,
            "engines_known": self.fleet.known_engines if self.fleet is not None else 0,
            "intervals_seen": self.forecaster.samples_seen,
            "last_reason": fc.reason if fc is not None else "none",
            "demand_model": self.settings.demand_model,
            "demand_samples": demand.prefill.samples if demand is not None else 0,
            "demand_errors_measured": len(demand.prefill.errors) if demand is not None else 0,
        }


SERVICE = PredictorService

if __name__ == "__main__":
    raise SystemExit(run_service(PredictorService))
