"""The actuation core: the decision protocol every actuator follows, over a small backend.

Write an actuator: implement :class:`Backend` (components, admit, workers, start, drain, remove),
subclass :class:`ActuatorService` with settings derived from :class:`ActuatorSettings`, and return the
backend from ``make_backend``. See ``examples/process_actuator.py`` and ``docs/concepts/actuators.md``.
"""

from planner_runtime.actuation.backend import Backend, pick_victims
from planner_runtime.actuation.follower import DecisionFollower
from planner_runtime.actuation.records import (
    ActuationError,
    FollowerState,
    NoCapacity,
    Phase,
    Seen,
    WorkerRecord,
)
from planner_runtime.actuation.service import ActuatorService
from planner_runtime.actuation.settings import ActuatorSettings

__all__ = [
    "ActuationError",
    "ActuatorService",
    "ActuatorSettings",
    "Backend",
    "DecisionFollower",
    "FollowerState",
    "NoCapacity",
    "Phase",
    "Seen",
    "WorkerRecord",
    "pick_victims",
]
