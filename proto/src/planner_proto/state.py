"""ComponentSnapshot: what the regression service knows about one component, every tick."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from planner_proto.engine import Component, EngineCapabilities
from planner_proto.load import WorkerLoad


class LatencyModel(msgspec.Struct, frozen=True, kw_only=True):
    """A fitted linear model ``wall_s = intercept_s + sum(coef_i * x_i)``.

    ``features`` names the inputs (e.g. ``["sum_prefill_tokens"]``); ``coefficients`` is in the same
    order, in seconds per unit.
    """

    features: list[str]
    coefficients: list[float]
    intercept_s: float = 0.0
    ready: bool = False
    num_samples: Annotated[int, Meta(ge=0)] = 0
    r2: float | None = None
    reason: str = ""
    """Why the model is not ready (``too_few_samples``, ``negative_slope``, ...); empty when ready."""


class ComponentSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    component: Component
    issued_at_s: float
    workers: list[WorkerLoad] = []
    model: LatencyModel | None = None
    capabilities: EngineCapabilities | None = None
    avg_isl_tokens: float | None = None
    avg_decode_length_tokens: float | None = None
    avg_prefill_tokens_per_pass: float | None = None
    avg_num_decode_requests: float | None = None
    kv_hit_rate: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0
    model_source: str = ""
    """Where ``model`` comes from: ``fpm`` (forward passes) or ``scraped`` (interval means of stock
    engines' /metrics: coarser); empty from senders that predate the field."""
    workers_without_capabilities: list[str] = []
    """Appended: workers whose capabilities nothing gives (not registered in ``planner_engines`` and
    no static list entry or metric says): the load policy cannot size them (``insufficient_data``)."""
