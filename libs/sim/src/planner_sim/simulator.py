"""Discrete-event simulation of a disaggregated fleet (prefill -> KV hand-off -> decode) in virtual time.

Events live in one heap, ordered by (time, kind, sequence). An engine is advanced pass by pass: each
pass is one :meth:`Scheduler.step`, and its outputs (first tokens, hand-offs, finished requests) take
effect when the pass ends. An engine with nothing to do schedules nothing: it is woken by a request,
or at the time its next remote KV arrives. The controller (the planner under test) runs every
``tick_s`` seconds; its targets are applied at once, and new workers serve after the startup delay.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import numpy as np

from planner_core.engine import EnginePass, EngineRequest, kv_transfer_time_s
from planner_proto.traffic import TrafficSample
from planner_sim.cluster import Cluster
from planner_sim.records import RequestLog, TrafficMeter
from planner_sim.traces import TraceRequest
from planner_sim.workers import COMPONENTS, DECODE, PREFILL, ClusterSettings, Worker, WorkerState

# event kinds, in the order they are handled at equal times
_PASS_END = 0
_WAKE = 1
_READY = 2
_ARRIVAL = 3
_TICK = 4


class Controller(Protocol):
    """The planner under test: decides absolute targets from what it can observe."""

    name: str
    traffic_interval_s: float

    def initial_targets(self) -> dict[str, int]: ...

    def observe_traffic(self, sample: TrafficSample, now_s: float) -> None: ...

    def tick(self, now_s: float, cluster: Cluster) -> dict[str, int] | None: ...


@dataclass(frozen=True, kw_only=True)
class TimelinePoint:
    at_s: float
    ready: dict[str, int]
    desired: dict[str, int]
    held_gpus: int


@dataclass(frozen=True, kw_only=True)
class SimResult:
    policy: str
    log: RequestLog
    horizon_s: float
    gpu_seconds: float
    """Held from ``count_from_s`` to ``horizon_s`` (as the starting and draining seconds)."""
    starting_gpu_seconds: float
    draining_gpu_seconds: float
    actions: int
    timeline: list[TimelinePoint]
    traffic: list[TrafficSample]
    sim_end_s: float
    wall_s: float
    passes: int
    workers_created: int

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0

    @property
    def speed(self) -> float:
        """Simulated seconds per wall-clock second."""
        return self.sim_end_s / self.wall_s if self.wall_s > 0 else math.inf


class _Sim:
    def __init__(
        self,
        trace: Sequence[TraceRequest],
        settings: ClusterSettings,
        controller: Controller,
        tick_s: float,
    ) -> None:
        self.settings = settings
        self.controller = controller
        self.tick_s = tick_s
        self.reqs = [EngineRequest(i, r.input_tokens, r.output_tokens) for i, r in enumerate(trace)]
        self.log = RequestLog(
            np.array([r.arrival_s for r in trace], dtype=np.float64),
            np.array([r.input_tokens for r in trace], dtype=np.int64),
            np.array([r.output_tokens for r in trace], dtype=np.int64),
        )
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.cluster = Cluster(settings, self._on_start)
        self.meter = TrafficMeter("sim", controller.traffic_interval_s)
        self.queued: dict[str, list[int]] = {c: [] for c in COMPONENTS}
        self.done = 0
        self.passes = 0
        self.timeline: list[TimelinePoint] = []
        self.traffic: list[TrafficSample] = []
        self.kv_per_token_s = kv_transfer_time_s(
            1, settings.kv_bytes_per_token, settings.kv_bandwidth_bytes_per_s
        )

    def push(self, t: float, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, payload))

    def _on_start(self, w: Worker) -> None:
        self.push(w.ready_s, _READY, w)

    # ---- engines -----------------------------------------------------------------------------

    def kick(self, w: Worker, t: float) -> None:
        if w.busy or w.state is WorkerState.STARTING or w.state is WorkerState.STOPPED:
            return
        s = w.sched
        nxt = s.next_remote_ready_s
        if s.has_work or (nxt is not None and nxt <= t):
            p = s.step(t)
            if not p.is_idle:
                w.busy = True
                self.passes += 1
                self.seq += 1
                heapq.heappush(self.heap, (t + p.duration_s, _PASS_END, self.seq, (w, p)))
                return
            nxt = s.next_remote_ready_s
        if nxt is not None and t < nxt < w.wake_at:
            w.wake_at = nxt
            self.push(nxt, _WAKE, w)

    def pass_end(self, t: float, w: Worker, p: EnginePass) -> None:
        w.busy = False
        w.last_pass = p
        w.passes += 1
        if w.component == PREFILL:
            if p.first_token_ids:
                arrival = self.log.arrival_s
                first = self.log.first_token_s
                for rid in p.first_token_ids:
                    i = int(rid)
                    first[i] = t
                    self.meter.first_token(t - arrival[i])
            for rid in p.finished_ids:
                w.outstanding -= 1
                self.handoff(int(rid), t)
        else:
            for rid in p.finished_ids:
                w.outstanding -= 1
                self.finish(int(rid), t)
        if w.state is WorkerState.DRAINING:
            self.cluster.finish_if_drained(w, t)
        self.kick(w, t)

    # ---- requests ----------------------------------------------------------------------------

    def dispatch(self, component: str, rid: int, t: float) -> None:
        w = self.cluster.route(component)
        if w is None:
            self.queued[component].append(rid)
            return
        w.outstanding += 1
        req = self.reqs[rid]
        if component == PREFILL:
            w.sched.add_request(req)
        else:
            w.sched.add_remote(req, t + req.prompt_tokens * self.kv_per_token_s)
        self.kick(w, t)

    def handoff(self, rid: int, t: float) -> None:
        if self.reqs[rid].max_output_tokens <= 1:
            self.finish(rid, t)
        else:
            self.dispatch(DECODE, rid, t)

    def finish(self, rid: int, t: float) -> None:
        log = self.log
        log.finish_s[rid] = t
        log.finish_count[rid] += 1
        self.done += 1
        osl = int(log.osl[rid])
        itl = (t - log.first_token_s[rid]) / (osl - 1) if osl > 1 else None
        self.meter.finished(itl, t - log.arrival_s[rid])

    # ---- control -----------------------------------------------------------------------------

    def tick(self, t: float) -> None:
        meter = self.meter
        while t >= meter.start_s + meter.interval_s - 1e-9:
            sample = meter.close()
            self.traffic.append(sample)
            self.controller.observe_traffic(sample, t)
        targets = self.controller.tick(t, self.cluster)
        if targets:
            for c, n in targets.items():
                if c in self.cluster.desired:
                    self.cluster.set_target(c, n, t)
        cl = self.cluster
        self.timeline.append(
            TimelinePoint(
                at_s=t,
                ready={c: len(cl.ready[c]) for c in COMPONENTS},
                desired=dict(cl.desired),
                held_gpus=cl.held_gpus(),
            )
        )

    def ready(self, t: float, w: Worker) -> None:
        if self.cluster.mark_ready(w):
            q = self.queued[w.component]
            self.queued[w.component] = []
            for rid in q:
                self.dispatch(w.component, rid, t)

    # ---- loop --------------------------------------------------------------------------------

    def run(self) -> float:
        n = len(self.reqs)
        arrivals = self.log.arrival_s
        self.cluster.start_initial(self.controller.initial_targets(), 0.0)
        self.push(0.0, _TICK, None)
        if n:
            self.push(float(arrivals[0]), _ARRIVAL, 0)
        heap = self.heap
        pop = heapq.heappop
        t = 0.0
        while heap and self.done < n:
            t, kind, _, payload = pop(heap)
            if kind == _PASS_END:
                self.pass_end(t, *cast(tuple[Worker, EnginePass], payload))
            elif kind == _ARRIVAL:
                i = cast(int, payload)
                r = self.reqs[i]
                self.meter.arrival(r.prompt_tokens, r.max_output_tokens)
                self.dispatch(PREFILL, i, t)
                if i + 1 < n:
                    self.push(float(arrivals[i + 1]), _ARRIVAL, i + 1)
            elif kind == _WAKE:
                assert isinstance(payload, Worker)
                if payload.wake_at <= t:
                    payload.wake_at = math.inf
                self.kick(payload, t)
            elif kind == _READY:
                assert isinstance(payload, Worker)
                self.ready(t, payload)
            else:
                self.tick(t)
                self.push(t + self.tick_s, _TICK, None)
        return t


def simulate(
    trace: Sequence[TraceRequest],
    settings: ClusterSettings,
    controller: Controller,
    *,
    horizon_s: float | None = None,
    tick_s: float = 5.0,
    count_from_s: float = 0.0,
) -> SimResult:
    """Run ``trace`` through a fleet driven by ``controller``. GPU time is counted from
    ``count_from_s`` (a warm-up before it is run but not paid) up to ``horizon_s`` (default: the last
    arrival)."""
    if tick_s <= 0:
        raise ValueError(f"tick_s: must be > 0, got {tick_s}")
    if not (math.isfinite(count_from_s) and count_from_s >= 0):
        raise ValueError(f"count_from_s: must be >= 0, got {count_from_s}")
    sim = _Sim(trace, settings, controller, tick_s)
    t0 = time.perf_counter()
    end = sim.run()
    wall = time.perf_counter() - t0
    horizon = horizon_s if horizon_s is not None else (trace[-1].arrival_s if trace else 0.0)
    tot, st, dr = sim.cluster.gpu_seconds(horizon, count_from_s)
    return SimResult(
        policy=controller.name,
        log=sim.log,
        horizon_s=horizon,
        gpu_seconds=tot,
        starting_gpu_seconds=st,
        draining_gpu_seconds=dr,
        actions=sim.cluster.actions,
        timeline=sim.timeline,
        traffic=sim.traffic,
        sim_end_s=end,
        wall_s=wall,
        passes=sim.passes,
        workers_created=len(sim.cluster.all_workers()),
    )
