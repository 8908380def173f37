"""Controllers the simulator can run: a fixed fleet, and the planner itself in-process.

:class:`PlannerController` is the decider's loop without NATS: per-engine FPMs feed the online
regression (one per component; the latest pass of each engine per tick, as the reference reads them),
the frontend's traffic per interval feeds the forecaster, ComponentSnapshots are built from both, and
``planner_core.policy.decide`` runs on them. Its absolute targets go to the simulated actuator.
"""

from __future__ import annotations

import math
from typing import Protocol

import msgspec

from planner_core.engine import to_fpm
from planner_core.forecast import ForecastConfig, LoadForecaster
from planner_core.forecast.demand import HorizonDemand
from planner_core.policy import (
    CapacityModel,
    DecisionInputs,
    DecisionResult,
    PolicyConfig,
    PolicyKind,
    PolicyState,
    decide,
)
from planner_core.policy.estimator import SnapshotEstimator
from planner_core.regression import OnlineRegression, RegressionConfig
from planner_proto.demand import DemandForecast
from planner_proto.engine import Component, EngineCapabilities
from planner_proto.load import WorkerLoad
from planner_proto.state import ComponentSnapshot
from planner_proto.traffic import LoadForecast, TrafficSample
from planner_sim.cluster import Cluster
from planner_sim.workers import COMPONENTS, ClusterSettings, Worker, WorkerState

NAMESPACE = "sim"


class TrafficForecaster(Protocol):
    """What the controller needs of a load forecaster (:class:`LoadForecaster`, or a reference one)."""

    def observe(self, sample: TrafficSample) -> None: ...

    def forecast(self, *, namespace: str, now_s: float) -> LoadForecast: ...


class StaticController:
    """A fixed fleet (static-peak, static-average)."""

    def __init__(self, name: str, targets: dict[str, int], traffic_interval_s: float = 180.0) -> None:
        self.name = name
        self.targets = dict(targets)
        self.traffic_interval_s = traffic_interval_s

    def initial_targets(self) -> dict[str, int]:
        return dict(self.targets)

    def observe_traffic(self, sample: TrafficSample, now_s: float) -> None:
        return None

    def tick(self, now_s: float, cluster: Cluster) -> dict[str, int] | None:
        return None


def worker_load(w: Worker, now_s: float, num_gpu_blocks: int) -> WorkerLoad:
    """What an engine's latest FPM (or its idle heartbeat) says about its load."""
    started = 0.0 if w.initial else w.ready_s
    draining = w.state is WorkerState.DRAINING
    p = w.last_pass
    s = w.sched
    if p is None or not (w.busy or s.has_work or s.next_remote_ready_s is not None):
        return WorkerLoad(worker_id=w.wid, last_seen_s=now_s, started_at_s=started, draining=draining)
    return WorkerLoad(
        worker_id=w.wid,
        last_seen_s=now_s,
        started_at_s=started,
        running_requests=p.num_running,
        waiting_requests=p.queued_num_prefill_requests + p.queued_num_decode_requests,
        scheduled_prefill_tokens=p.sched_sum_prefill_tokens,
        queued_prefill_tokens=p.queued_sum_prefill_tokens,
        scheduled_decode_kv_tokens=p.sched_sum_decode_kv_tokens,
        queued_decode_kv_tokens=p.queued_sum_decode_kv_tokens,
        kv_usage=p.kv_blocks_used / num_gpu_blocks,
        draining=draining,
    )


