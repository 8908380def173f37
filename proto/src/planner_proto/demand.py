"""The predictor's probabilistic demand forecast: what the decider sizes the fleet for.

Published by the active predictor on ``planner.{ns}.demand`` after every traffic sample it learns
(JSON, schema in ``proto/schema/DemandForecast.json``). Per component, the demand series it sizes
(prompt tokens/s for prefill, output tokens/s for decode) forecast at each step from the next sample
to ``lead_samples`` ahead (the first sample a worker ordered now can serve), each with its demand
scenarios: the forecast plus each forecast error measured so far at that lead (in the series' own
units). A consumer can read the scenarios as an empirical distribution of the demand at that step.

Only version :data:`DEMAND_FORECAST_VERSION` is understood; a consumer refuses any other.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from planner_proto.engine import Component

DEMAND_FORECAST_VERSION = 1

NonNegFloat = Annotated[float, Meta(ge=0.0)]

Forecaster = Literal["steady", "fast", "seasonal"]
"""Which of the forecaster's models made a step's forecast: the steady or the fast damped trend
(Holt), or the season found in the history."""


class DemandStep(msgspec.Struct, frozen=True, kw_only=True):
    """The demand of one sample ahead: ``[for_start_s, for_start_s + interval_s)``."""

    steps_ahead: Annotated[int, Meta(ge=1)]
    for_start_s: float
    forecast: NonNegFloat
    """The point forecast (units/s of the component's series)."""
    scenarios: list[NonNegFloat]
    """Demand under each forecast error measured so far at this lead (a prior spread stands in
    while fewer than ``errors_needed`` are measured); equally likely."""
    forecaster: Forecaster


class ComponentDemand(msgspec.Struct, frozen=True, kw_only=True):
    component: Component
    unit: Literal["prompt_tokens_per_s", "output_tokens_per_s"]
    steps: list[DemandStep]
    """From one sample ahead to ``lead_samples`` ahead, in order."""
    errors_measured: Annotated[int, Meta(ge=0)]
    """Forecast errors scored at the lead so far (by the model the last step uses)."""
    errors_needed: Annotated[int, Meta(ge=0)]
    """Errors the forecaster needs before its scenarios are its own (no prior blended in)."""
    intermittent: bool
    """The series went silent within the latest ``lead_samples + 1`` samples (on-off traffic)."""
    trend: Literal["steady", "fast"]
    """The trend model in use (the one with the lower measured error at the lead)."""
    season_samples: Annotated[int, Meta(ge=0)] = 0
    """The season found in the series, in samples (0: none)."""


class DemandForecast(msgspec.Struct, frozen=True, kw_only=True):
    version: int = DEMAND_FORECAST_VERSION
    namespace: str
    model: str
    """The forecaster that made it (``horizon``)."""
    issued_at_s: float
    sample_start_s: float
    """Start of the latest traffic sample the forecast has learned."""
    interval_s: Annotated[float, Meta(gt=0.0)]
    """The traffic samples' interval: one step."""
    lead_samples: Annotated[int, Meta(ge=1)]
    mean_isl_tokens: NonNegFloat
    """Smoothed mean prompt length of the requests (tokens)."""
    mean_osl_tokens: NonNegFloat
    """Smoothed mean output length of the requests (tokens)."""
    components: list[ComponentDemand]

    def component(self, name: str) -> ComponentDemand | None:
        return next((c for c in self.components if c.component == name), None)
