"""The Kubernetes backend: replica counts of a DynamoGraphDeployment's services or of Deployments /
StatefulSets (scale subresource).

Kubernetes picks and drains the pods itself, so the workers here are the replica slots of each
target: ``{component}-{i}`` for i below the spec's replica count, the first ``ready`` of them
ready. Starting ``n`` raises the count by ``n`` and draining ``n`` lowers it by ``n``, one write
each; slot ``i`` is ordered by its index, so the core always drains the highest slots, which are the
ones that disappear.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import Counter

from planner_actuator_k8s.kube import ErrorKind, KubeError, Observed, Target, with_retries
from planner_actuator_k8s.settings import K8sActuatorSettings
from planner_proto import Component
from planner_runtime.actuation import ActuationError, Seen, WorkerRecord

KNOWN_COMPONENTS = frozenset(c.value for c in Component)


def slot(component: str, i: int) -> str:
    return f"{component}-{i}"


class KubeBackend:
    def __init__(self, target: Target, settings: K8sActuatorSettings, api_errors: Counter, log: Any) -> None:
        self.target = target
        self.s = settings
        self.m_api_errors = api_errors
        self.log = log
        self.observed: dict[str, Observed] = {}

    def components(self) -> Sequence[str]:
        return self.target.components()

    def gpus_per_replica(self, component: str) -> int:
        return 1

    def admit(self, targets: Mapping[str, int], running: Sequence[WorkerRecord]) -> str:
        missing = sorted(c for c in targets if c not in self.components())
        return f"no target for components {missing}" if missing else ""

    async def workers(self, known: Mapping[str, WorkerRecord]) -> list[Seen]:
        try:
            self.observed = await asyncio.to_thread(self.target.read)
        except KubeError as exc:
            self.m_api_errors.labels(exc.kind).inc()
            raise ActuationError(f"read: {exc}", transient=exc.kind != ErrorKind.PERMANENT) from exc
        out: list[Seen] = []
        for comp, obs in self.observed.items():
            n = obs.replicas if obs.replicas is not None else obs.ready
            out += [
                Seen(name=slot(comp, i), component=comp, ready=i < obs.ready, index=i, started_at_s=i + 1.0)
                for i in range(n)
            ]
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
        return [
            WorkerRecord(name=slot(component, i), component=component, index=i, started_at_s=i + 1.0)
            for i in range(have, have + count)
        ]

    async def drain(self, workers: Sequence[WorkerRecord]) -> None:
        by_comp: dict[str, int] = {}
        for w in workers:
            by_comp[w.component] = by_comp.get(w.component, 0) + 1
        for comp, n in by_comp.items():
            obs = self._count(comp)
            have = obs.replicas if obs.replicas is not None else obs.ready
            await self._scale(comp, max(0, have - n))

    async def remove(self, worker: WorkerRecord) -> bool:
        return False  # the slot disappears from the next read once the replica count is lowered
