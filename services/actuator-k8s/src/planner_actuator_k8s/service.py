"""actuator-k8s: applies ScalingDecisions by patching replica counts in one Kubernetes namespace.

The decision intake (newest wins) and the control loop (read the targets, detect edits made by
someone else, write what the current decision asks for, ack ``completed`` once the ready counts
reach it, publish ReplicaStatus) share one state under one lock.

Instances with the same ``actuator_id`` are one active actuator plus standbys (KV lease
``{ns}.actuator-k8s.{actuator_id}``). Only the active one reads decisions, writes to the cluster and
publishes ReplicaStatus; a newly active one reloads the persisted state, reads the cluster, and only
then reads decisions.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import msgspec
import nats
from msgspec import Meta
from prometheus_client import Counter

from planner_actuator_k8s.kube import (
    ErrorKind,
    KubeError,
    Observed,
    Target,
    api_client,
    make_target,
    with_retries,
)
from planner_actuator_k8s.settings import K8sActuatorSettings
from planner_proto import (
    AckStatus,
    Component,
    ComponentReplicas,
    DecodeError,
    ReplicaStatus,
    ScalingAck,
    ScalingDecision,
)
from planner_proto.subjects import STATE_BUCKET
from planner_runtime.bus import kv_get, kv_put
from planner_runtime.decisions import DecisionFeed, StatusPublisher, on_takeover, select
from planner_runtime.service import Service

KNOWN_COMPONENTS = frozenset(c.value for c in Component)


class K8sState(msgspec.Struct, frozen=True, kw_only=True):
    last_decision_id: Annotated[int, Meta(ge=0)] = 0
    completed_decision_id: Annotated[int, Meta(ge=0)] = 0
    """The last decision acked ``completed``: a new holder does not complete it again."""
    expected: dict[str, Annotated[int, Meta(ge=0)]] = {}
    """Replica counts as last written (or adopted) by this actuator: anything else is an outside edit."""


class K8sActuator(Service[K8sActuatorSettings]):
    name = "actuator-k8s"
    settings_type = K8sActuatorSettings
    lease = "actuator-k8s"

    def __init__(self, settings: K8sActuatorSettings) -> None:
        super().__init__(settings)
        self.state_key = self.subjects.state_key("actuator-k8s", settings.actuator_id)
        self.target: Target | None = None
        self.observed: dict[str, Observed] = {}
        self.expected: dict[str, int] = {}
        self.desired: dict[str, int] = {}
        self.last_decision_id = 0
        self.completed_decision_id = 0
        self.current: ScalingDecision | None = None
        self.accepted_at = 0.0
        self.external_change = False
        self.api_ok = False
        self.wake = asyncio.Event()
        self.mutex = asyncio.Lock()
        self._status_pub: StatusPublisher | None = None
        reg = self.registry
        self.m_acks = Counter("planner_actuator_acks", "Acks sent", ["status"], registry=reg)
        self.m_api_errors = Counter("planner_actuator_api_errors", "Failed API calls", ["kind"], registry=reg)
        self.m_external = Counter(
            "planner_actuator_external_changes", "Replica counts changed by someone else", registry=reg
        )
        self.m_ignored = Counter(
            "planner_actuator_decisions_ignored", "Decisions not applied", ["reason"], registry=reg
        )

    # ---- lifecycle ----------------------------------------------------------------------------
    def lease_key(self) -> str:
        return self.subjects.state_key("actuator-k8s", self.settings.actuator_id)

    async def setup(self) -> None:
        api = await asyncio.to_thread(api_client, self.settings)
        self.target = make_target(api, self.settings)
        self.state_kv = await self.bus.kv(STATE_BUCKET)

    async def activate(self) -> None:
        """Start (or take over): the persisted state, checked against the cluster, before any decision."""
        async with self.mutex:
            try:
                stored = await kv_get(self.state_kv, self.state_key, K8sState)
            except DecodeError as exc:
                self.log.error("state_corrupt", key=self.state_key, error=str(exc))
                stored = None
            stored = stored or K8sState()
            self.last_decision_id = stored.last_decision_id
            self.completed_decision_id = stored.completed_decision_id
            self.expected = dict(stored.expected)
            self.observed, self.desired = {}, {}
            self.current, self.external_change = None, False
            await self._pass()
            feed = DecisionFeed(self.bus, self.subjects, f"actuator-k8s-{self.settings.actuator_id}")
            await self._resume(await feed.last())
        await feed.start()
        self.feed = feed
        self.spawn(self._intake_loop(), "decisions", active=True)
        self.spawn(self._control_loop(), "control", active=True)

    async def deactivate(self) -> None:
        self.current = None
        if hasattr(self, "feed"):
            await self.feed.close()

    async def _resume(self, last: ScalingDecision | None) -> None:
        """Take over the newest decision on the stream (:func:`on_takeover`)."""
        take = on_takeover(last, self.last_decision_id, self.settings.namespace, self.completed_decision_id)
        if take.accept is not None:
            self.log.info("decision_caught_up", decision_id=take.accept.decision_id)
            await self._accept(take.accept)
            return
        last = take.resume
        if last is None or not last.targets:
            return
        if all(c in KNOWN_COMPONENTS and c in self._components() for c in last.targets):
            self.desired.update(last.targets)
            self.current = last
            self.accepted_at = asyncio.get_running_loop().time()
            self.log.info("decision_resumed", decision_id=last.decision_id, targets=last.targets)

    async def cleanup(self) -> None:
        if hasattr(self, "feed"):
            await self.feed.close()

    def health_detail(self) -> dict[str, object]:
        return {"api_ok": self.api_ok, "last_decision_id": self.last_decision_id}

    def _components(self) -> list[str]:
        return self.target.components() if self.target is not None else []

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
                    newer = sel.apply.decision_id if sel.apply else "?"
                    await self._ack(d, AckStatus.SUPERSEDED, f"superseded by decision {newer}")
                if sel.apply is not None:
                    await self._accept(sel.apply)
            await self.feed.ack_all(msgs)
            self.wake.set()

    async def _accept(self, d: ScalingDecision) -> None:
        self.last_decision_id = d.decision_id
        if self.current is not None:
            await self._ack(self.current, AckStatus.SUPERSEDED, f"superseded by decision {d.decision_id}")
            self.current = None
        await self._persist()
        unknown = sorted(c for c in d.targets if c not in KNOWN_COMPONENTS)
        missing = sorted(c for c in d.targets if c in KNOWN_COMPONENTS and c not in self._components())
        if unknown or missing:
            await self._ack(d, AckStatus.FAILED, f"no target for components {unknown + missing}")
            return
        self.desired.update(d.targets)
        self.external_change = False
        self.current = d
        self.accepted_at = asyncio.get_running_loop().time()
        self.log.info("decision_accepted", decision_id=d.decision_id, targets=d.targets)
        await self._ack(d, AckStatus.ACCEPTED)

    async def _ack(self, d: ScalingDecision, status: AckStatus, message: str = "") -> None:
        ready = {c: self.observed[c].ready for c in d.targets if c in self.observed}
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

    # ---- control loop -------------------------------------------------------------------------
    async def _control_loop(self) -> None:
        clock = asyncio.get_running_loop().time
        while not self.stopping.is_set():
            self.wake.clear()
            try:
                async with self.mutex:
                    await self._pass()
                await self._publish_status(clock())
            except (nats.errors.Error, OSError) as exc:
                self.log.warning("nats_call_failed", error=str(exc) or type(exc).__name__)
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=self.settings.poll_interval_s)
            except TimeoutError:
                pass

    async def _pass(self) -> None:
        assert self.target is not None
        target = self.target
        try:
            self.observed = await asyncio.to_thread(target.read)
            self.api_ok = True
        except KubeError as exc:
            self.api_ok = False
            self.m_api_errors.labels(exc.kind).inc()
            self.log.warning("read_failed", error=str(exc))
            if exc.kind == ErrorKind.PERMANENT:
                await self._fail_current(f"read: {exc}")
            return
        await self._detect_external()
        d = self.current
        if d is None:
            return
        for comp, n in d.targets.items():
            obs = self.observed.get(comp)
            if obs is not None and obs.replicas == n:
                continue

            def retried(exc: KubeError, delay: float, comp: str = comp) -> None:
                self.m_api_errors.labels(exc.kind).inc()
                self.log.warning("patch_retry", component=comp, error=str(exc), retry_in_s=round(delay, 3))

            try:
                await with_retries(lambda c=comp, r=n: target.scale(c, r), self.settings, retried)  # type: ignore[misc]
            except KubeError as exc:
                self.m_api_errors.labels(exc.kind).inc()
                await self._fail_current(f"patch {comp}={n}: {exc}")
                return
            self.expected[comp] = n
            self.observed[comp] = Observed(n, obs.ready if obs else 0)
            await self._persist()
            self.log.info("scaled", component=comp, replicas=n)
        if all(
            (o := self.observed.get(c)) is not None and o.replicas == n and o.ready == n
            for c, n in d.targets.items()
        ):
            await self._ack(d, AckStatus.COMPLETED)
            self.current = None
            self.completed_decision_id = d.decision_id
            await self._persist()
        elif asyncio.get_running_loop().time() - self.accepted_at > self.settings.ready_timeout_s:
            await self._fail_current(
                f"ready_timeout: not at target after {self.settings.ready_timeout_s:g} s"
            )

    async def _detect_external(self) -> None:
        changed: list[str] = []
        for comp, obs in self.observed.items():
            if obs.replicas is None:
                continue
            known = self.expected.get(comp)
            if known is None:
                self.expected[comp] = obs.replicas
            elif known != obs.replicas:
                changed.append(comp)
                self.log.warning("external_change", component=comp, expected=known, now=obs.replicas)
                self.expected[comp] = obs.replicas
                self.desired[comp] = obs.replicas
        if changed:
            self.external_change = True
            self.m_external.inc()
            await self._persist()
            if self.current is not None and any(c in self.current.targets for c in changed):
                await self._fail_current(f"external_change: replicas of {changed} changed by someone else")

    # ---- status -------------------------------------------------------------------------------
    def replica_status(self) -> ReplicaStatus:
        comps: dict[str, ComponentReplicas] = {}
        for comp, obs in self.observed.items():
            spec = obs.replicas or 0
            comps[comp] = ComponentReplicas(
                desired=self.desired.get(comp, spec), ready=obs.ready, pending=max(0, spec - obs.ready)
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
                self.bus, self.subjects.replicas(), self.settings.poll_interval_s
            )
        await self._status_pub.maybe_publish(self.replica_status(), now_s)

    async def _persist(self) -> None:
        state = K8sState(
            last_decision_id=self.last_decision_id,
            completed_decision_id=self.completed_decision_id,
            expected=dict(self.expected),
        )
        try:
            await kv_put(self.state_kv, self.state_key, state)
        except (nats.errors.Error, OSError) as exc:
            self.log.warning("state_persist_failed", error=str(exc) or type(exc).__name__)


SERVICE = K8sActuator
