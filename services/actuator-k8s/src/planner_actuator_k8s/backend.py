"""The Kubernetes backend: replica counts of a DynamoGraphDeployment's services or of Deployments /
StatefulSets (scale subresource), with a pod-level drain.

Workers are the replica slots of each target: ``{component}-{i}``, as many running slots as the
spec's replica count (the first ``ready`` of them ready), plus the slots being drained for as long
as pods of the workload are still going away (:func:`~planner_actuator_k8s.pods.going_away`:
terminating, or above the count and not yet deleted). The slots are a ledger, not pod names: pods
come and go under the controller (restarts, evictions, rollouts) without being external changes.
Slot indices stay unique among the recorded slots, so a slot started while another drains never
takes its name.

Draining (``drain_pods``): the pods to remove are picked from the workload's pods by their engines'
load (:mod:`.pods`), annotated with ``controller.kubernetes.io/pod-deletion-cost`` below every other
pod (and ``planner/draining``), their engines are marked draining in ``planner_engines`` (routers
stop sending), and only then is the replica count lowered. The count written is the number of
running slots, so a drain sent again (after a restart, or a transient failure) writes nothing new.

Marks that outlive their drain are taken back: once no slot of a component drains any more (its drain
ended, or was given up), a live pod still carrying the drain mark (the controller removed another
pod, or the replica count was never lowered) loses its annotations and its engines their draining
flag, so routers send it requests again and a later scale-down does not take it blindly.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import nats
from prometheus_client import Counter

from planner_actuator_k8s.kube import ErrorKind, KubeError, Observed, PodApi, Target, with_retries
from planner_actuator_k8s.pods import (
    EngineRef,
    engines_by_pod,
    going_away,
    pick_pods,
    pod_loads,
    victim_cost,
)
from planner_actuator_k8s.settings import K8sActuatorSettings
from planner_proto import Component
from planner_runtime.actuation import ActuationError, Phase, Seen, WorkerRecord
from planner_runtime.kubepods import DELETION_COST, DRAIN_MARK, PodView

KNOWN_COMPONENTS = frozenset(c.value for c in Component)


def slot(component: str, i: int) -> str:
    return f"{component}-{i}"


def free_indices(used: set[int], count: int) -> list[int]:
    """The ``count`` smallest indices not in ``used``."""
    out: list[int] = []
    k = 0
    while len(out) < count:
        if k not in used:
            out.append(k)
        k += 1
    return out


def slots(
    component: str, replicas: int, ready: int, away: int, known: Mapping[str, WorkerRecord]
) -> list[Seen]:
    """The slots of one component as they stand: the recorded running slots up to ``replicas``
    (lowest index first) topped up with new ones, the first ``ready`` ready; and up to ``away``
    of the recorded draining slots (their pods are still going away)."""
    mine = [r for r in known.values() if r.component == component]
    running = sorted((r for r in mine if r.phase == Phase.RUNNING), key=lambda r: r.index)[: max(0, replicas)]
    extra = free_indices({r.index for r in mine}, max(0, replicas) - len(running))
    out = [
        Seen(name=r.name, component=component, ready=i < ready, index=r.index, started_at_s=r.started_at_s)
        for i, r in enumerate(running)
    ]
    out += [
        Seen(
            name=slot(component, k),
            component=component,
            ready=len(running) + j < ready,
            index=k,
            started_at_s=k + 1.0,
        )
        for j, k in enumerate(extra)
    ]
    draining = sorted((r for r in mine if r.phase == Phase.DRAINING), key=lambda r: r.index)[: max(0, away)]
    out += [
        Seen(name=r.name, component=component, index=r.index, started_at_s=r.started_at_s) for r in draining
    ]
    return out


class Engines(Protocol):
    """The engine registry as the drain uses it (``planner_engines``, in the service)."""

    async def of(self, component: str) -> list[EngineRef]: ...
    async def mark_draining(self, component: str, worker_ids: Sequence[str]) -> int: ...
    async def unmark_draining(self, component: str, worker_ids: Sequence[str]) -> int: ...


class KubeBackend:
    def __init__(
        self,
        target: Target,
        settings: K8sActuatorSettings,
        api_errors: Counter,
        log: Any,
        pods: PodApi | None = None,
        engines: Engines | None = None,
        loads: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self.target = target
        self.s = settings
        self.m_api_errors = api_errors
        self.log = log
        self.pod_api = pods if settings.drain_pods else None
        self.engines = engines
        self.loads = loads
        self.observed: dict[str, Observed] = {}
        self.away: dict[str, int] = {}
        self.running: dict[str, set[str]] = {}
        """The running slots of each component as last listed: what a drain leaves running."""
        self._pod_error = ""
        self._check_marks: set[str] = set()
        """Components whose pods may carry drain marks no drain is using (checked at the next pass)."""
        self._was_draining: set[str] = set()

    def components(self) -> Sequence[str]:
        return self.target.components()

    def gpus_per_replica(self, component: str) -> int:
        return 1

    def admit(self, targets: Mapping[str, int], running: Sequence[WorkerRecord]) -> str:
        missing = sorted(c for c in targets if c not in self.components())
        return f"no target for components {missing}" if missing else ""

    async def _api(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return await asyncio.to_thread(fn)
        except KubeError as exc:
            self.m_api_errors.labels(exc.kind).inc()
            raise ActuationError(f"{what}: {exc}", transient=exc.kind != ErrorKind.PERMANENT) from exc

    async def _list_pods(self, comp: str) -> list[PodView] | None:
        """The component's pods, or None when they cannot be listed (reported once per cause)."""
        api, selector = self.pod_api, self.target.selector(comp)
        if api is None or not selector:
            return None
        try:
            pods: list[PodView] = await self._api("list pods", lambda: api.list(selector))
        except ActuationError as exc:
            if exc.message != self._pod_error:
                self._pod_error = exc.message
                self.log.warning("pods_unavailable", component=comp, selector=selector, error=exc.message)
            return None
        self._pod_error = ""
        return pods

    async def workers(self, known: Mapping[str, WorkerRecord]) -> list[Seen]:
        self.observed = await self._api("read", self.target.read)
        out: list[Seen] = []
        for comp, obs in self.observed.items():
            n = obs.replicas if obs.replicas is not None else obs.ready
            # pods are listed only while slots of the component drain: nothing else needs them
            draining = any(r.component == comp and r.phase == Phase.DRAINING for r in known.values())
            if draining:
                self._was_draining.add(comp)
            elif comp in self._was_draining:
                self._was_draining.discard(comp)
                self._check_marks.add(comp)  # its drain just ended: did the controller take ours?
            pods = await self._list_pods(comp) if draining or comp in self._check_marks else None
            if not draining and comp in self._check_marks:
                if pods is None:
                    self._check_marks.discard(comp)  # pods not readable: said once by _list_pods
                else:
                    await self._clear_stale_marks(comp, pods)
            self.away[comp] = going_away(pods, n) if pods is not None else 0
            seen = slots(comp, n, obs.ready, self.away[comp], known)
            self.running[comp] = {
                w.name for w in seen if w.name not in known or known[w.name].phase == Phase.RUNNING
            }
            out += seen
        return out

    def _count(self, comp: str) -> Observed:
        return self.observed.get(comp, Observed(0, 0))

    async def _scale(self, comp: str, replicas: int) -> None:
        def retried(exc: KubeError, delay: float) -> None:
            self.m_api_errors.labels(exc.kind).inc()
            self.log.warning("patch_retry", component=comp, error=str(exc), retry_in_s=round(delay, 3))

        def write() -> None:
            self.target.scale(comp, replicas)

        try:
            await with_retries(write, self.s, retried)
        except KubeError as exc:
            self.m_api_errors.labels(exc.kind).inc()
            raise ActuationError(f"patch {comp}={replicas}: {exc}") from exc
        self.observed[comp] = Observed(replicas, self._count(comp).ready)
        self.log.info("scaled", component=comp, replicas=replicas)

    async def start(self, component: str, count: int, known: Sequence[WorkerRecord]) -> list[WorkerRecord]:
        obs = self._count(component)
        have = obs.replicas if obs.replicas is not None else obs.ready
        await self._scale(component, have + count)
        used = {r.index for r in known if r.component == component}
        recs = [
            WorkerRecord(name=slot(component, i), component=component, index=i, started_at_s=time.time())
            for i in free_indices(used, count)
        ]
        self.running.setdefault(component, set()).update(r.name for r in recs)
        return recs

    async def drain(self, workers: Sequence[WorkerRecord]) -> None:
        by_comp: dict[str, set[str]] = {}
        for w in workers:
            by_comp.setdefault(w.component, set()).add(w.name)
        for comp, names in by_comp.items():
            running = self.running.get(comp, set()) - names
            obs = self._count(comp)
            have = obs.replicas if obs.replicas is not None else obs.ready
            target = len(running)
            if have > target:
                try:
                    await self._pick_and_mark(comp, have - target)
                    await self._scale(comp, target)
                except ActuationError:
                    self._check_marks.add(comp)  # if the drain is given up, its marks go back
                    raise
            self.running[comp] = running

    async def _pick_and_mark(self, comp: str, count: int) -> None:
        """Annotate the ``count`` least-loaded pods and mark their engines draining. Best effort: when
        the pods cannot be read or written the replica count is lowered anyway (Kubernetes picks)."""
        pods = await self._list_pods(comp)
        if pods is None:
            return
        engines = await self._engines(comp)
        owned = engines_by_pod(pods, engines)
        load = pod_loads(pods, owned, self.loads())
        victims = pick_pods(pods, count, load, by_ordinal=self.target.by_ordinal(comp))
        names = {p.name for p in victims}
        cost = victim_cost(p for p in pods if p.name not in names and p.live and not p.deleting)
        stamp = f"{time.time():.3f}"
        api = self.pod_api
        assert api is not None
        for p in victims:
            ann = {DELETION_COST: str(cost), DRAIN_MARK: p.annotations.get(DRAIN_MARK, stamp)}
            try:
                await self._api(f"annotate pod {p.name}", functools.partial(api.annotate, p.name, ann))
            except ActuationError as exc:
                self.log.warning("pod_annotate_failed", component=comp, pod=p.name, error=exc.message)
        worker_ids = [w for p in victims for w in owned.get(p.name, [])]
        marked = 0
        if self.engines is not None and worker_ids:
            try:
                marked = await self.engines.mark_draining(comp, worker_ids)
            except (nats.errors.Error, OSError, TimeoutError) as exc:  # the scale-down goes on
                self.log.warning("engines_mark_failed", component=comp, error=repr(exc))
        self.log.info(
            "drain_pods_picked",
            component=comp,
            pods=[p.name for p in victims],
            load={p.name: load.get(p.name, 0) for p in victims},
            cost=cost,
            engines_marked=marked,
        )

    async def _clear_stale_marks(self, comp: str, pods: Sequence[PodView]) -> None:
        """Take the drain marks back from the live pods that still carry one while nothing drains."""
        stale = [p for p in pods if p.marked and p.live and not p.deleting]
        api = self.pod_api
        cleared: list[str] = []
        for p in stale:
            assert api is not None
            try:
                await self._api(
                    f"annotate pod {p.name}",
                    functools.partial(api.annotate, p.name, {DELETION_COST: None, DRAIN_MARK: None}),
                )
            except ActuationError as exc:
                self.log.warning("pod_annotate_failed", component=comp, pod=p.name, error=exc.message)
                return  # tried again at the next pass
            cleared.append(p.name)
        self._check_marks.discard(comp)
        if not cleared:
            return
        unmarked = 0
        if self.engines is not None:
            owned = engines_by_pod(stale, await self._engines(comp))
            ids = [w for name in cleared for w in owned.get(name, [])]
            try:
                unmarked = await self.engines.unmark_draining(comp, ids) if ids else 0
            except (nats.errors.Error, OSError, TimeoutError) as exc:
                self.log.warning("engines_mark_failed", component=comp, error=repr(exc))
        self.log.warning("drain_marks_cleared", component=comp, pods=cleared, engines_unmarked=unmarked)

    async def _engines(self, comp: str) -> list[EngineRef]:
        if self.engines is None:
            return []
        try:
            return await self.engines.of(comp)
        except (nats.errors.Error, OSError, TimeoutError) as exc:  # pods matched by name only
            self.log.warning("engines_unavailable", component=comp, error=repr(exc))
            return []

    async def remove(self, worker: WorkerRecord) -> bool:
        return False  # the slot leaves the listing once the workload's pods have gone
