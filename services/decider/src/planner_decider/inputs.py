"""The latest of each input, with the wall time it arrived; pure (no I/O, no clock).

Staleness is judged by the time a message was received (the sender's clock may be skewed): snapshots
and replica status by their own max age, forecasts, demand forecasts and traffic samples after two of
their intervals.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from planner_core.policy import CapacityModel, DecisionInputs, LatencyEstimator
from planner_proto import (
    ComponentReplicas,
    ComponentSnapshot,
    DemandForecast,
    LoadForecast,
    ReplicaStatus,
    TrafficSample,
)

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Received(Generic[T]):
    msg: T
    at_s: float


@dataclass(frozen=True, kw_only=True)
class LatestInputs:
    snapshots: Mapping[str, Received[ComponentSnapshot]] = field(default_factory=dict)
    forecast: Received[LoadForecast] | None = None
    traffic: Received[TrafficSample] | None = None
    replicas: Received[ReplicaStatus] | None = None
    demand: Received[DemandForecast] | None = None

    def with_snapshot(self, snap: ComponentSnapshot, now_s: float) -> LatestInputs:
        snaps = {**self.snapshots, str(snap.component): Received(msg=snap, at_s=now_s)}
        return dataclasses.replace(self, snapshots=snaps)

    def with_forecast(self, fc: LoadForecast, now_s: float) -> LatestInputs:
        return dataclasses.replace(self, forecast=Received(msg=fc, at_s=now_s))

    def with_demand(self, fc: DemandForecast, now_s: float) -> LatestInputs:
        return dataclasses.replace(self, demand=Received(msg=fc, at_s=now_s))

    def with_traffic(self, sample: TrafficSample, now_s: float) -> LatestInputs:
        return dataclasses.replace(self, traffic=Received(msg=sample, at_s=now_s))

    def with_replicas(self, status: ReplicaStatus, now_s: float) -> LatestInputs:
        return dataclasses.replace(self, replicas=Received(msg=status, at_s=now_s))

    def fresh_replicas(self, now_s: float, max_age_s: float) -> ReplicaStatus | None:
        r = self.replicas
        return r.msg if r is not None and now_s - r.at_s <= max_age_s else None

    def fresh_forecast(self, now_s: float) -> LoadForecast | None:
        f = self.forecast
        return f.msg if f is not None and now_s - f.at_s <= 2 * f.msg.interval_s else None

    def fresh_demand(self, now_s: float) -> DemandForecast | None:
        d = self.demand
        return d.msg if d is not None and now_s - d.at_s <= 2 * d.msg.interval_s else None

    def fresh_traffic(self, now_s: float) -> TrafficSample | None:
        t = self.traffic
        return t.msg if t is not None and now_s - t.at_s <= 2 * t.msg.interval_s else None

    def fresh_snapshots(self, now_s: float, max_age_s: float) -> dict[str, ComponentSnapshot]:
        return {c: r.msg for c, r in self.snapshots.items() if now_s - r.at_s <= max_age_s}


def managed_replicas(
    status: ReplicaStatus | None, components: Sequence[str]
) -> dict[str, ComponentReplicas] | None:
    """The components under management with the actuators' view of them; None without a status.

    A configured component the actuators do not report yet is taken as zero replicas.
    """
    if status is None:
        return None
    if not components:
        return dict(status.components)
    return {c: status.components.get(c, ComponentReplicas()) for c in components}


def decision_inputs(
    latest: LatestInputs,
    now_s: float,
    *,
    components: Sequence[str],
    snapshot_max_age_s: float,
    replicas_max_age_s: float,
    in_progress: frozenset[str],
    capacity: CapacityModel | None,
    estimator: LatencyEstimator | None,
) -> DecisionInputs | None:
    """What ``decide`` gets this tick; None when there is no fresh ReplicaStatus to decide against."""
    replicas = managed_replicas(latest.fresh_replicas(now_s, replicas_max_age_s), components)
    if not replicas:
        return None
    return DecisionInputs(
        replicas=replicas,
        forecast=latest.fresh_forecast(now_s),
        traffic=latest.fresh_traffic(now_s),
        demand=latest.fresh_demand(now_s),
        snapshots=latest.fresh_snapshots(now_s, snapshot_max_age_s),
        in_progress=in_progress & frozenset(replicas),
        capacity=capacity,
        estimator=estimator,
    )
