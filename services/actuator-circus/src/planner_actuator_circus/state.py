"""What the actuator remembers across restarts (KV ``planner_state``), and watcher naming."""

from __future__ import annotations

import enum
import re
from typing import Annotated

import msgspec
from msgspec import Meta

from planner_proto import Component


class Phase(enum.StrEnum):
    STARTING = "starting"
    """Recorded, the circus ``add`` not yet confirmed (a crash here leaves no watcher, or one to adopt)."""
    RUNNING = "running"
    DRAINING = "draining"
    """SIGTERM sent (or about to be): the worker finishes its requests, then the watcher is removed."""


class WorkerRecord(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    component: Component
    index: Annotated[int, Meta(ge=0)]
    gpus: list[int] = []
    phase: Phase = Phase.STARTING
    started_at_s: float = 0.0
    drain_started_at_s: float = 0.0


class ActuatorState(msgspec.Struct, frozen=True, kw_only=True):
    workers: dict[str, WorkerRecord] = {}
    desired: dict[str, Annotated[int, Meta(ge=0)]] = {}
    last_decision_id: Annotated[int, Meta(ge=0)] = 0
    completed_decision_id: Annotated[int, Meta(ge=0)] = 0
    """The last decision acked ``completed``: a new holder does not complete it again."""


def watcher_name(namespace: str, component: str, index: int) -> str:
    """``{namespace}_{component}_{k}``, lower-cased because circusd lower-cases watcher names."""
    return f"{namespace}_{component}_{index}".lower()


def name_pattern(namespace: str) -> re.Pattern[str]:
    comps = "|".join(c.value for c in Component)
    return re.compile(rf"^{re.escape(namespace.lower())}_({comps})_([0-9]{{1,6}})$")


def parse_watcher_name(pattern: re.Pattern[str], name: str) -> tuple[Component, int] | None:
    m = pattern.match(name)
    if m is None:
        return None
    return Component(m.group(1)), int(m.group(2))
