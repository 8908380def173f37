"""The backend interface: what an actuator must provide, and the choice of which workers to drain.

A backend knows how to list its workers, start some, drain some and remove a drained one. Everything
else (the decision stream, take-over, acks, desired counts, external changes, drain bookkeeping,
status) is :class:`~planner_runtime.actuation.follower.DecisionFollower`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from planner_runtime.actuation.records import Seen, WorkerRecord


class Backend(Protocol):
    """Implement it structurally, or subclass it to inherit the defaults of ``gpus_per_replica`` and
    ``admit`` (a backend without GPUs or a budget)."""

    def components(self) -> Sequence[str]:
        """The components this backend manages; other targets of a decision are left alone."""
        ...

    def gpus_per_replica(self, component: str) -> int:
        """For ReplicaStatus (how many GPUs one replica of ``component`` holds). Default: none."""
        return 0

    def admit(self, targets: Mapping[str, int], running: Sequence[WorkerRecord]) -> str:
        """Why a decision with ``targets`` cannot be applied ("" when it can). ``running``: the workers
        not draining. Called once per new decision, before anything is changed: a rejected decision
        is acked ``failed`` (a backend may also reset per-decision retry budgets here). Default: no
        budget, any targets are fine."""
        return ""

    async def workers(self, known: Mapping[str, WorkerRecord]) -> list[Seen]:
        """Every worker of the managed components that exists now, draining ones included.
        ``known``: the recorded workers by name (a backend must not restart a draining one)."""
        ...

    async def start(self, component: str, count: int, known: Sequence[WorkerRecord]) -> list[WorkerRecord]:
        """Start ``count`` workers of ``component``; the records of those started. ``known``: every
        recorded worker (a backend placing on GPUs avoids theirs). Raise ActuationError (or
        NoCapacity) when none could be started."""
        ...

    async def drain(self, workers: Sequence[WorkerRecord]) -> None:
        """Ask these workers to finish their requests and stop (SIGTERM, lower the replica count)."""
        ...

    async def remove(self, worker: WorkerRecord) -> bool:
        """Called each pass for a draining worker still listed: True once it is gone (removed);
        False while it still drains. The backend kills it past its own drain timeout."""
        ...


def pick_victims(
    running: Sequence[WorkerRecord], count: int, ready: set[str], load: Mapping[str, int]
) -> list[WorkerRecord]:
    """The ``count`` workers cheapest to remove: not yet ready first (nothing to drain), then the
    fewest in-flight requests (unknown load counts as 0), then the newest (start time, index)."""
    order = sorted(running, key=lambda w: (w.name in ready, load.get(w.name, 0), -w.started_at_s, -w.index))
    return order[: max(0, count)]
