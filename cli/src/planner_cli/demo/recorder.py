"""Records every planner message of a namespace as time series, for the live view and the report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from planner_proto import (
    ComponentSnapshot,
    LoadForecast,
    ReplicaStatus,
    ScalingAck,
    ScalingDecision,
    Subjects,
    TrafficSample,
    WorkerLoadSample,
)
from planner_runtime.bus import Bus


@dataclass
class Recorder:
    subjects: Subjects
    t0: float = field(default_factory=time.time)
    traffic: list[tuple[float, TrafficSample]] = field(default_factory=list)
    forecasts: list[tuple[float, LoadForecast]] = field(default_factory=list)
    snapshots: dict[str, list[tuple[float, ComponentSnapshot]]] = field(default_factory=dict)
    decisions: list[tuple[float, ScalingDecision]] = field(default_factory=list)
    acks: list[tuple[float, ScalingAck]] = field(default_factory=list)
    replicas: list[tuple[float, ReplicaStatus]] = field(default_factory=list)
    loads: list[tuple[float, WorkerLoadSample]] = field(default_factory=list)
    """Scraped readings of stock engines (their own latency histograms' sums and counts)."""

    def rel(self) -> float:
        return time.time() - self.t0

    async def attach(self, bus: Bus) -> None:
        s = self.subjects

        async def on_traffic(m: TrafficSample, _: str) -> None:
            self.traffic.append((self.rel(), m))

        async def on_forecast(m: LoadForecast, _: str) -> None:
            self.forecasts.append((self.rel(), m))

        async def on_state(m: ComponentSnapshot, _: str) -> None:
            series = self.snapshots.setdefault(str(m.component), [])
            series.append((self.rel(), m))
            if len(series) > 5000:
                del series[: len(series) - 5000]

        async def on_decision(m: ScalingDecision, _: str) -> None:
            self.decisions.append((self.rel(), m))

        async def on_ack(m: ScalingAck, _: str) -> None:
            self.acks.append((self.rel(), m))

        async def on_replicas(m: ReplicaStatus, _: str) -> None:
            self.replicas.append((self.rel(), m))

        await bus.subscribe(s.traffic(), TrafficSample, on_traffic)
        await bus.subscribe(s.forecast(), LoadForecast, on_forecast)
        await bus.subscribe(s.state(), ComponentSnapshot, on_state)
        await bus.subscribe(s.decision(), ScalingDecision, on_decision)
        await bus.subscribe(s.ack(), ScalingAck, on_ack)
        await bus.subscribe(s.replicas(), ReplicaStatus, on_replicas)

        async def on_load(m: WorkerLoadSample, _: str) -> None:
            self.loads.append((self.rel(), m))
            if len(self.loads) > 20000:
                del self.loads[: len(self.loads) - 20000]

        await bus.subscribe(s.load(), WorkerLoadSample, on_load)

    # ---- derived views --------------------------------------------------------------------------
    def latest_replicas(self) -> ReplicaStatus | None:
        return self.replicas[-1][1] if self.replicas else None

    def acked_ids(self, status: str = "completed") -> set[int]:
        return {a.decision_id for _, a in self.acks if a.status == status}

    def unacked_decisions(self) -> list[int]:
        answered = {a.decision_id for _, a in self.acks if a.status in ("completed", "failed", "superseded")}
        return [d.decision_id for _, d in self.decisions if not d.advisory and d.decision_id not in answered]
