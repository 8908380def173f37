"""The service shell of an actuator: a lease (one active instance plus standbys), a backend, and
the :class:`DecisionFollower` doing the protocol. A concrete actuator names its settings and builds
its backend in :meth:`ActuatorService.make_backend`."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from planner_proto.subjects import STATE_BUCKET
from planner_runtime.actuation.backend import Backend
from planner_runtime.actuation.follower import DecisionFollower, FollowerMetrics
from planner_runtime.actuation.settings import ActuatorSettings
from planner_runtime.service import Service

A = TypeVar("A", bound=ActuatorSettings)


class ActuatorService(Service[A]):
    name: ClassVar[str] = "actuator"
    lease: ClassVar[str | None] = "actuator"

    def __init__(self, settings: A) -> None:
        super().__init__(settings)
        self.follower_metrics = FollowerMetrics(self.registry)

    async def make_backend(self) -> Backend:
        raise NotImplementedError

    def status_every_s(self) -> float:
        """ReplicaStatus is published on every change and at least this often."""
        return 2.0

    def poll_every_s(self) -> float:
        """How often the control loop looks at the backend when nothing wakes it."""
        return min(0.5, self.status_every_s())

    def lease_key(self) -> str:
        return self.subjects.state_key(self.name, self.settings.actuator_id)

    async def setup(self) -> None:
        self.backend = await self.make_backend()
        self.follower = DecisionFollower(
            backend=self.backend,
            subjects=self.subjects,
            actuator=self.name,
            actuator_id=self.settings.actuator_id,
            ready_timeout_s=self.settings.ready_timeout_s,
            status_every_s=self.status_every_s(),
            poll_s=self.poll_every_s(),
            metrics=self.follower_metrics,
            log=self.log,
        )
        self.state_kv = await self.bus.kv(STATE_BUCKET)

    async def activate(self) -> None:
        if not any(t.get_name() == "status" for t in self._active_tasks):
            # first: it keeps the status going while the activation waits on JetStream
            self.spawn(self.follower.status_loop(self.stopping), "status", active=True)
        await self.follower.activate(self.bus, self.state_kv)
        self.feed = self.follower.feed
        self.spawn(self.follower.intake_loop(self.stopping), "decisions", active=True)
        self.spawn(self.follower.control_loop(self.stopping), "control", active=True)

    async def deactivate(self) -> None:
        await self.follower.deactivate()

    async def cleanup(self) -> None:
        # Workers are left running on purpose: a restarted actuator adopts them.
        if hasattr(self, "follower"):
            await self.follower.close()

    def health_detail(self) -> dict[str, object]:
        if not hasattr(self, "follower"):
            return {}
        return {
            "backend_ok": self.follower.backend_ok,
            "workers": len(self.follower.workers),
            "last_decision_id": self.follower.last_decision_id,
        }
