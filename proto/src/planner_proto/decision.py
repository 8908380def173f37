"""The decision protocol: what the decider publishes and what actuators (and outside systems) answer."""

from __future__ import annotations

import enum
from typing import Annotated, Any

import msgspec
from msgspec import Meta

NonNegInt = Annotated[int, Meta(ge=0)]


class Reason(enum.StrEnum):
    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    NO_CHANGE = "no_change"
    SCALING_IN_PROGRESS = "scaling_in_progress"
    INSUFFICIENT_DATA = "insufficient_data"
    BUDGET_CAPPED = "budget_capped"
    MIN_CAPPED = "min_capped"
    MAX_CAPPED = "max_capped"
    ZERO_TRAFFIC = "zero_traffic"
    SCALE_TO_ZERO = "scale_to_zero"
    WAKE_FROM_ZERO = "wake_from_zero"
    STABILIZED = "stabilized"
    RATE_LIMITED = "rate_limited"
    ACK_TIMEOUT = "ack_timeout"
    ADVISORY = "advisory"


class ScalingDecision(msgspec.Struct, frozen=True, kw_only=True):
    """Absolute replica targets. ``decision_id`` is strictly increasing, across restarts too."""

    decision_id: Annotated[int, Meta(ge=1)]
    issued_at_s: float
    namespace: str
    targets: dict[str, NonNegInt]
    previous: dict[str, NonNegInt] = {}
    reasons: dict[str, Reason] = {}
    advisory: bool = False
    diagnostics: dict[str, Any] = {}
    policy: str = ""


class AckStatus(enum.StrEnum):
    ACCEPTED = "accepted"
    COMPLETED = "completed"
    """The ready count reached the target."""
    FAILED = "failed"
    SUPERSEDED = "superseded"


class ScalingAck(msgspec.Struct, frozen=True, kw_only=True):
    decision_id: Annotated[int, Meta(ge=1)]
    actuator_id: str
    status: AckStatus
    ready: dict[str, NonNegInt] = {}
    message: str = ""
    at_s: float = 0.0


class ComponentReplicas(msgspec.Struct, frozen=True, kw_only=True):
    desired: NonNegInt = 0
    ready: NonNegInt = 0
    pending: NonNegInt = 0
    draining: NonNegInt = 0
    gpus_per_replica: NonNegInt = 1


class ReplicaStatus(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    actuator_id: str
    at_s: float
    components: dict[str, ComponentReplicas]
    last_decision_id: NonNegInt = 0
    external_change: bool = False
    """True when someone other than the planner changed the replica counts."""
