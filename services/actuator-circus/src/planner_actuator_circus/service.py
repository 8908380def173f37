"""actuator-circus: applies ScalingDecisions to a local circusd, one watcher per worker.

Three tasks share one state (under one lock): the decision intake (newest decision wins, acks
``accepted``/``superseded``/``failed``), the control loop (level-triggered: reconcile with circusd's
watcher list, start or drain workers until the fleet matches the desired counts, ack ``completed``,
publish ReplicaStatus), and one drain task per worker being removed (SIGTERM, wait for the worker's
own drain to end, then ``rm`` that one watcher).

Instances with the same ``actuator_id`` are one active actuator plus standbys (KV lease
``{ns}.actuator-circus.{actuator_id}``). Only the active one reads decisions, talks to circusd and
publishes ReplicaStatus; a newly active one reloads the state its predecessor persisted, reconciles
it with circusd's watchers, and only then reads decisions.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import msgspec
import nats
from prometheus_client import Counter, Gauge, Histogram

from planner_actuator_circus.circusctl import CircusControl, CircusError, ErrorKind
from planner_actuator_circus.command import TemplateError
from planner_actuator_circus.planning import allocate, budget_error, next_index, pick_victims
from planner_actuator_circus.settings import CircusActuatorSettings
from planner_actuator_circus.state import (
    ActuatorState,
    Phase,
    WorkerRecord,
    name_pattern,
    parse_watcher_name,
    watcher_name,
)
from planner_proto import (
    AckStatus,
    Component,
    ComponentReplicas,
    ComponentSnapshot,
    DecodeError,
    EngineInfo,
    ReplicaStatus,
    ScalingAck,
    ScalingDecision,
)
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S, STATE_BUCKET
from planner_runtime.bus import kv_get, kv_put
from planner_runtime.decisions import DecisionFeed, StatusPublisher, on_takeover, select
from planner_runtime.service import Service

KILL_GRACE_S = 10.0
KNOWN_COMPONENTS = frozenset(c.value for c in Component)
POLL_S = 0.5


class CircusActuator(Service[CircusActuatorSettings]):
    name = "actuator-circus"
    settings_type = CircusActuatorSettings
    lease = "actuator-circus"

    def __init__(self, settings: CircusActuatorSettings) -> None:
        super().__init__(settings)
        self.command = settings.command()
        self.gpus_per = {c.value: settings.gpus_for(c.value) for c in Component}
        self.managed = [c.value for c in settings.components]
        self.pattern = name_pattern(settings.namespace)
        self.circus = CircusControl(settings.circus_endpoint, settings.circus_timeout_s)
        self.state_key = self.subjects.state_key("actuator-circus", settings.actuator_id)
        self.workers: dict[str, WorkerRecord] = {}
        self.desired: dict[str, int] = {}
        self.last_decision_id = 0
        self.completed_decision_id = 0
        self.current: ScalingDecision | None = None
        self.accepted_at = 0.0
        self.external_change = False
        self.ready: set[str] = set()
        self.restarts: dict[str, int] = {}
        self.drains: dict[str, asyncio.Task[None]] = {}
        self.loads: dict[str, tuple[float, int]] = {}
        self.circus_ok = False
        self.wake = asyncio.Event()
        self.mutex = asyncio.Lock()
        self._status_pub: StatusPublisher | None = None
        reg = self.registry
        self.m_acks = Counter("planner_actuator_acks", "Acks sent", ["status"], registry=reg)
        self.m_workers = Gauge("planner_actuator_workers", "Workers", ["component", "phase"], registry=reg)
        self.m_drain = Histogram(
            "planner_actuator_drain_seconds",
            "SIGTERM to watcher removal",
            registry=reg,
            buckets=(1, 5, 15, 60, 180, 600, 1800),
        )
        self.m_circus_errors = Counter(
            "planner_actuator_circus_errors", "Failed circusd calls", ["kind"], registry=reg
        )
        self.m_external = Counter(
            "planner_actuator_external_changes", "Watcher counts changed by someone else", registry=reg
        )
        self.m_restarts = Counter(
            "planner_actuator_worker_restarts", "Workers restarted after exiting", registry=reg
        )
        self.m_ignored = Counter(
            "planner_actuator_decisions_ignored", "Decisions not applied", ["reason"], registry=reg
        )

    # ---- lifecycle ----------------------------------------------------------------------------
    def lease_key(self) -> str:
        return self.subjects.state_key("actuator-circus", self.settings.actuator_id)

    async def setup(self) -> None:
        self.engines_kv = await self.bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        self.state_kv = await self.bus.kv(STATE_BUCKET)
        await self.bus.subscribe(self.subjects.state("*"), ComponentSnapshot, self._on_snapshot)

    async def activate(self) -> None:
        """Start (or take over): the persisted state, reconciled with circusd, before any decision."""
        async with self.mutex:
            await self._load_state()
            try:
                await self._pass()
            except CircusError as exc:
                self.m_circus_errors.labels(exc.kind).inc()
                self.log.warning("circus_unreachable", error=str(exc))
            feed = DecisionFeed(self.bus, self.subjects, f"actuator-circus-{self.settings.actuator_id}")
            await self._resume(await feed.last())
        await feed.start()
        self.feed = feed
        self.spawn(self._intake_loop(), "decisions", active=True)
        self.spawn(self._control_loop(), "control", active=True)

    async def deactivate(self) -> None:
        # The loops and drains are cancelled; whoever is active now owns the workers.
        self.drains.clear()
        self.current = None
        if hasattr(self, "feed"):
            await self.feed.close()

    async def _load_state(self) -> None:
        try:
            stored = await kv_get(self.state_kv, self.state_key, ActuatorState)
        except DecodeError as exc:
            self.log.error("state_corrupt", key=self.state_key, error=str(exc))
            stored = None
        stored = stored or ActuatorState()
        self.workers = dict(stored.workers)
        self.desired = dict(stored.desired)
        self.last_decision_id = stored.last_decision_id
        self.completed_decision_id = stored.completed_decision_id
        self.current, self.external_change = None, False
        self.ready, self.restarts, self.drains = set(), {}, {}
        self.log.info("state_loaded", workers=len(self.workers), last_decision_id=self.last_decision_id)

    async def _resume(self, last: ScalingDecision | None) -> None:
        """Take over the newest decision on the stream (:func:`on_takeover`); one the previous holder
        rejected has other desired counts and is not resumed."""
        take = on_takeover(last, self.last_decision_id, self.settings.namespace, self.completed_decision_id)
        if take.accept is not None:
            self.log.info("decision_caught_up", decision_id=take.accept.decision_id)
            await self._accept(take.accept)
            return
        last = take.resume
        targets = {c: n for c, n in last.targets.items() if c in self.managed} if last else {}
        if last is None or not targets:
            return
        if all(self.desired.get(c) == n for c, n in targets.items()):
            self.current = last
            self.accepted_at = asyncio.get_running_loop().time()
            self.log.info("decision_resumed", decision_id=last.decision_id, targets=targets)

    async def cleanup(self) -> None:
        # Workers are left running on purpose: a restarted actuator adopts them.
        if hasattr(self, "feed"):
            await self.feed.close()
        self.circus.close()

    def health_detail(self) -> dict[str, object]:
        return {
            "circus_ok": self.circus_ok,
            "workers": len(self.workers),
            "last_decision_id": self.last_decision_id,
        }

    # ---- inputs -------------------------------------------------------------------------------
    async def _on_snapshot(self, snap: ComponentSnapshot, subject: str) -> None:
        now = asyncio.get_running_loop().time()
        for w in snap.workers:
            self.loads[w.worker_id] = (now, w.running_requests + w.waiting_requests)

    def _in_flight(self) -> dict[str, int]:
        now = asyncio.get_running_loop().time()
        return {k: n for k, (t, n) in self.loads.items() if now - t <= self.settings.load_max_age_s}

    # ---- decisions ----------------------------------------------------------------------------
    async def _intake_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                decisions, msgs = await self.feed.fetch(timeout_s=1.0)
            except (nats.errors.Error, OSError) as exc:
                self.log.warning("decision_fetch_failed", error=str(exc) or type(exc).__name__)
                await asyncio.sleep(1.0)
                continue
            if not msgs:
                continue
            async with self.mutex:
                sel = select(decisions, self.last_decision_id, self.settings.namespace)
                for d in sel.ignored:
                    reason = "advisory" if d.advisory else "old_or_foreign"
                    self.m_ignored.labels(reason).inc()
                    self.log.info("decision_ignored", decision_id=d.decision_id, reason=reason)
                for d in sel.superseded:
                    note = f"superseded by decision {sel.apply.decision_id if sel.apply else '?'}"
                    await self._ack(d, AckStatus.SUPERSEDED, note)
                if sel.apply is not None:
                    await self._accept(sel.apply)
            await self.feed.ack_all(msgs)
            self.wake.set()

    async def _accept(self, d: ScalingDecision) -> None:
        targets = {c: n for c, n in d.targets.items() if c in self.managed}
        others = [w for w in self.workers.values() if w.component not in targets]
        error = budget_error(targets, self.gpus_per, len(self.settings.gpu_pool), others)
        unknown = sorted(c for c in d.targets if c not in KNOWN_COMPONENTS)
        if unknown:
            # Never turned into a watcher name or an argument: reported and dropped.
            error = f"invalid_component: {unknown!r} are not components ({sorted(KNOWN_COMPONENTS)})"
        self.last_decision_id = d.decision_id
        if self.current is not None:
            await self._ack(self.current, AckStatus.SUPERSEDED, f"superseded by decision {d.decision_id}")
            self.current = None
        if error:
            await self._persist()
            await self._ack(d, AckStatus.FAILED, error)
            return
        self.desired.update(targets)
        self.external_change = False
        self.restarts.clear()
        await self._persist()
        self.current = d
        self.accepted_at = asyncio.get_running_loop().time()
        self.log.info("decision_accepted", decision_id=d.decision_id, targets=targets)
        await self._ack(d, AckStatus.ACCEPTED)

    async def _ack(self, d: ScalingDecision, status: AckStatus, message: str = "") -> None:
        ready = {c: self._ready_count(c) for c in d.targets if c in self.managed}
        ack = ScalingAck(
            decision_id=d.decision_id,
            actuator_id=self.settings.actuator_id,
            status=status,
            ready=ready,
            message=message,
            at_s=time.time(),
        )
        self.m_acks.labels(status.value).inc()
        self.log.info("ack", decision_id=d.decision_id, status=status.value, message=message, ready=ready)
        await self.bus.publish(self.subjects.ack(), ack)

    async def _fail_current(self, message: str) -> None:
        if self.current is not None:
            await self._ack(self.current, AckStatus.FAILED, message)
            self.current = None
        else:
            self.log.warning("actuation_problem", message=message)

    # ---- control loop -------------------------------------------------------------------------
    async def _control_loop(self) -> None:
        clock = asyncio.get_running_loop().time
        while not self.stopping.is_set():
            try:
                async with self.mutex:
                    await self._pass()
                self.circus_ok = True
            except CircusError as exc:
                self.circus_ok = False
                self.m_circus_errors.labels(exc.kind).inc()
                self.log.warning("circus_call_failed", error=str(exc))
            except (nats.errors.Error, OSError) as exc:
                self.log.warning("nats_call_failed", error=str(exc) or type(exc).__name__)
            try:
                await self._publish_status(clock())
            except (nats.errors.Error, OSError):
                pass
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=min(1.0, self.settings.status_interval_s))
            except TimeoutError:
                pass

    async def _pass(self) -> None:
        """One reconciliation: circusd's watchers <-> records, readiness, crashed workers, scaling."""
        statuses = await self.circus.statuses()
        ours: dict[str, tuple[Component, int]] = {}
        for n in statuses:
            parsed = parse_watcher_name(self.pattern, n)
            if parsed is not None and parsed[0].value in self.managed:
                ours[n] = parsed
        changed = await self._sync_records(ours)
        for rec in list(self.workers.values()):
            if rec.phase == Phase.DRAINING and rec.name not in self.drains:
                self._begin_drain_task(rec)
        await self._refresh_ready(statuses)
        await self._respawn_exited(statuses)
        changed |= await self._scale()
        if changed:
            await self._persist()
        self._update_gauges()
        await self._check_completion()

    async def _sync_records(self, ours: dict[str, tuple[Component, int]]) -> bool:
        changed = False
        external: set[str] = set()
        for n, (comp, idx) in ours.items():
            rec = self.workers.get(n)
            if rec is None:
                gpus = await self._watcher_gpus(n)
                self.workers[n] = WorkerRecord(
                    name=n,
                    component=comp,
                    index=idx,
                    gpus=gpus,
                    phase=Phase.RUNNING,
                    started_at_s=time.time(),
                )
                external.add(comp.value)
                self.log.info("watcher_adopted", watcher=n, gpus=gpus)
                changed = True
            elif rec.phase == Phase.STARTING:
                self.workers[n] = msgspec.structs.replace(rec, phase=Phase.RUNNING)
                changed = True
        for n, rec in list(self.workers.items()):
            if n in ours or n in self.drains:
                continue
            if rec.phase == Phase.RUNNING:
                external.add(rec.component.value)
            self.log.info("watcher_forgotten", watcher=n, phase=rec.phase.value)
            del self.workers[n]
            changed = True
        for comp in external:
            count = sum(1 for w in self.workers.values() if w.component == comp and w.phase != Phase.DRAINING)
            self.log.warning("external_change", component=comp, previous=self.desired.get(comp), now=count)
            self.desired[comp] = count
            self.external_change = True
            self.m_external.inc()
        if external:
            await self._fail_current(
                f"external_change: watchers of {sorted(external)} changed by someone else"
            )
        return changed

    async def _watcher_gpus(self, name: str) -> list[int]:
        try:
            env = await self.circus.env(name)
        except CircusError:
            return []
        raw = env.get("CUDA_VISIBLE_DEVICES", "")
        return [int(x) for x in raw.split(",") if x.strip().isdigit()]

    async def _refresh_ready(self, statuses: dict[str, str]) -> None:
        ready: set[str] = set()
        for rec in self.workers.values():
            if rec.phase == Phase.DRAINING or statuses.get(rec.name) != "active":
                continue
            if self.settings.ready_source == "circus":
                ready.add(rec.name)
                continue
            key = self.subjects.engine_key(rec.component.value, rec.name)
            try:
                info = await kv_get(self.engines_kv, key, EngineInfo)
            except DecodeError:
                info = None
            if info is not None and not info.draining:
                ready.add(rec.name)
        self.ready = ready

    async def _respawn_exited(self, statuses: dict[str, str]) -> None:
        for rec in list(self.workers.values()):
            if rec.phase != Phase.RUNNING or statuses.get(rec.name) != "stopped":
                continue
            count = self.restarts.get(rec.name, 0) + 1
            self.restarts[rec.name] = count
            if count > self.settings.max_restarts:
                if count == self.settings.max_restarts + 1:
                    await self._fail_current(f"worker {rec.name} keeps exiting ({count - 1} restarts)")
                continue
            self.log.warning("worker_exited_restarting", watcher=rec.name, restart=count)
            self.m_restarts.inc()
            try:
                await self.circus.start(rec.name)
            except CircusError as exc:
                self.log.warning("worker_restart_failed", watcher=rec.name, error=str(exc))

    async def _scale(self) -> bool:
        changed = False
        in_flight = self._in_flight()
        for comp in self.managed:
            want = self.desired.get(comp)
            if want is None:
                continue
            active = [w for w in self.workers.values() if w.component == comp and w.phase != Phase.DRAINING]
            for _ in range(want - len(active)):
                started = await self._start_worker(comp)
                changed = True
                if not started:
                    break
            if len(active) > want:
                for victim in pick_victims(active, len(active) - want, self.ready, in_flight):
                    self.workers[victim.name] = msgspec.structs.replace(
                        victim, phase=Phase.DRAINING, drain_started_at_s=time.time()
                    )
                    changed = True
                    await self._persist()
                    self._begin_drain_task(self.workers[victim.name])
        return changed

    async def _start_worker(self, comp: str) -> bool:
        gpus = allocate(self.settings.gpu_pool, self.workers.values(), self.gpus_per[comp])
        if gpus is None:
            if not self.drains:
                await self._fail_current(
                    f"gpu_pool_exhausted: no {self.gpus_per[comp]} free GPU(s) for {comp}"
                )
                self._settle(comp)
            return False  # otherwise wait: draining workers give their GPUs back
        idx = next_index(w.index for w in self.workers.values() if w.component == comp)
        name = watcher_name(self.settings.namespace, comp, idx)
        values = {
            "worker_id": name,
            "component": comp,
            "namespace": self.settings.namespace,
            "nats_url": self.settings.nats_url,
            "index": str(idx),
            "gpus": ",".join(map(str, gpus)),
        }
        try:
            argv, env = self.command.render(values)
        except TemplateError as exc:
            await self._fail_current(f"worker_cmd: {exc}")
            self._settle(comp)
            return False
        rec = WorkerRecord(
            name=name, component=Component(comp), index=idx, gpus=gpus, started_at_s=time.time()
        )
        self.workers[name] = rec
        await self._persist()
        try:
            await self.circus.add(name, argv, self._watcher_options(name, env, gpus))
        except CircusError as exc:
            if exc.kind == ErrorKind.TRANSIENT:
                raise  # the record stays STARTING: the next pass adopts the watcher or retries
            if "already exist" not in exc.detail:
                del self.workers[name]
                await self._persist()
                await self._fail_current(f"circus add {name}: {exc.detail}")
                self._settle(comp)
                return False
        self.workers[name] = msgspec.structs.replace(rec, phase=Phase.RUNNING)
        self.log.info("worker_started", watcher=name, gpus=gpus)
        return True

    def _settle(self, comp: str) -> None:
        """Stop trying to reach an unreachable target: desired becomes what there is."""
        self.desired[comp] = sum(
            1 for w in self.workers.values() if w.component == comp and w.phase != Phase.DRAINING
        )

    def _watcher_options(self, name: str, env: dict[str, str], gpus: list[int]) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "env": {**env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))},
            "copy_env": self.settings.worker_copy_env,
            "shell": False,
            # The actuator restarts exited workers itself; a circus respawn would also bring back
            # a worker that exited after its drain.
            "respawn": False,
            "stop_signal": int(signal.SIGTERM),
            "graceful_timeout": float(self.settings.worker_drain_timeout_s),
        }
        if self.settings.worker_log_dir:
            path = f"{self.settings.worker_log_dir.rstrip('/')}/{name}.log"
            opts["stdout_stream"] = {"class": "FileStream", "filename": path}
            opts["stderr_stream"] = {"class": "FileStream", "filename": path}
        return opts

    # ---- drain --------------------------------------------------------------------------------
    def _begin_drain_task(self, rec: WorkerRecord) -> None:
        self.log.info("drain_begin", watcher=rec.name)
        self.drains[rec.name] = self.spawn(self._drain(rec), f"drain-{rec.name}", active=True)

    async def _drain(self, rec: WorkerRecord) -> None:
        t0 = time.time()
        try:
            gone = await self._drain_steps(rec)
            async with self.mutex:
                self.workers.pop(rec.name, None)
                self.drains.pop(rec.name, None)
                await self._persist()
            self.m_drain.observe(time.time() - t0)
            self.log.info("drain_done", watcher=rec.name, seconds=round(time.time() - t0, 3), gone=gone)
        except asyncio.CancelledError:
            self.drains.pop(rec.name, None)
            raise
        except Exception as exc:
            # Retried on the next control pass (the record is still DRAINING).
            self.drains.pop(rec.name, None)
            self.log.warning("drain_failed", watcher=rec.name, error=repr(exc))
        self.wake.set()

    async def _drain_steps(self, rec: WorkerRecord) -> str:
        """SIGTERM (unless the worker already shows it is draining), wait, kill after the timeout,
        then remove only this watcher. Returns how the worker went."""
        key = self.subjects.engine_key(rec.component.value, rec.name)
        try:
            info = await kv_get(self.engines_kv, key, EngineInfo)
        except DecodeError:
            info = None
        try:
            if info is None or not info.draining:
                await self.circus.signal(rec.name, signal.SIGTERM)
        except CircusError as exc:
            if exc.kind == ErrorKind.NOT_FOUND:
                return "watcher_gone"
            raise
        started = rec.drain_started_at_s or time.time()
        deadline = started + self.settings.worker_drain_timeout_s
        how = "exited"
        while True:
            try:
                pids = await self.circus.pids(rec.name)
            except CircusError as exc:
                if exc.kind == ErrorKind.NOT_FOUND:
                    return "watcher_gone"
                pids = [-1]
            if not pids:
                break
            if time.time() > deadline:
                if how == "killed":
                    break
                self.log.warning(
                    "drain_timeout_kill", watcher=rec.name, timeout_s=self.settings.worker_drain_timeout_s
                )
                await self.circus.signal(rec.name, signal.SIGKILL)
                how = "killed"
                deadline = time.time() + KILL_GRACE_S
            await asyncio.sleep(POLL_S)
        try:
            await self.circus.rm(rec.name)
        except CircusError as exc:
            if exc.kind != ErrorKind.NOT_FOUND:
                raise
        if how == "killed":
            try:
                await self.engines_kv.delete(key)
            except (nats.errors.Error, OSError):
                pass
        return how

    # ---- readiness, completion, status --------------------------------------------------------
    def _ready_count(self, comp: str) -> int:
        return sum(1 for w in self.workers.values() if w.component == comp and w.name in self.ready)

    async def _check_completion(self) -> None:
        d = self.current
        if d is None:
            return
        done = True
        for comp, n in d.targets.items():
            if comp not in self.managed:
                continue
            total = sum(1 for w in self.workers.values() if w.component == comp)
            if total != n or self._ready_count(comp) != n:
                done = False
        if done:
            await self._ack(d, AckStatus.COMPLETED)
            self.current = None
            self.completed_decision_id = d.decision_id
            await self._persist()
        elif asyncio.get_running_loop().time() - self.accepted_at > self.settings.ready_timeout_s:
            await self._fail_current(
                f"ready_timeout: not at target after {self.settings.ready_timeout_s:g} s"
            )

    def _update_gauges(self) -> None:
        for comp in self.managed:
            for phase in Phase:
                n = sum(1 for w in self.workers.values() if w.component == comp and w.phase == phase)
                self.m_workers.labels(comp, phase.value).set(n)

    def replica_status(self) -> ReplicaStatus:
        comps: dict[str, ComponentReplicas] = {}
        for comp in self.managed:
            recs = [w for w in self.workers.values() if w.component == comp]
            active = [w for w in recs if w.phase != Phase.DRAINING]
            ready = sum(1 for w in active if w.name in self.ready)
            comps[comp] = ComponentReplicas(
                desired=self.desired.get(comp, len(active)),
                ready=ready,
                pending=len(active) - ready,
                draining=len(recs) - len(active),
                gpus_per_replica=self.gpus_per[comp],
            )
        return ReplicaStatus(
            namespace=self.settings.namespace,
            actuator_id=self.settings.actuator_id,
            at_s=time.time(),
            components=comps,
            last_decision_id=self.last_decision_id,
            external_change=self.external_change,
        )

    async def _publish_status(self, now_s: float) -> None:
        if self._status_pub is None:
            self._status_pub = StatusPublisher(
                self.bus, self.subjects.replicas(), self.settings.status_interval_s
            )
        await self._status_pub.maybe_publish(self.replica_status(), now_s)

    async def _persist(self) -> None:
        state = ActuatorState(
            workers=dict(self.workers),
            desired=dict(self.desired),
            last_decision_id=self.last_decision_id,
            completed_decision_id=self.completed_decision_id,
        )
        try:
            await kv_put(self.state_kv, self.state_key, state)
        except (nats.errors.Error, OSError) as exc:
            self.log.warning("state_persist_failed", error=str(exc) or type(exc).__name__)


SERVICE = CircusActuator
