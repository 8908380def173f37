"""What an actuator knows about its workers, what it persists across restarts and hand-overs, and the
errors a backend raises."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Annotated

import msgspec
from msgspec import Meta

NonNeg = Annotated[int, Meta(ge=0)]


class Phase(enum.StrEnum):
    RUNNING = "running"
    """Started (or adopted) and not asked to stop: counts toward its component's replicas."""
    DRAINING = "draining"
    """Asked to stop gracefully: finishes its requests, then the backend removes what is left."""


class WorkerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One worker as the actuator recorded it (KV ``planner_state``, key ``{ns}.{actuator}.{id}``)."""

    name: str
    component: str
    index: NonNeg = 0
    gpus: list[int] = []
    """The GPUs the worker holds (backends that place workers on GPUs; empty otherwise)."""
    phase: Phase = Phase.RUNNING
    started_at_s: float = 0.0
    drain_started_at_s: float = 0.0


class FollowerState(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a new holder needs to carry on: workers, desired counts, and decision ids."""

    workers: dict[str, WorkerRecord] = {}
    desired: dict[str, NonNeg] = {}
    last_decision_id: NonNeg = 0
    """The newest decision taken (accepted or rejected): older ones are ignored."""
    completed_decision_id: NonNeg = 0
    """The newest decision that got its final ack (completed, failed or superseded): a new holder
    never answers it again."""


@dataclass(frozen=True)
class Seen:
    """One worker as the backend sees it right now."""

    name: str
    component: str
    ready: bool = False
    """Serving requests (registered, healthy, not draining)."""
    index: int = 0
    gpus: list[int] = field(default_factory=list)
    load: int = 0
    """In-flight requests when known (0 when not): the least-loaded is drained first."""
    started_at_s: float = 0.0
    """When known (0: the time it is first seen); among equally loaded workers the newest is drained
    first."""
    problem: str = ""
    """Set (once) when the worker is broken beyond the backend's own retries: fails the current
    decision with this message."""


class ActuationError(Exception):
    """A backend call failed. ``transient``: retried on the next pass, nothing else happens;
    otherwise the current decision is acked ``failed`` with ``message`` and the component's desired
    count settles on what there is (the actuator stops fighting a target it cannot reach)."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient


class NoCapacity(ActuationError):
    """Nothing to start a worker on right now (GPUs, quota). While workers drain the actuator waits
    for them to free their share; with none draining it is a failure."""