class PlannerController:
    def __init__(
        self,
        name: str,
        cfg: PolicyConfig,
        settings: ClusterSettings,
        initial: dict[str, int],
        *,
        capacity: CapacityModel | None = None,
        forecast: ForecastConfig | None = None,
        reference_regression: bool = False,
        demand_scale: float = 1.0,
        forecaster: TrafficForecaster | None = None,
        state: PolicyState | None = None,
        capacity_scale: float = 1.0,
    ) -> None:
        """``demand_scale``: the forecast's request count is multiplied by this before the policy sees it
        (a headroom knob for the bench's frontier; 1 = the forecast as is). ``forecaster``: forecasts the
        traffic instead of a :class:`LoadForecaster` of ``forecast`` (a reference planner's own predictor).
        ``state``: the policy state to start from. ``capacity_scale``: the context length and KV cache
        the engines report are multiplied by this (the threshold policies compare queue / context length
        and KV tokens / KV cache to fixed levels, so this is those levels times the factor: the knob of
        a threshold policy whose levels are not settings)."""
        if not (math.isfinite(demand_scale) and demand_scale > 0):
            raise ValueError(f"demand_scale: must be > 0, got {demand_scale}")
        if not (math.isfinite(capacity_scale) and capacity_scale > 0):
            raise ValueError(f"capacity_scale: must be > 0, got {capacity_scale}")
        self.demand_scale = demand_scale
        self.capacity_scale = capacity_scale
        self.name = name
        self.cfg = cfg
        self.settings = settings
        self.initial = dict(initial)
        self.capacity = capacity
        ours = cfg.sizes_for_demand
        self.traffic_interval_s = cfg.demand_interval_s if ours else cfg.throughput_interval_s
        self.state = state if state is not None else PolicyState()
        self.estimator = SnapshotEstimator()
        self.forecaster: TrafficForecaster | None = (
            forecaster
            if forecaster is not None
            else LoadForecaster(forecast)
            if forecast is not None
            else None
        )
        self.forecast: LoadForecast | None = None
        self.traffic: TrafficSample | None = None
        # the predictor service's demand forecaster, run in-process (the decider sizes for it)
        self.demand_forecaster = HorizonDemand(cfg.startup_s) if ours else None
        self.demand: DemandForecast | None = None
        needs_fit = cfg.policy is not PolicyKind.THRESHOLD
        self.regressions: dict[str, OnlineRegression | None] = {}
        for c in COMPONENTS:
            comp = Component(c)
            rc = (
                RegressionConfig.reference(comp) if reference_regression else RegressionConfig(component=comp)
            )
            self.regressions[c] = OnlineRegression(rc) if needs_fit else None
        self.decisions = 0
        self.last_result: DecisionResult | None = None

    def initial_targets(self) -> dict[str, int]:
        return dict(self.initial)

    def observe_traffic(self, sample: TrafficSample, now_s: float) -> None:
        self.traffic = sample
        if self.demand_forecaster is not None and self.demand_forecaster.observe(sample):
            self.demand = self.demand_forecaster.forecast(NAMESPACE, now_s)
        if self.forecaster is not None:
            self.forecaster.observe(sample)
            f = self.forecaster.forecast(namespace=NAMESPACE, now_s=now_s)
            if self.demand_scale != 1.0 and f.num_requests is not None:
                upper = f.num_requests_upper
                f = msgspec.structs.replace(
                    f,
                    num_requests=f.num_requests * self.demand_scale,
                    num_requests_upper=None if upper is None else upper * self.demand_scale,
                )
            self.forecast = f

    def snapshot(self, component: str, now_s: float, cluster: Cluster) -> ComponentSnapshot:
        reg = self.regressions[component]
        blocks = self.settings.num_gpu_blocks
        loads = []
        for w in cluster.workers[component]:
            if w.state is WorkerState.STARTING:
                continue
            if reg is not None and w.last_pass is not None and w.passes != w.seen_passes:
                reg.observe(to_fpm(w.last_pass, w.wid), now_s, None if w.initial else w.ready_s)
            w.seen_passes = w.passes
            loads.append(worker_load(w, now_s, blocks))
        avg = reg.averages if reg is not None else None
        return ComponentSnapshot(
            namespace=NAMESPACE,
            component=Component(component),
            issued_at_s=now_s,
            workers=loads,
            model=reg.to_latency_model() if reg is not None else None,
            capabilities=self._capabilities(component),
            avg_isl_tokens=avg.avg_isl_tokens if avg else None,
            avg_decode_length_tokens=avg.avg_decode_length_tokens if avg else None,
            avg_prefill_tokens_per_pass=avg.avg_prefill_tokens_per_pass if avg else None,
            avg_num_decode_requests=avg.avg_num_decode_requests if avg else None,
        )

    def _capabilities(self, component: str) -> EngineCapabilities:
        caps = self.settings.capabilities(component)
        if self.capacity_scale == 1.0:
            return caps
        f = self.capacity_scale
        return msgspec.structs.replace(
            caps,
            context_length_tokens=max(1, round(caps.context_length_tokens * f)),
            num_gpu_blocks=max(1, round(caps.num_gpu_blocks * f)),
        )

    def tick(self, now_s: float, cluster: Cluster) -> dict[str, int] | None:
        replicas = {c: cluster.replicas(c) for c in COMPONENTS}
        in_progress = frozenset(c for c, r in replicas.items() if r.pending > 0 or r.ready != r.desired)
        inputs = DecisionInputs(
            replicas=replicas,
            forecast=self.forecast,
            traffic=self.traffic,
            demand=self.demand,
            snapshots={c: self.snapshot(c, now_s, cluster) for c in COMPONENTS},
            in_progress=in_progress,
            capacity=self.capacity,
            estimator=self.estimator,
        )
        result, self.state = decide(inputs, self.state, self.cfg, now_s)
        self.last_result = result
        self.decisions += 1
        return result.targets
