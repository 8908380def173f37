"""Settings of the regression service (one frozen struct, validated once at start)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from planner_core.regression import RegressionConfig
from planner_proto import Component
from planner_runtime.settings import BaseSettings


def _all_components() -> list[Component]:
    return list(Component)


class RegressionSettings(BaseSettings, frozen=True, kw_only=True):
    """Regression service: online forward-pass time models and per-worker load, per component."""

    components: list[Component] = msgspec.field(default_factory=_all_components)
    """Components this instance owns (shard by component: one instance per list)."""
    tick_s: Annotated[float, Meta(gt=0.0, le=3600.0)] = 1.0
    """How often the fits are updated and a ComponentSnapshot is published."""
    liveness_timeout_s: Annotated[float, Meta(gt=0.0, le=3600.0)] = 10.0
    """A worker not heard from (FPM, heartbeat or load sample) for this long is dropped."""
    persist_every_s: Annotated[float, Meta(gt=0.0, le=86400.0)] = 10.0
    """How often changed models are written to the ``planner_state`` KV bucket (also at shutdown)."""
    max_samples: Annotated[int, Meta(ge=2, le=4096)] = 64
    num_buckets: Annotated[int, Meta(ge=1, le=1024)] = 16
    min_samples: Annotated[int, Meta(ge=2, le=4096)] = 5
    cold_start_s: Annotated[float, Meta(ge=0.0, le=86400.0)] = 120.0
    """Passes from a worker's first seconds (after its ``started_at_s``) are not fitted."""
    fit_method: Literal["robust", "ols"] = "robust"
    retention: Literal["bucketed", "fifo"] = "bucketed"
    avg_window: Annotated[int, Meta(ge=1, le=100_000)] = 64
    fit_passes_per_worker: Annotated[int, Meta(ge=1, le=1024)] = 4
    """At most this many of a worker's most recent passes are fitted per tick (the rest only update
    its load picture): the hot path stays O(1) per message and the fit cost per tick is bounded."""
    max_fit_passes_per_tick: Annotated[int, Meta(ge=1, le=1_000_000)] = 64
    """Cap on passes fitted per component per tick, shared across its workers. A fitted pass costs
    ~0.1 ms (bucketed retention) and the store keeps only ``max_samples``, so more buys nothing."""
    max_pending_messages: Annotated[int, Meta(ge=1000, le=100_000_000)] = 1_000_000
    """FPMs buffered in the client before NATS reports this service a slow consumer."""
    kv_hit_rate: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0
    """Prefix-cache hit rate used by the TTFT estimate (engines do not report it per request)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.components:
            raise ValueError("components must name at least one of prefill, decode, agg")
        if len(set(self.components)) != len(self.components):
            raise ValueError("components lists a component twice")
        if self.min_samples > self.max_samples:
            raise ValueError(f"min_samples ({self.min_samples}) must be <= max_samples ({self.max_samples})")

    def regression_config(self, component: Component) -> RegressionConfig:
        return RegressionConfig(
            component=component,
            max_samples=self.max_samples,
            num_buckets=self.num_buckets,
            min_samples=self.min_samples,
            cold_start_s=self.cold_start_s,
            method=self.fit_method,
            retention=self.retention,
            avg_window=self.avg_window,
        )
