"""actuator-circus: applies ScalingDecisions to a local circusd, one watcher per worker.

The decision protocol (feed, take-over, acks, desired counts, external changes, drain bookkeeping,
status) is the actuation core's (:mod:`planner_runtime.actuation`); this service adds the circus
backend (:mod:`.backend`) and the worker loads it drains by (ComponentSnapshots). Instances with the
same ``actuator_id`` are one active actuator plus standbys (KV lease
``{ns}.actuator-circus.{actuator_id}``); only the active one talks to circusd.
"""

from __future__ import annotations

from prometheus_client import Counter

from planner_actuator_circus.backend import CircusBackend
from planner_actuator_circus.circusctl import CircusControl
from planner_actuator_circus.settings import CircusActuatorSettings
from planner_proto import ComponentSnapshot
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.actuation import ActuatorService, Backend
from planner_runtime.actuation.loads import RecentLoads


class CircusActuator(ActuatorService[CircusActuatorSettings]):
    name = "actuator-circus"
    settings_type = CircusActuatorSettings
    lease = "actuator-circus"

    def __init__(self, settings: CircusActuatorSettings) -> None:
        super().__init__(settings)
        self.circus = CircusControl(settings.circus_endpoint, settings.circus_timeout_s)
        self.loads = RecentLoads(settings.load_max_age_s)
        self.m_restarts = Counter(
            "planner_actuator_worker_restarts", "Workers restarted after exiting", registry=self.registry
        )

    def status_every_s(self) -> float:
        return self.settings.status_interval_s

    async def make_backend(self) -> Backend:
        engines_kv = await self.bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        await self.bus.subscribe(self.subjects.state("*"), ComponentSnapshot, self.loads.on_snapshot)
        return CircusBackend(
            self.settings,
            self.circus,
            engines_kv,
            self.subjects,
            self.loads.current,
            self.m_restarts,
            self.log,
        )

    async def cleanup(self) -> None:
        await super().cleanup()
        self.circus.close()


SERVICE = CircusActuator
