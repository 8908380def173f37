"""Watcher naming, and the records the actuator persists (the actuation core's, re-exported under
the names the chaos checks read)."""

from __future__ import annotations

import re

from planner_proto import Component
from planner_runtime.actuation.records import FollowerState, Phase, WorkerRecord

ActuatorState = FollowerState
"""What the circus actuator persists in KV ``planner_state`` (key ``{ns}.actuator-circus.{id}``)."""

__all__ = ["ActuatorState", "Phase", "WorkerRecord", "name_pattern", "parse_watcher_name", "watcher_name"]


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
