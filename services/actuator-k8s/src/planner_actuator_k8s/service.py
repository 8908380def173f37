"""actuator-k8s: applies ScalingDecisions by patching replica counts in one Kubernetes namespace.

The decision protocol is the actuation core's (:mod:`planner_runtime.actuation`); this service adds
the Kubernetes backend (:mod:`.backend`). Instances with the same ``actuator_id`` are one active
actuator plus standbys (KV lease ``{ns}.actuator-k8s.{actuator_id}``); only the active one writes.
"""

from __future__ import annotations

import asyncio

from prometheus_client import Counter

from planner_actuator_k8s.backend import KubeBackend
from planner_actuator_k8s.kube import api_client, make_target
from planner_actuator_k8s.settings import K8sActuatorSettings
from planner_runtime.actuation import ActuatorService, Backend


class K8sActuator(ActuatorService[K8sActuatorSettings]):
    name = "actuator-k8s"
    settings_type = K8sActuatorSettings
    lease = "actuator-k8s"

    def __init__(self, settings: K8sActuatorSettings) -> None:
        super().__init__(settings)
        self.m_api_errors = Counter(
            "planner_actuator_api_errors", "Failed API calls", ["kind"], registry=self.registry
        )

    def status_every_s(self) -> float:
        return self.settings.poll_interval_s

    def poll_every_s(self) -> float:
        return self.settings.poll_interval_s

    async def make_backend(self) -> Backend:
        api = await asyncio.to_thread(api_client, self.settings)
        return KubeBackend(make_target(api, self.settings), self.settings, self.m_api_errors, self.log)


SERVICE = K8sActuator
