"""Actuator status: published on change, otherwise at most once per refresh period."""

from __future__ import annotations

from typing import Any

from planner_proto import ComponentReplicas, ReplicaStatus
from planner_runtime.decisions import StatusPublisher


class FakeBus:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def publish(self, subject: str, msg: Any) -> None:
        self.sent.append(msg)


def _status(ready: int, at_s: float = 0.0) -> ReplicaStatus:
    return ReplicaStatus(
        namespace="t",
        actuator_id="a",
        at_s=at_s,
        components={"decode": ComponentReplicas(desired=2, ready=ready)},
    )


async def test_publishes_on_change_and_every_period() -> None:
    bus = FakeBus()
    pub = StatusPublisher(bus, "planner.t.replicas", every_s=2.0)  # type: ignore[arg-type]
    assert await pub.maybe_publish(_status(1), 0.0)  # first one always goes out
    assert not await pub.maybe_publish(_status(1, at_s=1.0), 1.0)  # same content, 1 s < 2 s
    assert await pub.maybe_publish(_status(2), 1.5)  # changed: at once
    assert not await pub.maybe_publish(_status(2), 3.0)  # 1.5 s since the last one
    assert await pub.maybe_publish(_status(2), 3.5)  # 2 s since the last one: refresh
    assert [s.components["decode"].ready for s in bus.sent] == [1, 2, 2]
