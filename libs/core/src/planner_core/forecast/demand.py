"""The demand forecast the fleet is sized for: per component, the demand of every sample from the
next one to the startup lead, as scenarios.

The predictor service runs a :class:`DemandForecaster` on the traffic samples and publishes its
:class:`~planner_proto.demand.DemandForecast`; the decider's predictive floor
(:mod:`planner_core.policy.predictive`) sizes prefill and decode for it. The simulator runs the same
code in-process. Forecasters are registered by name in :data:`DEMAND_MODELS`; ``horizon`` (the damped
trends, season and measured errors of :mod:`planner_core.forecast.horizon`) is the default.

Pure: time comes in with the samples and as ``now_s``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from planner_core.forecast.horizon import (
    HorizonConfig,
    SeriesState,
    best_forecast,
    demand_scenarios,
    intermittent,
    update_series,
    uses_fast,
    uses_season,
)
from planner_proto.demand import ComponentDemand, DemandForecast, DemandStep
from planner_proto.engine import Component
from planner_proto.traffic import TrafficSample

LENGTH_SMOOTHING = 0.3
"""Share of a new sample's mean request length taken into the smoothed mean."""


def lead_samples(startup_s: float, interval_s: float) -> int:
    """Samples from the one just seen to the first one a worker ordered now fully serves."""
    return max(1, math.ceil(startup_s / interval_s) + 1)


@dataclass(frozen=True, kw_only=True)
class DemandState:
    """What the horizon forecaster has learned of the traffic (kept across restarts)."""

    last_sample_start_s: float | None = None
    interval_s: float | None = None
    """The latest sample's interval: one step of the forecast."""
    prefill: SeriesState = field(default_factory=SeriesState)
    """Prompt tokens/s."""
    decode: SeriesState = field(default_factory=SeriesState)
    """Output tokens/s."""
    isl_tokens: float | None = None
    osl_tokens: float | None = None


def _smooth(prev: float | None, value: float | None) -> float | None:
    if value is None or not math.isfinite(value) or value <= 0:
        return prev
    return value if prev is None else prev + LENGTH_SMOOTHING * (value - prev)


def observe_sample(
    st: DemandState, sample: TrafficSample, startup_s: float, cfg: HorizonConfig
) -> DemandState:
    """Fold one traffic sample into the demand series (a sample not newer than the last is ignored)."""
    if st.last_sample_start_s is not None and sample.start_s <= st.last_sample_start_s:
        return st
    isl = _smooth(st.isl_tokens, sample.mean_isl_tokens)
    osl = _smooth(st.osl_tokens, sample.mean_osl_tokens)
    interval = sample.interval_s
    n = sample.num_requests if math.isfinite(sample.num_requests) else 0.0
    index = round(sample.start_s / interval)
    lead = lead_samples(startup_s, interval)
    return replace(
        st,
        last_sample_start_s=sample.start_s,
        interval_s=interval,
        isl_tokens=isl,
        osl_tokens=osl,
        prefill=update_series(st.prefill, index, n * (isl or 0.0) / interval, lead, cfg),
        decode=update_series(st.decode, index, n * (osl or 0.0) / interval, lead, cfg),
    )


def _component(
    name: Component, series: SeriesState, start_s: float, interval_s: float, lead: int, cfg: HorizonConfig
) -> ComponentDemand:
    fast = uses_fast(series, cfg)
    steps = [
        DemandStep(
            steps_ahead=j,
            for_start_s=start_s + j * interval_s,
            forecast=best_forecast(series, j, cfg, lead),
            scenarios=list(demand_scenarios(series, j, cfg, lead)),
            forecaster="seasonal" if uses_season(series, j, cfg) else "fast" if fast else "steady",
        )
        for j in range(1, lead + 1)
    ]
    return ComponentDemand(
        component=name,
        unit="prompt_tokens_per_s" if name is Component.PREFILL else "output_tokens_per_s",
        steps=steps,
        errors_measured=len(series.errors),
        errors_needed=cfg.min_errors,
        intermittent=intermittent(series, lead),
        trend="fast" if fast else "steady",
        season_samples=series.period,
    )


def demand_forecast(
    st: DemandState,
    startup_s: float,
    cfg: HorizonConfig,
    *,
    namespace: str,
    issued_at_s: float,
    model: str = "horizon",
) -> DemandForecast | None:
    """The forecast of both series from the next sample to the lead; None before a sample with
    request lengths has been learned."""
    interval, start = st.interval_s, st.last_sample_start_s
    isl, osl = st.isl_tokens, st.osl_tokens
    if interval is None or start is None or isl is None or osl is None or st.prefill.level is None:
        return None
    lead = lead_samples(startup_s, interval)
    return DemandForecast(
        namespace=namespace,
        model=model,
        issued_at_s=issued_at_s,
        sample_start_s=start,
        interval_s=interval,
        lead_samples=lead,
        mean_isl_tokens=isl,
        mean_osl_tokens=osl,
        components=[
            _component(Component.PREFILL, st.prefill, start, interval, lead, cfg),
            _component(Component.DECODE, st.decode, start, interval, lead, cfg),
        ],
    )


class DemandForecaster(Protocol):
    """A demand forecaster the predictor can run: learns traffic samples, forecasts the demand."""

    name: str

    def observe(self, sample: TrafficSample) -> bool:
        """Learn one sample; False when it is not newer than the last one learned (ignored)."""
        ...

    def forecast(self, namespace: str, now_s: float) -> DemandForecast | None:
        """The latest forecast; None until the forecaster can give one."""
        ...


class HorizonDemand:
    """The horizon forecaster with its state (:class:`DemandState`): damped trends, a season, and
    the forecast errors measured at the lead."""

    name = "horizon"

    def __init__(self, startup_s: float, cfg: HorizonConfig | None = None, state: DemandState | None = None):
        if not (math.isfinite(startup_s) and startup_s >= 0):
            raise ValueError(f"startup_s: must be a finite number >= 0, got {startup_s}")
        self.startup_s = startup_s
        self.config = cfg or HorizonConfig()
        self.state = state or DemandState()

    def observe(self, sample: TrafficSample) -> bool:
        before = self.state
        self.state = observe_sample(before, sample, self.startup_s, self.config)
        return self.state is not before

    def forecast(self, namespace: str, now_s: float) -> DemandForecast | None:
        return demand_forecast(
            self.state, self.startup_s, self.config, namespace=namespace, issued_at_s=now_s, model=self.name
        )


DEMAND_MODELS: Mapping[str, Callable[[float, HorizonConfig], HorizonDemand]] = {
    "horizon": lambda startup_s, cfg: HorizonDemand(startup_s, cfg),
}
"""Demand forecasters by name: (startup_s, config) -> forecaster."""


def make_demand_forecaster(name: str, startup_s: float, cfg: HorizonConfig | None = None) -> HorizonDemand:
    """The registered demand forecaster ``name``; ValueError naming the known ones otherwise."""
    make = DEMAND_MODELS.get(name)
    if make is None:
        raise ValueError(f"unknown demand model {name!r} (known: {', '.join(sorted(DEMAND_MODELS))})")
    return make(startup_s, cfg or HorizonConfig())
