"""The decision protocol every actuator follows, over a small :class:`Backend`.

One instance per actuator service, alive for the whole process; it acts only between ``activate``
(this instance holds the lease) and ``deactivate``. Two loops share one state under one lock:

* intake: the durable JetStream consumer on the decision stream. The newest applicable decision wins
  (older, advisory and foreign ones are ignored, skipped ones acked ``superseded``); it is checked
  (known components, the backend's ``admit``) and acked ``accepted`` or ``failed``.
* control (level-triggered, every ``poll_s`` and on every change): list the backend's workers,
  adopt what someone else added or removed (``external_change``), start or drain workers until the
  running count of each component matches its desired count, remove drained workers, ack the current
  decision ``completed`` once every target is there and ready (or ``failed`` after
  ``ready_timeout_s``), and publish ReplicaStatus.

Each decision gets ``accepted`` at most once and one final ack (``completed``, ``failed`` or
``superseded``) at most once, also across restarts and hand-overs: the state (workers, desired
counts, the last decision taken and the last one answered) is persisted in KV before acting, and a
new holder reloads it, reconciles with the backend, resumes or takes the newest decision on the
stream (:func:`~planner_runtime.decisions.on_takeover`), and only then reads the feed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import nats
from nats.js.kv import KeyValue
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from planner_proto import (
    AckStatus,
    Component,
    ComponentReplicas,
    DecodeError,
    ReplicaStatus,
    ScalingAck,
    ScalingDecision,
    Subjects,
)
from planner_runtime.actuation.backend import Backend, pick_victims
from planner_runtime.actuation.records import (
    ActuationError,
    FollowerState,
    NoCapacity,
    Phase,
    Seen,
    WorkerRecord,
)
from planner_runtime.bus import Bus, kv_get_rev, kv_put
from planner_runtime.decisions import DecisionFeed, StatusPublisher, on_takeover, select

KNOWN_COMPONENTS = frozenset(c.value for c in Component)


class FollowerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.acks = Counter("planner_actuator_acks", "Acks sent", ["status"], registry=registry)
        self.workers = Gauge(
            "planner_actuator_workers", "Workers by phase", ["component", "phase"], registry=registry
        )
        self.drain = Histogram(
            "planner_actuator_drain_seconds",
            "Drain start to worker removal",
            registry=registry,
            buckets=(1, 5, 15, 60, 180, 600, 1800),
        )
        self.backend_errors = Counter(
            "planner_actuator_backend_errors", "Failed backend calls", ["kind"], registry=registry
        )
        self.external = Counter(
            "planner_actuator_external_changes", "Worker counts changed by someone else", registry=registry
        )
        self.ignored = Counter(
            "planner_actuator_decisions_ignored", "Decisions not applied", ["reason"], registry=registry
        )


class DecisionFollower:
    def __init__(
        self,
        *,
        backend: Backend,
        subjects: Subjects,
        actuator: str,
        actuator_id: str,
        ready_timeout_s: float,
        status_every_s: float,
        poll_s: float,
        metrics: FollowerMetrics,
        log: Any,
    ) -> None:
        self.backend = backend
        self.subjects = subjects
        self.actuator = actuator
        self.actuator_id = actuator_id
        self.ready_timeout_s = ready_timeout_s
        self.status_every_s = status_every_s
        self.poll_s = poll_s
        self.log = log
        self.m = metrics
        self.state_key = subjects.state_key(actuator, actuator_id)
        self.durable = f"{actuator}-{actuator_id}"
        self.mutex = asyncio.Lock()
        self.wake = asyncio.Event()
        self.backend_ok = False
        self.feed: DecisionFeed | None = None
        self._bus: Bus | None = None
        self._kv: KeyValue | None = None
        self._status: StatusPublisher | None = None
        self._snapshot: ReplicaStatus | None = None
        """The replica status as the last control pass left it (published by :meth:`status_loop`
        while a pass is stuck on an unanswered NATS call)."""
        self._pass_since: float | None = None
        self._saved_rev: int | None = None
        """KV revision of the state this instance last saved or loaded."""
        self._dirty = False
        """The state changed since the last save that succeeded (a save failed: NATS down)."""
        self._reset(FollowerState())

    def _reset(self, st: FollowerState) -> None:
        self.workers: dict[str, WorkerRecord] = dict(st.workers)
        self.desired: dict[str, int] = dict(st.desired)
        self.last_decision_id = st.last_decision_id
        self.completed_decision_id = st.completed_decision_id
        self._skipped: tuple[int, int] | None = None
        """(last before, the one caught up to) of a takeover that jumped to the newest decision: the
        ones in between, delivered by the feed afterwards, are answered ``superseded``."""
        self.current: ScalingDecision | None = None
        self.accepted_at = 0.0
        self.external_change = False
        self.ready: set[str] = set()
        self.load: dict[str, int] = {}
        self._drain_sent: set[str] = set()
        self._unsure: set[str] = set()
        """Components whose last start failed half-way: what appears next is ours, not external."""

    @property
    def managed(self) -> list[str]:
        return list(self.backend.components())

    # ---- lifecycle ----------------------------------------------------------------------------
    async def activate(self, bus: Bus, kv: KeyValue) -> None:
        """Reload the persisted state, reconcile with the backend, take over the newest decision on
        the stream, then subscribe to the feed. Call :meth:`intake_loop` and :meth:`control_loop`."""
        clock = asyncio.get_running_loop().time
        self._bus, self._kv = bus, kv
        if self._status is None:
            self._status = StatusPublisher(bus, self.subjects.replicas(), self.status_every_s)
        # an activation is a long pass for :meth:`status_loop`: while it waits on JetStream (stream and
        # consumer leaders elected after a cluster restart) the reconciled status keeps going out
        self._pass_since = clock()
        try:
            async with self.mutex:
                await self._reload(kv)
                await self._guarded_pass()
                self._snapshot = self.replica_status()
                with contextlib.suppress(nats.errors.Error, OSError):
                    await self._status.maybe_publish(self._snapshot, clock())
                feed = DecisionFeed(bus, self.subjects, self.durable)
                await self._take_over(await feed.last())
            await feed.start()
        finally:
            self._pass_since = None
        self.feed = feed

    async def _reload(self, kv: KeyValue) -> None:
        """The persisted state, unless this instance holds changes it could not save and nobody has
        saved since (it lost the lease in a NATS outage and took it back): then its own, saved now.
        Reloading the older entry would bring back a desired count it had given up or finished."""
        try:
            stored, rev = await kv_get_rev(kv, self.state_key, FollowerState)
        except DecodeError as exc:
            self.log.error("state_corrupt", key=self.state_key, error=str(exc))
            stored, rev = None, -1
        if self._dirty and rev == self._saved_rev:
            self._reset(self._state())
            self.log.info(
                "state_kept_own", workers=len(self.workers), last_decision_id=self.last_decision_id,
                reason="unsaved_changes",
            )  # fmt: skip
            await self._persist()
            return
        self._reset(stored or FollowerState())
        self._saved_rev, self._dirty = rev, False
        self.log.info("state_loaded", workers=len(self.workers), last_decision_id=self.last_decision_id)

    async def deactivate(self) -> None:
        """The lease is lost: whoever holds it now owns the workers and the decisions."""
        self.current = None
        self._snapshot = None  # the next activation reports what it finds, not what was
        await self.close()

    async def close(self) -> None:
        feed, self.feed = self.feed, None
        if feed is not None:
            await feed.close()

    async def _take_over(self, last: ScalingDecision | None) -> None:
        take = on_takeover(last, self.last_decision_id, self.subjects.ns, self.completed_decision_id)
        if take.accept is not None:
            self.log.info("decision_caught_up", decision_id=take.accept.decision_id)
            prev = self.last_decision_id
            if self.completed_decision_id < prev < take.accept.decision_id:
                # the decision being carried out when the lease was lost never got its final ack, and
                # the newer one replaces it: answer it now, once (seen in chaos on a NATS cluster
                # restart: a decision published while the actuator was between holders)
                self.completed_decision_id = prev
                await self._persist()
                stale = msgspec.structs.replace(take.accept, decision_id=prev)
                await self._ack(
                    stale, AckStatus.SUPERSEDED, f"superseded by decision {take.accept.decision_id}"
                )
            self._skipped = (prev, take.accept.decision_id)
            await self._accept(take.accept)
            return
        d = take.resume
        targets = {c: n for c, n in d.targets.items() if c in self.managed} if d else {}
        if d is None or not targets:
            return
        self.desired.update(targets)
        self.current = d
        self.accepted_at = asyncio.get_running_loop().time()
        self.log.info("decision_resumed", decision_id=d.decision_id, targets=targets)

    # ---- decisions ----------------------------------------------------------------------------
    async def intake_loop(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set() and self.feed is not None:
            feed = self.feed
            try:
                decisions, msgs = await feed.fetch(timeout_s=1.0)
            except (nats.errors.Error, OSError) as exc:
                self.log.warning("decision_fetch_failed", error=str(exc) or type(exc).__name__)
                await asyncio.sleep(1.0)
                continue
            if not msgs:
                continue
            try:
                await self.take_in(decisions)
            except (nats.errors.Error, OSError):
                await asyncio.sleep(1.0)  # not acked: the feed delivers them again
                continue
            await feed.ack_all(msgs)
            self.wake.set()

    async def take_in(self, decisions: list[ScalingDecision]) -> None:
        """Answer and apply a batch of decisions from the feed (the newest is applied)."""
        async with self.mutex:
            sel = select(decisions, self.last_decision_id, self.subjects.ns)
            for d in sel.ignored:
                skipped = self._skipped
                if (
                    skipped is not None
                    and not d.advisory
                    and d.namespace == self.subjects.ns
                    and skipped[0] < d.decision_id < skipped[1]
                ):
                    # published while no actuator held the lease and passed over by the takeover:
                    # every decision gets an answer
                    await self._ack(d, AckStatus.SUPERSEDED, f"superseded by decision {skipped[1]}")
                    continue
                reason = "advisory" if d.advisory else "old_or_foreign"
                self.m.ignored.labels(reason).inc()
                self.log.info("decision_ignored", decision_id=d.decision_id, reason=reason)
            for d in sel.superseded:
                newer = sel.apply.decision_id if sel.apply else "?"
                await self._ack(d, AckStatus.SUPERSEDED, f"superseded by decision {newer}")
            if sel.apply is not None:
                await self._accept(sel.apply)

    async def _accept(self, d: ScalingDecision) -> None:
        unknown = sorted(c for c in d.targets if c not in KNOWN_COMPONENTS)
        targets = {c: n for c, n in d.targets.items() if c in self.managed}
        if unknown:
            # Never turned into a worker name, an argument or an API path: reported and dropped.
            error = f"invalid_component: {unknown!r} are not components ({sorted(KNOWN_COMPONENTS)})"
        else:
            error = self.backend.admit(d.targets, self._running())
        before = (self.last_decision_id, self.completed_decision_id, dict(self.desired), self.external_change)
        self.last_decision_id = d.decision_id
        if self.current is not None:
            await self._finish(AckStatus.SUPERSEDED, f"superseded by decision {d.decision_id}")
        if error:
            self.completed_decision_id = d.decision_id
        else:
            self.desired.update(targets)
            self.external_change = False
        try:
            # Taken only once saved: a decision answered but not saved would be taken, and answered,
            # again by whoever reloads the state (this instance after a lost lease, or a standby).
            await self._persist(strict=True)
        except (nats.errors.Error, OSError):
            self.last_decision_id, self.completed_decision_id, self.desired, self.external_change = before
            self.log.warning("decision_deferred", decision_id=d.decision_id, reason="state_not_saved")
            raise
        if error:
            await self._ack(d, AckStatus.FAILED, error)
            return
        self.current = d
        self.accepted_at = asyncio.get_running_loop().time()
        self.log.info("decision_accepted", decision_id=d.decision_id, targets=targets)
        await self._ack(d, AckStatus.ACCEPTED)

    async def _ack(self, d: ScalingDecision, status: AckStatus, message: str = "") -> None:
        ready = {c: self._ready_count(c) for c in d.targets if c in self.managed}
        ack = ScalingAck(
            decision_id=d.decision_id,
            actuator_id=self.actuator_id,
            status=status,
            ready=ready,
            message=message,
            at_s=time.time(),
        )
        self.m.acks.labels(status.value).inc()
        self.log.info("ack", decision_id=d.decision_id, status=status.value, message=message, ready=ready)
        if self._bus is not None:
            await self._bus.publish(self.subjects.ack(), ack)

    async def _finish(self, status: AckStatus, message: str = "") -> None:
        """The current decision's one final ack."""
        d, self.current = self.current, None
        if d is None:
            if message:
                self.log.warning("actuation_problem", message=message)
            return
        self.completed_decision_id = d.decision_id
        await self._persist()
        await self._ack(d, status, message)

    # ---- control loop -------------------------------------------------------------------------
    async def control_loop(self, stopping: asyncio.Event) -> None:
        clock = asyncio.get_running_loop().time
        while not stopping.is_set():
            self.wake.clear()
            self._pass_since = clock()
            async with self.mutex:
                await self._guarded_pass()
                self._snapshot = self.replica_status()
            self._pass_since = None
            try:
                if self._status is not None:
                    await self._status.maybe_publish(self._snapshot, clock())
            except (nats.errors.Error, OSError):
                pass
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=self.poll_s)
            except TimeoutError:
                pass

    async def status_loop(self, stopping: asyncio.Event) -> None:
        """Keep the replica status on time while a control pass waits on NATS (a JetStream call
        times out while a cluster elects a new leader, several seconds): the last pass's status is
        published at least every ``status_every_s``, so deciders do not take the actuator for gone."""
        clock = asyncio.get_running_loop().time
        half = max(self.status_every_s / 2.0, 0.05)
        while not stopping.is_set():
            try:
                await asyncio.wait_for(stopping.wait(), timeout=half)
            except TimeoutError:
                pass
            since, snap = self._pass_since, self._snapshot
            if self._status is None or snap is None or since is None or clock() - since < half:
                continue  # no pass under way (it publishes itself), or not stuck yet
            try:
                await self._status.maybe_publish(snap, clock())
            except (nats.errors.Error, OSError):
                pass

    async def _guarded_pass(self) -> None:
        try:
            await self._pass()
            self.backend_ok = True
        except ActuationError as exc:
            self.backend_ok = False
            self.m.backend_errors.labels("transient" if exc.transient else "permanent").inc()
            self.log.warning("backend_call_failed", error=exc.message, transient=exc.transient)
            if not exc.transient:
                await self._finish(AckStatus.FAILED, exc.message)
        except (nats.errors.Error, OSError) as exc:
            self.log.warning("nats_call_failed", error=str(exc) or type(exc).__name__)

    async def _pass(self) -> None:
        seen = {
            w.name: w for w in await self.backend.workers(dict(self.workers)) if w.component in self.managed
        }
        changed = await self._sync(seen)
        changed |= await self._drains(seen)
        changed |= await self._scale()
        if changed or self._dirty:
            await self._persist()
        self._gauges()
        await self._check_completion()

    async def _sync(self, seen: dict[str, Seen]) -> bool:
        """Records <-> what the backend lists: new workers adopted, vanished ones forgotten; a
        running worker changed by someone else is an external change, and its count is adopted."""
        changed = False
        external: set[str] = set()
        for name, w in seen.items():
            if name in self.workers:
                continue
            self.workers[name] = WorkerRecord(
                name=name,
                component=w.component,
                index=w.index,
                gpus=list(w.gpus),
                started_at_s=w.started_at_s or time.time(),
            )
            changed = True
            if w.component not in self._unsure:
                external.add(w.component)
                self.log.info("worker_adopted", worker=name, gpus=w.gpus)
        for name, rec in list(self.workers.items()):
            if name in seen:
                continue
            del self.workers[name]
            changed = True
            if rec.phase == Phase.DRAINING:
                self._drain_done(rec, "gone")
            elif rec.component not in self._unsure:
                external.add(rec.component)
                self.log.info("worker_forgotten", worker=name)
        self._unsure.clear()
        self.ready = {n for n, w in seen.items() if w.ready and self.workers[n].phase == Phase.RUNNING}
        self.load = {n: w.load for n, w in seen.items()}
        for comp in sorted(external):
            count = sum(1 for _ in self._running(comp))
            self.log.warning("external_change", component=comp, previous=self.desired.get(comp), now=count)
            self.desired[comp] = count
            self.m.external.inc()
        if external:
            self.external_change = True
            if self.current is not None and external & set(self.current.targets):
                await self._finish(
                    AckStatus.FAILED,
                    f"external_change: workers of {sorted(external)} changed by someone else",
                )
        for w in seen.values():
            if w.problem and self.workers[w.name].phase == Phase.RUNNING:
                await self._finish(AckStatus.FAILED, w.problem)
        return changed

    async def _drains(self, seen: dict[str, Seen]) -> bool:
        changed = False
        for rec in [r for r in self.workers.values() if r.phase == Phase.DRAINING]:
            try:
                if rec.name not in self._drain_sent:
                    await self.backend.drain([rec])
                    self._drain_sent.add(rec.name)
                gone = await self.backend.remove(rec)
            except ActuationError as exc:
                self.m.backend_errors.labels("drain").inc()
                self.log.warning("drain_failed", worker=rec.name, error=exc.message)
                continue
            if gone:
                del self.workers[rec.name]
                self._drain_done(rec, "removed")
                changed = True
        return changed

    def _drain_done(self, rec: WorkerRecord, how: str) -> None:
        self._drain_sent.discard(rec.name)
        seconds = max(0.0, time.time() - rec.drain_started_at_s) if rec.drain_started_at_s else 0.0
        self.m.drain.observe(seconds)
        self.log.info("drain_done", worker=rec.name, seconds=round(seconds, 3), how=how)

    async def _scale(self) -> bool:
        changed = False
        for comp in self.managed:
            want = self.desired.get(comp)
            if want is None:
                continue
            running = list(self._running(comp))
            if len(running) < want:
                changed |= await self._start(comp, want - len(running))
            elif len(running) > want:
                changed |= await self._drain(comp, running, len(running) - want)
        return changed

    async def _start(self, comp: str, count: int) -> bool:
        try:
            started = await self.backend.start(comp, count, list(self.workers.values()))
        except NoCapacity as exc:
            if not any(r.phase == Phase.DRAINING for r in self.workers.values()):
                await self._give_up(comp, exc.message)
            return False  # otherwise wait: draining workers give their share back
        except ActuationError as exc:
            if exc.transient:
                self._unsure.add(comp)
                raise
            await self._give_up(comp, exc.message)
            return False
        for rec in started:
            self.workers[rec.name] = rec
            self.log.info("worker_started", worker=rec.name, gpus=rec.gpus)
        return bool(started)

    async def _drain(self, comp: str, running: list[WorkerRecord], count: int) -> bool:
        victims = pick_victims(running, count, self.ready, self.load)
        now = time.time()
        for v in victims:
            self.workers[v.name] = msgspec.structs.replace(v, phase=Phase.DRAINING, drain_started_at_s=now)
            self.log.info("drain_begin", worker=v.name)
        await self._persist()
        marked = [self.workers[v.name] for v in victims]
        try:
            await self.backend.drain(marked)
        except ActuationError as exc:
            if exc.transient:
                raise  # still marked: the drain is sent again on the next pass
            for v in victims:
                self.workers[v.name] = v
            await self._give_up(comp, exc.message)
            return True
        self._drain_sent.update(v.name for v in victims)
        return True

    async def _give_up(self, comp: str, message: str) -> None:
        """Stop trying to reach a target the backend cannot reach: desired becomes what there is."""
        self.desired[comp] = sum(1 for _ in self._running(comp))
        await self._finish(AckStatus.FAILED, message)

    async def _check_completion(self) -> None:
        d = self.current
        if d is None:
            return
        done = all(
            sum(1 for w in self.workers.values() if w.component == c) == n and self._ready_count(c) == n
            for c, n in d.targets.items()
            if c in self.managed
        )
        if done:
            await self._finish(AckStatus.COMPLETED)
        elif asyncio.get_running_loop().time() - self.accepted_at > self.ready_timeout_s:
            await self._finish(
                AckStatus.FAILED, f"ready_timeout: not at target after {self.ready_timeout_s:g} s"
            )

    # ---- views --------------------------------------------------------------------------------
    def _running(self, comp: str | None = None) -> Sequence[WorkerRecord]:
        return [
            w
            for w in self.workers.values()
            if w.phase == Phase.RUNNING and (comp is None or w.component == comp)
        ]

    def _ready_count(self, comp: str) -> int:
        return sum(1 for w in self._running(comp) if w.name in self.ready)

    def _gauges(self) -> None:
        for comp in self.managed:
            for phase in Phase:
                n = sum(1 for w in self.workers.values() if w.component == comp and w.phase == phase)
                self.m.workers.labels(comp, phase.value).set(n)

    def replica_status(self) -> ReplicaStatus:
        comps: dict[str, ComponentReplicas] = {}
        for comp in self.managed:
            recs = [w for w in self.workers.values() if w.component == comp]
            running = [w for w in recs if w.phase == Phase.RUNNING]
            ready = sum(1 for w in running if w.name in self.ready)
            comps[comp] = ComponentReplicas(
                desired=self.desired.get(comp, len(running)),
                ready=ready,
                pending=len(running) - ready,
                draining=len(recs) - len(running),
                gpus_per_replica=self.backend.gpus_per_replica(comp),
            )
        return ReplicaStatus(
            namespace=self.subjects.ns,
            actuator_id=self.actuator_id,
            at_s=time.time(),
            components=comps,
            last_decision_id=self.last_decision_id,
            external_change=self.external_change,
        )

    def _state(self) -> FollowerState:
        return FollowerState(
            workers=dict(self.workers),
            desired=dict(self.desired),
            last_decision_id=self.last_decision_id,
            completed_decision_id=self.completed_decision_id,
        )

    async def _persist(self, strict: bool = False) -> None:
        """Save the state to KV; a failure is logged (and raised with ``strict``), and the state is
        saved again on the next control pass."""
        if self._kv is None:
            return
        try:
            self._saved_rev = await kv_put(self._kv, self.state_key, self._state())
        except (nats.errors.Error, OSError) as exc:
            self._dirty = True
            self.log.warning("state_persist_failed", error=str(exc) or type(exc).__name__)
            if strict:
                raise
            return
        self._dirty = False
