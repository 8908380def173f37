"""actuator-k8s: applies ScalingDecisions by patching replica counts in one Kubernetes namespace.

The decision protocol is the actuation core's (:mod:`planner_runtime.actuation`); this service adds
the Kubernetes backend (:mod:`.backend`) and what its drain picks pods by: the engine registry
(``planner_engines``, to tie engines to pods and mark them draining) and the per-worker load of the
newest ComponentSnapshots. Instances with the same ``actuator_id`` are one active
actuator plus standbys (KV lease ``{ns}.actuator-k8s.{actuator_id}``); only the active one writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec
from nats.js.errors import NoKeysError
from nats.js.kv import KeyValue
from prometheus_client import Counter

from planner_actuator_k8s.backend import KubeBackend
from planner_actuator_k8s.kube import PodApi, api_client, make_target
from planner_actuator_k8s.pods import EngineRef
from planner_actuator_k8s.settings import K8sActuatorSettings
from planner_proto import ComponentSnapshot, DecodeError, EngineInfo, Subjects
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.actuation import ActuatorService, Backend
from planner_runtime.actuation.loads import RecentLoads
from planner_runtime.bus import kv_get, kv_put


class EngineRegistry:
    """``planner_engines`` as the drain uses it: the engines of a component, and marking some
    draining (``EngineInfo.draining``) so routers and the loadgen stop sending them requests."""

    def __init__(self, kv: KeyValue, subjects: Subjects) -> None:
        self.kv = kv
        self.subjects = subjects

    async def _infos(self, component: str) -> list[tuple[str, EngineInfo]]:
        prefix = self.subjects.engine_key(component, "")
        try:
            keys = await self.kv.keys()  # nats-py's ``filters`` are substrings, not subjects
        except NoKeysError:
            return []
        out: list[tuple[str, EngineInfo]] = []
        for key in (k for k in keys if k.startswith(prefix)):
            try:
                info = await kv_get(self.kv, key, EngineInfo)
            except DecodeError:
                continue
            if info is not None:
                out.append((key, info))
        return out

    async def of(self, component: str) -> list[EngineRef]:
        return [
            EngineRef(worker_id=i.worker_id, metrics_url=i.metrics_url, zmq_endpoint=i.zmq_endpoint)
            for _, i in await self._infos(component)
        ]

    async def mark_draining(self, component: str, worker_ids: Sequence[str], draining: bool = True) -> int:
        want = set(worker_ids)
        n = 0
        for key, info in await self._infos(component):
            if info.worker_id in want and info.draining != draining:
                await kv_put(self.kv, key, msgspec.structs.replace(info, draining=draining))
                n += 1
        return n

    async def unmark_draining(self, component: str, worker_ids: Sequence[str]) -> int:
        return await self.mark_draining(component, worker_ids, draining=False)


class K8sActuator(ActuatorService[K8sActuatorSettings]):
    name = "actuator-k8s"
    settings_type = K8sActuatorSettings
    lease = "actuator-k8s"

    def __init__(self, settings: K8sActuatorSettings) -> None:
        super().__init__(settings)
        self.m_api_errors = Counter(
            "planner_actuator_api_errors", "Failed API calls", ["kind"], registry=self.registry
        )
        self.loads = RecentLoads(settings.load_max_age_s)

    def status_every_s(self) -> float:
        return self.settings.poll_interval_s

    def poll_every_s(self) -> float:
        return self.settings.poll_interval_s

    async def make_backend(self) -> Backend:
        s = self.settings
        api = await asyncio.to_thread(api_client, s)
        engines: EngineRegistry | None = None
        if s.drain_pods:
            engines = EngineRegistry(await self.bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S), self.subjects)
            await self.bus.subscribe(self.subjects.state("*"), ComponentSnapshot, self.loads.on_snapshot)
        return KubeBackend(
            make_target(api, s),
            s,
            self.m_api_errors,
            self.log,
            pods=PodApi(api, s),
            engines=engines,
            loads=self.loads.current,
        )


SERVICE = K8sActuator
